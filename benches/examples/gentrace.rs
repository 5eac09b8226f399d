//! Write a generated trace to a file: `gentrace tnt|mixed|random SIZE_MIB OUT`.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(kind), Some(size), Some(out)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: gentrace tnt|mixed|random SIZE_MIB OUT");
        std::process::exit(2);
    };
    let Ok(mib) = size.parse::<usize>() else {
        eprintln!("gentrace: bad size '{size}'");
        std::process::exit(2);
    };
    let trace = match kind.as_str() {
        "tnt" => pt_benches::tnt_heavy(mib << 20),
        "mixed" => pt_benches::mixed(mib << 20),
        "random" => pt_benches::random_mix(mib << 20),
        _ => {
            eprintln!("gentrace: unknown kind '{kind}' (tnt, mixed or random)");
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::write(out, &trace) {
        eprintln!("gentrace: {out}: {e}");
        std::process::exit(1);
    }
}
