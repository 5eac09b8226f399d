//! `ptdemo [FILE.ptt]`: the toolkit end to end on one .ptt file (a bundled example by
//! default): assemble it and encode its trace as pttestgen does, dump the trace with
//! ptdump (the tool, found or built as the conformance runner finds it) and the file's
//! own `opt:ptdump` flags, check the dump against the file's expectation, and count the
//! packets by kind.
//!
//! `cargo run -p pt-conformance --bin ptdemo [FILE.ptt]`.

use pt_conformance::tools::{BuildPolicy, ToolPath, Tools};
use pt_decoder::{Config, PacketDecoder};
use pt_testgen::{gen, ptt};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

const BUNDLED: &str = include_str!("demo.ptt");

/// Why the demo failed: the line for stderr.
type Failure = String;

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
    let mut out = String::new();
    let r = demo(arg.as_deref(), &mut out);
    print!("{out}");
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ptdemo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The demo on `arg` (the bundled file if `None`), its report in `out`; whether the
/// dump matched the file's expectation.
fn demo(arg: Option<&str>, out: &mut String) -> Result<bool, Failure> {
    let (path, source) = match arg {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(s) => (PathBuf::from(p), s),
            Err(e) => return Err(format!("{p}: {e}")),
        },
        None => (PathBuf::from("demo.ptt"), BUNDLED.to_string()),
    };

    // 1. pttestgen: assemble and encode.
    let outputs = match gen::generate(&source, &path, None) {
        Ok(o) => o,
        Err(e) => return Err(e.to_string()),
    };
    let dir = std::env::temp_dir().join(format!("ptdemo-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return Err(format!("{}: {e}", dir.display()));
    }
    let written = match outputs.write(&dir) {
        Ok(w) => w,
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let _ = writeln!(
        out,
        "== pttestgen {}: {} bytes of code at {:#x}, {} packets in {} bytes of trace",
        path.display(),
        outputs.bin.len(),
        org_of(&outputs.lst),
        outputs.trace.packets.len(),
        outputs.trace.bytes.len()
    );
    for f in &written {
        let _ = writeln!(out, "   wrote {}", f.display());
    }

    // 2. ptdump with the file's own flags.
    let mut argv = ptt::tool_options(&source, "ptdump");
    let pt_file = dir.join(format!("{}.pt", outputs.root));
    argv.push(pt_file.display().to_string());
    let tools = Tools::discover(BuildPolicy::IfMissing);
    let ptdump = match &tools.ptdump {
        ToolPath::Found(p) => p.clone(),
        ToolPath::Missing(why) => return Err(format!("ptdump: {why}")),
    };
    let _ = writeln!(out, "\n== ptdump {}", argv.join(" "));
    let run = match std::process::Command::new(&ptdump).args(&argv).output() {
        Ok(o) => o,
        Err(e) => return Err(format!("{}: {e}", ptdump.display())),
    };
    // A dump with decode errors still prints them; only a dump that printed nothing
    // failed.
    if !run.status.success() && run.stdout.is_empty() {
        return Err(format!(
            "ptdump {}: {}",
            argv.join(" "),
            String::from_utf8_lossy(&run.stderr).trim_end()
        ));
    }
    let text = run.stdout;
    let text = String::from_utf8_lossy(&text);
    out.push_str(&text);

    // 3. The file's expectation.
    let expected = outputs
        .trace
        .exps
        .iter()
        .find(|e| e.name.contains("-ptdump"));
    match expected {
        Some(e) if normalized(&e.text) == normalized(&text) => {
            let _ = writeln!(
                out,
                "\n== ptdump output matches {} (as diff -ub compares)",
                e.name
            );
        }
        Some(e) => {
            let _ = writeln!(out, "\n== ptdump output differs from {}:", e.name);
            for (i, (want, got)) in normalized(&e.text)
                .iter()
                .zip(normalized(&text).iter())
                .enumerate()
            {
                if want != got {
                    let _ = writeln!(out, "   line {}: expected `{want}`, got `{got}`", i + 1);
                }
            }
            return Ok(false);
        }
        None => {
            let _ = writeln!(out, "\n== no .exp(ptdump) section to check against");
        }
    }

    // 4. Packet statistics, straight from the packet decoder.
    let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut d = PacketDecoder::new(&outputs.trace.bytes, &Config::default());
    if d.sync_forward().is_ok() {
        for (_, p) in d.flatten() {
            *kinds.entry(p.name()).or_default() += 1;
        }
    }
    let _ = writeln!(out, "\n== packets by kind");
    for (k, n) in kinds {
        let _ = writeln!(out, "   {k:<10} {n}");
    }
    Ok(true)
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

#[cfg(test)]
mod tests {
    use super::demo;

    #[test]
    fn bundled_demo_dumps_and_matches_its_expectation() {
        let mut out = String::new();
        assert_eq!(demo(None, &mut out), Ok(true), "{out}");
        assert!(out.contains("tip.pgd    0: ????????????????"), "{out}");
        assert!(
            out.contains("ptdump output matches demo-ptdump.exp"),
            "{out}"
        );
        assert!(out.contains("tnt.8      3"), "{out}");
    }

    #[test]
    fn a_wrong_expectation_fails() {
        let dir = std::env::temp_dir().join(format!("ptdemo-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = "org 0x1000\nbits 64\n; @pt p1: psb()\n; @pt p2: psbend()\n\
                   ; @pt .exp(ptdump)\n;%0p1  psb\n;%0p2  pad\n";
        let file = dir.join("wrong.ptt");
        std::fs::write(&file, src).unwrap();
        let mut out = String::new();
        assert_eq!(demo(file.to_str(), &mut out), Ok(false));
        assert!(out.contains("expected `0000000000000010 pad`"), "{out}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
