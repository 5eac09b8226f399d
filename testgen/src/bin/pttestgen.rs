//! pttestgen: a drop-in for libipt's pttc.
//!
//! Reads an annotated assembly file (.ptt), assembles it and writes, into the current
//! directory (or `--output-dir`), `<root>.bin`, `<root>.pt`, `<root>.lst` and one
//! `<root>-<tool>[-cpu_<f>_<m>[_<s>]].exp` per `.exp` section and one `.sb` file per
//! `@sb` side-band stream (named as pttc names them); prints the names of the .exp and
//! .sb files, one per line. On error: one `file:line: message` line on stderr, exit
//! status 1, and no new files.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use pt_testgen::gen::generate_for;
use pt_testgen::ptt::{cpu_lines, Cpu};

// An assembler makes many small, short-lived allocations per source line
// (tokens, names, operands); glibc's allocator spent a quarter of a 200k-line
// file's time in them (malloc_consolidate, _int_free), mimalloc a fraction.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Generate an Intel PT trace and expected tool output from a .ptt file"
)]
struct Args {
    /// The processor to name the .exp files for: `none` or family/model[/stepping].
    #[arg(long, value_name = "none|F/M[/S]", value_parser = parse_cpu)]
    cpu: Option<CpuArg>,
    /// Write one set of .exp files for each processor of the file's `; cpu` lines
    /// (plain names if there are none), instead of running once per processor.
    #[arg(long, conflicts_with = "cpu")]
    all_cpus: bool,
    /// Where to write the files (default: the current directory).
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// The annotated assembly file.
    pttfile: PathBuf,
}

#[derive(Clone, Copy, Debug)]
struct CpuArg(Option<Cpu>);

fn parse_cpu(s: &str) -> Result<CpuArg, String> {
    if s == "none" {
        return Ok(CpuArg(None));
    }
    s.parse::<Cpu>()
        .map(|c| CpuArg(Some(c)))
        .map_err(|e| e.to_string())
}

/// The largest source read (a .ptt of libipt's suite is a few KiB; a pipe or a
/// device that never ends must not take all memory).
const SOURCE_LIMIT: u64 = 64 << 20;

/// The source at `path`: a regular file or a pipe, at most [`SOURCE_LIMIT`] bytes; a
/// directory or a device is refused (the error says what it is).
fn read_source(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let t = f
        .metadata()
        .map_err(|e| format!("cannot read: {e}"))?
        .file_type();
    let what = if t.is_dir() {
        Some("a directory")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else {
        None
    };
    if let Some(what) = what {
        return Err(format!("cannot read: it is {what}, not a .ptt file"));
    }
    let mut bytes = Vec::new();
    f.take(SOURCE_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > SOURCE_LIMIT {
        return Err(format!(
            "cannot read: more than {} MiB, too large for a .ptt file",
            SOURCE_LIMIT >> 20
        ));
    }
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

fn main() -> ExitCode {
    let args: Args = pt_cli::parse();
    let path = &args.pttfile;
    let source = match read_source(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pttestgen: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let cpus = if args.all_cpus {
        let mut cpus = Vec::new();
        for word in cpu_lines(&source) {
            match word.parse::<Cpu>() {
                Ok(c) => cpus.push(Some(c)),
                Err(e) => {
                    eprintln!("pttestgen: {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
        if cpus.is_empty() {
            cpus.push(None);
        }
        cpus
    } else {
        vec![args.cpu.and_then(|c| c.0)]
    };
    let outputs = match generate_for(&source, path, &cpus) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pttestgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = args
        .output_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("."));
    if let Err(e) = outputs.write(&dir) {
        eprintln!(
            "pttestgen: {}: cannot write output files in {}: {e}",
            path.display(),
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    for name in outputs.printed() {
        match &args.output_dir {
            Some(d) => println!("{}", d.join(name).display()),
            None => println!("{name}"),
        }
    }
    ExitCode::SUCCESS
}
