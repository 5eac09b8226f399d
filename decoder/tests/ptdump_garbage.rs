//! ptdump on thousands of garbage, truncated and bit-flipped traces: it must never panic,
//! must terminate, and every line must be a packet line or a diagnostic with an offset
//! inside the trace.

use pt_decoder::config::{Config, Errata};
use pt_decoder::dump::{dump, DumpOptions};
use pt_encoder::packet::IpCompression as C;
use pt_encoder::{encode_to_vec, ModeExec, Packet, Tnt};
use pt_testkit::Rng;

/// A plausible trace: PSB+, control flow and timing packets.
fn plausible(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    let mut put = |p: Packet| encode_to_vec(&p, &mut v).unwrap();
    let n = 1 + rng.below(60);
    for _ in 0..n {
        let p = match rng.below(14) {
            0 => Packet::Psb,
            1 => Packet::Psbend,
            2 => Packet::Tsc {
                tsc: rng.next() >> 8,
            },
            3 => Packet::Tma {
                ctc: rng.next() as u16,
                fc: rng.below(512) as u16,
            },
            4 => Packet::Mtc {
                ctc: rng.next() as u8,
            },
            5 => Packet::Cyc {
                value: rng.next() >> (4 + rng.below(60)),
            },
            6 => Packet::Cbr {
                ratio: rng.next() as u8,
            },
            7 => Packet::Ovf,
            8 => Packet::Tnt8(Tnt::from_results([true, false, rng.below(2) == 0]).unwrap()),
            9 => Packet::fup(C::Sext48, rng.next()),
            10 => Packet::tip(C::Update16, rng.next()),
            11 => Packet::ModeExec(ModeExec {
                csl: rng.below(2) == 0,
                ..Default::default()
            }),
            12 => Packet::Pad,
            _ => Packet::tip_pgd(C::Suppressed, 0),
        };
        put(p);
    }
    v
}

fn mutate(rng: &mut Rng, mut v: Vec<u8>) -> Vec<u8> {
    match rng.below(4) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                if !v.is_empty() {
                    let i = rng.below(v.len() as u64) as usize;
                    v[i] ^= 1 << rng.below(8);
                }
            }
        }
        1 => {
            let keep = rng.below(v.len() as u64 + 1) as usize;
            v.truncate(keep);
        }
        2 => {
            let at = rng.below(v.len() as u64 + 1) as usize;
            let junk: Vec<u8> = (0..rng.below(24)).map(|_| rng.next() as u8).collect();
            v.splice(at..at, junk);
        }
        _ => {}
    }
    v
}

fn option_sets() -> Vec<(DumpOptions, Config)> {
    let timing = Config {
        mtc_freq: 3,
        nom_freq: 4,
        cpuid_0x15_eax: 2,
        cpuid_0x15_ebx: 7,
        ..Default::default()
    };
    let mut skl = timing;
    skl.errata = Errata::for_cpu("6/94".parse().unwrap()).unwrap();
    let skx = Config {
        errata: Errata::for_cpu("6/85".parse().unwrap()).unwrap(),
        ..Default::default()
    };
    let d = DumpOptions::default();
    vec![
        (d, Config::default()),
        (
            DumpOptions {
                show_raw_bytes: true,
                show_last_ip: true,
                show_exec_mode: true,
                no_sync: true,
                ..d
            },
            skx,
        ),
        (
            DumpOptions {
                track_time: true,
                show_time: true,
                show_time_as_delta: true,
                ..d
            },
            skl,
        ),
        (
            DumpOptions {
                track_time: true,
                show_tcal: true,
                keep_tcal_on_ovf: true,
                no_wall_clock: true,
                ..d
            },
            Config {
                mtc_freq: 30,
                cpuid_0x15_eax: 1,
                cpuid_0x15_ebx: u32::MAX,
                ..timing
            },
        ),
        (
            DumpOptions {
                json: true,
                no_sync: true,
                track_time: true,
                show_time: true,
                ..d
            },
            timing,
        ),
    ]
}

/// Every line is a diagnostic `[<hex offset>: …]`, a JSON object, or a packet line that
/// starts with a 16-digit offset; all offsets lie inside the trace.
fn check(out: &str, trace_len: usize, opts: &DumpOptions) {
    for line in out.lines() {
        let off = if let Some(rest) = line.strip_prefix('[') {
            let hex = rest.split(':').next().unwrap();
            u64::from_str_radix(hex, 16).expect(line)
        } else if opts.json {
            assert!(
                line.starts_with("{\"offset\":") && line.ends_with('}'),
                "{line}"
            );
            let num = &line[10..line.find(',').expect(line)];
            num.parse().expect(line)
        } else {
            u64::from_str_radix(line.get(..16).expect(line), 16).expect(line)
        };
        assert!(
            off <= trace_len as u64,
            "offset {off:#x} beyond {trace_len:#x}: {line}"
        );
    }
}

#[test]
fn garbage_never_panics_and_terminates() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let sets = option_sets();
    let mut total_lines = 0usize;
    for i in 0..8000 {
        let trace = if i % 3 == 0 {
            (0..rng.below(300)).map(|_| rng.next() as u8).collect()
        } else {
            let base = plausible(&mut rng);
            mutate(&mut rng, base)
        };
        let (opts, config) = &sets[i % sets.len()];
        let mut out = Vec::new();
        dump(&trace, config, opts, &mut out).unwrap();
        // Each byte yields at most one packet line and a few diagnostics.
        assert!(out.len() <= 400 * (trace.len() + 1), "runaway output");
        let text = String::from_utf8(out).expect("utf-8");
        total_lines += text.lines().count();
        check(&text, trace.len(), opts);
    }
    // The corpus is not all noise: plenty of packets were printed.
    assert!(total_lines > 10_000, "only {total_lines} lines");
}

/// `--quiet` decodes through flat records, the full dump through typed packets: both must
/// meet the same errors at the same offsets.
#[test]
fn quiet_prints_exactly_the_diagnostics_of_the_full_dump() {
    let mut rng = Rng(0x0dd_ba11_5eed);
    let skl = Config {
        errata: Errata::for_cpu("6/94".parse().unwrap()).unwrap(),
        ..Default::default()
    };
    let mut diagnostics = 0;
    for i in 0..3000 {
        let mut trace = plausible(&mut rng);
        // Long enough stretches for the windowed fast paths.
        trace.extend(plausible(&mut rng));
        let trace = mutate(&mut rng, trace);
        let config = if i % 2 == 0 { Config::default() } else { skl };
        let run = |quiet: bool| {
            let opts = DumpOptions {
                quiet,
                ..DumpOptions::default()
            };
            let mut out = Vec::new();
            dump(&trace, &config, &opts, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let full: Vec<String> = run(false)
            .lines()
            .filter(|l| l.starts_with('['))
            .map(str::to_owned)
            .collect();
        let quiet: Vec<String> = run(true).lines().map(str::to_owned).collect();
        assert_eq!(quiet, full, "trace {trace:02x?}");
        diagnostics += quiet.len();
    }
    assert!(diagnostics > 500, "only {diagnostics} diagnostics");
}
