//! Unit tests of the packet formats, tracking columns and diagnostics.

use super::*;
use pt_encoder::packet::{IpCompression as C, IpPayload};
use pt_encoder::{encode_to_vec, ModeExec, ModeTsx, PtwSize, Tnt, WakeReason};

fn bytes(packets: &[Packet]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in packets {
        encode_to_vec(p, &mut v).unwrap();
    }
    v
}

fn run(trace: &[u8], opts: DumpOptions, config: Config) -> String {
    let mut out = Vec::new();
    dump(trace, &config, &opts, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn no_offset() -> DumpOptions {
    DumpOptions {
        show_offset: false,
        ..Default::default()
    }
}

/// The line of a single packet behind a PSB, printed without offsets.
fn line_of(p: Packet) -> String {
    let out = run(&bytes(&[Packet::Psb, p]), no_offset(), Config::default());
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("psb"));
    let l = lines.next().unwrap_or_default().to_string();
    assert_eq!(lines.next(), None, "one line expected: {out}");
    l
}

#[test]
fn simple_packets() {
    assert_eq!(line_of(Packet::Pad), "pad");
    assert_eq!(line_of(Packet::Psbend), "psbend");
    assert_eq!(line_of(Packet::Ovf), "ovf");
    assert_eq!(line_of(Packet::Stop), "stop");
    assert_eq!(line_of(Packet::Exstop { ip: false }), "exstop");
    assert_eq!(line_of(Packet::Exstop { ip: true }), "exstop     ip");
}

#[test]
fn tnt_oldest_first() {
    let t = Tnt::from_results([true, true, false]).unwrap();
    assert_eq!(line_of(Packet::Tnt8(t)), "tnt.8      !!.");
    let long = Tnt::from_results((0..47).map(|i| i % 3 == 0)).unwrap();
    let want: String = (0..47)
        .map(|i| if i % 3 == 0 { '!' } else { '.' })
        .collect();
    assert_eq!(line_of(Packet::Tnt64(long)), format!("tnt.64     {want}"));
}

#[test]
fn ip_packets_by_compression() {
    let ip = |c, v| Packet::Ip(IpPacketKind::Tip, IpPayload::new(c, v));
    assert_eq!(
        line_of(ip(C::Suppressed, 0)),
        "tip        0: ????????????????"
    );
    assert_eq!(
        line_of(ip(C::Update16, 0x1002)),
        "tip        1: ????????????1002"
    );
    assert_eq!(
        line_of(ip(C::Update32, 0x1002)),
        "tip        2: ????????00001002"
    );
    assert_eq!(
        line_of(ip(C::Update48, 0x1002)),
        "tip        4: ????000000001002"
    );
    assert_eq!(
        line_of(ip(C::Sext48, 0xffff_ffff_1000)),
        "tip        3: ffffffffffff1000"
    );
    assert_eq!(
        line_of(ip(C::Full, 0x1234)),
        "tip        6: 0000000000001234"
    );
    assert_eq!(
        line_of(Packet::tip_pge(C::Sext48, 0x2000)),
        "tip.pge    3: 0000000000002000"
    );
    assert_eq!(
        line_of(Packet::tip_pgd(C::Suppressed, 0)),
        "tip.pgd    0: ????????????????"
    );
    assert_eq!(
        line_of(Packet::fup(C::Update16, 0x4002)),
        "fup        1: ????????????4002"
    );
}

#[test]
fn modes() {
    let exec = |csl, csd, iflag| Packet::ModeExec(ModeExec { csl, csd, iflag });
    assert_eq!(line_of(exec(false, false, false)), "mode.exec");
    assert_eq!(line_of(exec(true, false, false)), "mode.exec  cs.l");
    assert_eq!(line_of(exec(false, true, true)), "mode.exec  cs.d, if");
    assert_eq!(line_of(exec(false, false, true)), "mode.exec  if");
    assert_eq!(line_of(exec(true, true, true)), "mode.exec  cs.d, cs.l, if");
    let tsx = |intx, abrt| Packet::ModeTsx(ModeTsx { intx, abrt });
    assert_eq!(line_of(tsx(false, false)), "mode.tsx");
    assert_eq!(line_of(tsx(true, false)), "mode.tsx   intx");
    assert_eq!(line_of(tsx(false, true)), "mode.tsx   abrt");
    assert_eq!(line_of(tsx(true, true)), "mode.tsx   intx, abrt");
}

#[test]
fn paging_and_vmcs_with_tracking_column() {
    assert_eq!(
        line_of(Packet::Pip {
            cr3: 0xafafa0,
            nr: true
        }),
        "pip        afafa0, nr                cr3  0000000000afafa0"
    );
    assert_eq!(
        line_of(Packet::Pip { cr3: 0, nr: false }),
        "pip        0                         cr3  0000000000000000"
    );
    assert_eq!(
        line_of(Packet::Vmcs { base: 0xabcd000 }),
        "vmcs       abcd000                   vmcs 000000000abcd000"
    );
}

#[test]
fn timing_packets() {
    assert_eq!(line_of(Packet::Tsc { tsc: 0x12345 }), "tsc        12345");
    assert_eq!(line_of(Packet::Mtc { ctc: 0xc }), "mtc        c");
    assert_eq!(
        line_of(Packet::Tma {
            ctc: 0x12,
            fc: 0x34
        }),
        "tma        12, 34"
    );
    assert_eq!(line_of(Packet::Cyc { value: 0x57 }), "cyc        57");
    assert_eq!(line_of(Packet::Cbr { ratio: 0x23 }), "cbr        23");
}

#[test]
fn power_and_ptwrite_packets() {
    assert_eq!(
        line_of(Packet::Mwait { hints: 0xb, ext: 1 }),
        "mwait      0000000b, 00000001"
    );
    assert_eq!(
        line_of(Packet::Pwre {
            state: 0xf,
            sub_state: 0xf,
            hw: false
        }),
        "pwre       c0.0"
    );
    // The SDM's HW flag (B2[7], what the encoder writes) and libipt's (B2[3]) both count.
    assert_eq!(
        line_of(Packet::Pwre {
            state: 0,
            sub_state: 1,
            hw: true
        }),
        "pwre       c1.2, hw"
    );
    let mut raw = bytes(&[Packet::Psb]);
    raw.extend([0x02, 0x22, 0x08, 0x00]);
    let out = run(&raw, no_offset(), Config::default());
    assert_eq!(out.lines().nth(1), Some("pwre       c1.1, hw"));
    let wake = |interrupt, store, autonomous| WakeReason {
        interrupt,
        store,
        autonomous,
    };
    let pwrx = |w| Packet::Pwrx {
        last: 0,
        deepest: 5,
        wake: w,
    };
    assert_eq!(
        line_of(pwrx(wake(true, false, false))),
        "pwrx       int: c1, c6"
    );
    assert_eq!(
        line_of(pwrx(wake(false, true, false))),
        "pwrx        st: c1, c6"
    );
    assert_eq!(
        line_of(pwrx(wake(false, false, true))),
        "pwrx        hw: c1, c6"
    );
    assert_eq!(
        line_of(pwrx(wake(false, false, false))),
        "pwrx       bad: c1, c6"
    );
    assert_eq!(
        line_of(pwrx(wake(true, true, false))),
        "pwrx       bad: c1, c6"
    );
    assert_eq!(
        line_of(Packet::Ptw {
            size: PtwSize::Four,
            payload: 0x90abcdef,
            ip: true
        }),
        "ptw        0: 90abcdef, ip"
    );
    assert_eq!(
        line_of(Packet::Ptw {
            size: PtwSize::Eight,
            payload: u64::MAX,
            ip: false
        }),
        "ptw        1: ffffffffffffffff"
    );
    assert_eq!(line_of(Packet::Mnt { payload: 0xabc }), "mnt        abc");
}

#[test]
fn event_trace_and_trig() {
    let cfe = |ty, vector, ip| Packet::Cfe { ty, vector, ip };
    assert_eq!(
        line_of(cfe(1, 14, false)),
        "cfe        1: 14                     type intr"
    );
    assert_eq!(
        line_of(cfe(5, 0x1f, true)),
        "cfe        5: 1f, ip                 type sipi"
    );
    assert_eq!(
        line_of(cfe(2, 0, true)),
        "cfe        2, ip                     type iret"
    );
    assert_eq!(
        line_of(cfe(14, 3, false)),
        "cfe        14: 3                     type swintr"
    );
    assert_eq!(
        line_of(cfe(20, 3, false)),
        "cfe        20                        type unknown"
    );
    let evd = |ty, payload| Packet::Evd { ty, payload };
    assert_eq!(
        line_of(evd(2, 0xf00baa)),
        "evd        2: f00baa                 type vmxr"
    );
    assert_eq!(
        line_of(evd(0, 1)),
        "evd        0: 1                      type cr2"
    );
    assert_eq!(
        line_of(evd(1, 1)),
        "evd        1: 1                      type vmxq"
    );
    assert_eq!(
        line_of(evd(9, 1)),
        "evd        9: 1                      type unknown"
    );
    assert_eq!(
        line_of(Packet::Trig {
            trbv: 0xa1,
            ip: true,
            mult: true,
            icnt: Some(23)
        }),
        "trig       a1, ip, mult, icnt: 23"
    );
    assert_eq!(
        line_of(Packet::Trig {
            trbv: 1,
            ip: false,
            mult: false,
            icnt: None
        }),
        "trig       01"
    );
}

#[test]
fn offset_and_raw_columns() {
    let trace = bytes(&[
        Packet::Psb,
        Packet::Tnt8(Tnt::from_results([true]).unwrap()),
    ]);
    let opts = DumpOptions {
        show_raw_bytes: true,
        ..Default::default()
    };
    let out = run(&trace, opts, Config::default());
    assert_eq!(
        out,
        "0000000000000000  02820282028202820282028202820282  psb\n\
         0000000000000010  06                                tnt.8      !\n"
    );
}

#[test]
fn last_ip_and_exec_mode_columns() {
    let trace = bytes(&[
        Packet::Psb,
        Packet::tip(C::Suppressed, 0),
        Packet::fup(C::Sext48, 0x1000),
        Packet::tip(C::Update16, 0x2002),
        Packet::tip(C::Suppressed, 0),
        Packet::ModeExec(ModeExec {
            csl: true,
            ..Default::default()
        }),
    ]);
    let opts = DumpOptions {
        show_offset: false,
        show_last_ip: true,
        show_exec_mode: true,
        ..Default::default()
    };
    let out = run(&trace, opts, Config::default());
    assert_eq!(
        out,
        "psb\n\
         [10: error tracking last-ip: no ip]\n\
         tip        0: ????????????????       ip   <unavailable>\n\
         fup        3: 0000000000001000       ip   0000000000001000\n\
         tip        1: ????????????2002       ip   0000000000002002\n\
         tip        0: ????????????????       ip   <suppressed>\n\
         mode.exec  cs.l                      em   64-bit\n"
    );
}

#[test]
fn filters_hide_lines() {
    let trace = bytes(&[
        Packet::Psb,
        Packet::Pad,
        Packet::Tsc { tsc: 1 },
        Packet::Cyc { value: 1 },
        Packet::Psbend,
    ]);
    let o = |f: fn(&mut DumpOptions)| {
        let mut opts = no_offset();
        f(&mut opts);
        run(&trace, opts, Config::default())
    };
    assert_eq!(
        o(|o| o.no_pad = true),
        "psb\ntsc        1\ncyc        1\npsbend\n"
    );
    assert_eq!(o(|o| o.no_timing = true), "psb\npad\npsbend\n");
    assert_eq!(o(|o| o.no_cyc = true), "psb\npad\ntsc        1\npsbend\n");
    assert_eq!(o(|o| o.quiet = true), "");
}

#[test]
fn time_and_calibration_columns() {
    // Spec §7.4's example: --nom-freq 4 --time --time-delta.
    let trace = bytes(&[
        Packet::Psb,
        Packet::Tsc { tsc: 0xa000 },
        Packet::Cbr { ratio: 2 },
        Packet::Psbend,
        Packet::Cyc { value: 4 },
    ]);
    let config = Config {
        nom_freq: 4,
        ..Default::default()
    };
    let opts = DumpOptions {
        show_offset: false,
        track_time: true,
        show_time: true,
        show_time_as_delta: true,
        ..Default::default()
    };
    assert_eq!(
        run(&trace, opts, config),
        "psb\n\
         tsc        a000                      tsc  +a000\n\
         cbr        2\n\
         psbend\n\
         cyc        4                         tsc  +8\n"
    );
    let abs = DumpOptions {
        show_time_as_delta: false,
        ..opts
    };
    assert!(run(&trace, abs, config)
        .contains("cyc        4                         tsc  000000000000a008"));
    let tcal = DumpOptions {
        show_time: false,
        show_tcal: true,
        ..opts
    };
    assert_eq!(
        run(&trace, tcal, config),
        "psb\n\
         [10: error printing time: no timing information]\n\
         tsc        a000                      fcr  <unavailable>\n\
         cbr        2                         fcr  +2.000\n\
         psbend\n\
         cyc        4\n"
    );
    let tcal_abs = DumpOptions {
        show_time_as_delta: false,
        ..tcal
    };
    assert!(
        run(&trace, tcal_abs, config).contains("cbr        2                         fcr  2.000")
    );
}

#[test]
fn time_errors() {
    // A CYC without calibration, and a TSC-less time with and without a wall clock.
    let trace = bytes(&[Packet::Psb, Packet::Cyc { value: 3 }]);
    let opts = DumpOptions {
        show_offset: false,
        track_time: true,
        show_time: true,
        ..Default::default()
    };
    assert_eq!(
        run(&trace, opts, Config::default()),
        "psb\n\
         [10: calibration error: no timing information]\n\
         [10: error updating time: no calibration]\n\
         [10: error printing time: no timing information]\n\
         cyc        3                         tsc  <unavailable>\n"
    );
    let wall = DumpOptions {
        no_wall_clock: true,
        no_tcal: true,
        ..opts
    };
    assert_eq!(
        run(&trace, wall, Config::default()),
        "psb\n\
         [10: error updating time: no calibration]\n\
         cyc        3                         tsc  0000000000000000\n"
    );
    // MTC without CPUID 0x15 is a configuration error.
    let trace = bytes(&[
        Packet::Psb,
        Packet::Tsc { tsc: 0x100 },
        Packet::Tma { ctc: 0, fc: 0 },
        Packet::Mtc { ctc: 1 },
    ]);
    let out = run(
        &trace,
        DumpOptions {
            no_tcal: true,
            ..opts
        },
        Config::default(),
    );
    assert!(
        out.contains("[1f: error updating time: bad configuration]\nmtc        1"),
        "{out}"
    );
}

#[test]
fn decode_errors_resync_at_next_psb() {
    let mut trace = bytes(&[Packet::Psb, Packet::Pad]);
    trace.extend([0xc9, 0x00, 0x00]);
    let second = trace.len();
    trace.extend(bytes(&[Packet::Psb, Packet::Psbend]));
    let out = run(&trace, DumpOptions::default(), Config::default());
    assert_eq!(
        out,
        format!(
            "0000000000000000  psb\n\
             0000000000000010  pad\n\
             [11: error decoding packet: unknown opcode]\n\
             {second:016x}  psb\n\
             {:016x}  psbend\n",
            second + 16
        )
    );
}

#[test]
fn sync_and_no_sync() {
    let mut trace = vec![0x00, 0x00];
    trace.extend(bytes(&[Packet::Psb]));
    let out = run(&trace, no_offset(), Config::default());
    assert_eq!(out, "psb\n");
    let out = run(
        &trace,
        DumpOptions {
            no_sync: true,
            ..no_offset()
        },
        Config::default(),
    );
    assert_eq!(out, "pad\npad\npsb\n");
    // No PSB at all: nothing, quietly.
    assert_eq!(run(&[0u8; 40], no_offset(), Config::default()), "");
    // A packet cut off by the end of the trace ends the dump quietly.
    let mut cut = bytes(&[Packet::Psb]);
    cut.extend([0x19, 1, 2]);
    assert_eq!(run(&cut, no_offset(), Config::default()), "psb\n");
}

#[test]
fn pebs_packets_are_unknown_to_ptdump() {
    let mut trace = bytes(&[Packet::Psb]);
    trace.extend([0x02, 0x63, 0x81]);
    let out = run(&trace, no_offset(), Config::default());
    assert_eq!(out, "psb\n[10: error decoding packet: unknown opcode]\n");
}

#[test]
fn skd007_ovf_is_reported_at_the_cyc_offset() {
    let mut trace = bytes(&[Packet::Psb]);
    trace.extend([0x07, 0x02, 0xf3, 0x00]);
    let mut config = Config::default();
    config.errata.skd007 = true;
    let opts = DumpOptions {
        show_raw_bytes: true,
        ..Default::default()
    };
    let out = run(&trace, opts, config);
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(
        lines[1],
        "0000000000000010  0702                              ovf"
    );
    assert_eq!(
        lines[2],
        "0000000000000013  00                                pad"
    );
}

#[test]
fn padded_cyc_keeps_its_wire_size() {
    let mut trace = bytes(&[Packet::Psb]);
    trace.extend([0x57, 0xdf, 0x00, 0x00]);
    let out = run(&trace, DumpOptions::default(), Config::default());
    assert_eq!(
        out,
        "0000000000000000  psb\n0000000000000010  cyc        dea\n0000000000000013  pad\n"
    );
}

#[test]
fn json_lines() {
    let mut trace = bytes(&[
        Packet::Psb,
        Packet::fup(C::Sext48, 0xffff_ffff_1000),
        Packet::Pip {
            cr3: 0x1000,
            nr: false,
        },
    ]);
    trace.push(0xc9);
    let opts = DumpOptions {
        json: true,
        ..Default::default()
    };
    let out = run(&trace, opts, Config::default());
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(
        lines[0],
        r#"{"offset":0,"size":16,"packet":"psb","raw":"02820282028202820282028202820282"}"#
    );
    assert_eq!(
        lines[1],
        r#"{"offset":16,"size":7,"packet":"fup","ipc":3,"ip":"0xffffffffffff1000","raw":"7d0010ffffffff"}"#
    );
    assert_eq!(
        lines[2],
        r#"{"offset":23,"size":8,"packet":"pip","cr3":"0x1000","nr":false,"raw":"0243000100000000","track_id":"cr3","track":"0000000000001000"}"#
    );
    assert_eq!(
        lines[3],
        r#"{"offset":31,"diag":"error decoding packet","error":"unknown opcode"}"#
    );
}
