//! Simulated tracing throughput: instructions per second through the PT
//! logic, from a replayed execution log.
//!
//! `pt_throughput [LOG] [ROUNDS]` — LOG is an execution log written by
//! `ptperf record --exec-log` (`OUT.log`); without one, /bin/true is recorded first. Prints, per
//! configuration: the log replay alone, the PT logic alone (items already in
//! memory) and the whole simulator (log replay, logic and ToPA output).

use std::time::Instant;

use pt_hal::backend::{TraceBackend, TraceItem};
use pt_hal::config::TraceConfig;
use pt_sim::backend::{SimBackend, SimOutput};
use pt_sim::exec::log::{LogReader, LogWriter};
use pt_sim::exec::{collect, ExecItem, ExecutionSource};
use pt_sim::pt::{PtLogic, SimParams};

fn rate(n: u64, secs: f64) -> String {
    format!("{:7.1} M instructions/s", n as f64 / secs / 1e6)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let log = match args.next() {
        Some(p) => std::fs::read(&p).map_err(|e| format!("{p}: {e}"))?,
        None => {
            eprintln!("recording /bin/true (give a log file to measure another program)");
            let mut t = pt_sim::exec::ptrace::Tracer::spawn(
                "/bin/true",
                std::iter::empty::<&str>(),
                Default::default(),
            )?;
            let mut w = LogWriter::new(Vec::new())?;
            pt_sim::exec::log::write_source(&mut t, &mut w)?;
            w.finish()?
        }
    };
    let rounds: u32 = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
    let mut src = LogReader::new(&log[..])?;
    let items = collect(&mut src)?;
    let mem = src.memory().clone();
    let insns = items
        .iter()
        .filter(|i| matches!(i, ExecItem::Insn(_)))
        .count() as u64;
    println!(
        "{} instructions, {} log bytes ({:.2} bytes/instruction), {rounds} rounds",
        insns,
        log.len(),
        log.len() as f64 / insns as f64
    );

    let t = Instant::now();
    for _ in 0..rounds {
        let mut r = LogReader::new(&log[..])?;
        while r.next_item()?.is_some() {}
    }
    println!(
        "log replay alone:           {}",
        rate(insns * u64::from(rounds), t.elapsed().as_secs_f64())
    );

    let d = TraceConfig::perf_default();
    let configs = [
        ("perf default", d),
        (
            "noretcomp",
            TraceConfig {
                dis_retc: true,
                ..d
            },
        ),
        (
            "mtc_period=0,cyc",
            TraceConfig {
                mtc: Some(0),
                cyc: Some(0),
                ..d
            },
        ),
    ];
    for (name, cfg) in configs {
        let mut bytes = 0usize;
        let t = Instant::now();
        for _ in 0..rounds {
            let mut l = PtLogic::new(cfg, SimParams::default())?;
            l.enable();
            for it in &items {
                l.item(it, &mem);
                if l.output().len() >= 1 << 16 {
                    bytes += l.output().len();
                    l.clear_output();
                }
            }
            l.finish();
            bytes += l.output().len();
        }
        let logic = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let mut sim_bytes = 0usize;
        for _ in 0..rounds {
            let mut b = SimBackend::new(SimParams::default(), SimOutput::default())?;
            b.configure(&cfg)?;
            b.start()?;
            let mut r = LogReader::new(&log[..])?;
            let mut out: Vec<TraceItem> = Vec::new();
            while let Some(it) = r.next_item()? {
                b.feed(&it, r.memory());
                if b.unread() >= b.capacity() / 2 {
                    b.read(&mut out)?;
                    out.clear();
                }
            }
            b.stop()?;
            b.read(&mut out)?;
            sim_bytes += out
                .iter()
                .map(|i| match i {
                    TraceItem::Data { bytes, .. } => bytes.len(),
                    _ => 0,
                })
                .sum::<usize>();
        }
        let whole = t.elapsed().as_secs_f64();
        println!(
            "{name:17} logic alone: {} ({:.3} trace bytes/instruction); log + logic + ToPA: {} ({} bytes)",
            rate(insns * u64::from(rounds), logic),
            bytes as f64 / (insns * u64::from(rounds)) as f64,
            rate(insns * u64::from(rounds), whole),
            sim_bytes / rounds as usize
        );
    }
    Ok(())
}
