//! `ptxed --threads`: decoding pieces of the trace on several threads prints exactly
//! what one thread prints, on valid traces and on broken ones (errors, resyncs), under
//! every resync policy.

use pt_testkit::Rng;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pt_testkit::trace::{loop_trace, LOOP_BASE as BASE, LOOP_CODE as CODE};

/// Flip bits, cut, duplicate or drop ranges.
fn mutate(rng: &mut Rng, mut t: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(6) {
        if t.is_empty() {
            break;
        }
        let at = rng.below(t.len() as u64) as usize;
        match rng.below(4) {
            0 => t[at] ^= 1 << rng.below(8),
            1 => t[at] = rng.next() as u8,
            2 => {
                let end = (at + rng.below(16) as usize).min(t.len());
                let piece = t[at..end].to_vec();
                t.splice(at..at, piece);
            }
            _ => {
                let end = (at + rng.below(8) as usize).min(t.len());
                t.drain(at..end);
            }
        }
    }
    t
}

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ptxed-parallel-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("code.bin"), CODE).expect("code");
    dir
}

/// ptxed's standard output and exit code on `trace` with `args`.
fn ptxed(dir: &std::path::Path, trace: &[u8], args: &[&str]) -> (String, Option<i32>) {
    // Tests run at the same time: a file per call.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let pt = dir.join(format!("{}.pt", CALLS.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&pt, trace).expect("trace");
    let raw = format!("{}:{BASE:#x}", dir.join("code.bin").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptxed"))
        .args(args)
        .args(["--raw", &raw, "--pt"])
        .arg(&pt)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ptxed");
    // Threads waiting for each other would hang: fail instead.
    let start = Instant::now();
    while child.try_wait().expect("wait for ptxed").is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("ptxed {args:?} hangs on {}", pt.display());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().expect("ptxed output");
    let _ = std::fs::remove_file(&pt);
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}

const MODES: &[&[&str]] = &[
    &["--quiet", "--stat:insn"],
    &["--quiet"],
    &["--quiet", "--stat", "--insn-decoder"],
    &["--quiet", "--stat:insn", "--resync-on-error"],
    &["--quiet", "--stat", "--insn-decoder", "--resync-on-error"],
    &["--quiet", "--stat:insn", "--libipt-resync"],
    &["--quiet", "--stat", "--insn-decoder", "--libipt-resync"],
];

fn same_with_threads(dir: &std::path::Path, trace: &[u8], what: &str) {
    for mode in MODES {
        let one = ptxed(dir, trace, &[mode, &["--threads", "1"][..]].concat());
        for threads in ["2", "3", "5"] {
            let args = [
                mode,
                &["--threads", threads, "--threads:min-piece", "2048"][..],
            ]
            .concat();
            let many = ptxed(dir, trace, &args);
            assert_eq!(one, many, "{what}: {args:?}");
        }
    }
}

#[test]
fn valid_traces_decode_the_same_on_several_threads() {
    let dir = temp_dir("valid");
    for seed in 1..=4 {
        let (trace, insns) = loop_trace(seed, 24 << 10, 700 + 300 * seed as usize);
        // The generator's own count: pieces are neither lost nor counted twice.
        let (out, _) = ptxed(
            &dir,
            &trace,
            &[
                "--quiet",
                "--stat:insn",
                "--threads",
                "4",
                "--threads:min-piece",
                "2048",
            ],
        );
        assert_eq!(out, format!("insn: {insns}.\n"), "seed {seed}");
        same_with_threads(&dir, &trace, &format!("seed {seed}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn broken_traces_decode_the_same_on_several_threads() {
    let dir = temp_dir("broken");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut with_errors = 0;
    for i in 0..40 {
        let (trace, _) = loop_trace(100 + i, 12 << 10, 500 + rng.below(1500) as usize);
        let trace = mutate(&mut rng, trace);
        let (out, _) = ptxed(&dir, &trace, &["--quiet", "--threads", "1"]);
        with_errors += usize::from(!out.is_empty());
        same_with_threads(&dir, &trace, &format!("mutation {i}"));
    }
    // The mutations do break traces (else this test would prove little).
    assert!(with_errors > 10, "only {with_errors} traces gave errors");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The driver itself: in count-only mode, on one thread or several, it reports the
/// errors and statuses that the block-by-block decode reports, and counts the
/// instructions that decode returns.
#[test]
fn the_driver_counts_what_it_decodes_on_any_number_of_threads() {
    use pt_decoder::{Decoder, Granularity, Image, Item, Resync};

    let mut image = Image::new();
    image
        .add_bytes(BASE, CODE.to_vec(), "code")
        .expect("section");
    let mut rng = Rng(0x5eed);
    for i in 0..24u64 {
        let (trace, _) = loop_trace(200 + i, 12 << 10, 800 + rng.below(1200) as usize);
        let trace = if i % 2 == 0 {
            trace
        } else {
            mutate(&mut rng, trace)
        };
        for granularity in [Granularity::Blocks, Granularity::Instructions] {
            for resync in [Resync::NextPsb, Resync::NextIp, Resync::Recover] {
                let what = format!("trace {i}, {granularity:?}, {resync:?}");
                let builder = || {
                    Decoder::builder(&trace, &image)
                        .granularity(granularity)
                        .resync(resync)
                        .min_piece(2048)
                };
                // Every item, and the instructions of the blocks and instructions.
                let (mut reported, mut insns) = (Vec::new(), 0u64);
                for item in builder().build() {
                    match item {
                        Item::Block(b) => insns += u64::from(b.block.ninsn),
                        Item::Insn(_) => insns += 1,
                        Item::Event(_) => {}
                        other => reported.push(other),
                    }
                }
                for threads in [1, 2, 3] {
                    let mut dec = builder().count_only(true).threads(threads).build();
                    let (mut items, mut counted) = (Vec::new(), 0u64);
                    for item in &mut dec {
                        match item {
                            Item::Counts(c) => counted += c.insns,
                            other => items.push(other),
                        }
                    }
                    assert_eq!(items, reported, "{what}, {threads} threads");
                    assert_eq!(counted, insns, "{what}, {threads} threads");
                    assert_eq!(dec.counts().insns, insns, "{what}, {threads} threads");
                }
            }
        }
    }
}
