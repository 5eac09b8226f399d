//! A fast execution source for long programs: valgrind's Lackey tool with
//! one guest instruction per superblock, so the superblock trace is the
//! instruction trace (about 0.8 M instructions/s here, against 15-30 k for
//! single-stepping).
//!
//! Valgrind runs as a ptrace child that is merely continued. It follows the
//! program's children (`--trace-children=yes`: every exec runs under a new
//! valgrind) and writes one log per process and program (`--log-file` with
//! `%p`; the recorder renames a log at each exec so that the next one
//! starts afresh). The code pages that held executed instructions are read
//! from each process while it still has them: at its exit
//! (`PTRACE_EVENT_EXIT`) and before each `execve` (a seccomp filter stops
//! the process there). System calls, signals and which thread runs come from
//! `--trace-syscalls`, `--trace-signals` and `--trace-sched`: valgrind runs
//! one thread at a time, so the instructions between two "acquired lock"
//! lines are one thread's. New threads are matched to the thread ids their
//! clone calls returned, in order.
//!
//! The whole run is recorded first, then replayed as an [`ExecutionSource`]:
//! threads of a process in the order valgrind ran them, and a child process
//! in full right after the call that created it (the order of the processes
//! between themselves is not known; each thread's own order is exact).
//!
//! The program runs on valgrind's synthetic CPU, so its path can differ from
//! a native run wherever it depends on CPUID (ifunc selection in libc) or on
//! where valgrind places things; for the same path the recorded sequence is
//! the same as [`super::ptrace::Tracer`]'s (checked in the tests). Differences
//! of note:
//! - [`Event::Mappings`] is the map of a process (per program it ran) at its
//!   end, given once at its start, and includes valgrind's own mappings.
//! - Signals that are ignored are not reported; system call arguments and
//!   results are parsed from valgrind's trace text (best effort; a result
//!   valgrind did not print is 0).
//! - A process valgrind could not run (an exec it did not follow) is named
//!   by an [`Event::Untraced`].
//!
//! Ctrl-C ([`ValgrindOptions::stop_flag`]) stops the valgrind processes and
//! keeps what they did up to there; the replay then ends with
//! [`Event::Stopped`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::insn::decode_at;
use super::memory::page_base;
use super::ptrace::{
    kill_and_reap, ptrace, read_mem, resolve_program, spawn_traced, wait_child_once, SpawnFlags,
    Wait,
};
use super::{
    BranchClass, CloneKind, CodeMemory, Event, ExecError, ExecItem, ExecMode, ExecutionSource,
    ExitKind, Mapping, Retired, StopReason, ThreadId, PAGE_SIZE,
};

/// How to run valgrind.
#[derive(Clone, Debug)]
pub struct ValgrindOptions {
    /// The valgrind launcher (searched on `PATH`).
    pub valgrind: OsString,
    /// Turn address-space randomization off. Default: on.
    pub disable_aslr: bool,
    /// When this becomes true while valgrind runs (Ctrl-C), its processes
    /// are stopped and what they did so far is kept; the flag is then
    /// cleared, and if it becomes true again during the replay, the replay
    /// ends there.
    pub stop_flag: Option<Arc<AtomicBool>>,
    /// Snapshot requests (SIGUSR2), as the QEMU source takes them: `.0` is
    /// set when one comes. Valgrind runs the program before the replay, so a
    /// request is kept as the number of instructions valgrind had reported
    /// then, and the replay sets `.1` (the recorder's
    /// [`crate::record::SimRecording::snapshot_requests`]) once it has
    /// yielded that many: one snapshot per request, where it came.
    pub snapshots: Option<(Arc<AtomicBool>, Arc<AtomicBool>)>,
}

impl Default for ValgrindOptions {
    fn default() -> Self {
        Self {
            valgrind: OsString::from("valgrind"),
            disable_aslr: true,
            stop_flag: None,
            snapshots: None,
        }
    }
}

const NR_CLONE: u64 = 56;
const NR_FORK: u64 = 57;
const NR_VFORK: u64 = 58;
const NR_EXECVE: u64 = 59;
const NR_EXIT: u64 = 60;
const NR_EXECVEAT: u64 = 322;
const NR_CLONE3: u64 = 435;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_THREAD: u64 = 0x1_0000;

/// What valgrind's trace said besides instruction addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RawEvent {
    Syscall {
        nr: u64,
        args: [u64; 6],
        ret: Option<i64>,
    },
    Signal {
        signo: i32,
        from_ip: Option<u64>,
    },
}

fn hex_after(s: &str, pat: &str) -> Option<u64> {
    let rest = &s[s.find(pat)? + pat.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(rest.len());
    u64::from_str_radix(rest.get(..end)?, 16).ok()
}

fn dec_after(s: &str, pat: &str) -> Option<u64> {
    let rest = &s[s.find(pat)? + pat.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest.get(..end)?.parse().ok()
}

/// Arguments from `name ( a, 0x1(/path), c )`: the leading number of each.
fn parse_args(s: &str) -> [u64; 6] {
    let mut args = [0u64; 6];
    for (a, t) in args.iter_mut().zip(arg_texts(s)) {
        let t = t.trim();
        *a = if let Some(h) = t.strip_prefix("0x") {
            let end = h.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(h.len());
            u64::from_str_radix(&h[..end], 16).unwrap_or(0)
        } else {
            let end = t
                .char_indices()
                .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                .map_or(t.len(), |(i, _)| i);
            t[..end].parse::<i64>().map_or(0, |v| v as u64)
        };
    }
    args
}

/// The argument texts of `name ( a, 0x1(/path), c )`.
fn arg_texts(s: &str) -> Vec<&str> {
    let Some(open) = s.find('(') else {
        return Vec::new();
    };
    let mut depth = 0;
    let mut tokens = Vec::new();
    let mut start = open + 1;
    for (i, c) in s.char_indices().skip_while(|(i, _)| *i <= open) {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                tokens.push(&s[start..i]);
                break;
            }
            ')' => depth -= 1,
            ',' if depth == 0 => {
                tokens.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    tokens
}

/// The string valgrind shows for a pointer argument: `0x1299a0(/bin/true)`.
fn arg_string(arg: &str) -> Option<String> {
    let (_, rest) = arg.split_once('(')?;
    Some(rest.strip_suffix(')')?.to_string())
}

/// One thread's instructions within a log (one valgrind thread, from its
/// start to its end): addresses as zigzag LEB128 deltas, and the events
/// after each.
#[derive(Clone, Debug, Default)]
struct Stream {
    /// Valgrind's thread number (0: not known yet).
    vg_tid: u32,
    addrs: Vec<u8>,
    count: u64,
    last: u64,
    /// `(n, event)`: the event came after the first `n` instructions.
    events: Vec<(u64, RawEvent)>,
    last_syscall: Option<usize>,
}

impl Stream {
    fn push_addr(&mut self, a: u64) {
        let mut z = {
            let d = a.wrapping_sub(self.last) as i64;
            ((d << 1) ^ (d >> 63)) as u64
        };
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                self.addrs.push(b);
                break;
            }
            self.addrs.push(b | 0x80);
        }
        self.last = a;
        self.count += 1;
    }
}

/// What one valgrind log says: one process running one program (from its
/// start, fork or exec to its exit or next exec).
#[derive(Clone, Debug, Default)]
struct LogText {
    streams: Vec<Stream>,
    /// The stream of each valgrind thread number now.
    by_vg: HashMap<u32, usize>,
    /// The stream that holds valgrind's lock.
    current: Option<usize>,
    /// `(stream, n)`: runs of instructions in the order valgrind ran them.
    schedule: Vec<(usize, u64)>,
    /// Page bases of executed instruction addresses.
    pages: BTreeSet<u64>,
    /// Streams of threads valgrind started, in order.
    births: Vec<usize>,
    /// `(stream, event)` of successful clone-like calls (their results are
    /// the new threads' ids, in the order of `births` for threads).
    creations: Vec<(usize, usize)>,
    /// The path of the last execve.
    exec_path: Option<String>,
    /// A signal delivery waiting for its `at 0x…` line.
    awaiting: Option<(usize, usize)>,
    partial: Vec<u8>,
    instructions: u64,
}

impl LogText {
    fn stream_of(&mut self, vg_tid: u32) -> usize {
        if let Some(&s) = self.by_vg.get(&vg_tid) {
            return s;
        }
        // The thread that runs first in a forked process's log is named by
        // its first line that says which thread it is.
        if let Some(c) = self.current.filter(|&c| self.streams[c].vg_tid == 0) {
            self.streams[c].vg_tid = vg_tid;
            self.by_vg.insert(vg_tid, c);
            return c;
        }
        self.streams.push(Stream {
            vg_tid,
            ..Stream::default()
        });
        let s = self.streams.len() - 1;
        self.by_vg.insert(vg_tid, s);
        s
    }

    fn current_stream(&mut self) -> usize {
        match self.current {
            Some(c) => c,
            None => {
                self.streams.push(Stream::default());
                let c = self.streams.len() - 1;
                self.current = Some(c);
                c
            }
        }
    }

    fn set_ret(&mut self, stream: usize, v: i64) {
        let Some(i) = self.streams[stream].last_syscall else {
            return;
        };
        if let Some((_, RawEvent::Syscall { nr, ret, .. })) = self.streams[stream].events.get_mut(i)
        {
            if ret.is_none() {
                *ret = Some(v);
                if v > 0 && matches!(*nr, NR_CLONE | NR_CLONE3 | NR_FORK | NR_VFORK) {
                    self.creations.push((stream, i));
                }
            }
        }
    }

    fn results(&mut self, stream: Option<usize>, line: &str) {
        let Some(s) = stream else {
            return;
        };
        if let Some(v) = hex_after(line, "Success(0x") {
            self.set_ret(s, v as i64);
        }
        if let Some(v) = hex_after(line, "Failure(0x") {
            self.set_ret(s, -(v as i64));
        }
        if let Some(v) = dec_after(line, "sres.isErr=True, sres.val=") {
            self.set_ret(s, -(v as i64));
        }
        if let Some(v) = dec_after(line, "sres.isErr=False, sres.val=") {
            self.set_ret(s, v as i64);
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("SB ") {
            if let Ok(a) = u64::from_str_radix(rest.trim(), 16) {
                let s = self.current_stream();
                self.streams[s].push_addr(a);
                self.pages.insert(page_base(a));
                self.instructions += 1;
                match self.schedule.last_mut() {
                    Some((last, n)) if *last == s => *n += 1,
                    _ => self.schedule.push((s, 1)),
                }
            }
            return;
        }
        // A scheduler line may follow other text on the same line.
        if let Some(at) = line.find("SCHED[") {
            let start = line[..at]
                .rfind("--")
                .map_or(0, |i| line[..i].rfind("--").unwrap_or(i));
            if start > 0 {
                self.line(&line[..start]);
            }
            let Some(tid) = dec_after(&line[at..], "SCHED[") else {
                return;
            };
            let tid = tid as u32;
            let text = &line[at..];
            if text.contains("acquired lock") {
                if text.contains("starting new thread") {
                    self.streams.push(Stream {
                        vg_tid: tid,
                        ..Stream::default()
                    });
                    let s = self.streams.len() - 1;
                    self.by_vg.insert(tid, s);
                    self.births.push(s);
                    self.current = Some(s);
                } else {
                    self.current = Some(self.stream_of(tid));
                }
            } else {
                self.stream_of(tid);
            }
            return;
        }
        let mut stream = None;
        if let Some(pos) = line.find("SYSCALL[") {
            let s = &line[pos + 8..];
            let tid = s
                .split_once(',')
                .and_then(|(_, r)| r.split_once(']'))
                .and_then(|(t, _)| t.trim().parse::<u32>().ok());
            if let Some(tid) = tid {
                let st = self.stream_of(tid);
                stream = Some(st);
                if let Some(nr) = dec_after(s, "](") {
                    let after = s.split_once(')').map_or("", |(_, r)| r);
                    if !after.trim_start().starts_with("...") {
                        if nr == NR_EXECVE || nr == NR_EXECVEAT {
                            let texts = arg_texts(after);
                            let which = usize::from(nr == NR_EXECVEAT);
                            if let Some(p) = texts.get(which).and_then(|t| arg_string(t.trim())) {
                                self.exec_path = Some(p);
                            }
                        }
                        let mut args = parse_args(after);
                        if nr == NR_CLONE {
                            // Valgrind shows clone's flags in hex without 0x.
                            args[0] = arg_texts(after)
                                .first()
                                .and_then(|t| u64::from_str_radix(t.trim(), 16).ok())
                                .unwrap_or(0);
                        }
                        let at = self.streams[st].count;
                        self.streams[st].events.push((
                            at,
                            RawEvent::Syscall {
                                nr,
                                args,
                                ret: None,
                            },
                        ));
                        self.streams[st].last_syscall = Some(self.streams[st].events.len() - 1);
                    }
                }
            }
        } else if let Some(tid) = dec_after(line, "interrupted_syscall: tid=") {
            stream = Some(self.stream_of(tid as u32));
        } else if line.contains("-->") {
            // The rest of a call printed before a scheduler line.
            stream = self.current;
        }
        self.results(stream, line);
        if let Some(signo) = dec_after(line, "delivering signal ") {
            let tid = dec_after(line, " to thread ").map_or(1, |t| t as u32);
            let s = self.stream_of(tid);
            let at = self.streams[s].count;
            self.streams[s].events.push((
                at,
                RawEvent::Signal {
                    signo: signo as i32,
                    from_ip: None,
                },
            ));
            self.awaiting = Some((s, self.streams[s].events.len() - 1));
        } else if let Some((s, i)) = self.awaiting {
            if let Some(ip) = hex_after(line, " at 0x") {
                if let Some((_, RawEvent::Signal { from_ip, .. })) =
                    self.streams[s].events.get_mut(i)
                {
                    *from_ip = Some(ip);
                }
                self.awaiting = None;
            }
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(nl) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&self.partial[start..start + nl]).into_owned();
            self.line(&line);
            start += nl + 1;
        }
        self.partial.drain(..start);
    }
}

/// The mode of an ELF program from its class byte. A script (`#!interpreter`) runs in
/// the mode of its interpreter, as the kernel would start it; interpreters may be
/// scripts themselves, up to the kernel's own limit of a few levels.
fn elf_mode(path: &Path) -> Result<ExecMode, ExecError> {
    let mut path = path.to_path_buf();
    for _ in 0..5 {
        let mut head = [0u8; 256];
        let n = std::fs::File::open(&path)
            .and_then(|mut f| f.read(&mut head))
            .map_err(ExecError::Io)?;
        let head = &head[..n];
        match head {
            [0x7f, b'E', b'L', b'F', 1, ..] => return Ok(ExecMode::Bit32),
            [0x7f, b'E', b'L', b'F', 2, ..] => return Ok(ExecMode::Bit64),
            [b'#', b'!', rest @ ..] => {
                // The interpreter is the first word of the first line.
                let line = rest.split(|&b| b == b'\n').next().unwrap_or(&[]);
                let word = line
                    .split(|b| b.is_ascii_whitespace())
                    .find(|w| !w.is_empty())
                    .unwrap_or(&[]);
                if word.is_empty() {
                    break;
                }
                path = PathBuf::from(String::from_utf8_lossy(word).into_owned());
            }
            _ => break,
        }
    }
    Err(ExecError::ExecFailed {
        command: path.to_string_lossy().into_owned(),
        source: std::io::Error::from_raw_os_error(libc::ENOEXEC),
    })
}

/// How a log's program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// It exec'd another program (the next log of the process).
    Exec,
    /// The process ended.
    Exit(ExitKind),
    /// The recording was stopped (or the process's end was not seen).
    Cut,
}

/// One process running one program: its log and its code.
#[derive(Clone, Debug)]
struct Image {
    pid: u32,
    path: String,
    mode: ExecMode,
    /// Started by an exec (or as the program), not by a fork.
    fresh: bool,
    log: LogText,
    mem: CodeMemory,
    maps: Vec<Mapping>,
    end: End,
    /// The thread of each stream.
    threads: Vec<ThreadId>,
}

/// A process valgrind runs, while it runs.
struct Proc {
    /// Its images, in order (indexes into [`Run::images`]).
    images: Vec<usize>,
    /// The log being written now and how much of it was read.
    open: Option<(PathBuf, std::fs::File)>,
    /// The next log starts afresh (after an exec, or the first program).
    next_fresh: bool,
    /// The program of the next log, and its mode.
    next_path: String,
    next_mode: ExecMode,
    stopping: bool,
    /// It ended: its log is complete.
    gone: bool,
}

/// The recording: every process's images, read as valgrind writes them.
struct Run {
    dir: PathBuf,
    images: Vec<Image>,
    procs: HashMap<u32, Proc>,
    /// Traced tasks (threads of valgrind processes): their process, and
    /// whether their first stop (a SIGSTOP of ptrace's own) has come.
    tasks: HashMap<libc::pid_t, (u32, bool)>,
    /// Logs renamed so far.
    sealed: u64,
    root: u32,
    stopped: bool,
    /// Instructions reported when each snapshot request came.
    snapshot_marks: VecDeque<u64>,
}

impl Run {
    fn log_path(&self, pid: u32) -> PathBuf {
        self.dir.join(format!("vg.{pid}"))
    }

    /// Opens the log a process's valgrind has started, if it has.
    fn open_log(&mut self, pid: u32) {
        let path = self.log_path(pid);
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if p.open.is_some() || p.gone {
            return;
        }
        let Ok(file) = std::fs::File::open(&path) else {
            return;
        };
        p.open = Some((path, file));
        let fresh = std::mem::replace(&mut p.next_fresh, false);
        self.images.push(Image {
            pid,
            path: p.next_path.clone(),
            mode: p.next_mode,
            fresh,
            log: LogText::default(),
            mem: CodeMemory::new(),
            maps: Vec::new(),
            end: End::Cut,
            threads: Vec::new(),
        });
        p.images.push(self.images.len() - 1);
    }

    /// Reads what a process's valgrind wrote since the last time.
    fn read_log(&mut self, pid: u32) {
        self.open_log(pid);
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let (Some((_, file)), Some(&img)) = (p.open.as_mut(), p.images.last()) else {
            return;
        };
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            self.images[img].log.feed(&buf[..n]);
        }
    }

    fn read_all(&mut self) {
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.read_log(pid);
        }
    }

    fn instructions(&self) -> u64 {
        self.images.iter().map(|i| i.log.instructions).sum()
    }

    /// Reads the code of a process's current image while it is still there.
    fn capture(&mut self, tid: libc::pid_t, pid: u32) -> Result<(), ExecError> {
        self.read_log(pid);
        let Some(p) = self.procs.get(&pid) else {
            return Ok(());
        };
        if p.open.is_none() {
            return Ok(());
        }
        let Some(&img) = p.images.last() else {
            return Ok(());
        };
        let (mem, maps) = capture(tid, &self.images[img].log.pages)?;
        self.images[img].mem = mem;
        self.images[img].maps = maps;
        Ok(())
    }

    /// A process exec'd: its log is complete (and renamed, so that the next
    /// valgrind starts a new one).
    fn exec_done(&mut self, pid: u32) {
        self.read_log(pid);
        let sealed = self.sealed;
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let Some((path, _)) = p.open.take() else {
            return;
        };
        self.sealed += 1;
        let _ = std::fs::rename(&path, self.dir.join(format!("done.{pid}.{sealed}")));
        p.next_fresh = true;
        if let Some(&img) = p.images.last() {
            self.images[img].end = End::Exec;
            let path = self.images[img].log.exec_path.clone().unwrap_or_default();
            p.next_mode = elf_mode(Path::new(&path)).unwrap_or(self.images[img].mode);
            p.next_path = path;
        }
    }

    fn exited(&mut self, pid: u32, kind: ExitKind) {
        self.read_log(pid);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.open = None;
            p.gone = true;
            // Killed by the recorder stopping it: cut where it was stopped.
            let stopped = p.stopping && kind == ExitKind::Killed(libc::SIGKILL);
            if let Some(&img) = p.images.last() {
                if self.images[img].end == End::Cut && !stopped {
                    self.images[img].end = End::Exit(kind);
                }
            }
        }
    }
}

/// Reads the executed pages (and the page after each, for instructions
/// crossing a page end) while the stopped process still has them mapped.
fn capture(
    pid: libc::pid_t,
    pages: &BTreeSet<u64>,
) -> Result<(CodeMemory, Vec<Mapping>), ExecError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let maps = super::maps::parse_maps(&text).map_err(|e| ExecError::Os {
        what: "parsing /proc/pid/maps",
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    let mut mem = CodeMemory::new();
    let mut page = vec![0u8; PAGE_SIZE as usize];
    let wanted = pages.iter().flat_map(|&p| [p, p.wrapping_add(PAGE_SIZE)]);
    for base in wanted {
        if mem.page(base).is_some() {
            continue;
        }
        let mapped = maps
            .iter()
            .any(|m| m.perms.exec && m.start <= base && base < m.end);
        if mapped && read_mem(pid, base, &mut page) == page.len() {
            mem.set_page(base, &page);
        }
    }
    Ok((mem, maps))
}

/// The process (thread group) of a thread, from /proc.
fn tgid_of(tid: libc::pid_t) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

fn event_msg(tid: libc::pid_t) -> Option<u64> {
    let mut msg: libc::c_ulong = 0;
    (ptrace(
        libc::PTRACE_GETEVENTMSG,
        tid,
        0,
        &mut msg as *mut libc::c_ulong as u64,
    ) >= 0)
        .then_some(msg)
}

/// A directory of our own for valgrind's logs, removed when dropped, and by a
/// watchdog if this process dies first (SIGKILL runs no destructor): valgrind
/// writes one log file per process there, which no open-and-unlink trick can
/// give it.
struct TempDir(PathBuf, Option<std::process::Child>);

impl TempDir {
    fn new() -> Result<Self, ExecError> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ptsim-vg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let watchdog = Self::watchdog(&dir);
        Ok(TempDir(dir, watchdog))
    }

    /// A shell that removes `dir` once its standard input closes: when this
    /// process ends, however it ends. It ignores the terminal's signals and has
    /// its own process group, so that Ctrl-C or a group kill does not end it
    /// before it has cleaned up. (`None` where no shell can be started: then only
    /// the destructor cleans up.)
    fn watchdog(dir: &Path) -> Option<std::process::Child> {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("trap '' INT TERM HUP QUIT PIPE; read -r _; rm -rf -- \"$0\"")
            .arg(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .ok()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        if let Some(mut w) = self.1.take() {
            // Its input closes: it removes what is left (nothing) and ends.
            drop(w.stdin.take());
            let _ = w.wait();
        }
    }
}

/// Where the replay of one thread's stream is.
#[derive(Clone, Debug, Default)]
struct StreamPos {
    pos: usize,
    last: u64,
    index: u64,
    next_event: usize,
    lookahead: Option<u64>,
    /// Its items are done (it exited, or its process exec'd).
    done: bool,
}

/// A process being replayed: where in its current image.
#[derive(Clone, Debug)]
struct Frame {
    /// Its images (indexes into `images`), and which is replayed.
    chain: Vec<usize>,
    at: usize,
    run: usize,
    left: u64,
    pos: Vec<StreamPos>,
    started: bool,
}

/// A program recorded under valgrind, replayed as an [`ExecutionSource`].
pub struct ValgrindSource {
    images: Vec<Image>,
    /// Image chains per process (the images of one pid in order).
    chains: HashMap<u32, Vec<usize>>,
    root: u32,
    stack: Vec<Frame>,
    /// Items to yield, each with the image whose code it needs.
    queue: VecDeque<(ExecItem, usize)>,
    /// The thread of the last queued item.
    queued: Option<ThreadId>,
    /// The image of the last yielded item.
    image: usize,
    /// Processes whose images were replayed.
    replayed: HashMap<u32, usize>,
    no_code: CodeMemory,
    stopped: bool,
    stop_flag: Option<Arc<AtomicBool>>,
    done: bool,
    superblocks: u64,
    /// See [`ValgrindOptions::snapshots`].
    snapshots: Option<(Arc<AtomicBool>, Arc<AtomicBool>)>,
    /// Instruction counts where the replay hands a snapshot request on.
    snapshot_marks: VecDeque<u64>,
    /// Instructions yielded so far.
    yielded: u64,
}

impl ValgrindSource {
    /// Runs `program` to its end under valgrind and keeps the trace.
    pub fn record<S: AsRef<OsStr>>(
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
        opts: ValgrindOptions,
    ) -> Result<Self, ExecError> {
        Self::record_with_progress(program, args, opts, &mut |_| {})
    }

    /// [`Self::record`], calling `progress(instructions)` about every
    /// tenth of a second while valgrind runs.
    pub fn record_with_progress<S: AsRef<OsStr>>(
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
        opts: ValgrindOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Self, ExecError> {
        let path = resolve_program(program.as_ref())?;
        let mode = elf_mode(&path)?;
        let dir = TempDir::new()?;
        let mut log_file = OsString::from("--log-file=");
        log_file.push(dir.0.join("vg.%p"));
        let mut vg_args: Vec<OsString> = [
            "-q",
            "--tool=lackey",
            "--trace-superblocks=yes",
            "--vex-guest-chase=no",
            "--vex-guest-max-insns=1",
            "--run-libc-freeres=no",
            "--run-cxx-freeres=no",
            "--trace-syscalls=yes",
            "--trace-signals=yes",
            "--trace-sched=yes",
            "--trace-children=yes",
            // No gdbserver: its FIFOs (vgdb-pipe-*) would stay in the temporary
            // folder whenever valgrind is killed.
            "--vgdb=no",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        vg_args.push(log_file);
        vg_args.push("--".into());
        vg_args.push(path.clone().into_os_string());
        vg_args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        let options = libc::PTRACE_O_TRACEEXIT
            | libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK
            | libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACESECCOMP
            | libc::PTRACE_O_EXITKILL;
        let pid = spawn_traced(
            &opts.valgrind,
            &vg_args,
            SpawnFlags {
                disable_aslr: opts.disable_aslr,
                no_core_dump: true,
                fd_to_3: None,
                stop_before_exec: Some(options),
            },
        )?;
        let root = pid as u32;
        let mut run = Run {
            dir: dir.0.clone(),
            images: Vec::new(),
            procs: HashMap::new(),
            tasks: HashMap::from([(pid, (root, true))]),
            sealed: 0,
            root,
            stopped: false,
            snapshot_marks: VecDeque::new(),
        };
        run.procs.insert(
            root,
            Proc {
                images: Vec::new(),
                open: None,
                next_fresh: true,
                next_path: path.to_string_lossy().into_owned(),
                next_mode: mode,
                stopping: false,
                gone: false,
            },
        );
        let result = collect(&mut run, pid, &opts, progress);
        if result.is_err() {
            for &t in run.tasks.keys() {
                kill_and_reap(t);
            }
        }
        result?;
        if let Some(f) = &opts.stop_flag {
            // This stop request is served; another one ends the replay.
            f.store(false, Ordering::Relaxed);
        }
        let mut src = Self::replay(run, opts.stop_flag);
        src.snapshots = opts.snapshots;
        Ok(src)
    }

    fn replay(mut run: Run, stop_flag: Option<Arc<AtomicBool>>) -> Self {
        let snapshot_marks = std::mem::take(&mut run.snapshot_marks);
        let mut images = run.images;
        let mut chains: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, img) in images.iter().enumerate() {
            chains.entry(img.pid).or_default().push(i);
        }
        // The thread of each stream: the first is the process's own; the
        // others are matched, in order, to the clone calls that made threads.
        for img in images.iter_mut() {
            let pid = img.pid;
            let log = &img.log;
            let main = if img.fresh {
                log.births.first().copied()
            } else {
                log.schedule.first().map(|&(s, _)| s)
            };
            let mut threads = vec![ThreadId::main_of(pid); log.streams.len()];
            let made: Vec<u32> = log
                .creations
                .iter()
                .filter_map(|&(s, e)| match log.streams[s].events.get(e) {
                    Some((_, RawEvent::Syscall { ret: Some(r), .. }))
                        if !chains.contains_key(&(*r as u32)) =>
                    {
                        Some(*r as u32)
                    }
                    _ => None,
                })
                .collect();
            let mut made = made.into_iter();
            for &s in log.births.iter().filter(|&&s| Some(s) != main) {
                threads[s] = ThreadId {
                    pid,
                    tid: made.next().unwrap_or(u32::MAX - s as u32),
                };
            }
            img.threads = threads;
        }
        let superblocks = images.iter().map(|i| i.log.instructions).sum();
        let mut src = ValgrindSource {
            images,
            chains,
            root: run.root,
            stack: Vec::new(),
            queue: VecDeque::new(),
            queued: None,
            image: 0,
            replayed: HashMap::new(),
            no_code: CodeMemory::new(),
            stopped: run.stopped,
            stop_flag,
            done: false,
            superblocks,
            snapshots: None,
            snapshot_marks,
            yielded: 0,
        };
        if let Some(chain) = src.chains.get(&src.root).cloned() {
            src.stack.push(src.frame(chain));
        }
        src
    }

    fn frame(&self, chain: Vec<usize>) -> Frame {
        let n = chain
            .first()
            .map_or(0, |&i| self.images[i].log.streams.len());
        Frame {
            chain,
            at: 0,
            run: 0,
            left: 0,
            pos: vec![StreamPos::default(); n],
            started: false,
        }
    }

    /// Hands the next snapshot request on to the recorder once the replay
    /// reached it and the recorder took the one before (one per step, so
    /// that requests close together are not merged). A request that comes
    /// during the replay applies where the replay is.
    fn hand_on_snapshot(&mut self) {
        let Some((signal, to_recorder)) = &self.snapshots else {
            return;
        };
        if signal.swap(false, Ordering::Relaxed) {
            self.snapshot_marks.push_back(self.yielded);
        }
        match self.snapshot_marks.front() {
            Some(&m) if m <= self.yielded && !to_recorder.load(Ordering::Relaxed) => {
                to_recorder.store(true, Ordering::Relaxed);
                self.snapshot_marks.pop_front();
            }
            _ => {}
        }
    }

    /// Number of instructions valgrind reported (REP iterations included).
    pub fn superblocks(&self) -> u64 {
        self.superblocks
    }

    /// Whether the run was stopped before its end (the stop flag): the
    /// replay ends with [`Event::Stopped`].
    pub fn was_stopped(&self) -> bool {
        self.stopped
    }

    /// The memory map at exit of the program started (its first image).
    pub fn mappings(&self) -> &[Mapping] {
        self.chains
            .get(&self.root)
            .and_then(|c| c.first())
            .map_or(&[], |&i| &self.images[i].maps)
    }

    /// How the program started ended (its process's last image).
    pub fn exit(&self) -> ExitKind {
        self.chains
            .get(&self.root)
            .and_then(|c| c.last())
            .and_then(|&i| match self.images[i].end {
                End::Exit(k) => Some(k),
                _ => None,
            })
            .unwrap_or(ExitKind::Killed(libc::SIGKILL))
    }

    fn push(&mut self, id: ThreadId, item: ExecItem, image: usize) {
        self.switch_to(id, image);
        self.queue.push_back((item, image));
    }

    /// Items after this are `id`'s.
    fn switch_to(&mut self, id: ThreadId, image: usize) {
        if self.queued != Some(id) {
            if self.queued.is_some() {
                self.queue
                    .push_back((ExecItem::Event(Event::Switch(id)), image));
            }
            self.queued = Some(id);
        }
    }

    /// The next address of a stream of image `img`.
    fn read_addr(&mut self, img: usize, s: usize) -> Option<u64> {
        let frame = self.stack.last_mut()?;
        let p = &mut frame.pos[s];
        let addrs = &self.images[img].log.streams[s].addrs;
        let mut z = 0u64;
        let mut shift = 0;
        loop {
            let b = *addrs.get(p.pos)?;
            p.pos += 1;
            z |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        p.last = p.last.wrapping_add(d as u64);
        Some(p.last)
    }

    fn peek_addr(&mut self, img: usize, s: usize) -> Option<u64> {
        let has = self
            .stack
            .last()
            .is_some_and(|f| f.pos[s].lookahead.is_some());
        if !has {
            let a = self.read_addr(img, s);
            if let Some(f) = self.stack.last_mut() {
                f.pos[s].lookahead = a;
            }
        }
        self.stack.last().and_then(|f| f.pos[s].lookahead)
    }

    fn take_addr(&mut self, img: usize, s: usize) -> Option<u64> {
        self.peek_addr(img, s);
        self.stack
            .last_mut()
            .and_then(|f| f.pos[s].lookahead.take())
    }

    /// Replays the next piece: one instruction of the current process, or
    /// the start or end of a process or image.
    fn step(&mut self) -> Result<(), ExecError> {
        let Some(frame) = self.stack.last() else {
            if self.stopped {
                self.queue.push_back((
                    ExecItem::Event(Event::Stopped(StopReason::Interrupted)),
                    self.image,
                ));
            }
            self.done = true;
            return Ok(());
        };
        let img = frame.chain[frame.at];
        let pid = self.images[img].pid;
        if !frame.started {
            self.start_image(img);
            return Ok(());
        }
        // The next run of the schedule.
        let frame = self.stack.last_mut().expect("a frame");
        if frame.left == 0 {
            match self.images[img].log.schedule.get(frame.run) {
                Some(&(_, n)) => {
                    frame.left = n;
                    frame.run += 1;
                }
                None => return self.end_image(img),
            }
        }
        let s = self.images[img].log.schedule[frame.run - 1].0;
        frame.left -= 1;
        let _ = pid;
        self.instruction(img, s)
    }

    fn start_image(&mut self, img: usize) {
        let Some(frame) = self.stack.last_mut() else {
            return;
        };
        frame.started = true;
        let image = &self.images[img];
        let main = ThreadId::main_of(image.pid);
        let first_of_process = frame.at == 0;
        self.replayed.insert(image.pid, img);
        if first_of_process && image.fresh {
            // The program started (the first image of the recording).
            let path = image.path.clone();
            self.push(
                main,
                ExecItem::Event(Event::Exec {
                    pid: image.pid,
                    path,
                }),
                img,
            );
        }
        if first_of_process {
            let maps = self.images[img].maps.clone();
            self.push(main, ExecItem::Event(Event::Mappings(maps)), img);
        }
    }

    /// The image's log is over: its threads end (or an exec goes on).
    fn end_image(&mut self, img: usize) -> Result<(), ExecError> {
        let image = &self.images[img];
        let end = image.end;
        let threads = image.threads.clone();
        let Some(frame) = self.stack.last_mut() else {
            return Ok(());
        };
        let alive: Vec<usize> = (0..frame.pos.len())
            .filter(|&s| !frame.pos[s].done)
            .collect();
        for s in alive {
            if let Some(f) = self.stack.last_mut() {
                f.pos[s].done = true;
            }
            let how = match end {
                End::Exit(k) => Some(k),
                End::Exec => Some(ExitKind::Killed(libc::SIGKILL)),
                End::Cut => None,
            };
            if let Some(k) = how {
                self.push(threads[s], ExecItem::Event(Event::Exit(k)), img);
            }
        }
        let pid = self.images[img].pid;
        let frame = self.stack.last_mut().expect("a frame");
        if end == End::Exec && frame.at + 1 >= frame.chain.len() {
            // An exec valgrind did not follow.
            let path = self.images[img].log.exec_path.clone().unwrap_or_default();
            self.push(
                ThreadId::main_of(pid),
                ExecItem::Event(Event::Untraced {
                    thread: ThreadId::main_of(pid),
                    why: format!(
                        "process {pid} exec'd {path}, which valgrind did not run: \
                         what it did after that is not recorded"
                    ),
                }),
                img,
            );
        }
        self.stack.pop();
        Ok(())
    }

    /// Replays one instruction of stream `s` of image `img`.
    fn instruction(&mut self, img: usize, s: usize) -> Result<(), ExecError> {
        let id = self.images[img].threads[s];
        let Some(ip) = self.take_addr(img, s) else {
            return Ok(());
        };
        let index = {
            let f = self.stack.last_mut().expect("a frame");
            f.pos[s].index += 1;
            f.pos[s].index
        };
        let last_of_stream = index == self.images[img].log.streams[s].count;
        let mut next = self.peek_addr(img, s);
        let mut events = Vec::new();
        {
            let f = self.stack.last_mut().expect("a frame");
            let p = &mut f.pos[s];
            let evs = &self.images[img].log.streams[s].events;
            while let Some((n, e)) = evs.get(p.next_event) {
                if *n > index {
                    break;
                }
                events.push(e.clone());
                p.next_event += 1;
            }
        }
        if last_of_stream && next.is_none() && events.is_empty() && self.images[img].end == End::Cut
        {
            // The process was stopped here (Ctrl-C): Lackey logs an
            // instruction as it enters it, so this one may not have run, and
            // where it would have gone is unknown. The thread's execution
            // ends before it, at a known IP.
            return Ok(());
        }
        let mode = self.images[img].mode;
        let d = decode_at(&self.images[img].mem, ip, mode)?;
        let ft = ip.wrapping_add(u64::from(d.len));
        // The exec that ends this image: control goes on in the next one.
        let exec = last_of_stream
            && self.images[img].end == End::Exec
            && events.iter().any(|e| {
                matches!(
                    e,
                    RawEvent::Syscall {
                        nr: NR_EXECVE | NR_EXECVEAT,
                        ret: None,
                        ..
                    }
                )
            });
        let successor = {
            let f = self.stack.last().expect("a frame");
            f.chain.get(f.at + 1).copied()
        };
        if exec {
            if let Some(n) = successor {
                let main = self.images[n].log.schedule.first().map(|&(s, _)| s);
                if let Some(m) = main {
                    // The new program's first instruction.
                    let mut pos = StreamPos::default();
                    let addrs = &self.images[n].log.streams[m].addrs;
                    let mut z = 0u64;
                    let mut shift = 0;
                    while let Some(&b) = addrs.get(pos.pos) {
                        pos.pos += 1;
                        z |= u64::from(b & 0x7f) << shift;
                        if b & 0x80 == 0 {
                            break;
                        }
                        shift += 7;
                    }
                    let dlt = ((z >> 1) as i64) ^ -((z & 1) as i64);
                    next = Some(dlt as u64);
                }
            }
        }
        let signals: Vec<(i32, Option<u64>)> = events
            .iter()
            .filter_map(|e| match e {
                RawEvent::Signal { signo, from_ip } => Some((*signo, *from_ip)),
                _ => None,
            })
            .collect();
        // A REP string instruction re-enters itself once per iteration.
        if d.rep_string && next == Some(ip) && events.is_empty() {
            return Ok(());
        }
        let first_from = signals.first().and_then(|s| s.1);
        // A fault (or a signal before the instruction completed): not retired.
        let retired = !(first_from == Some(ip) && d.class != BranchClass::KernelEntry);
        let mut forks = Vec::new();
        if retired {
            let next_ip = first_from.or(next).unwrap_or(ft);
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
                img,
            );
            if d.class == BranchClass::KernelEntry {
                for e in &events {
                    let RawEvent::Syscall { nr, args, ret } = e else {
                        continue;
                    };
                    self.push(
                        id,
                        ExecItem::Event(Event::SyscallEnter {
                            nr: *nr,
                            args: *args,
                        }),
                        img,
                    );
                    if let Some(child) = self.created(img, id, *nr, args, *ret) {
                        self.push(id, ExecItem::Event(child.0), img);
                        if let Some(c) = child.1 {
                            forks.push(c);
                        }
                    }
                    if exec && matches!(*nr, NR_EXECVE | NR_EXECVEAT) {
                        if let Some(n) = successor {
                            let path = self.images[n].path.clone();
                            self.push(id, ExecItem::Event(Event::Exec { pid: id.pid, path }), n);
                            self.push(
                                id,
                                ExecItem::Event(Event::SyscallExit { nr: *nr, ret: 0 }),
                                n,
                            );
                        }
                        continue;
                    }
                    if next.is_some() && *nr != NR_EXIT {
                        self.push(
                            id,
                            ExecItem::Event(Event::SyscallExit {
                                nr: *nr,
                                ret: ret.unwrap_or(0),
                            }),
                            img,
                        );
                    }
                }
            }
        }
        for (i, (signo, from)) in signals.iter().enumerate() {
            // Each handler is entered at the next signal's interrupted IP,
            // the last one at the next instruction (none: the signal was fatal).
            let handler = match signals.get(i + 1) {
                Some((_, f)) => *f,
                None => next,
            };
            self.push(
                id,
                ExecItem::Event(Event::Signal {
                    signo: *signo,
                    from_ip: from.unwrap_or(ft),
                    handler,
                }),
                img,
            );
        }
        if last_of_stream {
            if exec && successor.is_some() {
                self.exec_into_next(img);
            } else {
                // The thread ends here: by exit(), or with its process.
                let code = events.iter().rev().find_map(|e| match e {
                    RawEvent::Syscall {
                        nr: NR_EXIT, args, ..
                    } => Some(args[0] as i32),
                    _ => None,
                });
                let end = self.images[img].end;
                let how = match (code, end) {
                    (Some(c), _) => Some(ExitKind::Exited(c)),
                    (None, End::Exit(k)) => Some(k),
                    (None, End::Exec) => Some(ExitKind::Killed(libc::SIGKILL)),
                    (None, End::Cut) => None,
                };
                if let Some(f) = self.stack.last_mut() {
                    f.pos[s].done = true;
                }
                if let Some(k) = how {
                    self.push(id, ExecItem::Event(Event::Exit(k)), img);
                }
            }
        }
        // Children run to their end right after the call that made them.
        for chain in forks.into_iter().rev() {
            let f = self.frame(chain);
            self.stack.push(f);
        }
        Ok(())
    }

    /// The event for a call that created a thread or process, and the
    /// child's images if it is a process valgrind followed.
    fn created(
        &mut self,
        img: usize,
        parent: ThreadId,
        nr: u64,
        args: &[u64; 6],
        ret: Option<i64>,
    ) -> Option<(Event, Option<Vec<usize>>)> {
        if !matches!(nr, NR_CLONE | NR_CLONE3 | NR_FORK | NR_VFORK) {
            return None;
        }
        let child = u32::try_from(ret?).ok().filter(|&c| c > 0)?;
        if let Some(chain) = self.chains.get(&child).cloned() {
            let kind = if nr == NR_VFORK || nr == NR_CLONE && args[0] & CLONE_VFORK != 0 {
                CloneKind::Vfork
            } else {
                CloneKind::Fork
            };
            return Some((
                Event::Clone {
                    child: ThreadId::main_of(child),
                    kind,
                },
                Some(chain),
            ));
        }
        let thread = nr == NR_CLONE3 || nr == NR_CLONE && args[0] & CLONE_THREAD != 0;
        if thread {
            let id = self.images[img]
                .threads
                .iter()
                .find(|t| t.tid == child)
                .copied()
                .unwrap_or(ThreadId {
                    pid: parent.pid,
                    tid: child,
                });
            return Some((
                Event::Clone {
                    child: id,
                    kind: CloneKind::Thread,
                },
                None,
            ));
        }
        // A process that left no valgrind log: it ran unrecorded.
        let id = ThreadId::main_of(child);
        self.push(
            parent,
            ExecItem::Event(Event::Clone {
                child: id,
                kind: if nr == NR_VFORK {
                    CloneKind::Vfork
                } else {
                    CloneKind::Fork
                },
            }),
            img,
        );
        Some((
            Event::Untraced {
                thread: id,
                why: format!(
                    "process {child}, created by {parent}, left no valgrind log: it ran unrecorded"
                ),
            },
            None,
        ))
    }

    /// The current process exec'd into its next image; its other threads
    /// are gone.
    fn exec_into_next(&mut self, img: usize) {
        let others: Vec<usize> = self
            .stack
            .last()
            .map(|f| (0..f.pos.len()).filter(|&s| !f.pos[s].done).collect())
            .unwrap_or_default();
        let execing = self.queued;
        for s in others {
            let id = self.images[img].threads[s];
            if Some(id) != execing {
                self.push(
                    id,
                    ExecItem::Event(Event::Exit(ExitKind::Killed(libc::SIGKILL))),
                    img,
                );
            }
        }
        if let Some(id) = execing {
            // Back to the thread that exec'd, before the new image's items.
            self.switch_to(id, img);
        }
        let Some(f) = self.stack.last_mut() else {
            return;
        };
        f.at += 1;
        f.run = 0;
        f.left = 0;
        f.started = true;
        let n = f.chain[f.at];
        f.pos = vec![StreamPos::default(); self.images[n].log.streams.len()];
        let pid = self.images[n].pid;
        self.replayed.insert(pid, n);
        let maps = self.images[n].maps.clone();
        self.push(
            ThreadId::main_of(pid),
            ExecItem::Event(Event::Mappings(maps)),
            n,
        );
    }
}

/// Runs valgrind's processes to their end, reading their logs and code.
fn collect(
    run: &mut Run,
    root: libc::pid_t,
    opts: &ValgrindOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<(), ExecError> {
    // spawn_traced left the root at its exec stop.
    ptrace(libc::PTRACE_CONT, root, 0, 0);
    let mut last_report = std::time::Instant::now();
    let mut last_read = std::time::Instant::now();
    let mut pause = Duration::from_micros(50);
    while !run.tasks.is_empty() {
        if let Some((signal, _)) = &opts.snapshots {
            if signal.swap(false, Ordering::Relaxed) {
                // The request applies to what valgrind reported up to now.
                run.read_all();
                let n = run.instructions();
                run.snapshot_marks.push_back(n);
            }
        }
        if !run.stopped
            && opts
                .stop_flag
                .as_ref()
                .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            // Stop every process where it is; each is read and killed at its stop.
            run.stopped = true;
            for (&pid, p) in run.procs.iter_mut() {
                if run.tasks.values().any(|&(q, _)| q == pid) {
                    p.stopping = true;
                    // SAFETY: signalling a traced process of ours.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
                }
            }
        }
        let mut any = false;
        let tasks: Vec<(libc::pid_t, u32)> = run.tasks.iter().map(|(&t, &(p, _))| (t, p)).collect();
        for (tid, pid) in tasks {
            let Some(w) = wait_child_once(tid, libc::WNOHANG)? else {
                continue;
            };
            any = true;
            stop(run, tid, pid, w)?;
        }
        if last_read.elapsed() >= Duration::from_millis(20) {
            run.read_all();
            last_read = std::time::Instant::now();
        }
        if last_report.elapsed() >= Duration::from_millis(100) {
            progress(run.instructions());
            last_report = std::time::Instant::now();
        }
        if any {
            pause = Duration::from_micros(50);
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
    run.read_all();
    progress(run.instructions());
    Ok(())
}

/// One stop of a task valgrind runs.
fn stop(run: &mut Run, tid: libc::pid_t, pid: u32, w: Wait) -> Result<(), ExecError> {
    match w {
        Wait::Exited(c) => {
            run.tasks.remove(&tid);
            if tid as u32 == pid {
                run.exited(pid, ExitKind::Exited(c));
            }
        }
        Wait::Killed(s) => {
            run.tasks.remove(&tid);
            if tid as u32 == pid {
                run.exited(pid, ExitKind::Killed(s));
            }
        }
        Wait::Stopped { event, .. } if event == libc::PTRACE_EVENT_EXIT => {
            // The code is still mapped: read it (and what the log says so far).
            run.capture(tid, pid)?;
            ptrace(libc::PTRACE_CONT, tid, 0, 0);
        }
        Wait::Stopped { event, .. } if event == libc::PTRACE_EVENT_SECCOMP => {
            // About to execve: the last chance to read this program's code.
            run.capture(tid, pid)?;
            ptrace(libc::PTRACE_CONT, tid, 0, 0);
        }
        Wait::Stopped { event, .. } if event == libc::PTRACE_EVENT_EXEC => {
            run.exec_done(pid);
            // A non-leader's exec takes the leader's id.
            if tid as u32 != pid {
                run.tasks.remove(&tid);
                run.tasks.insert(pid as libc::pid_t, (pid, true));
                ptrace(libc::PTRACE_CONT, pid as libc::pid_t, 0, 0);
            } else {
                ptrace(libc::PTRACE_CONT, tid, 0, 0);
            }
        }
        Wait::Stopped { event, .. }
            if event == libc::PTRACE_EVENT_CLONE
                || event == libc::PTRACE_EVENT_FORK
                || event == libc::PTRACE_EVENT_VFORK =>
        {
            if let Some(child) = event_msg(tid).map(|c| c as libc::pid_t) {
                let new_process =
                    event != libc::PTRACE_EVENT_CLONE || tgid_of(child).is_some_and(|g| g != pid);
                let cpid = if new_process { child as u32 } else { pid };
                run.tasks.entry(child).or_insert((cpid, false));
                if new_process {
                    let (path, mode) = run
                        .procs
                        .get(&pid)
                        .and_then(|p| p.images.last())
                        .map_or((String::new(), ExecMode::Bit64), |&i| {
                            (run.images[i].path.clone(), run.images[i].mode)
                        });
                    run.procs.insert(
                        cpid,
                        Proc {
                            images: Vec::new(),
                            open: None,
                            next_fresh: false,
                            next_path: path,
                            next_mode: mode,
                            stopping: run.stopped,
                            gone: false,
                        },
                    );
                }
            }
            ptrace(libc::PTRACE_CONT, tid, 0, 0);
        }
        Wait::Stopped { sig, event } => {
            let stopping = run.procs.get(&pid).is_some_and(|p| p.stopping);
            let first = run
                .tasks
                .get_mut(&tid)
                .is_some_and(|t| !std::mem::replace(&mut t.1, true));
            if stopping {
                // Stopped for the end of the recording: keep what it did, then end it.
                run.capture(tid, pid)?;
                // SAFETY: killing a traced process of ours.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                ptrace(libc::PTRACE_CONT, tid, 0, 0);
            } else if event != 0 || first && sig == libc::SIGSTOP {
                // New tasks start with a SIGSTOP of ptrace's; event stops carry nothing.
                ptrace(libc::PTRACE_CONT, tid, 0, 0);
            } else {
                ptrace(libc::PTRACE_CONT, tid, 0, sig as u64);
            }
        }
    }
    Ok(())
}

impl ExecutionSource for ValgrindSource {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        loop {
            if let Some((item, image)) = self.queue.pop_front() {
                self.image = image;
                if matches!(item, ExecItem::Insn(_)) {
                    self.yielded += 1;
                }
                self.hand_on_snapshot();
                return Ok(Some(item));
            }
            if self.done {
                return Ok(None);
            }
            if self
                .stop_flag
                .as_ref()
                .is_some_and(|f| f.load(Ordering::Relaxed))
            {
                // Ctrl-C during the replay: it ends here.
                self.stack.clear();
                self.stopped = true;
            }
            if let Err(e) = self.step() {
                self.done = true;
                return Err(e);
            }
        }
    }

    fn memory(&self) -> &CodeMemory {
        self.images
            .get(self.image)
            .map_or(&self.no_code, |i| &i.mem)
    }

    fn process_memory(&self, pid: u32) -> Option<&CodeMemory> {
        self.replayed.get(&pid).map(|&i| &self.images[i].mem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valgrind_lines() {
        let mut r = LogText::default();
        r.feed(b"--77--   SCHED[1]:  acquired lock (thread_wrapper(starting new thread))\n");
        r.feed(b"SB 00401000\nSB 00401005\nSYSCALL[77,1](1) sys_write ( 1, 0x402000(hi, there), 3 ) --> [async] ... \n");
        r.feed(b"SYSCALL[77,1](1) ... [async] --> Success(0x3) \nSB 0040100");
        r.feed(b"7\nSYSCALL[77,1](34) sys_pause ( ) --> [async] ... \n");
        r.feed(b"--77-- interrupted_syscall: tid=1, ip=0x580a7ec5, restart=False, sres.isErr=True, sres.val=4\n");
        r.feed(b"--77-- delivering signal 14 (SIGALRM):128 to thread 1\n==77==    at 0x401310: ??? (in /x)\n==77==    by 0x401014: ???\n");
        r.feed(b"SYSCALL[77,1](56) sys_clone ( 3d0f00, 0x5229f70 ) --> [pre-success] Success(0x78c4) --77--   SCHED[1]: releasing lock (VG_(vg_yield)) -> VgTs_Yielding\n");
        r.feed(b"--77--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))\nSB 00402000\n");
        r.feed(b"--77--   SCHED[1]:  acquired lock (VG_(scheduler):timeslice)\nSB 00401010\n");
        r.feed(b"SYSCALL[77,1](59) sys_execve ( 0x1299a0(/bin/true), 0x1299c8, 0x4035c58 )\n");
        r.feed(b"SYSCALL[77,1](231) exit_group( 15 ) --> [pre-success] Success(0x0) \n");
        assert_eq!(r.instructions, 5);
        assert_eq!(r.streams.len(), 2);
        assert_eq!(r.births, vec![0, 1]);
        assert_eq!(r.schedule, vec![(0, 3), (1, 1), (0, 1)]);
        assert_eq!(r.exec_path.as_deref(), Some("/bin/true"));
        assert_eq!(r.creations, vec![(0, 3)]);
        let main = &r.streams[0];
        assert_eq!(
            main.events,
            vec![
                (
                    2,
                    RawEvent::Syscall {
                        nr: 1,
                        args: [1, 0x402000, 3, 0, 0, 0],
                        ret: Some(3)
                    }
                ),
                (
                    3,
                    RawEvent::Syscall {
                        nr: 34,
                        args: [0; 6],
                        ret: Some(-4)
                    }
                ),
                (
                    3,
                    RawEvent::Signal {
                        signo: 14,
                        from_ip: Some(0x401310)
                    }
                ),
                (
                    3,
                    RawEvent::Syscall {
                        nr: 56,
                        args: [0x3d0f00, 0x5229f70, 0, 0, 0, 0],
                        ret: Some(0x78c4)
                    }
                ),
                (
                    4,
                    RawEvent::Syscall {
                        nr: 59,
                        args: [0x1299a0, 0x1299c8, 0x4035c58, 0, 0, 0],
                        ret: None
                    }
                ),
                (
                    4,
                    RawEvent::Syscall {
                        nr: 231,
                        args: [15, 0, 0, 0, 0, 0],
                        ret: Some(0)
                    }
                ),
            ]
        );
        assert_eq!(r.streams[1].vg_tid, 2);
        assert_eq!(r.streams[1].count, 1);
        assert_eq!(
            parse_args("sys_openat ( 4294967196, 0x4034bb0(/a (b), c), -5 )"),
            [4294967196, 0x4034bb0, -5i64 as u64, 0, 0, 0]
        );
    }

    /// A forked process's log starts mid-call and names its thread later.
    #[test]
    fn forked_log_names_its_thread_later() {
        let mut r = LogText::default();
        r.feed(b" --> [pre-success] Success(0x0) \nSB 00401000\nSB 00401002\n");
        r.feed(b"SYSCALL[80,3](1) sys_write ( 1, 0x402000, 3 ) --> [pre-success] Success(0x3) \n");
        assert_eq!(r.streams.len(), 1);
        assert_eq!(r.streams[0].vg_tid, 3);
        assert_eq!(r.streams[0].count, 2);
        assert_eq!(r.streams[0].events.len(), 1);
    }
}
