//! Packet-layer throughput on 64 MiB generated traces.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_decoder::{Config, PacketDecoder};
use std::hint::black_box;

const SIZE: usize = 64 << 20;

fn iterate(buf: &[u8]) -> u64 {
    let mut d = PacketDecoder::new(buf, &Config::default());
    d.sync_forward().expect("trace starts with a PSB");
    let mut acc = 0u64;
    for r in d {
        let (off, p) = r.expect("valid trace");
        acc = acc.wrapping_add(off ^ p.size() as u64);
    }
    acc
}

fn packet_iterator(c: &mut Criterion) {
    let mut g = c.benchmark_group("packet_iterator");
    g.sample_size(10);
    for (name, trace) in [
        ("tnt_heavy", pt_benches::tnt_heavy(SIZE)),
        ("mixed", pt_benches::mixed(SIZE)),
    ] {
        g.throughput(Throughput::Bytes(trace.len() as u64));
        g.bench_function(name, |b| b.iter(|| black_box(iterate(black_box(&trace)))));
    }
    g.finish();
}

criterion_group!(benches, packet_iterator);
criterion_main!(benches);
