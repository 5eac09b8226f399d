//! A fast execution source for long programs: valgrind's Lackey tool with
//! one guest instruction per superblock, so the superblock trace is the
//! instruction trace (about 0.8 M instructions/s here, against 15-30 k for
//! single-stepping).
//!
//! Valgrind runs as a ptrace child that is merely continued; at its exit
//! (`PTRACE_EVENT_EXIT`) the guest code is still mapped, and the pages that
//! held executed instructions are read then. System calls and signals come
//! from `--trace-syscalls` and `--trace-signals`.
//!
//! The program runs on valgrind's synthetic CPU, so its path can differ from
//! a native run wherever it depends on CPUID (ifunc selection in libc) or on
//! where valgrind places things; for the same path the recorded sequence is
//! the same as [`super::ptrace::Tracer`]'s (checked in the tests). Differences
//! of note:
//! - [`Event::Mappings`] is the map at exit, given once at the start, and
//!   includes valgrind's own mappings.
//! - Signals that are ignored are not reported; system call arguments and
//!   results are parsed from valgrind's trace text (best effort; a result
//!   valgrind did not print is 0).
//! - Programs that create threads or call `execve` are refused.

use std::collections::{BTreeSet, VecDeque};
use std::ffi::{OsStr, OsString};

use super::insn::decode_at;
use super::memory::page_base;
use super::ptrace::{
    kill_and_reap, os_err, ptrace, read_mem, resolve_program, spawn_traced, wait_child, SpawnFlags,
    Wait,
};
use super::{
    CodeMemory, Event, ExecError, ExecItem, ExecMode, ExecutionSource, ExitKind, InsnClass,
    Mapping, Retired, PAGE_SIZE,
};

/// How to run valgrind.
#[derive(Clone, Debug)]
pub struct ValgrindOptions {
    /// The valgrind launcher (searched on `PATH`).
    pub valgrind: OsString,
    /// Turn address-space randomization off. Default: on.
    pub disable_aslr: bool,
}

impl Default for ValgrindOptions {
    fn default() -> Self {
        Self {
            valgrind: OsString::from("valgrind"),
            disable_aslr: true,
        }
    }
}

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

/// The parsed trace: instruction addresses (zigzag LEB128 deltas) and the
/// events after each.
#[derive(Clone, Debug, Default)]
struct RawTrace {
    addrs: Vec<u8>,
    count: u64,
    last: u64,
    /// `(n, event)`: the event came after the first `n` instructions.
    events: Vec<(u64, RawEvent)>,
    /// Page bases of executed instruction addresses.
    pages: BTreeSet<u64>,
    last_syscall: Option<usize>,
    awaiting_at: Option<usize>,
    other_threads: bool,
    partial: Vec<u8>,
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
    let Some(open) = s.find('(') else { return args };
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
    for (a, t) in args.iter_mut().zip(tokens) {
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

impl RawTrace {
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
        self.pages.insert(page_base(a));
    }

    fn set_ret(&mut self, v: i64) {
        if let Some(i) = self.last_syscall {
            if let Some((_, RawEvent::Syscall { ret, .. })) = self.events.get_mut(i) {
                ret.get_or_insert(v);
            }
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("SB ") {
            if let Ok(a) = u64::from_str_radix(rest.trim(), 16) {
                self.push_addr(a);
            }
            return;
        }
        if let Some(pos) = line.find("SYSCALL[") {
            let s = &line[pos + 8..];
            let tid = s
                .split_once(',')
                .and_then(|(_, r)| r.split_once(']'))
                .and_then(|(t, _)| t.trim().parse::<u64>().ok());
            if tid.is_some_and(|t| t != 1) {
                self.other_threads = true;
            }
            if let Some(nr) = dec_after(s, "](") {
                let after = s.split_once(')').map_or("", |(_, r)| r);
                if !after.trim_start().starts_with("...") {
                    self.events.push((
                        self.count,
                        RawEvent::Syscall {
                            nr,
                            args: parse_args(after),
                            ret: None,
                        },
                    ));
                    self.last_syscall = Some(self.events.len() - 1);
                }
            }
        }
        if let Some(v) = hex_after(line, "Success(0x") {
            self.set_ret(v as i64);
        }
        if let Some(v) = hex_after(line, "Failure(0x") {
            self.set_ret(-(v as i64));
        }
        if let Some(v) = dec_after(line, "sres.isErr=True, sres.val=") {
            self.set_ret(-(v as i64));
        }
        if let Some(v) = dec_after(line, "sres.isErr=False, sres.val=") {
            self.set_ret(v as i64);
        }
        if let Some(signo) = dec_after(line, "delivering signal ") {
            self.events.push((
                self.count,
                RawEvent::Signal {
                    signo: signo as i32,
                    from_ip: None,
                },
            ));
            self.awaiting_at = Some(self.events.len() - 1);
        } else if let Some(i) = self.awaiting_at {
            if let Some(ip) = hex_after(line, " at 0x") {
                if let Some((_, RawEvent::Signal { from_ip, .. })) = self.events.get_mut(i) {
                    *from_ip = Some(ip);
                }
                self.awaiting_at = None;
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
fn elf_mode(path: &std::path::Path) -> Result<ExecMode, ExecError> {
    let mut path = path.to_path_buf();
    for _ in 0..5 {
        let mut head = [0u8; 256];
        let n = std::fs::File::open(&path)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
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
                path = std::path::PathBuf::from(String::from_utf8_lossy(word).into_owned());
            }
            _ => break,
        }
    }
    Err(ExecError::ExecFailed {
        command: path.to_string_lossy().into_owned(),
        source: std::io::Error::from_raw_os_error(libc::ENOEXEC),
    })
}

/// Reads everything available from a non-blocking fd.
fn drain(fd: libc::c_int, raw: &mut RawTrace) -> bool {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: reading into a local buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            raw.feed(&buf[..n as usize]);
            continue;
        }
        // 0: end of file; -1: EAGAIN (nothing now) or an error.
        return n == 0;
    }
}

/// A program recorded under valgrind, replayed as an [`ExecutionSource`].
pub struct ValgrindSource {
    raw: RawTrace,
    mem: CodeMemory,
    maps: Vec<Mapping>,
    pid: u32,
    path: String,
    mode: ExecMode,
    exit: ExitKind,
    // Replay state.
    pos: usize,
    last: u64,
    index: u64,
    next_event: usize,
    lookahead: Option<u64>,
    queue: VecDeque<ExecItem>,
    started: bool,
    done: bool,
}

impl ValgrindSource {
    /// Runs `program` to its end under valgrind and keeps the trace.
    pub fn record<S: AsRef<OsStr>>(
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
        opts: ValgrindOptions,
    ) -> Result<Self, ExecError> {
        let path = resolve_program(program.as_ref())?;
        let mode = elf_mode(&path)?;
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
            "--log-fd=3",
            "--",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        vg_args.push(path.clone().into_os_string());
        vg_args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));

        let mut fds = [0; 2];
        // SAFETY: valid out array of two fds.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(os_err("pipe2"));
        }
        let (rd, wr) = (fds[0], fds[1]);
        let spawned = spawn_traced(
            &opts.valgrind,
            &vg_args,
            SpawnFlags {
                disable_aslr: opts.disable_aslr,
                no_core_dump: true,
                fd_to_3: Some(wr),
            },
        );
        // SAFETY: our copy of the write end is not needed any more.
        unsafe { libc::close(wr) };
        let pid = match spawned {
            Ok(pid) => pid,
            Err(e) => {
                // SAFETY: closing our own fd.
                unsafe { libc::close(rd) };
                return Err(e);
            }
        };
        let result = Self::collect(pid, rd, mode, path.to_string_lossy().into_owned());
        // SAFETY: closing our own fd.
        unsafe { libc::close(rd) };
        if result.is_err() {
            kill_and_reap(pid);
        }
        result
    }

    fn collect(
        pid: libc::pid_t,
        rd: libc::c_int,
        mode: ExecMode,
        path: String,
    ) -> Result<Self, ExecError> {
        match wait_child(pid)? {
            Wait::Stopped { sig, .. } if sig == libc::SIGTRAP => {}
            _ => {
                return Err(ExecError::Unsupported("valgrind did not start"));
            }
        }
        let options = libc::PTRACE_O_TRACEEXIT | libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_EXITKILL;
        if ptrace(libc::PTRACE_SETOPTIONS, pid, 0, options as u64) < 0 {
            return Err(os_err("PTRACE_SETOPTIONS"));
        }
        // SAFETY: plain fcntl on our fd.
        unsafe { libc::fcntl(rd, libc::F_SETFL, libc::O_NONBLOCK) };
        ptrace(libc::PTRACE_CONT, pid, 0, 0);
        let mut raw = RawTrace::default();
        let mut captured: Option<(CodeMemory, Vec<Mapping>)> = None;
        let exit = loop {
            let mut pfd = libc::pollfd {
                fd: rd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 20) };
            drain(rd, &mut raw);
            let mut status = 0;
            // SAFETY: plain FFI call with a valid out pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::__WALL) };
            if r == 0 {
                continue;
            }
            if r < 0 {
                return Err(os_err("waitpid"));
            }
            if libc::WIFEXITED(status) {
                break ExitKind::Exited(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                break ExitKind::Killed(libc::WTERMSIG(status));
            }
            let sig = libc::WSTOPSIG(status);
            let event = (status >> 16) & 0xff;
            if event == libc::PTRACE_EVENT_EXIT {
                // Everything valgrind wrote is in the pipe; the guest's code
                // is still mapped.
                drain(rd, &mut raw);
                captured = Some(capture(pid, &raw.pages)?);
                ptrace(libc::PTRACE_CONT, pid, 0, 0);
            } else if event != 0 {
                ptrace(libc::PTRACE_CONT, pid, 0, 0);
            } else {
                ptrace(libc::PTRACE_CONT, pid, 0, sig as u64);
            }
        };
        while !drain(rd, &mut raw) {
            // SAFETY: one valid pollfd.
            let mut pfd = libc::pollfd {
                fd: rd,
                events: libc::POLLIN,
                revents: 0,
            };
            if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
                break;
            }
        }
        let execve = raw
            .events
            .iter()
            .any(|(_, e)| matches!(e, RawEvent::Syscall { nr: 59 | 322, .. }));
        if execve {
            return Err(ExecError::Unsupported("the program called execve"));
        }
        if raw.other_threads {
            return Err(ExecError::Unsupported("the program created threads"));
        }
        let (mem, maps) = captured.ok_or(ExecError::Unsupported(
            "valgrind ended without an exit stop",
        ))?;
        Ok(Self {
            raw,
            mem,
            maps,
            pid: pid as u32,
            path,
            mode,
            exit,
            pos: 0,
            last: 0,
            index: 0,
            next_event: 0,
            lookahead: None,
            queue: VecDeque::new(),
            started: false,
            done: false,
        })
    }

    /// Number of instructions valgrind reported (REP iterations included).
    pub fn superblocks(&self) -> u64 {
        self.raw.count
    }

    /// The memory map at exit.
    pub fn mappings(&self) -> &[Mapping] {
        &self.maps
    }

    /// How the program ended.
    pub fn exit(&self) -> ExitKind {
        self.exit
    }

    fn read_addr(&mut self) -> Option<u64> {
        let mut z = 0u64;
        let mut shift = 0;
        loop {
            let b = *self.raw.addrs.get(self.pos)?;
            self.pos += 1;
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
        self.last = self.last.wrapping_add(d as u64);
        Some(self.last)
    }

    fn peek_addr(&mut self) -> Option<u64> {
        if self.lookahead.is_none() {
            self.lookahead = self.read_addr();
        }
        self.lookahead
    }

    fn take_addr(&mut self) -> Option<u64> {
        self.peek_addr();
        self.lookahead.take()
    }

    /// Expands the next instruction address into items.
    fn step(&mut self) -> Result<(), ExecError> {
        let Some(ip) = self.take_addr() else {
            self.queue
                .push_back(ExecItem::Event(Event::Exit(self.exit)));
            self.done = true;
            return Ok(());
        };
        self.index += 1;
        let next = self.peek_addr();
        let mut events = Vec::new();
        while let Some((n, e)) = self.raw.events.get(self.next_event) {
            if *n > self.index {
                break;
            }
            events.push(e.clone());
            self.next_event += 1;
        }
        let d = decode_at(&self.mem, ip, self.mode)?;
        let ft = ip.wrapping_add(u64::from(d.len));
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
        let retired = !(first_from == Some(ip) && d.class != InsnClass::KernelEntry);
        if retired {
            let next_ip = first_from.or(next).unwrap_or(ft);
            self.queue.push_back(ExecItem::Insn(Retired {
                ip,
                next_ip,
                len: d.len,
                class: d.class,
                mode: self.mode,
                kernel: false,
            }));
            if d.class == InsnClass::KernelEntry {
                for e in &events {
                    if let RawEvent::Syscall { nr, args, ret } = e {
                        self.queue.push_back(ExecItem::Event(Event::SyscallEnter {
                            nr: *nr,
                            args: *args,
                        }));
                        if next.is_some() {
                            self.queue.push_back(ExecItem::Event(Event::SyscallExit {
                                nr: *nr,
                                ret: ret.unwrap_or(0),
                            }));
                        }
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
            self.queue.push_back(ExecItem::Event(Event::Signal {
                signo: *signo,
                from_ip: from.unwrap_or(ft),
                handler,
            }));
        }
        Ok(())
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

impl ExecutionSource for ValgrindSource {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        if !self.started {
            self.started = true;
            self.queue.push_back(ExecItem::Event(Event::Exec {
                pid: self.pid,
                path: self.path.clone(),
            }));
            self.queue
                .push_back(ExecItem::Event(Event::Mappings(self.maps.clone())));
        }
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Ok(Some(item));
            }
            if self.done {
                return Ok(None);
            }
            if let Err(e) = self.step() {
                self.done = true;
                return Err(e);
            }
        }
    }

    fn memory(&self) -> &CodeMemory {
        &self.mem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valgrind_lines() {
        let mut r = RawTrace::default();
        r.feed(b"SB 00401000\nSB 00401005\nSYSCALL[77,1](1) sys_write ( 1, 0x402000(hi, there), 3 ) --> [async] ... \n");
        r.feed(b"SYSCALL[77,1](1) ... [async] --> Success(0x3) \nSB 0040100");
        r.feed(b"7\nSYSCALL[77,1](34) sys_pause ( ) --> [async] ... \n");
        r.feed(b"--77-- interrupted_syscall: tid=1, ip=0x580a7ec5, restart=False, sres.isErr=True, sres.val=4\n");
        r.feed(b"--77-- delivering signal 14 (SIGALRM):128 to thread 1\n==77==    at 0x401310: ??? (in /x)\n==77==    by 0x401014: ???\n");
        r.feed(b"SYSCALL[77,1](231) exit_group( 15 ) --> [pre-success] Success(0x0) \n");
        assert_eq!(r.count, 3);
        assert!(!r.other_threads);
        assert_eq!(
            r.events,
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
                        nr: 231,
                        args: [15, 0, 0, 0, 0, 0],
                        ret: Some(0)
                    }
                ),
            ]
        );
        r.feed(b"SYSCALL[77,2](202) sys_futex ( 0x1, -1 ) --> Failure(0xb)\n");
        assert!(r.other_threads);
        assert_eq!(
            parse_args("sys_openat ( 4294967196, 0x4034bb0(/a (b), c), -5 )"),
            [4294967196, 0x4034bb0, -5i64 as u64, 0, 0, 0]
        );
    }
}
