//! The damage benchmark: how much of a recorded execution each decoder recovers
//! from damaged copies of its trace (see `ptperf::damage`).
//!
//! ```text
//! cargo run --release -p ptperf --example damage -- RECORDING [--log LOG] [--seeds A..B]
//!     [--kinds flip1,flip10,flip100,zero,cut,truncate] [--libipt PATH] [--verbose]
//! ```
//!
//! RECORDING is a perf.data of `ptperf record` on the simulator, with the execution
//! log it kept (`--exec-log`: `perf.data.log`, or `--log LOG`, e.g. the log a recording was
//! replayed from with `--source log`); the thread with the most trace is damaged.
//! For every kind of damage and every seed it damages the
//! trace, decodes it with this crate's decoder (its default policy, and libipt's
//! policy `Resync::NextPsb`) and, with `--libipt` (or `PT_REFERENCE_PTXED`), with
//! libipt's ptxed, and prints per kind the average and the worst share of the
//! recorded instructions each recovered, how often ours recovered less than another
//! decoder on the same input, and the runaways.

use std::path::PathBuf;
use std::time::Instant;

use pt_decoder::Resync;
use ptperf::damage::{open_perf_data, score_libipt, score_ours, with_suffix, Damage, Score, Truth};

struct Args {
    trace: PathBuf,
    log: Option<PathBuf>,
    seeds: std::ops::Range<u64>,
    kinds: Vec<Damage>,
    libipt: Option<PathBuf>,
    verbose: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: damage RECORDING [--log LOG] [--seeds A..B] [--kinds flip1,flip10,flip100,zero,cut,truncate] \
         [--libipt PTXED] [--verbose]"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut it = std::env::args().skip(1);
    let mut trace = None;
    let mut log = None;
    let mut seeds = 0..10;
    let mut kinds = Damage::ALL.to_vec();
    let mut libipt = std::env::var_os("PT_REFERENCE_PTXED").map(PathBuf::from);
    let mut verbose = false;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seeds" => {
                let v = it.next().unwrap_or_else(|| usage());
                let (a, b) = v.split_once("..").unwrap_or_else(|| usage());
                let (Ok(a), Ok(b)) = (a.parse(), b.parse()) else {
                    usage()
                };
                seeds = a..b;
            }
            "--kinds" => {
                let v = it.next().unwrap_or_else(|| usage());
                kinds = v
                    .split(',')
                    .map(|k| match k {
                        "flip1" => Damage::Flip(1),
                        "flip10" => Damage::Flip(10),
                        "flip100" => Damage::Flip(100),
                        "zero" => Damage::ZeroHole,
                        "cut" => Damage::CutHole,
                        "truncate" => Damage::Truncate,
                        _ => usage(),
                    })
                    .collect();
            }
            "--log" => log = Some(it.next().unwrap_or_else(|| usage()).into()),
            "--libipt" => libipt = Some(it.next().unwrap_or_else(|| usage()).into()),
            "--no-libipt" => libipt = None,
            "--verbose" | "-v" => verbose = true,
            _ if trace.is_none() && !a.starts_with('-') => trace = Some(PathBuf::from(a)),
            _ => usage(),
        }
    }
    Args {
        trace: trace.unwrap_or_else(|| usage()),
        log,
        seeds,
        kinds,
        libipt,
        verbose,
    }
}

/// One decoder's results over the seeds of one kind of damage.
#[derive(Default)]
struct Column {
    sum: f64,
    worst: Option<f64>,
    runaways: u32,
    n: u32,
    secs: f64,
}

impl Column {
    fn add(&mut self, pct: f64, s: &Score, secs: f64) {
        self.sum += pct;
        self.worst = Some(self.worst.map_or(pct, |w: f64| w.min(pct)));
        self.runaways += u32::from(s.runaway);
        self.n += 1;
        self.secs += secs;
    }
}

fn main() {
    let args = parse();
    let t0 = Instant::now();
    let perf_data = std::fs::read(&args.trace)
        .map(|b| b.starts_with(b"PERFILE2"))
        .unwrap_or(false);
    let log = args
        .log
        .clone()
        .unwrap_or_else(|| with_suffix(&args.trace, ".log"));
    let opened = if perf_data {
        open_perf_data(&args.trace, &log).and_then(|(rec, ips)| {
            let mut ips = ips.into_iter();
            let truth = Truth::of(&rec, || ips.next())?;
            Ok((rec, truth))
        })
    } else {
        Err(ptperf::Error::Nothing(
            "not a perf.data (record one with `ptperf record --backend sim`)".to_string(),
        ))
    };
    let (rec, truth) = opened.unwrap_or_else(|e| {
        eprintln!("damage: {}: {e}", args.trace.display());
        std::process::exit(1)
    });
    eprintln!(
        "damage: {} recorded instructions, {} trace bytes (ground truth in {:.1} s)",
        truth.len(),
        rec.trace.len(),
        t0.elapsed().as_secs_f64()
    );
    let tmp = std::env::temp_dir().join(format!("damage-{}.pt", std::process::id()));
    let mut names = vec!["ours", "libipt policy"];
    if args.libipt.is_some() {
        names.push("libipt ptxed");
    }
    println!(
        "{:<14} {:>5}  {}",
        "damage",
        "runs",
        names.iter().map(|n| format!("{n:>28}")).collect::<String>()
    );
    println!(
        "{:<14} {:>5}  {}   ours < other",
        "",
        "",
        names
            .iter()
            .map(|_| format!("{:>28}", "avg % / worst % / runaway"))
            .collect::<String>()
    );
    for &kind in &args.kinds {
        let mut cols: Vec<Column> = names.iter().map(|_| Column::default()).collect();
        let mut less = vec![0u32; names.len()];
        for seed in args.seeds.clone() {
            let damaged = kind.apply(&rec.trace, seed);
            let mut scores = Vec::new();
            for (i, policy) in [Resync::default(), Resync::NextPsb].into_iter().enumerate() {
                let t = Instant::now();
                let s = score_ours(&rec, &truth, &damaged, policy);
                scores.push((i, s, t.elapsed().as_secs_f64()));
            }
            if let Some(ptxed) = &args.libipt {
                let t = Instant::now();
                match score_libipt(ptxed, &rec, &truth, &damaged, &tmp) {
                    Ok(s) => scores.push((2, s, t.elapsed().as_secs_f64())),
                    Err(e) => {
                        eprintln!("damage: {e}");
                        std::process::exit(1)
                    }
                }
            }
            let ours = scores[0].1.recovered;
            for &(i, ref s, secs) in &scores {
                let pct = 100.0 * s.recovered as f64 / truth.len().max(1) as f64;
                cols[i].add(pct, s, secs);
                if s.recovered > ours {
                    less[i] += 1;
                }
            }
            if args.verbose {
                let line: Vec<String> = scores
                    .iter()
                    .map(|(i, s, secs)| {
                        format!(
                            "{}: {} of {} decoded ({} breaks{}, {:.1} s)",
                            names[*i],
                            s.recovered,
                            s.decoded,
                            s.breaks,
                            if s.runaway { ", RUNAWAY" } else { "" },
                            secs
                        )
                    })
                    .collect();
                eprintln!(
                    "{} seed {seed} ({}): {}",
                    kind.name(),
                    damaged.what,
                    line.join("; ")
                );
            }
        }
        let cells: String = cols
            .iter()
            .map(|c| {
                let n = f64::from(c.n.max(1));
                format!(
                    "{:>28}",
                    format!(
                        "{:.3} / {:.3} / {}",
                        c.sum / n,
                        c.worst.unwrap_or(0.0),
                        c.runaways
                    )
                )
            })
            .collect();
        let less: Vec<String> = less[1..].iter().map(|n| n.to_string()).collect();
        println!(
            "{:<14} {:>5}  {}   {}",
            kind.name(),
            args.seeds.end.saturating_sub(args.seeds.start),
            cells,
            less.join(" / ")
        );
        if args.verbose {
            let secs: Vec<String> = cols
                .iter()
                .zip(&names)
                .map(|(c, n)| format!("{n} {:.1} s", c.secs / f64::from(c.n.max(1))))
                .collect();
            eprintln!("{}: average time {}", kind.name(), secs.join(", "));
        }
    }
    let _ = std::fs::remove_file(&tmp);
}
