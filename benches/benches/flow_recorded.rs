//! Flow decoding (ptxed `--quiet`) of real programs, in instructions per second.
//!
//! The programs run on the simulated PT CPU (valgrind execution source) with cycle-accurate
//! timing, MTC, TSC and a PSB every 4 KiB: `sort` of 20,000 random words (library calls
//! through the PLT, qsort-style comparisons through a function pointer) and CPython
//! serializing a list to JSON (an interpreter: indirect jumps and calls everywhere). The
//! recordings are kept in `target/flow-recorded/` and reused; delete them to record anew.
//!
//! Where valgrind or a program is missing, the benchmark says so and skips that program.
//! The recordings are perf.data files (`NAME.data`); the first thread's AUX data is the
//! trace decoded.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_benches::flow::{quiet_blocks, quiet_insns};
use pt_decoder::config::Config;
use pt_decoder::image::Image;
use pt_hal::config::TraceConfig;
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::record::{record_perf_data, PerfDataOptions, SimRecording};

/// A recorded program, ready to decode.
struct Recorded {
    trace: Vec<u8>,
    image: Image,
    config: Config,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/flow-recorded")
}

/// 20,000 random lowercase words, one per line (the same every time).
fn words(path: &Path) -> std::io::Result<()> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut text = String::new();
    for _ in 0..20_000 {
        let len = 3 + next() % 10;
        for _ in 0..len {
            text.push(char::from(b'a' + (next() % 26) as u8));
        }
        text.push('\n');
    }
    std::fs::write(path, text)
}

/// Records `cmd` (or reuses the recording) and loads its image; `Err` says why not.
fn recorded(name: &str, cmd: &[String]) -> Result<Recorded, Box<dyn std::error::Error>> {
    let dir = dir();
    let data = dir.join(format!("{name}.data"));
    if !data.exists() {
        let have_valgrind = Command::new("valgrind")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !have_valgrind {
            return Err("valgrind is not installed".into());
        }
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
    }
    let rec = ptperf::verify::Recording::read(&data)?;
    let first = rec
        .pieces
        .into_iter()
        .next()
        .ok_or_else(|| format!("{}: no trace", data.display()))?;
    Ok(Recorded {
        image: first.image(),
        trace: first.data,
        config: rec.decoder,
    })
}

fn flow_recorded(c: &mut Criterion) {
    let dir = dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("flow_recorded: skipped: {}: {e}", dir.display());
        return;
    }
    let input = dir.join("words.txt");
    if let Err(e) = words(&input) {
        eprintln!("flow_recorded: skipped: {}: {e}", input.display());
        return;
    }
    let programs: [(&str, Vec<String>); 2] = [
        (
            "sort",
            vec![
                "sort".into(),
                "-o".into(),
                dir.join("sorted.txt").display().to_string(),
                input.display().to_string(),
            ],
        ),
        (
            "python_json",
            vec![
                "/usr/bin/python3".into(),
                "-S".into(),
                "-c".into(),
                "import json; json.dumps([{'a': i, 'b': str(i)} for i in range(3000)])".into(),
            ],
        ),
    ];
    let mut g = c.benchmark_group("flow_recorded");
    g.sample_size(10);
    for (name, cmd) in programs {
        let r = match recorded(name, &cmd) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("flow_recorded: {name} skipped: {e}");
                continue;
            }
        };
        let n = quiet_blocks(&r.trace, &r.image, &r.config);
        // Both decoders must see the same flow, or the figure means nothing.
        assert_eq!(
            quiet_insns(&r.trace, &r.image, &r.config),
            n,
            "{name}: the decoders disagree"
        );
        eprintln!("{name}: {n} instructions, {} trace bytes", r.trace.len());
        g.throughput(Throughput::Elements(n));
        g.bench_function(format!("{name}/block_quiet"), |b| {
            b.iter(|| quiet_blocks(black_box(&r.trace), &r.image, &r.config))
        });
        g.bench_function(format!("{name}/insn_quiet"), |b| {
            b.iter(|| quiet_insns(black_box(&r.trace), &r.image, &r.config))
        });
    }
    g.finish();
}

criterion_group!(benches, flow_recorded);
criterion_main!(benches);
