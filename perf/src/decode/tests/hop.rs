//! perf's quick modes (`--itrace=q`): hop from IP to IP, leap from PSB to PSB.

use super::*;

fn quick(q: u32) -> Params {
    Params {
        quick: q,
        ..params()
    }
}

/// The trace these tests decode: PSB+ at 0x1000, a TNT, a TIP to 0x2000, a
/// TNT, PSB+ at 0x3000.
fn trace_with_two_psbs() -> Vec<u8> {
    let mut data = after_psb(
        0x1000,
        &[trace::tnt_str("!"), tip(0x2000), trace::tnt_str("!")],
    );
    data.extend(after_psb(0x3000, &[]));
    data
}

/// Hop mode (`q`): no code is walked and TNTs are ignored; each IP the trace
/// gives is an instruction state: the PSB's FUP (the PSB event, then an
/// instruction there), a TIP's target, and a later PSB's FUP (the PSB event
/// with the instruction bit).
#[test]
fn hop_mode_reports_the_ips_of_the_trace() {
    let mut code = Code::new();
    assert_eq!(
        briefs(quick(1), &trace_with_two_psbs(), &mut code),
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::INSTRUCTION, 0x1000, 0),
            ok(ty::INSTRUCTION, 0x2000, 0),
            ok(ty::PSB_EVT | ty::INSTRUCTION, 0x3000, 0),
        ]
    );
    assert_eq!(code.walks, 0);
}

/// Leap mode (`qq`): from one PSB+ straight to the next; the TIP between is
/// not looked at.
#[test]
fn leap_mode_goes_from_psb_to_psb() {
    let mut code = Code::new();
    assert_eq!(
        briefs(quick(2), &trace_with_two_psbs(), &mut code),
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::INSTRUCTION, 0x1000, 0),
            ok(ty::PSB_EVT | ty::INSTRUCTION, 0x3000, 0),
        ]
    );
    assert_eq!(code.walks, 0);
}
