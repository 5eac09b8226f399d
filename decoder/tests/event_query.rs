//! The query decoder: branch queries, TNT caching, deferred TIPs, status flags.

use pt_decoder::event::{EventKind, Options};
use pt_decoder::query::{QueryDecoder, Status};
use pt_decoder::{Config, ErrorCode};
use pt_encoder::{ExecMode, IpCompression, ModeExec, Packet, Tnt};
use pt_testkit::trace::encode;

const A: u64 = 0x40_1000;
const B: u64 = 0x40_2000;

fn tnt(results: &[bool]) -> Packet {
    Packet::Tnt8(Tnt::from_results(results.iter().copied()).unwrap())
}

fn psb(ip: Option<u64>) -> Vec<Packet> {
    let mut v = vec![
        Packet::Psb,
        Packet::Tsc { tsc: 0x1000 },
        Packet::Cbr { ratio: 40 },
        Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
    ];
    if let Some(ip) = ip {
        v.push(Packet::fup(IpCompression::Sext48, ip));
    }
    v.push(Packet::Psbend);
    v
}

const PENDING: Status = Status {
    event_pending: true,
    ip_suppressed: false,
    eos: false,
};
const NONE: Status = Status {
    event_pending: false,
    ip_suppressed: false,
    eos: false,
};
const EOS: Status = Status {
    event_pending: false,
    ip_suppressed: false,
    eos: true,
};

#[test]
fn sync_reports_the_start_ip_and_pending_status_events() {
    let buf = encode(&psb(Some(A)));
    let mut q = QueryDecoder::new(&buf, &Config::default(), Options::default());
    let (status, ip) = q.sync_forward().unwrap();
    assert_eq!(ip, Some(A));
    assert_eq!(status, PENDING);
    // The status events are still there to take.
    let (ev, s) = q.event().unwrap();
    assert_eq!(
        ev.kind,
        EventKind::Enabled {
            ip: A,
            resumed: false
        }
    );
    assert_eq!(s, PENDING);
    let (ev, _) = q.event().unwrap();
    assert_eq!(ev.kind, EventKind::Cbr { ratio: 40 });
    let (ev, s) = q.event().unwrap();
    assert_eq!(
        ev.kind,
        EventKind::ExecMode {
            mode: ExecMode::Bit64,
            ip: A
        }
    );
    assert_eq!(s, EOS);
    assert_eq!(q.event().unwrap_err().code, ErrorCode::Eos);
    assert_eq!(q.time().tsc, Some(0x1000));
    assert_eq!((q.time().lost_mtc, q.time().lost_cyc), (0, 0));
    assert_eq!(q.core_bus_ratio(), Ok(40));

    let buf = encode(&psb(None));
    let mut q = QueryDecoder::new(&buf, &Config::default(), Options::default());
    let (status, ip) = q.sync_forward().unwrap();
    assert_eq!(ip, None);
    assert!(status.ip_suppressed && status.event_pending);
}

fn take_events(q: &mut QueryDecoder<'_>) -> Status {
    loop {
        let s = q.status();
        if !s.event_pending {
            return s;
        }
        q.event().unwrap();
    }
}

#[test]
fn branches_in_order() {
    let mut ps = psb(Some(A));
    ps.extend([
        tnt(&[true, false]),
        tnt(&[true]),
        Packet::tip(IpCompression::Update16, B),
        Packet::tip(IpCompression::Suppressed, 0),
    ]);
    let buf = encode(&ps);
    let mut q = QueryDecoder::new(&buf, &Config::default(), Options::default());
    q.sync_forward().unwrap();
    assert_eq!(take_events(&mut q), NONE);
    // Results come oldest first, across TNT packets.
    assert_eq!(q.cond_branch().unwrap(), (true, NONE));
    assert_eq!(q.cond_branch().unwrap(), (false, NONE));
    assert_eq!(q.cond_branch().unwrap(), (true, NONE));
    assert_eq!(q.event().unwrap_err().code, ErrorCode::BadQuery);
    assert_eq!(q.cond_branch().unwrap_err().code, ErrorCode::BadQuery);
    assert_eq!(q.indirect_branch().unwrap(), (Some(B), NONE));
    let (ip, s) = q.indirect_branch().unwrap();
    assert_eq!(ip, None);
    assert!(s.ip_suppressed && s.eos);
    assert_eq!(q.cond_branch().unwrap_err().code, ErrorCode::Eos);
}

#[test]
fn deferred_tip_is_answered_while_results_are_cached() {
    // call rbx; ... the TIP comes after a TNT holding later branches.
    let mut ps = psb(Some(A));
    ps.extend([tnt(&[true, true]), Packet::tip(IpCompression::Sext48, B)]);
    let buf = encode(&ps);
    let mut q = QueryDecoder::new(&buf, &Config::default(), Options::default());
    q.sync_forward().unwrap();
    take_events(&mut q);
    let (ip, s) = q.indirect_branch().unwrap();
    assert_eq!(ip, Some(B));
    // Results are still cached: no end yet, no event pending.
    assert_eq!(s, NONE);
    assert_eq!(q.cond_branch().unwrap(), (true, NONE));
    assert_eq!(q.cond_branch().unwrap(), (true, EOS));
}

#[test]
fn events_wait_for_the_cached_results() {
    let mut ps = psb(Some(A));
    ps.extend([
        tnt(&[false]),
        Packet::Pip {
            cr3: 0x3000,
            nr: false,
        },
    ]);
    let buf = encode(&ps);
    let mut q = QueryDecoder::new(&buf, &Config::default(), Options::default());
    q.sync_forward().unwrap();
    take_events(&mut q);
    assert_eq!(q.event().unwrap_err().code, ErrorCode::BadQuery);
    // After the last result the paging event is pending.
    assert_eq!(q.cond_branch().unwrap(), (false, PENDING));
    let (ev, s) = q.event().unwrap();
    assert_eq!(
        ev.kind,
        EventKind::Paging {
            cr3: 0x3000,
            non_root: false
        }
    );
    assert_eq!(s, EOS);
}

#[test]
fn time_is_that_of_the_last_query() {
    let mut ps = psb(Some(A));
    ps.extend([tnt(&[true]), Packet::Tsc { tsc: 0x2000 }, tnt(&[false])]);
    let buf = encode(&ps);
    let mut q = QueryDecoder::new(&buf, &Config::default(), Options::default());
    q.sync_forward().unwrap();
    take_events(&mut q);
    q.cond_branch().unwrap();
    assert_eq!(q.time().tsc, Some(0x1000));
    q.cond_branch().unwrap();
    assert_eq!(q.time().tsc, Some(0x2000));
}

#[test]
fn sync_backward_and_set() {
    let mut ps = psb(Some(A));
    ps.push(tnt(&[true]));
    let second = encode(&ps).len() as u64;
    ps.extend(psb(Some(B)));
    ps.push(tnt(&[false]));
    let buf = encode(&ps);
    let mut q = QueryDecoder::new(&buf, &Config::default(), Options::default());
    assert_eq!(q.sync_backward().unwrap().1, Some(B));
    assert_eq!(q.sync_offset(), Some(second));
    assert_eq!(q.sync_backward().unwrap().1, Some(A));
    assert_eq!(q.sync_offset(), Some(0));
    assert_eq!(q.sync_set(second).unwrap().1, Some(B));
    assert_eq!(q.sync_forward().unwrap_err().code, ErrorCode::Eos);
}
