//! ptdump's decoding and formatting on 64 MiB generated traces: `--quiet` (decode and
//! track only) and the full text (formatted into a sink, as to /dev/null).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_decoder::dump::{dump, DumpOptions};
use pt_decoder::Config;
use std::hint::black_box;

const SIZE: usize = 64 << 20;

fn ptdump(c: &mut Criterion) {
    let mut g = c.benchmark_group("ptdump");
    g.sample_size(10);
    let config = Config::default();
    let quiet = DumpOptions {
        quiet: true,
        ..Default::default()
    };
    let text = DumpOptions::default();
    let timed = DumpOptions {
        track_time: true,
        show_time: true,
        show_last_ip: true,
        ..Default::default()
    };
    for (name, trace) in [
        ("tnt_heavy", pt_benches::tnt_heavy(SIZE)),
        ("mixed", pt_benches::mixed(SIZE)),
    ] {
        g.throughput(Throughput::Bytes(trace.len() as u64));
        for (mode, opts) in [
            ("quiet", &quiet),
            ("text", &text),
            ("text_time_lastip", &timed),
        ] {
            g.bench_function(format!("{name}/{mode}"), |b| {
                b.iter(|| dump(black_box(&trace), &config, opts, std::io::sink()).unwrap())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, ptdump);
criterion_main!(benches);
