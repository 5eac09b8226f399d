//! `ptdemo [FILE.ptt]`: the toolkit end to end on one .ptt file (a bundled example by
//! default): assemble it and encode its trace as pttestgen does, dump the trace as
//! ptdump does with the file's own `opt:ptdump` flags, check the dump against the
//! file's expectation, and count the packets by kind.

use pt_decoder::dump::{cli, dump};
use pt_decoder::{Config, PacketDecoder};
use pt_testgen::{gen, ptt};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

const BUNDLED: &str = include_str!("../../data/demo.ptt");

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ptdemo: {msg}");
    ExitCode::FAILURE
}

/// Lines as `diff -b` compares them: blank runs are equal, trailing blanks ignored.
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn main() -> ExitCode {
    pt_cli::init();
    let arg = std::env::args().nth(1);
    if matches!(arg.as_deref(), Some("-h" | "--help")) {
        println!("usage: ptdemo [FILE.ptt]   (default: the bundled demo.ptt)");
        return ExitCode::SUCCESS;
    }
    let (path, source) = match &arg {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(s) => (PathBuf::from(p), s),
            Err(e) => return fail(format!("{p}: {e}")),
        },
        None => (PathBuf::from("demo.ptt"), BUNDLED.to_string()),
    };

    // 1. pttestgen: assemble and encode.
    let outputs = match gen::generate(&source, &path, None) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let dir = std::env::temp_dir().join(format!("ptdemo-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(format!("{}: {e}", dir.display()));
    }
    let written = match outputs.write(&dir) {
        Ok(w) => w,
        Err(e) => return fail(format!("{}: {e}", dir.display())),
    };
    println!(
        "== pttestgen {}: {} bytes of code at {:#x}, {} packets in {} bytes of trace",
        path.display(),
        outputs.bin.len(),
        org_of(&outputs.lst),
        outputs.trace.packets.len(),
        outputs.trace.bytes.len()
    );
    for f in &written {
        println!("   wrote {}", f.display());
    }

    // 2. ptdump with the file's own flags.
    let mut argv = ptt::tool_options(&source, "ptdump");
    let pt_file = dir.join(format!("{}.pt", outputs.root));
    argv.push(pt_file.display().to_string());
    let args = match cli::parse_args(&argv) {
        Ok(cli::Command::Dump(a)) => a,
        Ok(_) => return fail("unexpected ptdump options in the file"),
        Err(e) => return fail(e),
    };
    println!("\n== ptdump {}", argv.join(" "));
    let mut text = Vec::new();
    if let Err(e) = dump(&outputs.trace.bytes, &args.config, &args.options, &mut text) {
        return fail(e);
    }
    let text = String::from_utf8_lossy(&text);
    print!("{text}");

    // 3. The file's expectation.
    let expected = outputs
        .trace
        .exps
        .iter()
        .find(|e| e.name.contains("-ptdump"));
    match expected {
        Some(e) if normalized(&e.text) == normalized(&text) => {
            println!(
                "\n== ptdump output matches {} (as diff -ub compares)",
                e.name
            )
        }
        Some(e) => {
            println!("\n== ptdump output differs from {}:", e.name);
            for (i, (want, got)) in normalized(&e.text)
                .iter()
                .zip(normalized(&text).iter())
                .enumerate()
            {
                if want != got {
                    println!("   line {}: expected `{want}`, got `{got}`", i + 1);
                }
            }
            return ExitCode::FAILURE;
        }
        None => println!("\n== no .exp(ptdump) section to check against"),
    }

    // 4. Packet statistics, straight from the packet decoder.
    let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut d = PacketDecoder::new(&outputs.trace.bytes, &Config::default());
    if d.sync_forward().is_ok() {
        for (_, p) in d.flatten() {
            *kinds.entry(p.name()).or_default() += 1;
        }
    }
    println!("\n== packets by kind");
    for (k, n) in kinds {
        println!("   {k:<10} {n}");
    }
    ExitCode::SUCCESS
}

/// The `org` address from the listing (the first `[org …]` line), for the summary.
fn org_of(listing: &str) -> u64 {
    listing
        .lines()
        .find_map(|l| {
            let s = l.split("[org").nth(1)?;
            let v = s.split(']').next()?.trim();
            let v = v.trim_start_matches("0x");
            u64::from_str_radix(v, 16).ok()
        })
        .unwrap_or(0)
}
