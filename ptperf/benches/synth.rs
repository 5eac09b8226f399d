//! Sample synthesis (perf's intel-pt.c over perf's decoder) on a simulated
//! recording of about 11M instructions (tests/programs/export_bench.c, recorded
//! as the perf session tests record): every instruction (`--itrace=i1i`) and
//! every branch (`--itrace=b`), each with the fast path ([`Synth::set_fast_path`])
//! and without (perf's state-by-state decode), into a sink that only counts, so
//! that the decoder and the synthesizer show without any output.
//!
//! `cargo bench -p ptperf --bench synth`. For the whole command beside perf's on
//! a large recording: `cargo run --release -p ptperf --example vs_perf -- FILE`.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use pt_testkit::recording as perf_support;

use pt_perf::decode::PlainInsn;
use pt_perf::itrace::SynthOpts;
use pt_perf::sample::Sample;
use pt_perf::session::{Session, SessionOptions};
use pt_perf::synth::{Event, SampleSink, Stacks, Synth};
use pt_perf_data::MappedFile;

/// The recording (made once; kept between runs).
fn recording() -> PathBuf {
    let dir = perf_support::tmp().join("synth_bench_rec");
    let file = dir.join("perf.data");
    if !file.exists() {
        let prog = perf_support::program("export_bench", perf_support::NOLIBC);
        let dir = perf_support::scratch("synth_bench_rec");
        perf_support::record(&dir, &prog, &[], perf_support::Layout::default());
    }
    file
}

/// Counts samples, taking runs of instruction samples at once.
#[derive(Default)]
struct Count(u64);

impl SampleSink for Count {
    fn event(&mut self, e: Event<'_>) -> ControlFlow<()> {
        if let Event::Sample(s, _) = e {
            self.0 += s.period.min(1);
        }
        ControlFlow::Continue(())
    }

    fn insns(&mut self, _first: &Sample, _stacks: &Stacks, more: &[PlainInsn]) -> ControlFlow<()> {
        self.0 += 1 + more.len() as u64;
        ControlFlow::Continue(())
    }
}

/// One synthesis of `file`: (samples, instructions walked).
fn synth(file: &Path, itrace: &str, fast: bool) -> (u64, u64) {
    let mapped = MappedFile::open(file).unwrap();
    let perf = mapped.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(file)).unwrap();
    let mut synth = Synth::new(&session, SynthOpts::parse(itrace).unwrap());
    synth.set_fast_path(fast);
    let mut count = Count::default();
    let _ = synth.run_into(&mut count);
    (count.0, synth.walked())
}

fn bench(c: &mut Criterion) {
    let file = recording();
    let (_, insns) = synth(&file, "i1i", true);
    let mut g = c.benchmark_group("synth");
    g.throughput(Throughput::Elements(insns));
    g.sample_size(10);
    for itrace in ["i1i", "b"] {
        for (fast, name) in [(true, "fast"), (false, "state by state")] {
            g.bench_function(format!("--itrace={itrace} {name}"), |b| {
                b.iter(|| synth(&file, itrace, fast))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
