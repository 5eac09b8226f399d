//! Instruction sampling: `PeriodType::Instructions` and `PeriodType::Mtc`.

use super::*;

fn every(n: u64) -> Params {
    Params {
        period_type: PeriodType::Instructions,
        period: n,
        ..params()
    }
}

/// With a period of N instructions perf walks at most the instructions left
/// in the period (`intel_pt_next_sample`) and makes the last one an
/// `INSTRUCTION` state; a branch that ends a period is one state with both
/// bits, and a branch not taken that ends one is an instruction state alone.
/// Between samples the walk goes on through branches not taken.
#[test]
fn a_state_every_n_instructions() {
    let mut code = Code::new();
    code.at(0x1000).nops(5).jz(0x1000); // 0x1005: jz
    let data = after_psb(0x1000, &[trace::tnt_str("!.")]);
    let mut d = Decoder::new(every(3), one_buffer(&data));
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.tot_insn_cnt))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0),
            (ok(ty::INSTRUCTION, 0x1002, 0), 3),
            (ok(ty::BRANCH | ty::INSTRUCTION, 0x1005, 0x1000), 6),
            (ok(ty::INSTRUCTION, 0x1002, 0), 9),
            (ok(ty::INSTRUCTION, 0x1005, 0), 12),
        ]
    );
}

/// A period that does not divide the loop: the samples fall on other
/// instructions each time round, and a branch not taken between samples is
/// no state.
#[test]
fn samples_move_round_a_loop() {
    let mut code = Code::new();
    code.at(0x1000).nops(2).jz(0x1000); // 0x1002: jz
    let data = after_psb(0x1000, &[trace::tnt_str("!!.")]);
    let mut d = Decoder::new(every(4), one_buffer(&data));
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.tot_insn_cnt))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0),
            // The first jz (taken) is no sample: a branch state.
            (ok(ty::BRANCH, 0x1002, 0x1000), 3),
            (ok(ty::INSTRUCTION, 0x1000, 0), 4),
            (ok(ty::BRANCH, 0x1002, 0x1000), 6),
            (ok(ty::INSTRUCTION, 0x1001, 0), 8),
        ]
    );
    // The jz not taken at 9 ends the trace between samples.
    let end = next(&mut d, &mut code);
    assert_eq!((end.err, end.tot_insn_cnt), (Some(Error::NoData), 9));
}

/// Every instruction (period 1): each is a state, the branches with both bits.
#[test]
fn every_instruction_is_a_state() {
    let mut code = Code::new();
    code.at(0x1000).nops(2).jz(0x1000);
    let data = after_psb(0x1000, &[trace::tnt_str("!.")]);
    let b = briefs(every(1), &data, &mut code);
    assert_eq!(
        b[1..],
        [
            ok(ty::INSTRUCTION, 0x1000, 0),
            ok(ty::INSTRUCTION, 0x1001, 0),
            ok(ty::BRANCH | ty::INSTRUCTION, 0x1002, 0x1000),
            ok(ty::INSTRUCTION, 0x1000, 0),
            ok(ty::INSTRUCTION, 0x1001, 0),
            ok(ty::INSTRUCTION, 0x1002, 0),
        ]
    );
}

/// `PeriodType::Mtc`: an instruction state at the decoder's IP at each MTC
/// with instructions walked since the last one and a time.
#[test]
fn a_state_per_mtc_with_instructions_since_the_last() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let data = trace::encode(&[
        Packet::Psb,
        Packet::Tsc { tsc: 0x10_0000 },
        trace::mode64(),
        fup(0x1000),
        Packet::Psbend,
        Packet::Mtc { ctc: 1 },
        trace::tnt_str("!"),
        Packet::Mtc { ctc: 2 },
        Packet::Mtc { ctc: 3 },
    ]);
    let p = Params {
        period_type: PeriodType::Mtc,
        ..params()
    };
    let bufs = vec![Buffer {
        data: &data,
        consecutive: false,
        reference: 0x10_0000,
        trace_nr: 1,
    }];
    let mut d = Decoder::new(p, bufs);
    let b: Vec<_> = all_states(&mut d, &mut code).iter().map(brief).collect();
    assert_eq!(
        b,
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::BRANCH, 0x1001, 0x1000),
            ok(ty::INSTRUCTION, 0x1000, 0),
        ]
    );
}
