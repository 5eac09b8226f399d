//! Recordings for the perf.data session tests: real programs run on the simulator,
//! written as perf.data the way `perf record -e intel_pt//u` lays them out (per
//! thread or per CPU, timed or not, whole or as snapshots, with data lost on
//! purpose), then decoded by perf (`perf script --itrace=i1i -F tid,ip`, the judge)
//! and by our session.

use pt_decoder::{Granularity, Item};
use pt_hal::config::TraceConfig;
use pt_perf::session::{PerfItem, Session, SessionOptions};
use pt_perf_data::intel_pt::config as ptc;
use pt_perf_data::*;
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::{CloneKind, ThreadId};
use pt_sim::pt::SimParams;
use pt_sim::record::{
    record_into, ProcessMemory, RecordError, RecordSink, RecordSummary, SimRecording, TaskEvent,
    ThreadStart, Timed,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The intel_pt PMU's type in the recordings.
pub const PT_PMU: u32 = 9;
/// The sample id of the intel_pt event.
pub const PT_ID: u64 = 1001;
/// The sample id of the tracking (dummy) event.
pub const TRACK_ID: u64 = 1002;

/// The scratch tree of these recordings (under cargo's `target/tmp`, shared by every
/// test binary of the workspace).
pub fn tmp() -> PathBuf {
    crate::target_tmp().join("perf_session")
}

/// Runs perf or ptperf (`tool`) `cmd` with `args` on `file`: HOME in the
/// scratch tree and, for perf, its build-id directory beside the file, so that
/// neither reads a cache of the user's.
pub fn run_on(tool: &Path, cmd: &str, file: &Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(tool);
    if tool.ends_with("perf") {
        let mut beside = file.as_os_str().to_owned();
        beside.push(".debug");
        c.arg("--buildid-dir").arg(beside);
    }
    c.arg(cmd)
        .arg("-i")
        .arg(file)
        .args(args)
        .env("PERF_PAGER", "cat")
        .env("HOME", tmp())
        .output()
        .unwrap()
}

/// A fresh scratch directory `name` under [`tmp`].
pub fn scratch(name: &str) -> PathBuf {
    let d = tmp().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles `<name>.c` with `flags` (once per test binary): from this crate's
/// `programs/` (the programs the recordings of several crates share) or else the
/// running test's crate's `tests/programs/`.
pub fn program(name: &'static str, flags: &'static [&'static str]) -> PathBuf {
    program_as(name, name, flags)
}

/// Compiles `<source>.c` (found as [`program`] finds it) with `flags` into `name`.
pub fn program_as(name: &'static str, source: &str, flags: &'static [&'static str]) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<HashMap<&'static str, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap();
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let src = program_source(source);
    std::fs::create_dir_all(tmp()).unwrap();
    let out = tmp().join(name);
    let st = Command::new(crate::tool("cc", "gcc"))
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed for {name}");
    built.insert(name, out.clone());
    out
}

/// Where `<source>.c` is: this crate's `programs/`, else the `tests/programs/` of the
/// crate whose test runs (cargo sets `CARGO_MANIFEST_DIR` when it runs a test or bench).
fn program_source(source: &str) -> PathBuf {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("programs/{source}.c"));
    if shared.exists() {
        return shared;
    }
    let caller = std::env::var_os("CARGO_MANIFEST_DIR")
        .expect("CARGO_MANIFEST_DIR (run the test through cargo) to find the test's programs");
    Path::new(&caller).join(format!("tests/programs/{source}.c"))
}

/// Flags of a program without libc.
pub const NOLIBC: &[&str] = &[
    "-O1",
    "-static",
    "-nostdlib",
    "-fno-stack-protector",
    "-fno-pie",
    "-no-pie",
];

/// How to lay out the recording.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Per-CPU AUX area (one CPU running every thread, with SWITCH_CPU_WIDE records),
    /// else one per thread.
    pub per_cpu: bool,
    /// TSC packets and sampled time.
    pub timed: bool,
    /// AUXTRACE pieces of about this many bytes, cut at PSBs (0: one per stream).
    pub piece: usize,
    /// Snapshot mode: every piece is written as a snapshot that repeats this many
    /// bytes of the one before.
    pub snapshot_overlap: Option<usize>,
    /// Drop the AUXTRACE piece with this index (of the first queue) and say so with
    /// an AUX record with the truncated flag.
    pub drop_piece: Option<usize>,
    /// Keep a copy of the vdso in a build-id cache beside the file.
    pub vdso_cache: bool,
    /// The trace configuration.
    pub config: TraceConfig,
    /// More intel_pt config bits for the event (e.g. `pwr_evt`, `ptw`, for
    /// packets a test adds to the trace).
    pub config_bits: u64,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            per_cpu: false,
            timed: true,
            piece: 0,
            snapshot_overlap: None,
            drop_piece: None,
            vdso_cache: false,
            config: TraceConfig::perf_default(),
            config_bits: 0,
        }
    }
}

/// The intel_pt PMU config of a trace configuration.
pub fn pt_config(c: &TraceConfig) -> u64 {
    let mut v = ptc::PT;
    if c.branch {
        v |= ptc::BRANCH;
    }
    if c.tsc {
        v |= ptc::TSC;
    }
    if c.dis_retc {
        v |= ptc::NORETCOMP;
    }
    if let Some(m) = c.mtc {
        v |= ptc::MTC | ptc::mtc_period(m as u64);
    }
    if let Some(t) = c.cyc {
        v |= ptc::CYC | ptc::cyc_thresh(t as u64);
    }
    v | ptc::psb_period(c.psb_freq as u64)
}

/// One side-band record, owned until the file is written.
#[derive(Clone, Debug)]
enum Side {
    Comm {
        pid: u32,
        tid: u32,
        comm: String,
    },
    Mmap {
        pid: u32,
        tid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        prot: u32,
        name: String,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    Exit {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    ItraceStart {
        pid: u32,
        tid: u32,
    },
    SwitchOut {
        pid: u32,
        tid: u32,
        next_pid: u32,
        next_tid: u32,
    },
    SwitchIn {
        pid: u32,
        tid: u32,
        prev_pid: u32,
        prev_tid: u32,
    },
    Aux {
        pid: u32,
        tid: u32,
        offset: u64,
        size: u64,
        flags: u64,
    },
}

/// A recording sink that keeps everything in memory and writes a perf.data at the
/// end.
pub struct PerfSink {
    layout: Layout,
    /// Side-band in time order: (tsc, record).
    side: Vec<(u64, Side)>,
    /// Trace streams: per thread (by first appearance) or one for CPU 0.
    streams: Vec<(ThreadId, Vec<u8>)>,
    stream_of: HashMap<ThreadId, usize>,
    parents: HashMap<u32, u32>,
    /// Per CPU: the thread on it.
    on_cpu: Option<ThreadId>,
    last_tsc: u64,
    /// The threads recorded, in the order they started.
    pub threads: Vec<ThreadId>,
}

impl PerfSink {
    /// An empty sink that lays its recording out as `layout` says.
    pub fn new(layout: Layout) -> Self {
        PerfSink {
            layout,
            side: Vec::new(),
            streams: Vec::new(),
            stream_of: HashMap::new(),
            parents: HashMap::new(),
            on_cpu: None,
            last_tsc: 0,
            threads: Vec::new(),
        }
    }

    /// The bytes of trace stream `i` (in order of first appearance), for a
    /// test to add packets to before [`PerfSink::write`].
    pub fn stream_bytes_mut(&mut self, i: usize) -> Option<&mut Vec<u8>> {
        self.streams.get_mut(i).map(|(_, b)| b)
    }

    fn stream(&mut self, t: ThreadId) -> &mut Vec<u8> {
        let key = if self.layout.per_cpu {
            ThreadId { pid: 0, tid: 0 }
        } else {
            t
        };
        let n = self.streams.len();
        let i = *self.stream_of.entry(key).or_insert(n);
        if i == n {
            self.streams.push((t, Vec::new()));
        }
        &mut self.streams[i].1
    }
}

/// The TSC of the first PSB+ in `bytes`.
fn first_tsc(bytes: &[u8]) -> Option<u64> {
    let psb = pt_perf::session::overlap::find_overlap(&[], bytes, false).start;
    let mut p = pt_decoder::PacketDecoder::new(bytes, &pt_decoder::Config::default());
    p.sync_set(psb as u64).ok()?;
    loop {
        match p.next_packet().ok()?.1 {
            pt_decoder::Packet::Tsc { tsc } => return Some(tsc),
            pt_decoder::Packet::Psbend => return None,
            _ => {}
        }
    }
}

impl RecordSink for PerfSink {
    fn open_thread(&mut self, start: &ThreadStart<'_>) -> Result<(), RecordError> {
        self.threads.push(start.id);
        self.last_tsc = self.last_tsc.max(start.tsc);
        if !self.layout.per_cpu || start.first {
            self.side.push((
                start.tsc,
                Side::ItraceStart {
                    pid: start.id.pid,
                    tid: start.id.tid,
                },
            ));
        }
        self.stream(start.id);
        Ok(())
    }

    fn trace(&mut self, thread: ThreadId, bytes: &[u8], _tsc: u64) -> Result<(), RecordError> {
        if self.layout.per_cpu && self.on_cpu != Some(thread) {
            if let Some(prev) = self.on_cpu {
                // The switch happened just before the new thread's PSB+.
                let t = first_tsc(bytes).unwrap_or(self.last_tsc).saturating_sub(1);
                self.side.push((
                    t,
                    Side::SwitchOut {
                        pid: prev.pid,
                        tid: prev.tid,
                        next_pid: thread.pid,
                        next_tid: thread.tid,
                    },
                ));
                self.side.push((
                    t,
                    Side::SwitchIn {
                        pid: thread.pid,
                        tid: thread.tid,
                        prev_pid: prev.pid,
                        prev_tid: prev.tid,
                    },
                ));
            }
            self.on_cpu = Some(thread);
        }
        if let Some(t) = first_tsc(bytes) {
            self.last_tsc = self.last_tsc.max(t);
        }
        self.stream(thread).extend_from_slice(bytes);
        Ok(())
    }

    fn lost(&mut self, _thread: ThreadId, _size: u64, _tsc: u64) -> Result<(), RecordError> {
        Ok(())
    }

    fn task_event(&mut self, event: &Timed) -> Result<(), RecordError> {
        let t = event.tsc;
        self.last_tsc = self.last_tsc.max(t);
        let r = match &event.event {
            TaskEvent::Comm { thread, comm, .. } => Side::Comm {
                pid: thread.pid,
                tid: thread.tid,
                comm: comm.clone(),
            },
            TaskEvent::Mmap { thread, mapping } => {
                if !mapping.perms.exec {
                    return Ok(());
                }
                let name = if mapping.path.is_empty() {
                    "//anon".to_string()
                } else {
                    mapping.path.clone()
                };
                Side::Mmap {
                    pid: thread.pid,
                    tid: thread.tid,
                    start: mapping.start,
                    len: mapping.end - mapping.start,
                    pgoff: mapping.offset,
                    prot: 1 | 4 | if mapping.perms.write { 2 } else { 0 },
                    name,
                }
            }
            TaskEvent::Fork {
                parent,
                child,
                kind,
            } => {
                let ppid = if *kind == CloneKind::Thread {
                    child.pid
                } else {
                    parent.pid
                };
                self.parents.insert(child.tid, parent.tid);
                Side::Fork {
                    pid: child.pid,
                    ppid,
                    tid: child.tid,
                    ptid: parent.tid,
                }
            }
            TaskEvent::Exit { thread, .. } => {
                let ptid = self.parents.get(&thread.tid).copied().unwrap_or(thread.tid);
                Side::Exit {
                    pid: thread.pid,
                    ppid: thread.pid,
                    tid: thread.tid,
                    ptid,
                }
            }
            _ => return Ok(()),
        };
        self.side.push((t, r));
        Ok(())
    }

    fn checkpoint(&mut self, _memory: ProcessMemory<'_>, _tsc: u64) -> Result<(), RecordError> {
        Ok(())
    }

    fn finish(
        &mut self,
        _summary: &RecordSummary,
        _memory: ProcessMemory<'_>,
        _tsc: u64,
    ) -> Result<(), RecordError> {
        Ok(())
    }
}

/// A stream's pieces: (AUX offset, bytes of the stream).
type Pieces = Vec<(u64, std::ops::Range<usize>)>;

/// Cuts `data` into pieces of about `size` bytes at PSBs.
fn cut_at_psbs(data: &[u8], size: usize) -> Vec<std::ops::Range<usize>> {
    if size == 0 || data.len() <= size {
        return std::iter::once(0..data.len()).collect();
    }
    let psb = [0x02u8, 0x82].repeat(8);
    let psbs: Vec<usize> = (1..data.len().saturating_sub(15))
        .filter(|&i| data[i..i + 16] == psb[..])
        .collect();
    let mut out = Vec::new();
    let mut start = 0;
    for &p in &psbs {
        if p - start >= size {
            out.push(start..p);
            start = p;
        }
    }
    out.push(start..data.len());
    out
}

/// Our own vdso: its bytes and build id.
pub fn own_vdso() -> Option<(Vec<u8>, BuildId)> {
    let copy = pt_elf::vdso::OwnVdso::new()?;
    let bytes = std::fs::read(copy.path()).ok()?;
    let id = BuildId::new(pt_elf::build_id::build_id(&bytes)?);
    Some((bytes, id))
}

/// Writes `vdso` into perf's build-id cache layout under `dir`.
pub fn cache_vdso(dir: &Path, bytes: &[u8], id: &BuildId) {
    pt_elf::BuildIdCache::new(dir)
        .add("[vdso]", id.as_bytes(), pt_elf::EntryKind::Vdso, bytes)
        .unwrap();
}

impl PerfSink {
    /// Writes the perf.data.
    pub fn write(&self, path: &Path) {
        let l = &self.layout;
        let config = pt_config(&l.config) | l.config_bits;
        let pt = intel_pt_attr(PT_PMU, config, true, l.per_cpu);
        let mut track = tracking_attr(true, l.per_cpu, l.per_cpu, l.timed);
        if !l.timed {
            track.sample_type = SampleType(track.sample_type.0 & !SampleType::TIME);
        }
        let mut info = IntelPtInfo::new(PT_PMU);
        info.cap_user_time_zero = l.timed as u64;
        info.time_mult = 1;
        info.per_cpu_mmaps = l.per_cpu as u64;
        info.snapshot_mode = l.snapshot_overlap.is_some() as u64;
        info.have_sched_switch = if l.per_cpu { 3 } else { 0 };
        let clock = SimParams::default().clock;
        if let Some(m) = &mut info.mtc {
            m.tsc_ctc_ratio_n = clock.cpuid_15_ebx as u64;
            m.tsc_ctc_ratio_d = clock.cpuid_15_eax as u64;
        }
        info.max_non_turbo_ratio = Some(clock.nom_freq as u64);
        let mut setup = RecordingSetup::new(
            EventDesc {
                attr: pt,
                ids: vec![PT_ID],
                name: Some("intel_pt//u".into()),
            },
            info,
        );
        setup.tracking = Some(EventDesc {
            attr: track,
            ids: vec![TRACK_ID],
            name: Some("dummy:u".into()),
        });
        setup.perf_version = "6.1.187".into();
        setup.cmdline = vec!["perf-session-test".into()];
        // The workspace's one Intel PT writer: a failure names the file.
        fn written<T>(r: Result<T, RecordingError>) -> T {
            r.unwrap_or_else(|e| panic!("writing the recording: {e}"))
        }
        let mut w = written(RecordingWriter::create(path, setup));
        // A Skylake: the errata perf and we apply are the same.
        w.set_feature(Feature::CpuId("GenuineIntel,6,94,3".into()));
        if l.vdso_cache {
            if let Some((bytes, id)) = own_vdso() {
                let mut dir = path.as_os_str().to_owned();
                dir.push(".debug");
                cache_vdso(Path::new(&dir), &bytes, &id);
                w.set_feature(Feature::BuildId(vec![BuildIdEntry {
                    misc: misc::USER,
                    pid: -1,
                    build_id: id,
                    filename: b"[vdso]".to_vec(),
                }]));
            }
        }
        written(w.finish_init());
        let cpu = l.per_cpu.then_some(0u32);
        let sid = |pid: u32, tid: u32, id: u64, t: u64| SampleId {
            pid: Some(pid),
            tid: Some(tid),
            id: Some(id),
            time: l.timed.then_some(t),
            cpu,
            ..Default::default()
        };
        let mut side = self.side.clone();
        // The pieces (and what is dropped), so that AUX records can be written.
        let mut pieces: Vec<(usize, Pieces)> = Vec::new();
        for (qi, (_, data)) in self.streams.iter().enumerate() {
            let ranges = cut_at_psbs(data, l.piece);
            pieces.push((
                qi,
                ranges.into_iter().map(|r| (r.start as u64, r)).collect(),
            ));
        }
        if let Some(d) = l.drop_piece {
            let (t, _) = self.streams[0];
            if let Some((off, r)) = pieces[0].1.get(d).cloned() {
                side.push((
                    first_tsc(&self.streams[0].1[r.clone()]).unwrap_or(self.last_tsc),
                    Side::Aux {
                        pid: t.pid,
                        tid: t.tid,
                        offset: off,
                        size: 0,
                        flags: AuxFlags::TRUNCATED,
                    },
                ));
            }
        }
        side.sort_by_key(|(t, _)| *t);
        for (t, r) in &side {
            let t = *t;
            let rec = match r {
                Side::Comm { pid, tid, comm } => Record::Comm(Comm {
                    misc: misc::COMM_EXEC,
                    pid: *pid,
                    tid: *tid,
                    comm: comm.as_str().into(),
                    sample_id: sid(*pid, *tid, TRACK_ID, t),
                }),
                Side::Mmap {
                    pid,
                    tid,
                    start,
                    len,
                    pgoff,
                    prot,
                    name,
                } => Record::Mmap2(Mmap2 {
                    misc: misc::USER,
                    pid: *pid,
                    tid: *tid,
                    start: *start,
                    len: *len,
                    pgoff: *pgoff,
                    file: Mmap2File::Inode {
                        maj: 0,
                        min: 0,
                        ino: 0,
                        ino_generation: 0,
                    },
                    prot: *prot,
                    flags: 2,
                    filename: name.as_str().into(),
                    sample_id: sid(*pid, *tid, TRACK_ID, t),
                }),
                Side::Fork {
                    pid,
                    ppid,
                    tid,
                    ptid,
                } => Record::Fork(Task {
                    misc: 0,
                    pid: *pid,
                    ppid: *ppid,
                    tid: *tid,
                    ptid: *ptid,
                    time: t,
                    sample_id: sid(*pid, *tid, TRACK_ID, t),
                }),
                Side::Exit {
                    pid,
                    ppid,
                    tid,
                    ptid,
                } => Record::Exit(Task {
                    misc: 0,
                    pid: *pid,
                    ppid: *ppid,
                    tid: *tid,
                    ptid: *ptid,
                    time: t,
                    sample_id: sid(*pid, *tid, TRACK_ID, t),
                }),
                Side::ItraceStart { pid, tid } => Record::ItraceStart(ItraceStart {
                    misc: 0,
                    pid: *pid,
                    tid: *tid,
                    sample_id: sid(*pid, *tid, PT_ID, t),
                }),
                Side::SwitchOut {
                    pid,
                    tid,
                    next_pid,
                    next_tid,
                } => Record::SwitchCpuWide(SwitchCpuWide {
                    misc: misc::SWITCH_OUT,
                    next_prev_pid: *next_pid,
                    next_prev_tid: *next_tid,
                    sample_id: sid(*pid, *tid, TRACK_ID, t),
                }),
                Side::SwitchIn {
                    pid,
                    tid,
                    prev_pid,
                    prev_tid,
                } => Record::SwitchCpuWide(SwitchCpuWide {
                    misc: 0,
                    next_prev_pid: *prev_pid,
                    next_prev_tid: *prev_tid,
                    sample_id: sid(*pid, *tid, TRACK_ID, t),
                }),
                Side::Aux {
                    pid,
                    tid,
                    offset,
                    size,
                    flags,
                } => Record::Aux(Aux {
                    misc: 0,
                    aux_offset: *offset,
                    aux_size: *size,
                    flags: AuxFlags(*flags),
                    sample_id: sid(*pid, *tid, PT_ID, t),
                }),
            };
            written(w.write(&rec));
        }
        for (qi, ranges) in &pieces {
            let (t, data) = &self.streams[*qi];
            let mut prev: Option<std::ops::Range<usize>> = None;
            for (n, (off, r)) in ranges.iter().enumerate() {
                if *qi == 0 && l.drop_piece == Some(n) {
                    prev = None;
                    continue;
                }
                // A snapshot repeats the end of the one before.
                let (off, r) = match (l.snapshot_overlap, &prev) {
                    (Some(k), Some(p)) => {
                        let s = r.start.saturating_sub(k).max(p.start);
                        (s as u64, s..r.end)
                    }
                    _ => (*off, r.clone()),
                };
                written(w.write_auxtrace(
                    &Auxtrace {
                        offset: off,
                        reference: self.last_tsc,
                        idx: *qi as u32,
                        tid: if l.per_cpu { u32::MAX } else { t.tid },
                        cpu: if l.per_cpu { 0 } else { u32::MAX },
                        data: &[],
                    },
                    &[&data[r.clone()]],
                ));
                prev = Some(r);
            }
        }
        written(w.finish_round());
        written(w.finish());
    }
}

/// Records `program args` on the simulator into `dir/perf.data` with `layout`.
pub fn record(dir: &Path, program: &Path, args: &[&str], layout: Layout) -> (PathBuf, PerfSink) {
    let mut t = Tracer::spawn(program, args, TraceOptions::default()).expect("spawn");
    let mut config = layout.config;
    config.tsc = layout.timed;
    if !layout.timed {
        config.mtc = None;
        config.cyc = None;
    }
    let rec = SimRecording::new(config);
    let mut sink = PerfSink::new(Layout { config, ..layout });
    let s = record_into(&mut t, &rec, &mut sink, |_| {}).expect("record");
    assert!(s.source_error.is_none(), "{:?}", s.source_error);
    if std::env::var_os("PERF_SESSION_DEBUG").is_some() {
        for t in &s.threads {
            eprintln!(
                "recorded {:?}: {} instructions, {:?}",
                t.id, t.instructions, t.exit
            );
        }
        for (t, d) in &sink.streams {
            eprintln!("stream of {t:?}: {} bytes", d.len());
        }
    }
    let path = dir.join("perf.data");
    sink.write(&path);
    (path, sink)
}

/// Instruction addresses by thread.
pub type Flows = BTreeMap<u32, Vec<u64>>;

/// What `perf script --itrace=i1i -F tid,ip` prints, by thread (`buildid_dir`: for
/// perf's build-id cache).
pub fn perf_flows(file: &Path, buildid_dir: Option<&Path>) -> Flows {
    let perf = crate::tool("perf", "linux-perf");
    let mut cmd = Command::new(perf);
    // The build-id cache beside the file (where the tests keep the vdso), unless
    // another is given.
    let mut beside = file.as_os_str().to_owned();
    beside.push(".debug");
    let dir = buildid_dir.map_or(PathBuf::from(beside), Path::to_path_buf);
    cmd.arg("--buildid-dir")
        .arg(dir)
        .args(["script", "--itrace=i1i", "-F", "tid,ip", "-i"])
        .arg(file)
        .env("PERF_PAGER", "cat")
        .env("HOME", tmp());
    let out = cmd.output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut flows = Flows::new();
    for line in so.lines() {
        let mut w = line.split_whitespace();
        let (Some(tid), Some(ip)) = (w.next(), w.next()) else {
            continue;
        };
        let (Ok(tid), Ok(ip)) = (tid.parse::<u32>(), u64::from_str_radix(ip, 16)) else {
            continue;
        };
        flows.entry(tid).or_default().push(ip);
    }
    flows
}

/// What our session decodes, by thread, and the session's other items (errors,
/// context switches, lost data) as text.
pub fn our_flows(file: &Path, options: SessionOptions) -> (Flows, Vec<String>) {
    let mapped = MappedFile::open(file).unwrap();
    let perf = mapped.parse().unwrap();
    let session = Session::new(&perf, options).unwrap();
    let mut flows = Flows::new();
    let mut notes: Vec<String> = session
        .warnings()
        .iter()
        .map(|w| format!("warning: {w}"))
        .collect();
    for q in 0..session.queues().len() {
        let mut dec = session
            .decoder(q)
            .configure(|b| b.granularity(Granularity::Instructions));
        while let Some(item) = dec.next() {
            match item {
                PerfItem::Decoded(Item::Insn(i)) => {
                    let tid = dec.context().and_then(|c| c.tid).unwrap_or(u32::MAX);
                    flows.entry(tid).or_default().push(i.insn.ip);
                }
                PerfItem::Decoded(Item::Error(e)) => notes.push(format!("error: {e}")),
                PerfItem::Context(c) => notes.push(format!("context: {:?}/{:?}", c.pid, c.tid)),
                PerfItem::Lost(l) => notes.push(format!("lost: {l}")),
                PerfItem::NoCode(n) => notes.push(format!("nocode: {n}")),
                _ => {}
            }
        }
    }
    (flows, notes)
}

/// Where two flows ([`compare`]) part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlowDifference {
    /// They have different threads.
    #[error("threads differ: ours {ours:?}, perf {perf:?}")]
    Threads {
        /// Our threads.
        ours: Vec<u32>,
        /// perf's.
        perf: Vec<u32>,
    },
    /// A thread's instructions differ.
    #[error("tid {tid}: {ours_len} instructions here, {perf_len} in perf; first difference at {at}: ours [{ours}] perf [{perf}]")]
    Instructions {
        /// The thread.
        tid: u32,
        /// Our count of its instructions.
        ours_len: usize,
        /// perf's.
        perf_len: usize,
        /// The index of the first difference.
        at: usize,
        /// Our addresses around it (hex).
        ours: String,
        /// perf's.
        perf: String,
    },
}

/// Compares two flows thread by thread; on a difference, where it is.
pub fn compare(ours: &Flows, perf: &Flows) -> Result<(), FlowDifference> {
    let tids = |f: &Flows| f.keys().copied().collect::<Vec<_>>();
    if tids(ours) != tids(perf) {
        return Err(FlowDifference::Threads {
            ours: tids(ours),
            perf: tids(perf),
        });
    }
    for (tid, a) in ours {
        let b = &perf[tid];
        if a != b {
            let at = a
                .iter()
                .zip(b)
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            let show = |v: &[u64]| {
                v.iter()
                    .skip(at.saturating_sub(3))
                    .take(8)
                    .map(|x| format!("{x:x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            return Err(FlowDifference::Instructions {
                tid: *tid,
                ours_len: a.len(),
                perf_len: b.len(),
                at,
                ours: show(a),
                perf: show(b),
            });
        }
    }
    Ok(())
}
