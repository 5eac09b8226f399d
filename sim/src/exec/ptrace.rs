//! A ptrace tracer for real Linux x86-64 processes: the ground-truth
//! sequence of retired user-mode instructions, one single-step at a time.
//!
//! The child is started with `fork`, `PTRACE_TRACEME` and `execve`, optionally
//! with address-space randomization off so runs repeat exactly. Each step
//! reads the registers, decodes the instruction at RIP from code pages read
//! out of the child (cached per page and re-checked every step, so code that
//! changes is seen), and issues `PTRACE_SINGLESTEP`.
//!
//! Every thread the program creates and every process it forks are traced
//! too (`PTRACE_O_TRACECLONE`, `…FORK`, `…VFORK`), across `execve`
//! (`PTRACE_O_TRACEEXEC`). The recorder runs one thread at a time, like one
//! logical processor: a thread runs for a slice of instructions, then the
//! next runnable one; a system call that does not return at once (it may
//! wait for another thread: a futex, a pipe, vfork) goes on by itself while
//! other threads run, and its thread joins the round again when it stops.
//! The items of the threads are interleaved with [`Event::Switch`] between
//! them (see [`crate::exec`]). Waits are for known thread ids only
//! (`waitpid(-1)` would take other children of the calling process).
//! All calls must come from the thread that spawned the tracee (a ptrace
//! rule), so [`Tracer`] is not `Send`.
//!
//! Known limits of tracing by single-step:
//! - A program's own SIGTRAP handling is disturbed: when the step trap hits
//!   while the program blocks SIGTRAP (inside its handler), the kernel resets
//!   the handler to the default. The recording shows what then happened.
//! - A SIGTRAP sent by another process at the very moment a step completes
//!   merges with the step's trap and is lost.
//! - `SyscallExit::ret` is RAX at the exit stop: a call interrupted by a
//!   signal shows the kernel-internal restart codes (-512..-516) there.
//! - Code in pages that can be neither read nor PEEKed (the legacy vsyscall
//!   page in execute-only mode) ends the recording with an error.
//! - An `execve` from a thread other than a process's first takes over the
//!   first thread's id; the recording names the thread that vanished
//!   ([`Event::Untraced`]) and ends it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{CString, OsStr, OsString};
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::blockstep::{self, BlockPlan, BlockStop};
use super::insn::{decode_bytes, DecodedInsn, KernelEntry};
use super::maps::parse_maps;
use super::memory::page_base;
use super::{
    CloneKind, CodeMemory, Event, ExecError, ExecItem, ExecMode, ExecutionSource, ExitKind,
    Mapping, Retired, StopReason, ThreadCursor, ThreadId, PAGE_SIZE,
};

/// `personality(2)` flag that turns address-space randomization off.
pub(crate) const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
/// `PTRACE_SINGLEBLOCK` on x86 (step to the next taken branch, via DEBUGCTL.BTF).
const PTRACE_SINGLEBLOCK: libc::c_uint = 33;
/// `si_code` of a SIGTRAP sent by the kernel for INT3.
const SI_KERNEL: i32 = 0x80;
/// User code segment selectors of Linux x86-64.
const USER_CS_64: u64 = 0x33;

/// How to run the traced program.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// Turn address-space randomization off in the child (`personality`), so
    /// that runs of a deterministic program are identical. Default: on.
    pub disable_aslr: bool,
    /// Set the child's core-size limit to zero so crashing programs end
    /// quickly. Default: on.
    pub no_core_dump: bool,
    /// Stop after this many retired instructions (the child is killed and the
    /// execution ends with [`Event::Stopped`]).
    pub step_limit: Option<u64>,
    /// Stop when this becomes true (e.g. set from a SIGINT handler).
    pub stop_flag: Option<Arc<AtomicBool>>,
    /// Re-read the bytes at every IP and compare them with the cached page
    /// (catches code written without a mapping change). Default: on.
    pub verify_code: bool,
    /// Use `PTRACE_SINGLEBLOCK` for straight-line stretches when
    /// [`probe_block_step`] finds that it stops only at taken branches.
    /// Default: on (it falls back to single-stepping where BTF is not honored).
    pub block_step: bool,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            disable_aslr: true,
            no_core_dump: true,
            step_limit: None,
            stop_flag: None,
            verify_code: true,
            block_step: true,
        }
    }
}

/// Counters of a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Ptrace stops taken (steps, events, signals).
    pub stops: u64,
    /// Retired instructions yielded.
    pub retired: u64,
    /// System calls.
    pub syscalls: u64,
    /// Signals delivered to the program.
    pub signals: u64,
    /// Code pages read from the child.
    pub page_reads: u64,
    /// Stops that were block steps (each may cover many instructions).
    pub block_steps: u64,
    /// Time since the child was started.
    pub elapsed: Duration,
}

/// Whether `PTRACE_SINGLEBLOCK` really steps by taken branch here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockStep {
    /// The kernel refuses the request.
    Unsupported,
    /// Accepted, but it stops after every instruction (DEBUGCTL.BTF is not
    /// honored, as under some hypervisors): no faster than single-stepping.
    NotHonored,
    /// It stops only at taken branches.
    Honored,
}

pub(crate) fn os_err(what: &'static str) -> ExecError {
    ExecError::Os {
        what,
        source: std::io::Error::last_os_error(),
    }
}

/// Finds a program the way `execvp` would.
pub(crate) fn resolve_program(program: &OsStr) -> Result<PathBuf, ExecError> {
    let not_found = || ExecError::CommandNotFound(program.to_string_lossy().into_owned());
    let is_exec = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.is_empty() {
        return Err(not_found());
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return if is_exec(&p) { Ok(p) } else { Err(not_found()) };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_exec(p))
        .ok_or_else(not_found)
}

pub(crate) fn cstring(s: &OsStr) -> Result<CString, ExecError> {
    CString::new(s.as_bytes()).map_err(|_| ExecError::Os {
        what: "argument with a NUL byte",
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// Decoded `waitpid` status.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    Exited(i32),
    Killed(i32),
    /// Stopped with this signal; `event` is the PTRACE_EVENT_* (0 for none).
    Stopped {
        sig: i32,
        event: i32,
    },
}

pub(crate) fn wait_child(pid: libc::pid_t) -> Result<Wait, ExecError> {
    loop {
        if let Some(w) = wait_child_once(pid, 0)? {
            return Ok(w);
        }
    }
}

/// One `waitpid(pid, flags | __WALL)`: `None` when nothing came (`WNOHANG`)
/// or a signal interrupted the wait.
pub(crate) fn wait_child_once(
    pid: libc::pid_t,
    flags: libc::c_int,
) -> Result<Option<Wait>, ExecError> {
    let mut status = 0;
    // SAFETY: plain FFI call with a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, flags | libc::__WALL) };
    if r == 0 {
        return Ok(None);
    }
    if r < 0 {
        if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(os_err("waitpid"));
    }
    Ok(Some(wait_status(status)))
}

fn wait_status(status: libc::c_int) -> Wait {
    if libc::WIFEXITED(status) {
        Wait::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Wait::Killed(libc::WTERMSIG(status))
    } else {
        Wait::Stopped {
            sig: libc::WSTOPSIG(status),
            event: (status >> 16) & 0xff,
        }
    }
}

pub(crate) fn ptrace(req: libc::c_uint, pid: libc::pid_t, addr: u64, data: u64) -> libc::c_long {
    // SAFETY: requests used here take integer or valid pointer arguments.
    unsafe {
        libc::ptrace(
            req,
            pid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    }
}

fn get_regs(pid: libc::pid_t) -> Result<libc::user_regs_struct, ExecError> {
    // SAFETY: user_regs_struct is plain data; PTRACE_GETREGS fills it.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    if ptrace(
        libc::PTRACE_GETREGS,
        pid,
        0,
        &mut regs as *mut libc::user_regs_struct as u64,
    ) < 0
    {
        return Err(os_err("PTRACE_GETREGS"));
    }
    Ok(regs)
}

/// `si_code` of the pending stop's siginfo, `None` if there is none (group-stop).
fn siginfo_code(pid: libc::pid_t) -> Option<i32> {
    // SAFETY: siginfo_t is plain data; PTRACE_GETSIGINFO fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    (ptrace(
        libc::PTRACE_GETSIGINFO,
        pid,
        0,
        &mut info as *mut libc::siginfo_t as u64,
    ) >= 0)
        .then_some(info.si_code)
}

/// Reads `buf.len()` bytes of the child at `addr`; returns how many were read.
pub(crate) fn read_mem(pid: libc::pid_t, addr: u64, buf: &mut [u8]) -> usize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the local iovec covers `buf`; the remote one is only read by the kernel.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n > 0 {
        return n as usize;
    }
    // Execute-only pages are not readable this way; PEEKTEXT forces access.
    let mut done = 0;
    while done + 8 <= buf.len() {
        // SAFETY: errno is thread-local; cleared to tell -1 data from failure.
        unsafe { *libc::__errno_location() = 0 };
        let w = ptrace(libc::PTRACE_PEEKTEXT, pid, addr + done as u64, 0);
        // SAFETY: as above.
        if w == -1 && unsafe { *libc::__errno_location() } != 0 {
            break;
        }
        buf[done..done + 8].copy_from_slice(&w.to_le_bytes());
        done += 8;
    }
    done
}

/// Kills a traced child and waits until it is gone.
pub(crate) fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // A stopped tracee may report more stops before the kill takes effect.
    while let Ok(Wait::Stopped { .. }) = wait_child(pid) {
        ptrace(libc::PTRACE_CONT, pid, 0, 0);
    }
}

/// What the child does before `execve`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpawnFlags {
    pub(crate) disable_aslr: bool,
    pub(crate) no_core_dump: bool,
    /// Make this descriptor the child's fd 3.
    pub(crate) fd_to_3: Option<libc::c_int>,
    /// Set these ptrace options before the `execve`, and stop the child (and
    /// every process it starts) before each `execve` it makes
    /// (`PTRACE_EVENT_SECCOMP` through a seccomp filter; the options must
    /// include `PTRACE_O_TRACESECCOMP` and `PTRACE_O_TRACEEXEC`).
    pub(crate) stop_before_exec: Option<libc::c_int>,
}

/// AUDIT_ARCH_X86_64 and AUDIT_ARCH_I386 (linux/audit.h).
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;

/// A seccomp filter that hands `execve` and `execveat` (of both x86 ABIs)
/// to the tracer before they run, and lets everything else through.
fn exec_filter() -> [libc::sock_filter; 11] {
    let ld = |k: u32| libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    // seccomp_data: nr at offset 0, arch at 4. Jumps count from the next insn.
    [
        ld(4),
        jeq(AUDIT_ARCH_X86_64, 0, 3),
        ld(0),
        jeq(59, 6, 0),  // execve
        jeq(322, 5, 4), // execveat
        jeq(AUDIT_ARCH_I386, 0, 3),
        ld(0),
        jeq(11, 2, 0),  // execve
        jeq(358, 1, 0), // execveat
        ret(libc::SECCOMP_RET_ALLOW),
        ret(libc::SECCOMP_RET_TRACE),
    ]
}

/// Forks and executes `program` under `PTRACE_TRACEME`. The child stops with
/// SIGTRAP at its first instruction (not yet waited for); with
/// [`SpawnFlags::stop_before_exec`], at its `PTRACE_EVENT_EXEC` stop (waited for).
pub(crate) fn spawn_traced(
    program: &OsStr,
    args: &[OsString],
    flags: SpawnFlags,
) -> Result<libc::pid_t, ExecError> {
    let path = resolve_program(program)?;
    let c_path = cstring(path.as_os_str())?;
    let mut argv = vec![cstring(program)?];
    for a in args {
        argv.push(cstring(a)?);
    }
    let envp = std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k;
            kv.push("=");
            kv.push(v);
            cstring(&kv)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let filter = exec_filter();

    // The child reports a failed execve through this pipe; a successful
    // one closes it (O_CLOEXEC).
    let mut fds = [0; 2];
    // SAFETY: valid out array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(os_err("pipe2"));
    }
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: fork in a possibly multi-threaded process: the child only
    // makes async-signal-safe calls on data prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = os_err("fork");
        // SAFETY: closing our own fds.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
        return Err(e);
    }
    if pid == 0 {
        // SAFETY: child side, async-signal-safe calls only.
        unsafe {
            // The program starts as a shell would start it: Rust's runtime
            // ignores SIGPIPE (an ignored signal stays ignored across execve),
            // and the recorder may block signals.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if flags.disable_aslr {
                let cur = libc::personality(0xffff_ffff);
                if cur != -1 {
                    libc::personality(cur as libc::c_ulong | ADDR_NO_RANDOMIZE);
                }
            }
            if flags.no_core_dump {
                let lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &lim);
            }
            if let Some(src) = flags.fd_to_3 {
                // dup2 onto itself would keep O_CLOEXEC.
                if src == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0);
                } else {
                    libc::dup2(src, 3);
                }
            }
            libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize);
            if flags.stop_before_exec.is_some() {
                // The tracer sets its options now, before the filter asks for it.
                libc::raise(libc::SIGSTOP);
                let prog = libc::sock_fprog {
                    len: filter.len() as u16,
                    filter: filter.as_ptr() as *mut libc::sock_filter,
                };
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                        &prog as *const libc::sock_fprog,
                    ) != 0
                {
                    let err: i32 = *libc::__errno_location();
                    libc::write(wr, (&err as *const i32).cast(), 4);
                    libc::_exit(127);
                }
            }
            libc::execve(c_path.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr());
            let err: i32 = *libc::__errno_location();
            libc::write(wr, (&err as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(wr) };
    if let Some(options) = flags.stop_before_exec {
        // Guide the child to its exec: its SIGSTOP, the filter's stop before
        // the execve, then the exec stop (or its end, if the execve failed).
        let result = (|| -> Result<bool, ExecError> {
            loop {
                match wait_child(pid)? {
                    Wait::Stopped { sig, event: 0 } if sig == libc::SIGSTOP => {
                        if ptrace(libc::PTRACE_SETOPTIONS, pid, 0, options as u64) < 0 {
                            return Err(os_err("PTRACE_SETOPTIONS"));
                        }
                        ptrace(libc::PTRACE_CONT, pid, 0, 0);
                    }
                    Wait::Stopped { event, .. } if event == libc::PTRACE_EVENT_EXEC => {
                        return Ok(true)
                    }
                    Wait::Stopped { .. } => {
                        ptrace(libc::PTRACE_CONT, pid, 0, 0);
                    }
                    Wait::Exited(_) | Wait::Killed(_) => return Ok(false),
                }
            }
        })();
        match result {
            Ok(true) => {}
            Ok(false) => {}
            Err(e) => {
                // SAFETY: closing our read end.
                unsafe { libc::close(rd) };
                kill_and_reap(pid);
                return Err(e);
            }
        }
    }
    let mut errno_buf = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        // SAFETY: reading into a local buffer.
        let n = unsafe { libc::read(rd, errno_buf[got..].as_mut_ptr().cast(), 4 - got) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    // SAFETY: closing our read end.
    unsafe { libc::close(rd) };
    if got == 4 {
        if flags.stop_before_exec.is_none() {
            let _ = wait_child(pid);
        }
        return Err(ExecError::ExecFailed {
            command: program.to_string_lossy().into_owned(),
            source: std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno_buf)),
        });
    }
    Ok(pid)
}

/// Whether the program catches `signo` (from `SigCgt` in /proc/pid/status).
fn catches_signal(pid: libc::pid_t, signo: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&signo) && mask & (1 << (signo - 1)) != 0)
}

fn mode_of(cs: u64) -> ExecMode {
    if cs == USER_CS_64 {
        ExecMode::Bit64
    } else {
        ExecMode::Bit32
    }
}

/// Instructions a thread runs before another runnable thread gets its turn
/// (the recorder runs one thread at a time, like one logical processor).
const TIME_SLICE: u64 = 10_000;

/// A traced thread.
struct Thread {
    id: ThreadId,
    regs: libc::user_regs_struct,
    /// A signal to deliver with the next resume.
    pending_signal: Option<i32>,
    /// A step whose stop has not come yet (a system call that may block on
    /// another thread): the thread runs on its own meanwhile.
    in_flight: Option<Step>,
}

/// What the recorder keeps of a traced process (its address space).
#[derive(Default)]
struct Space {
    mem: CodeMemory,
    /// Pages known to match the process right now, and whether they can
    /// change without a change of the memory map (writable or shared).
    fresh: HashMap<u64, bool>,
    maps: Vec<Mapping>,
    /// Traced threads alive.
    threads: usize,
}

/// One instruction (or signal delivery) being stepped.
#[derive(Clone, Copy)]
struct Step {
    ip: u64,
    mode: ExecMode,
    pre: libc::user_regs_struct,
    decoded: Option<DecodedInsn>,
    is_syscall: bool,
    /// A signal delivered with this step that the program catches.
    handled: bool,
    inject: Option<i32>,
    exec_seen: bool,
    /// The system call's instruction and entry are queued already (when it
    /// created a thread or process).
    entered: bool,
}

/// What to do after a stop of a step.
enum Next {
    Done,
    /// Resume the step with this signal.
    Again(i32),
}

/// Traced processes and threads as an [`ExecutionSource`]: the program, its
/// threads, the processes it forks and what they exec (see the module docs).
pub struct Tracer {
    opts: TraceOptions,
    /// Live threads by their kernel thread id.
    threads: BTreeMap<libc::pid_t, Thread>,
    spaces: HashMap<u32, Space>,
    /// Threads announced by their creator whose first stop has not come yet.
    unborn: HashMap<libc::pid_t, ThreadId>,
    /// Processes whose last thread ended.
    ended: Vec<u32>,
    /// The thread being stepped and the instructions left in its slice.
    current: Option<libc::pid_t>,
    slice: u64,
    queue: VecDeque<ExecItem>,
    /// Thread of the last queued item.
    queued: Option<ThreadId>,
    /// Follows the yielded items (for [`ExecutionSource::memory`]).
    yielded: ThreadCursor,
    no_code: CodeMemory,
    leader: libc::pid_t,
    stats: TraceStats,
    started: Instant,
    schedules: u64,
    /// Everything traced is gone (or was never there).
    finished: bool,
    /// Block-stepping is honored here and enabled.
    use_block_step: bool,
    _not_send: PhantomData<*const ()>,
}

impl Tracer {
    /// Starts `program` with `args` (not including the program name) stopped
    /// at its first instruction.
    pub fn spawn<S: AsRef<OsStr>>(
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
        opts: TraceOptions,
    ) -> Result<Self, ExecError> {
        let program = program.as_ref();
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let pid = spawn_traced(
            program,
            &args,
            SpawnFlags {
                disable_aslr: opts.disable_aslr,
                no_core_dump: opts.no_core_dump,
                fd_to_3: None,
                stop_before_exec: None,
            },
        )?;
        let use_block_step =
            opts.block_step && block_step_support().is_ok_and(|b| b == BlockStep::Honored);
        let now = Instant::now();
        let mut t = Tracer {
            opts,
            threads: BTreeMap::new(),
            spaces: HashMap::new(),
            unborn: HashMap::new(),
            ended: Vec::new(),
            current: None,
            slice: 0,
            queue: VecDeque::new(),
            queued: None,
            yielded: ThreadCursor::new(),
            no_code: CodeMemory::new(),
            leader: pid,
            stats: TraceStats::default(),
            started: now,
            schedules: 0,
            finished: false,
            use_block_step: false,
            _not_send: PhantomData,
        };
        // The exec stops the child with SIGTRAP before its first instruction.
        match wait_child(pid)? {
            Wait::Stopped { sig, .. } if sig == libc::SIGTRAP => {}
            Wait::Exited(_) | Wait::Killed(_) => {
                t.finished = true;
                return Err(ExecError::Os {
                    what: "tracee ended before its first instruction",
                    source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                });
            }
            Wait::Stopped { .. } => {
                kill_and_reap(pid);
                t.finished = true;
                return Err(ExecError::Os {
                    what: "tracee stopped unexpectedly at exec",
                    source: std::io::Error::from(std::io::ErrorKind::Other),
                });
            }
        }
        let options = libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_EXITKILL
            | libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK;
        if ptrace(libc::PTRACE_SETOPTIONS, pid, 0, options as u64) < 0 {
            kill_and_reap(pid);
            t.finished = true;
            return Err(os_err("PTRACE_SETOPTIONS"));
        }
        t.use_block_step = use_block_step;
        let id = ThreadId::main_of(pid as u32);
        let regs = match get_regs(pid) {
            Ok(r) => r,
            Err(e) => {
                kill_and_reap(pid);
                t.finished = true;
                return Err(e);
            }
        };
        t.threads.insert(
            pid,
            Thread {
                id,
                regs,
                pending_signal: None,
                in_flight: None,
            },
        );
        let maps = read_maps(pid)?;
        t.spaces.insert(
            id.pid,
            Space {
                maps: maps.clone(),
                threads: 1,
                ..Space::default()
            },
        );
        t.push(
            id,
            ExecItem::Event(Event::Exec {
                pid: id.pid,
                path: exe_path(pid),
            }),
        );
        t.push(id, ExecItem::Event(Event::Mappings(maps)));
        Ok(t)
    }

    /// The traced process id (of the program started).
    pub fn pid(&self) -> u32 {
        self.leader as u32
    }

    /// Counters so far.
    pub fn stats(&self) -> TraceStats {
        TraceStats {
            elapsed: self.started.elapsed(),
            ..self.stats
        }
    }

    /// The memory map of the program started, as last read.
    pub fn mappings(&self) -> &[Mapping] {
        self.spaces
            .get(&(self.leader as u32))
            .map_or(&[], |s| &s.maps)
    }

    /// Queues an item of thread `id`, after a switch if the last one was
    /// another thread's.
    fn push(&mut self, id: ThreadId, item: ExecItem) {
        if self.queued != Some(id) {
            if self.queued.is_some() {
                self.queue.push_back(ExecItem::Event(Event::Switch(id)));
            }
            self.queued = Some(id);
        }
        self.queue.push_back(item);
    }

    fn stop_requested(&self) -> bool {
        self.opts
            .stop_flag
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// Whether threads other than `tid` are traced or about to be.
    fn others(&self, tid: libc::pid_t) -> bool {
        !self.unborn.is_empty() || self.threads.keys().any(|&t| t != tid)
    }

    /// Waits for `tid`'s next stop; `None` when a stop of the recording was
    /// requested meanwhile (a signal interrupted the wait).
    fn wait_for(&self, tid: libc::pid_t) -> Result<Option<Wait>, ExecError> {
        loop {
            match wait_child_once(tid, 0)? {
                Some(w) => return Ok(Some(w)),
                None if self.stop_requested() => return Ok(None),
                None => {}
            }
        }
    }

    /// Waits a little for `tid`'s stop (a system call that may block on
    /// another thread); `None` if it has not come.
    fn wait_briefly(&self, tid: libc::pid_t) -> Result<Option<Wait>, ExecError> {
        let mut pause = Duration::from_micros(10);
        let mut waited = Duration::ZERO;
        loop {
            if let Some(w) = wait_child_once(tid, libc::WNOHANG)? {
                return Ok(Some(w));
            }
            if waited >= Duration::from_millis(2) || self.stop_requested() {
                return Ok(None);
            }
            std::thread::sleep(pause);
            waited += pause;
            pause = (pause * 2).min(Duration::from_micros(500));
        }
    }

    /// Makes sure the page at `base` of `tid`'s process is captured and current.
    fn load_page(space: &mut Space, stats: &mut TraceStats, tid: libc::pid_t, base: u64) -> bool {
        if space.fresh.contains_key(&base) {
            return true;
        }
        let mut page = vec![0u8; PAGE_SIZE as usize];
        stats.page_reads += 1;
        if read_mem(tid, base, &mut page) != page.len() {
            return false;
        }
        space.mem.set_page(base, &page);
        let volatile = !space
            .maps
            .iter()
            .any(|m| m.start <= base && base < m.end && !m.perms.write && !m.perms.shared);
        space.fresh.insert(base, volatile);
        true
    }

    /// Decodes the instruction at `ip` of thread `tid` from captured pages,
    /// loading them as needed; `None` if the bytes are unreadable or invalid
    /// (the step faults).
    fn fetch(&mut self, tid: libc::pid_t, ip: u64, mode: ExecMode) -> Option<DecodedInsn> {
        let pid = self.threads.get(&tid)?.id.pid;
        let space = self.spaces.get_mut(&pid)?;
        let stats = &mut self.stats;
        // Code that cannot change without a change of the map (a system
        // call, after which pages are read again) needs no re-reading.
        let stable = |b: u64| space.fresh.get(&b) == Some(&false);
        if self.opts.verify_code
            && !(stable(page_base(ip)) && stable(page_base(ip.wrapping_add(14))))
        {
            let mut live = [0u8; 15];
            let n = read_mem(tid, ip, &mut live);
            let mut cached = [0u8; 15];
            let m = space.mem.read(ip, &mut cached);
            let k = n.min(m);
            if k == 0 || live[..k] != cached[..k] {
                // Stale or missing: drop what we hold for these pages.
                space.fresh.remove(&page_base(ip));
                space.fresh.remove(&page_base(ip.wrapping_add(14)));
            }
        }
        if !Self::load_page(space, stats, tid, page_base(ip)) {
            return None;
        }
        let first = decode_bytes(
            space
                .mem
                .page(ip)
                .map(|p| &p[(ip - page_base(ip)) as usize..])?,
            ip,
            mode,
        );
        match first {
            Ok(d) if page_base(ip.wrapping_add(u64::from(d.len) - 1)) == page_base(ip) => Some(d),
            _ => {
                // Possibly cut by the page end: needs the next page too.
                if !Self::load_page(space, stats, tid, page_base(ip).wrapping_add(PAGE_SIZE)) {
                    return first.ok().filter(|d| {
                        page_base(ip.wrapping_add(u64::from(d.len) - 1)) == page_base(ip)
                    });
                }
                super::insn::decode_at(&space.mem, ip, mode).ok()
            }
        }
    }

    /// Kills every traced process and waits until all are gone.
    fn kill_all(&mut self) {
        let tids: Vec<libc::pid_t> = self
            .threads
            .keys()
            .chain(self.unborn.keys())
            .copied()
            .collect();
        let mut pids: Vec<u32> = self.threads.values().map(|t| t.id.pid).collect();
        pids.extend(self.unborn.values().map(|t| t.pid));
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            // SAFETY: signalling a traced process of ours.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        for tid in tids {
            // A stopped tracee may report more stops before the kill takes effect.
            while let Ok(Some(Wait::Stopped { .. })) = wait_child_once(tid, 0) {
                ptrace(libc::PTRACE_CONT, tid, 0, 0);
            }
        }
        self.threads.clear();
        self.unborn.clear();
        self.finished = true;
    }

    fn stop(&mut self, reason: StopReason) {
        self.kill_all();
        self.queue
            .push_back(ExecItem::Event(Event::Stopped(reason)));
    }

    /// System call number and arguments before the call, by ABI.
    fn syscall_args(
        regs: &libc::user_regs_struct,
        entry: KernelEntry,
        mode: ExecMode,
    ) -> (u64, [u64; 6]) {
        if mode == ExecMode::Bit64 && entry == KernelEntry::Syscall {
            (
                regs.rax,
                [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9],
            )
        } else {
            let l = |v: u64| v & 0xffff_ffff;
            (
                l(regs.rax),
                [
                    l(regs.rbx),
                    l(regs.rcx),
                    l(regs.rdx),
                    l(regs.rsi),
                    l(regs.rdi),
                    l(regs.rbp),
                ],
            )
        }
    }

    /// Picks a thread and steps it one instruction (or one signal delivery),
    /// queueing what happened; or waits for a thread to become runnable.
    fn schedule(&mut self) -> Result<(), ExecError> {
        if let Some(limit) = self.opts.step_limit {
            if self.stats.retired >= limit {
                self.stop(StopReason::StepLimit);
                return Ok(());
            }
        }
        if self.stop_requested() {
            self.stop(StopReason::Interrupted);
            return Ok(());
        }
        let several = self.threads.len() > 1 || !self.unborn.is_empty();
        self.schedules += 1;
        if several && self.schedules % 16 == 0 {
            self.poll()?;
        }
        let runnable = |t: &Thread| t.in_flight.is_none();
        let keep = self
            .current
            .filter(|c| self.slice > 0 && self.threads.get(c).is_some_and(runnable));
        let next = keep.or_else(|| {
            let after = self.current.unwrap_or(libc::pid_t::MIN);
            let later = self.threads.range(after + 1..).find(|(_, t)| runnable(t));
            later
                .or_else(|| self.threads.iter().find(|(_, t)| runnable(t)))
                .map(|(&tid, _)| tid)
        });
        match next {
            Some(tid) => {
                if keep.is_none() {
                    self.current = Some(tid);
                    self.slice = TIME_SLICE;
                }
                self.step(tid)
            }
            None if self.threads.is_empty() && self.unborn.is_empty() => {
                self.finished = true;
                Ok(())
            }
            None => self.wait_any(),
        }
    }

    /// Collects the stops that have come for threads in flight and threads
    /// not born yet.
    fn poll(&mut self) -> Result<bool, ExecError> {
        let waiting: Vec<libc::pid_t> = self
            .threads
            .iter()
            .filter(|(_, t)| t.in_flight.is_some())
            .map(|(&tid, _)| tid)
            .chain(self.unborn.keys().copied())
            .collect();
        let mut any = false;
        for tid in waiting {
            if let Some(w) = wait_child_once(tid, libc::WNOHANG)? {
                self.dispatch(tid, w)?;
                any = true;
            }
        }
        Ok(any)
    }

    /// No thread can run: waits until one can (polling, since `waitpid(-1)`
    /// would take the children of whoever else runs in this process).
    fn wait_any(&mut self) -> Result<(), ExecError> {
        let mut pause = Duration::from_micros(20);
        while !self.poll()? {
            if self.stop_requested() {
                return Ok(());
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
        Ok(())
    }

    /// A stop of a thread in flight or not born yet.
    fn dispatch(&mut self, tid: libc::pid_t, w: Wait) -> Result<(), ExecError> {
        if let Some(id) = self.unborn.remove(&tid) {
            return self.born(tid, id, w);
        }
        let Some(mut step) = self.threads.get_mut(&tid).and_then(|t| t.in_flight.take()) else {
            // Only threads in flight are waited for.
            return Ok(());
        };
        match self.on_stop(tid, &mut step, w)? {
            Next::Done => Ok(()),
            Next::Again(sig) => {
                if self.resume(tid, sig)? {
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.in_flight = Some(step);
                    }
                }
                Ok(())
            }
        }
    }

    /// The first stop of a new thread or process.
    fn born(&mut self, tid: libc::pid_t, id: ThreadId, w: Wait) -> Result<(), ExecError> {
        let new_process = !self.spaces.get(&id.pid).is_some_and(|s| s.threads > 0);
        match w {
            Wait::Exited(c) => self.push(id, ExecItem::Event(Event::Exit(ExitKind::Exited(c)))),
            Wait::Killed(s) => self.push(id, ExecItem::Event(Event::Exit(ExitKind::Killed(s)))),
            Wait::Stopped { sig, .. } => {
                let regs = get_regs(tid)?;
                // Auto-attached threads start with a SIGSTOP that is ours, not theirs.
                let pending_signal = (sig != libc::SIGSTOP && sig != libc::SIGTRAP).then_some(sig);
                self.threads.insert(
                    tid,
                    Thread {
                        id,
                        regs,
                        pending_signal,
                        in_flight: None,
                    },
                );
                if new_process {
                    let maps = read_maps(tid)?;
                    self.spaces.insert(
                        id.pid,
                        Space {
                            maps: maps.clone(),
                            threads: 1,
                            ..Space::default()
                        },
                    );
                    self.push(id, ExecItem::Event(Event::Mappings(maps)));
                } else if let Some(s) = self.spaces.get_mut(&id.pid) {
                    s.threads += 1;
                }
            }
        }
        Ok(())
    }

    /// Resumes a thread by a single step with signal `sig`; `false` when it
    /// is gone (its end is queued then).
    fn resume(&mut self, tid: libc::pid_t, sig: i32) -> Result<bool, ExecError> {
        if ptrace(libc::PTRACE_SINGLESTEP, tid, 0, sig as u64) >= 0 {
            self.stats.stops += 1;
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(ExecError::Os {
                what: "PTRACE_SINGLESTEP",
                source: e,
            });
        }
        // Killed meanwhile (another thread's exit_group or exec, a SIGKILL).
        match self.wait_for(tid) {
            Ok(Some(Wait::Exited(c))) => self.thread_ended(tid, ExitKind::Exited(c)),
            Ok(Some(Wait::Killed(s))) => self.thread_ended(tid, ExitKind::Killed(s)),
            _ => self.thread_vanished(tid),
        }
        Ok(false)
    }

    fn thread_ended(&mut self, tid: libc::pid_t, kind: ExitKind) {
        let Some(t) = self.threads.remove(&tid) else {
            return;
        };
        self.push(t.id, ExecItem::Event(Event::Exit(kind)));
        self.left(t.id.pid);
    }

    /// A thread disappeared without an exit status (an exec from another
    /// thread of its process takes its id): named, never a silent gap.
    fn thread_vanished(&mut self, tid: libc::pid_t) {
        let Some(t) = self.threads.remove(&tid) else {
            return;
        };
        self.push(
            t.id,
            ExecItem::Event(Event::Untraced {
                thread: t.id,
                why: "the thread vanished without an exit status (an exec from another thread?); \
                      what it ran after its last recorded instruction is not recorded"
                    .into(),
            }),
        );
        self.push(
            t.id,
            ExecItem::Event(Event::Exit(ExitKind::Killed(libc::SIGKILL))),
        );
        self.left(t.id.pid);
    }

    /// A thread of process `pid` ended: when it was the last of a process
    /// other than the program's, only code in no file is kept of its memory
    /// (what a side-band may dump), once what is queued has been taken.
    fn left(&mut self, pid: u32) {
        if self.current.is_some_and(|c| !self.threads.contains_key(&c)) {
            self.current = None;
        }
        let Some(s) = self.spaces.get_mut(&pid) else {
            return;
        };
        s.threads = s.threads.saturating_sub(1);
        if s.threads == 0 {
            // Once what is queued (which may need its code) has been taken.
            self.ended.push(pid);
        }
    }

    /// Drops the code of ended processes, but for code in no file.
    fn prune_ended(&mut self) {
        for pid in std::mem::take(&mut self.ended) {
            // The program's own process stays whole (for a look after the end).
            let Some(s) = self
                .spaces
                .get_mut(&pid)
                .filter(|s| s.threads == 0 && pid != self.leader as u32)
            else {
                continue;
            };
            let keep: Vec<(u64, u64)> = s
                .maps
                .iter()
                .filter(|m| m.perms.exec && !m.path.starts_with('/'))
                .map(|m| (m.start, m.end))
                .collect();
            for base in s.mem.page_bases() {
                if !keep.iter().any(|&(a, b)| a <= base && base < b) {
                    s.mem.remove_page(base);
                }
            }
            s.fresh.clear();
        }
    }

    /// Steps thread `tid` one instruction (or one signal delivery).
    fn step(&mut self, tid: libc::pid_t) -> Result<(), ExecError> {
        let Some(t) = self.threads.get(&tid) else {
            return Ok(());
        };
        let (pre, pending) = (t.regs, t.pending_signal);
        let ip = pre.rip;
        let mode = mode_of(pre.cs);
        let decoded = self.fetch(tid, ip, mode);
        let is_syscall = decoded.is_some_and(|d| {
            matches!(
                d.kernel_entry,
                Some(KernelEntry::Syscall | KernelEntry::Sysenter | KernelEntry::Int(0x80))
            )
        });

        // Signal delivery: with a handler, the kernel stops again at the
        // handler's first instruction without executing anything.
        if self.use_block_step && pending.is_none() && decoded.is_some() {
            if let Some(plan) = blockstep::plan(|a| self.fetch(tid, a, mode), ip) {
                if plan.insns.len() >= 2 {
                    return self.block_step(tid, &plan, mode);
                }
            }
        }

        let inject = self
            .threads
            .get_mut(&tid)
            .and_then(|t| t.pending_signal.take());
        let handled = inject.is_some_and(|s| catches_signal(tid, s));
        let id = self
            .threads
            .get(&tid)
            .map_or_else(ThreadId::default, |t| t.id);
        if let Some(signo) = inject {
            self.stats.signals += 1;
            if !handled {
                self.push(
                    id,
                    ExecItem::Event(Event::Signal {
                        signo,
                        from_ip: ip,
                        handler: None,
                    }),
                );
            }
        }
        let mut step = Step {
            ip,
            mode,
            pre,
            decoded,
            is_syscall,
            handled,
            inject,
            exec_seen: false,
            entered: false,
        };
        let mut sig = inject.unwrap_or(0);
        loop {
            if !self.resume(tid, sig)? {
                return Ok(());
            }
            // A system call may wait for another thread: it goes on on its own.
            let w = if step.is_syscall && self.others(tid) {
                self.wait_briefly(tid)?
            } else {
                self.wait_for(tid)?
            };
            let Some(w) = w else {
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.in_flight = Some(step);
                }
                return Ok(());
            };
            match self.on_stop(tid, &mut step, w)? {
                Next::Done => return Ok(()),
                Next::Again(again) => sig = again,
            }
        }
    }

    /// Handles a stop of a step of thread `tid`.
    fn on_stop(&mut self, tid: libc::pid_t, step: &mut Step, w: Wait) -> Result<Next, ExecError> {
        let Some(id) = self.threads.get(&tid).map(|t| t.id) else {
            return Ok(Next::Done);
        };
        let Step {
            ip,
            mode,
            decoded,
            is_syscall,
            handled,
            ..
        } = *step;
        match w {
            Wait::Exited(code) => {
                if is_syscall && !handled && !step.entered {
                    let d = decoded.ok_or(ExecError::InvalidInsn { ip })?;
                    self.enter_syscall(id, step, d, ip.wrapping_add(u64::from(d.len)));
                }
                self.thread_ended(tid, ExitKind::Exited(code));
                Ok(Next::Done)
            }
            Wait::Killed(signo) => {
                self.thread_ended(tid, ExitKind::Killed(signo));
                Ok(Next::Done)
            }
            Wait::Stopped { event, .. } if event == libc::PTRACE_EVENT_EXEC => {
                step.exec_seen = true;
                Ok(Next::Again(0))
            }
            Wait::Stopped { event, .. }
                if event == libc::PTRACE_EVENT_CLONE
                    || event == libc::PTRACE_EVENT_FORK
                    || event == libc::PTRACE_EVENT_VFORK =>
            {
                let d = decoded.ok_or(ExecError::InvalidInsn { ip })?;
                let child = event_msg(tid)? as libc::pid_t;
                let kind = if event == libc::PTRACE_EVENT_VFORK {
                    CloneKind::Vfork
                } else if event == libc::PTRACE_EVENT_FORK || tgid_of(child) != Some(id.pid) {
                    CloneKind::Fork
                } else {
                    CloneKind::Thread
                };
                let child_id = ThreadId {
                    pid: if kind == CloneKind::Thread {
                        id.pid
                    } else {
                        child as u32
                    },
                    tid: child as u32,
                };
                // The creator's call is queued now: the child may run before
                // it returns (vfork waits for the child).
                if !step.entered {
                    self.enter_syscall(id, step, d, ip.wrapping_add(u64::from(d.len)));
                    step.entered = true;
                }
                self.push(
                    id,
                    ExecItem::Event(Event::Clone {
                        child: child_id,
                        kind,
                    }),
                );
                self.unborn.insert(child, child_id);
                Ok(Next::Again(0))
            }
            Wait::Stopped { sig: s, .. } if s == libc::SIGTRAP => {
                let regs = get_regs(tid)?;
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.regs = regs;
                }
                let now = regs.rip;
                if handled {
                    // Stopped at the handler: nothing retired.
                    let from_ip = frame_ip(tid, &regs).unwrap_or(ip);
                    self.push(
                        id,
                        ExecItem::Event(Event::Signal {
                            signo: step.inject.unwrap_or(0),
                            from_ip,
                            handler: Some(now),
                        }),
                    );
                    return Ok(Next::Done);
                }
                if now == ip && siginfo_code(tid).is_some_and(|c| c <= 0) {
                    // A SIGTRAP sent by a process, not our step: it is
                    // pending delivery and nothing executed.
                    self.set_pending(tid, libc::SIGTRAP);
                    return Ok(Next::Done);
                }
                let d = decoded.ok_or(ExecError::InvalidInsn { ip })?;
                if d.rep_string && now == ip {
                    // One iteration of a REP string instruction.
                    return Ok(Next::Again(0));
                }
                if !step.entered {
                    self.push_retired(id, ip, d, mode, now);
                }
                if is_syscall {
                    // A SIGTRAP the thread sent itself (tkill) merges with
                    // the step's trap (one pending non-RT signal per
                    // queue); si_code tells, and it must still be delivered.
                    if siginfo_code(tid).is_some_and(|c| c <= 0) {
                        self.set_pending(tid, libc::SIGTRAP);
                    }
                    self.after_syscall(tid, step, d)?;
                } else if d.kernel_entry == Some(KernelEntry::Int3)
                    && siginfo_code(tid) == Some(SI_KERNEL)
                {
                    // The program's own breakpoint: deliver its SIGTRAP.
                    self.set_pending(tid, libc::SIGTRAP);
                }
                Ok(Next::Done)
            }
            Wait::Stopped { sig: s, .. } => {
                if siginfo_code(tid).is_none() {
                    // A group-stop (job control): just resume.
                    return Ok(Next::Again(0));
                }
                let regs = get_regs(tid)?;
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.regs = regs;
                }
                if regs.rip != ip || step.entered {
                    // The instruction retired before the signal arrived.
                    if let Some(d) = decoded {
                        if !step.entered {
                            self.push_retired(id, ip, d, mode, regs.rip);
                        }
                        if is_syscall {
                            self.after_syscall(tid, step, d)?;
                        }
                    }
                }
                self.set_pending(tid, s);
                Ok(Next::Done)
            }
        }
    }

    fn set_pending(&mut self, tid: libc::pid_t, sig: i32) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.pending_signal = Some(sig);
        }
    }

    /// One `PTRACE_SINGLEBLOCK` over a planned straight-line stretch (no
    /// kernel entry in it, so it never waits for another thread).
    fn block_step(
        &mut self,
        tid: libc::pid_t,
        plan: &BlockPlan,
        mode: ExecMode,
    ) -> Result<(), ExecError> {
        if ptrace(PTRACE_SINGLEBLOCK, tid, 0, 0) < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
                return self.resume(tid, 0).map(|_| ());
            }
            return Err(os_err("PTRACE_SINGLEBLOCK"));
        }
        self.stats.stops += 1;
        self.stats.block_steps += 1;
        let Some(w) = self.wait_for(tid)? else {
            return Ok(());
        };
        let stop = match w {
            // Killed from outside mid-stretch: which instructions ran is unknown.
            Wait::Exited(code) => {
                self.thread_ended(tid, ExitKind::Exited(code));
                return Ok(());
            }
            Wait::Killed(signo) => {
                self.thread_ended(tid, ExitKind::Killed(signo));
                return Ok(());
            }
            Wait::Stopped { sig, event } if sig == libc::SIGTRAP && event == 0 => {
                let regs = get_regs(tid)?;
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.regs = regs;
                }
                BlockStop::Branch(regs.rip)
            }
            Wait::Stopped { sig, .. } => {
                let regs = get_regs(tid)?;
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.regs = regs;
                }
                // A group-stop has no siginfo and delivers nothing.
                if siginfo_code(tid).is_some() {
                    self.set_pending(tid, sig);
                }
                BlockStop::Signal(regs.rip)
            }
        };
        let path = blockstep::resolve(plan, stop).ok_or(ExecError::Os {
            what: "block step stopped outside its planned stretch",
            source: std::io::Error::from(std::io::ErrorKind::InvalidData),
        })?;
        let id = self
            .threads
            .get(&tid)
            .map_or_else(ThreadId::default, |t| t.id);
        for (ip, d, next) in path {
            self.push_retired(id, ip, d, mode, next);
        }
        Ok(())
    }

    fn push_retired(
        &mut self,
        id: ThreadId,
        ip: u64,
        d: DecodedInsn,
        mode: ExecMode,
        next_ip: u64,
    ) {
        self.stats.retired += 1;
        self.slice = self.slice.saturating_sub(1);
        self.push(
            id,
            ExecItem::Insn(Retired {
                ip,
                next_ip,
                len: d.len,
                class: d.class,
                mode,
                kernel: false,
            }),
        );
    }

    /// Queues the system call instruction of `step` (going to `next_ip`) and
    /// its entry.
    fn enter_syscall(&mut self, id: ThreadId, step: &Step, d: DecodedInsn, next_ip: u64) {
        self.push_retired(id, step.ip, d, step.mode, next_ip);
        let (nr, args) = Self::syscall_args(
            &step.pre,
            d.kernel_entry.unwrap_or(KernelEntry::Syscall),
            step.mode,
        );
        self.stats.syscalls += 1;
        self.push(id, ExecItem::Event(Event::SyscallEnter { nr, args }));
    }

    fn after_syscall(
        &mut self,
        tid: libc::pid_t,
        step: &Step,
        d: DecodedInsn,
    ) -> Result<(), ExecError> {
        let Some((id, regs)) = self.threads.get(&tid).map(|t| (t.id, t.regs)) else {
            return Ok(());
        };
        let (nr, _) = Self::syscall_args(
            &step.pre,
            d.kernel_entry.unwrap_or(KernelEntry::Syscall),
            step.mode,
        );
        if !step.entered {
            let (nr, args) = Self::syscall_args(
                &step.pre,
                d.kernel_entry.unwrap_or(KernelEntry::Syscall),
                step.mode,
            );
            self.stats.syscalls += 1;
            self.push(id, ExecItem::Event(Event::SyscallEnter { nr, args }));
        }
        let new_mode = mode_of(regs.cs);
        if step.exec_seen {
            if let Some(s) = self.spaces.get_mut(&id.pid) {
                s.fresh.clear();
            }
            self.push(
                id,
                ExecItem::Event(Event::Exec {
                    pid: id.pid,
                    path: exe_path(tid),
                }),
            );
        }
        let ret = if new_mode == ExecMode::Bit64
            && !step.exec_seen
            && d.kernel_entry == Some(KernelEntry::Syscall)
            && step.mode == ExecMode::Bit64
        {
            regs.rax as i64
        } else {
            i64::from(regs.rax as u32 as i32)
        };
        self.push(id, ExecItem::Event(Event::SyscallExit { nr, ret }));
        // Any system call may have changed the map (mmap, munmap, mprotect,
        // brk, mremap, execve, shmat...): compare, whatever the ABI.
        let maps = read_maps(tid)?;
        let space = self.spaces.entry(id.pid).or_default();
        if maps != space.maps {
            space.fresh.clear();
            space.maps = maps.clone();
            self.push(id, ExecItem::Event(Event::Mappings(maps)));
        }
        Ok(())
    }
}

/// The program file of a process.
fn exe_path(tid: libc::pid_t) -> String {
    std::fs::read_link(format!("/proc/{tid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The memory map of a process.
fn read_maps(tid: libc::pid_t) -> Result<Vec<Mapping>, ExecError> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/maps"))?;
    parse_maps(&text).map_err(|e| ExecError::Os {
        what: "parsing /proc/pid/maps",
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// The process (thread group) of a thread, from /proc.
fn tgid_of(tid: libc::pid_t) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `PTRACE_GETEVENTMSG`: the new thread's id at a clone/fork/vfork stop.
fn event_msg(tid: libc::pid_t) -> Result<u64, ExecError> {
    let mut msg: libc::c_ulong = 0;
    if ptrace(
        libc::PTRACE_GETEVENTMSG,
        tid,
        0,
        &mut msg as *mut libc::c_ulong as u64,
    ) < 0
    {
        return Err(os_err("PTRACE_GETEVENTMSG"));
    }
    Ok(msg)
}

/// The interrupted IP saved in a 64-bit signal frame at the handler entry.
fn frame_ip(tid: libc::pid_t, regs: &libc::user_regs_struct) -> Option<u64> {
    if mode_of(regs.cs) != ExecMode::Bit64 {
        return None;
    }
    // rt_sigframe: pretcode, then ucontext (flags, link, 24-byte stack),
    // then sigcontext whose 17th quadword is RIP.
    let at = regs.rsp.checked_add(8 + 8 + 8 + 24 + 16 * 8)?;
    let mut b = [0u8; 8];
    (read_mem(tid, at, &mut b) == 8).then(|| u64::from_le_bytes(b))
}

impl ExecutionSource for Tracer {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                self.yielded.follow(&item);
                return Ok(Some(item));
            }
            self.prune_ended();
            if self.finished {
                return Ok(None);
            }
            if let Err(e) = self.schedule() {
                self.kill_all();
                return Err(e);
            }
        }
    }

    fn memory(&self) -> &CodeMemory {
        self.spaces
            .get(&self.yielded.current().pid)
            .map_or(&self.no_code, |s| &s.mem)
    }

    fn process_memory(&self, pid: u32) -> Option<&CodeMemory> {
        self.spaces.get(&pid).map(|s| &s.mem)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if !self.finished {
            self.kill_all();
        }
    }
}

/// [`probe_block_step`], once per process.
pub fn block_step_support() -> Result<BlockStep, ExecError> {
    // The probe's error is shared by every later call (it is not Clone): each
    // caller gets it back as the source of its own.
    static PROBED: std::sync::OnceLock<Result<BlockStep, std::sync::Arc<ExecError>>> =
        std::sync::OnceLock::new();
    PROBED
        .get_or_init(|| probe_block_step().map_err(std::sync::Arc::new))
        .clone()
        .map_err(|e| ExecError::Os {
            what: "block-step probe",
            source: std::io::Error::other(e),
        })
}

/// Finds out whether `PTRACE_SINGLEBLOCK` steps by taken branch on this
/// machine: traces a forked child spinning in a loop of eight NOPs and a JMP,
/// and looks at where eight block-steps stop.
pub fn probe_block_step() -> Result<BlockStep, ExecError> {
    // SAFETY: the child only calls ptrace/raise and then spins in asm.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(os_err("fork"));
    }
    if pid == 0 {
        // SAFETY: child side: async-signal-safe calls, then a loop that never returns.
        unsafe {
            libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize);
            libc::raise(libc::SIGSTOP);
            std::arch::asm!(
                "2:",
                "nop",
                "nop",
                "nop",
                "nop",
                "nop",
                "nop",
                "nop",
                "nop",
                "jmp 2b",
                options(noreturn)
            );
        }
    }
    let result = (|| {
        match wait_child(pid)? {
            Wait::Stopped { sig, .. } if sig == libc::SIGSTOP => {}
            _ => {
                return Err(ExecError::Os {
                    what: "block-step probe child",
                    source: std::io::Error::from(std::io::ErrorKind::Other),
                })
            }
        }
        let mut ips = Vec::new();
        for _ in 0..10 {
            if ptrace(PTRACE_SINGLEBLOCK, pid, 0, 0) < 0 {
                return Ok(BlockStep::Unsupported);
            }
            match wait_child(pid)? {
                Wait::Stopped { .. } => ips.push(get_regs(pid)?.rip),
                _ => break,
            }
        }
        // The first stops leave the libc raise() path; judge the last eight.
        let tail = ips.get(ips.len().saturating_sub(8)..).unwrap_or(&[]);
        let same = tail.windows(2).filter(|w| w[0] == w[1]).count();
        Ok(if tail.len() >= 4 && same + 1 >= tail.len() {
            BlockStep::Honored
        } else {
            BlockStep::NotHonored
        })
    })();
    kill_and_reap(pid);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_execvp() {
        assert!(resolve_program(OsStr::new("sh")).is_ok());
        assert!(matches!(
            resolve_program(OsStr::new("no-such-command-xyz")),
            Err(ExecError::CommandNotFound(_))
        ));
        assert!(matches!(
            resolve_program(OsStr::new("/etc/passwd")),
            Err(ExecError::CommandNotFound(_))
        ));
        assert!(matches!(
            resolve_program(OsStr::new("")),
            Err(ExecError::CommandNotFound(_))
        ));
    }

    #[test]
    fn block_step_probe_answers() {
        let r = probe_block_step().unwrap();
        assert!(matches!(
            r,
            BlockStep::Unsupported | BlockStep::NotHonored | BlockStep::Honored
        ));
    }
}
