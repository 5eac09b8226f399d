//! Lists a perf.data's events, features and records (file or pipe mode):
//! `cargo run -p pt-perf-data --example perf-data-dump -- perf.data`.
use pt_perf_data::{MappedFile, Record};
use std::io::Write;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: perf-data-dump FILE");
        std::process::exit(2);
    };
    if let Err(e) = run(&path) {
        eprintln!("perf-data-dump: {path}: {e}");
        std::process::exit(1);
    }
}

fn run(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let file = MappedFile::open(path)?;
    let perf = file.parse()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for w in perf.warnings() {
        eprintln!("perf-data-dump: warning: {w}");
    }
    for (i, e) in perf.events().iter().enumerate() {
        writeln!(out, "event {i} {:?}: {:?} ids {:?}", e.name, e.attr, e.ids)?;
    }
    for (id, f) in perf.features() {
        writeln!(
            out,
            "feature {id} {}: {:?}",
            pt_perf_data::feature_id::name(id),
            f
        )?;
    }
    for r in perf.records() {
        match r {
            Ok((at, Record::Auxtrace(a))) => writeln!(
                out,
                "{at:#x} AUXTRACE size {:#x} offset {:#x} ref {:#x} idx {} tid {} cpu {}",
                a.data.len(),
                a.offset,
                a.reference,
                a.idx,
                a.tid as i32,
                a.cpu as i32
            )?,
            Ok((at, r)) => writeln!(out, "{at:#x} {r:?}")?,
            Err(e) => writeln!(out, "error: {e}")?,
        }
    }
    Ok(())
}
