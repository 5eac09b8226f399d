//! Coverage decoding (pt-coverage's edge bitmap) in bytes per second on the generated
//! programs of [`pt_benches::flow`] (return compression, every IP compression, timing
//! packets, PSB+ every 4 KiB): a TNT-only loop, a call/indirect-jump heavy trace and a
//! sparser one. Cold: a fresh decoder per trace (its analysis of the code included);
//! warm: the same decoder again, its analysis kept, the bitmap reset. The
//! side-by-side runs with libxdc, ptcov and iptr-edge-analyzer are
//! `benches/libxdc/compare.sh` (see `examples/coverage_compare.rs`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_benches::flow::{self, CallsMix};
use pt_coverage::{CoverageDecoder, Options};
use std::hint::black_box;

/// Instructions per trace.
const INSNS: u64 = 20_000_000;

fn coverage(c: &mut Criterion) {
    let mut g = c.benchmark_group("coverage");
    g.sample_size(10);
    for (name, t) in [
        ("tnt_loop", flow::tnt_loop(INSNS)),
        ("calls", flow::calls(INSNS)),
        ("calls_mixed", flow::calls_mixed(INSNS, CallsMix::DEFAULT)),
    ] {
        let image = t.image();
        // The trace decodes whole: the figures are for real work.
        let mut warm = CoverageDecoder::new(Options::default());
        let out = warm.decode(&t.trace, &image);
        assert_eq!(out.errors, 0, "{name}: {:?}", out.first_error);
        assert!(out.edges > INSNS / 50, "{name}: {} edges", out.edges);
        g.throughput(Throughput::Bytes(t.trace.len() as u64));
        g.bench_function(format!("{name}/warm"), |b| {
            b.iter(|| {
                warm.reset();
                black_box(warm.decode(&t.trace, &image))
            })
        });
        g.bench_function(format!("{name}/cold"), |b| {
            b.iter(|| {
                let mut cold = CoverageDecoder::new(Options::default());
                black_box(cold.decode(&t.trace, &image))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, coverage);
criterion_main!(benches);
