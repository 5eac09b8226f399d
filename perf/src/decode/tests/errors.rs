//! Errors and where decoding goes on after them.

use super::*;

/// OVF: perf reports "Overflow packet" at the IP it had (the error state's
/// `from_ip` is that IP, not cleared), forgets the IP, and takes the next FUP
/// as where the trace begins again (`TRACE_BEGIN`, from 0).
#[test]
fn overflow_then_fup_begins_the_trace_again() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    code.at(0x2000).nop().jz(0x2000);
    let data = after_psb(0x1000, &[Packet::Ovf, fup(0x2000), trace::tnt_str("!")]);
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!(brief(&s[0]), ok(ty::PSB_EVT, 0x1000, 0));
    assert_eq!((s[1].err, s[1].from_ip), (Some(Error::Ovr), 0x1000));
    assert_eq!(brief(&s[2]), ok(ty::BRANCH | ty::TRACE_BEGIN, 0, 0x2000));
    assert_eq!(brief(&s[3]), ok(ty::BRANCH, 0x2001, 0x2000));
    assert_eq!(s.len(), 4);
    assert_eq!(Error::Ovr.message(), "Overflow packet");
}

/// OVF while tracing was disabled when it resolved: the trace begins at the
/// TIP.PGE after it.
#[test]
fn overflow_then_tip_pge_begins_the_trace_again() {
    let mut code = Code::new();
    code.at(0x2000).nop().jz(0x2000);
    let data = after_psb(0x2000, &[Packet::Ovf, pge(0x2000), trace::tnt_str("!")]);
    let b = briefs(params(), &data, &mut code);
    assert_eq!(b[0], ok(ty::PSB_EVT, 0x2000, 0));
    assert_eq!((b[1].err, b[1].from), (Some(Error::Ovr), 0x2000));
    assert_eq!(b[2], ok(ty::BRANCH | ty::TRACE_BEGIN, 0, 0x2000));
    assert_eq!(b[3], ok(ty::BRANCH, 0x2001, 0x2000));
    assert_eq!(b.len(), 4);
}

/// A byte that is no packet: perf reports "Bad packet" at the decoder's IP
/// with the position at the bad byte, keeps its state (in sync, the IP
/// kept), steps one byte and goes on from there.
#[test]
fn bad_packet_reports_its_offset_and_decoding_goes_on_after_it() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let mut data = after_psb(0x1000, &[]);
    let bad_at = data.len() as u64;
    // An extended opcode perf does not know, then a PAD, then a TNT.
    data.extend([0x02, 0x00]);
    data.extend(trace::encode(&[trace::tnt_str("!")]));
    let mut d = Decoder::new(params(), one_buffer(&data));
    assert_eq!(brief(&next(&mut d, &mut code)), ok(ty::PSB_EVT, 0x1000, 0));
    let s = next(&mut d, &mut code);
    assert_eq!((s.err, s.from_ip), (Some(Error::BadPkt), 0x1000));
    assert_eq!(d.position().pos, bad_at);
    assert_eq!(
        brief(&next(&mut d, &mut code)),
        ok(ty::BRANCH, 0x1001, 0x1000)
    );
    assert_eq!(next(&mut d, &mut code).err, Some(Error::NoData));
}

/// A TIP where the code's next branch is conditional: perf reports "Trace
/// doesn't match instruction" at that branch and resynchronizes at the next
/// packet with an IP (`ERR_RESYNC`: TNTs before it are skipped); the IP it
/// gets there is a branch from 0.
#[test]
fn tip_at_a_conditional_branch_is_a_mismatch_then_resync() {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    let data = after_psb(
        0x1000,
        &[
            tip(0x3000),
            trace::tnt_str("!!"),
            tip(0x1000),
            trace::tnt_str("!"),
        ],
    );
    let mut d = Decoder::new(params(), one_buffer(&data));
    let s = all_states(&mut d, &mut code);
    assert_eq!((s[1].err, s[1].from_ip), (Some(Error::Mismat), 0x1001));
    assert_eq!(brief(&s[2]), ok(ty::BRANCH, 0, 0x1000));
    assert_eq!(brief(&s[3]), ok(ty::BRANCH, 0x1001, 0x1000));
    assert_eq!(s.len(), 4);
}

/// Without return compression a RET met in a TNT is a mismatch ("RET when
/// expecting conditional branch"); so is a compressed RET with nothing on
/// the return stack, or with a not-taken bit.
#[test]
fn compressed_return_mismatches() {
    let mut code = Code::new();
    code.at(0x1000).call(0x1100).nop().jmp_rax();
    code.at(0x1100).nop().ret(); // 0x1101: ret
    let with_call = after_psb(0x1000, &[trace::tnt_str("!")]);
    let p = Params {
        return_compression: false,
        ..params()
    };
    let b = briefs(p, &with_call, &mut code);
    assert_eq!(b[1], ok(ty::BRANCH, 0x1000, 0x1100));
    assert_eq!((b[2].err, b[2].from), (Some(Error::Mismat), 0x1101));
    // The stack is empty: the call was before the PSB.
    let b = briefs(
        params(),
        &after_psb(0x1100, &[trace::tnt_str("!")]),
        &mut code,
    );
    assert_eq!((b[1].err, b[1].from), (Some(Error::Mismat), 0x1101));
    // The bit says not taken.
    let b = briefs(
        params(),
        &after_psb(0x1000, &[trace::tnt_str(".")]),
        &mut code,
    );
    assert_eq!((b[2].err, b[2].from), (Some(Error::Mismat), 0x1101));
}

/// A walk into code that is not there: perf reports "Failed to get
/// instruction" at the IP it could not read and forgets its last IP
/// (`NO_IP`), so a compressed IP cannot resync it: the next full IP does.
#[test]
fn missing_code_fails_then_resyncs_at_the_next_full_ip() {
    let mut code = Code::new();
    code.at(0x1000).nop().jmp(0x9000); // 0x1001: jmp to no code
    code.at(0x2000).nop().jz(0x2000);
    let data = after_psb(
        0x1000,
        &[
            trace::tnt_str("!"),
            ip_packet(IpPacketKind::Tip, IpCompression::Update16, 0x2000),
            tip(0x2000),
            trace::tnt_str("!"),
        ],
    );
    let b = briefs(params(), &data, &mut code);
    assert_eq!(b[1], ok(ty::BRANCH, 0x1001, 0x9000));
    assert_eq!((b[2].err, b[2].from), (Some(Error::NoInsn), 0x9000));
    assert_eq!(b[3], ok(ty::BRANCH, 0, 0x2000));
    assert_eq!(b[4], ok(ty::BRANCH, 0x2001, 0x2000));
    assert_eq!(b.len(), 5);
}

/// A walk that fails where perf failed and reported before (the walker's
/// `-ENOENT`): perf resynchronizes without a second error.
#[test]
fn a_failure_reported_before_resyncs_silently() {
    let mut code = Code::new();
    code.at(0x1000).nop().jmp(0x9000);
    code.at(0x2000).nop().jz(0x2000);
    code.known_bad.insert(0x9000);
    let data = after_psb(0x1000, &[trace::tnt_str("!"), tip(0x2000)]);
    assert_eq!(
        briefs(params(), &data, &mut code),
        [
            ok(ty::PSB_EVT, 0x1000, 0),
            ok(ty::BRANCH, 0x1001, 0x9000),
            ok(ty::BRANCH, 0, 0x2000),
        ]
    );
}

/// The never-ending-loop guard: unconditional branches that consume no
/// packet are counted, and perf's stuck-IP check (a target seen again at a
/// growing period) stops a loop of direct jumps at the third jump to the
/// same place with "Never-ending loop"; decoding then resyncs at the next
/// IP packet.
#[test]
fn a_jump_to_itself_is_a_never_ending_loop() {
    let mut code = Code::new();
    code.at(0x1000).jmp(0x1000);
    let data = after_psb(0x1000, &[tip(0x2000), tip(0x1000)]);
    let b = briefs(params(), &data, &mut code);
    assert_eq!(b[1], ok(ty::BRANCH, 0x1000, 0x1000));
    assert_eq!(b[2], ok(ty::BRANCH, 0x1000, 0x1000));
    assert_eq!((b[3].err, b[3].from), (Some(Error::NeLoop), 0x1000));
    // The TIP being walked towards is dropped; the next one resyncs.
    assert_eq!(b[4], ok(ty::BRANCH, 0, 0x1000));
}

/// Two jumps to each other: the stuck IP is caught once the period has grown
/// to the loop's length (the fifth jump).
#[test]
fn two_jumps_to_each_other_are_a_never_ending_loop() {
    let mut code = Code::new();
    code.at(0x1000).jmp(0x1010);
    code.at(0x1010).jmp(0x1000);
    let data = after_psb(0x1000, &[tip(0x2000)]);
    let b = briefs(params(), &data, &mut code);
    let jumps = &b[1..5];
    assert_eq!(
        jumps,
        [
            ok(ty::BRANCH, 0x1000, 0x1010),
            ok(ty::BRANCH, 0x1010, 0x1000),
            ok(ty::BRANCH, 0x1000, 0x1010),
            ok(ty::BRANCH, 0x1010, 0x1000),
        ]
    );
    assert_eq!((b[5].err, b[5].from), (Some(Error::NeLoop), 0x1010));
    assert_eq!(b.len(), 6);
}

/// `max_loops` (perf's intel-pt.max-loops): a chain of direct jumps longer
/// than it, none to a place seen before, is stopped when the count passes
/// it; with the default (100000) the chain is walked to its end.
#[test]
fn max_loops_bounds_a_chain_of_jumps() {
    let mut code = Code::new();
    code.at(0x1000);
    for k in 0..10u64 {
        code.jmp(0x1000 + 2 * (k + 1));
    }
    code.jmp_rax(); // 0x1014
    let data = after_psb(0x1000, &[tip(0x1000)]);
    let p = Params {
        max_loops: 4,
        ..params()
    };
    let b = briefs(p, &data, &mut code);
    // Jumps 0..=4 are states; the sixth passes the limit.
    for (k, s) in b[1..6].iter().enumerate() {
        let from = 0x1000 + 2 * k as u64;
        assert_eq!(*s, ok(ty::BRANCH, from, from + 2));
    }
    assert_eq!((b[6].err, b[6].from), (Some(Error::NeLoop), 0x100c));
    let b = briefs(params(), &data, &mut code);
    assert_eq!(b.len(), 1 + 10 + 1);
    assert_eq!(b[11], ok(ty::BRANCH, 0x1014, 0x1000));
}
