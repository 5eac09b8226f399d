//! How fast the flow decoders reconstruct instructions (ptxed `--quiet`).
//!
//! Two generated workloads over a generated 64-bit image:
//! * `loop`: a five-instruction loop driven by TNT-64 packets only;
//! * `calls`: a loop with a direct call (compressed return), an indirect call through
//!   a register (TIP, compressed return) and an indirect jump (TIP);
//! * `ret`: a loop with a direct call, a compressed return and a forward jump, TNT only.
//!
//! Prints instructions per second for the block and the instruction decoder, block by
//! block / instruction by instruction and as ptxed `--quiet` decodes (counting only).
//! The first pass over the code is included (the block cache starts cold).
//!
//! `cargo run --release -p pt-decoder --example ptxed_speed [million-insns]`

use std::time::Instant;

use pt_decoder::image::Image;
use pt_decoder::{Decoder, Granularity, Item};
use pt_encoder::packet::{ExecMode, IpPacketKind, ModeExec, Packet, Tnt};
use pt_encoder::Encoder;

const BASE: u64 = 0x40_1000;

/// The loop: `L: add rax, 1; mov rbx, rax; test rax, rax; nop; jnz L`.
fn loop_code() -> Vec<u8> {
    let mut c = vec![
        0x48, 0x83, 0xc0, 0x01, 0x48, 0x89, 0xc3, 0x48, 0x85, 0xc0, 0x90,
    ];
    let rel = -(c.len() as i8 + 2);
    c.extend_from_slice(&[0x75, rel as u8]);
    c
}

/// Code of the call workload and the offsets of F2 and M3 (indirect targets).
///
/// ```text
/// M:  call F1          ; direct, return compressed
///     call rbx         ; rbx = F2: TIP, return compressed
///     jmp rcx          ; rcx = M3: TIP
/// M3: nop
///     sub rdx, 1
///     jnz M
/// F1: nop
///     ret
/// F2: add rax, 1
///     ret
/// ```
fn call_code() -> (Vec<u8>, u64, u64) {
    let mut c = Vec::new();
    c.extend_from_slice(&[0xe8, 0, 0, 0, 0]); // call F1 (fixed below)
    c.extend_from_slice(&[0xff, 0xd3]); // call rbx
    c.extend_from_slice(&[0xff, 0xe1]); // jmp rcx
    let m3 = c.len() as u64;
    c.push(0x90); // nop
    c.extend_from_slice(&[0x48, 0x83, 0xea, 0x01]); // sub rdx, 1
    let jnz_end = c.len() as i64 + 2;
    c.extend_from_slice(&[0x75, (-jnz_end) as i8 as u8]); // jnz M
    let f1 = c.len() as i32;
    c.extend_from_slice(&[0x90, 0xc3]);
    let f2 = c.len() as u64;
    c.extend_from_slice(&[0x48, 0x83, 0xc0, 0x01, 0xc3]);
    c[1..5].copy_from_slice(&(f1 - 5).to_le_bytes());
    (c, f2, m3)
}

/// `L: add rax, 1; call F; jmp M; nop; M: jnz L; ...; F: nop; ret` (7 instructions
/// and two TNT bits per iteration).
fn ret_code() -> Vec<u8> {
    vec![
        0x48, 0x83, 0xc0, 0x01, // add rax, 1
        0xe8, 0x06, 0x00, 0x00, 0x00, // call F
        0xeb, 0x01, // jmp M
        0x90, // nop
        0x75, 0xf2, // M: jnz L
        0x90, // nop
        0x90, 0xc3, // F: nop; ret
    ]
}

fn ret_trace(insns: u64) -> Vec<u8> {
    let bits = insns / 3;
    let packets = bits / 46 + 1;
    let mut t = Trace::new(packets as usize * 8 + 64);
    let mut buf = std::mem::take(&mut t.buf);
    let mut enc = Encoder::new(&mut buf);
    start(&mut enc, &mut t, BASE);
    let tnt = Tnt::from_results(std::iter::repeat_n(true, 46)).expect("46 bits");
    for _ in 0..packets {
        t.emit(&mut enc, &Packet::Tnt64(tnt));
    }
    let len = enc.offset();
    buf.truncate(len);
    buf
}

struct Trace {
    buf: Vec<u8>,
    pos: usize,
}

impl Trace {
    fn new(size: usize) -> Self {
        Self {
            buf: vec![0; size],
            pos: 0,
        }
    }

    fn emit(&mut self, enc: &mut Encoder<'_>, p: &Packet) {
        enc.next(p).expect("packet fits");
    }
}

/// PSB+, MODE.Exec 64-bit and TIP.PGE at `ip`.
fn start(enc: &mut Encoder<'_>, t: &mut Trace, ip: u64) {
    t.emit(enc, &Packet::Psb);
    t.emit(enc, &Packet::Psbend);
    t.emit(enc, &Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)));
    enc.ip_packet(IpPacketKind::TipPge, ip).expect("fits");
}

fn loop_trace(insns: u64) -> Vec<u8> {
    let iterations = insns / 5;
    let packets = iterations / 47 + 1;
    let mut t = Trace::new(packets as usize * 8 + 64);
    let mut buf = std::mem::take(&mut t.buf);
    let mut enc = Encoder::new(&mut buf);
    start(&mut enc, &mut t, BASE);
    let tnt = Tnt::from_results(std::iter::repeat_n(true, 47)).expect("47 bits");
    for _ in 0..packets {
        t.emit(&mut enc, &Packet::Tnt64(tnt));
    }
    t.pos = enc.offset();
    buf.truncate(t.pos);
    buf
}

fn call_trace(insns: u64, f2: u64, m3: u64) -> Vec<u8> {
    // 10 instructions per iteration.
    let iterations = insns / 10;
    let mut t = Trace::new(iterations as usize * 12 + 64);
    let mut buf = std::mem::take(&mut t.buf);
    let mut enc = Encoder::new(&mut buf);
    start(&mut enc, &mut t, BASE);
    let one = Tnt::from_results([true]).expect("1 bit");
    let two = Tnt::from_results([true, true]).expect("2 bits");
    for i in 0..iterations {
        // ret F1 (after the jnz of the previous iteration, if any)
        t.emit(&mut enc, &Packet::Tnt8(if i == 0 { one } else { two }));
        enc.ip_packet(IpPacketKind::Tip, BASE + f2).expect("fits");
        t.emit(&mut enc, &Packet::Tnt8(one)); // ret F2
        enc.ip_packet(IpPacketKind::Tip, BASE + m3).expect("fits");
    }
    let len = enc.offset();
    buf.truncate(len);
    buf
}

/// Decode the whole trace with the driver, item by item or (`quiet`) counting only as
/// ptxed `--quiet` does; returns the instructions and the seconds it took.
fn run(trace: &[u8], image: &Image, granularity: Granularity, quiet: bool) -> (u64, f64) {
    let t0 = Instant::now();
    let mut dec = Decoder::builder(trace, image)
        .granularity(granularity)
        .count_only(quiet)
        .build();
    let mut item = Item::default();
    while dec.next_into(&mut item) {
        if let Item::Error(e) = item {
            eprintln!("{e}");
            break;
        }
    }
    (dec.counts().insns, t0.elapsed().as_secs_f64())
}

fn run_blocks(trace: &[u8], image: &Image, quiet: bool) -> (u64, f64) {
    run(trace, image, Granularity::Blocks, quiet)
}

fn run_insns(trace: &[u8], image: &Image, quiet: bool) -> (u64, f64) {
    run(trace, image, Granularity::Instructions, quiet)
}

fn report(name: &str, decoder: &str, (insns, secs): (u64, f64)) {
    println!(
        "{name:6} {decoder:12} {insns:>12} insns {secs:8.3} s {:10.1} M insns/s",
        insns as f64 / secs / 1e6
    );
}

/// A decoder run: (trace, image, quiet) → (instructions, seconds).
type Runner = fn(&[u8], &Image, bool) -> (u64, f64);

fn report_all(name: &str, trace: &[u8], image: &Image) {
    // PTXED_SPEED_ONLY=name[,name] picks workloads and decoders ("calls", "block quiet").
    if let Ok(only) = std::env::var("PTXED_SPEED_ONLY") {
        let only: Vec<&str> = only.split(',').collect();
        let want = |d: &str| only.contains(&d);
        let runs: [(&str, Runner, bool); 4] = [
            ("block", run_blocks, false),
            ("block quiet", run_blocks, true),
            ("insn", run_insns, false),
            ("insn quiet", run_insns, true),
        ];
        for (d, f, q) in runs {
            if only.contains(&name) && (only.len() == 1 || want(d)) {
                report(name, d, f(trace, image, q));
            }
        }
        return;
    }
    report(name, "block", run_blocks(trace, image, false));
    report(name, "block quiet", run_blocks(trace, image, true));
    report(name, "insn", run_insns(trace, image, false));
    report(name, "insn quiet", run_insns(trace, image, true));
}

/// With `PTXED_SPEED_DUMP=dir`, writes `<name>.pt` and `<name>.bin` there (to time
/// other decoders: `ptxed --quiet --raw <name>.bin:0x401000 --pt <name>.pt`).
fn dump(name: &str, trace: &[u8], code: &[u8]) {
    if let Some(dir) = std::env::var_os("PTXED_SPEED_DUMP") {
        let dir = std::path::Path::new(&dir);
        let ok = std::fs::write(dir.join(format!("{name}.pt")), trace)
            .and_then(|()| std::fs::write(dir.join(format!("{name}.bin")), code));
        if let Err(e) = ok {
            eprintln!("cannot write {name} files: {e}");
        }
    }
}

fn main() {
    let million: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let insns = million * 1_000_000;

    let mut image = Image::new();
    image.add_bytes(BASE, loop_code(), "loop").expect("section");
    let trace = loop_trace(insns);
    println!("loop trace: {} bytes", trace.len());
    dump("loop", &trace, &loop_code());
    report_all("loop", &trace, &image);

    let mut image = Image::new();
    image.add_bytes(BASE, ret_code(), "ret").expect("section");
    let trace = ret_trace(insns);
    println!("ret trace: {} bytes", trace.len());
    dump("ret", &trace, &ret_code());
    report_all("ret", &trace, &image);

    let (code, f2, m3) = call_code();
    let mut image = Image::new();
    image
        .add_bytes(BASE, code.clone(), "calls")
        .expect("section");
    let trace = call_trace(insns / 4, f2, m3);
    println!("calls trace: {} bytes", trace.len());
    dump("calls", &trace, &code);
    report_all("calls", &trace, &image);
}
