//! Export throughput (samples per second) of `ptperf export` with `calls`, into
//! SQLite and into PostgreSQL, on a simulated recording of about 11M
//! instructions (tests/programs/export_bench.c recorded as perf.data the way
//! the perf session tests record). Each iteration decodes the perf.data,
//! synthesizes the branch samples, runs the call/return rules and writes the
//! database: the whole command but the process start.
//!
//! `cargo bench -p ptperf --bench export`; the PostgreSQL case needs Debian's
//! postgresql 15 (a throwaway server is started for it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use pt_testkit::pg_server;
use pt_testkit::recording as perf_support;

use pt_perf::session::{Session, SessionOptions};
use pt_perf_data::MappedFile;
use ptperf::export::feed::export_session;
use ptperf::export::postgres::PostgresSink;
use ptperf::export::sqlite::SqliteSink;
use ptperf::export::{ExportOptions, Exporter, Sink};

/// The recording (made once; kept between runs).
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

/// One export of `file` into `sink`; the samples exported.
fn export<S: Sink>(file: &Path, sink: S) -> u64 {
    let mapped = MappedFile::open(file).unwrap();
    let perf = mapped.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(file)).unwrap();
    let opts = ExportOptions {
        calls: true,
        ..Default::default()
    };
    let mut ex = Exporter::new(sink, opts).unwrap();
    let stats = export_session(&perf, &session, &mut ex).unwrap();
    ex.finish().unwrap();
    stats.samples
}

fn layout() -> ptperf::export::Layout {
    ExportOptions {
        calls: true,
        ..Default::default()
    }
    .layout()
}

fn bench(c: &mut Criterion) {
    let file = recording();
    let out = perf_support::tmp().join("export_bench_rec/bench.db");
    let samples = export(&file, SqliteSink::create(&out, true, &layout()).unwrap());
    eprintln!("export bench: {samples} samples per export");
    let mut g = c.benchmark_group("export");
    g.throughput(Throughput::Elements(samples));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(30));
    g.bench_function("sqlite", |b| {
        b.iter(|| export(&file, SqliteSink::create(&out, true, &layout()).unwrap()))
    });
    if pt_testkit::find_postgres_bin().is_some() {
        let server = pg_server::PgServer::start();
        let mut n = 0;
        g.bench_function("postgres", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let db = format!("bench{n}");
                    let t = Instant::now();
                    export(
                        &file,
                        PostgresSink::create(&server.conninfo(&db), &layout()).unwrap(),
                    );
                    total += t.elapsed();
                    let mut c = server.client("postgres");
                    c.batch_execute(&format!("DROP DATABASE {db}")).unwrap();
                }
                total
            })
        });
    } else {
        eprintln!("export bench: no PostgreSQL 15 here (Debian package postgresql): sqlite only");
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
