//! Timing: TSC, TMA and MTC; CYC with CBR; CBR changes.

use super::*;

/// One buffer whose AUXTRACE reference is `reference`: the first TSC packet
/// takes its upper byte from it (perf's `intel_pt_8b_tsc`).
fn buffer_at(data: &[u8], reference: u64) -> Vec<Buffer<'_>> {
    vec![Buffer {
        data,
        consecutive: false,
        reference,
        trace_nr: 1,
    }]
}

/// PSB+ with TSC, TMA (or CBR) and a FUP at 0x1000, then `rest`.
fn timed_psb(timing: &[Packet], rest: &[Packet]) -> Vec<u8> {
    let mut all = vec![Packet::Psb, Packet::Tsc { tsc: 0x10_0000 }];
    all.extend_from_slice(timing);
    all.extend([trace::mode64(), fup(0x1000), Packet::Psbend]);
    all.extend_from_slice(rest);
    trace::encode(&all)
}

fn loop_code() -> Code {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    code.done()
}

/// TSC, TMA and MTC as perf combines them: TMA's CTC (less the bits below the
/// MTC period) and fast counter date the TSC back to the last MTC tick
/// (`ctc_timestamp`); each MTC adds its CTC ticks since then, converted by
/// the TSC:CTC ratio, an MTC value below the last one having wrapped at 256.
/// A state takes the time of the last timing packet before it, and its
/// estimated time adds two ticks per instruction since then.
#[test]
fn tsc_tma_and_mtc_time_the_states() {
    let p = Params {
        tsc_ctc_ratio_n: 3,
        tsc_ctc_ratio_d: 1,
        mtc_period: 3,
        ..params()
    };
    let data = timed_psb(
        &[Packet::Tma { ctc: 0x0123, fc: 2 }],
        &[
            Packet::Mtc { ctc: 0x25 },
            trace::tnt_str("!"),
            // Below 0x25: CTC bits 10:3 wrapped.
            Packet::Mtc { ctc: 0x02 },
            trace::tnt_str("!"),
        ],
    );
    let mut code = loop_code();
    let mut d = Decoder::new(p, buffer_at(&data, 0x10_0000));
    let s = all_states(&mut d, &mut code);
    // The PSB event has the TSC's time.
    assert_eq!((s[0].type_, s[0].timestamp), (ty::PSB_EVT, 0x10_0000));
    // The TSC is CTC 0x123 and 2 fast-counter ticks: CTC 0x120, the last
    // MTC tick, was at 0x100000 - 2 - 3 * 3 = 0xffff5; MTC 0x25 is CTC 0x128.
    let t1 = 0xffff5 + 8 * 3;
    assert_eq!((s[1].from_ip, s[1].timestamp), (0x1001, t1));
    assert_eq!(s[1].est_timestamp, t1 + 2 * 2);
    // MTC 0x02 is 0x102 - 0x25 = 221 MTC periods later.
    let t2 = t1 + 221 * 8 * 3;
    assert_eq!((s[2].from_ip, s[2].timestamp), (0x1001, t2));
}

/// An MTC period above 8 puts CTC bits in the MTC that TMA's 16 bits lack:
/// perf takes them from the first MTC (`intel_pt_fixup_last_mtc`) so that the
/// MTC comes one period after the TMA, not 0x81 periods.
#[test]
fn mtc_above_bit_15_of_ctc_is_fixed_up_from_the_first_mtc() {
    let p = Params {
        tsc_ctc_ratio_n: 1,
        tsc_ctc_ratio_d: 1,
        mtc_period: 9,
        ..params()
    };
    // CTC 0x1_8123 at the TSC; the MTC at CTC 0x1_8200 carries CTC[16:9] = 0xc1.
    let data = timed_psb(
        &[Packet::Tma { ctc: 0x8123, fc: 0 }],
        &[Packet::Mtc { ctc: 0xc1 }, trace::tnt_str("!")],
    );
    let mut code = loop_code();
    let mut d = Decoder::new(p, buffer_at(&data, 0x10_0000));
    let s = all_states(&mut d, &mut code);
    assert_eq!(s[1].timestamp, 0x10_0000 + (0x8200 - 0x8123));
}

/// CYC with CBR: cycles since the CBR (or the last MTC or TSC after a CYC)
/// times max_non_turbo_ratio / CBR TSC ticks each, added to the time there;
/// the CBR is reported once, on the first state after it. The cycle count of
/// a state (its IPC) is the CYC total while tracing is enabled, and the
/// estimated time scales the instructions by the same ratio.
#[test]
fn cyc_with_cbr_times_the_states() {
    let p = Params {
        max_non_turbo_ratio: 24,
        ..params()
    };
    let data = timed_psb(
        &[Packet::Cbr { ratio: 12 }],
        &[
            Packet::Cyc { value: 10 },
            trace::tnt_str("!"),
            Packet::Cyc { value: 5 },
            trace::tnt_str("!"),
        ],
    );
    let mut code = loop_code();
    let mut d = Decoder::new(p, buffer_at(&data, 0x10_0000));
    let s = all_states(&mut d, &mut code);
    assert_eq!(s[0].type_, ty::PSB_EVT | ty::CBR_CHG);
    assert_eq!((s[0].cbr, s[0].timestamp), (12, 0x10_0000));
    // 24 / 12: two ticks a cycle.
    let got: Vec<_> = s[1..]
        .iter()
        .map(|s| (s.type_, s.timestamp, s.tot_cyc_cnt, s.cycles))
        .collect();
    assert_eq!(
        got,
        [
            (ty::BRANCH, 0x10_0000 + 20, 10, 10),
            (ty::BRANCH, 0x10_0000 + 30, 15, 15),
        ]
    );
    assert!(s[1..].iter().all(|s| s.flags & sflags::SAMPLE_IPC != 0));
    // Two instructions since the CYC, two ticks each at CBR 12 of 24.
    assert_eq!(s[1].est_timestamp, 0x10_0000 + 20 + 2 * 2 * 24 / 12);
}

/// Cycles after an MTC that follows a CYC are timed at the rate perf
/// measures ahead, from that MTC to the next one preceded by a CYC
/// (`intel_pt_calc_cyc_to_tsc`), where it is not more than 1.25 times the
/// CBR's rate: here 16 ticks over 10 cycles, not the CBR's 2 ticks a cycle.
#[test]
fn cycles_between_mtcs_take_the_measured_rate() {
    let p = Params {
        max_non_turbo_ratio: 24,
        tsc_ctc_ratio_n: 4,
        tsc_ctc_ratio_d: 1,
        mtc_period: 2,
        ..params()
    };
    // CTC 0x100 at the TSC: MTCs 0x41 and 0x42 are 16 and 32 ticks later.
    let data = timed_psb(
        &[Packet::Tma { ctc: 0x100, fc: 0 }, Packet::Cbr { ratio: 12 }],
        &[
            Packet::Cyc { value: 4 },
            Packet::Mtc { ctc: 0x41 },
            Packet::Cyc { value: 3 },
            trace::tnt_str("!"),
            Packet::Cyc { value: 7 },
            Packet::Mtc { ctc: 0x42 },
            trace::tnt_str("!"),
        ],
    );
    let mut code = loop_code();
    let mut d = Decoder::new(p, buffer_at(&data, 0x10_0000));
    let s = all_states(&mut d, &mut code);
    let t: Vec<u64> = s.iter().map(|s| s.timestamp).collect();
    // 3 cycles at 1.6 ticks: 4.8, truncated (2 ticks a cycle would be 6).
    assert_eq!(t, [0x10_0000, 0x10_0010 + 4, 0x10_0020]);
}

/// A CBR packet that changes the ratio is a state of its own (type 0 plus
/// `CBR_CHG`, at the decoder's IP); one that repeats the ratio is none.
#[test]
fn a_cbr_change_is_a_state_of_its_own() {
    let data = after_psb(
        0x1000,
        &[
            Packet::Cbr { ratio: 20 },
            Packet::Cbr { ratio: 20 },
            trace::tnt_str("!"),
            Packet::Cbr { ratio: 30 },
        ],
    );
    let mut code = loop_code();
    let mut d = Decoder::new(params(), one_buffer(&data));
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.cbr))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0),
            (ok(ty::CBR_CHG, 0x1000, 0), 20),
            (ok(ty::BRANCH, 0x1001, 0x1000), 20),
            (ok(ty::CBR_CHG, 0x1000, 0), 30),
        ]
    );
}

/// When a TNT packet's walk first meets a direct call (a state before any of
/// its bits is taken), perf does not take the time anew for that state
/// (`intel_pt_sample_time` is false in the TNT state): the call has the time
/// of the state before; the conditional branch after it has the MTC's.
#[test]
fn a_direct_call_before_the_tnt_bits_keeps_the_time_before() {
    let p = Params {
        tsc_ctc_ratio_n: 3,
        tsc_ctc_ratio_d: 1,
        mtc_period: 3,
        ..params()
    };
    let data = timed_psb(
        &[Packet::Tma { ctc: 0x0123, fc: 2 }],
        &[Packet::Mtc { ctc: 0x25 }, trace::tnt_str("!")],
    );
    let mut code = Code::new();
    code.at(0x1000).call(0x1100);
    code.at(0x1100).nop().jz(0x1100);
    let mut d = Decoder::new(p, buffer_at(&data, 0x10_0000));
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.timestamp))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0x10_0000),
            (ok(ty::BRANCH, 0x1000, 0x1100), 0x10_0000),
            (ok(ty::BRANCH, 0x1101, 0x1100), 0xffff5 + 8 * 3),
        ]
    );
}
