//! Execution sources: where the simulated PT logic gets its retired instructions.
//!
//! An [`ExecutionSource`] yields [`ExecItem`]s in program order: one
//! [`Retired`] per retired instruction of the traced thread, with
//! [`Event`]s between them for what the instruction stream alone cannot show
//! (kernel entries and exits, signals, exec, mapping changes, the end).
//!
//! The real sources see user mode only: the kernel runs unseen between a
//! kernel entry and the return to user mode. A source whose
//! [`ExecutionSource::shows_kernel`] is true (the scripted one, and logs of
//! it) also yields the kernel's instructions ([`Retired::kernel`], CPL 0), the
//! CR3 writes there ([`Event::MovCr3`]) and the interrupts and exceptions
//! that enter it ([`Event::Interrupt`]).
//!
//! Four sources exist:
//! - [`ptrace::Tracer`] (Linux x86-64): single-steps a real process.
//! - [`log::LogReader`]: replays a compact execution log written by
//!   [`log::LogWriter`] (record once, replay fast and often).
//! - [`script::Script`]: a small program plus its branch outcomes, for unit tests
//!   (it can show kernel code too).
//! - [`valgrind::ValgrindSource`] (Linux x86-64): a program run under
//!   valgrind, some forty times faster than single-stepping on long programs.
//!
//! # Ordering contract
//! - A [`Retired`]'s `next_ip` is where the instruction sent user-mode control:
//!   the branch target, the fall-through, or for [`InsnClass::KernelEntry`] the
//!   IP in the registers when the kernel was done with the call (normally the
//!   fall-through; the new entry point after `execve`; the restored context
//!   after `rt_sigreturn`). A signal delivered on the way back to user mode
//!   then diverts control as its [`Event::Signal`] says; a call the kernel
//!   restarts shows as `from_ip` equal to the call itself.
//! - The next [`Retired`]'s `ip` equals the previous `next_ip`, unless an
//!   [`Event::Signal`] with a handler comes between them; then it equals that
//!   handler, and the signal's `from_ip` is where the interrupted context resumes.
//! - A system call is a [`Retired`] of class [`InsnClass::KernelEntry`]
//!   (SYSCALL, SYSENTER, INT 0x80) followed by [`Event::SyscallEnter`], any
//!   [`Event::Exec`] it caused, [`Event::SyscallExit`] (absent when the process
//!   ended in the call) and [`Event::Mappings`] if the memory map changed.
//!   Other kernel entries (INT3, INT n) are followed by the [`Event::Signal`]
//!   they raise, if any.
//!
//! # With the kernel shown
//! - A kernel entry (SYSCALL, SYSENTER, INT n) goes to the kernel code: its
//!   `next_ip` is the kernel's entry point and the instructions that follow
//!   have `kernel` set until a far transfer (SYSRET, SYSEXIT, IRET, of class
//!   [`InsnClass::FarBranch`]) returns to user mode. No system call events
//!   accompany it.
//! - An interrupt or exception is an [`Event::Interrupt`] before the
//!   instruction at its `from_ip` (which does not retire then); the next
//!   instruction is its `handler`.
//! - A MOV to CR3 is followed by [`Event::MovCr3`] with the value loaded.

pub mod blockstep;
pub mod insn;
pub mod log;
pub mod maps;
pub mod memory;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod ptrace;
pub mod script;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod valgrind;

pub use insn::{decode_at, DecodedInsn, InsnClass};
pub use maps::{Mapping, Perms};
pub use memory::{CodeMemory, PAGE_SIZE};
pub use pt_encoder::packet::ExecMode;

/// One retired instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Retired {
    /// Linear address of the instruction.
    pub ip: u64,
    /// Where user-mode control went next (see the module's ordering contract).
    pub next_ip: u64,
    /// Instruction length in bytes (1..=15).
    pub len: u8,
    /// Control-flow class, decoded from the instruction bytes.
    pub class: InsnClass,
    /// Execution mode the instruction ran in (from CS).
    pub mode: ExecMode,
    /// Whether it ran at CPL 0 (supervisor mode); false for user mode.
    pub kernel: bool,
}

impl Retired {
    /// The address of the next sequential instruction.
    pub fn fall_through(&self) -> u64 {
        self.ip.wrapping_add(u64::from(self.len))
    }

    /// Whether control left the sequential path (a taken branch, or a kernel
    /// entry that returned elsewhere).
    pub fn is_taken(&self) -> bool {
        self.next_ip != self.fall_through()
    }
}

/// Why a recording ended before the program did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The configured instruction limit was reached.
    StepLimit,
    /// The recorder was asked to stop (e.g. SIGINT to the tracer).
    Interrupted,
}

/// How the traced process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitKind {
    /// `exit`/`exit_group` with this status.
    Exited(i32),
    /// Killed by this signal.
    Killed(i32),
}

/// Something besides a retired instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// A program image was loaded: at the start of the recording, and on
    /// every successful `execve`. The pid stands in for CR3 (not visible to
    /// user space); it stays the same across `execve`.
    Exec {
        /// Process id of the traced thread.
        pid: u32,
        /// Path of the new program as the recorder saw it.
        path: String,
    },
    /// The full memory map (from `/proc/pid/maps`): at the start and after any
    /// kernel entry that changed it.
    Mappings(Vec<Mapping>),
    /// The preceding [`InsnClass::KernelEntry`] instruction entered the kernel
    /// as this system call.
    SyscallEnter {
        /// System call number (of the ABI the instruction used).
        nr: u64,
        /// The six argument registers of that ABI.
        args: [u64; 6],
    },
    /// The system call returned to user mode.
    SyscallExit {
        /// System call number.
        nr: u64,
        /// Return value (negative errno on failure).
        ret: i64,
    },
    /// A signal was delivered to the thread.
    Signal {
        /// Signal number.
        signo: i32,
        /// Where the interrupted context resumes (saved in the signal frame).
        from_ip: u64,
        /// The handler user mode entered, or `None` when the signal changed no
        /// user-mode control flow (ignored, or fatal: an [`Event::Exit`] follows).
        handler: Option<u64>,
    },
    /// The preceding instruction, a MOV to CR3 at CPL 0, loaded CR3 with
    /// this value (the address space of another process, or the same one).
    MovCr3 {
        /// The new CR3.
        cr3: u64,
    },
    /// An interrupt or exception was taken before the instruction at
    /// `from_ip` (which did not retire); the kernel's handler runs next. For
    /// a fault `from_ip` is the faulting instruction, which the handler's
    /// return executes again.
    Interrupt {
        /// Vector (informative).
        vector: u8,
        /// Where the interrupted context resumes.
        from_ip: u64,
        /// Whether the interrupted context is kernel code (CPL 0).
        from_kernel: bool,
        /// The first instruction of the handler (CPL 0).
        handler: u64,
    },
    /// The process ended.
    Exit(ExitKind),
    /// The recording ended early; the process was killed by the recorder.
    Stopped(StopReason),
}

/// One item of an execution, in program order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExecItem {
    /// A retired instruction.
    Insn(Retired),
    /// An event between instructions.
    Event(Event),
}

/// Errors from execution sources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The command to trace was not found on `PATH` or is not executable.
    #[error("command not found or not executable: {0}")]
    CommandNotFound(String),
    /// `execve` of the command failed in the child.
    #[error("cannot execute {command}: {source}")]
    ExecFailed {
        /// The command.
        command: String,
        /// The child's errno.
        source: std::io::Error,
    },
    /// A system call of the tracer failed.
    #[error("{what} failed: {source}")]
    Os {
        /// Which operation.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading or writing a log file failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Code bytes needed to decode an instruction are not known.
    #[error("no code bytes at {ip:#x}")]
    NoCode {
        /// The instruction address.
        ip: u64,
    },
    /// The bytes at an address do not decode to a valid instruction.
    #[error("invalid instruction at {ip:#x}")]
    InvalidInsn {
        /// The instruction address.
        ip: u64,
    },
    /// A log file is malformed (not merely cut short).
    #[error("corrupt execution log at byte {offset}: {what}")]
    CorruptLog {
        /// Byte offset of the offending record.
        offset: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// The log was written by an unknown format version.
    #[error("unsupported execution log version {0}")]
    UnsupportedVersion(u32),
    /// The source cannot record this program.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// A script cannot be executed as written.
    #[error("script error at directive {index} (ip {ip:#x}): {what}")]
    Script {
        /// Index of the directive being consumed (or the count, when exhausted).
        index: usize,
        /// The instruction address.
        ip: u64,
        /// What was wrong.
        what: &'static str,
    },
}

/// A stream of retired instructions and events of one thread.
pub trait ExecutionSource {
    /// The next item in program order, `Ok(None)` at the end.
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError>;

    /// The code bytes known so far: every page holding an instruction yielded
    /// up to now, as it was when that instruction executed (newer contents
    /// replace older ones). A decoder of the produced trace reads code here.
    fn memory(&self) -> &CodeMemory;

    /// Whether kernel-mode instructions appear (see the module docs); false
    /// for sources that see user mode only.
    fn shows_kernel(&self) -> bool {
        false
    }
}

impl<S: ExecutionSource + ?Sized> ExecutionSource for &mut S {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        (**self).next_item()
    }
    fn memory(&self) -> &CodeMemory {
        (**self).memory()
    }
    fn shows_kernel(&self) -> bool {
        (**self).shows_kernel()
    }
}

impl<S: ExecutionSource + ?Sized> ExecutionSource for Box<S> {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        (**self).next_item()
    }
    fn memory(&self) -> &CodeMemory {
        (**self).memory()
    }
    fn shows_kernel(&self) -> bool {
        (**self).shows_kernel()
    }
}

/// Drains a source into a vector (for tests and small executions).
pub fn collect(source: &mut dyn ExecutionSource) -> Result<Vec<ExecItem>, ExecError> {
    let mut out = Vec::new();
    while let Some(item) = source.next_item()? {
        out.push(item);
    }
    Ok(out)
}

/// Checks the ordering contract on a sequence of items: every retired
/// instruction starts where the previous one said control went, or at the
/// handler of a signal or interrupt in between. Returns the index of the
/// first violation.
pub fn check_continuity(items: &[ExecItem]) -> Result<(), usize> {
    let mut expected: Option<u64> = None;
    for (i, item) in items.iter().enumerate() {
        match item {
            ExecItem::Insn(r) => {
                if let Some(e) = expected {
                    if e != r.ip {
                        return Err(i);
                    }
                }
                expected = Some(r.next_ip);
            }
            ExecItem::Event(
                Event::Signal {
                    handler: Some(h), ..
                }
                | Event::Interrupt { handler: h, .. },
            ) => expected = Some(*h),
            ExecItem::Event(_) => {}
        }
    }
    Ok(())
}
