//! `ptxed --perf FILE`: the instructions of a `perf record -e intel_pt//` recording,
//! queue by queue (pt_perf::session), printed as ptxed prints a raw trace.
//!
//! Each queue starts with a header line naming its CPU or thread; `[context: …]`
//! says which thread runs from there on, `[lost: …]` where trace data is missing,
//! `[no code …]` why the decoder found no code. Offsets (errors, `--offset`) are
//! file offsets of the perf.data. What was chosen and what is wrong in the file goes
//! to stderr.

use std::io::Write;
use std::path::PathBuf;

use pt_decoder::driver::{Granularity, Item, Resync};
use pt_decoder::error::ErrorCode;
use pt_decoder::file::OptionError;
use pt_perf::session::{PerfItem, Session, SessionOptions};
use pt_perf_data::MappedFile;

use super::args::Setup;
use super::{check_block, check_insn, error_label, print_block, Printer};

/// The `--perf*` options.
#[derive(Clone, Debug, Default)]
pub(super) struct PerfArgs {
    /// The perf.data (`--perf`).
    pub file: Option<String>,
    cpus: Option<Vec<u32>>,
    tids: Option<Vec<u32>>,
    sysroot: Option<PathBuf>,
    buildid_dirs: Vec<PathBuf>,
    vdso: Vec<(String, PathBuf)>,
    timeless: bool,
}

pub(super) const HELP: &str = "  --perf <file>                        decode a perf.data recorded with `perf record -e intel_pt//`
                                       (no --pt, --raw or --elf): every AUX queue (CPU or thread)
                                       one after another, each after a header line; offsets are
                                       file offsets.
  --perf:cpu <n>[,<n>...]              only the queues of these CPUs.
  --perf:tid <n>[,<n>...]              only these threads (their queues; on per-CPU queues, the
                                       instructions while they run).
  --perf:sysroot <dir>                 look for the recorded files under <dir>.
  --perf:buildid-dir <dir>             look in this build-id cache first (perf's ~/.debug
                                       layout); then <file>.debug, .debug beside the file and
                                       $PERF_BUILDID_DIR or ~/.debug.
  --perf:vdso <file>                   the vdso's code when no build-id cache has a copy.
  --perf:timeless                      decode without timestamps (as perf's timeless decoding).
";

impl PerfArgs {
    /// Whether `arg` is one of ours, and whether it takes a value.
    pub fn takes(arg: &str) -> Option<bool> {
        match arg {
            "--perf" | "--perf:cpu" | "--perf:tid" | "--perf:sysroot" | "--perf:buildid-dir"
            | "--perf:vdso" => Some(true),
            "--perf:timeless" => Some(false),
            _ => None,
        }
    }

    /// Takes option `arg` with its value.
    pub fn set(&mut self, arg: &str, value: Option<&str>) -> Result<(), OptionError> {
        let v = value.unwrap_or("");
        match arg {
            "--perf" => {
                if let Some(f) = &self.file {
                    return Err(OptionError::DuplicatePerf(format!("{f}, {v}")));
                }
                self.file = Some(v.to_string());
            }
            "--perf:cpu" => self
                .cpus
                .get_or_insert_with(Vec::new)
                .extend(OptionError::parse_list(arg, v)?),
            "--perf:tid" => self
                .tids
                .get_or_insert_with(Vec::new)
                .extend(OptionError::parse_list(arg, v)?),
            "--perf:sysroot" => self.sysroot = Some(PathBuf::from(v)),
            "--perf:buildid-dir" => self.buildid_dirs.push(PathBuf::from(v)),
            "--perf:vdso" => self.vdso.push(("[vdso]".into(), PathBuf::from(v))),
            "--perf:timeless" => self.timeless = true,
            _ => return Err(OptionError::Unknown(arg.to_string())),
        }
        Ok(())
    }
}

fn show(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Decodes the perf.data; returns the exit code.
pub(super) fn run<W: Write>(prog: &str, setup: &Setup, perf: &PerfArgs, out: W) -> i32 {
    let Some(path) = perf.file.as_deref() else {
        return 1;
    };
    let mut err = std::io::stderr().lock();
    let mapped = match MappedFile::open(path) {
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
    let mut options = SessionOptions::for_file(path);
    let mut dirs = perf.buildid_dirs.clone();
    dirs.append(&mut options.buildid_dirs);
    options.buildid_dirs = dirs;
    options.sysroot = perf.sysroot.clone();
    options.vdso = perf.vdso.clone();
    options.timeless = perf.timeless;
    options.cpus = perf.cpus.clone();
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
    // Explicit decoder parameters win over the recording's.
    let config = session.config().overridden_by(&setup.config);

    let queues: Vec<usize> = session
        .queues()
        .iter()
        .enumerate()
        .filter(|(_, q)| match (&perf.tids, q.tid) {
            (Some(tids), Some(tid)) => tids.contains(&tid),
            _ => true,
        })
        .map(|(i, _)| i)
        .collect();
    let all = queues.len() == session.queues().len();
    let _ = writeln!(
        err,
        "{prog}: {path}: intel_pt, {}{}, {}, {} queue{}; decoding {}{}",
        if session.per_cpu() {
            "per-CPU"
        } else {
            "per-thread"
        },
        if session.snapshot() { " snapshots" } else { "" },
        if session.is_timed() {
            "timed"
        } else {
            "untimed"
        },
        session.queues().len(),
        if session.queues().len() == 1 { "" } else { "s" },
        if all { "all" } else { "queues" },
        if all {
            String::new()
        } else {
            queues
                .iter()
                .map(|q| format!(" {}", session.queues()[*q].idx))
                .collect()
        }
    );

    let opts = setup.opts;
    let stats = setup.stats;
    let count_only = opts.quiet && !opts.check;
    let share = count_only && (opts.insn_decoder || !stats.want_blocks);
    let empty = pt_decoder::image::Image::new();
    let mut p = Printer::new(out, opts, &empty);
    for q in queues {
        let queue = &session.queues()[q];
        let bytes: usize = queue.pieces.iter().map(|pc| pc.data.len()).sum();
        if !opts.quiet || opts.print_stats {
            let who = match (queue.cpu, queue.tid) {
                (Some(c), _) => format!("cpu {c}"),
                (None, Some(t)) => {
                    let pid = session.thread(t, None).and_then(|th| th.pid);
                    let comm = session.comm(t, None).unwrap_or("");
                    format!("pid {} tid {t} {comm}", show(pid))
                }
                (None, None) => "cpu - tid -".into(),
            };
            let _ = writeln!(
                p.out,
                "[queue {}: {who}: {} piece{}, {bytes:#x} bytes, {} segment{}]",
                queue.idx,
                queue.pieces.len(),
                if queue.pieces.len() == 1 { "" } else { "s" },
                queue.segments.len(),
                if queue.segments.len() == 1 { "" } else { "s" },
            );
        }
        let flow = setup.flow;
        let mut dec = session.decoder(q).configure(move |b| {
            b.config(&config)
                .flow(flow)
                .granularity(if opts.insn_decoder {
                    Granularity::Instructions
                } else {
                    Granularity::Blocks
                })
                .resync(if opts.resync_on_error {
                    Resync::NextIp
                } else {
                    Resync::NextPsb
                })
                .count_only(count_only)
                .threads(if share {
                    usize::try_from(opts.threads).unwrap_or(1)
                } else {
                    1
                })
                .min_piece(opts.min_piece)
        });
        // Output is shown while a selected thread runs.
        let mut shown = true;
        let mut time = 0u64;
        while let Some(item) = dec.next() {
            let fo = |dec: &pt_perf::session::QueueDecoder<'_, '_>, o: u64| {
                dec.file_offset(o).unwrap_or(o)
            };
            match item {
                PerfItem::Context(c) => {
                    shown = match (&perf.tids, c.tid) {
                        (Some(tids), Some(t)) => tids.contains(&t),
                        (Some(_), None) => false,
                        (None, _) => true,
                    };
                    if let Some(image) = dec.image() {
                        p.image = image;
                    }
                    if !opts.quiet && shown {
                        let comm = c
                            .tid
                            .and_then(|t| session.comm(t, dec.time()))
                            .unwrap_or("");
                        let _ = writeln!(
                            p.out,
                            "[context: pid {} tid {} {comm}]",
                            show(c.pid),
                            show(c.tid)
                        );
                    }
                }
                PerfItem::Lost(l) => {
                    let _ = writeln!(p.out, "[lost: {l}]");
                }
                PerfItem::NoCode(n) if shown => {
                    let _ = writeln!(p.out, "[{n}]");
                }
                PerfItem::Decoded(item) => {
                    if !shown {
                        continue;
                    }
                    match item {
                        Item::Block(mut b) => {
                            b.offset = fo(&dec, b.offset);
                            let offset = if opts.print_offset || opts.check {
                                b.offset
                            } else {
                                0
                            };
                            if !opts.quiet {
                                if let Some(d) = dec.decoder() {
                                    let blocks = d.counts().blocks.unwrap_or(0);
                                    print_block(&mut p, d, &b, blocks, offset, time);
                                }
                            }
                            if opts.check {
                                check_block(&mut p, &b.block, offset);
                            }
                        }
                        Item::Insn(i) => {
                            let offset = if opts.print_offset || opts.check {
                                fo(&dec, i.offset)
                            } else {
                                0
                            };
                            if !opts.quiet {
                                let _ = p.insn_decoder_line(&i.insn, offset, time);
                            }
                            if opts.check {
                                check_insn(&mut p, &i.insn, offset);
                            }
                        }
                        Item::Event(e) => {
                            time = e.event.time.tsc.unwrap_or(0);
                            if !opts.quiet && !e.event.status_update {
                                let _ = p.event(&e.event, fo(&dec, e.offset));
                            }
                        }
                        Item::Error(e) => {
                            let offset = e.offset.map(|o| fo(&dec, o)).ok_or(ErrorCode::NoSync);
                            p.diagnose(offset, e.ip, error_label(e.kind), e.code);
                        }
                        Item::EndOfTrace if !opts.quiet => {
                            let _ = p.out.write_all(b"[end of trace]\n");
                        }
                        Item::Disabled if !opts.quiet => {
                            let _ = p.out.write_all(b"[disabled]\n");
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if opts.print_stats {
            let counts = dec.counts();
            if stats.want_insn {
                let _ = writeln!(p.out, "insn: {}.", counts.insns);
            }
            if stats.want_blocks {
                let _ = writeln!(p.out, "blocks:\t{}.", counts.blocks.unwrap_or(0));
            }
        }
    }
    let flushed = p.out.flush();
    if !session.skipped().is_empty() {
        let _ = writeln!(
            err,
            "{prog}: {path}: warning: damaged recording: {}.",
            session.skipped()
        );
    }
    match flushed {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            let _ = writeln!(err, "{prog}: write error: {e}.");
            1
        }
    }
}
