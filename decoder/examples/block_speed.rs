//! How fast the block cache builds blocks (cold) and walks them (warm).
//!
//! Generates straight-line x86-64 code cut into blocks by conditional and direct
//! jumps, then walks it the way an instruction-flow decoder walks a trace: one TNT bit
//! per conditional jump (from a fixed pseudo-random sequence), counting instructions.
//!
//! `cargo run --release -p pt-decoder --example block_speed [blocks] [steps] [prefetch]`

use std::time::Instant;

use pt_decoder::block_cache::BlockCache;
use pt_decoder::image::Image;
use pt_decoder::insn::InsnClass;
use pt_encoder::packet::ExecMode;

/// Common non-branch instructions of various lengths.
const OTHERS: &[&[u8]] = &[
    &[0x90],                                     // nop
    &[0x48, 0x89, 0xd8],                         // mov rax, rbx
    &[0x48, 0x8d, 0x44, 0x24, 0x08],             // lea rax, [rsp+8]
    &[0x48, 0x83, 0xc0, 0x01],                   // add rax, 1
    &[0x8b, 0x45, 0xf8],                         // mov eax, [rbp-8]
    &[0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00], // mov rax, [rip+0x10]
    &[0xc7, 0x45, 0xfc, 0x01, 0x00, 0x00, 0x00], // mov dword [rbp-4], 1
    &[0x48, 0x85, 0xc0],                         // test rax, rax
];

use pt_testkit::Rng;

/// `blocks` blocks of 2-9 instructions each ending in `jcc rel32` to a random block;
/// the last one jumps back to the first.
fn generate(blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let mut code = Vec::new();
    let mut starts = Vec::new();
    let mut fixups = Vec::new();
    for i in 0..blocks {
        starts.push(code.len());
        for _ in 0..(1 + rng.next() % 8) {
            code.extend_from_slice(OTHERS[(rng.next() % OTHERS.len() as u64) as usize]);
        }
        let (op, target): (&[u8], usize) = if i + 1 == blocks {
            (&[0xe9], 0) // jmp rel32 to the first block
        } else {
            (&[0x0f, 0x84], (rng.next() % blocks as u64) as usize) // jz rel32
        };
        code.extend_from_slice(op);
        fixups.push((code.len(), target));
        code.extend_from_slice(&[0; 4]);
    }
    for (at, target) in fixups {
        let rel = starts[target] as i64 - (at as i64 + 4);
        code[at..at + 4].copy_from_slice(&(rel as i32).to_le_bytes());
    }
    code
}

fn main() {
    let mut args = std::env::args().skip(1);
    let blocks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let steps: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000_000);
    let prefetch: Option<u32> = args.next().and_then(|a| a.parse().ok());
    let base = 0x40_0000;
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    let code = generate(blocks, &mut rng);
    let mut image = Image::new();
    image.add_bytes(base, code.clone(), "generated").unwrap();

    // Cold: decode every block of the code once, by address. The first pass also
    // pays for iced-x86's one-time table setup; the second is the steady cold rate.
    let mut cache = BlockCache::new();
    if let Some(prefetch) = prefetch {
        cache.set_prefetch(prefetch);
    }
    for pass in ["first", "second"] {
        cache.clear();
        let start = Instant::now();
        let mut ip = base;
        let mut cold_insns = 0u64;
        let end = base + code.len() as u64;
        while ip < end {
            let id = cache.lookup(&image, ip, ExecMode::Bit64).unwrap();
            let block = cache.block(id);
            cold_insns += u64::from(block.ninsn);
            ip = block.fall_through();
        }
        let cold = start.elapsed();
        println!(
            "cold ({pass} pass): {} blocks, {} insns, {} bytes in {:.2} ms: \
             {:.1} M insns/s, {:.1} MB/s",
            cache.len(),
            cold_insns,
            code.len(),
            cold.as_secs_f64() * 1e3,
            cold_insns as f64 / cold.as_secs_f64() / 1e6,
            code.len() as f64 / cold.as_secs_f64() / 1e6,
        );
    }

    // Baseline: iced-x86 alone, one decoder over all the code.
    let start = Instant::now();
    let mut decoder = iced_x86::Decoder::with_ip(64, &code, base, 0);
    let mut instr = iced_x86::Instruction::default();
    let mut n = 0u64;
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        n += 1;
    }
    let iced = start.elapsed();
    println!(
        "iced-x86 decode_out alone: {n} insns in {:.2} ms: {:.1} M insns/s",
        iced.as_secs_f64() * 1e3,
        n as f64 / iced.as_secs_f64() / 1e6,
    );

    // Warm: walk `steps` blocks, one TNT bit per conditional jump.
    let mut id = cache.lookup(&image, base, ExecMode::Bit64).unwrap();
    let mut insns = 0u64;
    let mut bits = rng.next();
    let mut left = 64;
    let start = Instant::now();
    for _ in 0..steps {
        let block = cache.summary(id);
        insns += u64::from(block.ninsn);
        let taken = match block.class {
            InsnClass::CondJump => {
                if left == 0 {
                    bits = rng.next();
                    left = 64;
                }
                left -= 1;
                let bit = bits & 1 != 0;
                bits >>= 1;
                bit
            }
            _ => true,
        };
        id = cache.successor(&image, id, taken).unwrap();
    }
    let warm = start.elapsed();
    let stats = cache.stats();
    println!(
        "warm: {steps} blocks, {insns} insns in {:.1} ms: {:.1} M insns/s, {:.1} M blocks/s \
         ({} builds, {} hits, {} linked)",
        warm.as_secs_f64() * 1e3,
        insns as f64 / warm.as_secs_f64() / 1e6,
        steps as f64 / warm.as_secs_f64() / 1e6,
        stats.builds,
        stats.hits,
        stats.linked,
    );
}
