//! Snapshot tests of ptdump's output on traces built with the encoder, for the flag sets
//! that matter (layout columns, tracking, timing, filters, errors, JSON).

use pt_encoder::packet::IpCompression as C;
use pt_encoder::{ModeExec, ModeTsx, Packet, PtwSize, Tnt, WakeReason};
use pt_testkit::trace::encode as bytes;

/// `ptdump <flags> trace.pt` on `trace`: its standard output (stderr must be empty).
fn ptdump(trace: &[u8], flags: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "ptdump-snapshots-{}",
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("trace.pt"), trace).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ptdump"))
        .args(flags.split_whitespace())
        .arg("trace.pt")
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.is_empty(), "ptdump {flags}: {err}");
    String::from_utf8(o.stdout).unwrap()
}

fn tnt(bits: &str) -> Tnt {
    Tnt::from_results(bits.chars().map(|c| c == '!')).unwrap()
}

fn control_flow() -> Vec<u8> {
    bytes(&[
        Packet::Pad,
        Packet::Psb,
        Packet::ModeExec(ModeExec {
            csl: true,
            ..Default::default()
        }),
        Packet::fup(C::Sext48, 0xffff_8000_1000),
        Packet::Pip {
            cr3: 0x1234_5000,
            nr: false,
        },
        Packet::Vmcs { base: 0xabcd_e000 },
        Packet::Psbend,
        Packet::Tnt8(tnt("!!.")),
        Packet::Pad,
        Packet::tip(C::Update16, 0x2002),
        Packet::Tnt64(tnt("!.!.!.!.!.!.!.!.!.!.")),
        Packet::ModeTsx(ModeTsx {
            intx: true,
            abrt: false,
        }),
        Packet::fup(C::Update32, 0x8000_3000),
        Packet::ModeTsx(ModeTsx {
            intx: false,
            abrt: true,
        }),
        Packet::fup(C::Update16, 0x3010),
        Packet::tip(C::Full, 0x7fff_0000_4000),
        Packet::tip_pgd(C::Suppressed, 0),
        Packet::ModeExec(ModeExec {
            csd: true,
            iflag: true,
            ..Default::default()
        }),
        Packet::tip_pge(C::Update48, 0x5000),
        Packet::Stop,
    ])
}

fn timing() -> Vec<u8> {
    bytes(&[
        Packet::Psb,
        Packet::Tsc { tsc: 0xa0000 },
        Packet::Tma { ctc: 0xf012, fc: 6 },
        Packet::Cbr { ratio: 2 },
        Packet::Psbend,
        Packet::Cyc { value: 3 },
        Packet::Mtc { ctc: 2 },
        Packet::Cyc { value: 0x20 },
        Packet::Mtc { ctc: 3 },
        Packet::Cbr { ratio: 4 },
        Packet::Cyc { value: 7 },
        Packet::Mtc { ctc: 5 },
        Packet::Ovf,
        Packet::Cyc { value: 1 },
        Packet::Mtc { ctc: 6 },
        Packet::Cyc { value: 9 },
        Packet::Mtc { ctc: 7 },
        Packet::Cyc { value: 2 },
        Packet::Psb,
        Packet::Tsc { tsc: 0xa0100 },
        Packet::Tma { ctc: 0xf082, fc: 1 },
        Packet::Psbend,
        Packet::Cyc { value: 4 },
    ])
}

fn power_and_events() -> Vec<u8> {
    bytes(&[
        Packet::Psb,
        Packet::Psbend,
        Packet::Mwait {
            hints: 0x21,
            ext: 1,
        },
        Packet::Pwre {
            state: 1,
            sub_state: 0,
            hw: false,
        },
        Packet::Exstop { ip: true },
        Packet::fup(C::Sext48, 0x1000),
        Packet::Pwrx {
            last: 1,
            deepest: 2,
            wake: WakeReason {
                interrupt: true,
                ..Default::default()
            },
        },
        Packet::Ptw {
            size: PtwSize::Eight,
            payload: 0xdead_beef_0000_0001,
            ip: true,
        },
        Packet::fup(C::Update16, 0x1004),
        Packet::Evd {
            ty: 0,
            payload: 0x7fff_1234,
        },
        Packet::Cfe {
            ty: 1,
            vector: 14,
            ip: true,
        },
        Packet::fup(C::Update16, 0x1008),
        Packet::Cfe {
            ty: 5,
            vector: 0x1a,
            ip: false,
        },
        Packet::Mnt { payload: 0x1122 },
        Packet::Trig {
            trbv: 0x1a,
            ip: true,
            mult: false,
            icnt: Some(7),
        },
        Packet::fup(C::Update16, 0x100c),
    ])
}

fn with_errors() -> Vec<u8> {
    let mut v = vec![0x55, 0x66];
    v.extend(bytes(&[
        Packet::Psb,
        Packet::fup(C::Sext48, 0x1000),
        Packet::Psbend,
        Packet::Tnt8(tnt("!")),
    ]));
    v.push(0xc9); // undefined opcode
    v.extend([0u8; 5]);
    v.extend(bytes(&[Packet::Psb, Packet::Psbend]));
    v.extend([0xad, 0, 0, 0, 0, 0, 0]); // reserved IP compression
    v.extend(bytes(&[Packet::Psb, Packet::Tnt8(tnt(".."))]));
    v.extend([0x19, 1, 2]); // TSC cut off by the end of the trace
    v
}

#[test]
fn control_flow_default() {
    insta::assert_snapshot!(ptdump(&control_flow(), ""));
}

#[test]
fn control_flow_raw_lastip_exec_mode() {
    insta::assert_snapshot!(ptdump(&control_flow(), "--raw --lastip --exec-mode"));
}

#[test]
fn control_flow_no_offset_no_pad_no_sync() {
    insta::assert_snapshot!(ptdump(&control_flow(), "--no-offset --no-pad --no-sync"));
}

const TIMING_CONFIG: &str = "--mtc-freq 4 --cpuid-0x15.eax 2 --cpuid-0x15.ebx 1";

#[test]
fn timing_time() {
    insta::assert_snapshot!(ptdump(&timing(), &format!("--time {TIMING_CONFIG}")));
}

#[test]
fn timing_time_delta_nom_freq() {
    insta::assert_snapshot!(ptdump(
        &timing(),
        &format!("--time --time-delta --nom-freq 4 {TIMING_CONFIG}")
    ));
}

#[test]
fn timing_tcal_delta() {
    insta::assert_snapshot!(ptdump(
        &timing(),
        &format!("--tcal --time-delta {TIMING_CONFIG}")
    ));
}

#[test]
fn timing_tcal_keep_on_ovf() {
    insta::assert_snapshot!(ptdump(
        &timing(),
        &format!("--tcal --keep-tcal-on-ovf {TIMING_CONFIG}")
    ));
}

#[test]
fn timing_no_tcal_no_wall_clock() {
    insta::assert_snapshot!(ptdump(
        &timing(),
        &format!("--time --time-delta --no-tcal --no-wall-clock {TIMING_CONFIG}")
    ));
}

#[test]
fn timing_without_cpuid() {
    insta::assert_snapshot!(ptdump(&timing(), "--time --mtc-freq 4"));
}

#[test]
fn timing_hidden() {
    insta::assert_snapshot!(ptdump(&timing(), "--no-timing"));
    insta::assert_snapshot!(ptdump(
        &timing(),
        &format!("--no-cyc --time {TIMING_CONFIG}")
    ));
}

#[test]
fn power_and_event_packets() {
    insta::assert_snapshot!(ptdump(&power_and_events(), "--raw"));
}

#[test]
fn errors_and_resync() {
    insta::assert_snapshot!(ptdump(&with_errors(), "--lastip"));
    insta::assert_snapshot!(ptdump(&with_errors(), "--quiet"));
}

#[test]
fn json_lines() {
    insta::assert_snapshot!(ptdump(&control_flow(), "--json --lastip"));
    insta::assert_snapshot!(ptdump(&with_errors(), "--json"));
    insta::assert_snapshot!(ptdump(&timing(), &format!("--json --time {TIMING_CONFIG}")));
}
