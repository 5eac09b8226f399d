//! A ptrace tracer for real Linux x86-64 processes: the ground-truth
//! sequence of retired user-mode instructions, one single-step at a time.
//!
//! The child is started with `fork`, `PTRACE_TRACEME` and `execve`, optionally
//! with address-space randomization off so runs repeat exactly. Each step
//! reads the registers, decodes the instruction at RIP from code pages read
//! out of the child (cached per page and re-checked every step, so code that
//! changes is seen), and issues `PTRACE_SINGLESTEP`.
//!
//! Only the initial thread is traced; threads and children it creates run
//! untraced. All calls must come from the thread that spawned the tracee
//! (a ptrace rule), so [`Tracer`] is not `Send`.
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

use std::collections::{HashSet, VecDeque};
use std::ffi::{CString, OsStr, OsString};
use std::io::IsTerminal;
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
    CodeMemory, Event, ExecError, ExecItem, ExecMode, ExecutionSource, ExitKind, Mapping, Retired,
    StopReason, PAGE_SIZE,
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
    /// Print progress to stderr about once a second, if stderr is a terminal.
    pub progress: bool,
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
            progress: false,
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
    let mut status = 0;
    loop {
        // SAFETY: plain FFI call with a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return Err(os_err("waitpid"));
    }
    Ok(if libc::WIFEXITED(status) {
        Wait::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Wait::Killed(libc::WTERMSIG(status))
    } else {
        Wait::Stopped {
            sig: libc::WSTOPSIG(status),
            event: (status >> 16) & 0xff,
        }
    })
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
}

/// Forks and executes `program` under `PTRACE_TRACEME`; the child stops with
/// SIGTRAP at its first instruction (not yet waited for).
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
            libc::execve(c_path.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr());
            let err: i32 = *libc::__errno_location();
            libc::write(wr, (&err as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(wr) };
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
        let _ = wait_child(pid);
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

/// A traced process as an [`ExecutionSource`].
pub struct Tracer {
    pid: libc::pid_t,
    opts: TraceOptions,
    regs: libc::user_regs_struct,
    mem: CodeMemory,
    /// Pages known to match the child right now.
    fresh: HashSet<u64>,
    maps: Vec<Mapping>,
    queue: VecDeque<ExecItem>,
    /// A signal to deliver with the next resume.
    pending_signal: Option<i32>,
    stats: TraceStats,
    started: Instant,
    last_progress: Instant,
    /// The child is gone (or was never there).
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
            },
        )?;
        let use_block_step =
            opts.block_step && block_step_support().is_ok_and(|b| b == BlockStep::Honored);
        let now = Instant::now();
        let mut t = Tracer {
            pid,
            opts,
            // SAFETY: plain data, overwritten below.
            regs: unsafe { std::mem::zeroed() },
            mem: CodeMemory::new(),
            fresh: HashSet::new(),
            maps: Vec::new(),
            queue: VecDeque::new(),
            pending_signal: None,
            stats: TraceStats::default(),
            started: now,
            last_progress: now,
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
                return Err(ExecError::Os {
                    what: "tracee stopped unexpectedly at exec",
                    source: std::io::Error::from(std::io::ErrorKind::Other),
                })
            }
        }
        let options = libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_EXITKILL;
        if ptrace(libc::PTRACE_SETOPTIONS, pid, 0, options as u64) < 0 {
            return Err(os_err("PTRACE_SETOPTIONS"));
        }
        t.use_block_step = use_block_step;
        t.regs = get_regs(pid)?;
        t.queue.push_back(ExecItem::Event(Event::Exec {
            pid: pid as u32,
            path: t.exe_path(),
        }));
        t.maps = t.read_maps()?;
        t.queue
            .push_back(ExecItem::Event(Event::Mappings(t.maps.clone())));
        Ok(t)
    }

    /// The traced process id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Counters so far.
    pub fn stats(&self) -> TraceStats {
        TraceStats {
            elapsed: self.started.elapsed(),
            ..self.stats
        }
    }

    /// The memory map as last read.
    pub fn mappings(&self) -> &[Mapping] {
        &self.maps
    }

    fn exe_path(&self) -> String {
        std::fs::read_link(format!("/proc/{}/exe", self.pid))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn read_maps(&self) -> Result<Vec<Mapping>, ExecError> {
        let text = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))?;
        parse_maps(&text).map_err(|e| ExecError::Os {
            what: "parsing /proc/pid/maps",
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// Makes sure the page at `base` is captured and current.
    fn load_page(&mut self, base: u64) -> bool {
        if self.fresh.contains(&base) {
            return true;
        }
        let mut page = vec![0u8; PAGE_SIZE as usize];
        self.stats.page_reads += 1;
        if read_mem(self.pid, base, &mut page) != page.len() {
            return false;
        }
        self.mem.set_page(base, &page);
        self.fresh.insert(base);
        true
    }

    /// Decodes the instruction at `ip` from captured pages, loading them as
    /// needed; `None` if the bytes are unreadable or invalid (the step faults).
    fn fetch(&mut self, ip: u64, mode: ExecMode) -> Option<DecodedInsn> {
        if self.opts.verify_code {
            let mut live = [0u8; 15];
            let n = read_mem(self.pid, ip, &mut live);
            let mut cached = [0u8; 15];
            let m = self.mem.read(ip, &mut cached);
            let k = n.min(m);
            if k == 0 || live[..k] != cached[..k] {
                // Stale or missing: drop what we hold for these pages.
                self.fresh.remove(&page_base(ip));
                self.fresh.remove(&page_base(ip.wrapping_add(14)));
            }
        }
        if !self.load_page(page_base(ip)) {
            return None;
        }
        let first = decode_bytes(
            self.mem
                .page(ip)
                .map(|p| &p[(ip - page_base(ip)) as usize..])?,
            ip,
            mode,
        );
        match first {
            Ok(d) if page_base(ip.wrapping_add(u64::from(d.len) - 1)) == page_base(ip) => Some(d),
            _ => {
                // Possibly cut by the page end: needs the next page too.
                if !self.load_page(page_base(ip).wrapping_add(PAGE_SIZE)) {
                    return first.ok().filter(|d| {
                        page_base(ip.wrapping_add(u64::from(d.len) - 1)) == page_base(ip)
                    });
                }
                super::insn::decode_at(&self.mem, ip, mode).ok()
            }
        }
    }

    fn kill_child(&mut self) {
        if !self.finished {
            kill_and_reap(self.pid);
            self.finished = true;
        }
    }

    fn stop(&mut self, reason: StopReason) {
        self.kill_child();
        self.queue
            .push_back(ExecItem::Event(Event::Stopped(reason)));
    }

    fn progress(&mut self) {
        if self.stats.stops % 4096 != 0 || !self.opts.progress {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.last_progress) < Duration::from_secs(1) {
            return;
        }
        self.last_progress = now;
        if std::io::stderr().is_terminal() {
            let secs = self.started.elapsed().as_secs_f64();
            eprint!(
                "\r{} instructions, {:.0} steps/s   ",
                self.stats.retired,
                self.stats.stops as f64 / secs.max(1e-9)
            );
        }
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

    /// Steps one instruction (or one signal delivery), queueing what happened.
    fn advance(&mut self) -> Result<(), ExecError> {
        if let Some(limit) = self.opts.step_limit {
            if self.stats.retired >= limit {
                self.stop(StopReason::StepLimit);
                return Ok(());
            }
        }
        if self
            .opts
            .stop_flag
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            self.stop(StopReason::Interrupted);
            return Ok(());
        }
        self.progress();
        let pre = self.regs;
        let ip = pre.rip;
        let mode = mode_of(pre.cs);
        let decoded = self.fetch(ip, mode);
        let is_syscall = decoded.is_some_and(|d| {
            matches!(
                d.kernel_entry,
                Some(KernelEntry::Syscall | KernelEntry::Sysenter | KernelEntry::Int(0x80))
            )
        });

        // Signal delivery: with a handler, the kernel stops again at the
        // handler's first instruction without executing anything.
        if self.use_block_step && self.pending_signal.is_none() && decoded.is_some() {
            if let Some(plan) = blockstep::plan(|a| self.fetch(a, mode), ip) {
                if plan.insns.len() >= 2 {
                    return self.block_step(&plan, mode);
                }
            }
        }

        let inject = self.pending_signal.take();
        let handled = inject.is_some_and(|s| catches_signal(self.pid, s));
        if let Some(signo) = inject {
            self.stats.signals += 1;
            if !handled {
                self.queue.push_back(ExecItem::Event(Event::Signal {
                    signo,
                    from_ip: ip,
                    handler: None,
                }));
            }
        }
        let mut sig = inject.unwrap_or(0);
        let mut exec_seen = false;
        loop {
            if ptrace(libc::PTRACE_SINGLESTEP, self.pid, 0, sig as u64) < 0 {
                return Err(os_err("PTRACE_SINGLESTEP"));
            }
            sig = 0;
            self.stats.stops += 1;
            match wait_child(self.pid)? {
                Wait::Exited(code) => {
                    self.finished = true;
                    if is_syscall && !handled {
                        let d = decoded.ok_or(ExecError::InvalidInsn { ip })?;
                        self.push_retired(ip, d, mode, ip.wrapping_add(u64::from(d.len)));
                        let (nr, args) = Self::syscall_args(
                            &pre,
                            d.kernel_entry.unwrap_or(KernelEntry::Syscall),
                            mode,
                        );
                        self.stats.syscalls += 1;
                        self.queue
                            .push_back(ExecItem::Event(Event::SyscallEnter { nr, args }));
                    }
                    self.queue
                        .push_back(ExecItem::Event(Event::Exit(ExitKind::Exited(code))));
                    return Ok(());
                }
                Wait::Killed(signo) => {
                    self.finished = true;
                    self.queue
                        .push_back(ExecItem::Event(Event::Exit(ExitKind::Killed(signo))));
                    return Ok(());
                }
                Wait::Stopped { event, .. } if event == libc::PTRACE_EVENT_EXEC => {
                    exec_seen = true;
                    continue;
                }
                Wait::Stopped { sig: s, .. } if s == libc::SIGTRAP => {
                    self.regs = get_regs(self.pid)?;
                    let now = self.regs.rip;
                    if handled {
                        // Stopped at the handler: nothing retired.
                        let from_ip = self.frame_ip().unwrap_or(ip);
                        self.queue.push_back(ExecItem::Event(Event::Signal {
                            signo: inject.unwrap_or(0),
                            from_ip,
                            handler: Some(now),
                        }));
                        return Ok(());
                    }
                    if now == ip && siginfo_code(self.pid).is_some_and(|c| c <= 0) {
                        // A SIGTRAP sent by a process, not our step: it is
                        // pending delivery and nothing executed.
                        self.pending_signal = Some(libc::SIGTRAP);
                        return Ok(());
                    }
                    let d = decoded.ok_or(ExecError::InvalidInsn { ip })?;
                    if d.rep_string && now == ip {
                        // One iteration of a REP string instruction.
                        continue;
                    }
                    self.push_retired(ip, d, mode, now);
                    if is_syscall {
                        // A SIGTRAP the thread sent itself (tkill) merges with
                        // the step's trap (one pending non-RT signal per
                        // queue); si_code tells, and it must still be delivered.
                        if siginfo_code(self.pid).is_some_and(|c| c <= 0) {
                            self.pending_signal = Some(libc::SIGTRAP);
                        }
                        self.after_syscall(&pre, d, mode, exec_seen)?;
                    } else if d.kernel_entry == Some(KernelEntry::Int3)
                        && siginfo_code(self.pid) == Some(SI_KERNEL)
                    {
                        // The program's own breakpoint: deliver its SIGTRAP.
                        self.pending_signal = Some(libc::SIGTRAP);
                    }
                    return Ok(());
                }
                Wait::Stopped { sig: s, .. } => {
                    if siginfo_code(self.pid).is_none() {
                        // A group-stop (job control): just resume.
                        continue;
                    }
                    self.regs = get_regs(self.pid)?;
                    if self.regs.rip != ip {
                        // The instruction retired before the signal arrived.
                        if let Some(d) = decoded {
                            self.push_retired(ip, d, mode, self.regs.rip);
                            if is_syscall {
                                self.after_syscall(&pre, d, mode, exec_seen)?;
                            }
                        }
                    }
                    self.pending_signal = Some(s);
                    return Ok(());
                }
            }
        }
    }

    /// One `PTRACE_SINGLEBLOCK` over a planned straight-line stretch.
    fn block_step(&mut self, plan: &BlockPlan, mode: ExecMode) -> Result<(), ExecError> {
        if ptrace(PTRACE_SINGLEBLOCK, self.pid, 0, 0) < 0 {
            return Err(os_err("PTRACE_SINGLEBLOCK"));
        }
        self.stats.stops += 1;
        self.stats.block_steps += 1;
        let stop = match wait_child(self.pid)? {
            // Killed from outside mid-stretch: which instructions ran is unknown.
            Wait::Exited(code) => {
                self.finished = true;
                self.queue
                    .push_back(ExecItem::Event(Event::Exit(ExitKind::Exited(code))));
                return Ok(());
            }
            Wait::Killed(signo) => {
                self.finished = true;
                self.queue
                    .push_back(ExecItem::Event(Event::Exit(ExitKind::Killed(signo))));
                return Ok(());
            }
            Wait::Stopped { sig, event } if sig == libc::SIGTRAP && event == 0 => {
                self.regs = get_regs(self.pid)?;
                BlockStop::Branch(self.regs.rip)
            }
            Wait::Stopped { sig, .. } => {
                self.regs = get_regs(self.pid)?;
                // A group-stop has no siginfo and delivers nothing.
                if siginfo_code(self.pid).is_some() {
                    self.pending_signal = Some(sig);
                }
                BlockStop::Signal(self.regs.rip)
            }
        };
        let path = blockstep::resolve(plan, stop).ok_or(ExecError::Os {
            what: "block step stopped outside its planned stretch",
            source: std::io::Error::from(std::io::ErrorKind::InvalidData),
        })?;
        for (ip, d, next) in path {
            self.push_retired(ip, d, mode, next);
        }
        Ok(())
    }

    /// The interrupted IP saved in a 64-bit signal frame at the handler entry.
    fn frame_ip(&self) -> Option<u64> {
        if mode_of(self.regs.cs) != ExecMode::Bit64 {
            return None;
        }
        // rt_sigframe: pretcode, then ucontext (flags, link, 24-byte stack),
        // then sigcontext whose 17th quadword is RIP.
        let at = self.regs.rsp.checked_add(8 + 8 + 8 + 24 + 16 * 8)?;
        let mut b = [0u8; 8];
        (read_mem(self.pid, at, &mut b) == 8).then(|| u64::from_le_bytes(b))
    }

    fn push_retired(&mut self, ip: u64, d: DecodedInsn, mode: ExecMode, next_ip: u64) {
        self.stats.retired += 1;
        self.queue.push_back(ExecItem::Insn(Retired {
            ip,
            next_ip,
            len: d.len,
            class: d.class,
            mode,
            kernel: false,
        }));
    }

    fn after_syscall(
        &mut self,
        pre: &libc::user_regs_struct,
        d: DecodedInsn,
        mode: ExecMode,
        exec_seen: bool,
    ) -> Result<(), ExecError> {
        let (nr, args) =
            Self::syscall_args(pre, d.kernel_entry.unwrap_or(KernelEntry::Syscall), mode);
        self.stats.syscalls += 1;
        self.queue
            .push_back(ExecItem::Event(Event::SyscallEnter { nr, args }));
        let new_mode = mode_of(self.regs.cs);
        if exec_seen {
            self.fresh.clear();
            self.queue.push_back(ExecItem::Event(Event::Exec {
                pid: self.pid as u32,
                path: self.exe_path(),
            }));
        }
        let ret = if new_mode == ExecMode::Bit64
            && !exec_seen
            && d.kernel_entry == Some(KernelEntry::Syscall)
            && mode == ExecMode::Bit64
        {
            self.regs.rax as i64
        } else {
            i64::from(self.regs.rax as u32 as i32)
        };
        self.queue
            .push_back(ExecItem::Event(Event::SyscallExit { nr, ret }));
        // Any system call may have changed the map (mmap, munmap, mprotect,
        // brk, mremap, execve, shmat...): compare, whatever the ABI.
        let maps = self.read_maps()?;
        if maps != self.maps {
            self.fresh.clear();
            self.maps = maps;
            self.queue
                .push_back(ExecItem::Event(Event::Mappings(self.maps.clone())));
        }
        Ok(())
    }
}

impl ExecutionSource for Tracer {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Ok(Some(item));
            }
            if self.finished {
                if self.opts.progress && std::io::stderr().is_terminal() && self.stats.stops >= 4096
                {
                    eprintln!();
                    self.opts.progress = false;
                }
                return Ok(None);
            }
            if let Err(e) = self.advance() {
                self.kill_child();
                return Err(e);
            }
        }
    }

    fn memory(&self) -> &CodeMemory {
        &self.mem
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.kill_child();
    }
}

/// [`probe_block_step`], once per process.
pub fn block_step_support() -> Result<BlockStep, ExecError> {
    static PROBED: std::sync::OnceLock<Result<BlockStep, String>> = std::sync::OnceLock::new();
    PROBED
        .get_or_init(|| probe_block_step().map_err(|e| e.to_string()))
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
