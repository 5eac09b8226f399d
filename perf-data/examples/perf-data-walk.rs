//! Walks a perf.data's records once (and, with `--aux`, reads every AUX byte): a
//! deterministic workload for `valgrind --tool=callgrind` instruction counts.
use pt_perf_data::{MappedFile, Record};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: perf-data-walk FILE [--aux]");
        std::process::exit(2);
    };
    let aux = args.iter().any(|a| a == "--aux");
    let file = MappedFile::open(path).unwrap_or_else(|e| {
        eprintln!("perf-data-walk: {path}: {e}");
        std::process::exit(1)
    });
    let f = file.parse().unwrap_or_else(|e| {
        eprintln!("perf-data-walk: {path}: {e}");
        std::process::exit(1)
    });
    let (mut records, mut bytes, mut x) = (0u64, 0u64, 0u64);
    for r in f.records() {
        records += 1;
        if let Ok((_, Record::Auxtrace(a))) = r {
            bytes += a.data.len() as u64;
            if aux {
                for w in a.data.chunks_exact(8) {
                    x ^= u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                }
            }
        }
    }
    println!("{records} records, {bytes} AUX bytes ({x:#x})");
}
