//! The QEMU TCG plugin behind `ptperf record --source qemu` (QEMU user mode,
//! plugin API version 1, as Debian 12's QEMU 7.2 has it).
//!
//! QEMU translates the guest program block by block; this plugin reports
//! what ran, in the shape the simulated PT CPU needs and no finer:
//! - at translation, each translation block once: its id, address and code
//!   bytes (the reader classifies its instructions once), the code pages it
//!   lies on and the mapping that holds them;
//! - at execution, one 32-bit word per block executed, appended to the
//!   executing vCPU's own buffer (in user mode one vCPU per guest thread,
//!   on its own host thread: no lock, no shared cache line); a full buffer
//!   goes to the recorder as one run record;
//! - system calls (number, arguments, result): they tell a block that ends
//!   in SYSCALL from one the kernel left elsewhere (a signal, `rt_sigreturn`),
//!   and they carry threads, forks, execs and exits.
//!
//! Where control went after each block (taken or not, which target, an
//! asynchronous transfer) follows from the next block's address: the
//! recorder works that out (`pt_sim::exec::qemu`), so per block the plugin
//! does one store and a bounds check.
//!
//! Every guest process writes to its own connection to the recorder (an
//! abstract Unix socket named in the plugin's arguments: no file is left
//! behind): a forked child opens a new one. QEMU 7.2 runs an `execve`d
//! program natively; the plugin instead executes QEMU again with itself on
//! the new program (`/proc/self/exe`, the same arguments), so the new
//! program is recorded too; a program QEMU cannot run (not x86-64) is left
//! to QEMU and named in a record.
//!
//! Arguments (`-plugin PATH,ARG=VALUE,...`): `sock` (the socket's abstract
//! name), `so` (this plugin's path, for the re-exec), `exe` (the program's
//! path, hex-encoded), `exec=1` (this QEMU replaces an exec'd process),
//! `probe=1` (print the plugin API versions on stdout and exit: the
//! recorder's check that QEMU accepts the plugin).
//!
//! The C API is declared here by hand (it is a dozen functions); its
//! header is GPL-licensed, this crate is not.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::io::Write;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use pt_qemu_wire::*;

/// QEMU's plugin API, version 1 (the functions this plugin calls).
mod api {
    use std::ffi::{c_char, c_int, c_uint, c_void};

    pub type PluginId = u64;

    /// `qemu_info_t`.
    #[repr(C)]
    pub struct Info {
        pub target_name: *const c_char,
        pub version_min: c_int,
        pub version_cur: c_int,
        pub system_emulation: bool,
        pub smp_vcpus: c_int,
        pub max_vcpus: c_int,
    }

    /// `struct qemu_plugin_tb` (opaque).
    pub enum QemuPluginTb {}
    /// `struct qemu_plugin_insn` (opaque).
    pub enum QemuPluginInsn {}

    /// `QEMU_PLUGIN_CB_NO_REGS`.
    pub const CB_NO_REGS: c_int = 0;

    pub type TransCb = extern "C" fn(PluginId, *mut QemuPluginTb);
    pub type ExecCb = extern "C" fn(c_uint, *mut c_void);
    pub type VcpuCb = extern "C" fn(PluginId, c_uint);
    pub type SyscallCb =
        extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
    pub type SyscallRetCb = extern "C" fn(PluginId, c_uint, i64, i64);
    pub type AtexitCb = extern "C" fn(PluginId, *mut c_void);

    extern "C" {
        pub fn qemu_plugin_register_vcpu_init_cb(id: PluginId, cb: VcpuCb);
        pub fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, cb: TransCb);
        pub fn qemu_plugin_register_vcpu_tb_exec_cb(
            tb: *mut QemuPluginTb,
            cb: ExecCb,
            flags: c_int,
            udata: *mut c_void,
        );
        pub fn qemu_plugin_tb_n_insns(tb: *const QemuPluginTb) -> usize;
        pub fn qemu_plugin_tb_vaddr(tb: *const QemuPluginTb) -> u64;
        pub fn qemu_plugin_tb_get_insn(tb: *const QemuPluginTb, idx: usize) -> *mut QemuPluginInsn;
        pub fn qemu_plugin_insn_data(insn: *const QemuPluginInsn) -> *const c_void;
        pub fn qemu_plugin_insn_size(insn: *const QemuPluginInsn) -> usize;
        pub fn qemu_plugin_insn_vaddr(insn: *const QemuPluginInsn) -> u64;
        pub fn qemu_plugin_insn_haddr(insn: *const QemuPluginInsn) -> *mut c_void;
        pub fn qemu_plugin_register_vcpu_syscall_cb(id: PluginId, cb: SyscallCb);
        pub fn qemu_plugin_register_vcpu_syscall_ret_cb(id: PluginId, cb: SyscallRetCb);
        pub fn qemu_plugin_register_atexit_cb(id: PluginId, cb: AtexitCb, udata: *mut c_void);
    }
}

/// The host C library functions std does not wrap.
mod sys {
    use std::ffi::{c_char, c_int, c_void};
    extern "C" {
        pub fn gettid() -> c_int;
        pub fn fcntl(fd: c_int, cmd: c_int, arg: c_int) -> c_int;
        pub fn execve(
            path: *const c_char,
            argv: *const *const c_char,
            envp: *const *const c_char,
        ) -> c_int;
        pub fn access(path: *const c_char, mode: c_int) -> c_int;
        pub fn _exit(status: c_int) -> !;
    }
    extern "C" {
        pub fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: i64,
        ) -> *mut c_void;
        pub fn munmap(addr: *mut c_void, len: usize) -> c_int;
    }
    pub const PROT_READ: c_int = 1;
    pub const PROT_WRITE: c_int = 2;
    pub const MAP_SHARED: c_int = 1;
    pub const MAP_PRIVATE: c_int = 2;
    pub const MAP_ANONYMOUS: c_int = 0x20;
    pub const F_DUPFD_CLOEXEC: c_int = 1030;
    pub const X_OK: c_int = 1;
}

/// The plugin API version this plugin is built for (QEMU refuses a plugin
/// whose version is outside its own range, and says so).
#[no_mangle]
pub static qemu_plugin_version: c_int = PLUGIN_API_VERSION;

const NR_MMAP: i64 = 9;
const NR_RT_SIGACTION: i64 = 13;
const NR_MPROTECT: i64 = 10;
const NR_MUNMAP: i64 = 11;
const NR_MREMAP: i64 = 25;
const NR_CLONE: i64 = 56;
const NR_FORK: i64 = 57;
const NR_VFORK: i64 = 58;
const NR_EXECVE: i64 = 59;
const NR_EXIT: i64 = 60;
const NR_EXIT_GROUP: i64 = 231;
const NR_EXECVEAT: i64 = 322;
const NR_CLONE3: i64 = 435;

/// Run words a vCPU gathers before it hands them over (256 KiB).
const RUN_WORDS: usize = 1 << 16;
/// vCPUs (guest threads alive at once) the plugin follows.
const MAX_VCPUS: usize = 4096;
const PAGE: u64 = 4096;
/// A vCPU hands its words over at a system call once this long passed.
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// What one vCPU (one guest thread) gathers.
struct Vcpu {
    /// The guest thread's id (host and guest ids are the same in user
    /// mode); 0 until its first block.
    tid: u32,
    /// Its words not handed over yet (from its first block on).
    ring: Option<Ring>,
    /// When the words were last handed over.
    flushed: Option<std::time::Instant>,
    /// Hand the words over after the next block: a fork or clone returned
    /// in the parent (see `on_syscall_ret`).
    flush_after_block: bool,
}

/// A vCPU's words not handed over yet, in a file of the recorder's
/// directory mapped shared: when QEMU dies of a signal (a guest crash ends
/// in QEMU killing itself, without its exit callbacks), the recorder still
/// reads them there. Word 0 counts the words that follow.
struct Ring {
    base: *mut u32,
    /// Word 0 as last stored (only this vCPU's thread stores it).
    n: usize,
}

impl Ring {
    const BYTES: usize = (RUN_WORDS + 1) * 4;

    /// A ring for thread `tid` (a file named to the recorder), or a
    /// private one if there is no directory.
    fn create(tid: u32) -> Ring {
        let dir = ARGS.get().map(|a| a.dir.as_str()).unwrap_or("");
        if !dir.is_empty() {
            static N: AtomicU32 = AtomicU32::new(0);
            let name = format!(
                "{dir}/{}-{tid}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            );
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&name);
            if let Ok(f) = file {
                if f.set_len(Self::BYTES as u64).is_ok() {
                    // SAFETY: a shared mapping of a file we just sized.
                    let p = unsafe {
                        sys::mmap(
                            std::ptr::null_mut(),
                            Self::BYTES,
                            sys::PROT_READ | sys::PROT_WRITE,
                            sys::MAP_SHARED,
                            f.as_raw_fd(),
                            0,
                        )
                    };
                    if p as isize != -1 {
                        with_conn(|c| c.send(TAG_RING, &[&tid.to_le_bytes(), name.as_bytes()]));
                        return Ring {
                            base: p.cast(),
                            n: 0,
                        };
                    }
                }
            }
        }
        // SAFETY: an anonymous private mapping.
        let p = unsafe {
            sys::mmap(
                std::ptr::null_mut(),
                Self::BYTES,
                sys::PROT_READ | sys::PROT_WRITE,
                sys::MAP_PRIVATE | sys::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p as isize != -1, "pt-qemu-plugin: out of memory");
        Ring {
            base: p.cast(),
            n: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.n
    }

    #[inline]
    fn push(&mut self, w: u32) -> usize {
        let n = self.n;
        // SAFETY: n < RUN_WORDS (the owner flushes before), inside the mapping;
        // the count is stored after the word, so a reader after a crash
        // never counts a word not written.
        unsafe {
            self.base.add(1 + n).write_volatile(w);
            self.base.write_volatile(n as u32 + 1);
        }
        self.n = n + 1;
        n + 1
    }

    fn words(&self) -> &[u32] {
        // SAFETY: the first len() words after the count were written.
        unsafe { std::slice::from_raw_parts(self.base.add(1), self.len()) }
    }

    fn clear(&mut self) {
        // SAFETY: word 0 of the mapping.
        unsafe { self.base.write_volatile(0) };
        self.n = 0;
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { sys::munmap(self.base.cast(), Self::BYTES) };
    }
}

/// Per-vCPU state. A slot is only touched by the host thread running that
/// vCPU, except at exit, when QEMU has stopped every other vCPU (the atexit
/// callback runs in an exclusive section) and after a fork, where only the
/// forking thread exists.
static VCPUS: [AtomicPtr<Vcpu>; MAX_VCPUS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_VCPUS];

/// The next block id (ids are per process: a fork's child goes on from its
/// parent's count, the recorder keeps a table per process).
static NEXT_ID: AtomicU32 = AtomicU32::new(0);
/// Host address minus guest address (QEMU's `guest_base`), once known.
static GUEST_BASE: AtomicU64 = AtomicU64::new(0);
static GUEST_BASE_KNOWN: AtomicBool = AtomicBool::new(false);
/// Set by system calls that change the address space: the cached host
/// maps are stale.
static MAPS_STALE: AtomicBool = AtomicBool::new(true);
/// The status of the exit call that ends the process, if one was made.
static EXIT_STATUS: Mutex<Option<i32>> = Mutex::new(None);

/// What the plugin was started with.
struct Args {
    sock: String,
    so: String,
    /// The recorder's directory for the rings (empty: none).
    dir: String,
}

static ARGS: OnceLock<Args> = OnceLock::new();

/// The connection and what was sent on it.
struct Conn {
    out: std::fs::File,
    /// Code pages sent, with the bytes sent (sent again when they change).
    pages: std::collections::HashMap<u64, Box<[u8]>>,
    /// Mappings sent (guest start, end, offset, path).
    maps_sent: std::collections::HashSet<(u64, u64, u64, String)>,
    /// The host's `/proc/self/maps`, parsed.
    host_maps: Vec<HostMap>,
    buf: Vec<u8>,
    failed: bool,
}

struct HostMap {
    start: u64,
    end: u64,
    offset: u64,
    perms: u8,
    path: String,
}

static CONN: Mutex<Option<Conn>> = Mutex::new(None);

fn connect(name: &str) -> Option<std::fs::File> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).ok()?;
    let s = UnixStream::connect_addr(&addr).ok()?;
    // Out of the way of the guest's own descriptors (a shell's `exec 3>`
    // would otherwise replace it); closed on exec.
    // SAFETY: fcntl on a descriptor we own.
    let high = unsafe { sys::fcntl(s.as_raw_fd(), sys::F_DUPFD_CLOEXEC, 900) };
    if high < 0 {
        return Some(std::fs::File::from(std::os::fd::OwnedFd::from(s)));
    }
    drop(s);
    // SAFETY: `high` is a new descriptor we own.
    Some(unsafe { std::fs::File::from_raw_fd(high) })
}

impl Conn {
    fn send(&mut self, tag: u8, payload: &[&[u8]]) {
        if self.failed {
            return;
        }
        let len: usize = payload.iter().map(|p| p.len()).sum();
        self.buf.clear();
        header(&mut self.buf, tag, len);
        for p in payload {
            self.buf.extend_from_slice(p);
        }
        if self.out.write_all(&self.buf).is_err() {
            // The recorder is gone: the program runs on, unrecorded.
            self.failed = true;
        }
    }

    fn warn(&mut self, text: &str) {
        self.send(TAG_WARN, &[text.as_bytes()]);
    }

    fn hello(&mut self, min: i32, cur: i32, parent: u32, flags: u8, path: &str) {
        self.send(
            TAG_HELLO,
            &[
                &FORMAT_VERSION.to_le_bytes(),
                &min.to_le_bytes(),
                &cur.to_le_bytes(),
                &std::process::id().to_le_bytes(),
                &parent.to_le_bytes(),
                &[flags],
                path.as_bytes(),
            ],
        );
    }

    fn refresh_maps(&mut self) {
        MAPS_STALE.store(false, Ordering::Relaxed);
        self.host_maps.clear();
        let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        for line in text.lines() {
            let mut f = line.split_ascii_whitespace();
            let (Some(range), Some(perms), Some(off)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let _dev = f.next();
            let _inode = f.next();
            let path = f.collect::<Vec<_>>().join(" ");
            let Some((s, e)) = range.split_once('-') else {
                continue;
            };
            let p = perms.as_bytes();
            let bits = u8::from(p.first() == Some(&b'r'))
                | u8::from(p.get(1) == Some(&b'w')) << 1
                // Code that ran is executable, whatever the host protection
                // QEMU gave its pages (it write-protects translated code).
                | 1 << 2
                | u8::from(p.get(3) == Some(&b's')) << 3;
            let (Ok(start), Ok(end), Ok(offset)) = (
                u64::from_str_radix(s, 16),
                u64::from_str_radix(e, 16),
                u64::from_str_radix(off, 16),
            ) else {
                continue;
            };
            self.host_maps.push(HostMap {
                start,
                end,
                offset,
                perms: bits,
                path,
            });
        }
    }

    /// Sends the mapping holding guest page `page` if it was not sent.
    fn send_map(&mut self, page: u64, base: u64) {
        let host = page.wrapping_add(base);
        if MAPS_STALE.load(Ordering::Relaxed) {
            self.refresh_maps();
        }
        let find = |maps: &[HostMap]| maps.iter().position(|m| m.start <= host && host < m.end);
        let i = match find(&self.host_maps) {
            Some(i) => i,
            None => {
                self.refresh_maps();
                match find(&self.host_maps) {
                    Some(i) => i,
                    None => return,
                }
            }
        };
        let m = &self.host_maps[i];
        let key = (
            m.start.wrapping_sub(base),
            m.end.wrapping_sub(base),
            m.offset,
            m.path.clone(),
        );
        if self.maps_sent.contains(&key) {
            return;
        }
        let perms = m.perms;
        self.send(
            TAG_MAP,
            &[
                &key.0.to_le_bytes(),
                &key.1.to_le_bytes(),
                &key.2.to_le_bytes(),
                &[perms],
                key.3.as_bytes(),
            ],
        );
        self.maps_sent.insert(key);
    }

    /// Sends guest page `page` (host bytes at `page + base`) if it is new
    /// or changed, and its mapping.
    fn send_page(&mut self, page: u64, base: u64) {
        // SAFETY: QEMU just read this block's code from this page of the
        // guest's memory, which user mode maps 1:1 at `guest + base`, page
        // by page (host and guest pages are both 4 KiB).
        let bytes = unsafe {
            std::slice::from_raw_parts(page.wrapping_add(base) as *const u8, PAGE as usize)
        };
        if self.pages.get(&page).is_some_and(|old| **old == *bytes) {
            return;
        }
        self.send(TAG_PAGE, &[&page.to_le_bytes(), bytes]);
        self.pages.insert(page, bytes.into());
        self.send_map(page, base);
    }
}

fn with_conn(f: impl FnOnce(&mut Conn)) {
    let mut g = CONN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = g.as_mut() {
        f(c);
    }
}

fn vcpu(index: c_uint) -> Option<&'static mut Vcpu> {
    let slot = VCPUS.get(index as usize)?;
    let mut p = slot.load(Ordering::Relaxed);
    if p.is_null() {
        p = Box::into_raw(Box::new(Vcpu {
            tid: 0,
            ring: None,
            flushed: None,
            flush_after_block: false,
        }));
        slot.store(p, Ordering::Relaxed);
    }
    // SAFETY: only the vCPU's own thread gets here (see `VCPUS`).
    Some(unsafe { &mut *p })
}

/// Hands a vCPU's words to the recorder.
fn flush(v: &mut Vcpu) {
    let Some(ring) = v.ring.as_mut() else { return };
    if ring.len() == 0 {
        return;
    }
    let words = ring.words();
    // SAFETY: u32 words as their little-endian bytes (x86-64 only).
    let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 4) };
    let tid = v.tid.to_le_bytes();
    with_conn(|c| c.send(TAG_RUN, &[&tid, bytes]));
    ring.clear();
    v.flushed = Some(std::time::Instant::now());
}

#[inline]
fn push(v: &mut Vcpu, word: u32) {
    let ring = match v.ring.as_mut() {
        Some(r) => r,
        None => {
            if v.tid == 0 {
                // SAFETY: gettid has no preconditions.
                v.tid = unsafe { sys::gettid() } as u32;
            }
            v.ring.insert(Ring::create(v.tid))
        }
    };
    ring.push(word);
}

/// Makes room for a record of `n` words (a block id, or a marker and its
/// arguments): a full buffer is handed over first, so that a run record
/// never cuts a marker from its arguments.
#[inline]
fn room(v: &mut Vcpu, n: usize) {
    if v.ring.as_ref().is_some_and(|r| r.len() + n > RUN_WORDS) {
        flush(v);
    }
}

fn push_u64(v: &mut Vcpu, x: u64) {
    push(v, x as u32);
    push(v, (x >> 32) as u32);
}

extern "C" fn on_block(vcpu_index: c_uint, udata: *mut c_void) {
    let Some(v) = vcpu(vcpu_index) else { return };
    room(v, 1);
    push(v, udata as usize as u32);
    if v.flush_after_block {
        v.flush_after_block = false;
        flush(v);
    }
}

extern "C" fn on_vcpu_init(_: api::PluginId, vcpu_index: c_uint) {
    // A slot is reused by a new thread after an old one ended; this runs
    // in the creating thread, before the new one starts.
    if let Some(v) = vcpu(vcpu_index) {
        v.tid = 0;
        v.ring = None;
    }
}

extern "C" fn on_translate(_: api::PluginId, tb: *mut api::QemuPluginTb) {
    // SAFETY: `tb` is valid for the duration of this callback.
    unsafe {
        let n = api::qemu_plugin_tb_n_insns(tb);
        if n == 0 {
            return;
        }
        let vaddr = api::qemu_plugin_tb_vaddr(tb);
        let mut code = Vec::with_capacity(n * 4);
        let mut haddr0 = std::ptr::null_mut();
        for i in 0..n {
            let insn = api::qemu_plugin_tb_get_insn(tb, i);
            let size = api::qemu_plugin_insn_size(insn);
            let data = api::qemu_plugin_insn_data(insn).cast::<u8>();
            if i == 0 {
                haddr0 = api::qemu_plugin_insn_haddr(insn);
                debug_assert_eq!(api::qemu_plugin_insn_vaddr(insn), vaddr);
            }
            if !data.is_null() {
                code.extend_from_slice(std::slice::from_raw_parts(data, size));
            }
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if id >= MARK {
            return;
        }
        if !haddr0.is_null() && !GUEST_BASE_KNOWN.load(Ordering::Relaxed) {
            GUEST_BASE.store((haddr0 as u64).wrapping_sub(vaddr), Ordering::Relaxed);
            GUEST_BASE_KNOWN.store(true, Ordering::Relaxed);
        }
        let base = GUEST_BASE.load(Ordering::Relaxed);
        with_conn(|c| {
            if !haddr0.is_null() {
                let first = vaddr & !(PAGE - 1);
                let last = vaddr.wrapping_add(code.len().max(1) as u64 - 1) & !(PAGE - 1);
                c.send_page(first, base);
                if last != first {
                    c.send_page(last, base);
                }
            }
            c.send(TAG_BLOCK, &[&id.to_le_bytes(), &vaddr.to_le_bytes(), &code]);
        });
        api::qemu_plugin_register_vcpu_tb_exec_cb(
            tb,
            on_block,
            api::CB_NO_REGS,
            id as usize as *mut c_void,
        );
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn on_syscall(
    _: api::PluginId,
    vcpu_index: c_uint,
    nr: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    _: u64,
    _: u64,
) {
    let Some(v) = vcpu(vcpu_index) else { return };
    // clone3 takes its flags in a structure: the recorder gets them as the
    // sixth argument (unused by clone3) to tell a thread from a process.
    // rt_sigaction's new handler likewise (its first word): the recorder
    // names the signal a transfer to a handler delivers.
    let a6 = if nr == NR_CLONE3 && a1 != 0 {
        // SAFETY: the guest's clone_args; QEMU reads the same bytes.
        unsafe { std::ptr::read_unaligned(g2h(a1).cast::<u64>()) }
    } else if nr == NR_RT_SIGACTION && a2 != 0 {
        // SAFETY: the guest's struct sigaction; QEMU reads the same bytes.
        unsafe { std::ptr::read_unaligned(g2h(a2).cast::<u64>()) }
    } else {
        a6
    };
    room(v, 1 + mark_words(MARK_SYSCALL));
    push(v, MARK_SYSCALL);
    for x in [nr as u64, a1, a2, a3, a4, a5, a6] {
        push_u64(v, x);
    }
    match nr {
        NR_MMAP | NR_MUNMAP | NR_MREMAP | NR_MPROTECT => {
            MAPS_STALE.store(true, Ordering::Relaxed);
        }
        // What this thread did so far goes out before the new task can
        // run (and a fork's child does not inherit it in its buffer).
        NR_CLONE | NR_FORK | NR_VFORK | NR_CLONE3 => flush(v),
        NR_EXECVE => {
            flush(v);
            reexec(a1, a2, a3);
        }
        NR_EXECVEAT => {
            flush(v);
            const AT_FDCWD: u64 = -100i64 as u64;
            if a1 as u32 as u64 == AT_FDCWD & 0xffff_ffff && a5 == 0 {
                reexec(a2, a3, a4);
            } else {
                native_exec(v.tid, "(execveat)");
            }
        }
        NR_EXIT => {
            room(v, 1 + mark_words(MARK_EXIT));
            push(v, MARK_EXIT);
            push(v, a1 as u32);
            *EXIT_STATUS.lock().unwrap_or_else(|e| e.into_inner()) = Some(a1 as i32);
            flush(v);
            // The slot may serve another thread next.
            v.tid = 0;
            v.ring = None;
        }
        NR_EXIT_GROUP => {
            *EXIT_STATUS.lock().unwrap_or_else(|e| e.into_inner()) = Some(a1 as i32);
            flush(v);
        }
        // What ran before a system call reaches the recorder within a few
        // milliseconds: what the program shows (a line on a terminal, a
        // signal it raises) has its trace there when someone reacts to it
        // (a snapshot on SIGUSR2, Ctrl-C).
        _ if v.flushed.map_or(true, |t| t.elapsed() > FLUSH_EVERY) => flush(v),
        _ => {}
    }
}

extern "C" fn on_syscall_ret(_: api::PluginId, vcpu_index: c_uint, nr: i64, ret: i64) {
    let Some(v) = vcpu(vcpu_index) else { return };
    if ret == 0 && matches!(nr, NR_CLONE | NR_FORK | NR_VFORK | NR_CLONE3) {
        // Only a forked child returns 0 here (a new thread starts in its
        // own loop): this is the child process.
        forked_child(vcpu_index);
    }
    room(v, 1 + mark_words(MARK_SYSRET));
    push(v, MARK_SYSRET);
    push_u64(v, nr as u64);
    push_u64(v, ret as u64);
    if ret > 0 && matches!(nr, NR_CLONE | NR_FORK | NR_VFORK | NR_CLONE3) {
        // The parent: the recorder holds the child's records until it has
        // given the clone, which it does at the parent's next block. Those
        // go out now, not at some later system call: a parent that waits
        // for its child would otherwise keep them while the child waits
        // for the recorder to read it (a shell's `$(...)`, a pyenv shim).
        v.flush_after_block = true;
    }
}

/// In a fork's child: the other threads' buffers are copies of the
/// parent's (theirs to send); a new connection carries the child's record.
fn forked_child(keep: c_uint) {
    for (i, slot) in VCPUS.iter().enumerate() {
        let p = slot.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: the forking thread is the only thread of the child.
            let v = unsafe { &mut *p };
            // The rings are the parent's files: the child makes its own.
            v.ring = None;
            if i != keep as usize {
                v.tid = 0;
            }
        }
    }
    if let Some(v) = vcpu(keep) {
        // SAFETY: gettid has no preconditions.
        v.tid = unsafe { sys::gettid() } as u32;
    }
    let mut g = CONN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = g.as_mut() else { return };
    let parent = std::os::unix::process::parent_id();
    let Some(args) = ARGS.get() else { return };
    match connect(&args.sock) {
        Some(out) => {
            c.out = out;
            c.failed = false;
            c.hello(PLUGIN_API_VERSION, PLUGIN_API_VERSION, parent, 0, "");
        }
        None => c.failed = true,
    }
}

/// The host address of a guest pointer.
fn g2h(addr: u64) -> *const u8 {
    addr.wrapping_add(GUEST_BASE.load(Ordering::Relaxed)) as *const u8
}

/// A NUL-terminated string of the guest.
fn guest_str(addr: u64) -> Option<CString> {
    if addr == 0 {
        return None;
    }
    // SAFETY: the guest passed it to execve as a string; a bad pointer
    // would fault in QEMU's own execve as well.
    Some(unsafe { CStr::from_ptr(g2h(addr).cast::<c_char>()) }.to_owned())
}

/// A NULL-terminated array of guest strings.
fn guest_strs(addr: u64) -> Vec<CString> {
    let mut v = Vec::new();
    if addr == 0 {
        return v;
    }
    for i in 0..1 << 16 {
        // SAFETY: as for `guest_str`: the guest's argv/envp array.
        let p = unsafe { std::ptr::read_unaligned(g2h(addr + i * 8).cast::<u64>()) };
        match guest_str(p) {
            Some(s) => v.push(s),
            None => break,
        }
    }
    v
}

/// What an exec'd file is: an x86-64 ELF program, or a script whose
/// interpreter (and its argument) is one.
fn exec_target(path: &CStr) -> Option<Vec<CString>> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let p = std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    let mut head = [0u8; 256];
    let n = std::fs::File::open(p).ok()?.read(&mut head).ok()?;
    let head = &head[..n];
    let elf64_x86 =
        |h: &[u8]| h.len() >= 20 && h[..4] == *b"\x7fELF" && h[4] == 2 && h[18] == 62 && h[19] == 0;
    if elf64_x86(head) {
        return Some(vec![path.to_owned()]);
    }
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n')?];
    let text = std::str::from_utf8(line).ok()?.trim();
    let (interp, arg) = match text.split_once([' ', '\t']) {
        Some((i, a)) => (i, Some(a.trim())),
        None => (text, None),
    };
    let mut ih = [0u8; 20];
    std::fs::File::open(interp).ok()?.read_exact(&mut ih).ok()?;
    if !elf64_x86(&ih) {
        return None;
    }
    let mut v = vec![CString::new(interp).ok()?];
    if let Some(a) = arg.filter(|a| !a.is_empty()) {
        v.push(CString::new(a).ok()?);
    }
    v.push(path.to_owned());
    Some(v)
}

fn native_exec(tid: u32, path: &str) {
    with_conn(|c| {
        c.send(TAG_NATIVE_EXEC, &[&tid.to_le_bytes(), path.as_bytes()]);
    });
}

/// `execve(path, argv, envp)` of the guest: QEMU (this one's executable)
/// runs the new program with this plugin, so it is recorded too. Returns
/// when that is not possible; QEMU then does the exec itself.
fn reexec(path: u64, argv: u64, envp: u64) {
    let Some(path) = guest_str(path) else { return };
    let Some(args) = ARGS.get() else { return };
    let shown = path.to_string_lossy().into_owned();
    // SAFETY: a valid C string.
    if unsafe { sys::access(path.as_ptr(), sys::X_OK) } != 0 {
        // The guest's execve fails the same way: nothing to follow.
        return;
    }
    let Some(program) = exec_target(&path) else {
        // SAFETY: gettid has no preconditions.
        native_exec(unsafe { sys::gettid() } as u32, &shown);
        return;
    };
    let guest_argv = guest_strs(argv);
    let env = guest_strs(envp);
    let Ok(qemu) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let hex: String = program[0]
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir: String = args.dir.bytes().map(|b| format!("{b:02x}")).collect();
    let plugin = format!(
        "{},sock={},so={},dir={dir},exe={hex},exec=1",
        args.so, args.sock, args.so
    );
    let argv0 = if program.len() > 1 {
        program[0].clone()
    } else {
        guest_argv.first().cloned().unwrap_or_else(|| path.clone())
    };
    let mut new: Vec<CString> = Vec::new();
    let cs = |s: &str| CString::new(s).unwrap_or_default();
    new.push(CString::new(qemu.as_os_str().as_encoded_bytes()).unwrap_or_default());
    new.push(cs("-plugin"));
    new.push(cs(&plugin));
    new.push(cs("-0"));
    new.push(argv0);
    new.extend(program.iter().cloned());
    if program.len() > 1 {
        // A script: the interpreter gets the script and the arguments after argv[0].
        new.extend(guest_argv.iter().skip(1).cloned());
    } else {
        new.extend(guest_argv.iter().skip(1).cloned());
    }
    let argv_p: Vec<*const c_char> = new
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let env_p: Vec<*const c_char> = env
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: NULL-terminated arrays of valid C strings that outlive the call.
    unsafe { sys::execve(argv_p[0], argv_p.as_ptr(), env_p.as_ptr()) };
    with_conn(|c| {
        c.warn(&format!(
            "could not run {shown} under QEMU again: QEMU runs it natively"
        ))
    });
    // SAFETY: gettid has no preconditions.
    native_exec(unsafe { sys::gettid() } as u32, &shown);
}

extern "C" fn on_exit(_: api::PluginId, _: *mut c_void) {
    // Every other vCPU is stopped here (QEMU's exclusive section).
    for slot in VCPUS.iter() {
        let p = slot.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: see above.
            flush(unsafe { &mut *p });
        }
    }
    let status = *EXIT_STATUS.lock().unwrap_or_else(|e| e.into_inner());
    with_conn(|c| match status {
        Some(s) => c.send(TAG_END, &[&[1], &s.to_le_bytes()]),
        None => c.send(TAG_END, &[&[0]]),
    });
}

fn unhex(s: &str) -> Option<String> {
    let b: Option<Vec<u8>> = (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    String::from_utf8(b?).ok()
}

/// The plugin's entry point: checks the API, connects to the recorder and
/// registers the callbacks. Returns non-zero (QEMU then stops) when it
/// cannot record.
///
/// # Safety
/// Called by QEMU as its plugin API specifies.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: api::PluginId,
    info: *const api::Info,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    let (min, cur) = info
        .as_ref()
        .map_or((0, 0), |i| (i.version_min, i.version_cur));
    let mut sock = None;
    let mut so = String::new();
    let mut exe = String::new();
    let mut dir = String::new();
    let mut exec = false;
    let mut probe = false;
    for i in 0..argc.max(0) as usize {
        let a = CStr::from_ptr(*argv.add(i)).to_string_lossy();
        match a.split_once('=') {
            Some(("sock", v)) => sock = Some(v.to_string()),
            Some(("so", v)) => so = v.to_string(),
            Some(("exe", v)) => exe = unhex(v).unwrap_or_default(),
            Some(("dir", v)) => dir = unhex(v).unwrap_or_default(),
            Some(("exec", v)) => exec = v == "1" || v == "on",
            Some(("probe", v)) => probe = v == "1" || v == "on",
            _ => {}
        }
    }
    if probe {
        println!("pt-qemu-plugin api {PLUGIN_API_VERSION} qemu {min} {cur}");
        let _ = std::io::stdout().flush();
        sys::_exit(0);
    }
    if info.as_ref().is_some_and(|i| i.system_emulation) {
        eprintln!("pt-qemu-plugin: user-mode emulation (qemu-x86_64) only");
        return -1;
    }
    let Some(sock) = sock else {
        eprintln!("pt-qemu-plugin: no recorder to report to (the sock= argument); run it through `ptperf record --source qemu`");
        return -1;
    };
    let Some(out) = connect(&sock) else {
        eprintln!("pt-qemu-plugin: cannot reach the recorder");
        return -1;
    };
    let mut c = Conn {
        out,
        pages: Default::default(),
        maps_sent: Default::default(),
        host_maps: Vec::new(),
        buf: Vec::new(),
        failed: false,
    };
    c.hello(min, cur, 0, if exec { HELLO_EXEC } else { 0 }, &exe);
    *CONN.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    let _ = ARGS.set(Args { sock, so, dir });
    api::qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
    api::qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    api::qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    api::qemu_plugin_register_vcpu_syscall_ret_cb(id, on_syscall_ret);
    api::qemu_plugin_register_atexit_cb(id, on_exit, std::ptr::null_mut());
    0
}
