//! Write a generated flow trace and its code for other decoders, and print its mix:
//! `flowtrace tnt_loop|calls|calls_mixed INSNS DIR [OUTER INNER G_LOOP RET_TIP FULL]`.
//!
//! Writes `DIR/NAME.pt`, the sections `DIR/NAME-<i>.bin` and `DIR/NAME.args` (ptxed
//! `--raw` options), as the `flow` bench does with `PT_FLOW_DUMP`. The optional numbers
//! override [`pt_benches::flow::CallsMix::DEFAULT`] for `calls_mixed`.

use pt_benches::flow::{self, CallsMix, TraceMix};
use pt_encoder::packet::IpCompression;
use std::path::Path;
use std::process::exit;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(name), Some(insns), Some(dir)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!(
            "usage: flowtrace tnt_loop|calls|calls_mixed INSNS DIR \
             [OUTER INNER G_LOOP RET_TIP FULL]"
        );
        exit(2);
    };
    let Ok(insns) = insns.parse::<u64>() else {
        eprintln!("flowtrace: bad instruction count '{insns}'");
        exit(2);
    };
    let mut mix = CallsMix::DEFAULT;
    let knobs: Vec<u64> = args
        .get(4..)
        .unwrap_or_default()
        .iter()
        .map(|a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("flowtrace: bad number '{a}'");
                exit(2)
            })
        })
        .collect();
    for (slot, v) in [
        &mut mix.outer,
        &mut mix.inner,
        &mut mix.g_loop,
        &mut mix.ret_tip_one_in,
        &mut mix.full_one_in,
    ]
    .into_iter()
    .zip(knobs)
    {
        *slot = v;
    }
    let t = match name.as_str() {
        "tnt_loop" => flow::tnt_loop(insns),
        "calls" => flow::calls(insns),
        "calls_mixed" => flow::calls_mixed(insns, mix),
        _ => {
            eprintln!("flowtrace: unknown trace '{name}' (tnt_loop, calls or calls_mixed)");
            exit(2);
        }
    };
    if let Err(e) = write(name, &t, Path::new(dir)) {
        eprintln!("flowtrace: {dir}: {e}");
        exit(1);
    }
    let m = match TraceMix::of(&t.trace) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("flowtrace: the generated trace does not decode: {e}");
            exit(1);
        }
    };
    let per = |n: u64| t.insns as f64 / n.max(1) as f64;
    println!(
        "{name}: {} instructions, {} bytes ({:.2} bytes per 100 instructions)",
        t.insns,
        t.trace.len(),
        t.trace.len() as f64 * 100.0 / t.insns as f64
    );
    println!(
        "  {} TIPs ({:.1} instructions each), {} TNT bits ({:.2} instructions each)",
        m.tip_count(),
        per(m.tip_count()),
        m.tnt_bits,
        per(m.tnt_bits)
    );
    print!("  TIP IP compression:");
    for c in IpCompression::ALL {
        let n = m.tips_with(c);
        print!(
            " {c:?} {n} ({:.1}%)",
            100.0 * n as f64 / m.tip_count().max(1) as f64
        );
    }
    println!();
    println!(
        "  PSB {}, TSC {}, MTC {}, CYC {}",
        m.psb, m.tsc, m.mtc, m.cyc
    );
}

fn write(name: &str, t: &flow::FlowTrace, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(format!("{name}.pt")), &t.trace)?;
    let mut args = String::new();
    for (i, (addr, bytes)) in t.sections.iter().enumerate() {
        let file = dir.join(format!("{name}-{i}.bin"));
        std::fs::write(&file, bytes)?;
        args.push_str(&format!("--raw {}:{addr:#x} ", file.display()));
    }
    std::fs::write(dir.join(format!("{name}.args")), format!("{args}\n"))
}
