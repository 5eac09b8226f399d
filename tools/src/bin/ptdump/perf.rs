//! `ptdump --perf FILE`: the packets of every AUX queue of a perf.data, queue by
//! queue and segment by segment (see [`pt_perf::session`]), each after a header
//! line. Packet offsets are offsets into the segment; the header names the file
//! offsets of its pieces. What was chosen and what is wrong in the file goes to
//! stderr.

use std::io::{self, Write};
use std::path::PathBuf;

use pt_decoder::config::Config;
use pt_decoder::dump::perf::PerfDumpArgs;
use pt_decoder::dump::{dump, DumpOptions};
use pt_perf::{Session, SessionOptions};

/// Dumps the perf.data of `args`; returns the exit code.
pub fn run_perf(
    prog: &str,
    args: &PerfDumpArgs,
    config: &Config,
    opts: &DumpOptions,
    mut out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let Some(path) = args.file.as_deref() else {
        return 1;
    };
    let mapped = match pt_perf_data::MappedFile::open(path) {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(err, "{prog}: {path}: {e}.");
            return 1;
        }
    };
    let file = match mapped.parse() {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(err, "{prog}: {path}: {e}.");
            return 1;
        }
    };
    let options = SessionOptions {
        cpus: args.cpus.clone(),
        buildid_dirs: Vec::<PathBuf>::new(),
        ..Default::default()
    };
    let session = match Session::new(&file, options) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "{prog}: {path}: {e}.");
            return 1;
        }
    };
    for w in session.warnings() {
        let _ = writeln!(err, "{prog}: {path}: warning: {w}.");
    }
    // The recording's parameters, unless given.
    let cfg = session.config().overridden_by(config);
    let chosen: Vec<usize> = session
        .queues()
        .iter()
        .enumerate()
        .filter(|(_, q)| match (&args.tids, q.tid) {
            (Some(t), Some(tid)) => t.contains(&tid),
            (Some(_), None) => false,
            (None, _) => true,
        })
        .map(|(i, _)| i)
        .collect();
    let _ = writeln!(
        err,
        "{prog}: {path}: intel_pt, {}{}, {} queue{}; dumping {}",
        if session.per_cpu() {
            "per-CPU"
        } else {
            "per-thread"
        },
        if session.snapshot() { " snapshots" } else { "" },
        session.queues().len(),
        if session.queues().len() == 1 { "" } else { "s" },
        if chosen.len() == session.queues().len() {
            "all".to_string()
        } else {
            let v: Vec<String> = chosen
                .iter()
                .map(|&q| session.queues()[q].idx.to_string())
                .collect();
            format!("queues {}", v.join(" "))
        }
    );
    let result = (|| -> io::Result<()> {
        for &q in &chosen {
            let queue = &session.queues()[q];
            let who = match (queue.cpu, queue.tid) {
                (Some(c), _) => format!("cpu {c}"),
                (None, Some(t)) => format!("tid {t}"),
                (None, None) => "cpu - tid -".into(),
            };
            for (i, seg) in queue.segments.iter().enumerate() {
                if let Some(lost) = queue.lost_before(i) {
                    writeln!(out, "[lost: {lost}]")?;
                }
                let pieces: Vec<String> = seg
                    .parts
                    .iter()
                    .map(|p| {
                        let pc = &queue.pieces[p.piece];
                        format!("{:#x}", pc.data_offset + p.skip as u64)
                    })
                    .collect();
                writeln!(
                    out,
                    "[queue {}: {who}: segment {i}: {:#x} bytes from file offset{} {}]",
                    queue.idx,
                    seg.len(),
                    if pieces.len() == 1 { "" } else { "s" },
                    pieces.join(", ")
                )?;
                dump(queue.segment_bytes(i), &cfg, opts, &mut out)?;
            }
            for l in &queue.lost {
                writeln!(out, "[lost: {l}]")?;
            }
        }
        out.flush()
    })();
    if !session.skipped().is_empty() {
        let _ = writeln!(
            err,
            "{prog}: {path}: warning: damaged recording: {}.",
            session.skipped()
        );
    }
    match result {
        Ok(()) => 0,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            let _ = writeln!(err, "{prog}: write error: {e}.");
            1
        }
    }
}
