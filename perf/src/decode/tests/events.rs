//! Events bound to FUPs or standing alone: PTWRITE, power events, MODE.Exec.

use super::*;
use pt_encoder::{ModeExec, PtwSize, WakeReason};

/// PTWRITE with IP: the PTW packet's payload waits for its FUP, whose IP is
/// the PTWRITE's own; perf walks to it and returns a `PTW` state there
/// (flag `FUP_IP`, no branch), then goes on from the PTWRITE.
#[test]
fn ptwrite_with_ip_binds_to_its_fup() {
    let mut code = Code::new();
    code.at(0x1000).ptwrite_eax().nop().jz(0x1000); // 0x1004: nop, 0x1005: jz
    let data = after_psb(
        0x1000,
        &[
            Packet::Ptw {
                size: PtwSize::Four,
                payload: 0x1234,
                ip: true,
            },
            fup(0x1000),
            trace::tnt_str("!"),
        ],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(brief(&s[1]), ok(ty::PTW, 0x1000, 0));
    assert_eq!(
        (s[1].ptw_payload, s[1].flags & sflags::FUP_IP),
        (0x1234, sflags::FUP_IP)
    );
    assert_eq!(
        (brief(&s[2]), s[2].tot_insn_cnt),
        (ok(ty::BRANCH, 0x1005, 0x1000), 3)
    );
    assert_eq!(s.len(), 3);
}

/// PTWRITE without IP: a `PTW` state at once, at the decoder's IP, with the
/// 8-byte payload whole.
#[test]
fn ptwrite_without_ip_is_a_state_at_the_decoders_ip() {
    let mut code = Code::new();
    code.at(0x1000).ptwrite_eax().nop().jz(0x1000);
    let data = after_psb(
        0x1000,
        &[Packet::Ptw {
            size: PtwSize::Eight,
            payload: 0x1122_3344_5566_7788,
            ip: false,
        }],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(brief(&s[1]), ok(ty::PTW, 0x1000, 0));
    assert_eq!(
        (s[1].ptw_payload, s[1].flags & sflags::FUP_IP),
        (0x1122_3344_5566_7788, 0)
    );
}

/// MWAIT, PWRE and EXSTOP with IP before one FUP are one state at the FUP's
/// IP with all three types and both payloads as perf reads them (MWAIT:
/// hints and extensions, 8 bytes; PWRE: 2 bytes, the C-state in the second);
/// PWRX is a state of its own (5 bytes of payload: C-states, wake reason).
#[test]
fn mwait_pwre_exstop_and_pwrx() {
    let mut code = Code::new();
    code.at(0x1000).mwait().nop().jz(0x1000); // 0x1003: nop, 0x1004: jz
    let data = after_psb(
        0x1000,
        &[
            Packet::Mwait {
                hints: 0x21,
                ext: 1,
            },
            Packet::Pwre {
                state: 2,
                sub_state: 1,
                hw: false,
            },
            Packet::Exstop { ip: true },
            fup(0x1000),
            Packet::Pwrx {
                last: 2,
                deepest: 2,
                wake: WakeReason {
                    interrupt: true,
                    ..WakeReason::default()
                },
            },
            trace::tnt_str("!"),
        ],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    let entry = ty::MWAIT_OP | ty::PWR_ENTRY | ty::EX_STOP;
    assert_eq!(brief(&s[1]), ok(entry, 0x1000, 0));
    assert_eq!(s[1].flags & sflags::FUP_IP, sflags::FUP_IP);
    assert_eq!(
        (s[1].mwait_payload, s[1].pwre_payload),
        (0x1_0000_0021, 0x2100)
    );
    assert_eq!(brief(&s[2]), ok(ty::PWR_EXIT, 0x1000, 0));
    assert_eq!(s[2].pwrx_payload, 0x0122);
    assert_eq!(
        (brief(&s[3]), s[3].tot_insn_cnt),
        (ok(ty::BRANCH, 0x1004, 0x1000), 3)
    );
}

/// A PWRE without MWAIT (a hardware C-state) is a state at once; perf puts
/// its payload in the state's PWRX payload (its `pwre_payload` is left as it
/// was), and that is what its samples show. EXSTOP without IP is a state at
/// once too, without `FUP_IP`.
#[test]
fn pwre_and_exstop_alone() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let data = after_psb(
        0x1000,
        &[
            Packet::Pwre {
                state: 1,
                sub_state: 0,
                hw: true,
            },
            Packet::Exstop { ip: false },
        ],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(brief(&s[1]), ok(ty::PWR_ENTRY, 0x1000, 0));
    assert_eq!((s[1].pwrx_payload, s[1].pwre_payload), (0x1080, 0));
    assert_eq!(brief(&s[2]), ok(ty::EX_STOP, 0x1000, 0));
    assert_eq!(s[2].flags & sflags::FUP_IP, 0);
}

/// MODE.Exec with a new IF and a FUP (Event Trace's IF change): perf walks to
/// the FUP and returns an `IFLAG_CHG` state there with the flag before and
/// after; when every instruction is sampled, the FUP's instruction is sampled
/// in the same state (`intel_pt_sample_fup_insn`).
#[test]
fn mode_exec_with_fup_is_an_iflag_change() {
    let mut code = Code::new();
    code.at(0x1000).nops(3).jz(0x1000);
    let if_on = Packet::ModeExec(ModeExec {
        csl: true,
        csd: false,
        iflag: true,
    });
    let data = after_psb(0x1000, &[if_on, fup(0x1002)]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(brief(&s[1]), ok(ty::IFLAG_CHG, 0x1002, 0));
    assert_eq!(
        (s[1].from_iflag, s[1].to_iflag, s[1].tot_insn_cnt),
        (false, true, 2)
    );
    assert_eq!(s.len(), 2);

    let p = Params {
        period_type: PeriodType::Instructions,
        period: 1,
        ..params()
    };
    let b: Vec<_> = {
        let mut d = Decoder::new(p, one_buffer(&data));
        all_states(&mut d, &mut code)
            .iter()
            .map(|s| (brief(s), s.tot_insn_cnt))
            .collect()
    };
    assert_eq!(
        b[1..],
        [
            (ok(ty::INSTRUCTION, 0x1000, 0), 1),
            (ok(ty::INSTRUCTION, 0x1001, 0), 2),
            (ok(ty::IFLAG_CHG | ty::INSTRUCTION, 0x1002, 0), 3),
        ]
    );
}

fn mode_tsx(intx: bool, abrt: bool) -> Packet {
    Packet::ModeTsx(pt_encoder::ModeTsx { intx, abrt })
}

/// TSX: MODE.TSX with a FUP is a `TRANSACTION` state at the FUP's IP (a
/// begin: flag `IN_TX`); branches inside the transaction carry `IN_TX`; an
/// abort (MODE.TSX with TXAbort, FUP, TIP) is one transaction state that is
/// also a branch, from the FUP to the TIP, flagged `ABORT_TX` (not `ASYNC`,
/// not `IN_TX`).
#[test]
fn tsx_begin_and_abort() {
    let mut code = Code::new();
    code.at(0x1000).nops(2).jz(0x1000); // 0x1002: jz
    let data = after_psb(
        0x1000,
        &[
            mode_tsx(true, false),
            fup(0x1001),
            trace::tnt_str("!"),
            mode_tsx(false, true),
            fup(0x1001),
            tip(0x2000),
        ],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let tx = sflags::IN_TX | sflags::ABORT_TX | sflags::ASYNC;
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.flags & tx, s.tot_insn_cnt))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0, 0),
            (ok(ty::TRANSACTION, 0x1001, 0), sflags::IN_TX, 1),
            (ok(ty::BRANCH, 0x1002, 0x1000), sflags::IN_TX, 3),
            (
                ok(ty::TRANSACTION | ty::BRANCH, 0x1001, 0x2000),
                sflags::ABORT_TX,
                4
            ),
        ]
    );
}

/// MODE.Exec tells the walker the mode of the code: in PSB+ at once, outside it at
/// the TIP that follows (the walk to the branch is in the old mode).
#[test]
fn mode_exec_sets_the_walkers_mode() {
    // 1000: dec eax (32-bit) / REX (64-bit) ... ; 1005: jnz 1000 ; 1007: jmp eax
    let mut im = pt_decoder::image::Image::new();
    im.add_bytes(
        0x1000,
        vec![0x48, 0x83, 0xc0, 0x01, 0x90, 0x75, 0xf9, 0xff, 0xe0],
        "t",
    )
    .unwrap();
    let mode = |m| Packet::ModeExec(ModeExec::from_mode(m));
    let data = trace::encode(&[
        Packet::Psb,
        mode(pt_encoder::ExecMode::Bit32),
        fup(0x1000),
        Packet::Psbend,
        trace::tnt_str("!."),
        mode(pt_encoder::ExecMode::Bit64),
        tip(0x1000),
        trace::tnt_str("."),
    ]);
    let p = Params {
        period_type: PeriodType::Instructions,
        period: 1,
        ..params()
    };
    let mut d = Decoder::new(p, one_buffer(&data));
    let mut cache = crate::code::CodeWalker::new();
    let mut insns = Vec::new();
    loop {
        let mut w = crate::code::ImageWalker::new(&mut cache, &im);
        let s = *d.decode(&mut w);
        if s.err == Some(Error::NoData) {
            break;
        }
        assert_eq!(s.err, None);
        if s.type_ & ty::INSTRUCTION != 0 {
            insns.push(s.from_ip);
        }
    }
    // 32-bit: dec, add, nop, jnz (taken), the same again, jnz (not taken), jmp eax;
    // then 64-bit from the TIP's target on: add, nop, jnz (0x1001 is an
    // instruction in 32-bit code only, 0x1004 right after 0x1000 in 64-bit only).
    let in32 = [0x1000, 0x1001, 0x1004, 0x1005];
    let mut want: Vec<u64> = in32.iter().chain(&in32).copied().collect();
    want.push(0x1007);
    want.extend([0x1000, 0x1004, 0x1005]);
    assert_eq!(insns, want);
    assert_eq!(cache.mode(), pt_encoder::ExecMode::Bit64);
}
