//! Coverage decoders side by side on the same traces, one core: pt-coverage, ptcov and
//! iptr-edge-analyzer here, libxdc through `benches/libxdc/compare.sh` (which runs
//! this first, to export the traces, and its harness after).
//!
//! ```text
//! coverage_compare --generate OUT_DIR [--retcomp-timing|--retcomp-only|--timing-only] [--runs N] [--long-mb M] [--ours-only] [--long-only] [--no-exact]
//! coverage_compare PERF_DATA OUT_DIR [--long-repeat N] [--whole-runs] [--ours-only] [--long-only] [--no-exact]
//! coverage_compare --dir DIR [--ours-only] [--long-only] [--no-exact]
//! coverage_compare --compare-libxdc DIR
//! coverage_compare --retcomp-cost PLAIN_DIR OTHER_DIR...
//! ```
//!
//! `--generate`: [`Workload::generated`]: (a) a fuzzing workload of 10,000 separate
//! runs (1-50 KB each, from TIP.PGE to TIP.PGD) of one generated program with
//! different inputs, and (b) one generated run of 64 MB; without return compression
//! and timing packets (what every decoder accepts), or with both
//! (`--retcomp-timing`, which only pt-coverage decodes: use `--ours-only`);
//! `--runs` and `--long-mb` make it smaller (e.g. to count instructions under
//! callgrind on a loaded machine).
//!
//! `PERF_DATA`: from the recording's busiest queue (one program: record it with
//! `intel_pt/noretcomp,tsc=0,mtc=0/u` so that every decoder accepts it): (a) 10,000
//! slices of 1-50 KB of the one run, each from a PSB to the end of a TIP.PGD where
//! there is one close enough, else to a packet boundary (libxdc, which starts
//! tracing at a TIP.PGE, cannot decode most of them), or with `--whole-runs` the
//! runs of a fuzz target that makes a system call before each input (see
//! `whole_runs_of`), and (b) the whole trace, repeated `N` times (default: up to
//! 64 MB).
//!
//! It writes the workload with the code and the filter ranges into `OUT_DIR` for the
//! libxdc harness (`--dir` reads one back), and prints MB/s and traces/s: (a) warm
//! (after a first pass), (b) cold (a fresh decoder) and warm. `--ours-only`
//! measures pt-coverage alone, `--long-only` the long trace alone; `--no-exact` leaves out pt-coverage's exact edges.
//! `--compare-libxdc` compares libxdc's bitmap of the long trace with ours under
//! libxdc's edge formula. `--retcomp-cost` times pt-coverage on two workloads of
//! the same runs, written by `--generate` without and with `--retcomp-timing`,
//! passes of one and the other in turn (so that both meet the same load on a
//! shared machine): what return compression and timing packets cost.

use std::io::Write;
use std::path::Path;

use pt_benches::coverage::{filter_ranges, Workload};
use pt_benches::flow::CallsMix;
use pt_coverage::{CoverageDecoder, EdgeHash, Options};
use pt_decoder::PacketDecoder;
use pt_perf::{Session, SessionOptions};
use pt_perf_data::MappedFile;

const USAGE: &str =
    "usage: coverage_compare --generate OUT_DIR [--retcomp-timing|--retcomp-only|--timing-only] [--ours-only] [--long-only] [--no-exact]
       coverage_compare PERF_DATA OUT_DIR [--long-repeat N] [--whole-runs] [--ours-only] [--long-only] [--no-exact]
       coverage_compare --dir DIR [--ours-only] [--long-only] [--no-exact]
       coverage_compare --compare-libxdc DIR
       coverage_compare --retcomp-cost PLAIN_DIR OTHER_DIR...";

const MAP: usize = 1 << 16;
const FUZZ_TRACES: usize = 10_000;
const ROUNDS: usize = 3;

/// This thread's CPU time in seconds (`CLOCK_THREAD_CPUTIME_ID`, as the libxdc harness
/// measures), so that figures on a loaded machine count only our own work.
fn cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn mb(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs
}

fn load(data: &Path, repeat: Option<usize>, whole_runs: bool) -> Workload {
    let file = MappedFile::open(data).expect("perf.data");
    let perf = file.parse().expect("a perf.data");
    let session = Session::new(&perf, SessionOptions::for_file(data)).expect("a session");
    let (q, queue) = session
        .queues()
        .iter()
        .enumerate()
        .max_by_key(|(_, q)| {
            (0..q.segments.len())
                .map(|s| q.segment_bytes(s).len())
                .sum::<usize>()
        })
        .expect("a queue");
    let mut trace = Vec::new();
    for s in 0..queue.segments.len() {
        trace.extend_from_slice(queue.segment_bytes(s));
    }
    let ctx = session.running(q, None);
    let image = session.image(ctx.pid, None).clone();
    let config = *session.config();
    // Packet boundaries and PSBs.
    let mut pkt = PacketDecoder::new(&trace, &config);
    // Where a run could end: after a TIP.PGD (a syscall, or the end of the
    // program), as a fuzzer's traces end where tracing stops.
    let mut bounds = Vec::new();
    let mut packets = Vec::new();
    let mut psbs = Vec::new();
    if pkt.sync_forward().is_ok() {
        let mut pgd = false;
        for r in &mut pkt {
            let Ok((off, p)) = r else { break };
            packets.push(off as usize);
            if pgd {
                bounds.push(off as usize);
            }
            pgd = matches!(
                p,
                pt_decoder::Packet::Ip(pt_decoder::IpPacketKind::TipPgd, _)
            );
            if matches!(p, pt_decoder::Packet::Psb) {
                psbs.push(off as usize);
            }
        }
    }
    bounds.push(trace.len());
    let mut rng = pt_benches::Rng::new(25);
    let mut fuzz = if whole_runs {
        whole_runs_of(&trace, &config)
    } else {
        Vec::with_capacity(FUZZ_TRACES)
    };
    while !whole_runs && fuzz.len() < FUZZ_TRACES && !psbs.is_empty() {
        let start = psbs[rng.below(psbs.len() as u64) as usize];
        let want = 1024 + rng.below(49 * 1024) as usize;
        let max = start + 50 * 1024;
        let i = bounds.partition_point(|&b| b < start + want);
        // After a TIP.PGD if there is one before 50 KB, else at a packet boundary.
        let end = match bounds.get(i) {
            Some(&b) if b <= max => b,
            _ => {
                let j = packets.partition_point(|&b| b < start + want);
                packets.get(j).copied().unwrap_or(trace.len())
            }
        };
        fuzz.push(trace[start..end].to_vec());
    }
    let n = repeat.unwrap_or((64 << 20) / trace.len().max(1)).max(1);
    let long = trace.repeat(n);
    Workload {
        filter: filter_ranges(&image),
        image,
        config,
        fuzz,
        long,
    }
}

/// The fuzzing workload of a recording of a fuzz target that makes a system call
/// before each input (`programs/json_parse.c`): with user-space tracing, each run
/// is what comes from a TIP.PGE to the next TIP.PGD. Each becomes a trace of its
/// own as a fuzzer records it, tracing enabled afresh: PSB, MODE.EXEC, PSBEND, the
/// TIP.PGE with its whole IP (it may be compressed against the last IP in the
/// recording), then the recorded packets up to the TIP.PGD. The first
/// [`FUZZ_TRACES`] runs of 1 to 50 KB.
fn whole_runs_of(trace: &[u8], config: &pt_decoder::Config) -> Vec<Vec<u8>> {
    use pt_decoder::{IpPacketKind, Packet};
    use pt_encoder::{encode_to_vec, ExecMode, IpCompression, IpPayload, LastIp, ModeExec};
    let mut pkt = PacketDecoder::new(trace, config);
    let mut runs = Vec::new();
    if pkt.sync_forward().is_err() {
        return runs;
    }
    let mut last_ip = LastIp::new();
    let mut mode = ModeExec::from_mode(ExecMode::Bit64);
    // The run open: its TIP.PGE's IP and where the packets after it start.
    let mut open: Option<(u64, usize)> = None;
    let mut prev: Option<Packet> = None;
    for r in &mut pkt {
        let Ok((off, p)) = r else { break };
        let off = off as usize;
        // The packet before this one ends here.
        if let Some(Packet::Ip(IpPacketKind::TipPge, _)) = prev {
            open = last_ip.query().ok().map(|ip| (ip, off));
        }
        if let Some(Packet::Ip(IpPacketKind::TipPgd, _)) = prev {
            if let Some((ip, from)) = open.take() {
                let mut run = Vec::new();
                for head in [
                    Packet::Psb,
                    Packet::ModeExec(mode),
                    Packet::Psbend,
                    Packet::Ip(
                        IpPacketKind::TipPge,
                        IpPayload::new(IpCompression::Full, ip),
                    ),
                ] {
                    encode_to_vec(&head, &mut run).expect("a valid packet");
                }
                run.extend_from_slice(&trace[from..off]);
                if (1024..=50 * 1024).contains(&run.len()) {
                    runs.push(run);
                    if runs.len() == FUZZ_TRACES {
                        break;
                    }
                }
            }
        }
        match &p {
            Packet::Psb => last_ip = LastIp::new(),
            Packet::ModeExec(m) => mode = *m,
            Packet::Ip(_, payload) => {
                last_ip.update(*payload);
            }
            Packet::Ovf => open = None,
            _ => {}
        }
        prev = Some(p);
    }
    runs
}

/// Times `decode` over the fuzzing workload (warm: after one untimed pass) and the
/// long trace (cold with a fresh decoder from `make`, then warm).
fn measure<D>(
    name: &str,
    w: &Workload,
    mut make: impl FnMut() -> D,
    mut decode: impl FnMut(&mut D, &[u8]),
) {
    let fuzz_bytes: usize = w.fuzz.iter().map(Vec::len).sum();
    let mut d = make();
    if w.fuzz.is_empty() {
        return measure_long(name, w, make, decode);
    }
    for t in &w.fuzz {
        decode(&mut d, t);
    }
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let t0 = cpu_secs();
        for t in &w.fuzz {
            decode(&mut d, t);
        }
        best = best.min(cpu_secs() - t0);
    }
    println!(
        "{name} fuzz warm: {} traces, {:.1} MB, {best:.3} s: {:.1} MB/s, {:.0} traces/s",
        w.fuzz.len(),
        fuzz_bytes as f64 / 1e6,
        mb(fuzz_bytes, best),
        w.fuzz.len() as f64 / best
    );
    drop(d);
    measure_long(name, w, make, decode);
}

/// Times `decode` over the long trace: cold with a fresh decoder from `make`, then
/// warm.
fn measure_long<D>(
    name: &str,
    w: &Workload,
    mut make: impl FnMut() -> D,
    mut decode: impl FnMut(&mut D, &[u8]),
) {
    let mut d = make();
    let t0 = cpu_secs();
    decode(&mut d, &w.long);
    let cold = cpu_secs() - t0;
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let t0 = cpu_secs();
        decode(&mut d, &w.long);
        best = best.min(cpu_secs() - t0);
    }
    println!(
        "{name} long: {:.1} MB: cold {cold:.3} s {:.1} MB/s, warm {best:.3} s {:.1} MB/s",
        w.long.len() as f64 / 1e6,
        mb(w.long.len(), cold),
        mb(w.long.len(), best)
    );
}

/// iptr-edge-analyzer's view of the code.
struct Sections(Vec<(u64, Vec<u8>)>);

#[derive(Debug)]
struct NoCode;

impl std::fmt::Display for NoCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no code there")
    }
}

impl std::error::Error for NoCode {}

impl iptr_edge_analyzer::ReadMemory for Sections {
    type Error = NoCode;

    fn at_decode_begin(&mut self) -> Result<(), NoCode> {
        Ok(())
    }

    fn read_memory<T>(
        &mut self,
        address: u64,
        size: usize,
        callback: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, NoCode> {
        let i = self.0.partition_point(|(a, _)| *a <= address);
        let (a, bytes) = self.0.get(i.checked_sub(1).ok_or(NoCode)?).ok_or(NoCode)?;
        let at = (address - a) as usize;
        let rest = bytes.get(at..).filter(|r| !r.is_empty()).ok_or(NoCode)?;
        Ok(callback(&rest[..rest.len().min(size)]))
    }
}

fn ours(w: &Workload, hash: EdgeHash) -> impl FnMut() -> CoverageDecoder + '_ {
    move || {
        CoverageDecoder::new(Options {
            map_size: MAP,
            hash,
            config: w.config,
            ..Options::default()
        })
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--compare-libxdc") {
        return compare_libxdc(Path::new(&args[1]));
    }
    if args.first().map(String::as_str) == Some("--retcomp-cost") && args.len() >= 3 {
        let dirs: Vec<&Path> = args[1..].iter().map(Path::new).collect();
        return retcomp_cost(&dirs);
    }
    let ours_only = args.iter().any(|a| a == "--ours-only");
    let exact = !args.iter().any(|a| a == "--no-exact");
    let fail = |e: std::io::Error| -> ! {
        eprintln!("coverage_compare: {e}");
        std::process::exit(1)
    };
    let mut w = match (args.first().map(String::as_str), args.get(1)) {
        (Some("--dir"), Some(dir)) => Workload::load(Path::new(dir)).unwrap_or_else(|e| fail(e)),
        (Some("--generate"), Some(out)) => {
            let has = |flag: &str| args.iter().any(|a| a == flag);
            let mix = CallsMix {
                ret_compression: has("--retcomp-timing") || has("--retcomp-only"),
                timing: has("--retcomp-timing") || has("--timing-only"),
                ..CallsMix::DEFAULT
            };
            let opt = |name: &str, default: usize| {
                args.iter()
                    .position(|a| a == name)
                    .and_then(|i| args.get(i + 1)?.parse().ok())
                    .unwrap_or(default)
            };
            let w =
                Workload::generated(mix, opt("--runs", FUZZ_TRACES), opt("--long-mb", 64) << 20);
            w.export(Path::new(out)).unwrap_or_else(|e| fail(e));
            w
        }
        (Some(data), Some(out)) if !data.starts_with("--") => {
            let repeat = args
                .iter()
                .position(|a| a == "--long-repeat")
                .and_then(|i| args.get(i + 1)?.parse().ok());
            let whole_runs = args.iter().any(|a| a == "--whole-runs");
            let w = load(Path::new(data), repeat, whole_runs);
            w.export(Path::new(out)).unwrap_or_else(|e| fail(e));
            w
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(1);
        }
    };
    if args.iter().any(|a| a == "--long-only") {
        w.fuzz.clear();
    }
    eprintln!(
        "{} fuzz traces ({:.1} MB), long trace {:.1} MB, filter {:x?}",
        w.fuzz.len(),
        w.fuzz_bytes() as f64 / 1e6,
        w.long.len() as f64 / 1e6,
        w.filter
    );
    measure("pt-coverage", &w, ours(&w, EdgeHash::Libxdc), |d, t| {
        d.reset();
        let out = d.decode(t, &w.image);
        std::hint::black_box(out);
    });
    // The same with the exact edges and blocks kept.
    if exact {
        let collect = || {
            CoverageDecoder::new(Options {
                collect: true,
                config: w.config,
                ..Options::default()
            })
        };
        measure("pt-coverage (exact edges)", &w, collect, |d, t| {
            d.reset();
            std::hint::black_box(d.decode(t, &w.image));
        });
    }
    if ours_only {
        return;
    }
    let images: Vec<ptcov::PtImage<'_>> = w
        .image
        .sections()
        .iter()
        .map(|s| ptcov::PtImage::new(s.bytes(), s.vaddr()))
        .collect();
    let mut map = vec![0u8; MAP];
    measure(
        "ptcov",
        &w,
        || {
            ptcov::PtCoverageDecoderBuilder::new()
                .images(&images)
                .build()
        },
        |d, t| {
            map.fill(0);
            let _ = std::hint::black_box(d.coverage(t, &mut map));
        },
    );
    let sections = || {
        Sections(
            w.image
                .sections()
                .iter()
                .map(|s| (s.vaddr(), s.bytes().to_vec()))
                .collect(),
        )
    };
    measure(
        "iptr-edge-analyzer",
        &w,
        || {
            let handler = iptr_edge_analyzer::control_flow_handler::fuzz_bitmap::FuzzBitmapControlFlowHandler::new(
                vec![0u8; MAP],
                Some(&w.filter),
            );
            iptr_edge_analyzer::EdgeAnalyzer::new(handler, sections())
        },
        |d, t| {
            let _ = std::hint::black_box(iptr_decoder::decode(
                t,
                iptr_decoder::DecodeOptions::default(),
                d,
            ));
        },
    );
    let _ = std::io::stdout().flush();
}

/// libxdc's bitmap of the long trace against ours with libxdc's formula.
fn compare_libxdc(dir: &Path) {
    let theirs = std::fs::read(dir.join("long.libxdc.map")).expect("run the harness first");
    let long = std::fs::read(dir.join("long.bin")).expect("long.bin");
    let image = Workload::load_image(dir).expect("image.txt, image.bin");
    let mut d = CoverageDecoder::new(Options {
        map_size: MAP,
        hash: EdgeHash::Libxdc,
        ..Options::default()
    });
    let out = d.decode(&long, &image);
    let ours = d.map();
    let same = ours.iter().zip(&theirs).filter(|(a, b)| a == b).count();
    let both = ours
        .iter()
        .zip(&theirs)
        .filter(|(a, b)| **a != 0 && **b != 0)
        .count();
    let only_ours = ours
        .iter()
        .zip(&theirs)
        .filter(|(a, b)| **a != 0 && **b == 0)
        .count();
    let only_theirs = ours
        .iter()
        .zip(&theirs)
        .filter(|(a, b)| **a == 0 && **b != 0)
        .count();
    println!(
        "bitmap vs libxdc (libxdc's formula): {same}/{MAP} bytes equal; edges hit by both {both}, only ours {only_ours}, only libxdc {only_theirs}; our errors {}",
        out.errors
    );
}

/// pt-coverage on the same runs without and with return compression and timing
/// packets: the first folder holds the plain runs (noretcomp, no timing), the others the
/// same runs encoded otherwise (`--retcomp-timing`, `--retcomp-only`, `--timing-only`).
/// A warm pass over each workload's fuzzing traces and long trace, then [`ROUNDS`] × 2
/// timed passes, one workload after the other; the best of each and the spread
/// (worst / best) of its timed passes.
fn retcomp_cost(dirs: &[&Path]) {
    let load = |dir: &Path| {
        Workload::load(dir).unwrap_or_else(|e| {
            eprintln!("coverage_compare: {}: {e}", dir.display());
            std::process::exit(1)
        })
    };
    let ws: Vec<Workload> = dirs.iter().map(|d| load(d)).collect();
    if ws.iter().any(|w| w.fuzz.len() != ws[0].fuzz.len()) {
        eprintln!("coverage_compare: the workloads do not hold the same runs");
        std::process::exit(1);
    }
    let mut ds: Vec<CoverageDecoder> = ws.iter().map(|w| ours(w, EdgeHash::Afl)()).collect();
    let pass = |d: &mut CoverageDecoder, w: &Workload, traces: &[Vec<u8>]| {
        let t0 = cpu_secs();
        for t in traces {
            d.reset();
            let out = d.decode(t, &w.image);
            std::hint::black_box(out);
        }
        cpu_secs() - t0
    };
    // [workload][fuzz, long]
    let mut best = vec![[f64::MAX; 2]; ws.len()];
    let mut worst = vec![[0f64; 2]; ws.len()];
    for round in 0..=ROUNDS * 2 {
        for (k, (w, d)) in ws.iter().zip(&mut ds).enumerate() {
            let fuzz = pass(d, w, &w.fuzz);
            let long = pass(d, w, std::slice::from_ref(&w.long));
            // Round 0 warms the decoders up.
            if round > 0 {
                for (i, t) in [fuzz, long].into_iter().enumerate() {
                    best[k][i] = best[k][i].min(t);
                    worst[k][i] = worst[k][i].max(t);
                }
            }
        }
    }
    for (k, dir) in dirs.iter().enumerate() {
        let w = &ws[k];
        println!(
            "pt-coverage {}: fuzz {:.1} MB {:.3} s (spread {:.2}) {:.1} MB/s {:.0} traces/s; long {:.1} MB {:.3} s (spread {:.2}) {:.1} MB/s",
            dir.display(),
            w.fuzz_bytes() as f64 / 1e6,
            best[k][0],
            worst[k][0] / best[k][0],
            mb(w.fuzz_bytes(), best[k][0]),
            w.fuzz.len() as f64 / best[k][0],
            w.long.len() as f64 / 1e6,
            best[k][1],
            worst[k][1] / best[k][1],
            mb(w.long.len(), best[k][1]),
        );
    }
    for k in 1..ws.len() {
        println!(
            "{} vs {}: fuzz {:.2}x the time ({:.2}x the MB/s), long {:.2}x the time ({:.2}x the MB/s)",
            dirs[k].display(),
            dirs[0].display(),
            best[k][0] / best[0][0],
            mb(ws[k].fuzz_bytes(), best[k][0]) / mb(ws[0].fuzz_bytes(), best[0][0]),
            best[k][1] / best[0][1],
            mb(ws[k].long.len(), best[k][1]) / mb(ws[0].long.len(), best[0][1]),
        );
    }
}
