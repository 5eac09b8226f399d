//! `ptxed --threads`: decoding pieces of the trace on several threads prints exactly
//! what one thread prints, on valid traces and on broken ones (errors, resyncs).

use pt_encoder::encode_to_vec;
use pt_encoder::packet::{ExecMode, IpCompression, IpPacketKind, IpPayload, ModeExec, Packet, Tnt};
use pt_testkit::Rng;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const BASE: u64 = 0x1000;

/// A loop with a direct call, an indirect call, two returns, a conditional branch and
/// an indirect jump.
const CODE: &[u8] = &[
    0x48, 0x83, 0xc0, 0x01, // 00: add rax, 1
    0xe8, 0x07, 0x00, 0x00, 0x00, // 04: call 0x10
    0x75, 0xf5, // 09: jnz 0x00
    0xff, 0xe0, // 0b: jmp rax
    0x90, 0x90, 0x90, // 0d: nops
    0x90, // 10: nop
    0xff, 0xd3, // 11: call rbx
    0xc3, // 13: ret
];

/// Builds a trace the code above is consistent with: TNT bits for the conditional
/// branch and for returns to calls made since the last PSB (hardware compresses no
/// others), TIPs for the rest, timing packets, and a PSB+ every `psb_every` bytes at
/// any instruction boundary.
struct Gen {
    rng: Rng,
    out: Vec<u8>,
    bits: Vec<bool>,
    /// Return addresses, and whether their call came after the last PSB.
    stack: Vec<(u64, bool)>,
    next_psb: usize,
    psb_every: usize,
    insns: u64,
}

impl Gen {
    fn put(&mut self, p: Packet) {
        let _ = encode_to_vec(&p, &mut self.out);
    }

    fn flush_tnt(&mut self) {
        if !self.bits.is_empty() {
            let t = Tnt::from_results(self.bits.drain(..)).expect("at most six bits");
            self.put(Packet::Tnt8(t));
        }
    }

    fn timing(&mut self) {
        let v = self.rng.next();
        match v % 8 {
            0 => self.put(Packet::Mtc {
                ctc: (v >> 8) as u8,
            }),
            1 => self.put(Packet::Cyc {
                value: 1 + (v >> 8) % 100,
            }),
            _ => {}
        }
    }

    fn bit(&mut self, b: bool) {
        self.bits.push(b);
        if self.bits.len() == 6 {
            self.flush_tnt();
            self.timing();
        }
    }

    fn tip(&mut self, ip: u64) {
        self.flush_tnt();
        self.timing();
        self.put(Packet::Ip(
            IpPacketKind::Tip,
            IpPayload::new(IpCompression::Full, ip),
        ));
    }

    /// Before the instruction at `ip`: a PSB+ if it is time for one.
    fn boundary(&mut self, ip: u64) {
        self.insns += 1;
        if self.out.len() < self.next_psb {
            return;
        }
        self.flush_tnt();
        self.put(Packet::Psb);
        self.put(Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)));
        self.put(Packet::Ip(
            IpPacketKind::Fup,
            IpPayload::new(IpCompression::Full, ip),
        ));
        self.put(Packet::Psbend);
        for e in &mut self.stack {
            e.1 = false;
        }
        self.next_psb = self.out.len() + self.psb_every;
    }

    fn ret(&mut self) -> u64 {
        // Decoders do not pop their stack at a TIP: an uncompressed return leaves the
        // entry there, so hardware can only leave returns uncompressed where the
        // entries below matter no more (calls from before the PSB).
        let (to, fresh) = self.stack.pop().expect("a call before each return");
        if fresh {
            self.bit(true);
        } else {
            self.tip(to);
        }
        to
    }

    fn trace(seed: u64, bytes: usize, psb_every: usize) -> (Vec<u8>, u64) {
        let mut g = Gen {
            rng: Rng(seed),
            out: Vec::new(),
            bits: Vec::new(),
            stack: Vec::new(),
            next_psb: 0,
            psb_every,
            insns: 0,
        };
        while g.out.len() < bytes {
            g.boundary(BASE); // add
            g.boundary(BASE + 0x04); // call 0x10
            g.stack.push((BASE + 0x09, true));
            g.boundary(BASE + 0x10); // nop
            g.boundary(BASE + 0x11); // call rbx
            g.tip(BASE + 0x13);
            g.stack.push((BASE + 0x13, true));
            g.boundary(BASE + 0x13); // ret
            g.ret();
            g.boundary(BASE + 0x13); // ret
            g.ret();
            g.boundary(BASE + 0x09); // jnz
            let taken = g.rng.below(4) != 0;
            g.bit(taken);
            if !taken {
                g.boundary(BASE + 0x0b); // jmp rax
                g.tip(BASE);
            }
        }
        g.flush_tnt();
        (g.out, g.insns)
    }
}

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
        let (trace, insns) = Gen::trace(seed, 24 << 10, 700 + 300 * seed as usize);
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
        let (trace, _) = Gen::trace(100 + i, 12 << 10, 500 + rng.below(1500) as usize);
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
        let (trace, _) = Gen::trace(200 + i, 12 << 10, 800 + rng.below(1200) as usize);
        let trace = if i % 2 == 0 {
            trace
        } else {
            mutate(&mut rng, trace)
        };
        for granularity in [Granularity::Blocks, Granularity::Instructions] {
            for resync in [Resync::NextPsb, Resync::NextIp] {
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
