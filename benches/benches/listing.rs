//! The full instruction listing (ptxed without `--quiet`: every instruction's address
//! and text as libipt's ptxed prints them through XED), in instructions per second, on
//! one thread, on a real program: gzip compressing 200 KB into a file (the start of the C library)
//! on the simulated PT CPU (valgrind execution source), about 50M instructions. The
//! recording is kept in `target/listing-recorded/` and reused; delete it to record anew.
//!
//! Each iteration decodes the whole trace with a fresh listing (its line cache filled
//! on the way) into a buffer emptied every megabyte: what `ptxed > /dev/null` does,
//! without the write system calls. The recording is a perf.data (`gzip.data`); our
//! ptxed lists it with `ptxed --perf target/listing-recorded/gzip.data > /dev/null`.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_benches::flow::{listing_blocks, quiet_blocks};
use pt_decoder::config::Config;
use pt_decoder::image::Image;
use pt_decoder::listing::{Listing, ListingOptions, Syntax};
use pt_hal::config::TraceConfig;
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::record::{record_perf_data, PerfDataOptions, SimRecording};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/listing-recorded")
}

/// gzip of 200 KB, recorded once (`ptperf record`'s default configuration).
fn recorded() -> Result<(Vec<u8>, Image, Config), Box<dyn std::error::Error>> {
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let data = dir.join("gzip.data");
    if !data.exists() {
        // The recording needs valgrind: a missing one fails the bench, never skips it.
        pt_testkit::tool("valgrind", "valgrind");
        let libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .ok_or("no C library to compress")?;
        let bytes = std::fs::read(libc).map_err(|e| format!("{libc}: {e}"))?;
        let input = dir.join("input.bin");
        std::fs::write(&input, &bytes[..bytes.len().min(200_000)])
            .map_err(|e| format!("{}: {e}", input.display()))?;
        // Into input.bin.gz, keeping the input.
        let args = [
            "-k".to_string(),
            "-f".to_string(),
            input.display().to_string(),
        ];
        let mut source = ValgrindSource::record("gzip", &args, ValgrindOptions::default())?;
        let rec = SimRecording::new(TraceConfig::perf_default());
        eprintln!("recording gzip on the simulator");
        let summary = record_perf_data(&mut source, &rec, &PerfDataOptions::new(&data), |_| {})?;
        eprintln!(
            "recorded gzip: {} instructions, {} trace bytes",
            summary.instructions, summary.trace_bytes
        );
    }
    let rec = ptperf::verify::Recording::read(&data)?;
    let config = rec.decoder;
    let first = rec
        .pieces
        .into_iter()
        .next()
        .ok_or_else(|| format!("{}: no trace", data.display()))?;
    Ok((first.data.clone(), first.image(), config))
}

fn listing(c: &mut Criterion) {
    let (trace, image, config) =
        recorded().unwrap_or_else(|e| panic!("listing: no recording to bench: {e}"));
    let n = quiet_blocks(&trace, &image, &config);
    let mut out = Vec::with_capacity(2 << 20);
    let mut check = Listing::new(ListingOptions::default());
    // The listing must cover the whole flow, or the figure means nothing.
    assert_eq!(
        listing_blocks(&trace, &image, &config, &mut check, &mut out),
        n
    );
    eprintln!("gzip: {n} instructions, {} trace bytes", trace.len());
    let mut g = c.benchmark_group("listing");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    for (name, options) in [
        ("intel", ListingOptions::default()),
        (
            "att",
            ListingOptions {
                syntax: Syntax::Att,
                ..ListingOptions::default()
            },
        ),
        (
            "raw_insn",
            ListingOptions {
                raw_insn: true,
                ..ListingOptions::default()
            },
        ),
    ] {
        g.bench_function(format!("gzip/{name}"), |b| {
            b.iter(|| {
                let mut listing = Listing::new(options);
                listing_blocks(black_box(&trace), &image, &config, &mut listing, &mut out)
            })
        });
    }
    g.bench_function("gzip/quiet", |b| {
        b.iter(|| quiet_blocks(black_box(&trace), &image, &config))
    });
    g.finish();
}

criterion_group!(benches, listing);
criterion_main!(benches);
