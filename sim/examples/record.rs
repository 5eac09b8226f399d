//! Records a program's execution by single-stepping it.
//!
//! `record [-o LOG] [-n LIMIT] [--aslr] [--no-verify] [--valgrind] -- CMD ARGS...`
//!
//! `--valgrind` records under valgrind instead of single-stepping (the limit
//! and Ctrl-C do not apply there).
//! `record --replay LOG` (counts) and `record --dump LOG` (one line per item)
//!
//! Prints the instruction, syscall and signal counts and the steps per second;
//! with `-o` writes the compact execution log and replays it to check it.
//! Ctrl-C stops the recording; what was recorded stays valid.

use std::io::BufWriter;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use pt_sim::exec::log::{LogReader, LogWriter};
use pt_sim::exec::ptrace::{probe_block_step, TraceOptions, Tracer};
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::exec::{ExecError, ExecItem, ExecutionSource};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_sigint(_: libc::c_int) {
    if let Some(f) = STOP.get() {
        f.store(true, Ordering::Relaxed);
    }
}

/// Replays a log and prints what it holds.
fn replay(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let mut r = LogReader::open(path).map_err(|e| format!("{path}: {e}"))?;
    let (mut insns, mut events) = (0u64, 0u64);
    let mut last = None;
    loop {
        match r.next_item() {
            Ok(Some(ExecItem::Insn(_))) => insns += 1,
            Ok(Some(ExecItem::Event(e))) => {
                events += 1;
                last = Some(e);
            }
            Ok(None) => break,
            Err(e) => return Err(format!("{path}: {e}").into()),
        }
    }
    println!(
        "{insns} instructions, {events} events, last event {last:?}, {} in {:.3} s",
        if r.is_truncated() {
            "cut short"
        } else {
            "complete"
        },
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--dump") {
        let path = args.get(1).ok_or("--dump needs a file")?;
        let mut r = LogReader::open(path).map_err(|e| format!("{path}: {e}"))?;
        while let Some(item) = r.next_item().map_err(|e| format!("{path}: {e}"))? {
            match item {
                ExecItem::Insn(i) => {
                    println!("{:x} {} {:?} -> {:x}", i.ip, i.len, i.class, i.next_ip)
                }
                ExecItem::Event(e) => println!("# {e:?}"),
            }
        }
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("--replay") {
        return replay(args.get(1).ok_or("--replay needs a file")?);
    }
    let mut out = None;
    let mut limit = None;
    let mut aslr = false;
    let mut verify = true;
    let mut use_valgrind = false;
    let mut i = 0;
    while i < args.len() && args[i] != "--" {
        match args[i].as_str() {
            "-o" => {
                i += 1;
                out = Some(args.get(i).ok_or("-o needs a file")?.clone());
            }
            "-n" => {
                i += 1;
                let n = args.get(i).ok_or("-n needs a number")?;
                limit = Some(n.parse::<u64>().map_err(|e| format!("-n {n}: {e}"))?);
            }
            "--aslr" => aslr = true,
            "--no-verify" => verify = false,
            "--valgrind" => use_valgrind = true,
            a => return Err(format!("unknown option {a}").into()),
        }
        i += 1;
    }
    let cmd = args.get(i + 1..).filter(|c| !c.is_empty()).ok_or(
        "usage: record [-o LOG] [-n LIMIT] [--aslr] [--no-verify] [--valgrind] -- CMD ARGS...",
    )?;

    let stop = Arc::new(AtomicBool::new(false));
    let _ = STOP.set(stop.clone());
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };

    if use_valgrind {
        return record_valgrind(cmd, out.as_deref());
    }
    eprintln!("PTRACE_SINGLEBLOCK: {:?}", probe_block_step()?);
    let opts = TraceOptions {
        disable_aslr: !aslr,
        step_limit: limit,
        stop_flag: Some(stop),
        verify_code: verify,
        ..TraceOptions::default()
    };
    let start = Instant::now();
    let mut tracer = Tracer::spawn(&cmd[0], &cmd[1..], opts)?;
    let mut writer = match &out {
        Some(path) => {
            let f = std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?;
            Some(LogWriter::new(BufWriter::new(f)).map_err(|e| format!("{path}: {e}"))?)
        }
        None => None,
    };
    let mut last_flush = Instant::now();
    let mut events = 0u64;
    // Progress on a terminal only (pt_cli's indicatif counter).
    let bar = pt_cli::progress::counter("{spinner} {human_pos} instructions ({per_sec})");
    loop {
        let item = match tracer.next_item() {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(e) => {
                eprintln!("recording failed: {e}");
                break;
            }
        };
        if let Some(b) = bar.as_ref().filter(|_| matches!(item, ExecItem::Insn(_))) {
            b.inc(1);
        }
        if let ExecItem::Event(e) = &item {
            events += 1;
            if std::env::var_os("RECORD_VERBOSE").is_some() {
                eprintln!("{e:?}");
            }
        }
        if let Some(w) = &mut writer {
            w.write_item(&item, tracer.memory())?;
            if last_flush.elapsed().as_secs() >= 1 {
                w.flush()?;
                last_flush = Instant::now();
            }
        }
    }
    pt_cli::progress::finish(bar);
    let secs = start.elapsed().as_secs_f64();
    let s = tracer.stats();
    println!(
        "{} instructions, {} syscalls, {} signals, {} events, {} code pages read, {} ptrace stops in {:.2} s: {:.0} steps/s",
        s.retired,
        s.syscalls,
        s.signals,
        events,
        s.page_reads,
        s.stops,
        secs,
        s.stops as f64 / secs
    );
    if let (Some(w), Some(path)) = (writer, &out) {
        w.finish()?;
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let t = Instant::now();
        let mut r = LogReader::open(path).map_err(|e: ExecError| e.to_string())?;
        let mut n = 0u64;
        while let Some(item) = r.next_item()? {
            n += u64::from(matches!(item, ExecItem::Insn(_)));
        }
        let rs = t.elapsed().as_secs_f64();
        println!(
            "log {path}: {size} bytes ({:.2} bytes/instruction); replayed {n} instructions in {:.3} s ({:.1} M/s)",
            size as f64 / s.retired.max(1) as f64,
            rs,
            n as f64 / rs / 1e6
        );
    }
    Ok(())
}

fn record_valgrind(cmd: &[String], out: Option<&str>) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut src = ValgrindSource::record(&cmd[0], &cmd[1..], ValgrindOptions::default())?;
    let ran = start.elapsed().as_secs_f64();
    let mut writer = match out {
        Some(path) => {
            let f = std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?;
            Some(LogWriter::new(BufWriter::new(f)).map_err(|e| format!("{path}: {e}"))?)
        }
        None => None,
    };
    let (mut insns, mut events) = (0u64, 0u64);
    while let Some(item) = src.next_item()? {
        match &item {
            ExecItem::Insn(_) => insns += 1,
            ExecItem::Event(_) => events += 1,
        }
        if let Some(w) = &mut writer {
            w.write_item(&item, src.memory())?;
        }
    }
    if let Some(w) = writer {
        w.finish()?;
    }
    let total = start.elapsed().as_secs_f64();
    println!(
        "{insns} instructions, {events} events; valgrind ran {ran:.2} s ({:.0} instructions/s), {total:.2} s with replay{}",
        insns as f64 / ran,
        if out.is_some() { " and log" } else { "" }
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("record: {e}");
            ExitCode::FAILURE
        }
    }
}
