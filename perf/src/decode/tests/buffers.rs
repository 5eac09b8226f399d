//! A queue's trace in more than one buffer.

use super::*;

fn buf(data: &[u8], consecutive: bool, trace_nr: u64) -> Buffer<'_> {
    Buffer {
        data,
        consecutive,
        reference: 0,
        trace_nr,
    }
}

fn two_loops() -> Code {
    let mut code = Code::new();
    code.at(0x1000).nop().jz(0x1000);
    code.at(0x2000).nop().jz(0x2000);
    code.done()
}

/// A buffer that continues the last one is read on as if the two were one:
/// no resync, the packet offsets run on, the trace number stays. (A PSB
/// event leaves the position at its PSBEND.)
#[test]
fn a_consecutive_buffer_goes_on_in_sync() {
    let first = after_psb(0x1000, &[trace::tnt_str("!")]);
    let second = trace::encode(&[trace::tnt_str("!!")]);
    let mut d = Decoder::new(params(), vec![buf(&first, false, 1), buf(&second, true, 1)]);
    let mut code = two_loops();
    let mut got = Vec::new();
    for _ in 0..4 {
        let s = next(&mut d, &mut code);
        got.push((brief(&s), s.trace_nr, d.position().pos));
    }
    let at = first.len() as u64;
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 1, at - 3),
            (ok(ty::BRANCH, 0x1001, 0x1000), 1, at - 1),
            (ok(ty::BRANCH, 0x1001, 0x1000), 1, at),
            (ok(ty::BRANCH, 0x1001, 0x1000), 1, at),
        ]
    );
    assert_eq!(next(&mut d, &mut code).err, Some(Error::NoData));
}

/// A buffer that does not continue the last one (data was lost between
/// them) starts over: perf drops the IP, the time and the return stack,
/// scans for the buffer's first PSB (what comes before it is not decoded)
/// and takes the buffer's trace number; there is no error state for the
/// gap.
#[test]
fn a_buffer_that_does_not_continue_starts_over_at_its_psb() {
    let first = after_psb(0x1000, &[trace::tnt_str("!")]);
    let mut second = trace::encode(&[trace::tnt_str("!!!")]);
    second.extend(after_psb(0x2000, &[trace::tnt_str("!")]));
    let mut d = Decoder::new(
        params(),
        vec![buf(&first, false, 1), buf(&second, false, 2)],
    );
    let mut code = two_loops();
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.trace_nr, s.tot_insn_cnt))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 1, 0),
            (ok(ty::BRANCH, 0x1001, 0x1000), 1, 2),
            (ok(ty::PSB_EVT, 0x2000, 0), 2, 2),
            (ok(ty::BRANCH, 0x2001, 0x2000), 2, 4),
        ]
    );
}

/// The PSB's first bytes end one buffer and the rest start the next,
/// consecutive one: perf's scan puts the PSB together and syncs there.
#[test]
fn a_psb_split_over_consecutive_buffers_is_found() {
    let psb_plus = after_psb(0x1000, &[trace::tnt_str("!")]);
    let (head, tail) = psb_plus.split_at(7);
    let mut first = vec![0x00, 0x00, 0x00];
    first.extend_from_slice(head);
    let mut d = Decoder::new(params(), vec![buf(&first, false, 1), buf(tail, true, 1)]);
    let mut code = two_loops();
    let b: Vec<_> = all_states(&mut d, &mut code).iter().map(brief).collect();
    assert_eq!(
        b,
        [ok(ty::PSB_EVT, 0x1000, 0), ok(ty::BRANCH, 0x1001, 0x1000)]
    );
}

/// The same split over buffers that are not consecutive: the PSB is lost
/// with the first buffer, and decoding starts at the next whole PSB.
#[test]
fn a_psb_split_over_a_gap_is_lost() {
    let psb_plus = after_psb(0x1000, &[trace::tnt_str("!")]);
    let (head, tail) = psb_plus.split_at(7);
    let mut second = tail.to_vec();
    second.extend(after_psb(0x2000, &[trace::tnt_str("!")]));
    let mut d = Decoder::new(params(), vec![buf(head, false, 1), buf(&second, false, 2)]);
    let mut code = two_loops();
    let b: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.trace_nr))
        .collect();
    assert_eq!(
        b,
        [
            (ok(ty::PSB_EVT, 0x2000, 0), 2),
            (ok(ty::BRANCH, 0x2001, 0x2000), 2)
        ]
    );
}

/// A buffer that does not continue the last one gives its TSCs the upper
/// byte of its own AUXTRACE reference (the time is dropped at the gap).
#[test]
fn a_new_buffer_times_its_tsc_from_its_reference() {
    let psb = |tsc, ip| {
        trace::encode(&[
            Packet::Psb,
            Packet::Tsc { tsc },
            trace::mode64(),
            fup(ip),
            Packet::Psbend,
        ])
    };
    let first = psb(0x00ff_ffff_ffff_fff0, 0x1000);
    let second = psb(0x10, 0x2000);
    let bufs = vec![
        Buffer {
            data: &first,
            consecutive: false,
            reference: 0x00ff_ffff_ffff_fff0,
            trace_nr: 1,
        },
        Buffer {
            data: &second,
            consecutive: false,
            reference: 0x0100_0000_0000_0000,
            trace_nr: 2,
        },
    ];
    let mut d = Decoder::new(params(), bufs);
    let mut code = two_loops();
    let got: Vec<_> = all_states(&mut d, &mut code)
        .iter()
        .map(|s| (brief(s), s.timestamp))
        .collect();
    assert_eq!(
        got,
        [
            (ok(ty::PSB_EVT, 0x1000, 0), 0x00ff_ffff_ffff_fff0),
            (ok(ty::PSB_EVT, 0x2000, 0), 0x0100_0000_0000_0010),
        ]
    );
}
