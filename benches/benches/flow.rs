//! Flow decoding (ptxed `--quiet`: reconstruct and count, print nothing) in instructions
//! per second, with the block and the instruction decoder, on three generated programs
//! ([`pt_benches::flow`]): a TNT-only loop, a call/indirect-jump heavy trace (`calls`,
//! a TIP every 6 instructions) and a sparser one of the density the issue quotes libipt at
//! (`calls_mixed`: calls with loops in the callees, a TIP every 24 instructions), both
//! with every IP compression, timing packets and PSB+ every 4 KiB.
//!
//! With `PT_FLOW_DUMP=dir`, writes each trace (`<name>.pt`) and its sections
//! (`<name>-<i>.bin`, with a `<name>.args` line of ptxed `--raw` options) there, to time
//! other decoders on the same input.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_benches::flow::{self, quiet_blocks, quiet_insns, CallsMix, FlowTrace};
use pt_decoder::config::Config;
use std::hint::black_box;

/// Instructions per trace.
const INSNS: u64 = 50_000_000;

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
        ("calls_mixed", flow::calls_mixed(INSNS, CallsMix::DEFAULT)),
    ] {
        dump(name, &t);
        let image = t.image();
        let config = Config::default();
        // The count the throughput claims must be what the decoders reconstruct.
        assert_eq!(
            quiet_blocks(&t.trace, &image, &config),
            t.insns,
            "{name}: block decoder"
        );
        assert_eq!(
            quiet_insns(&t.trace, &image, &config),
            t.insns,
            "{name}: insn decoder"
        );
        g.throughput(Throughput::Elements(t.insns));
        g.bench_function(format!("{name}/block_quiet"), |b| {
            b.iter(|| quiet_blocks(black_box(&t.trace), &image, &config))
        });
        g.bench_function(format!("{name}/insn_quiet"), |b| {
            b.iter(|| quiet_insns(black_box(&t.trace), &image, &config))
        });
    }
    g.finish();
}

criterion_group!(benches, flow);
criterion_main!(benches);
