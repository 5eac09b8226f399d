//! A recording damaged every way a hostile user would (truncated at each structural
//! boundary, flipped bytes, size fields 0, huge or past the end, zeroed blocks,
//! swapped, reversed and duplicated records, noise behind the magic) and special
//! files (a directory, FIFOs, /dev/zero, /dev/null, an empty and an unreadable file),
//! through every reader: `ptperf script`, `report`, `inject`, `export sqlite`,
//! `ptxed --perf` and `ptdump --perf`. None may panic, die of a signal or hang; a
//! run that fails says why in a line; a run that lost data (less output than the
//! whole file gives) and exits 0 says so in a warning; nothing is left in the
//! temporary folder, nor beside inject's and export's outputs.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use pt_perf_data::{PerfFile, Record};

/// How long one run may take (a debug build on a loaded CI machine).
const TIMEOUT: Duration = Duration::from_secs(30);

/// A binary of the workspace built beside ptperf (ptxed and ptdump are pt-tools':
/// `cargo test --workspace` builds them).
fn sibling(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_ptperf")).with_file_name(name);
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build -p pt-tools --bins)",
        p.display()
    );
    p
}

/// The structure of the recording: where its parts start and end.
struct Layout {
    /// (offset, size field offset, size) of each record; `aux` for AUXTRACE
    /// records: where their data starts and its size.
    records: Vec<(usize, usize)>,
    aux: Vec<(usize, usize)>,
    attrs: (usize, usize),
    data: (usize, usize),
    features: Vec<(usize, usize)>,
}

fn layout(b: &[u8]) -> Layout {
    let perf = PerfFile::parse(b).unwrap();
    let h = *perf.header().unwrap();
    let data = (
        h.data.offset as usize,
        (h.data.offset + h.data.size) as usize,
    );
    let mut records = Vec::new();
    let mut aux = Vec::new();
    let mut walk = perf.records();
    let mut at = walk.offset() as usize;
    while let Some(r) = walk.next() {
        let (off, r) = r.unwrap();
        let next = walk.offset() as usize;
        assert_eq!(off as usize, at);
        if let Record::Auxtrace(a) = r {
            aux.push((at + 48, a.data.len()));
        }
        records.push((at, next - at));
        at = next;
    }
    let mut features = Vec::new();
    let n = h.feature_ids().count();
    for i in 0..n {
        let e = data.1 + 16 * i;
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
        features.push((u(e), u(e + 8)));
    }
    Layout {
        records,
        aux,
        attrs: (
            h.attrs.offset as usize,
            (h.attrs.offset + h.attrs.size) as usize,
        ),
        data,
        features,
    }
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The data section with its records in `order` (indices into `l.records`), the
/// header's data size and the feature table's offsets moved to match.
fn reordered(b: &[u8], l: &Layout, order: &[usize]) -> Vec<u8> {
    let mut out = b[..l.data.0].to_vec();
    for &i in order {
        let (at, size) = l.records[i];
        out.extend_from_slice(&b[at..at + size]);
    }
    let grown = out.len() - l.data.0;
    let delta = grown as i64 - (l.data.1 - l.data.0) as i64;
    put_u64(&mut out, 48, grown as u64);
    let table = out.len();
    out.extend_from_slice(&b[l.data.1..]);
    for i in 0..l.features.len() {
        let e = table + 16 * i;
        let v = (l.features[i].0 as i64 + delta) as u64;
        put_u64(&mut out, e, v);
    }
    out
}

/// Every damaged variant of `b`, named.
fn damaged(b: &[u8]) -> Vec<(String, Vec<u8>)> {
    let l = layout(b);
    let mut v: Vec<(String, Vec<u8>)> = Vec::new();
    // Truncated at (and one byte into, and one byte before) each boundary.
    let mut cuts = vec![
        0, 4, 8, 12, 16, 64, 103, 104, l.attrs.0, l.attrs.1, l.data.0, l.data.1,
    ];
    for &(at, size) in &l.records {
        cuts.extend([at + 4, at + 8, at + size / 2]);
    }
    for &(at, size) in &l.aux {
        cuts.extend([at, at + size / 2, at + size]);
    }
    for &(at, size) in &l.features {
        cuts.extend([at, at + size / 2]);
    }
    cuts.extend(l.records.iter().map(|r| r.0));
    let mut more: Vec<usize> = cuts.iter().map(|c| c.saturating_sub(1)).collect();
    cuts.append(&mut more);
    cuts.sort_unstable();
    cuts.dedup();
    for c in cuts.into_iter().filter(|&c| c < b.len()) {
        v.push((format!("cut-{c:#x}"), b[..c].to_vec()));
    }
    // Flipped bytes: 1, 10 and 100, from fixed seeds (past the magic: that is
    // refused at once).
    let mut rng = pt_testkit::Rng::new(27);
    for n in [1, 1, 1, 1, 10, 10, 10, 100, 100] {
        let mut c = b.to_vec();
        for _ in 0..n {
            let at = 8 + rng.below(b.len() as u64 - 8) as usize;
            c[at] ^= 1 << rng.below(8);
        }
        v.push((format!("flip-{n}-{:x}", rng.next() & 0xfff), c));
    }
    // Zeroed blocks: in the attrs, the first records, an AUX payload, the features.
    for at in [l.attrs.0, l.data.0, l.aux[0].0, l.data.1] {
        let mut c = b.to_vec();
        let end = (at + 64).min(c.len());
        c[at..end].fill(0);
        v.push((format!("zero-{at:#x}"), c));
    }
    // Size fields of records: 0, 8, huge, one past the end of the data.
    let picks = [0, 1, l.records.len() / 2, l.records.len() - 1];
    for &i in &picks {
        let (at, size) = l.records[i];
        for s in [0u16, 4, 8, 0xffff, (l.data.1 - at + 8).min(0xffff) as u16] {
            let mut c = b.to_vec();
            put_u16(&mut c, at + 6, s);
            v.push((format!("size-{i}-{s}"), c));
        }
        let _ = size;
    }
    // AUXTRACE data sizes: 0, 2^63, past the end, and a few bytes short.
    for (k, &(at, size)) in l.aux.iter().enumerate() {
        for s in [0, 1 << 63, (b.len() - at) as u64 + 64, size as u64 - 8] {
            let mut c = b.to_vec();
            put_u64(&mut c, at - 48 + 8, s);
            v.push((format!("auxsize-{k}-{s:#x}"), c));
        }
    }
    // The header's sections: data size 0, huge, past the end; attrs past the end.
    for (field, val) in [
        (48, 0),
        (48, u64::MAX),
        (48, b.len() as u64),
        (40, 0),
        (40, 1 << 40),
        (32, 1 << 40),
        (16, 0),
        (16, 8),
        (8, 16),
    ] {
        let mut c = b.to_vec();
        put_u64(&mut c, field, val);
        v.push((format!("header-{field}-{val:#x}"), c));
    }
    // Records swapped, reversed, duplicated.
    let n = l.records.len();
    let all: Vec<usize> = (0..n).collect();
    for i in [0, 1, n / 2, n - 2] {
        let mut o = all.clone();
        o.swap(i, i + 1);
        v.push((format!("swap-{i}"), reordered(b, &l, &o)));
    }
    let rev: Vec<usize> = (0..n).rev().collect();
    v.push(("reversed".into(), reordered(b, &l, &rev)));
    for i in [0, n / 2, n - 1] {
        let mut o = all.clone();
        o.insert(i, i);
        v.push((format!("dup-{i}"), reordered(b, &l, &o)));
    }
    let twice: Vec<usize> = all.iter().chain(all.iter()).copied().collect();
    v.push(("all-twice".into(), reordered(b, &l, &twice)));
    // Noise behind the magic (and behind the whole header).
    for (k, keep) in [8usize, 104].into_iter().enumerate() {
        let mut c = b.to_vec();
        let mut rng = pt_testkit::Rng::new(99 + k as u64);
        for x in &mut c[keep..] {
            *x = rng.next() as u8;
        }
        v.push((format!("noise-{keep}"), c));
    }
    v
}

/// One tool's run: what it printed and how it ended.
struct Run {
    out: Vec<u8>,
    err: String,
    status: std::process::ExitStatus,
}

/// Runs `cmd` with a timeout; `feed` writes into the FIFO at `fifo` meanwhile.
fn run(mut cmd: Command, what: &str) -> Run {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {TIMEOUT:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Run {
        out: t_out.join().unwrap(),
        err: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
        status,
    }
}

/// The tools, each with what measures how much it read (more is more data).
#[derive(Clone, Copy, Debug)]
enum Tool {
    Script,
    Report,
    Inject,
    Export,
    Ptxed,
    Ptdump,
}

const TOOLS: [Tool; 6] = [
    Tool::Script,
    Tool::Report,
    Tool::Inject,
    Tool::Export,
    Tool::Ptxed,
    Tool::Ptdump,
];

struct Env {
    tmp: PathBuf,
    out: PathBuf,
    ptxed: PathBuf,
    ptdump: PathBuf,
}

/// The count of what `tool` got out of `file`: script's instruction lines,
/// report's event count, the samples inject and export count, ptxed's instructions, ptdump's
/// packets. `None` when it failed (then it must have said why).
fn measure(env: &Env, tool: Tool, file: &Path, name: &str) -> (Option<u64>, Run) {
    let mut cmd = match tool {
        Tool::Ptxed => {
            let mut c = Command::new(&env.ptxed);
            c.arg("--perf").arg(file);
            c
        }
        Tool::Ptdump => {
            let mut c = Command::new(&env.ptdump);
            c.arg("--perf").arg(file);
            c
        }
        _ => ptperf(),
    };
    let inject_out = env.out.join(format!("{name}.injected"));
    let db = env.out.join(format!("{name}.db"));
    match tool {
        Tool::Script => {
            cmd.args(["script", "--itrace=i1i", "-i"]).arg(file);
        }
        Tool::Report => {
            cmd.args(["report", "--stdio", "--itrace=i1i", "-i"])
                .arg(file);
        }
        Tool::Inject => {
            cmd.args(["inject", "--itrace=i1i", "-i"])
                .arg(file)
                .arg("-o")
                .arg(&inject_out);
        }
        Tool::Export => {
            cmd.args(["export", "sqlite"])
                .arg(&db)
                .args(["--itrace=i1i", "-i"])
                .arg(file);
        }
        _ => {}
    }
    cmd.env("TMPDIR", &env.tmp);
    let r = run(cmd, &format!("{tool:?} {name}"));
    let text = String::from_utf8_lossy(&r.out);
    let count = match tool {
        Tool::Script => Some(text.lines().filter(|l| !l.contains("error")).count() as u64),
        Tool::Report => Some(
            text.lines()
                .filter_map(|l| l.strip_prefix("# Event count (approx.): "))
                .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                .sum(),
        ),
        Tool::Inject => std::fs::read(&inject_out).ok().map(|b| {
            let _ = std::fs::remove_file(&inject_out);
            PerfFile::parse(&b).map_or(0, |f| {
                f.records()
                    .filter(|r| matches!(r, Ok((_, Record::Sample(_)))))
                    .count() as u64
            })
        }),
        Tool::Export => {
            let n = r
                .err
                .lines()
                .find_map(|l| l.strip_prefix("ptperf export: "))
                .and_then(|l| l.split(" samples").next()?.parse().ok());
            let _ = std::fs::remove_file(&db);
            n
        }
        Tool::Ptxed => Some(
            text.lines()
                .filter(|l| l.starts_with(|c: char| c.is_ascii_hexdigit()))
                .count() as u64,
        ),
        Tool::Ptdump => Some(text.lines().filter(|l| !l.starts_with('[')).count() as u64),
    };
    (count.filter(|_| r.status.success()), r)
}

/// What the one line of a tool that refuses a special file says it is.
fn said(name: &str) -> Option<&'static str> {
    Some(match name {
        "directory" => "is a directory",
        "dev-zero" | "fifo-zeros" => "does not start with perf.data's magic",
        "dev-null" | "fifo-nothing" => "gave no data",
        "empty" => "empty file",
        "unreadable" => "Permission denied",
        _ => return None,
    })
}

/// The checks of one run over a damaged (or special) file.
fn check(tool: Tool, name: &str, whole: Option<u64>, got: Option<u64>, r: &Run) -> Vec<String> {
    let mut bad = Vec::new();
    let what = format!("{tool:?} {name}");
    if let Some(s) = said(name) {
        if r.status.success() || !r.err.contains(s) || r.err.lines().count() != 1 {
            bad.push(format!("{what}: not one line saying '{s}': {}", r.err));
        }
    }
    if let Some(sig) = r.status.signal() {
        bad.push(format!("{what}: killed by signal {sig}: {}", r.err));
    }
    if r.err.contains("panicked") || r.status.code() == Some(101) {
        bad.push(format!("{what}: panicked: {}", r.err));
    }
    if !r.status.success() && r.err.trim().is_empty() {
        bad.push(format!("{what}: failed ({:?}) without a word", r.status));
    }
    let warned = r.err.to_lowercase().contains("warning")
        || String::from_utf8_lossy(&r.out).contains("error");
    if r.status.success() {
        match (whole, got) {
            (Some(w), Some(g)) if g < w && !warned => bad.push(format!(
                "{what}: exit 0 without a warning, but {g} where the whole file gives {w}: {}",
                r.err
            )),
            (_, None) if !warned => {
                bad.push(format!("{what}: exit 0, no output, no warning: {}", r.err))
            }
            _ => {}
        }
    }
    bad
}

#[test]
fn damaged_recordings_and_special_files() {
    let d = dir("damaged");
    let data = record(&d, "whole", &[], &[tiny().as_os_str()]);
    let whole_bytes = std::fs::read(&data).unwrap();
    let env = Env {
        tmp: d.join("tmp"),
        out: d.join("out"),
        ptxed: sibling("ptxed"),
        ptdump: sibling("ptdump"),
    };
    std::fs::create_dir_all(&env.tmp).unwrap();
    std::fs::create_dir_all(&env.out).unwrap();

    // What each tool gets out of the whole file: all of it, exit 0, no warning.
    let mut whole = Vec::new();
    for tool in TOOLS {
        let (n, r) = measure(&env, tool, &data, "whole");
        assert!(r.status.success(), "{tool:?} on the whole file: {}", r.err);
        assert!(
            !r.err.to_lowercase().contains("warning"),
            "{tool:?} on the whole file: {}",
            r.err
        );
        let n = n.unwrap();
        assert!(n > 0, "{tool:?} on the whole file read nothing");
        whole.push(n);
    }

    // The damaged files.
    let files_dir = d.join("files");
    std::fs::create_dir_all(&files_dir).unwrap();
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for (name, bytes) in damaged(&whole_bytes) {
        let p = files_dir.join(&name);
        std::fs::write(&p, &bytes).unwrap();
        files.push((name, p));
    }
    let empty = files_dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    files.push(("empty".into(), empty));
    files.push(("directory".into(), files_dir.clone()));
    files.push(("dev-zero".into(), PathBuf::from("/dev/zero")));
    files.push(("dev-null".into(), PathBuf::from("/dev/null")));
    let unreadable = files_dir.join("unreadable");
    std::fs::write(&unreadable, &whole_bytes).unwrap();
    let mut perm = std::fs::metadata(&unreadable).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0);
    std::fs::set_permissions(&unreadable, perm).unwrap();
    if std::fs::File::open(&unreadable).is_err() {
        files.push(("unreadable".into(), unreadable));
    } else {
        // root reads it anyway: then it is one more whole file.
        eprintln!("unreadable file: readable to this user (root); checked as a whole file");
    }

    let next = AtomicUsize::new(0);
    let bad = Mutex::new(Vec::<String>::new());
    let runs = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some((name, path)) = files.get(i) else {
            break;
        };
        for (t, tool) in TOOLS.into_iter().enumerate() {
            let (n, r) = measure(&env, tool, path, name);
            runs.fetch_add(1, Ordering::Relaxed);
            let b = check(tool, name, Some(whole[t]), n, &r);
            bad.lock().unwrap().extend(b);
        }
    };
    std::thread::scope(|s| {
        s.spawn(work);
        s.spawn(work);
    });

    // FIFOs: fed the whole file (read as a stream: all of it), fed endless zeros
    // (refused at once), fed nothing (said so).
    let fifo = d.join("fifo");
    for (feed, name) in [(0, "fifo-whole"), (1, "fifo-zeros"), (2, "fifo-nothing")] {
        for (t, tool) in TOOLS.into_iter().enumerate() {
            let _ = std::fs::remove_file(&fifo);
            let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a path we own, as a C string.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let path = fifo.clone();
            let bytes = whole_bytes.clone();
            let writer = std::thread::spawn(move || {
                let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&path) else {
                    return;
                };
                match feed {
                    0 => {
                        let _ = f.write_all(&bytes);
                    }
                    1 => {
                        let zeros = vec![0u8; 1 << 16];
                        while f.write_all(&zeros).is_ok() {}
                    }
                    _ => {}
                }
            });
            let (n, r) = measure(&env, tool, &fifo, name);
            runs.fetch_add(1, Ordering::Relaxed);
            // A reader that never opened the FIFO leaves its writer waiting.
            if !writer.is_finished() {
                let _ = std::fs::OpenOptions::new().read(true).open(&fifo);
            }
            writer.join().unwrap();
            let mut b = check(tool, name, Some(whole[t]), n, &r);
            if feed == 0 && n != Some(whole[t]) {
                b.push(format!("{tool:?} {name}: {n:?}, not all of it: {}", r.err));
            }
            if feed != 0 && r.status.success() {
                b.push(format!("{tool:?} {name}: exit 0: {}", r.err));
            }
            bad.lock().unwrap().extend(b);
        }
    }

    let bad = bad.into_inner().unwrap();
    let runs = runs.load(Ordering::Relaxed);
    eprintln!(
        "{} files, {runs} runs, {} problems",
        files.len() + 3,
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );

    // Nothing left behind: in the temporary folder, beside the outputs.
    let left = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(left(&env.tmp), Vec::<String>::new(), "left in TMPDIR");
    assert_eq!(
        left(&env.out),
        Vec::<String>::new(),
        "left beside the outputs"
    );
    let _ = OsStr::new("");
}

/// inject takes what script takes (a file whose trace event lost its type, one whose
/// sample_type asks for fields a synthesized sample has no value for), writes a file
/// that reads back whole, and on failure leaves no file and an existing one as it was.
#[test]
fn inject_writes_whole_files_or_none() {
    let d = dir("damaged-inject");
    let data = record(&d, "whole", &[], &[tiny().as_os_str()]);
    let b = std::fs::read(&data).unwrap();
    let l = layout(&b);
    let attr = l.attrs.0;
    let mut no_type = b.clone();
    no_type[attr..attr + 4].copy_from_slice(&99u32.to_le_bytes());
    let mut read_bit = b.clone();
    let st = u64::from_le_bytes(b[attr + 24..attr + 32].try_into().unwrap()) | 1 << 4;
    put_u64(&mut read_bit, attr + 24, st);
    for (name, bytes) in [("no-type", no_type), ("read-bit", read_bit)] {
        let input = d.join(format!("{name}.data"));
        std::fs::write(&input, bytes).unwrap();
        let script = ptperf()
            .args(["script", "--itrace=i1i", "-i"])
            .arg(&input)
            .output()
            .unwrap();
        let out = d.join(format!("{name}.injected"));
        let o = ptperf()
            .args(["inject", "--itrace=i1i", "-i"])
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code().map(|c| c != 1),
            script.status.code().map(|c| c != 1),
            "{name}: script {:?}, inject {:?}: {}",
            script.status,
            o.status,
            stderr(&o)
        );
        let back = std::fs::read(&out).unwrap();
        let f = PerfFile::parse(&back).unwrap();
        let samples = f
            .records()
            .map(|r| r.unwrap())
            .filter(|(_, r)| matches!(r, Record::Sample(_)))
            .count();
        assert!(samples > 900, "{name}: {samples} samples");
    }
    // Failures: nothing written, an existing file untouched, nothing beside it.
    let keep = d.join("out").join("keep.data");
    std::fs::create_dir_all(keep.parent().unwrap()).unwrap();
    std::fs::write(&keep, b"old").unwrap();
    for input in ["/dev/zero", "/no/such/file"] {
        let o = ptperf()
            .args(["inject", "-i", input, "-o"])
            .arg(&keep)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(std::fs::read(&keep).unwrap(), b"old");
    }
    let o = ptperf()
        .args(["inject", "--itrace=i1i", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(d.join("no-such-dir").join("x.data"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let mut left: Vec<_> = std::fs::read_dir(keep.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["keep.data"]);
}
