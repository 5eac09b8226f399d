//! The fastest execution source: the program runs in QEMU's user-mode
//! emulator (`qemu-x86_64`) with the `pt-qemu-plugin` TCG plugin, which
//! reports every translation block once (address and code) and then one
//! word per block executed, plus system calls, threads, forks and execs
//! ([`wire`] is the format). QEMU with the plugin runs at close to its own
//! speed; the recorder takes one [`BlockRun`] per block executed, in
//! batches of a thread's runs between events ([`Step::Blocks`] from
//! [`ExecutionSource::next_step`]): the PT logic and the execution log go
//! through a block in one step where nothing is due inside it.
//!
//! # From blocks to retired instructions
//! Each distinct block (address and code bytes) is decoded once, when it is
//! first reported ([`CodeBlock`]). QEMU ends a block at every branch, system call and
//! exception, so only a block's last instruction can send control anywhere
//! but the next one; where it went is the start of the thread's next block
//! ([`resolve`]): the fall-through or target of a conditional branch (its
//! TNT bit), the target of an indirect branch or return (TIP, or a
//! compressed return), the system call's return address. A next block that
//! is no successor of the last instruction is an asynchronous transfer, a
//! signal: the kernel took user mode away after the block (or at its last
//! instruction, for instructions that always fault) and resumed in the
//! handler, which the PT logic writes as FUP + TIP.PGD, TIP.PGE (user-mode
//! tracing). A memory fault in the middle of a block is seen at the block's
//! end: the instructions after the fault are reported as retired. Plugin
//! API 1 offers no sound way to see it at the instruction that faulted at
//! this speed: a callback per instruction, or per memory access
//! (`qemu_plugin_register_vcpu_mem_cb`, called after an access completes,
//! so the last one called would name the faulting instruction as the next
//! one) costs a host call for most guest instructions (gzip: nearly every
//! block loads or stores); the inline counter it offers
//! (`qemu_plugin_register_vcpu_insn_exec_inline`, add to one address) is
//! one counter for all vCPUs, which threads would race on (a per-vCPU
//! scoreboard came with API 2, QEMU 9).
//! A REP string instruction that QEMU re-enters per iteration is one
//! instruction.
//!
//! # Threads and processes
//! Each guest process has a connection of its own; each thread's blocks
//! come in runs. A thread's runs are held until the [`Event::Clone`] that
//! created it was given, a forked child's connection until its fork was,
//! and an exec'd program's connection until the old one ended, so the
//! items keep the order [`crate::exec`] promises. Mappings are those that
//! hold code that ran (from the host's `/proc/self/maps`, shifted by QEMU's
//! guest base).
//!
//! Plugin API 1 has no signal callback: a signal's number is that of the
//! handler its transfer enters (the plugin reports each `rt_sigaction`'s new
//! handler); of a handler that serves several, the one the thread sent
//! itself (`kill`, `tgkill`); else 0.
//!
//! QEMU 7.2's user mode maps no vDSO for x86-64 guests: the program's time
//! calls are system calls, and a recording has no `[vdso]`.

/// The plugin's stream (its own crate, which the plugin shares).
pub use pt_qemu_wire as wire;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::block::{BlockId, BlockInsn, BlockRun, BlockTable, CodeBlock, Step};
use super::maps::{load_segments, split_by_segments, LoadSegment};
use super::{
    BranchClass, CloneKind, CodeMemory, Event, ExecError, ExecItem, ExecutionSource, ExitKind,
    Mapping, Perms, StopReason, ThreadId,
};
use pt_encoder::hash::IntMap;
use wire::*;

const NR_RT_SIGACTION: u64 = 13;
const NR_RT_SIGRETURN: u64 = 15;
const NR_KILL: u64 = 62;
const NR_TKILL: u64 = 200;
const NR_TGKILL: u64 = 234;
const NR_CLONE: u64 = 56;
const NR_FORK: u64 = 57;
const NR_VFORK: u64 = 58;
const NR_EXECVE: u64 = 59;
const NR_EXECVEAT: u64 = 322;
const NR_CLONE3: u64 = 435;
const CLONE_THREAD: u64 = 0x1_0000;
/// Bytes read from a connection beyond those handled.
const READ_AHEAD: usize = 1 << 20;

/// Where a block's last instruction sent control, given where the thread
/// went on (`next`) and the system call it made, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// The last instruction's `next_ip`.
    pub next_ip: u64,
    /// Whether the last instruction retired (not when it faulted).
    pub retired: bool,
    /// An asynchronous transfer to `next`: where the interrupted context
    /// resumes.
    pub signal_from: Option<u64>,
}

/// Resolves the end of a block (see the module docs).
pub fn resolve(last: &BlockInsn, next: u64, syscall: Option<u64>) -> Resolution {
    let ft = last.fall_through();
    let plain = |next_ip| Resolution {
        next_ip,
        retired: true,
        signal_from: None,
    };
    let signal = |next_ip| Resolution {
        next_ip,
        retired: true,
        signal_from: Some(next_ip),
    };
    match last.class {
        BranchClass::KernelEntry => match syscall {
            _ if next == ft => plain(ft),
            Some(NR_RT_SIGRETURN | NR_EXECVE | NR_EXECVEAT) => plain(next),
            _ => signal(ft),
        },
        BranchClass::Other if last.faults => Resolution {
            next_ip: last.ip,
            retired: false,
            signal_from: Some(last.ip),
        },
        BranchClass::Other => {
            if next == ft {
                plain(ft)
            } else {
                signal(ft)
            }
        }
        BranchClass::CondBranch => {
            if next == ft || next == last.target {
                plain(next)
            } else {
                signal(ft)
            }
        }
        BranchClass::DirectJump | BranchClass::DirectCall => {
            if next == last.target {
                plain(next)
            } else {
                signal(last.target)
            }
        }
        BranchClass::IndirectJump
        | BranchClass::IndirectCall
        | BranchClass::Return
        | BranchClass::FarBranch => plain(next),
    }
}

/// How to run QEMU.
#[derive(Clone, Debug)]
pub struct QemuOptions {
    /// The emulator (searched on `PATH`).
    pub qemu: OsString,
    /// The plugin (`libpt_qemu_plugin.so`, or a `/proc/PID/fd/N` of it).
    pub plugin: PathBuf,
    /// When this becomes true (Ctrl-C), the programs are killed and what
    /// they did so far is kept; the items end with [`Event::Stopped`].
    pub stop_flag: Option<Arc<AtomicBool>>,
    /// Snapshot requests (SIGUSR2): `.0` is set when one comes; the source
    /// sets `.1` (the recorder's [`crate::record::SimRecording::snapshot_requests`])
    /// when its items reach what QEMU had reported by then. QEMU runs ahead
    /// of the recorder, so a request taken at once would miss the
    /// execution before it.
    pub snapshots: Option<(Arc<AtomicBool>, Arc<AtomicBool>)>,
}

/// Why QEMU cannot record a program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QemuError {
    /// `qemu-x86_64` is not installed.
    #[error("{0} not found: the qemu source needs QEMU's user-mode emulator (Debian: apt install qemu-user)")]
    NoQemu(String),
    /// QEMU did not load the plugin.
    #[error("{qemu} refused the plugin, which speaks QEMU plugin API version {ours}: {said}")]
    Refused {
        /// The emulator.
        qemu: String,
        /// The plugin's API version.
        ours: i32,
        /// What QEMU said.
        said: String,
    },
    /// The program is not one QEMU's x86-64 emulator runs.
    #[error("{path}: {what}: the qemu source records x86-64 Linux programs")]
    NotX86_64 {
        /// The program.
        path: String,
        /// What it is.
        what: &'static str,
    },
    /// QEMU ended before the program ran.
    #[error("{qemu} could not run {path} ({status})")]
    DidNotRun {
        /// The emulator.
        qemu: String,
        /// The program.
        path: String,
        /// QEMU's exit status.
        status: String,
    },
    /// An execution source error (command not found, system calls).
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// What QEMU's plugin loader accepts: runs the emulator with the plugin in
/// its probe mode. Returns QEMU's (minimum, current) plugin API versions.
pub fn probe(qemu: &OsStr, plugin: &std::path::Path) -> Result<(i32, i32), QemuError> {
    let qemu_path = super::ptrace::resolve_program(qemu)
        .map_err(|_| QemuError::NoQemu(qemu.to_string_lossy().into_owned()))?;
    let mut arg = plugin.as_os_str().to_owned();
    arg.push(",probe=1");
    let o = Command::new(&qemu_path)
        .arg("-plugin")
        .arg(&arg)
        .arg(&qemu_path)
        .stdin(Stdio::null())
        .output()
        .map_err(|_| QemuError::NoQemu(qemu.to_string_lossy().into_owned()))?;
    let out = String::from_utf8_lossy(&o.stdout);
    if let Some(rest) = out.trim().strip_prefix("pt-qemu-plugin api ") {
        let v: Vec<i32> = rest
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        if let [_, min, cur] = v[..] {
            return Ok((min, cur));
        }
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let said = err
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no reason given")
        .trim()
        .to_string();
    Err(QemuError::Refused {
        qemu: qemu_path.display().to_string(),
        ours: PLUGIN_API_VERSION,
        said,
    })
}

/// The CPU QEMU emulates, as its guests see it in CPUID (and as perf writes
/// it in a perf.data's CPUID feature: `vendor,family,model,stepping`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulatedCpu {
    /// perf's CPUID string, e.g. `AuthenticAMD,15,107,1` (QEMU 7.2's default CPU).
    pub cpuid: String,
    /// The brand string (CPUID 8000_0002H-8000_0004H), e.g. `QEMU TCG CPU version 2.5+`.
    pub brand: String,
}

impl EmulatedCpu {
    /// From the registers of CPUID leaf 0 (EBX, EDX, ECX: the vendor), leaf
    /// 1's EAX and the brand string's bytes; family and model as perf
    /// computes them (extended model from family 6 on, extended family for 15).
    pub fn from_cpuid(vendor: [u32; 3], leaf1_eax: u32, brand: &[u8]) -> EmulatedCpu {
        let mut v = Vec::with_capacity(12);
        for r in vendor {
            v.extend_from_slice(&r.to_le_bytes());
        }
        let mut family = (leaf1_eax >> 8) & 0xf;
        let mut model = (leaf1_eax >> 4) & 0xf;
        if family >= 6 {
            model += ((leaf1_eax >> 16) & 0xf) << 4;
        }
        if family == 0xf {
            family += (leaf1_eax >> 20) & 0xff;
        }
        let end = brand.iter().position(|&b| b == 0).unwrap_or(brand.len());
        EmulatedCpu {
            cpuid: format!(
                "{},{family},{model},{}",
                String::from_utf8_lossy(&v),
                leaf1_eax & 0xf
            ),
            brand: String::from_utf8_lossy(&brand[..end]).trim().to_string(),
        }
    }
}

/// A static x86-64 Linux program of 0x10b bytes, written here byte by byte
/// (no assembler is needed at run time): it executes CPUID leaves 0, 1 and
/// 8000_0002H-8000_0004H, writes EBX, EDX, ECX of leaf 0, EAX of leaf 1 and
/// the 48 brand bytes (64 bytes) to stdout and exits 0. One RWX `PT_LOAD`
/// at 0x400000 whose memory extends to a buffer at 0x401000.
fn cpuid_program() -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    let mut code: Vec<u8> = Vec::new();
    code.extend_from_slice(&[0xbf, 0x00, 0x10, 0x40, 0x00]); // mov edi, 0x401000
    code.extend_from_slice(&[0x31, 0xc0, 0x31, 0xc9, 0x0f, 0xa2]); // xor eax,eax; xor ecx,ecx; cpuid
    code.extend_from_slice(&[0x89, 0x1f, 0x89, 0x57, 0x04, 0x89, 0x4f, 0x08]); // [rdi]=ebx, [+4]=edx, [+8]=ecx
    code.extend_from_slice(&[0xb8, 1, 0, 0, 0, 0x31, 0xc9, 0x0f, 0xa2]); // mov eax,1; xor ecx,ecx; cpuid
    code.extend_from_slice(&[0x89, 0x47, 0x0c]); // [+12]=eax
    for k in 0..3u8 {
        let leaf = 0x8000_0002u32 + u32::from(k);
        code.push(0xb8); // mov eax, leaf
        code.extend_from_slice(&leaf.to_le_bytes());
        code.extend_from_slice(&[0x0f, 0xa2]); // cpuid
        let d = 16 + 16 * k;
        code.extend_from_slice(&[
            0x89,
            0x47,
            d,
            0x89,
            0x5f,
            d + 4,
            0x89,
            0x4f,
            d + 8,
            0x89,
            0x57,
            d + 12,
        ]);
    }
    code.extend_from_slice(&[0x48, 0x89, 0xfe]); // mov rsi, rdi
    code.extend_from_slice(&[0xba, 64, 0, 0, 0]); // mov edx, 64
    code.extend_from_slice(&[0xbf, 1, 0, 0, 0]); // mov edi, 1
    code.extend_from_slice(&[0xb8, 1, 0, 0, 0, 0x0f, 0x05]); // write
    code.extend_from_slice(&[0xb8, 60, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05]); // exit(0)
    let entry = BASE + 64 + 56;
    let size = (64 + 56 + code.len()) as u64;
    let mut f = Vec::with_capacity(size as usize);
    f.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    f.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    f.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    f.extend_from_slice(&1u32.to_le_bytes());
    f.extend_from_slice(&entry.to_le_bytes());
    f.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    f.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    f.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for h in [64u16, 56, 1, 64, 0, 0] {
        f.extend_from_slice(&h.to_le_bytes()); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    f.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    f.extend_from_slice(&7u32.to_le_bytes()); // RWX
    f.extend_from_slice(&0u64.to_le_bytes()); // p_offset
    f.extend_from_slice(&BASE.to_le_bytes());
    f.extend_from_slice(&BASE.to_le_bytes());
    f.extend_from_slice(&size.to_le_bytes());
    f.extend_from_slice(&0x1040u64.to_le_bytes()); // p_memsz: through the buffer
    f.extend_from_slice(&0x1000u64.to_le_bytes());
    f.extend_from_slice(&code);
    f
}

/// The CPU `qemu` emulates by default: runs a program that reads CPUID
/// under it (QEMU's CPU model, not the host's, is what the recorded
/// program saw, and what a perf.data of the recording names).
pub fn emulated_cpu(qemu: &OsStr) -> Result<EmulatedCpu, QemuError> {
    let qemu_path = super::ptrace::resolve_program(qemu)
        .map_err(|_| QemuError::NoQemu(qemu.to_string_lossy().into_owned()))?;
    let os = |what| move |e| ExecError::Os { what, source: e };
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"pt-cpuid".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(os("memfd_create")(std::io::Error::last_os_error()).into());
    }
    // SAFETY: a new descriptor we own.
    let mut f = std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    std::io::Write::write_all(&mut f, &cpuid_program()).map_err(os("writing a CPUID probe"))?;
    let path = format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd());
    let o = Command::new(&qemu_path)
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ExecError::ExecFailed {
            command: qemu_path.display().to_string(),
            source: e,
        })?;
    let b = &o.stdout;
    if !o.status.success() || b.len() != 64 {
        return Err(QemuError::DidNotRun {
            qemu: qemu_path.display().to_string(),
            path: "a CPUID probe".into(),
            status: o.status.to_string(),
        });
    }
    let w = |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    Ok(EmulatedCpu::from_cpuid([w(0), w(1), w(2)], w(3), &b[16..]))
}

/// Checks that `path` is a program QEMU's x86-64 emulator runs (an x86-64
/// ELF, or a script whose interpreter is one).
pub fn check_program(path: &std::path::Path) -> Result<(), QemuError> {
    let shown = path.display().to_string();
    let not = |what| QemuError::NotX86_64 {
        path: shown.clone(),
        what,
    };
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| {
            QemuError::Exec(ExecError::ExecFailed {
                command: shown.clone(),
                source: e,
            })
        })?;
    let head = &head[..n];
    if head.starts_with(b"\x7fELF") {
        if head.len() < 20 {
            return Err(not("a truncated ELF file"));
        }
        if head[4] == 1 {
            return Err(not("a 32-bit program"));
        }
        if head[18] != 62 || head[19] != 0 {
            return Err(not("a program for another architecture"));
        }
        return Ok(());
    }
    if let Some(line) = head.strip_prefix(b"#!") {
        let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
        let text = String::from_utf8_lossy(&line[..end]);
        let interp = text.split_whitespace().next().unwrap_or("");
        if interp.is_empty() {
            return Err(not("a script without an interpreter"));
        }
        return check_program(std::path::Path::new(interp));
    }
    Err(not("not an ELF program"))
}

/// The interpreter (and its argument) of a `#!` script.
fn shebang(path: &std::path::Path) -> Option<(String, Option<String>)> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let text = String::from_utf8_lossy(&line[..end]).trim().to_string();
    let (interp, arg) = match text.split_once([' ', '\t']) {
        Some((i, a)) => (
            i.to_string(),
            Some(a.trim().to_string()).filter(|a| !a.is_empty()),
        ),
        None => (text, None),
    };
    Some((interp, arg))
}

/// A connection from one QEMU process.
struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    /// The process (from its hello).
    pid: Option<u32>,
    /// Waiting for: the fork that created it, or the end of the program it replaces.
    held: bool,
    parent: u32,
    exec: bool,
    path: String,
    /// Runs of threads not created yet (held until their clone is given).
    deferred: Vec<(u32, Vec<u32>)>,
    /// The end record came (an exit call's status, if any).
    end: Option<Option<i32>>,
    /// An exec QEMU ran natively.
    native_exec: Option<(u32, String)>,
    /// The threads' ring files (read when the process died without its end record).
    rings: Vec<(u32, PathBuf)>,
    done: bool,
}

/// A process.
#[derive(Clone, Default)]
struct Proc {
    /// QEMU's block ids (index) in the source's table.
    blocks: Vec<Option<BlockId>>,
    mem: CodeMemory,
    maps: Vec<Mapping>,
    maps_dirty: bool,
    /// Signal handlers (from `rt_sigaction`): handler → the signals it handles.
    handlers: IntMap<u64, Vec<i32>>,
}

impl Proc {
    /// `rt_sigaction(signo)` installed `handler` (SIG_DFL 0, SIG_IGN 1: none).
    fn set_handler(&mut self, signo: i32, handler: u64) {
        for sigs in self.handlers.values_mut() {
            sigs.retain(|&s| s != signo);
        }
        self.handlers.retain(|_, sigs| !sigs.is_empty());
        if handler > 1 {
            self.handlers.entry(handler).or_default().push(signo);
        }
    }

    /// The signal a transfer to `handler` delivers: the one it handles, or
    /// of those, the one the thread just sent itself (`sent`); 0 if unknown.
    fn signal_to(&self, handler: u64, sent: Option<i32>) -> i32 {
        match self.handlers.get(&handler).map(Vec::as_slice) {
            Some([one]) => *one,
            Some(sigs) => sent.filter(|s| sigs.contains(s)).unwrap_or(0),
            None => 0,
        }
    }
}

/// The signal a `kill`, `tkill` or `tgkill` call sends (it reaches the
/// caller before the call returns when it sends it to itself).
fn sent_signal(nr: u64, args: &[u64; 6]) -> Option<i32> {
    match nr {
        NR_KILL | NR_TKILL => Some(args[1] as i32),
        NR_TGKILL => Some(args[2] as i32),
        _ => None,
    }
}

/// A thread.
struct Thread {
    id: ThreadId,
    /// The block it runs (its end is resolved by the next one).
    prev: Option<BlockId>,
    /// The system call the previous block ended in: nr, arguments, result.
    syscall: Option<(u64, [u64; 6], Option<i64>)>,
    /// A clone to report with that call.
    clone: Option<(ThreadId, CloneKind)>,
    /// The program its exec started (reported at its first block).
    exec: Option<String>,
}

/// What comes out next.
enum Emit {
    /// Block runs of the current thread (none retiring nothing); when
    /// given one by one, the instructions of `runs[run]` from `idx` on.
    Blocks {
        runs: Vec<BlockRun>,
        run: usize,
        idx: usize,
    },
    Item(ExecItem),
}

/// Most block runs in one [`Emit::Blocks`]: a batch (24 KiB) is handed
/// on while the recorder's caches still hold what the source wrote (a
/// run record's 64 Ki words are turned into runs a batch at a time, see
/// [`QemuSource::resume_run`]).
const BATCH: usize = 1024;

/// A program run under QEMU with the plugin; see the module docs.
pub struct QemuSource {
    listener: UnixListener,
    child: Child,
    qemu: String,
    main_pid: u32,
    main_status: Option<ExitKind>,
    conns: Vec<Conn>,
    procs: IntMap<u32, Proc>,
    /// Code of a process as it was before its exec, until the exec is given.
    pre_exec: IntMap<u32, CodeMemory>,
    threads: IntMap<u32, Thread>,
    /// Threads (tid) whose clone was given.
    known: HashSet<u32>,
    /// Processes a fork created whose connection has not come yet.
    expected: HashSet<u32>,
    queue: VecDeque<Emit>,
    current: Option<ThreadId>,
    cur_pid: u32,
    empty: CodeMemory,
    stop_flag: Option<Arc<AtomicBool>>,
    snapshots: Option<(Arc<AtomicBool>, Arc<AtomicBool>)>,
    /// A snapshot waits until each connection was handled up to here.
    snapshot_marks: Option<Vec<usize>>,
    stopping: bool,
    finished: bool,
    /// A private directory for the plugin's ring files, removed at the end.
    dir: PathBuf,
    ended_at: Option<Instant>,
    blocks_run: u64,
    /// QEMU translated a block: the program runs.
    translated: bool,
    /// Blocks decoded, by address and code bytes (QEMU translates a block
    /// again after its code changed, was flushed, or in a forked child):
    /// each distinct block is decoded once.
    decoded: HashMap<Box<[u8]>, BlockId>,
    /// The decoded blocks (what [`BlockRun`]s name).
    table: BlockTable,
    /// The key being looked up (address, code bytes).
    key: Vec<u8>,
    /// A run record's words (a buffer kept between records).
    words: Vec<u32>,
    /// The run record in `words` is handled up to here (process, thread,
    /// next word): the rest follows once the batches made so far are taken.
    pending: Option<(u32, u32, usize)>,
    /// Batches given back by the recorder ([`ExecutionSource::recycle`]).
    spare: Vec<Vec<BlockRun>>,
    /// Files' `PT_LOAD` segments, by path.
    segments: HashMap<String, Option<Vec<LoadSegment>>>,
}

fn exit_of(status: std::process::ExitStatus) -> ExitKind {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitKind::Exited(c),
        (None, Some(s)) => ExitKind::Killed(s),
        _ => ExitKind::Exited(0),
    }
}

impl QemuSource {
    /// Starts `program` with `args` under QEMU with the plugin, and waits
    /// until it runs (a program QEMU cannot load is an error here, before
    /// anything is recorded).
    pub fn spawn<S: AsRef<OsStr>>(
        program: &OsStr,
        args: &[S],
        opts: QemuOptions,
    ) -> Result<QemuSource, QemuError> {
        let qemu_path = super::ptrace::resolve_program(&opts.qemu)
            .map_err(|_| QemuError::NoQemu(opts.qemu.to_string_lossy().into_owned()))?;
        let path = super::ptrace::resolve_program(program)?;
        check_program(&path)?;
        // QEMU runs ELF programs only: a script runs as its interpreter
        // would (interpreter, its argument, the script, the arguments).
        let mut argv0 = program.to_owned();
        let mut path = path;
        let mut args: Vec<OsString> = args.iter().map(|a| a.as_ref().to_owned()).collect();
        if let Some((interp, arg)) = shebang(&path) {
            let mut v: Vec<OsString> = arg.into_iter().map(OsString::from).collect();
            v.push(path.clone().into_os_string());
            v.append(&mut args);
            args = v;
            argv0 = interp.clone().into();
            path = PathBuf::from(interp);
        }
        use std::os::linux::net::SocketAddrExt;
        let name = format!(
            "ptperf-qemu-{}-{:x}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ (&opts as *const _ as u128)
        );
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).map_err(|e| {
            ExecError::Os {
                what: "socket address",
                source: e,
            }
        })?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| ExecError::Os {
            what: "listening for the plugin",
            source: e,
        })?;
        listener.set_nonblocking(true).map_err(|e| ExecError::Os {
            what: "listening for the plugin",
            source: e,
        })?;
        let hex: String = path
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let so = opts.plugin.display().to_string();
        let dir = std::env::temp_dir().join(&name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| ExecError::Os {
                what: "creating a directory for the plugin",
                source: e,
            })?;
        let dir_hex: String = dir
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut plugin = opts.plugin.as_os_str().to_owned();
        plugin.push(format!(",sock={name},so={so},dir={dir_hex},exe={hex}"));
        let child = Command::new(&qemu_path)
            .arg("-plugin")
            .arg(&plugin)
            .arg("-0")
            .arg(&argv0)
            .arg(&path)
            .args(&args)
            .spawn()
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                ExecError::ExecFailed {
                    command: qemu_path.display().to_string(),
                    source: e,
                }
            })?;
        let main_pid = child.id();
        let mut s = QemuSource {
            listener,
            child,
            qemu: qemu_path.display().to_string(),
            main_pid,
            main_status: None,
            conns: Vec::new(),
            procs: IntMap::default(),
            pre_exec: IntMap::default(),
            threads: IntMap::default(),
            known: HashSet::new(),
            expected: HashSet::new(),
            queue: VecDeque::new(),
            current: None,
            cur_pid: main_pid,
            empty: CodeMemory::new(),
            stop_flag: opts.stop_flag,
            snapshots: opts.snapshots,
            snapshot_marks: None,
            dir: dir.clone(),
            stopping: false,
            finished: false,
            ended_at: None,
            blocks_run: 0,
            translated: false,
            decoded: HashMap::new(),
            table: BlockTable::new(),
            key: Vec::new(),
            words: Vec::new(),
            pending: None,
            spare: Vec::new(),
            segments: HashMap::new(),
        };
        // Until QEMU translates the program's first block, it may still
        // refuse the program: nothing is recorded then.
        while !s.translated {
            if s.step()? {
                continue;
            }
            if let Ok(Some(st)) = s.child.try_wait() {
                s.main_status = Some(exit_of(st));
                if !s.translated {
                    return Err(QemuError::DidNotRun {
                        qemu: s.qemu.clone(),
                        path: path.display().to_string(),
                        status: st.to_string(),
                    });
                }
            }
            s.wait_io()?;
        }
        Ok(s)
    }

    /// Blocks executed so far (all threads).
    pub fn blocks(&self) -> u64 {
        self.blocks_run
    }

    fn stop_requested(&self) -> bool {
        self.stop_flag
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// A snapshot request: it applies to what QEMU reported up to now.
    fn take_snapshot_request(&mut self) {
        let Some((signal, _)) = &self.snapshots else {
            return;
        };
        if !signal.load(Ordering::Relaxed) || !signal.swap(false, Ordering::Relaxed) {
            return;
        }
        // What the sockets hold now is before the request.
        let _ = self.read_available();
        self.snapshot_marks = Some(self.conns.iter().map(|c| c.buf.len()).collect());
    }

    /// Hands a snapshot request on once every connection was handled up to its mark.
    fn due_snapshot(&mut self) {
        let Some(marks) = &self.snapshot_marks else {
            return;
        };
        let reached = marks
            .iter()
            .zip(&self.conns)
            .all(|(&m, c)| c.done || c.pos >= m || self.conns.is_empty());
        if reached && self.pending.is_none() {
            self.snapshot_marks = None;
            if let Some((_, to_recorder)) = &self.snapshots {
                to_recorder.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Reads and handles more of the connections; false when everything ended.
    fn pump(&mut self) -> Result<bool, ExecError> {
        loop {
            if self.finished {
                return Ok(false);
            }
            self.take_snapshot_request();
            self.due_snapshot();
            if !self.stopping && self.stop_requested() {
                self.stopping = true;
                // Kill every process recorded (the children too).
                let pids: HashSet<u32> = self
                    .conns
                    .iter()
                    .filter(|c| !c.eof)
                    .filter_map(|c| c.pid)
                    .chain([self.main_pid])
                    .collect();
                for p in pids {
                    // SAFETY: signalling a process of the recording.
                    unsafe { libc::kill(p as i32, libc::SIGKILL) };
                }
            }
            // Handle one record of some connection that is ready.
            if self.step()? {
                if !self.queue.is_empty() {
                    return Ok(true);
                }
                continue;
            }
            if self.all_done() {
                self.finish_all();
                return Ok(!self.queue.is_empty());
            }
            if self.release_orphans() {
                continue;
            }
            self.wait_io()?;
        }
    }

    fn all_done(&mut self) -> bool {
        if self.main_status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.main_status = Some(exit_of(st));
            }
        }
        if self.main_status.is_none() || self.conns.iter().any(|c| !c.done) {
            self.ended_at = None;
            return false;
        }
        if self.expected.is_empty() {
            return true;
        }
        // A fork's child may still be connecting: give it a moment.
        let t = *self.ended_at.get_or_insert_with(Instant::now);
        t.elapsed() > Duration::from_secs(2)
    }

    /// Waits for data or a new connection (or a tick, to see the exit).
    fn wait_io(&mut self) -> Result<(), ExecError> {
        let mut fds: Vec<libc::pollfd> = vec![libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        for c in self.conns.iter().filter(|c| !c.eof) {
            fds.push(libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: a valid array of pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
        self.read_available()
    }

    /// Accepts new connections and reads what the open ones hold.
    fn read_available(&mut self) -> Result<(), ExecError> {
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = stream.set_nonblocking(true);
            self.conns.push(Conn {
                stream,
                buf: Vec::with_capacity(1 << 20),
                pos: 0,
                eof: false,
                pid: None,
                held: false,
                parent: 0,
                exec: false,
                path: String::new(),
                deferred: Vec::new(),
                end: None,
                native_exec: None,
                rings: Vec::new(),
                done: false,
            });
        }
        for c in self.conns.iter_mut().filter(|c| !c.eof) {
            if self.snapshot_marks.is_some() {
                // Positions stay put while a snapshot waits for them.
            } else if c.pos > 0 && c.pos == c.buf.len() {
                c.buf.clear();
                c.pos = 0;
            } else if c.pos > (1 << 20) {
                c.buf.drain(..c.pos);
                c.pos = 0;
            }
            let mut chunk = [0u8; 1 << 16];
            loop {
                match c.stream.read(&mut chunk) {
                    Ok(0) => {
                        c.eof = true;
                        break;
                    }
                    Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        c.eof = true;
                        break;
                    }
                }
                // Little read ahead: QEMU waits while the recorder is
                // behind (a snapshot or Ctrl-C applies to what was read).
                if c.buf.len() - c.pos > READ_AHEAD {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Handles one record of a connection that has one; false if none has.
    fn step(&mut self) -> Result<bool, ExecError> {
        if self.pending.is_some() {
            // The rest of the run record being handled comes first.
            self.resume_run()?;
            return Ok(true);
        }
        for i in 0..self.conns.len() {
            if self.conns[i].done || self.held(i) {
                continue;
            }
            let c = &mut self.conns[i];
            let avail = &c.buf[c.pos..];
            if avail.len() >= HEADER {
                let len = u32::from_le_bytes([avail[1], avail[2], avail[3], avail[4]]) as usize;
                if avail.len() >= HEADER + len {
                    let tag = avail[0];
                    let at = c.pos + HEADER;
                    c.pos += HEADER + len;
                    // The record is read in place (handling it reads no connection).
                    let buf = std::mem::take(&mut c.buf);
                    let r = self.record(i, tag, &buf[at..at + len]);
                    self.conns[i].buf = buf;
                    r?;
                    return Ok(true);
                }
            }
            if c.eof {
                self.conn_ended(i);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Held connections that nothing can release any more (the other
    /// connections ended, or the recording is being stopped): they are
    /// taken as they are, so that the recording ends (a process still
    /// running would otherwise wait for the recorder to read it, forever).
    /// Returns whether one was released.
    fn release_orphans(&mut self) -> bool {
        let stuck = |c: &Conn| c.held && !c.done;
        if !self.conns.iter().any(stuck) {
            return false;
        }
        let others_ended = self.conns.iter().all(|c| c.done || stuck(c));
        if !(self.stopping || others_ended && self.main_status.is_some()) {
            return false;
        }
        let Some(i) = self.conns.iter().position(stuck) else {
            return false;
        };
        if let Some(pid) = self.conns[i].pid {
            self.known.insert(pid);
        }
        self.conns[i].held = false;
        self.start_process(i);
        true
    }

    /// Whether connection `i` waits for something another gives first.
    fn held(&mut self, i: usize) -> bool {
        let c = &self.conns[i];
        if !c.held {
            return false;
        }
        let Some(pid) = c.pid else { return false };
        let release = if c.exec {
            // The program it replaces has ended.
            !self
                .conns
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && o.pid == Some(pid) && !o.done)
        } else {
            self.known.contains(&pid)
        };
        if release {
            self.conns[i].held = false;
            self.start_process(i);
        }
        !release
    }

    fn process(&mut self, pid: u32) -> &mut Proc {
        self.procs.entry(pid).or_default()
    }

    fn record(&mut self, i: usize, tag: u8, payload: &[u8]) -> Result<(), ExecError> {
        let corrupt = |what| ExecError::CorruptLog { offset: 0, what };
        let mut p = Payload(payload);
        if tag == TAG_HELLO {
            let (Some(_version), Some(_min), Some(_cur), Some(pid), Some(parent), Some(flags)) =
                (p.u32(), p.u32(), p.u32(), p.u32(), p.u32(), p.u8())
            else {
                return Err(corrupt("short hello from the QEMU plugin"));
            };
            let path = String::from_utf8_lossy(p.rest()).into_owned();
            let c = &mut self.conns[i];
            c.pid = Some(pid);
            c.parent = parent;
            c.exec = flags & HELLO_EXEC != 0;
            c.path = path;
            c.held = c.exec || parent != 0;
            if !c.held {
                self.start_process(i);
            }
            return Ok(());
        }
        let Some(pid) = self.conns[i].pid else {
            return Err(corrupt("a record before the plugin's hello"));
        };
        match tag {
            TAG_BLOCK => {
                let (Some(id), Some(addr)) = (p.u32(), p.u64()) else {
                    return Err(corrupt("short block record"));
                };
                let block = self.decode_block(addr, p.rest())?;
                self.translated = true;
                let proc = self.process(pid);
                let id = id as usize;
                if proc.blocks.len() <= id {
                    proc.blocks.resize(id + 1, None);
                }
                proc.blocks[id] = Some(block);
            }
            TAG_PAGE => {
                let Some(addr) = p.u64() else {
                    return Err(corrupt("short page record"));
                };
                let bytes = p.rest();
                self.process(pid).mem.set_page(addr, bytes);
            }
            TAG_MAP => {
                let (Some(start), Some(end), Some(offset), Some(perms)) =
                    (p.u64(), p.u64(), p.u64(), p.u8())
                else {
                    return Err(corrupt("short map record"));
                };
                let path = String::from_utf8_lossy(p.rest()).into_owned();
                let m = Mapping {
                    start,
                    end,
                    offset,
                    perms: Perms::from_bits(perms).unwrap_or_default(),
                    path,
                };
                // QEMU maps a program's segments with the same host rights
                // (none executable): the host shows them merged.
                let parts = match self.load_segments(&m.path) {
                    Some(segs) => split_by_segments(&m, segs),
                    None => vec![m],
                };
                let proc = self.process(pid);
                for m in parts {
                    // A mapping replaces the ones it overlaps (unmapped since).
                    proc.maps.retain(|o| o.end <= m.start || m.end <= o.start);
                    proc.maps.push(m);
                }
                proc.maps.sort_by_key(|m| m.start);
                proc.maps_dirty = true;
            }
            TAG_RUN => {
                let Some(tid) = p.u32() else {
                    return Err(corrupt("short run record"));
                };
                let mut words = std::mem::take(&mut self.words);
                let bytes = p.rest();
                // Sized first, then filled: a loop the compiler vectorizes.
                words.clear();
                words.resize(bytes.len() / 4, 0);
                for (w, b) in words.iter_mut().zip(bytes.chunks_exact(4)) {
                    *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                let known = self.known.contains(&tid);
                if !known {
                    self.conns[i].deferred.push((tid, words.clone()));
                }
                self.words = words;
                if known {
                    self.pending = Some((pid, tid, 0));
                    self.resume_run()?;
                }
            }
            TAG_NATIVE_EXEC => {
                let tid = p.u32().unwrap_or(0);
                let path = String::from_utf8_lossy(p.rest()).into_owned();
                self.conns[i].native_exec = Some((tid, path));
            }
            TAG_END => {
                let status = match p.u8() {
                    Some(1) => p.u32().map(|s| s as i32),
                    _ => None,
                };
                self.conns[i].end = Some(status);
            }
            TAG_RING => {
                let tid = p.u32().unwrap_or(0);
                let path = PathBuf::from(String::from_utf8_lossy(p.rest()).into_owned());
                if path.starts_with(&self.dir) {
                    self.conns[i].rings.push((tid, path));
                }
            }
            TAG_WARN => {
                let why = String::from_utf8_lossy(p.rest()).into_owned();
                self.queue
                    .push_back(Emit::Item(ExecItem::Event(Event::Untraced {
                        thread: ThreadId { pid, tid: 0 },
                        why,
                    })));
            }
            _ => return Err(corrupt("unknown record from the QEMU plugin")),
        }
        Ok(())
    }

    /// The `PT_LOAD` segments of the file at `path`, read once.
    fn load_segments(&mut self, path: &str) -> Option<&[LoadSegment]> {
        if !path.starts_with('/') {
            return None;
        }
        self.segments
            .entry(path.to_string())
            .or_insert_with(|| load_segments(std::path::Path::new(path)))
            .as_deref()
    }

    /// The block at `addr` with these code bytes, decoded once.
    fn decode_block(&mut self, addr: u64, code: &[u8]) -> Result<BlockId, ExecError> {
        self.key.clear();
        self.key.extend_from_slice(&addr.to_le_bytes());
        self.key.extend_from_slice(code);
        if let Some(&b) = self.decoded.get(&self.key[..]) {
            return Ok(b);
        }
        let b = self.table.push(CodeBlock::decode(addr, code)?);
        self.decoded.insert(self.key[..].into(), b);
        Ok(b)
    }

    /// A connection's process starts (its hello was released).
    fn start_process(&mut self, i: usize) {
        let c = &self.conns[i];
        let Some(pid) = c.pid else { return };
        let (exec, path, parent) = (c.exec, c.path.clone(), c.parent);
        self.expected.remove(&pid);
        if exec {
            // The program before the exec keeps its code until the exec is given.
            let old = self.procs.remove(&pid).unwrap_or_default();
            self.pre_exec.insert(pid, old.mem);
            self.procs.insert(pid, Proc::default());
            match self.threads.get_mut(&pid) {
                Some(t) => t.exec = Some(path),
                None => {
                    self.known.insert(pid);
                    self.threads.insert(pid, new_thread(ThreadId::main_of(pid)));
                    self.queue
                        .push_back(Emit::Item(ExecItem::Event(Event::Exec { pid, path })));
                }
            }
            return;
        }
        if parent != 0 {
            // A fork's child: a copy of its parent (already reported by the parent).
            let copy = self.procs.get(&parent).cloned().unwrap_or_default();
            let maps = copy.maps.clone();
            self.procs.insert(
                pid,
                Proc {
                    maps_dirty: false,
                    ..copy
                },
            );
            let id = ThreadId::main_of(pid);
            self.threads.insert(pid, new_thread(id));
            self.switch_to(id);
            self.queue
                .push_back(Emit::Item(ExecItem::Event(Event::Mappings(maps))));
            return;
        }
        // The first program.
        self.known.insert(pid);
        self.procs.insert(pid, Proc::default());
        self.threads.insert(pid, new_thread(ThreadId::main_of(pid)));
        self.queue
            .push_back(Emit::Item(ExecItem::Event(Event::Exec { pid, path })));
        self.current = Some(ThreadId::main_of(pid));
    }

    fn switch_to(&mut self, id: ThreadId) {
        if self.current != Some(id) {
            self.current = Some(id);
            self.queue
                .push_back(Emit::Item(ExecItem::Event(Event::Switch(id))));
        }
    }

    /// Queues a block run (after what is queued: the current thread's).
    #[inline]
    fn push_run(&mut self, run: BlockRun) {
        if self.table.run(&run).map_or(0, |r| r.count()) == 0 {
            // One instruction that faulted: nothing retired.
            return;
        }
        if let Some(Emit::Blocks { runs, .. }) = self.queue.back_mut() {
            if runs.len() < BATCH {
                runs.push(run);
                return;
            }
        }
        let mut runs = self
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH));
        runs.push(run);
        self.queue.push_back(Emit::Blocks {
            runs,
            run: 0,
            idx: 0,
        });
    }

    fn push_event(&mut self, e: Event) {
        self.queue.push_back(Emit::Item(ExecItem::Event(e)));
    }

    /// A run of thread `tid` of process `pid`, whole.
    fn run(&mut self, pid: u32, tid: u32, words: &[u32]) -> Result<(), ExecError> {
        self.run_from(pid, tid, words, 0, false).map(|_| ())
    }

    /// Goes on with the run record in `words` (see `pending`): up to the
    /// first full batch, so that the recorder takes the runs while they are
    /// in its caches (a record's runs made at once fill megabytes).
    fn resume_run(&mut self) -> Result<(), ExecError> {
        let Some((pid, tid, from)) = self.pending.take() else {
            return Ok(());
        };
        let words = std::mem::take(&mut self.words);
        let r = self.run_from(pid, tid, &words, from, true);
        self.words = words;
        if let Some(k) = r? {
            self.pending = Some((pid, tid, k));
        }
        Ok(())
    }

    /// Whether a batch (or an item) is ready behind which a run can pause.
    fn batch_ready(&self) -> bool {
        self.queue.len() > 1
            || matches!(self.queue.back(), Some(Emit::Blocks { runs, .. }) if runs.len() >= BATCH)
    }

    /// A run of thread `tid` of process `pid` from word `from` on; with
    /// `pause`, it stops where a batch is ready and returns the next word.
    fn run_from(
        &mut self,
        pid: u32,
        tid: u32,
        words: &[u32],
        from: usize,
        pause: bool,
    ) -> Result<Option<usize>, ExecError> {
        let id = ThreadId { pid, tid };
        self.switch_to(id);
        let mut k = from;
        while k < words.len() {
            if pause && k > from && self.batch_ready() {
                return Ok(Some(k));
            }
            let w = words[k];
            k += 1;
            if w < MARK {
                let plain = self.plain_blocks(pid, tid, &words[k - 1..]);
                if plain > 0 {
                    k += plain - 1;
                    continue;
                }
                let Some(block) = self
                    .procs
                    .get(&pid)
                    .and_then(|p| p.blocks.get(w as usize).copied().flatten())
                else {
                    return Err(ExecError::CorruptLog {
                        offset: 0,
                        what: "a block the QEMU plugin did not describe",
                    });
                };
                self.blocks_run += 1;
                self.block(pid, tid, block);
                continue;
            }
            let n = mark_words(w);
            let Some(args) = words.get(k..k + n) else {
                return Err(ExecError::CorruptLog {
                    offset: 0,
                    what: "a cut marker from the QEMU plugin",
                });
            };
            k += n;
            let u = |j: usize| u64::from(args[2 * j]) | u64::from(args[2 * j + 1]) << 32;
            match w {
                MARK_SYSCALL => {
                    let nr = u(0);
                    let a = [u(1), u(2), u(3), u(4), u(5), u(6)];
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.syscall = Some((nr, a, None));
                    }
                }
                MARK_SYSRET => {
                    let (nr, ret) = (u(0), u(1) as i64);
                    let Some(t) = self.threads.get_mut(&tid) else {
                        continue;
                    };
                    match &mut t.syscall {
                        Some((n, a, r)) if *n == nr => {
                            *r = Some(ret);
                            if nr == NR_RT_SIGACTION && ret == 0 && a[1] != 0 {
                                let proc = self.procs.entry(pid).or_default();
                                proc.set_handler(a[0] as i32, a[5]);
                            }
                            if ret > 0 && matches!(nr, NR_CLONE | NR_FORK | NR_VFORK | NR_CLONE3) {
                                let flags = match nr {
                                    NR_CLONE => a[0],
                                    NR_CLONE3 => a[5],
                                    _ => 0,
                                };
                                let child = ret as u32;
                                t.clone = Some(if flags & CLONE_THREAD != 0 {
                                    (ThreadId { pid, tid: child }, CloneKind::Thread)
                                } else {
                                    (ThreadId::main_of(child), CloneKind::Fork)
                                });
                            }
                        }
                        // A fork's child returns from the call its parent made.
                        _ => {}
                    }
                }
                MARK_EXIT => {
                    let status = args[0] as i32;
                    self.end_thread(tid, Some(ExitKind::Exited(status)));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// The common case of [`Self::block`] in a tight loop: blocks of thread
    /// `tid` (the first words of `words`) whose predecessors end where
    /// control plainly goes on (no system call, signal, REP iteration or
    /// mapping change between them). Returns how many words it took.
    #[inline(never)]
    fn plain_blocks(&mut self, pid: u32, tid: u32, words: &[u32]) -> usize {
        let Some(proc) = self.procs.get(&pid).filter(|p| !p.maps_dirty) else {
            return 0;
        };
        let Some(t) = self
            .threads
            .get_mut(&tid)
            .filter(|t| t.syscall.is_none() && t.clone.is_none() && t.exec.is_none())
        else {
            return 0;
        };
        // The runs go to the batch at the queue's end (the thread's), or a new one.
        let mut runs = match self.queue.back_mut() {
            Some(Emit::Blocks { runs, .. }) if runs.len() < BATCH => std::mem::take(runs),
            _ => self
                .spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(BATCH)),
        };
        let fresh = runs.is_empty();
        let room = BATCH.saturating_sub(runs.len()).max(1);
        let mut n = 0;
        // Where the previous block's end may plainly go is carried from one
        // block to the next: one block head read per block. Where it goes
        // plainly, its `next_ip` is the next block's start and it retired
        // (see `resolve`; a REP iteration, which starts at the same
        // instruction, is not one of its exits).
        let table = &self.table;
        if let Some((mut prev, mut exits)) = t.prev.and_then(|p| Some((p, *table.head(p)?))) {
            for &w in words.iter().take(room) {
                let Some(&Some(id)) = proc.blocks.get(w as usize) else {
                    break;
                };
                let Some(head) = table.head(id) else { break };
                let start = head.start;
                if !exits.allows(start) {
                    break;
                }
                runs.push(BlockRun {
                    block: prev,
                    retire_last: true,
                    next_ip: start,
                });
                prev = id;
                exits = *head;
                n += 1;
            }
            t.prev = Some(prev);
        }
        if fresh {
            if runs.is_empty() {
                self.spare.push(runs);
            } else {
                self.queue.push_back(Emit::Blocks {
                    runs,
                    run: 0,
                    idx: 0,
                });
            }
        } else if let Some(Emit::Blocks { runs: back, .. }) = self.queue.back_mut() {
            *back = runs;
        }
        self.blocks_run += n as u64;
        n
    }

    /// Thread `tid` runs `block`: the previous block's end is resolved.
    fn block(&mut self, pid: u32, tid: u32, block: BlockId) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let (Some(prev), Some(b)) = (t.prev.take(), self.table.get(block)) else {
            t.prev = Some(block);
            t.syscall = None;
            self.maps_event(pid);
            return;
        };
        let (start, one) = (b.start(), b.insns.len() == 1);
        let Some(last) = self.table.get(prev).map(|p| *p.last()) else {
            t.prev = Some(block);
            return;
        };
        if last.rep && start == last.ip && one && t.syscall.is_none() {
            // The next iteration of the same REP instruction.
            t.prev = Some(prev);
            return;
        }
        let syscall = t.syscall.take();
        let clone = t.clone.take();
        let exec = t.exec.take();
        t.prev = Some(block);
        let r = resolve(&last, start, syscall.map(|s| s.0));
        self.push_run(BlockRun {
            block: prev,
            next_ip: r.next_ip,
            retire_last: r.retired,
        });
        if let Some((nr, args, ret)) = syscall {
            self.push_event(Event::SyscallEnter { nr, args });
            if let Some((child, kind)) = clone {
                self.push_event(Event::Clone { child, kind });
                self.known.insert(child.tid);
                if kind == CloneKind::Fork {
                    self.expected.insert(child.pid);
                } else {
                    self.threads.insert(child.tid, new_thread(child));
                }
                self.release_deferred(child.tid);
                self.switch_to(ThreadId { pid, tid });
            }
            if let Some(path) = exec {
                self.push_event(Event::Exec { pid, path });
                self.push_event(Event::SyscallExit { nr, ret: 0 });
                let maps = self
                    .procs
                    .get(&pid)
                    .map(|p| p.maps.clone())
                    .unwrap_or_default();
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.maps_dirty = false;
                }
                self.push_event(Event::Mappings(maps));
            } else if let Some(ret) = ret {
                self.push_event(Event::SyscallExit { nr, ret });
            }
        }
        if let Some(from_ip) = r.signal_from {
            let sent = syscall.and_then(|(nr, a, _)| sent_signal(nr, &a));
            let signo = self.procs.get(&pid).map_or(0, |p| p.signal_to(start, sent));
            self.push_event(Event::Signal {
                signo,
                from_ip,
                handler: Some(start),
            });
        }
        self.maps_event(pid);
    }

    fn maps_event(&mut self, pid: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            if p.maps_dirty {
                p.maps_dirty = false;
                let maps = p.maps.clone();
                self.push_event(Event::Mappings(maps));
            }
        }
    }

    /// Runs of `tid` held until its clone was given.
    fn release_deferred(&mut self, tid: u32) {
        for i in 0..self.conns.len() {
            if !self.conns[i].deferred.iter().any(|(t, _)| *t == tid) {
                continue;
            }
            let Some(pid) = self.conns[i].pid else {
                continue;
            };
            let runs: Vec<(u32, Vec<u32>)> = std::mem::take(&mut self.conns[i].deferred);
            let (mine, rest): (Vec<_>, Vec<_>) = runs.into_iter().partition(|(t, _)| *t == tid);
            self.conns[i].deferred = rest;
            self.threads
                .entry(tid)
                .or_insert_with(|| new_thread(ThreadId { pid, tid }));
            for (_, words) in mine {
                // A run that cannot be read ends the recording at the next call.
                let _ = self.run(pid, tid, &words);
            }
        }
    }

    /// Ends thread `tid`: its last block, the exit call, the exit.
    fn end_thread(&mut self, tid: u32, how: Option<ExitKind>) {
        let Some(mut t) = self.threads.remove(&tid) else {
            return;
        };
        self.switch_to(t.id);
        if let Some((prev, last)) = t
            .prev
            .take()
            .and_then(|p| Some((p, *self.table.get(p)?.last())))
        {
            let r = resolve(&last, last.fall_through(), None);
            self.push_run(BlockRun {
                block: prev,
                next_ip: r.next_ip,
                retire_last: r.retired,
            });
            if let Some((nr, args, _)) = t.syscall.take() {
                self.push_event(Event::SyscallEnter { nr, args });
            }
        }
        if let Some(how) = how {
            self.push_event(Event::Exit(how));
        }
    }

    /// Connection `i` ended: its process's threads end (or wait for the
    /// program their exec started).
    fn conn_ended(&mut self, i: usize) {
        self.conns[i].done = true;
        let Some(pid) = self.conns[i].pid else { return };
        // Runs whose clone never came: given as they are.
        let deferred = std::mem::take(&mut self.conns[i].deferred);
        for (tid, words) in deferred {
            self.known.insert(tid);
            self.threads
                .entry(tid)
                .or_insert_with(|| new_thread(ThreadId { pid, tid }));
            let _ = self.run(pid, tid, &words);
        }
        let end = self.conns[i].end;
        if end.is_none() {
            // Died without its exit callbacks (killed by a signal): the
            // words its threads had not handed over are in their rings.
            for (tid, path) in std::mem::take(&mut self.conns[i].rings) {
                let words = read_ring(&path);
                if words.is_empty() || !self.threads.contains_key(&tid) {
                    continue;
                }
                let _ = self.run(pid, tid, &words);
            }
        }
        let native = self.conns[i].native_exec.take();
        let mut tids: Vec<u32> = self
            .threads
            .values()
            .filter(|t| t.id.pid == pid)
            .map(|t| t.id.tid)
            .collect();
        tids.sort_unstable();
        let execs = tids.iter().any(|tid| {
            self.threads
                .get(tid)
                .and_then(|t| t.syscall)
                .is_some_and(|s| matches!(s.0, NR_EXECVE | NR_EXECVEAT) && s.2.is_none())
        });
        // The process is gone (unless it exec'd a program QEMU runs again):
        // its status, for the first process.
        let main_status = if pid == self.main_pid && (native.is_some() || !execs || end.is_some()) {
            self.child.wait().ok().map(exit_of)
        } else {
            None
        };
        if pid == self.main_pid {
            self.main_status = main_status;
        }
        for tid in tids {
            let execing = self
                .threads
                .get(&tid)
                .and_then(|t| t.syscall)
                .is_some_and(|s| matches!(s.0, NR_EXECVE | NR_EXECVEAT) && s.2.is_none());
            if execing && end.is_none() && !self.stopping {
                if let Some((_, path)) = native.as_ref() {
                    self.end_thread(tid, None);
                    self.push_event(Event::Untraced {
                        thread: ThreadId { pid, tid: 0 },
                        why: format!("exec'd {path}, which QEMU ran natively (not recorded)"),
                    });
                    self.push_event(Event::Exit(main_status.unwrap_or(ExitKind::Exited(0))));
                } else {
                    // The exec'd program's QEMU connects next.
                    self.expected.insert(pid);
                }
                continue;
            }
            if self.stopping {
                self.end_thread(tid, None);
                continue;
            }
            let how = match end {
                Some(Some(status)) => ExitKind::Exited(status),
                // No exit call: a signal ended the process.
                _ => main_status.unwrap_or(ExitKind::Killed(libc::SIGKILL)),
            };
            let how = match (how, main_status) {
                (ExitKind::Exited(_), Some(k @ ExitKind::Killed(_))) => k,
                (h, _) => h,
            };
            self.end_thread(tid, Some(how));
        }
    }

    /// Everything ended: what is left is given.
    fn finish_all(&mut self) {
        self.finished = true;
        let mut tids: Vec<u32> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let id = self.threads[&tid].id;
            self.end_thread(tid, None);
            if !self.stopping {
                self.push_event(Event::Untraced {
                    thread: ThreadId {
                        pid: id.pid,
                        tid: 0,
                    },
                    why: "its exec'd program did not report (QEMU could not run it)".into(),
                });
                self.push_event(Event::Exit(ExitKind::Killed(libc::SIGKILL)));
            }
        }
        for pid in std::mem::take(&mut self.expected) {
            self.push_event(Event::Untraced {
                thread: ThreadId { pid, tid: 0 },
                why: "a child process that did not report".into(),
            });
        }
        if self.stopping {
            self.push_event(Event::Stopped(StopReason::Interrupted));
        }
    }

    /// How the program (the first process) ended.
    pub fn exit(&self) -> Option<ExitKind> {
        self.main_status
    }
}

/// The words left in a ring file (see [`wire`]).
fn read_ring(path: &std::path::Path) -> Vec<u32> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    let n = words.first().map_or(0, |&n| n as usize);
    words.get(1..1 + n).map(<[u32]>::to_vec).unwrap_or_default()
}

fn new_thread(id: ThreadId) -> Thread {
    Thread {
        id,
        prev: None,
        syscall: None,
        clone: None,
        exec: None,
    }
}

impl ExecutionSource for QemuSource {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        if self.snapshots.is_some() {
            self.take_snapshot_request();
        }
        loop {
            match self.queue.front_mut() {
                Some(Emit::Blocks { runs, run, idx }) => {
                    if let Some(b) = runs.get(*run).and_then(|r| self.table.run(r)) {
                        if *idx < b.count() {
                            let r = b.insn(*idx);
                            *idx += 1;
                            return Ok(Some(ExecItem::Insn(r)));
                        }
                        *run += 1;
                        *idx = 0;
                        continue;
                    }
                    self.queue.pop_front();
                }
                Some(Emit::Item(_)) => {
                    let Some(Emit::Item(item)) = self.queue.pop_front() else {
                        unreachable!()
                    };
                    match &item {
                        ExecItem::Event(Event::Switch(t)) => self.cur_pid = t.pid,
                        ExecItem::Event(Event::Exec { pid, .. }) => {
                            self.cur_pid = *pid;
                            self.pre_exec.remove(pid);
                        }
                        _ => {}
                    }
                    return Ok(Some(item));
                }
                None => {
                    if !self.pump()? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn next_step(&mut self) -> Result<Option<Step>, ExecError> {
        if self.snapshots.is_some() {
            self.take_snapshot_request();
        }
        loop {
            match self.queue.front() {
                Some(Emit::Blocks { run: 0, idx: 0, .. }) => {
                    let Some(Emit::Blocks { runs, .. }) = self.queue.pop_front() else {
                        unreachable!()
                    };
                    return Ok(Some(Step::Blocks(runs)));
                }
                Some(_) => return Ok(self.next_item()?.map(Step::Item)),
                None => {
                    if !self.pump()? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn recycle(&mut self, mut runs: Vec<BlockRun>) {
        if self.spare.len() < 4 && runs.capacity() >= BATCH {
            runs.clear();
            self.spare.push(runs);
        }
    }

    fn blocks(&self) -> &BlockTable {
        &self.table
    }

    fn memory(&self) -> &CodeMemory {
        self.process_memory(self.cur_pid).unwrap_or(&self.empty)
    }

    fn process_memory(&self, pid: u32) -> Option<&CodeMemory> {
        self.pre_exec
            .get(&pid)
            .or_else(|| self.procs.get(&pid).map(|p| &p.mem))
    }
}

impl Drop for QemuSource {
    fn drop(&mut self) {
        if self.main_status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests;
