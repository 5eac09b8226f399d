//! The Linux perf backend: the kernel's `intel_pt` PMU does the tracing.
//!
//! - [`attr`]: [`TraceConfig`] → `perf_event_attr` through the PMU's format terms.
//! - [`ring`]: AUX and data ring copy-out on byte slices (wrap, truncation, overwrite).
//! - [`data`]: the recording written as perf.data (`perf record`'s file).
//!
//! [`PerfBackend`] opens the event for a pid, a CPU or a spawned workload
//! (enable_on_exec), maps the data and AUX areas and copies the trace out.

pub mod attr;
pub mod data;
pub mod ring;

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{fence, AtomicBool, Ordering};

use perf_event_open_sys as sys;

use crate::backend::{TraceBackend, TraceItem};
use crate::caps::Capabilities;
use crate::config::TraceConfig;
use crate::sysfs::{PmuInfo, SysfsError};
use attr::{map_config, AttrError, PerfAttr};
use data::{AuxArea, PerfDataError, PerfDataRecorder, SessionInfo};
use ring::{RawRecord, RingError};

/// What to trace.
#[derive(Debug)]
pub enum Target {
    /// An existing thread (per-thread event, any CPU).
    Pid(i32),
    /// Everything on one CPU (needs paranoid ≤ 0 or CAP_PERFMON).
    Cpu(u32),
    /// A workload started by the backend; tracing begins at its exec.
    Command(Command),
}

/// Buffer sizes and mode.
#[derive(Clone, Debug)]
pub struct PerfOptions {
    /// Data (side-band) ring pages, a power of two.
    pub data_pages: usize,
    /// AUX area pages, a power of two.
    pub aux_pages: usize,
    /// Snapshot mode: the AUX area is an overwritten ring read on demand.
    pub snapshot: bool,
    /// Root of sysfs/procfs (`/` on a live system).
    pub root: PathBuf,
    /// Object file for address filters (addresses are then file offsets).
    pub filter_object: Option<PathBuf>,
}

impl Default for PerfOptions {
    fn default() -> Self {
        PerfOptions {
            data_pages: (crate::probe::DEFAULT_DATA_BYTES / 4096) as usize,
            aux_pages: (crate::probe::DEFAULT_AUX_BYTES / 4096) as usize,
            snapshot: false,
            root: PathBuf::from("/"),
            filter_object: None,
        }
    }
}

/// Errors of the perf backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfError {
    /// The PMU could not be read.
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    /// The configuration cannot be mapped.
    #[error(transparent)]
    Attr(#[from] AttrError),
    /// A ring holds inconsistent positions or records.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The perf.data could not be written.
    #[error(transparent)]
    PerfData(#[from] PerfDataError),
    /// A system call failed.
    #[error("{call}: {source}")]
    Os {
        /// The call.
        call: &'static str,
        /// errno.
        source: io::Error,
    },
    /// Buffer sizes must be powers of two.
    #[error("data_pages ({data}) and aux_pages ({aux}) must be non-zero powers of two")]
    BadSizes {
        /// Data pages.
        data: usize,
        /// AUX pages.
        aux: usize,
    },
    /// `start`/`read` before `configure`.
    #[error("not configured")]
    NotConfigured,
    /// `configure` twice.
    #[error("already configured")]
    AlreadyConfigured,
}

fn os_err(call: &'static str) -> PerfError {
    PerfError::Os {
        call,
        source: io::Error::last_os_error(),
    }
}

const PAGE: usize = 4096;
/// sample_id trailer: TID | TIME | CPU (the layout perf.data's attr states).
const SAMPLE_TYPE: u64 = data::SAMPLE_ID;

/// One mmap'ed region, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(fd: i32, len: usize, offset: i64, writable: bool) -> Result<Self, PerfError> {
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: a fresh shared mapping of the perf fd; the kernel validates
        // length and offset, and we check for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os_err("mmap"));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The mapped bytes. The kernel writes them concurrently; callers read
    /// only the range between tail and head, which the kernel no longer
    /// touches once it has published head (acquire fence after reading head).
    fn bytes(&self) -> &[u8] {
        // SAFETY: ptr/len describe a live mapping owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mmap returned.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// The user page and the two rings of an open event.
struct Rings {
    /// Page 0 (perf_event_mmap_page) and the data ring.
    base: Mapping,
    aux: Mapping,
}

impl Rings {
    fn page(&self) -> *mut sys::bindings::perf_event_mmap_page {
        self.base.ptr.cast()
    }

    fn load(&self, field: fn(*mut sys::bindings::perf_event_mmap_page) -> *mut u64) -> u64 {
        // SAFETY: the field pointer is inside the live user page; volatile
        // because the kernel updates it concurrently.
        let v = unsafe { std::ptr::read_volatile(field(self.page())) };
        fence(Ordering::Acquire);
        v
    }

    fn store(&self, field: fn(*mut sys::bindings::perf_event_mmap_page) -> *mut u64, v: u64) {
        fence(Ordering::Release);
        // SAFETY: as in load; the page is mapped read-write.
        unsafe { std::ptr::write_volatile(field(self.page()), v) }
    }

    fn data_ring(&self) -> &[u8] {
        self.base.bytes().get(PAGE..).unwrap_or(&[])
    }
}

fn data_head(p: *mut sys::bindings::perf_event_mmap_page) -> *mut u64 {
    // SAFETY: address computation within the page, no dereference.
    unsafe { std::ptr::addr_of_mut!((*p).data_head) }
}
fn data_tail(p: *mut sys::bindings::perf_event_mmap_page) -> *mut u64 {
    // SAFETY: as above.
    unsafe { std::ptr::addr_of_mut!((*p).data_tail) }
}
fn aux_head(p: *mut sys::bindings::perf_event_mmap_page) -> *mut u64 {
    // SAFETY: as above.
    unsafe { std::ptr::addr_of_mut!((*p).aux_head) }
}
fn aux_tail(p: *mut sys::bindings::perf_event_mmap_page) -> *mut u64 {
    // SAFETY: as above.
    unsafe { std::ptr::addr_of_mut!((*p).aux_tail) }
}

static SNAPSHOT_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_snapshot_signal(_: libc::c_int) {
    SNAPSHOT_REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs a handler for `signal` (perf uses SIGUSR2) that requests a
/// snapshot; poll [`take_snapshot_request`] and call
/// [`TraceBackend::snapshot`] when it returns true.
pub fn install_snapshot_signal(signal: libc::c_int) -> Result<(), PerfError> {
    // SAFETY: a zeroed sigaction with a handler that only stores to an
    // atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_snapshot_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(signal, &sa, std::ptr::null_mut()) != 0 {
            return Err(os_err("sigaction"));
        }
    }
    Ok(())
}

/// True once per delivered snapshot signal (or [`request_snapshot`] call).
pub fn take_snapshot_request() -> bool {
    SNAPSHOT_REQUESTED.swap(false, Ordering::SeqCst)
}

/// Requests a snapshot from code (same flag as the signal).
pub fn request_snapshot() {
    SNAPSHOT_REQUESTED.store(true, Ordering::SeqCst);
}

/// A workload held before exec until tracing starts.
struct Workload {
    child: Child,
    /// Write end of the pipe the child waits on; dropping it without a byte aborts the exec.
    release: Option<File>,
}

/// The perf backend.
pub struct PerfBackend {
    pmu: PmuInfo,
    opts: PerfOptions,
    target: Option<Target>,
    workload: Option<Workload>,
    fd: Option<OwnedFd>,
    rings: Option<Rings>,
    attr: Option<PerfAttr>,
    aux_pos: u64,
    sideband: Vec<RawRecord>,
    enabled: bool,
    /// Per-CPU (a CPU target) or per-thread AUX area.
    area: AuxArea,
    /// The event's id (PERF_EVENT_IOC_ID).
    id: u64,
}

impl PerfBackend {
    /// A backend for `target`; reads the PMU under `opts.root`.
    pub fn new(target: Target, opts: PerfOptions) -> Result<Self, PerfError> {
        if !opts.data_pages.is_power_of_two() || !opts.aux_pages.is_power_of_two() {
            return Err(PerfError::BadSizes {
                data: opts.data_pages,
                aux: opts.aux_pages,
            });
        }
        let pmu = PmuInfo::read(&opts.root)?;
        Ok(PerfBackend {
            pmu,
            opts,
            target: Some(target),
            workload: None,
            fd: None,
            rings: None,
            attr: None,
            aux_pos: 0,
            sideband: Vec::new(),
            enabled: false,
            area: AuxArea {
                idx: 0,
                cpu: None,
                tid: None,
            },
            id: 0,
        })
    }

    /// The side-band records collected so far, as the kernel wrote them.
    pub fn sideband_records(&self) -> &[RawRecord] {
        &self.sideband
    }

    /// Takes the side-band records collected so far (a recorder that writes
    /// as it goes keeps memory flat).
    pub fn take_sideband(&mut self) -> Vec<RawRecord> {
        std::mem::take(&mut self.sideband)
    }

    /// The session as perf.data describes it (after `configure`): the
    /// event, the user page's time conversion, CPUID 0x15, the modes.
    pub fn session_info(&self) -> Result<SessionInfo, PerfError> {
        let a = self.attr.as_ref().ok_or(PerfError::NotConfigured)?;
        let r = self.rings.as_ref().ok_or(PerfError::NotConfigured)?;
        let p = r.page();
        // SAFETY: reading plain fields of the live user page.
        let time = unsafe {
            let caps =
                std::ptr::read_volatile(std::ptr::addr_of!((*p).__bindgen_anon_1.capabilities));
            // cap_user_time_zero (bit 4 of the capabilities word).
            (caps & (1 << 4) != 0).then(|| {
                (
                    std::ptr::read_volatile(std::ptr::addr_of!((*p).time_shift)),
                    std::ptr::read_volatile(std::ptr::addr_of!((*p).time_mult)),
                    std::ptr::read_volatile(std::ptr::addr_of!((*p).time_zero)),
                )
            })
        };
        let modifier = match (a.exclude_kernel, a.exclude_user) {
            (true, false) => "u",
            (false, true) => "k",
            _ => "",
        };
        Ok(SessionInfo {
            pmu_type: a.pmu_type,
            config: a.config,
            exclude_kernel: a.exclude_kernel,
            exclude_user: a.exclude_user,
            id: self.id,
            time,
            snapshot: self.opts.snapshot,
            per_cpu: self.area.cpu.is_some(),
            filter: a.filter.clone(),
            tsc_ctc: cpuid_tsc_ctc(),
            max_non_turbo_ratio: self.pmu.max_nonturbo_ratio.map(u64::from),
            name: format!("intel_pt//{modifier}"),
        })
    }

    /// The AUX area this backend reads.
    pub fn aux_area(&self) -> AuxArea {
        self.area
    }

    /// Writes the recording as perf.data (see [`data`]): the side-band the
    /// kernel wrote and the trace `items` read from this backend, with
    /// `cmdline` as the recording's command line.
    pub fn write_perf_data(
        &self,
        items: &[TraceItem],
        path: &Path,
        cmdline: &[String],
    ) -> Result<(), PerfError> {
        let session = self.session_info()?;
        let mut w = PerfDataRecorder::create(path, &session, cmdline)?;
        for r in &self.sideband {
            w.side_band(r)?;
        }
        w.trace(&self.area, items, data::rdtsc())?;
        w.finish()?;
        Ok(())
    }

    /// Whether the traced workload (or `-p` process) has ended, without
    /// waiting: its status for a workload we spawned, status 0 for a process
    /// of another parent that is gone, `None` while it runs (and always for a
    /// CPU target).
    pub fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(w) = &mut self.workload {
            return w.child.try_wait();
        }
        if let Some(tid) = self.area.tid {
            // SAFETY: signal 0 only checks that the process exists.
            let gone = unsafe { libc::kill(tid as libc::pid_t, 0) } != 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone {
                return Ok(Some(std::process::ExitStatus::from_raw(0)));
            }
        }
        Ok(None)
    }

    /// Waits for a spawned workload; None for other targets.
    pub fn wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        match &mut self.workload {
            Some(w) => w.child.wait().map(Some),
            None => Ok(None),
        }
    }

    fn spawn_held(mut cmd: Command) -> Result<Workload, PerfError> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(os_err("pipe2"));
        }
        // SAFETY: both fds are fresh and owned here.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let rfd = rd.as_raw_fd();
        let wfd = wr.as_raw_fd();
        // SAFETY: the hook runs in the forked child and only calls the
        // async-signal-safe close(2) and read(2) on inherited fds.
        unsafe {
            cmd.pre_exec(move || {
                libc::close(wfd);
                let mut b = 0u8;
                loop {
                    let n = libc::read(rfd, std::ptr::addr_of_mut!(b).cast(), 1);
                    if n == 1 {
                        return Ok(());
                    }
                    if n == 0 {
                        return Err(io::Error::other("tracer went away before start"));
                    }
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            });
        }
        let child = cmd.spawn().map_err(|source| PerfError::Os {
            call: "spawn",
            source,
        })?;
        drop(rd);
        Ok(Workload {
            child,
            release: Some(File::from(wr)),
        })
    }

    fn fd(&self) -> Result<i32, PerfError> {
        self.fd
            .as_ref()
            .map(|f| f.as_raw_fd())
            .ok_or(PerfError::NotConfigured)
    }

    fn ioctl(&self, which: &'static str) -> Result<(), PerfError> {
        let fd = self.fd()?;
        // SAFETY: ENABLE/DISABLE on our own perf fd with argument 0.
        let rc = unsafe {
            match which {
                "enable" => sys::ioctls::ENABLE(fd, 0),
                _ => sys::ioctls::DISABLE(fd, 0),
            }
        };
        if rc != 0 {
            return Err(os_err(which));
        }
        Ok(())
    }

    /// Moves side-band records out of the data ring; returns the losses they report.
    fn drain_data(&mut self) -> Result<Vec<TraceItem>, PerfError> {
        let Some(r) = &self.rings else {
            return Err(PerfError::NotConfigured);
        };
        let head = r.load(data_head);
        // SAFETY: data_tail is only written by us.
        let tail = unsafe { std::ptr::read_volatile(data_tail(r.page())) };
        let (recs, new_tail) = ring::read_records(r.data_ring(), tail, head)?;
        r.store(data_tail, new_tail);
        let mut losses = Vec::new();
        for rec in recs {
            losses.extend(rec.losses());
            self.sideband.push(rec);
        }
        Ok(losses)
    }
}

/// CPUID 0x15's (EAX, EBX): the TSC:CTC ratio, where the CPU reports it.
fn cpuid_tsc_ctc() -> Option<(u32, u32)> {
    #[cfg(target_arch = "x86_64")]
    {
        let max = core::arch::x86_64::__cpuid(0).eax;
        if max >= 0x15 {
            let l = core::arch::x86_64::__cpuid(0x15);
            if l.eax != 0 && l.ebx != 0 {
                return Some((l.eax, l.ebx));
            }
        }
    }
    None
}

impl TraceBackend for PerfBackend {
    type Error = PerfError;

    fn capabilities(&self) -> Capabilities {
        self.pmu.capabilities()
    }

    fn configure(&mut self, config: &TraceConfig) -> Result<(), PerfError> {
        if self.fd.is_some() {
            return Err(PerfError::AlreadyConfigured);
        }
        let pa = map_config(config, &self.pmu, self.opts.filter_object.as_deref())?;
        let target = self.target.take().ok_or(PerfError::AlreadyConfigured)?;
        let (pid, cpu, on_exec) = match target {
            Target::Pid(p) => (p, -1, false),
            Target::Cpu(c) => (-1, c as i32, false),
            Target::Command(cmd) => {
                let w = Self::spawn_held(cmd)?;
                let pid = w.child.id() as i32;
                self.workload = Some(w);
                (pid, -1, true)
            }
        };
        self.area = AuxArea {
            idx: 0,
            cpu: u32::try_from(cpu).ok(),
            tid: u32::try_from(pid).ok(),
        };
        let mut a = sys::bindings::perf_event_attr {
            type_: pa.pmu_type,
            size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
            config: pa.config,
            sample_type: SAMPLE_TYPE,
            ..Default::default()
        };
        a.set_disabled(1);
        a.set_enable_on_exec(u64::from(on_exec));
        a.set_exclude_kernel(u64::from(pa.exclude_kernel));
        a.set_exclude_user(u64::from(pa.exclude_user));
        a.set_exclude_hv(1);
        a.set_sample_id_all(1);
        a.set_mmap(1);
        a.set_mmap2(1);
        a.set_comm(1);
        a.set_comm_exec(1);
        a.set_task(1);
        a.set_context_switch(1);
        // SAFETY: a is a fully initialised attr of the size we report.
        let fd = unsafe {
            sys::perf_event_open(
                &mut a,
                pid,
                cpu,
                -1,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            return Err(os_err("perf_event_open"));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes the event's id into `id`.
        if unsafe { sys::ioctls::ID(fd, &mut id) } != 0 {
            return Err(os_err("PERF_EVENT_IOC_ID"));
        }
        self.id = id;
        let base = Mapping::new(fd, (1 + self.opts.data_pages) * PAGE, 0, true)?;
        let aux_off = ((1 + self.opts.data_pages) * PAGE) as u64;
        let aux_len = self.opts.aux_pages * PAGE;
        let page = base.ptr.cast::<sys::bindings::perf_event_mmap_page>();
        // SAFETY: the user page is mapped read-write; the kernel reads these
        // two fields when the AUX area is mapped next.
        unsafe {
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*page).aux_offset), aux_off);
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*page).aux_size), aux_len as u64);
        }
        // A read-only AUX mapping selects overwrite (snapshot) mode.
        let aux = Mapping::new(fd, aux_len, aux_off as i64, !self.opts.snapshot)?;
        self.fd = Some(owned);
        self.rings = Some(Rings { base, aux });
        if !pa.filter.is_empty() {
            let c =
                std::ffi::CString::new(pa.filter.clone()).map_err(|_| AttrError::NothingTraced)?;
            // SAFETY: SET_FILTER reads a NUL-terminated string that outlives the call.
            let rc = unsafe { sys::ioctls::SET_FILTER(fd, c.as_ptr() as *mut libc::c_char) };
            if rc != 0 {
                return Err(os_err("PERF_EVENT_IOC_SET_FILTER"));
            }
        }
        self.attr = Some(pa);
        Ok(())
    }

    fn start(&mut self) -> Result<(), PerfError> {
        self.fd()?;
        if let Some(w) = &mut self.workload {
            // enable_on_exec turns tracing on at the exec the byte releases.
            if let Some(mut rel) = w.release.take() {
                rel.write_all(&[1]).map_err(|source| PerfError::Os {
                    call: "release workload",
                    source,
                })?;
            }
            self.enabled = true;
            return Ok(());
        }
        self.ioctl("enable")?;
        self.enabled = true;
        Ok(())
    }

    fn stop(&mut self) -> Result<(), PerfError> {
        self.ioctl("disable")?;
        self.enabled = false;
        Ok(())
    }

    fn read(&mut self, out: &mut Vec<TraceItem>) -> Result<usize, PerfError> {
        if self.opts.snapshot {
            return self.snapshot(out);
        }
        let losses = self.drain_data()?;
        let r = self.rings.as_ref().ok_or(PerfError::NotConfigured)?;
        let head = r.load(aux_head);
        let tail = self.aux_pos;
        let (item, new_tail) = ring::read_aux(r.aux.bytes(), tail, head)?;
        r.store(aux_tail, new_tail);
        self.aux_pos = new_tail;
        let n = match &item {
            Some(TraceItem::Data { bytes, .. }) => bytes.len(),
            _ => 0,
        };
        out.extend(item);
        out.extend(losses);
        Ok(n)
    }

    fn snapshot(&mut self, out: &mut Vec<TraceItem>) -> Result<usize, PerfError> {
        // Pause output so the ring holds still while it is copied.
        let running = self.enabled;
        if running {
            self.ioctl("disable")?;
        }
        let losses = self.drain_data()?;
        let r = self.rings.as_ref().ok_or(PerfError::NotConfigured)?;
        let head = r.load(aux_head);
        let items = ring::read_snapshot(r.aux.bytes(), self.aux_pos.min(head), head)?;
        self.aux_pos = head;
        let n = items
            .iter()
            .map(|i| match i {
                TraceItem::Data { bytes, .. } => bytes.len(),
                _ => 0,
            })
            .sum();
        out.extend(items);
        out.extend(losses);
        if running {
            self.ioctl("enable")?;
        }
        Ok(n)
    }
}

impl Drop for PerfBackend {
    fn drop(&mut self) {
        if let Some(w) = &mut self.workload {
            if w.release.take().is_some() {
                // Never released: the child's pre_exec sees EOF and exits.
                let _ = w.child.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_signal_sets_the_flag() {
        install_snapshot_signal(libc::SIGUSR2).unwrap();
        assert!(!take_snapshot_request());
        // SAFETY: raising a signal whose handler we just installed.
        unsafe {
            libc::raise(libc::SIGUSR2);
        }
        assert!(take_snapshot_request());
        assert!(!take_snapshot_request());
    }

    #[test]
    fn backend_needs_the_pmu() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/no-pmu");
        let opts = PerfOptions {
            root,
            ..PerfOptions::default()
        };
        assert!(matches!(
            PerfBackend::new(Target::Pid(0), opts),
            Err(PerfError::Sysfs(SysfsError::NoPmu(_)))
        ));
        let bad = PerfOptions {
            aux_pages: 3,
            ..PerfOptions::default()
        };
        assert!(matches!(
            PerfBackend::new(Target::Pid(0), bad),
            Err(PerfError::BadSizes { aux: 3, .. })
        ));
    }
}
