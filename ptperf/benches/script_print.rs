//! `ptperf script`'s printer alone: lines per second for the samples of a
//! simulated recording (tests/programs/export_bench.c, the export bench's
//! recording), synthesized once and kept, then printed again and again into
//! the printer's buffer (cleared every 64 KiB, as the command writes it out).
//!
//! Cases: `--itrace=b` with the default fields (two `sym+off (dso)` parts a
//! line), `--itrace=i1i -F ip`, and `--itrace=i1i` with the default fields.
//!
//! `cargo bench -p ptperf --bench script_print`

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use pt_testkit::recording as perf_support;

use clap::Parser;
use pt_perf::sample::Sample;
use pt_perf::session::{Session, SessionOptions};
use pt_perf::synth::{Event, Flow, Synth};
use pt_perf_data::MappedFile;
use ptperf::script::{Args, Plan, Printer};

/// The recording (made once; shared with the export bench).
fn recording() -> PathBuf {
    let dir = perf_support::tmp().join("export_bench_rec");
    let file = dir.join("perf.data");
    if !file.exists() {
        let prog = perf_support::program("export_bench", perf_support::NOLIBC);
        let dir = perf_support::scratch("export_bench_rec");
        perf_support::record(&dir, &prog, &[], perf_support::Layout::default());
    }
    file
}

/// The samples kept per case: the first ones the recording gives (few enough
/// to stay in the caches, so that the printer, not memory, is measured).
const KEEP: usize = 1 << 14;

fn bench(c: &mut Criterion) {
    let file = recording();
    let mapped = MappedFile::open(&file).unwrap();
    let perf = mapped.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(&file)).unwrap();
    let mut g = c.benchmark_group("script_print");
    for (name, argv) in [
        ("branches", &["--itrace=b"][..]),
        ("insn_ip", &["--itrace=i1i", "-F", "ip"]),
        ("insn", &["--itrace=i1i"]),
    ] {
        let args = Args::try_parse_from(
            std::iter::once("ptperf script")
                .chain(["-i", file.to_str().unwrap()])
                .chain(argv.iter().copied()),
        )
        .unwrap();
        let plan = Plan::new(&args).unwrap();
        let mut synth = Synth::new(&session, plan.opts);
        let mut samples: Vec<Sample> = Vec::new();
        let _ = synth.run(&mut |e: Event<'_>| -> Flow {
            if let Event::Sample(s, _) = e {
                samples.push(*s);
            }
            if samples.len() >= KEEP {
                Flow::Break(())
            } else {
                Flow::Continue(())
            }
        });
        assert!(samples.len() == KEEP, "{name}: {} samples", samples.len());
        let mut printer = Printer::new(&session, &perf, &plan, synth.opts()).unwrap();
        g.throughput(Throughput::Elements(samples.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut bytes = 0;
                for s in &samples {
                    printer.sample(s);
                    if printer.buf.len() >= 1 << 16 {
                        bytes += printer.buf.len();
                        printer.buf.clear();
                    }
                }
                bytes += printer.buf.len();
                printer.buf.clear();
                bytes
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
