//! `ptperf inject -i IN -o OUT --itrace=OPTS [--strip]`: a perf.data with the
//! samples [`pt_perf::synth`] synthesizes in place of the Intel PT trace, as `perf
//! inject --itrace` writes it: the synthesized events' attrs are added (perf's
//! ids: the trace event's first id + 1000000000 on), their samples (with branch
//! stacks for `l`, call chains for `g`) follow the side-band, and the AUX data and
//! its AUXTRACE_INFO are left out. perf script and report read the result without
//! decoding anything.
//!
//! It reads what `ptperf script` reads (a damaged recording too: what could be
//! read is injected, exit status 2). The output is written beside its name and
//! renamed only once it is complete and reads back whole: a failure leaves no file
//! behind and an existing file as it was.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use pt_perf::session::SessionOptions;
use pt_perf_data::{
    attr_type, feature_id, AttrFlags, BranchStack, ErrorKind, EventAttr, EventDesc, MappedFile,
    PerfFileWriter, Record, SampleType, U64s, ATTR_SIZE,
};

use crate::input::{self, Outcome};
use pt_perf::itrace::{PeriodType, SynthOpts};
use pt_perf::sample::{Kind, Sample};
use pt_perf::synth::{Event, Flow, Stacks, Synth};

/// `ptperf inject`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "ptperf inject",
    about = "Write a perf.data with the samples of its Intel PT trace, as perf inject --itrace does",
    after_help = crate::input::EXIT_STATUS
)]
pub struct Args {
    /// input file name
    #[arg(short = 'i', long = "input", default_value = "perf.data")]
    pub input: String,
    /// output file name
    #[arg(short = 'o', long = "output")]
    pub output: String,
    /// Instruction Tracing options (default: i100us as perf inject)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub itrace: Option<String>,
    /// Leave out the events that were not synthesized (their samples and attrs)
    #[arg(long = "strip")]
    pub strip: bool,
}

/// perf's sample type bits used here.
mod st {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const CALLCHAIN: u64 = 1 << 5;
    pub const BRANCH_STACK: u64 = 1 << 11;
    pub const IDENTIFIER: u64 = 1 << 16;
    /// What a synthesized sample keeps of the trace event's sample_type (perf's
    /// PERF_SAMPLE_MASK of intel-pt.c): the fields it has values for.
    pub const MASK: u64 = IP | TID | TIME | ADDR | ID | CPU | PERIOD | STREAM_ID | IDENTIFIER;
}

/// `PERF_COUNT_HW_*` of the synthesized hardware events.
const HW_INSTRUCTIONS: u64 = 1;
const HW_BRANCH_INSTRUCTIONS: u64 = 4;
/// `PERF_CONTEXT_USER` in call chains.
const CONTEXT_USER: u64 = (-512i64) as u64;

/// Runs `ptperf inject ARGS`.
pub fn main(args: &[OsString]) -> ExitCode {
    crate::reading::<Args>("ptperf inject", args, |a| run(&a))
}

/// One synthesized event: its kind, attr and id.
struct Synthesized {
    kind: Kind,
    attr: EventAttr,
    id: u64,
}

/// The output while it is written. Where the file system allows, an unnamed
/// file (`O_TMPFILE`) in the output's folder that is given its name only once
/// it is complete and reads back, so that nothing is left behind however the
/// process ends (SIGKILL and Ctrl-C included); elsewhere a file beside its name,
/// removed unless [`Output::commit`] renames it.
struct Output {
    path: PathBuf,
    staging: Staging,
}

enum Staging {
    /// The unnamed file (kept open: closing it would delete it).
    Unnamed(std::fs::File),
    /// A named temporary file; `done` once renamed.
    Named { tmp: PathBuf, done: bool },
}

impl Output {
    fn create(path: &Path) -> Result<(Output, std::fs::File), String> {
        use std::os::unix::fs::OpenOptionsExt;
        let name = path
            .file_name()
            .ok_or_else(|| format!("ptperf inject: {}: not a file name", path.display()))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let unnamed = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .mode(0o666)
            .custom_flags(libc::O_TMPFILE)
            .open(dir);
        match unnamed {
            Ok(file) => {
                let keep = file
                    .try_clone()
                    .map_err(|e| format!("ptperf inject: {}: {e}", path.display()))?;
                let out = Output {
                    path: path.to_path_buf(),
                    staging: Staging::Unnamed(keep),
                };
                return Ok((out, file));
            }
            // A missing folder is the user's to hear about; a file system
            // without O_TMPFILE gets the named file.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("ptperf inject: {}: {e}", path.display()));
            }
            Err(_) => {}
        }
        let tmp = temp_beside(path).unwrap_or_else(|| path.with_file_name(name));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| format!("ptperf inject: {}: {e}", tmp.display()))?;
        let out = Output {
            path: path.to_path_buf(),
            staging: Staging::Named { tmp, done: false },
        };
        Ok((out, file))
    }

    /// Reads the written file back (every record), then gives it its name.
    fn commit(mut self) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        let bad = |e: String| format!("ptperf inject: {}: written, but {e}", self.path.display());
        let written = match &self.staging {
            Staging::Unnamed(f) => PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())),
            Staging::Named { tmp, .. } => tmp.clone(),
        };
        let file = MappedFile::open(&written).map_err(|e| bad(e.to_string()))?;
        let perf = file
            .parse()
            .map_err(|e| bad(format!("it does not read back: {e}")))?;
        if let Some(Err(e)) = perf.records().find(Result::is_err) {
            return Err(bad(format!("it does not read back: {e}")));
        }
        let tmp = match &mut self.staging {
            Staging::Named { tmp, .. } => tmp.clone(),
            Staging::Unnamed(_) => {
                // linkat cannot replace a file: link under a temporary name,
                // then rename over the output (the name lives for a moment).
                let tmp = temp_beside(&self.path).unwrap_or_else(|| self.path.clone());
                link_proc_fd(&written, &tmp).map_err(|e| {
                    format!(
                        "ptperf inject: {}: cannot give the written file a name: {e}",
                        self.path.display()
                    )
                })?;
                self.staging = Staging::Named {
                    tmp: tmp.clone(),
                    done: false,
                };
                tmp
            }
        };
        std::fs::rename(&tmp, &self.path).map_err(|e| {
            format!(
                "ptperf inject: {}: cannot rename {} to it: {e}",
                self.path.display(),
                tmp.display()
            )
        })?;
        if let Staging::Named { done, .. } = &mut self.staging {
            *done = true;
        }
        Ok(())
    }
}

/// `.NAME.PID.tmp` beside `path`: where a file is written before it is
/// renamed to `path` once complete (inject's fallback, export's SQLite file).
pub(crate) fn temp_beside(path: &Path) -> Option<PathBuf> {
    let mut tmp_name = OsString::from(".");
    tmp_name.push(path.file_name()?);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    Some(path.with_file_name(tmp_name))
}

/// Gives the unnamed file open as `/proc/self/fd/N` the name `to`.
fn link_proc_fd(proc_path: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let cstr = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (from, to) = (cstr(proc_path)?, cstr(to)?);
    // SAFETY: both are NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Staging::Named { tmp, done: false } = &self.staging {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// The attr the synthesized events start from when the file has no intel_pt
/// event (a damaged attrs section): the first event's, else perf's usual one.
fn fallback_event(events: &[EventDesc]) -> EventDesc {
    events.first().cloned().unwrap_or_else(|| EventDesc {
        attr: EventAttr {
            type_: attr_type::HARDWARE,
            size: ATTR_SIZE,
            sample_type: SampleType(st::IP | st::TID | st::TIME | st::CPU | st::IDENTIFIER),
            flags: AttrFlags(AttrFlags::SAMPLE_ID_ALL),
            ..Default::default()
        },
        ids: Vec::new(),
        name: None,
    })
}

fn run(a: &Args) -> Result<Outcome, String> {
    const CMD: &str = "ptperf inject";
    let mut opts = SynthOpts::default();
    match a.itrace.as_deref() {
        // perf inject's default: instructions every 100 us, no branches.
        None | Some("") => {
            opts = SynthOpts::default_for(false);
            opts.set = true;
            opts.branches = false;
        }
        Some(s) => opts.parse_into(s).map_err(|e| e.to_string())?,
    }
    let file = input::open(CMD, &a.input)?;
    let perf = input::parse(CMD, &a.input, &file)?;
    let mut so = SessionOptions::for_file(&a.input);
    so.timeless = opts.timeless_decoding;
    let session = input::session(CMD, &a.input, &perf, so)?;
    let timeless = !session.is_timed() || opts.timeless_decoding;

    // The synthesized events' attrs, as intel-pt.c makes them.
    let pmu = session.info().pmu_type;
    let pt = perf
        .events()
        .iter()
        .find(|e| u64::from(e.attr.type_) == pmu)
        .cloned()
        // The session warned: the samples still have a place to go.
        .unwrap_or_else(|| fallback_event(perf.events()));
    let mut base = EventAttr {
        size: pt.attr.size,
        sample_type: SampleType(pt.attr.sample_type.0 & st::MASK | st::IP | st::TID | st::PERIOD),
        read_format: pt.attr.read_format,
        ..Default::default()
    };
    if timeless {
        base.sample_type.0 &= !st::TIME;
    } else {
        base.sample_type.0 |= st::TIME;
    }
    if !session.per_cpu() {
        base.sample_type.0 &= !st::CPU;
    }
    let keep = AttrFlags::EXCLUDE_USER
        | AttrFlags::EXCLUDE_KERNEL
        | AttrFlags::EXCLUDE_HV
        | AttrFlags::EXCLUDE_HOST
        | AttrFlags::EXCLUDE_GUEST
        | AttrFlags::SAMPLE_ID_ALL;
    base.flags = AttrFlags(pt.attr.flags.0 & keep);
    let mut id = pt
        .ids
        .first()
        .copied()
        .unwrap_or(0)
        .wrapping_add(1_000_000_000);
    if id == 0 {
        id = 1;
    }
    let mut synth_events = Vec::new();
    if opts.branches {
        let mut at = base;
        at.config = HW_BRANCH_INSTRUCTIONS;
        at.sample_period = 1;
        at.sample_type.0 |= st::ADDR;
        synth_events.push(Synthesized {
            kind: Kind::Branches,
            attr: at,
            id,
        });
        id += 1;
    }
    if opts.callchain {
        base.sample_type.0 |= st::CALLCHAIN;
    }
    if opts.last_branch {
        base.sample_type.0 |= st::BRANCH_STACK;
        base.branch_sample_type |= pt_perf_data::attr::BRANCH_HW_INDEX;
    }
    if opts.instructions {
        let mut at = base;
        at.config = HW_INSTRUCTIONS;
        at.sample_period = if opts.period_type == PeriodType::Nanosecs {
            0
        } else {
            opts.period
        };
        synth_events.push(Synthesized {
            kind: Kind::Instructions,
            attr: at,
            id,
        });
    }
    if synth_events.is_empty() {
        return Err("ptperf inject: the --itrace options synthesize no samples this tool writes (i, b, c, r with g, l)".into());
    }

    // Side-band records carry the ids of the events that recorded them: even a
    // stripped file keeps those events' attrs (--strip leaves out their samples).
    let mut events: Vec<EventDesc> = perf.events().to_vec();
    for s in &synth_events {
        let name = format!(
            "{}{}",
            s.kind.name(),
            crate::script::print::modifiers(s.attr.flags, 0)
        );
        events.push(EventDesc {
            attr: s.attr,
            ids: vec![s.id],
            name: Some(name),
        });
    }
    let (output, out) = Output::create(Path::new(&a.output))?;
    let mut w = PerfFileWriter::new(std::io::BufWriter::new(out), events)
        .map_err(|e| format!("ptperf inject: {}: {e}", a.output))?;
    for id in 1..feature_id::LAST {
        if matches!(id, feature_id::AUXTRACE | feature_id::EVENT_DESC) {
            continue;
        }
        if let Some(Ok(f)) = perf.feature(id) {
            w.set_feature(f);
        }
    }
    // The side-band, without the trace. Records the session could not read are in
    // its tally; one that reads but does not write (a damaged file's fields that
    // contradict its attr) is left out and named.
    let mut err = None;
    let mut not_copied = 0u64;
    for r in perf.records() {
        let Ok((at, r)) = r else { continue };
        match r {
            Record::Auxtrace(_)
            | Record::AuxtraceInfo(_)
            | Record::AuxtraceError(_)
            | Record::FinishedRound => continue,
            Record::Sample(_) if a.strip => continue,
            _ => {}
        }
        match w.write(&r) {
            Err(e) if matches!(e.kind, ErrorKind::Io(_)) => {
                err.get_or_insert(e.to_string());
                break;
            }
            Err(e) => {
                not_copied += 1;
                eprintln!(
                    "{CMD}: {}: warning: the {} record at file offset {at:#x} is not copied: {}",
                    a.input,
                    r.name(),
                    e.kind
                );
            }
            Ok(_) => {}
        }
    }
    // The samples.
    let mut synth = Synth::new(&session, opts);
    let mut buf_chain: Vec<u8> = Vec::new();
    let mut buf_br: Vec<u8> = Vec::new();
    let bar = crate::progress::bar(synth.total_bytes());
    crate::progress::attach(&mut synth, bar.as_ref());
    let _ = synth.run(&mut |e: Event<'_>| -> Flow {
        let Event::Sample(s, stacks) = e else {
            return Flow::Continue(());
        };
        let Some(ev) = synth_events.iter().find(|x| x.kind == s.kind) else {
            return Flow::Continue(());
        };
        let rec = sample_record(s, stacks, ev, &mut buf_chain, &mut buf_br);
        if let Err(e) = w.write(&Record::Sample(rec)) {
            err.get_or_insert(e.to_string());
            return Flow::Break(());
        }
        Flow::Continue(())
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    input::trace_warnings(CMD, &a.input, &synth);
    if let Err(e) = w.write(&Record::FinishedRound) {
        err.get_or_insert(e.to_string());
    }
    let mut written = w
        .finish()
        .map_err(|e| format!("ptperf inject: {}: {e}", a.output))?;
    std::io::Write::flush(&mut written).map_err(|e| format!("ptperf inject: {}: {e}", a.output))?;
    drop(written);
    if let Some(e) = err {
        return Err(format!("ptperf inject: {}: {e}", a.output));
    }
    output.commit()?;
    let outcome = input::finish(CMD, &a.input, &session);
    if not_copied > 0 {
        eprintln!(
            "{CMD}: {}: {not_copied} side-band records not copied",
            a.input
        );
        return Ok(Outcome::Damaged);
    }
    Ok(outcome)
}

/// The SAMPLE record of a synthesized sample (its event's sample_type decides which
/// fields are written).
fn sample_record<'b>(
    s: &Sample,
    stacks: &Stacks,
    ev: &Synthesized,
    chain: &'b mut Vec<u8>,
    br: &'b mut Vec<u8>,
) -> pt_perf_data::Sample<'b> {
    let t = ev.attr.sample_type.0;
    let has = |b: u64| t & b != 0;
    chain.clear();
    if has(st::CALLCHAIN) {
        chain.extend_from_slice(&CONTEXT_USER.to_le_bytes());
        for &ip in &stacks.callchain {
            chain.extend_from_slice(&ip.to_le_bytes());
        }
    }
    br.clear();
    for e in &stacks.branches {
        br.extend_from_slice(&e.from.to_le_bytes());
        br.extend_from_slice(&e.to.to_le_bytes());
        let flags = (u64::from(e.in_tx) << 2) | (u64::from(e.abort) << 3);
        br.extend_from_slice(&flags.to_le_bytes());
    }
    pt_perf_data::Sample {
        // PERF_RECORD_MISC_USER: user-space code (kernel tracing is not decoded).
        misc: 2,
        id: (has(st::ID) || has(st::IDENTIFIER)).then_some(ev.id),
        ip: Some(s.ip),
        pid: Some(s.pid as u32),
        tid: Some(s.tid as u32),
        time: has(st::TIME).then(|| s.time.unwrap_or(0)),
        addr: has(st::ADDR).then_some(s.addr),
        stream_id: has(st::STREAM_ID).then_some(ev.id),
        cpu: has(st::CPU).then_some(s.cpu as u32),
        period: has(st::PERIOD).then_some(s.period),
        callchain: has(st::CALLCHAIN).then(|| U64s::new(chain)),
        branch_stack: has(st::BRANCH_STACK).then(|| BranchStack {
            hw_idx: Some(u64::MAX),
            entries: br,
        }),
        ..Default::default()
    }
}
