//! Flow decoding (ptxed `--quiet`: reconstruct and count, print nothing) in instructions
//! per second, with the block and the instruction decoder, on two generated programs
//! ([`pt_benches::flow`]): a TNT-only loop and a call/indirect-jump heavy trace with
//! every IP compression, timing packets and PSB+ every 4 KiB.
//!
//! With `PT_FLOW_DUMP=dir`, writes each trace (`<name>.pt`) and its sections
//! (`<name>-<i>.bin`, with a `<name>.args` line of ptxed `--raw` options) there, to time
//! other decoders on the same input.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_benches::flow::{self, FlowTrace};
use pt_decoder::config::Config;
use pt_decoder::flow::{Block, BlockDecoder, FlowOptions, InsnDecoder, InsnInfo};
use pt_decoder::image::Image;
use pt_encoder::packet::ExecMode;
use std::hint::black_box;

/// Instructions per trace.
const INSNS: u64 = 50_000_000;

/// The block decoder as ptxed `--quiet` drives it: counts skipped runs and blocks.
fn blocks(trace: &[u8], image: &Image) -> u64 {
    let config = Config::default();
    let mut dec = BlockDecoder::new(trace, image, &config, FlowOptions::default());
    let mut block = Block {
        ip: 0,
        end_ip: 0,
        mode: ExecMode::Unknown,
        ninsn: 0,
        speculative: false,
        truncated: false,
        isid: 0,
        class: None,
    };
    let mut insns = 0;
    let Ok(mut status) = dec.sync_forward() else {
        return 0;
    };
    loop {
        while status.event_pending {
            match dec.event() {
                Ok((_, s)) => status = s,
                Err(_) => return insns,
            }
        }
        if status.eos {
            return insns;
        }
        insns += dec.skip_blocks().0;
        let r = dec.next(&mut block);
        insns += u64::from(block.ninsn);
        match r {
            Ok(s) => status = s,
            Err(_) => return insns,
        }
    }
}

/// The instruction decoder as ptxed `--quiet --insn-decoder` drives it.
fn insns(trace: &[u8], image: &Image) -> u64 {
    let config = Config::default();
    let mut dec = InsnDecoder::new(trace, image, &config, FlowOptions::default());
    let mut insn = InsnInfo {
        ip: 0,
        size: 0,
        mode: ExecMode::Unknown,
        speculative: false,
        isid: 0,
        class: None,
    };
    let mut insns = 0;
    let Ok(mut status) = dec.sync_forward() else {
        return 0;
    };
    loop {
        while status.event_pending {
            match dec.event() {
                Ok((_, s)) => status = s,
                Err(_) => return insns,
            }
        }
        if status.eos {
            return insns;
        }
        insns += dec.skip_blocks();
        match dec.next(&mut insn) {
            Ok(s) => {
                insns += 1;
                status = s;
            }
            Err(pt_decoder::ErrorCode::EventIgnored) => status.event_pending = true,
            Err(_) => return insns + u64::from(insn.class.is_some()),
        }
    }
}

fn dump(name: &str, t: &FlowTrace) {
    let Some(dir) = std::env::var_os("PT_FLOW_DUMP") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let mut args = String::new();
    let mut write = || -> std::io::Result<()> {
        std::fs::write(dir.join(format!("{name}.pt")), &t.trace)?;
        for (i, (addr, bytes)) in t.sections.iter().enumerate() {
            let file = dir.join(format!("{name}-{i}.bin"));
            std::fs::write(&file, bytes)?;
            args.push_str(&format!("--raw {}:{addr:#x} ", file.display()));
        }
        std::fs::write(dir.join(format!("{name}.args")), format!("{args}\n"))
    };
    if let Err(e) = write() {
        eprintln!("cannot write the {name} files: {e}");
    }
}

fn flow(c: &mut Criterion) {
    let mut g = c.benchmark_group("flow");
    g.sample_size(10);
    for (name, t) in [
        ("tnt_loop", flow::tnt_loop(INSNS)),
        ("calls", flow::calls(INSNS)),
    ] {
        dump(name, &t);
        let image = t.image();
        // The count the throughput claims must be what the decoders reconstruct.
        assert_eq!(blocks(&t.trace, &image), t.insns, "{name}: block decoder");
        assert_eq!(insns(&t.trace, &image), t.insns, "{name}: insn decoder");
        g.throughput(Throughput::Elements(t.insns));
        g.bench_function(format!("{name}/block_quiet"), |b| {
            b.iter(|| blocks(black_box(&t.trace), &image))
        });
        g.bench_function(format!("{name}/insn_quiet"), |b| {
            b.iter(|| insns(black_box(&t.trace), &image))
        });
    }
    g.finish();
}

criterion_group!(benches, flow);
criterion_main!(benches);
