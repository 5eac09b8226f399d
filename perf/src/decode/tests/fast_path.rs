//! [`Decoder::take_run`] (the fast path, with the crate's own walker) gives the
//! states [`Decoder::decode`] gives one by one, and the crate's walker walks
//! as the perf-model walker of these tests does.

use super::*;
use crate::code::{CodeWalker, ImageWalker};

/// What is compared of a state: type, IPs, instructions so far, error.
type Seen = (u32, u64, u64, u64, Option<Error>);

fn seen(s: &State) -> Seen {
    (s.type_, s.from_ip, s.to_ip, s.tot_insn_cnt, s.err)
}

/// The states of `data` decoded one by one over `code` (this module's walker).
fn plain(p: Params, data: &[u8], code: &Code) -> Vec<Seen> {
    let mut code = code.done();
    let mut d = Decoder::new(p, one_buffer(data));
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let s = next(&mut d, &mut code);
        out.push(seen(&s));
        if s.err == Some(Error::NoData) {
            return out;
        }
    }
    panic!("the trace does not end");
}

/// The same with the crate's walker, taking runs of at most `max` states on
/// the fast path after each state, as the sample synthesis does.
fn fast(p: Params, data: &[u8], code: &Code, max: usize) -> (Vec<Seen>, usize) {
    let image = code.image();
    let mut cw = CodeWalker::new();
    let mut w = ImageWalker::new(&mut cw, &image);
    let mut d = Decoder::new(p, one_buffer(data));
    let mut out = Vec::new();
    let mut steps = Vec::new();
    let mut taken = 0;
    for _ in 0..10_000 {
        let s = *d.decode(&mut w);
        out.push(seen(&s));
        if s.err == Some(Error::NoData) {
            return (out, taken);
        }
        let n = d.take_run(&mut w, u64::MAX, max, &mut steps);
        taken += n;
        for step in &steps {
            let before = step.tot_before();
            for (k, pi) in w.plain_insns(step.plain_at, step.plain).iter().enumerate() {
                out.push((ty::INSTRUCTION, pi.ip, 0, before + k as u64 + 1, None));
            }
            if step.type_ != 0 {
                out.push((
                    step.type_,
                    step.from_ip,
                    step.to_ip,
                    step.tot_insn_cnt,
                    None,
                ));
            }
        }
        if n != 0 {
            // The decoder's state is the run's last state.
            assert_eq!(seen(d.state()), *out.last().unwrap());
        }
    }
    panic!("the trace does not end");
}

/// A loop with a call, a compressed return, an indirect call and an
/// indirect jump, and a trace through it.
fn loop_with_calls() -> (Code, Vec<u8>) {
    let mut code = Code::new();
    code.at(0x1000).nop().call(0x1100); // 0x1001: call, returns to 0x1006
    code.jz(0x1000); // 0x1006
    code.nop().call_rax(); // 0x1008: nop, 0x1009: call rax, returns to 0x100b
    code.jmp_rax(); // 0x100b
    code.at(0x1100).nops(3).jz(0x1100).ret(); // 0x1103: jz, 0x1105: ret
    code.at(0x1200).nop().ret(); // 0x1201: ret
                                 // Round r: the callee loops r times and returns (compressed), the jz at
                                 // 0x1006 goes back once (the callee now returns at once) and then falls
                                 // through to the indirect call (TIP), whose callee returns (compressed)
                                 // to the indirect jump (TIP) back to the start.
    let mut packets = Vec::new();
    for round in 0..6 {
        let mut bits = vec![true; round];
        bits.push(false);
        packets.push(trace::tnt(&bits));
        packets.push(trace::tnt(&[true, true, false, true, false]));
        packets.push(tip(0x1200));
        packets.push(trace::tnt(&[true]));
        packets.push(tip(0x1000));
    }
    let data = after_psb(0x1000, &packets);
    (code.done(), data)
}

/// The fast path's states equal the plain path's, branch by branch and
/// instruction by instruction, for runs of any length; the crate's walker
/// walks as this module's does.
#[test]
fn take_run_gives_the_states_decode_gives() {
    let (code, data) = loop_with_calls();
    for p in [
        params(),
        Params {
            period_type: PeriodType::Instructions,
            period: 1,
            ..params()
        },
    ] {
        let want = plain(p, &data, &code);
        assert!(want.len() > 40, "{}", want.len());
        assert!(want
            .iter()
            .all(|s| s.4.is_none() || s.4 == Some(Error::NoData)));
        for max in [1, 3, 256] {
            let (got, taken) = fast(p, &data, &code, max);
            assert!(taken > 0, "the fast path took no state");
            assert_eq!(got, want, "period {:?}, runs of {max}", p.period_type);
        }
    }
}
