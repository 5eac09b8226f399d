//! Shared by ptperf's tests: the test programs (built with gcc), running
//! `ptperf record` and perf, and reading a recording back.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use pt_decoder::{Config, Packet, PacketDecoder};
use ptperf::verify::{ground_truth, Recording, TracePiece};

/// The ptperf binary.
pub fn ptperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptperf"))
}

/// A fresh scratch directory.
pub fn dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds `src` (relative to the ptperf crate) with gcc into the target tmp dir.
pub fn build(name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(src);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("prog-{name}"));
    pt_testkit::compile_c(&src, &out, flags, &[])
}

/// Flags of a program without libc.
pub const NOLIBC: &[&str] = pt_testkit::NOLIBC;

/// About a thousand instructions, no libc; argv\[1\] selects behaviour.
pub fn tiny() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build("tiny", "../sim/tests/programs/tiny.c", NOLIBC))
}

/// Calls and branches, "ready" on stdout, then an endless loop (no libc).
pub fn spin() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build("spin", "tests/programs/spin.c", NOLIBC))
}

/// Starts `ptperf record --backend sim ARGS -o DATA -- spin` with stdout
/// and stderr piped, and waits for the program's "ready" line: the
/// program has run that far (with either execution source).
pub fn start_spin(args: &[&str], data: &Path) -> std::process::Child {
    start_recording(spin(), args, data)
}

/// [`start_spin`] with another program that writes "ready\n" first.
pub fn start_recording(program: &Path, args: &[&str], data: &Path) -> std::process::Child {
    use std::io::Read;
    let mut child = ptperf()
        .args(["record", "--backend", "sim"])
        .args(args)
        .arg("-o")
        .arg(data)
        .arg("--")
        .arg(program)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = [0u8; 6];
    let ok = out.read_exact(&mut line).is_ok() && &line == b"ready\n";
    if !ok {
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        panic!("the program did not get ready: {}", stderr(&o));
    }
    child
}

/// Sends `sig` to `child`.
pub fn signal(child: &std::process::Child, sig: i32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Two threads, statically linked.
pub fn threads() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        build(
            "threads",
            "../sim/tests/programs/threads.c",
            &["-O1", "-pthread", "-static"],
        )
    })
}

/// The libc sample (dynamically linked, PIE).
pub fn sample() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        build(
            "sample",
            "tests/programs/sample.c",
            &["-O1", "-fno-inline-small-functions"],
        )
    })
}

/// Reads the clock through the vDSO (statically linked).
pub fn clock() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build("clock", "tests/programs/clock.c", &["-O1", "-static"]))
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `ptperf record --backend sim ARGS -o DIR/NAME.data [--] CMD`: must
/// write the file and end as the program did, with an exit status (which
/// may not be 0: perf record ends with its program's); returns the file.
pub fn record(dir: &Path, name: &str, args: &[&str], cmd: &[&OsStr]) -> PathBuf {
    record_as(dir, name, &[], args, cmd)
}

/// [`record`] with the execution log (`--exec-log`): `OUT.log` ([`log_of`]),
/// the ground truth, beside the output.
pub fn record_logged(dir: &Path, name: &str, args: &[&str], cmd: &[&OsStr]) -> PathBuf {
    record_as(dir, name, &["--exec-log"], args, cmd)
}

fn record_as(dir: &Path, name: &str, first: &[&str], args: &[&str], cmd: &[&OsStr]) -> PathBuf {
    let data = dir.join(format!("{name}.data"));
    let o = ptperf()
        .args(["record", "--backend", "sim"])
        .args(first)
        .args(args)
        .arg("-o")
        .arg(&data)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    assert_recorded(name, &o);
    data
}

/// `ptperf record` wrote its file and ended with its program's exit status.
pub fn assert_recorded(what: &str, o: &Output) {
    let err = stderr(o);
    assert!(o.status.code().is_some(), "{what}: {:?}: {err}", o.status);
    assert!(
        err.contains("[ perf record: Captured and wrote"),
        "{what}: {err}"
    );
    assert!(!err.contains("ptperf record: warning"), "{what}: {err}");
}

/// AUXTRACE records in a perf.data as far as it is complete on disk (0
/// while it cannot be read yet).
pub fn auxtrace_count(data: &Path) -> usize {
    let Ok(file) = pt_perf_data::MappedFile::open(data) else {
        return 0;
    };
    let Ok(perf) = file.parse() else {
        return 0;
    };
    perf.records()
        .map_while(Result::ok)
        .filter(|(_, r)| matches!(r, pt_perf_data::Record::Auxtrace(_)))
        .count()
}

/// Waits (a minute at most) until `data` holds `n` AUXTRACE records on disk.
pub fn wait_for_auxtrace(data: &Path, n: usize) {
    let t = std::time::Instant::now();
    while auxtrace_count(data) < n {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "{}: {n} AUXTRACE records not written",
            data.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Replays the execution log `log` with `args` into `DIR/NAME.data`.
pub fn replay(dir: &Path, name: &str, args: &[&str], log: &Path) -> PathBuf {
    let data = dir.join(format!("{name}.data"));
    let o = ptperf()
        .args(["record", "--source", "log"])
        .args(args)
        .arg("-o")
        .arg(&data)
        .arg(log)
        .output()
        .unwrap();
    // A replay ends with the recorded program's exit status.
    assert_recorded(name, &o);
    data
}

/// `OUT.log`: the execution log `--exec-log` (or `--decode`) writes.
pub fn log_of(data: &Path) -> PathBuf {
    let mut s = data.as_os_str().to_owned();
    s.push(".log");
    PathBuf::from(s)
}

/// `OUT.debug`.
pub fn debug_of(data: &Path) -> PathBuf {
    let mut s = data.as_os_str().to_owned();
    s.push(".debug");
    PathBuf::from(s)
}

/// Runs perf; returns (stdout, stderr); fails when perf does.
pub fn perf(args: &[&OsStr]) -> (String, String) {
    let perf = pt_testkit::tool("perf", "linux-perf");
    let out = Command::new(perf)
        .args(args)
        .env("PERF_PAGER", "cat")
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "perf {args:?}: {}\n{se}", out.status);
    (so, se)
}

/// `perf [--buildid-dir OUT.debug] script --itrace=i1i -F tid,ip` on `data`:
/// every thread's instructions, in order. perf must not complain.
pub fn perf_instructions(data: &Path) -> BTreeMap<u32, Vec<u64>> {
    let debug = debug_of(data);
    let (out, err) = perf(&[
        OsStr::new("--buildid-dir"),
        debug.as_os_str(),
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--itrace=i1i"),
        OsStr::new("-F"),
        OsStr::new("tid,ip"),
    ]);
    assert_quiet("perf script", &err);
    let mut m: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for l in out.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = l.split_whitespace();
        let (Some(tid), Some(ip)) = (it.next(), it.next()) else {
            panic!("perf script line `{l}`");
        };
        m.entry(tid.parse().unwrap())
            .or_default()
            .push(u64::from_str_radix(ip, 16).unwrap());
    }
    m
}

/// What our decoder (pt-decoder's perf.data session) decodes in `data`:
/// every thread's instructions, in order. It must decode without an error,
/// a warning, lost data or missing code, except that snapshots that do not
/// overlap may be named as not continuing each other (see
/// [`snapshots_start_at_psbs`] for why nothing is lost there).
pub fn our_instructions(data: &Path) -> BTreeMap<u32, Vec<u64>> {
    use pt_decoder::{Granularity, Item};
    use pt_perf::session::{PerfItem, Session, SessionOptions};
    let mapped = pt_perf_data::MappedFile::open(data).unwrap();
    let perf = mapped.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(data)).unwrap();
    let warnings: Vec<String> = session.warnings().iter().map(|w| w.to_string()).collect();
    assert!(warnings.is_empty(), "{}: {warnings:?}", data.display());
    let mut flows: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for q in 0..session.queues().len() {
        let mut dec = session
            .decoder(q)
            .configure(|b| b.granularity(Granularity::Instructions));
        while let Some(item) = dec.next() {
            match item {
                PerfItem::Decoded(Item::Insn(i)) => {
                    let tid = dec.context().and_then(|c| c.tid).expect("a thread");
                    flows.entry(tid).or_default().push(i.insn.ip);
                }
                PerfItem::Decoded(Item::Error(e)) => panic!("{}: {e}", data.display()),
                PerfItem::Lost(l) if l.kind == pt_perf::session::LostKind::SnapshotGap => {}
                PerfItem::Lost(l) => panic!("{}: lost {l}", data.display()),
                PerfItem::NoCode(n) => panic!("{}: no code: {n}", data.display()),
                _ => {}
            }
        }
    }
    flows
}

/// Every AUXTRACE record of a snapshot recording starts with a PSB: the
/// trace unit starts afresh after each snapshot, so snapshots that do not
/// overlap lose nothing between them.
pub fn snapshots_start_at_psbs(data: &Path) {
    use pt_perf_data::{MappedFile, Record};
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    for r in perf.records() {
        if let (off, Record::Auxtrace(a)) = r.unwrap() {
            assert!(
                a.data.starts_with(&[0x02, 0x82].repeat(8)),
                "{}: the AUXTRACE at {off:#x} does not start with a PSB",
                data.display()
            );
        }
    }
}

/// `perf report --stdio` runs on `data` without a warning.
pub fn perf_report_quiet(data: &Path) {
    let debug = debug_of(data);
    let (_, err) = perf(&[
        OsStr::new("--buildid-dir"),
        debug.as_os_str(),
        OsStr::new("report"),
        OsStr::new("--stdio"),
        OsStr::new("-i"),
        data.as_os_str(),
    ]);
    assert_quiet("perf report", &err);
}

/// No warning or error in perf's stderr.
pub fn assert_quiet(what: &str, stderr: &str) {
    for bad in ["arning", "rror", "nknown", "ailed"] {
        assert!(!stderr.contains(bad), "{what} complained:\n{stderr}");
    }
}

/// The recorded ground truth of `data` (its execution log `log`): every
/// thread's traced instructions, by tid.
pub fn truth(data: &Path, log: &Path) -> BTreeMap<u32, Vec<u64>> {
    let rec = Recording::read(data).unwrap();
    ground_truth(log, &rec.config, &rec.filters)
        .unwrap()
        .into_iter()
        .map(|(t, v)| (t.tid, v))
        .collect()
}

/// Thread by thread: perf's instructions are exactly `want`'s.
pub fn assert_same_threads(
    what: &str,
    got: &BTreeMap<u32, Vec<u64>>,
    want: &BTreeMap<u32, Vec<u64>>,
) {
    let tids = |m: &BTreeMap<u32, Vec<u64>>| m.keys().copied().collect::<Vec<_>>();
    assert_eq!(tids(got), tids(want), "{what}: threads");
    for (tid, w) in want {
        let g = &got[tid];
        if let Some(i) = (0..g.len().min(w.len())).find(|&i| g[i] != w[i]) {
            panic!(
                "{what}: thread {tid}: instruction {i}: perf {:#x}, recorded {:#x}",
                g[i], w[i]
            );
        }
        assert_eq!(g.len(), w.len(), "{what}: thread {tid}: instructions");
    }
}

/// Decodes all packets; an error is allowed only in the last 16 bytes (a
/// packet cut by the end). Returns the packets.
pub fn decode_prefix(bytes: &[u8]) -> Vec<Packet> {
    assert!(!bytes.is_empty(), "no trace");
    let mut d = PacketDecoder::new(bytes, &Config::default());
    d.sync_forward().expect("a PSB");
    let mut out = Vec::new();
    for r in d {
        match r {
            Ok((_, p)) => out.push(p),
            Err(e) => assert!(e.offset + 16 >= bytes.len() as u64, "{e:?}"),
        }
    }
    out
}

/// ptxed's options for one piece of a recording (libipt's and ours take
/// them): the trace written to `trace`, `--raw` for every mapping, the
/// timing parameters.
pub fn ptxed_args(rec: &Recording, piece: &TracePiece, trace: &Path) -> Vec<String> {
    std::fs::write(trace, &piece.data).unwrap();
    let c = &rec.decoder;
    let mut a: Vec<String> = vec!["--cpu".into(), "none".into()];
    for (opt, v) in [
        ("--mtc-freq", u32::from(c.mtc_freq)),
        ("--nom-freq", u32::from(c.nom_freq)),
        ("--cpuid-0x15.eax", c.cpuid_0x15_eax),
        ("--cpuid-0x15.ebx", c.cpuid_0x15_ebx),
    ] {
        a.push(opt.into());
        a.push(v.to_string());
    }
    for m in &piece.maps {
        // A mapping's last page may reach past the end of the file.
        let size = std::fs::metadata(&m.path).map_or(0, |md| md.len());
        let to = (m.file_offset + (m.end - m.start)).min(size);
        if to <= m.file_offset {
            continue;
        }
        a.push("--raw".into());
        a.push(format!(
            "{}:{:#x}-{:#x}:{:#x}",
            m.path.display(),
            m.file_offset,
            to,
            m.start
        ));
    }
    a.push("--pt".into());
    a.push(trace.display().to_string());
    a
}

/// The task records of a perf.data, one line each in file order:
/// `comm PID/TID NAME [exec]`, `fork PID/TID from PPID/PTID`,
/// `exit PID/TID`, `mmap2 PID FILE`, `itrace_start PID/TID`.
pub fn task_records(data: &Path) -> Vec<String> {
    use pt_perf_data::{misc, MappedFile, Record};
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let mut out = Vec::new();
    for r in perf.records() {
        let (_, r) = r.unwrap();
        match r {
            Record::Comm(c) => out.push(format!(
                "comm {}/{} {}{}",
                c.pid,
                c.tid,
                c.comm.to_str_lossy(),
                if c.misc & misc::COMM_EXEC != 0 {
                    " exec"
                } else {
                    ""
                }
            )),
            Record::Fork(f) => out.push(format!(
                "fork {}/{} from {}/{}",
                f.pid, f.tid, f.ppid, f.ptid
            )),
            Record::Exit(f) => out.push(format!("exit {}/{}", f.pid, f.tid)),
            Record::Mmap2(m) => out.push(format!("mmap2 {} {}", m.pid, m.filename.to_str_lossy())),
            Record::ItraceStart(s) => out.push(format!("itrace_start {}/{}", s.pid, s.tid)),
            _ => {}
        }
    }
    out
}

/// Every thread's AUX data, by tid, in file order.
pub fn aux_by_thread(data: &Path) -> BTreeMap<u32, Vec<u8>> {
    use pt_perf_data::{MappedFile, Record};
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let mut out: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for r in perf.records() {
        if let (_, Record::Auxtrace(a)) = r.unwrap() {
            out.entry(a.tid).or_default().extend_from_slice(a.data);
        }
    }
    out
}

/// Every thread's AUX stream as the trace unit wrote it: each AUXTRACE
/// record's data up to where the next record of the thread starts (a record
/// is padded to 8 bytes, and where a recorder cuts its records is its own
/// business), the last one without the zero bytes that may pad it.
pub fn aux_stream_by_thread(data: &Path) -> BTreeMap<u32, Vec<u8>> {
    use pt_perf_data::{MappedFile, Record};
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let mut pieces: BTreeMap<u32, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
    for r in perf.records() {
        if let (_, Record::Auxtrace(a)) = r.unwrap() {
            pieces
                .entry(a.tid)
                .or_default()
                .push((a.offset, a.data.to_vec()));
        }
    }
    pieces
        .into_iter()
        .map(|(tid, p)| {
            let mut out = Vec::new();
            for (i, (offset, bytes)) in p.iter().enumerate() {
                let len = match p.get(i + 1) {
                    Some((next, _)) if next > offset => bytes.len().min((next - offset) as usize),
                    _ => bytes.len(),
                };
                out.extend_from_slice(&bytes[..len]);
            }
            // The last record's padding: up to 7 zero bytes.
            let zeros = out.iter().rev().take(7).take_while(|b| **b == 0).count();
            out.truncate(out.len() - zeros);
            (tid, out)
        })
        .collect()
}

/// Fails the test where a tool that CI installs is missing.
pub fn valgrind_installed() {
    pt_testkit::tool("valgrind", "valgrind");
}

/// A snapshot taken at the program's exit (`-Se`, a ring that wraps) holds the
/// end of its one thread's execution: more than 1000 instructions, fewer than
/// half of them, the last ones; perf and our decoder agree on them.
pub fn assert_snapshot_is_the_end(data: &Path, log: &Path) {
    let got = perf_instructions(data);
    let want = truth(data, log);
    assert_eq!(got.len(), 1);
    let (tid, g) = got.iter().next().unwrap();
    let w = &want[tid];
    assert!(
        g.len() > 1000 && g.len() < w.len() / 2,
        "{} of {}",
        g.len(),
        w.len()
    );
    assert_eq!(
        g[..],
        w[w.len() - g.len()..],
        "not the end of the execution"
    );
    assert_same_threads("snapshot, our decoder", &our_instructions(data), &got);
}
