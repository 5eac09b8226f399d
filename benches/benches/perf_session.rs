//! Decoding a perf.data (ptxed `--perf FILE --quiet`): the session's queue decoder on a
//! recording of a real program, beside the plain flow decoder on the same trace bytes
//! and image, so that the cost of reading perf.data shows.
//!
//! The program (CPython serializing a list to JSON, about 120M instructions) runs on
//! the simulated PT CPU (valgrind execution source) with TSC, MTC and cycle-accurate
//! timing and a PSB every 4 KiB, recorded as perf.data (`target/perf-recorded/NAME.data`,
//! reused; delete it to record anew). Where valgrind or the program is missing, the
//! benchmark says so and skips it. To time the tool on the same input:
//! `ptxed --perf target/perf-recorded/NAME.data --quiet`.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_benches::flow::quiet_blocks;
use pt_decoder::config::Config;
use pt_decoder::image::Image;
use pt_decoder::{Granularity, Item};
use pt_hal::config::TraceConfig;
use pt_perf::session::{PerfItem, Session, SessionOptions};
use pt_perf_data::MappedFile;
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::record::{record_perf_data, PerfDataOptions, SimRecording};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/perf-recorded")
}

/// Records `cmd` into `NAME.data` unless it is there.
fn record(name: &str, cmd: &[String]) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let data = dir.join(format!("{name}.data"));
    if data.exists() {
        return Ok(data);
    }
    // The recording needs valgrind: a missing one fails the bench, never skips it.
    pt_testkit::tool("valgrind", "valgrind");
    let mut source = ValgrindSource::record(&cmd[0], &cmd[1..], ValgrindOptions::default())?;
    let rec = SimRecording::new(TraceConfig {
        tsc: true,
        mtc: Some(3),
        cyc: Some(0),
        // 2^(1+11) bytes: a PSB every 4 KiB.
        psb_freq: 1,
        ..TraceConfig::perf_default()
    });
    eprintln!("recording {name} on the simulator: {}", cmd.join(" "));
    let summary = record_perf_data(&mut source, &rec, &PerfDataOptions::new(&data), |_| {})?;
    eprintln!(
        "recorded {name}: {} instructions, {} trace bytes",
        summary.instructions, summary.trace_bytes
    );
    Ok(data)
}

/// ptxed `--perf --quiet`: every queue's blocks, counted only (the decoder's fast
/// path); the instructions decoded.
fn session_quiet(session: &Session<'_>) -> u64 {
    let mut n = 0;
    for q in 0..session.queues().len() {
        let mut dec = session
            .decoder(q)
            .configure(|b| b.granularity(Granularity::Blocks).count_only(true));
        while dec.next().is_some() {}
        n += dec.counts().insns;
    }
    n
}

/// ptxed `--perf` with its listing's input: every block as an item, with the
/// session's context and time kept; the instructions decoded.
fn session_blocks(session: &Session<'_>) -> u64 {
    let mut n = 0;
    for q in 0..session.queues().len() {
        let mut dec = session
            .decoder(q)
            .configure(|b| b.granularity(Granularity::Blocks));
        while let Some(item) = dec.next() {
            if let PerfItem::Decoded(Item::Block(b)) = item {
                n += b.block.ninsn as u64;
            }
        }
    }
    n
}

/// The raw trace's blocks as items (what `session_blocks` adds to).
fn raw_blocks(trace: &[u8], image: &Image, config: &Config) -> u64 {
    let dec = pt_decoder::Decoder::builder(trace, image)
        .config(config)
        .granularity(Granularity::Blocks)
        .build();
    let mut n = 0;
    for item in dec {
        if let Item::Block(b) = item {
            n += b.block.ninsn as u64;
        }
    }
    n
}

fn perf_session(c: &mut Criterion) {
    let cmd: Vec<String> = vec![
        "/usr/bin/python3".into(),
        "-S".into(),
        "-c".into(),
        "import json; json.dumps([{'a': i, 'b': str(i)} for i in range(12000)])".into(),
    ];
    let name = "python_json";
    let data = record(name, &cmd).unwrap_or_else(|e| panic!("perf_session: {name}: {e}"));
    // The raw side: the AUX bytes and the image of the one thread, as a raw trace.
    let rec = ptperf::verify::Recording::read(&data).expect("recording");
    let config = rec.decoder;
    let piece = rec.pieces.into_iter().next().expect("a trace");
    let image = piece.image();
    let raw = piece.data;

    let file = MappedFile::open(&data).expect("perf.data");
    let perf = file.parse().expect("parse");
    let len = std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0);

    let mut g = c.benchmark_group("perf_session");
    g.sample_size(10);
    let session = Session::new(&perf, SessionOptions::for_file(&data)).expect("session");
    let n = session_quiet(&session);
    // Both paths must see the same flow, or the figure means nothing.
    assert_eq!(
        quiet_blocks(&raw, &image, &config),
        n,
        "{name}: flows differ"
    );
    eprintln!(
        "{name}: {n} instructions, {} trace bytes, perf.data {len} bytes",
        raw.len()
    );
    g.throughput(Throughput::Elements(n));
    g.bench_function(format!("{name}/raw_quiet"), |b| {
        b.iter(|| quiet_blocks(black_box(&raw), &image, &config))
    });
    g.bench_function(format!("{name}/session_quiet"), |b| {
        b.iter(|| session_quiet(black_box(&session)))
    });
    assert_eq!(session_blocks(&session), n, "{name}: block items differ");
    g.bench_function(format!("{name}/raw_blocks"), |b| {
        b.iter(|| raw_blocks(black_box(&raw), &image, &config))
    });
    g.bench_function(format!("{name}/session_blocks"), |b| {
        b.iter(|| session_blocks(black_box(&session)))
    });
    // Opening the session too: parsing the file, loading the images, joining pieces.
    g.bench_function(format!("{name}/open_and_quiet"), |b| {
        b.iter(|| {
            let perf = file.parse().expect("parse");
            let s = Session::new(&perf, SessionOptions::for_file(&data)).expect("session");
            session_quiet(&s)
        })
    });
    g.finish();
}

criterion_group!(benches, perf_session);
criterion_main!(benches);
