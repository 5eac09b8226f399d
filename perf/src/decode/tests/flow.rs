//! The flow: TNT bits, returns, TIPs, trace begin and end, FUP+TIP.

use super::*;

/// perf walks to each conditional branch and takes a TNT bit: a taken branch
/// is a state (from the branch to its target); one not taken is no state
/// when instructions are not sampled, and the walk goes on to the next
/// conditional branch with the next bit (`intel_pt_walk_tnt`).
#[test]
fn tnt_bits_take_and_skip_conditional_branches() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1010); // 0x1001
    code.at(0x1010).nops(2).jz(0x1030); // 0x1012
    code.nop().jz(0x1040); // 0x1014: nop, 0x1015: jz
    let data = after_psb(0x1000, &[trace::tnt_str("!.!")]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    let got: Vec<_> = s.iter().map(|s| (brief(s), s.tot_insn_cnt)).collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0),
            (ok(ty::BRANCH, 0x1001, 0x1010), 2),
            // nop, nop, jz not taken, nop, jz taken.
            (ok(ty::BRANCH, 0x1015, 0x1040), 7),
        ]
    );
    // The state names the instruction that branched.
    assert_eq!((s[1].insn_op, s[1].insn_len), (Op::Jcc, 2));
    assert_eq!(&s[1].insn[..2], &[0x74, 0x0d]);
}

/// A long TNT (TNT-64) is walked the same way, bit by bit; the instructions
/// after the last bit (a branch not taken) are counted when the walk stops,
/// and the end of the trace is reported where the walk got to.
#[test]
fn long_tnt_walks_a_loop() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let data = after_psb(0x1000, &[trace::tnt_str("!!!!!!!.")]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(s.len(), 8);
    assert!(s[1..]
        .iter()
        .all(|s| brief(s) == ok(ty::BRANCH, 0x1001, 0x1000)));
    assert_eq!(s[7].tot_insn_cnt, 14);
    let end = next(&mut d, &mut code);
    assert_eq!(
        (end.err, end.from_ip, end.tot_insn_cnt),
        (Some(Error::NoData), 0x1003, 16)
    );
}

/// Return compression: a direct call is a state of its own (perf reports
/// every taken branch) and pushes its return address; a RET met in a TNT
/// takes a bit and its target from that stack (`ret_addr`). A TIP then takes
/// the indirect jump.
#[test]
fn compressed_return_takes_a_tnt_bit_and_the_call_stack() {
    let mut code = Code::new();
    code.at(0x1000).call(0x1100).nop().jmp_rax(); // 0x1005: nop, 0x1006: jmp
    code.at(0x1100).nop().ret(); // 0x1101: ret
    let data = after_psb(0x1000, &[trace::tnt_str("!"), tip(0x3000)]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    let got: Vec<_> = s
        .iter()
        .map(|s| (brief(s), s.insn_op, s.tot_insn_cnt))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), Op::Other, 0),
            (ok(ty::BRANCH, 0x1000, 0x1100), Op::Call, 1),
            (ok(ty::BRANCH, 0x1101, 0x1005), Op::Ret, 3),
            (ok(ty::BRANCH, 0x1006, 0x3000), Op::Jmp, 5),
        ]
    );
}

/// A RET whose target comes in a TIP still pops perf's return stack (every
/// RET walked pops it): after an inner call returns through a TIP, a
/// compressed RET returns to the outer call's return address.
#[test]
fn ret_through_a_tip_pops_the_call_stack_too() {
    let mut code = Code::new();
    code.at(0x1000).call(0x1100).nop().jmp_rax(); // returns to 0x1005
    code.at(0x1100).call(0x1200).ret(); // returns to 0x1105
    code.at(0x1200).ret();
    let data = after_psb(0x1000, &[tip(0x1105), trace::tnt_str("!"), tip(0x3000)]);
    assert_eq!(
        briefs(params(), &data, &mut code),
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::BRANCH, 0x1000, 0x1100),
            ok(ty::BRANCH, 0x1100, 0x1200),
            ok(ty::BRANCH, 0x1200, 0x1105),
            ok(ty::BRANCH, 0x1105, 0x1005),
            ok(ty::BRANCH, 0x1006, 0x3000),
        ]
    );
}

/// A RET with nothing on the return stack (its call was before the PSB) is
/// taken from a TIP like any indirect branch.
#[test]
fn ret_with_an_empty_stack_takes_the_tip() {
    let mut code = Code::new();
    code.at(0x1100).nop().ret();
    let data = after_psb(0x1100, &[tip(0x1005)]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(brief(&s[1]), ok(ty::BRANCH, 0x1101, 0x1005));
    assert_eq!(s[1].insn_op, Op::Ret);
    assert_eq!(s.len(), 2);
}

/// Indirect calls and jumps take their targets from TIPs, whose IPs may be
/// compressed against the last IP (here 2 and 4 bytes of payload); an
/// indirect call pushes its return address for a compressed RET like a
/// direct one.
#[test]
fn indirect_branches_take_tip_targets_with_compressed_ips() {
    const B: u64 = 0x5555_0000_0000;
    let mut code = Code::new();
    code.at(B + 0x1000).call_rax().nop().jmp_rax(); // 0x1002: nop, 0x1003: jmp
    code.at(B + 0x2000).ret();
    code.at(B + 0x4000).jmp_rax();
    let data = after_psb(
        B + 0x1000,
        &[
            tip(B + 0x2000),
            trace::tnt_str("!"),
            ip_packet(IpPacketKind::Tip, IpCompression::Update16, 0x4000),
            ip_packet(IpPacketKind::Tip, IpCompression::Update32, 0x0000_1000),
        ],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    let got: Vec<_> = s.iter().map(|s| (brief(s), s.insn_op)).collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, B + 0x1000, 0), Op::Other),
            (ok(ty::BRANCH, B + 0x1000, B + 0x2000), Op::Call),
            (ok(ty::BRANCH, B + 0x2000, B + 0x1002), Op::Ret),
            (ok(ty::BRANCH, B + 0x1003, B + 0x4000), Op::Jmp),
            (ok(ty::BRANCH, B + 0x4000, B + 0x1000), Op::Jmp),
        ]
    );
}

/// TIP.PGD ends the trace at the branch that left it (`TRACE_END`, to 0 when
/// the IP is suppressed) and TIP.PGE begins it again (`TRACE_BEGIN`, from 0).
#[test]
fn tip_pgd_ends_and_tip_pge_begins_the_trace() {
    let mut code = Code::new();
    code.at(0x1000).nop().put(&[0x0f, 0x05]); // 0x1001: syscall
    code.nop().jz(0x1000); // 0x1003: nop, 0x1004: jz
    let data = after_psb(
        0x1000,
        &[pgd_none(), pge(0x1003), trace::tnt_str("!"), pgd(0x1000)],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    let got: Vec<_> = s.iter().map(|s| (brief(s), s.insn_op)).collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), Op::Other),
            (ok(ty::BRANCH | ty::TRACE_END, 0x1001, 0), Op::Syscall),
            (ok(ty::BRANCH | ty::TRACE_BEGIN, 0, 0x1003), Op::Syscall),
            (ok(ty::BRANCH, 0x1004, 0x1000), Op::Jcc),
            // A TIP.PGD with an IP: the syscall's target.
            (ok(ty::BRANCH | ty::TRACE_END, 0x1001, 0x1000), Op::Syscall),
        ]
    );
}

/// With an address filter, a direct jump out of the filter region ends the
/// trace at the TIP.PGD (perf asks `pgd_ip` about the jump's target); without
/// one the jump is an ordinary branch and the walk goes on into the code
/// beyond it.
#[test]
fn direct_jump_out_of_the_filter_ends_the_trace() {
    let mut code = Code::new();
    code.at(0x1000).nop().jmp(0x9000); // 0x1001: jmp 0x9000
    code.filter = Some(0x1000..0x2000);
    let data = after_psb(0x1000, &[pgd_none()]);
    assert_eq!(
        briefs(params(), &data, &mut code),
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::BRANCH | ty::TRACE_END, 0x1001, 0x9000),
        ]
    );
    code.filter = None;
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(brief(&s[1]), ok(ty::BRANCH, 0x1001, 0x9000));
    assert_eq!((s[2].err, s[2].from_ip), (Some(Error::NoInsn), 0x9000));
}

/// An asynchronous event (an interrupt): FUP with the IP it hit, then a TIP
/// with where it went. perf walks to the FUP's IP and returns one branch
/// from there to the TIP, flagged `ASYNC`, with the instructions walked to
/// the FUP counted; the IRET back is an ordinary indirect branch.
#[test]
fn fup_then_tip_is_an_async_branch() {
    let mut code = Code::new();
    code.at(0x1000).nops(3).jmp_rax();
    code.at(0x8000).nop().put(&[0x48, 0xcf]); // 0x8001: iretq
    let data = after_psb(0x1000, &[fup(0x1002), tip(0x8000), tip(0x1002)]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    let got: Vec<_> = s
        .iter()
        .map(|s| (brief(s), s.flags & sflags::ASYNC, s.tot_insn_cnt))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0, 0),
            (ok(ty::BRANCH, 0x1002, 0x8000), sflags::ASYNC, 2),
            (ok(ty::BRANCH, 0x8001, 0x1002), 0, 4),
        ]
    );
    // The interrupted instruction did not run: no instruction branched.
    assert_eq!(s[1].insn_len, 0);
    assert_eq!(s[2].insn_op, Op::Iret);
}

/// FUP then TIP.PGD: an interrupt into code that is not traced. The trace
/// ends at the FUP's IP, asynchronously.
#[test]
fn fup_then_tip_pgd_ends_the_trace_asynchronously() {
    let mut code = Code::new();
    code.at(0x1000).nops(3).jmp_rax();
    let data = after_psb(0x1000, &[fup(0x1001), pgd_none(), pge(0x1001)]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    let got: Vec<_> = s
        .iter()
        .map(|s| (brief(s), s.flags & sflags::ASYNC))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0),
            (ok(ty::BRANCH | ty::TRACE_END, 0x1001, 0), sflags::ASYNC),
            (ok(ty::BRANCH | ty::TRACE_BEGIN, 0, 0x1001), 0),
        ]
    );
}

/// A call to the next instruction (a zero-length call, which code uses to
/// read its own address) pushes nothing on perf's return stack: a compressed
/// RET after it returns to the call before.
#[test]
fn a_zero_length_call_pushes_no_return_address() {
    let mut code = Code::new();
    code.at(0x1000).call(0x1100); // returns to 0x1005
    code.at(0x1100).call(0x1105).ret(); // 0x1100: call +0, 0x1105: ret
    let data = after_psb(0x1000, &[trace::tnt_str("!")]);
    assert_eq!(
        briefs(params(), &data, &mut code),
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::BRANCH, 0x1000, 0x1100),
            ok(ty::BRANCH, 0x1100, 0x1105),
            ok(ty::BRANCH, 0x1105, 0x1005),
        ]
    );
}

/// TraceStop (a stop region or ToPA stop) ends tracing without a state of
/// its own; the trace begins again at the next TIP.PGE.
#[test]
fn trace_stop_is_no_state() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let data = after_psb(0x1000, &[Packet::Stop, pge(0x1000), trace::tnt_str("!")]);
    assert_eq!(
        briefs(params(), &data, &mut code),
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::BRANCH | ty::TRACE_BEGIN, 0, 0x1000),
            ok(ty::BRANCH, 0x1001, 0x1000),
        ]
    );
}

/// A PIP with NR (VMX non-root) before a TIP: the branch goes from root to
/// non-root (`from_nr` false, `to_nr` true) and later states are in
/// non-root; a PIP in PSB+ sets the mode at once.
#[test]
fn pip_nr_changes_the_mode_at_the_next_branch() {
    let mut code = Code::new();
    code.at(0x1000).nop().jmp_rax(); // 0x1001: jmp rax
    code.at(0x2000).nop().jz(0x2000);
    let pip = |nr| Packet::Pip { cr3: 0x1000, nr };
    let data = after_psb(0x1000, &[pip(true), tip(0x2000), trace::tnt_str("!")]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.from_nr, s.to_nr))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), false, false),
            (ok(ty::BRANCH, 0x1001, 0x2000), false, true),
            (ok(ty::BRANCH, 0x2001, 0x2000), true, true),
        ]
    );
    // In PSB+ the PIP is the mode there and then.
    let mut all = vec![Packet::Psb, pip(true)];
    all.extend([
        trace::mode64(),
        fup(0x2000),
        Packet::Psbend,
        trace::tnt_str("!"),
    ]);
    let data = trace::encode(&all);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!((s[0].from_nr, s[0].to_nr), (true, true));
    assert_eq!((s[1].from_nr, s[1].to_nr), (true, true));
}
