//! `ptperf timeline`: every thread's calls on a time axis, for trace viewers
//! (Perfetto's UI, chrome://tracing, speedscope), from any Intel PT recording.
//!
//! - [`stacks`]: the calls and returns `ptperf script --call-ret-trace`
//!   synthesizes, through perf's call/return rules, as nested slices named as
//!   script names them; trace begin/end, errors and lost data as instants, CBR
//!   as a counter;
//! - [`budget`]: `--min-duration` and `--max-events` (calls too short are
//!   left out and counted in their callers);
//! - [`chrome`]: the Chrome trace event format (JSON);
//! - [`perfetto`]: Perfetto's protobuf trace.
//!
//! ```text
//! ptperf timeline -i perf.data -o trace.json
//! ptperf timeline -i perf.data -o trace.pftrace --max-events 1000000
//! ```

pub mod budget;
pub mod chrome;
pub mod perfetto;
pub mod stacks;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use pt_perf::session::Session;
use pt_perf_data::MappedFile;

use crate::script::{self, Plan, Printer, TimeRange};
use budget::{show_duration, Dropper, Spool};
use pt_perf::synth::{Event, Flow, Synth};
use stacks::{Builder, Cbr, Frame, Instant, Slice, Track};

/// `ptperf timeline`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "ptperf timeline",
    about = "Write every thread's calls over time from perf.data, for trace viewers (Chrome trace JSON or Perfetto protobuf)"
)]
pub struct Args {
    /// input file name
    #[arg(short = 'i', long = "input", default_value = "perf.data")]
    pub input: String,
    /// output file name ('-': stdout); its extension chooses the format
    /// (.json: chrome; .pftrace, .perfetto-trace, .pb: perfetto)
    #[arg(short = 'o', long = "output", default_value = "-")]
    pub output: String,
    /// output format: chrome (trace event JSON) or perfetto (protobuf)
    #[arg(long = "format", value_parser = ["chrome", "perfetto"])]
    pub format: Option<String>,
    /// Instruction Tracing options, as script takes them (default: calls and
    /// returns, errors, power events: crewp)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub itrace: Option<String>,
    /// Time span of interest (start,stop); calls are clipped to it
    #[arg(long = "time")]
    pub time: Option<String>,
    /// only these comma separated thread ids
    #[arg(long = "tid")]
    pub tid: Option<String>,
    /// only these comma separated process ids
    #[arg(long = "pid")]
    pub pid: Option<String>,
    /// list of cpus to decode
    #[arg(short = 'C', long = "cpu")]
    pub cpu: Option<String>,
    /// leave out calls shorter than this (e.g. 500ns, 2us, 1ms; plain: ns),
    /// counting them in their callers
    #[arg(long = "min-duration")]
    pub min_duration: Option<String>,
    /// at most this many events: the shortest calls are left out (the
    /// threshold chosen is said on stderr)
    #[arg(long = "max-events")]
    pub max_events: Option<u64>,
    /// look for files under this directory
    #[arg(long = "symfs")]
    pub symfs: Option<String>,
    /// Disable symbol demangling
    #[arg(long = "no-demangle")]
    pub no_demangle: bool,
}

/// What a timeline file holds.
#[derive(Debug, Default)]
pub struct Timeline {
    /// The recording's name.
    pub input: String,
    /// The threads.
    pub tracks: Vec<Track>,
    /// The functions.
    pub frames: Vec<Frame>,
    /// The calls: thread by thread, in time order, callers before callees.
    pub slices: Vec<Slice>,
    /// Point events.
    pub instants: Vec<Instant>,
    /// CBR changes.
    pub cbr: Vec<Cbr>,
    /// Calls shorter than this (ns) were left out.
    pub min_duration: u64,
    /// How many.
    pub dropped: u64,
    /// Which threads are shown (all when empty).
    pub shown: Vec<bool>,
}

impl Timeline {
    /// Whether thread `t` is written.
    pub fn shows_track(&self, t: u32) -> bool {
        self.shown.get(t as usize).copied().unwrap_or(true)
    }

    /// The threads written.
    pub fn shown_tracks(&self) -> impl Iterator<Item = &Track> {
        self.tracks
            .iter()
            .enumerate()
            .filter(|(i, _)| self.shows_track(*i as u32))
            .map(|(_, t)| t)
    }

    /// Puts the slices in the order the writers need: thread by thread, in
    /// the order the calls began (callers before the calls they made).
    pub fn sort(&mut self) {
        self.slices
            .sort_unstable_by_key(|s| (s.track, s.seq, s.depth));
    }
}

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Chrome trace event JSON.
    Chrome,
    /// Perfetto protobuf.
    Perfetto,
}

impl Format {
    /// The format `--format` names, else the one `path`'s extension says
    /// (Chrome JSON for stdout and other names).
    pub fn choose(given: Option<&str>, path: &str) -> Format {
        match given {
            Some("perfetto") => Format::Perfetto,
            Some(_) => Format::Chrome,
            None => {
                let ext = std::path::Path::new(path)
                    .extension()
                    .and_then(|e| e.to_str())
                    .unwrap_or("");
                match ext {
                    "pftrace" | "perfetto-trace" | "pb" | "proto" => Format::Perfetto,
                    _ => Format::Chrome,
                }
            }
        }
    }
}

/// Runs `ptperf timeline ARGS`.
pub fn main(args: &[OsString]) -> ExitCode {
    crate::command::<Args>("ptperf timeline", args, |a| run(&a))
}

/// Where the slices go while the trace is decoded: filtered by thread and
/// time, then either counted and spooled (under `--max-events`) or dropped
/// below `--min-duration` and kept.
struct Collect<'p> {
    time: Option<TimeRange>,
    keep_track: &'p dyn Fn(u32) -> bool,
    spool: Option<Spool>,
    dropper: Dropper,
    kept: Vec<Slice>,
    error: Option<std::io::Error>,
}

impl Collect<'_> {
    fn take(&mut self, mut s: Slice) {
        if !(self.keep_track)(s.track) {
            return;
        }
        if let Some(r) = self.time {
            let end = if r.end == 0 { u64::MAX } else { r.end };
            if s.end < r.start || s.begin > end {
                return;
            }
            s.begin = s.begin.max(r.start);
            s.end = s.end.min(end);
        }
        match &mut self.spool {
            Some(sp) => {
                if let Err(e) = sp.push(&s) {
                    self.error.get_or_insert(e);
                }
            }
            None => {
                if let Some(s) = self.dropper.take(s) {
                    self.kept.push(s);
                }
            }
        }
    }
}

fn run(a: &Args) -> Result<(), String> {
    let sargs = script::Args {
        input: a.input.clone(),
        itrace: a.itrace.clone(),
        fields: Vec::new(),
        insn_trace: None,
        xed: false,
        call_trace: false,
        call_ret_trace: true,
        ns: true,
        reltime: false,
        deltatime: false,
        cpu: a.cpu.clone(),
        tid: a.tid.clone(),
        pid: a.pid.clone(),
        time: a.time.clone(),
        symfs: a.symfs.clone(),
        full_source_path: false,
        json: false,
        no_demangle: a.no_demangle,
        order: Vec::new(),
    };
    let plan = Plan::new(&sargs)?;
    let min = match &a.min_duration {
        Some(s) => budget::parse_duration(s).ok_or_else(|| {
            format!("ptperf timeline: bad --min-duration '{s}' (e.g. 500ns, 2us)")
        })?,
        None => 0,
    };
    let format = Format::choose(a.format.as_deref(), &a.output);
    let what = |e: &dyn std::fmt::Display| format!("ptperf timeline: {}: {e}", a.input);
    let file = MappedFile::open(&a.input).map_err(|e| what(&e))?;
    let perf = file.parse().map_err(|e| what(&e))?;
    let (so, _vdso) = script::session_options(&a.input, &plan, a.symfs.as_deref());
    let session = Session::new(&perf, so).map_err(|e| what(&e))?;
    let mut synth = Synth::new(&session, plan.opts);
    let printer = Printer::new(&session, &perf, &plan, synth.opts())?;
    let mut builder = Builder::new(printer, synth.cbr2khz());

    // Threads are filtered as they are met (a track's thread is known then).
    let track_ok = std::cell::RefCell::new(Vec::<bool>::new());
    let (tids, pids) = (plan.tids.clone(), plan.pids.clone());
    let keep_track = |t: u32| track_ok.borrow().get(t as usize).copied().unwrap_or(true);
    let mut collect = Collect {
        time: plan.time,
        keep_track: &keep_track,
        spool: match a.max_events {
            Some(_) => Some(Spool::new().map_err(|e| format!("ptperf timeline: {e}"))?),
            None => None,
        },
        dropper: Dropper::new(min),
        kept: Vec::new(),
        error: None,
    };
    let bar = crate::progress::bar(synth.total_bytes());
    crate::progress::attach(&mut synth, bar.as_ref());
    let update_tracks = |b: &Builder<'_, '_>| {
        let mut ok = track_ok.borrow_mut();
        while ok.len() < b.tracks.len() {
            let t = &b.tracks[ok.len()];
            ok.push(
                tids.as_ref().map_or(true, |v| v.contains(&(t.tid as u32)))
                    && pids.as_ref().map_or(true, |v| v.contains(&(t.pid as u32))),
            );
        }
    };
    let _ = synth.run(&mut |e: Event<'_>| -> Flow {
        match e {
            Event::Sample(s, _) => {
                // A new thread's track is known before its first slice ends.
                let n = builder.tracks.len();
                builder.track_of(s);
                if builder.tracks.len() != n {
                    update_tracks(&builder);
                }
                builder.sample(s, &mut |sl: Slice| collect.take(sl));
            }
            Event::Error(e) => {
                builder.error(e);
                update_tracks(&builder);
            }
        }
        Flow::Continue(())
    });
    let mut rest = Vec::new();
    builder.finish(&mut |sl: Slice| rest.push(sl));
    update_tracks(&builder);
    for sl in rest {
        collect.take(sl);
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(e) = collect.error.take() {
        return Err(format!("ptperf timeline: spooling calls: {e}"));
    }

    let shown = track_ok.borrow().clone();
    let in_range = |t: u64| {
        plan.time
            .map_or(true, |r| t >= r.start && (r.end == 0 || t <= r.end))
    };
    let instants: Vec<Instant> = std::mem::take(&mut builder.instants)
        .into_iter()
        .filter(|i| {
            i.track
                .map_or(true, |t| shown.get(t as usize) == Some(&true))
        })
        .filter(|i| in_range(i.time))
        .collect();
    let cbr: Vec<Cbr> = std::mem::take(&mut builder.cbr)
        .into_iter()
        .filter(|c| in_range(c.time))
        .collect();
    let mut tl = Timeline {
        input: a.input.clone(),
        tracks: std::mem::take(&mut builder.tracks),
        frames: std::mem::take(&mut builder.frames),
        min_duration: min,
        shown,
        ..Default::default()
    };
    match (collect.spool.take(), a.max_events) {
        (Some(sp), Some(max)) => {
            let others = (instants.len() + cbr.len()) as u64;
            let total = sp.hist.total();
            let (threshold, kept) = sp.hist.threshold(max.saturating_sub(others));
            let threshold = threshold.max(min);
            let mut dropper = Dropper::new(threshold);
            let mut slices = Vec::with_capacity(kept as usize);
            sp.drain(|s| {
                if let Some(s) = dropper.take(s) {
                    slices.push(s);
                }
            })
            .map_err(|e| format!("ptperf timeline: reading back spooled calls: {e}"))?;
            eprintln!(
                "ptperf timeline: --max-events {max}: keeping the calls of {} or longer ({} of {total} calls, {} left out)",
                show_duration(threshold),
                slices.len(),
                dropper.dropped
            );
            tl.min_duration = threshold;
            tl.dropped = dropper.dropped;
            tl.slices = slices;
        }
        _ => {
            tl.dropped = collect.dropper.dropped;
            tl.slices = std::mem::take(&mut collect.kept);
        }
    }
    tl.instants = instants;
    tl.cbr = cbr;

    // Nothing matched: say what did not.
    if tl.slices.is_empty() && tl.instants.is_empty() && tl.dropped == 0 {
        if let (Some(t), true) = (&a.tid, tl.shown_tracks().next().is_none()) {
            return Err(format!(
                "ptperf timeline: no thread {t} in {} (its threads: {})",
                a.input,
                thread_list(&tl.tracks)
            ));
        }
        if let (Some(p), true) = (&a.pid, tl.shown_tracks().next().is_none()) {
            return Err(format!("ptperf timeline: no process {p} in {}", a.input));
        }
        if let Some(t) = &a.time {
            return Err(format!(
                "ptperf timeline: no calls in the time range {t} of {}",
                a.input
            ));
        }
        return Err(format!("ptperf timeline: no calls in {}", a.input));
    }
    tl.sort();
    write_out(&a.output, format, &tl)
}

fn thread_list(tracks: &[Track]) -> String {
    let v: Vec<String> = tracks.iter().map(|t| t.tid.to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

fn write_out(path: &str, format: Format, tl: &Timeline) -> Result<(), String> {
    let write = |out: &mut dyn Write| match format {
        Format::Chrome => chrome::write(out, tl),
        Format::Perfetto => perfetto::write(out, tl),
    };
    if path == "-" {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, pt_cli::stdout());
        // A closed pipe ends us quietly (pt_cli::stdout).
        let _ = write(&mut out).and_then(|()| out.flush());
        return Ok(());
    }
    let err = |e: std::io::Error| format!("ptperf timeline: {path}: {e}");
    let f = std::fs::File::create(path).map_err(err)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, f);
    write(&mut out).and_then(|()| out.flush()).map_err(err)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn slice(track: u32, depth: u32, frame: u32, begin: u64, end: u64, seq: u64) -> Slice {
        Slice {
            track,
            depth,
            frame,
            flags: 0,
            begin,
            end,
            id: seq,
            parent: 0,
            dropped: 0,
            seq,
        }
    }

    /// Two threads: main [100,200] calls f (no time, at its start) and g
    /// [100,150], which calls f at its end; the other thread runs g alone.
    /// The slices come as the builder gives them: callees first.
    pub(crate) fn sample() -> Timeline {
        let frame = |n: &str| Frame {
            name: n.into(),
            dso: "/bin/prog".into(),
        };
        let mut tl = Timeline {
            input: "perf.data".into(),
            tracks: vec![
                Track {
                    pid: 10,
                    tid: 10,
                    comm: "prog".into(),
                },
                Track {
                    pid: 10,
                    tid: 11,
                    comm: "prog".into(),
                },
            ],
            frames: vec![frame("main"), frame("f"), frame("g")],
            slices: vec![
                slice(0, 1, 1, 100, 100, 2),
                slice(1, 0, 2, 120, 130, 5),
                slice(0, 2, 1, 150, 150, 4),
                slice(0, 1, 2, 100, 150, 3),
                slice(0, 0, 0, 100, 200, 1),
            ],
            instants: vec![Instant {
                track: Some(0),
                time: 100,
                name: "trace begin".into(),
                cat: "trace",
            }],
            cbr: vec![Cbr {
                cpu: 0,
                time: 90,
                ratio: 32,
                mhz: 3200,
            }],
            ..Default::default()
        };
        tl.slices[4].dropped = 7;
        tl.slices[4].flags = crate::export::calls::NO_RETURN;
        tl.sort();
        tl
    }

    #[test]
    fn sorted_threads_in_the_order_calls_began() {
        let tl = sample();
        let order: Vec<(u32, u64)> = tl.slices.iter().map(|s| (s.track, s.seq)).collect();
        assert_eq!(order, [(0, 1), (0, 2), (0, 3), (0, 4), (1, 5)]);
    }

    #[test]
    fn formats_by_flag_then_extension() {
        assert_eq!(Format::choose(None, "t.json"), Format::Chrome);
        assert_eq!(Format::choose(None, "-"), Format::Chrome);
        assert_eq!(Format::choose(None, "t.pftrace"), Format::Perfetto);
        assert_eq!(Format::choose(Some("perfetto"), "t.json"), Format::Perfetto);
        assert_eq!(Format::choose(Some("chrome"), "t.pftrace"), Format::Chrome);
    }

    #[test]
    fn chrome_json_events() {
        let tl = sample();
        let mut out = Vec::new();
        chrome::write(&mut out, &tl).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        let x: Vec<_> = evs.iter().filter(|e| e["ph"] == "X").collect();
        let names: Vec<&str> = x.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["main", "f", "g", "f", "g"]);
        let main = x[0];
        assert_eq!(main["ts"], 0.1);
        assert_eq!(main["dur"], 0.1);
        assert_eq!(
            (main["pid"].as_i64(), main["tid"].as_i64()),
            (Some(10), Some(10))
        );
        assert_eq!(main["args"]["dso"], "/bin/prog");
        assert_eq!(main["args"]["dropped_calls"], 7);
        assert_eq!(main["args"]["no_return"], true);
        assert!(x[1]["args"].get("no_return").is_none());
        assert_eq!(x[4]["tid"], 11);
        let meta = evs.iter().filter(|e| e["ph"] == "M").count();
        assert_eq!(meta, 3, "one process, two threads");
        assert!(evs
            .iter()
            .any(|e| e["ph"] == "i" && e["name"] == "trace begin" && e["s"] == "t"));
        assert!(evs
            .iter()
            .any(|e| e["ph"] == "C" && e["name"] == "CBR cpu0" && e["args"]["MHz"] == 3200));
    }

    #[test]
    fn perfetto_slices_begin_and_end_in_order() {
        use prost::Message;
        let tl = sample();
        let mut out = Vec::new();
        perfetto::write(&mut out, &tl).unwrap();
        let t = perfetto::Trace::decode(out.as_slice()).unwrap();
        let mut names = std::collections::HashMap::new();
        let mut seq = Vec::new();
        for p in &t.packet {
            if let Some(i) = &p.interned_data {
                for n in &i.event_names {
                    names.insert(n.iid.unwrap(), n.name.clone().unwrap());
                }
            }
            let Some(e) = &p.track_event else { continue };
            let what = match e.r#type {
                Some(1) => format!("B {}", names[&e.name_iid.unwrap()]),
                Some(2) => "E".to_string(),
                Some(3) => format!("I {}", e.name.clone().unwrap()),
                Some(4) => format!("C {}", e.counter_value.unwrap()),
                _ => "?".into(),
            };
            seq.push(format!(
                "{} {what}@{}",
                e.track_uuid.unwrap() & 0xff,
                p.timestamp.unwrap()
            ));
        }
        assert_eq!(
            seq,
            [
                "1 B main@100",
                "1 B f@100",
                "1 E@100",
                "1 B g@100",
                "1 B f@150",
                "1 E@150",
                "1 E@150",
                "1 E@200",
                "2 B g@120",
                "2 E@130",
                "1 I trace begin@100",
                "0 C 3200@90",
            ]
        );
    }
}
