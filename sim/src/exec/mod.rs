//! Execution sources: where the simulated PT logic gets its retired instructions.
//!
//! An [`ExecutionSource`] yields [`ExecItem`]s in program order: one
//! [`Retired`] per retired instruction of the traced threads, with
//! [`Event`]s between them for what the instruction stream alone cannot show
//! (kernel entries and exits, signals, exec, mapping changes, threads and
//! processes created and ended, the end).
//!
//! The real sources see user mode only: the kernel runs unseen between a
//! kernel entry and the return to user mode. A source whose
//! [`ExecutionSource::shows_kernel`] is true (the scripted one, and logs of
//! it) also yields the kernel's instructions ([`Retired::kernel`], CPL 0), the
//! CR3 writes there ([`Event::MovCr3`]) and the interrupts and exceptions
//! that enter it ([`Event::Interrupt`]).
//!
//! Five sources exist:
//! - [`ptrace::Tracer`] (Linux x86-64): single-steps a real program, its
//!   threads and the processes it forks.
//! - [`log::LogReader`]: replays a compact execution log written by
//!   [`log::LogWriter`] (record once, replay fast and often).
//! - [`script::Script`]: a small program plus its branch outcomes, for unit tests
//!   (it can show kernel code too).
//! - [`valgrind::ValgrindSource`] (Linux x86-64): a program (threads and
//!   children too) run under valgrind, some forty times faster than
//!   single-stepping on long programs.
//! - [`qemu::QemuSource`] (Linux x86-64): a program run in QEMU's user-mode
//!   emulator with our TCG plugin, which reports blocks, not instructions
//!   (QEMU runs at near its own speed; the recorder sets the pace).
//!
//! # Ordering contract
//! - A [`Retired`]'s `next_ip` is where the instruction sent user-mode control:
//!   the branch target, the fall-through, or for [`BranchClass::KernelEntry`] the
//!   IP in the registers when the kernel was done with the call (normally the
//!   fall-through; the new entry point after `execve`; the restored context
//!   after `rt_sigreturn`). A signal delivered on the way back to user mode
//!   then diverts control as its [`Event::Signal`] says; a call the kernel
//!   restarts shows as `from_ip` equal to the call itself.
//! - The next [`Retired`]'s `ip` equals the previous `next_ip`, unless an
//!   [`Event::Signal`] with a handler comes between them; then it equals that
//!   handler, and the signal's `from_ip` is where the interrupted context resumes.
//! - A system call is a [`Retired`] of class [`BranchClass::KernelEntry`]
//!   (SYSCALL, SYSENTER, INT 0x80) followed by [`Event::SyscallEnter`], any
//!   [`Event::Exec`] it caused, [`Event::SyscallExit`] (absent when the process
//!   ended in the call) and [`Event::Mappings`] if the memory map changed.
//!   Other kernel entries (INT3, INT n) are followed by the [`Event::Signal`]
//!   they raise, if any.
//!
//! # Threads and processes
//! Every item belongs to one thread ([`ThreadId`]: process and thread id, as
//! Linux numbers them). [`Event::Switch`] says that the items after it are
//! another thread's; the contract above holds for each thread's own items.
//! Items before the first switch belong to the initial thread: `(P, P)` for
//! the `P` of an [`Event::Exec`] that comes before any instruction, else
//! `(0, 0)` ([`ThreadCursor`] follows this). A single-threaded execution
//! has no switch at all.
//! - A thread creates another in a system call ([`Event::SyscallEnter`] of
//!   clone, fork, vfork...): [`Event::Clone`] follows it in the creator's
//!   items, before any item of the new thread. A thread of the same process
//!   shares its address space; a new process starts with a copy of it
//!   ([`Event::Mappings`] comes first among the child's items).
//! - [`Event::Exec`] replaces the address space of the current thread's
//!   process (code bytes known before no longer apply); [`Event::Mappings`]
//!   is the map of the current thread's process.
//! - [`Event::Exit`] ends the current thread; no item of it follows.
//! - A thread or process that ran without being recorded is named by an
//!   [`Event::Untraced`]: a recording never has a silent gap.
//!
//! # With the kernel shown
//! - A kernel entry (SYSCALL, SYSENTER, INT n) goes to the kernel code: its
//!   `next_ip` is the kernel's entry point and the instructions that follow
//!   have `kernel` set until a far transfer (SYSRET, SYSEXIT, IRET, of class
//!   [`BranchClass::FarBranch`]) returns to user mode. No system call events
//!   accompany it.
//! - An interrupt or exception is an [`Event::Interrupt`] before the
//!   instruction at its `from_ip` (which does not retire then); the next
//!   instruction is its `handler`.
//! - A MOV to CR3 is followed by [`Event::MovCr3`] with the value loaded.

pub mod block;
pub mod blockstep;
pub mod insn;
pub mod log;
pub mod maps;
pub mod memory;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod ptrace;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod qemu;
pub mod script;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod valgrind;

pub use block::{BlockId, BlockInsn, BlockRun, BlockTable, CodeBlock, Exits, RunView, Step};
pub use insn::{decode_at, BranchClass, DecodedInsn};
pub use maps::{Mapping, Perms};
pub use memory::{CodeMemory, PAGE_SIZE};
pub use pt_encoder::packet::ExecMode;

/// A thread of a recording: the id of its process (thread group) and its own,
/// as Linux numbers them (perf's `pid` and `tid`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId {
    /// Process id (the thread group's id).
    pub pid: u32,
    /// Thread id; equal to `pid` for a process's initial thread.
    pub tid: u32,
}

impl ThreadId {
    /// The initial thread of process `pid`.
    pub const fn main_of(pid: u32) -> Self {
        ThreadId { pid, tid: pid }
    }
}

impl std::fmt::Display for ThreadId {
    /// `pid/tid`, as perf prints them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.pid, self.tid)
    }
}

/// What kind of task a thread created (the distinction perf's FORK record
/// leaves to `pid` and `tid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloneKind {
    /// A thread of the same process (`CLONE_THREAD`): same address space.
    Thread,
    /// A new process with a copy of the address space (fork, or clone
    /// without `CLONE_THREAD`).
    Fork,
    /// vfork: a new process that borrows its parent's memory until it execs
    /// or exits; the parent waits until then.
    Vfork,
}

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
    pub class: BranchClass,
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

/// How a traced thread (or process) ended.
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
    /// A program image was loaded into the current thread's process: at the
    /// start of the recording, and on every successful `execve`. The pid
    /// stands in for CR3 (not visible to user space); it stays the same
    /// across `execve`.
    Exec {
        /// Process id of the current thread.
        pid: u32,
        /// Path of the new program as the recorder saw it.
        path: String,
    },
    /// The full memory map of the current thread's process (from
    /// `/proc/pid/maps`): at the start, first thing for a new process, and
    /// after any kernel entry that changed it.
    Mappings(Vec<Mapping>),
    /// The items that follow belong to this thread (see the module docs).
    Switch(ThreadId),
    /// The current thread created `child` (in the system call before this
    /// event); the child's items follow a [`Event::Switch`] to it.
    Clone {
        /// The new thread.
        child: ThreadId,
        /// Thread or process.
        kind: CloneKind,
    },
    /// A thread or process ran without being recorded (the source could not
    /// follow it); `why` says what happened.
    Untraced {
        /// The thread (`tid` 0: the whole process).
        thread: ThreadId,
        /// Why it was not recorded, for a warning.
        why: String,
    },
    /// The preceding [`BranchClass::KernelEntry`] instruction entered the kernel
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
    /// The current thread ended (for the last thread of a process, or one
    /// ended by `exit_group` or a fatal signal: the process's status).
    Exit(ExitKind),
    /// The recording ended early; the traced processes were killed by the
    /// recorder. Nothing follows.
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
    /// A log file ends before its end record: the recording that wrote it
    /// was killed. Everything before `offset` was replayed.
    #[error("execution log cut short at byte {offset} of {len}: the recording that wrote it did not finish (everything before was replayed)")]
    TruncatedLog {
        /// Where the incomplete record (or the missing end record) starts.
        offset: u64,
        /// The log's length.
        len: u64,
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

    /// The next item or block run, `Ok(None)` at the end: the same
    /// execution as [`Self::next_item`] gives, where a source that sees
    /// blocks hands a block's instructions over at once (see
    /// [`block`]). The two calls are not mixed on one source. The default
    /// gives items only.
    fn next_step(&mut self) -> Result<Option<Step>, ExecError> {
        Ok(self.next_item()?.map(Step::Item))
    }

    /// Gives back the vector of a [`Step::Blocks`] once its runs were
    /// taken, for the source to fill again: a source that hands blocks over
    /// in batches allocates no batch per step. The default drops it.
    fn recycle(&mut self, runs: Vec<BlockRun>) {
        drop(runs);
    }

    /// The blocks the [`BlockRun`]s of [`Self::next_step`] name: every
    /// block a run handed over so far names is in it. The default, for
    /// sources that hand over no blocks, is empty.
    fn blocks(&self) -> &BlockTable {
        static NONE: BlockTable = BlockTable::new();
        &NONE
    }

    /// The code bytes known so far: every page holding an instruction yielded
    /// up to now, as it was when that instruction executed (newer contents
    /// replace older ones). A decoder of the produced trace reads code here.
    fn memory(&self) -> &CodeMemory;

    /// Whether kernel-mode instructions appear (see the module docs); false
    /// for sources that see user mode only.
    fn shows_kernel(&self) -> bool {
        false
    }

    /// The code bytes known of process `pid`'s current address space, also
    /// after the process ended (for code that is in no file, such as the
    /// vDSO, which a side-band has to dump). The default, for sources of one
    /// process, is [`Self::memory`].
    fn process_memory(&self, pid: u32) -> Option<&CodeMemory> {
        let _ = pid;
        Some(self.memory())
    }
}

impl<S: ExecutionSource + ?Sized> ExecutionSource for &mut S {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        (**self).next_item()
    }
    fn next_step(&mut self) -> Result<Option<Step>, ExecError> {
        (**self).next_step()
    }
    fn recycle(&mut self, runs: Vec<BlockRun>) {
        (**self).recycle(runs)
    }
    fn blocks(&self) -> &BlockTable {
        (**self).blocks()
    }
    fn memory(&self) -> &CodeMemory {
        (**self).memory()
    }
    fn shows_kernel(&self) -> bool {
        (**self).shows_kernel()
    }
    fn process_memory(&self, pid: u32) -> Option<&CodeMemory> {
        (**self).process_memory(pid)
    }
}

impl<S: ExecutionSource + ?Sized> ExecutionSource for Box<S> {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        (**self).next_item()
    }
    fn next_step(&mut self) -> Result<Option<Step>, ExecError> {
        (**self).next_step()
    }
    fn recycle(&mut self, runs: Vec<BlockRun>) {
        (**self).recycle(runs)
    }
    fn blocks(&self) -> &BlockTable {
        (**self).blocks()
    }
    fn memory(&self) -> &CodeMemory {
        (**self).memory()
    }
    fn shows_kernel(&self) -> bool {
        (**self).shows_kernel()
    }
    fn process_memory(&self, pid: u32) -> Option<&CodeMemory> {
        (**self).process_memory(pid)
    }
}

/// Follows which thread the items of a stream belong to (the rules are in
/// the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCursor {
    current: Option<ThreadId>,
    started: bool,
}

impl ThreadCursor {
    /// A cursor before the first item.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next item; returns the thread it belongs to (for a
    /// [`Event::Switch`], the thread switched to).
    #[inline]
    pub fn follow(&mut self, item: &ExecItem) -> ThreadId {
        match item {
            ExecItem::Insn(_) => self.started = true,
            ExecItem::Event(Event::Switch(t)) => {
                self.current = Some(*t);
                self.started = true;
            }
            ExecItem::Event(Event::Exec { pid, .. }) if !self.started => {
                self.current = Some(ThreadId::main_of(*pid));
            }
            ExecItem::Event(_) => {}
        }
        self.current()
    }

    /// Notes an instruction without looking at it (the thread cannot change).
    #[inline]
    pub(crate) fn saw_insn(&mut self) {
        self.started = true;
    }

    /// The thread of the last item followed.
    #[inline]
    pub fn current(&self) -> ThreadId {
        self.current.unwrap_or_default()
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

/// Checks the ordering contract on a sequence of items, thread by thread:
/// every retired instruction starts where the thread's previous one said
/// control went, or at the handler of a signal or interrupt in between.
/// Returns the index of the first violation.
pub fn check_continuity(items: &[ExecItem]) -> Result<(), usize> {
    let mut expected: std::collections::HashMap<ThreadId, u64> = Default::default();
    let mut cursor = ThreadCursor::new();
    for (i, item) in items.iter().enumerate() {
        let thread = cursor.follow(item);
        match item {
            ExecItem::Insn(r) => {
                if expected.get(&thread).is_some_and(|&e| e != r.ip) {
                    return Err(i);
                }
                expected.insert(thread, r.next_ip);
            }
            ExecItem::Event(
                Event::Signal {
                    handler: Some(h), ..
                }
                | Event::Interrupt { handler: h, .. },
            ) => {
                expected.insert(thread, *h);
            }
            ExecItem::Event(_) => {}
        }
    }
    Ok(())
}

/// The items of one thread, in order (without the switches).
pub fn thread_items(items: &[ExecItem], thread: ThreadId) -> Vec<ExecItem> {
    let mut cursor = ThreadCursor::new();
    items
        .iter()
        .filter(|item| {
            cursor.follow(item) == thread && !matches!(item, ExecItem::Event(Event::Switch(_)))
        })
        .cloned()
        .collect()
}
