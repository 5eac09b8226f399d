//! Getting in sync: the first PSB, the first IP, and PSB+ met in sync.

use super::*;

/// perf scans for the first PSB's bytes (`intel_pt_scan_for_psb`), whatever
/// comes before them, walks PSB+ and returns a PSB event whose `from_ip` is
/// the FUP's IP: decoding starts there. The sync does not set the state's
/// `psb_offset` (only a PSB met in sync does).
#[test]
fn sync_skips_to_the_first_psb_and_starts_at_its_fup() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    // Bytes before the PSB (a TNT, the start of a TSC, ...): none is decoded.
    let mut data = vec![0x06, 0x19, 0x01, 0x02];
    data.extend(after_psb(0x1000, &[trace::tnt_str("!")]));
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = next(&mut d, &mut code);
    assert_eq!(brief(&s), ok(ty::PSB_EVT, 0x1000, 0));
    assert_eq!((s.psb_offset, s.tot_insn_cnt), (0, 0));
    assert_eq!(code.walks, 0, "PSB+ is not walked to");
    let s = next(&mut d, &mut code);
    assert_eq!(brief(&s), ok(ty::BRANCH, 0x1001, 0x1000));
    // The end: "No more data", at the IP the decoder got to.
    let s = next(&mut d, &mut code);
    assert_eq!((s.err, s.from_ip), (Some(Error::NoData), 0x1000));
}

/// A PSB+ without a FUP (tracing disabled, or not yet enabled) gives a PSB
/// event without an IP; the trace begins at the TIP.PGE that follows, a
/// branch from 0 with `TRACE_BEGIN`.
#[test]
fn trace_begins_at_tip_pge_after_a_psb_without_fup() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let data = trace::encode(&[
        Packet::Psb,
        trace::mode64(),
        Packet::Psbend,
        pge(0x1000),
        trace::tnt_str("!"),
    ]);
    assert_eq!(
        briefs(params(), &data, &mut code),
        [
            ok(ty::PSB_EVT, 0, 0),
            ok(ty::BRANCH | ty::TRACE_BEGIN, 0, 0x1000),
            ok(ty::BRANCH, 0x1001, 0x1000),
        ]
    );
}

/// A PSB met in sync whose FUP is ahead of the decoder: perf walks to the FUP
/// first (`intel_pt_psb_with_fup`, `intel_pt_fup_in_psb`), so the PSB event
/// comes at the FUP's IP with the instructions up to it counted, and its
/// `psb_offset` is where the PSB starts in the trace.
#[test]
fn psb_in_sync_walks_to_its_fup() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1010); // 0x1001: jz
    code.at(0x1010).nops(2).jmp_rax(); // 0x1012: jmp rax
    let first = after_psb(0x1000, &[trace::tnt_str("!")]);
    let mut data = first.clone();
    data.extend(trace::encode(&trace::psb_at(0x1012)));
    data.extend(trace::encode(&[tip(0x1000)]));
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s: Vec<State> = all_states(&mut d, &mut code);
    let got: Vec<_> = s.iter().map(|s| (brief(s), s.tot_insn_cnt)).collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0),
            (ok(ty::BRANCH, 0x1001, 0x1010), 2),
            // nop, nop: walked to the FUP.
            (ok(ty::PSB_EVT, 0x1012, 0), 4),
            (ok(ty::BRANCH, 0x1012, 0x1000), 5),
        ]
    );
    assert_eq!(s[2].psb_offset, first.len() as u64);
}

/// A FUP in PSB+ followed by a TIP.PGE is not walked to (perf's PSB
/// look-ahead drops it): the PSB event names the FUP's IP, and the trace
/// begins at the TIP.PGE without a walk.
#[test]
fn psb_fup_followed_by_tip_pge_is_not_walked_to() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1010);
    code.at(0x1010).nops(2).jmp_rax();
    let mut all = trace::psb_at(0x1000).to_vec();
    all.extend(trace::psb_at(0x1012));
    all.push(pge(0x1010));
    let data = trace::encode(&all);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.tot_insn_cnt))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0),
            (ok(ty::PSB_EVT, 0x1012, 0), 0),
            (ok(ty::BRANCH | ty::TRACE_BEGIN, 0, 0x1010), 0),
        ]
    );
    assert_eq!(code.walks, 0);
}

/// Without branch tracing (`branch` off: PSB+, timing and events only) there
/// is no IP to sync to: perf's sync returns a PSB event and walks no code.
#[test]
fn without_branch_tracing_nothing_is_walked() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let data = after_psb(0x1000, &[Packet::Psb, Packet::Psbend]);
    let p = Params {
        branch_enable: false,
        ..params()
    };
    assert_eq!(
        briefs(p, &data, &mut code),
        [ok(ty::PSB_EVT, 0x1000, 0), ok(ty::PSB_EVT, 0, 0)]
    );
    assert_eq!(code.walks, 0);
}
