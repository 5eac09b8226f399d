//! Packet-layer throughput on 64 MiB generated traces.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_decoder::{Config, PacketDecoder};
use std::hint::black_box;
use std::ops::ControlFlow;

const SIZE: usize = 64 << 20;

/// External iteration: `for packet in decoder`.
fn iterate(buf: &[u8]) -> u64 {
    let mut d = PacketDecoder::new(buf, &Config::default());
    d.sync_forward().expect("trace starts with a PSB");
    let mut acc = 0u64;
    for r in d {
        let (off, p) = r.expect("valid trace");
        black_box(&p);
        acc = acc.wrapping_add(off);
    }
    acc
}

/// Internal iteration: `decode_with`, the form hot consumers use.
fn decode_with(buf: &[u8]) -> u64 {
    let mut d = PacketDecoder::new(buf, &Config::default());
    d.sync_forward().expect("trace starts with a PSB");
    let mut acc = 0u64;
    let done = d
        .decode_with(|off, p| {
            black_box(&p);
            acc = acc.wrapping_add(off);
            ControlFlow::Continue(())
        })
        .expect("valid trace");
    assert!(done);
    acc
}

/// Internal iteration over flat records: `decode_records_with`.
fn records(buf: &[u8]) -> u64 {
    let mut d = PacketDecoder::new(buf, &Config::default());
    d.sync_forward().expect("trace starts with a PSB");
    let mut acc = 0u64;
    let done = d
        .decode_records_with(|off, r| {
            black_box(&r);
            acc = acc.wrapping_add(off);
            ControlFlow::Continue(())
        })
        .expect("valid trace");
    assert!(done);
    acc
}

/// External iteration over flat records: `for r in decoder.records()`.
fn records_next(buf: &[u8]) -> u64 {
    let mut d = PacketDecoder::new(buf, &Config::default());
    d.sync_forward().expect("trace starts with a PSB");
    let mut acc = 0u64;
    for r in d.records() {
        let (off, r) = r.expect("valid trace");
        black_box(&r);
        acc = acc.wrapping_add(off);
    }
    acc
}

/// Records on both cores: the trace split at PSBs.
fn records_parallel2(buf: &[u8]) -> u64 {
    let pieces = pt_decoder::parallel::par_fold_records(
        buf,
        &Config::default(),
        2,
        || 0u64,
        |acc, off, r| {
            black_box(&r);
            *acc = acc.wrapping_add(off);
        },
    );
    pieces.iter().map(|p| p.value).fold(0, u64::wrapping_add)
}

/// Both cores: the trace split at PSBs.
fn parallel(buf: &[u8]) -> u64 {
    let pieces = pt_decoder::parallel::par_fold(
        buf,
        &Config::default(),
        2,
        || 0u64,
        |acc, off, p| {
            black_box(&p);
            *acc = acc.wrapping_add(off);
        },
    );
    pieces.iter().map(|p| p.value).fold(0, u64::wrapping_add)
}

fn packet_iterator(c: &mut Criterion) {
    let mut g = c.benchmark_group("packet_iterator");
    g.sample_size(10);
    for (name, trace) in [
        ("tnt_heavy", pt_benches::tnt_heavy(SIZE)),
        ("mixed", pt_benches::mixed(SIZE)),
        ("random_mix", pt_benches::random_mix(SIZE)),
    ] {
        g.throughput(Throughput::Bytes(trace.len() as u64));
        g.bench_function(format!("{name}/next"), |b| {
            b.iter(|| black_box(iterate(black_box(&trace))))
        });
        g.bench_function(format!("{name}/decode_with"), |b| {
            b.iter(|| black_box(decode_with(black_box(&trace))))
        });
        g.bench_function(format!("{name}/parallel2"), |b| {
            b.iter(|| black_box(parallel(black_box(&trace))))
        });
        g.bench_function(format!("{name}/records"), |b| {
            b.iter(|| black_box(records(black_box(&trace))))
        });
        g.bench_function(format!("{name}/records_next"), |b| {
            b.iter(|| black_box(records_next(black_box(&trace))))
        });
        g.bench_function(format!("{name}/records_parallel2"), |b| {
            b.iter(|| black_box(records_parallel2(black_box(&trace))))
        });
    }
    g.finish();
}

criterion_group!(benches, packet_iterator);
criterion_main!(benches);
