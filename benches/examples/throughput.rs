//! One-shot throughput check of the packet iterator (criterion gives the real figures).
//!
//! `throughput [MiB]`; the environment picks the loop: default `next_packet`, `VIA_ITER`
//! (the `Iterator`), `VIA_WITH` (`decode_with`), `RECORDS` (`decode_records_with`),
//! `RECORDS_NEXT` (`records()`), `PARALLEL` (`par_fold`, 2 threads), `RECORDS_THREADS=N`
//! (`par_fold_records`); `ONLY=tnt_heavy|mixed|random_mix` picks one trace.

use pt_decoder::{Config, PacketDecoder};
use std::time::Instant;

fn main() {
    let size = std::env::args()
        .nth(1)
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(64)
        << 20;
    for (name, trace) in [
        ("tnt_heavy", pt_benches::tnt_heavy(size)),
        ("mixed", pt_benches::mixed(size)),
        ("random_mix", pt_benches::random_mix(size)),
    ] {
        if std::env::var("ONLY").is_ok_and(|o| o != name) {
            continue;
        }
        let mut best = f64::MAX;
        let mut packets = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let mut d = PacketDecoder::new(&trace, &Config::default());
            d.sync_forward().expect("PSB");
            packets = 0u64;
            if std::env::var_os("PARALLEL").is_some() {
                let pieces = pt_decoder::parallel::par_fold(
                    &trace,
                    &Config::default(),
                    2,
                    || 0u64,
                    |n, off, p| {
                        std::hint::black_box((off, &p));
                        *n += 1;
                    },
                );
                packets = pieces.iter().map(|p| p.value).sum();
            } else if let Some(t) = std::env::var("RECORDS_THREADS")
                .ok()
                .and_then(|t| t.parse().ok())
            {
                let pieces = pt_decoder::parallel::par_fold_records(
                    &trace,
                    &Config::default(),
                    t,
                    || 0u64,
                    |n, off, r| {
                        std::hint::black_box((off, &r));
                        *n += 1;
                    },
                );
                packets = pieces.iter().map(|p| p.value).sum();
            } else if std::env::var_os("RECORDS_NEXT").is_some() {
                for r in d.records() {
                    let (off, r) = r.expect("valid");
                    std::hint::black_box((off, &r));
                    packets += 1;
                }
            } else if std::env::var_os("RECORDS").is_some() {
                d.decode_records_with(|off, r| {
                    std::hint::black_box((off, &r));
                    packets += 1;
                    std::ops::ControlFlow::Continue(())
                })
                .expect("valid");
            } else if std::env::var_os("VIA_WITH").is_some() {
                d.decode_with(|off, p| {
                    std::hint::black_box((off, &p));
                    packets += 1;
                    std::ops::ControlFlow::Continue(())
                })
                .expect("valid");
            } else if std::env::var_os("VIA_ITER").is_some() {
                for r in d {
                    let (_, p) = r.expect("valid");
                    std::hint::black_box(p.size());
                    packets += 1;
                }
            } else {
                while let Ok((_, p)) = d.next_packet() {
                    std::hint::black_box(p.size());
                    packets += 1;
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{name}: {:.0} MB/s, {:.0} M packets/s ({} bytes)",
            trace.len() as f64 / best / 1e6,
            packets as f64 / best / 1e6,
            trace.len()
        );
    }
}
