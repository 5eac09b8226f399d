//! The event decoder's rules, one test each, on traces built with the encoder.

use pt_decoder::event::{Event, EventDecoder, EventKind, Options};
use pt_decoder::{Config, DecodeError, Errata, ErrorCode};
use pt_encoder::{ExecMode, IpCompression, ModeExec, ModeTsx, Packet, PtwSize, Tnt, WakeReason};
use pt_testkit::trace::encode;

const A: u64 = 0xffff_ffff_8100_1000;
const B: u64 = 0x0000_7fff_0040_2000;
const C: u64 = 0x0000_0000_0040_3000;

fn fup(ip: u64) -> Packet {
    Packet::fup(IpCompression::Full, ip)
}
fn tip(ip: u64) -> Packet {
    Packet::tip(IpCompression::Full, ip)
}
fn pge(ip: u64) -> Packet {
    Packet::tip_pge(IpCompression::Full, ip)
}
fn pgd(ip: u64) -> Packet {
    Packet::tip_pgd(IpCompression::Full, ip)
}
fn pgd_suppressed() -> Packet {
    Packet::tip_pgd(IpCompression::Suppressed, 0)
}
fn tnt(results: &[bool]) -> Packet {
    Packet::Tnt8(Tnt::from_results(results.iter().copied()).unwrap())
}
fn mode64() -> Packet {
    Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64))
}
fn mode32() -> Packet {
    Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit32))
}

/// All events until the first error (returned too).
fn decode_with(ps: &[Packet], config: &Config, options: Options) -> (Vec<Event>, DecodeError) {
    let buf = encode(ps);
    let mut d = EventDecoder::new(&buf, config, options);
    if let Err(e) = d.sync_forward() {
        return (Vec::new(), e);
    }
    let mut evs = Vec::new();
    loop {
        match d.next() {
            Ok(ev) => evs.push(ev),
            Err(e) => return (evs, e),
        }
        assert!(evs.len() < 1000, "runaway");
    }
}

fn decode(ps: &[Packet]) -> Vec<Event> {
    let (evs, e) = decode_with(ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::Eos, "events so far: {evs:#?}");
    evs
}

fn kinds(evs: &[Event]) -> Vec<EventKind> {
    evs.iter().map(|e| e.kind).collect()
}

/// PSB+ with tracing enabled at `ip` in 64-bit mode.
fn psb_enabled(ip: u64) -> Vec<Packet> {
    vec![Packet::Psb, mode64(), fup(ip), Packet::Psbend]
}

fn with(mut head: Vec<Packet>, tail: &[Packet]) -> Vec<Packet> {
    head.extend_from_slice(tail);
    head
}

fn errata(f: impl FnOnce(&mut Errata)) -> Config {
    let mut c = Config::default();
    f(&mut c.errata);
    c
}

#[test]
fn psb_status_enabled() {
    let evs = decode(&psb_enabled(A));
    assert_eq!(
        kinds(&evs),
        [
            EventKind::Enabled {
                ip: A,
                resumed: false
            },
            EventKind::ExecMode {
                mode: ExecMode::Bit64,
                ip: A
            },
        ]
    );
    assert!(evs.iter().all(|e| e.status_update && !e.ip_suppressed));
}

#[test]
fn psb_status_disabled_suppresses_ips() {
    let evs = decode(&[
        Packet::Psb,
        mode64(),
        Packet::Pip {
            cr3: 0x1000,
            nr: true,
        },
        Packet::Vmcs { base: 0x5000 },
        Packet::ModeTsx(ModeTsx {
            intx: true,
            abrt: false,
        }),
        Packet::Cbr { ratio: 33 },
        Packet::Mnt { payload: 7 },
        Packet::Psbend,
    ]);
    assert!(matches!(evs[0].kind, EventKind::Disabled { .. }));
    assert!(evs[0].status_update && evs[0].ip_suppressed);
    assert_eq!(
        kinds(&evs[1..]),
        [
            EventKind::ExecMode {
                mode: ExecMode::Bit64,
                ip: 0
            },
            EventKind::AsyncPaging {
                cr3: 0x1000,
                non_root: true,
                ip: 0
            },
            EventKind::AsyncVmcs {
                base: 0x5000,
                ip: 0
            },
            EventKind::Tsx {
                ip: 0,
                speculative: true,
                aborted: false
            },
            EventKind::Cbr { ratio: 33 },
            EventKind::Mnt { payload: 7 },
        ]
    );
    // IP-bearing status updates are suppressed; MNT is no status update.
    assert!(evs[1..5].iter().all(|e| e.ip_suppressed && e.status_update));
    assert!(evs[5].status_update && !evs[6].status_update);
}

#[test]
fn psb_mode_change_is_a_bad_status_update() {
    let ps = with(
        psb_enabled(A),
        &[Packet::Psb, mode32(), fup(A), Packet::Psbend],
    );
    let (_, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::BadStatusUpdate);
}

#[test]
fn psb_with_pending_event_is_bad_context() {
    // A FUP that starts an asynchronous branch, then a PSB before its TIP.
    let ps = with(psb_enabled(A), &[fup(B), Packet::Psb, Packet::Psbend]);
    let (_, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::BadContext);
}

#[test]
fn tnt_and_tip_are_events() {
    let evs = decode(&with(psb_enabled(A), &[tnt(&[true, false, true]), tip(B)]));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Tnt {
                bits: 0b101,
                size: 3
            },
            EventKind::Tip { ip: B }
        ]
    );
}

#[test]
fn tnt_while_disabled_is_bad_context() {
    let ps = [Packet::Psb, Packet::Psbend, tnt(&[true])];
    let (evs, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(evs.len(), 1);
    assert_eq!(e.code, ErrorCode::BadContext);
}

#[test]
fn fup_tip_is_an_async_branch() {
    let evs = decode(&with(psb_enabled(A), &[fup(B), tip(C)]));
    assert_eq!(
        kinds(&evs[2..]),
        [EventKind::AsyncBranch { from: B, to: C }]
    );
}

#[test]
fn async_branch_goes_first_then_vmcs_paging_mode() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            fup(B),
            Packet::Pip {
                cr3: 0x2000,
                nr: false,
            },
            Packet::Vmcs { base: 0x3000 },
            mode32(),
            tip(C),
        ],
    ));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::AsyncBranch { from: B, to: C },
            EventKind::AsyncVmcs {
                base: 0x3000,
                ip: C
            },
            EventKind::AsyncPaging {
                cr3: 0x2000,
                non_root: false,
                ip: C
            },
            EventKind::ExecMode {
                mode: ExecMode::Bit32,
                ip: C
            },
        ]
    );
    // All reported at the TIP.
    let tip_offset = evs[2].offset;
    assert!(evs[2..].iter().all(|e| e.offset == tip_offset));
}

#[test]
fn mode_exec_binds_to_the_tip_after_the_branch() {
    let evs = decode(&with(psb_enabled(A), &[mode32(), tip(B)]));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Tip { ip: B },
            EventKind::ExecMode {
                mode: ExecMode::Bit32,
                ip: B
            }
        ]
    );
    // An unchanged mode takes up the TIP silently.
    let evs = decode(&with(psb_enabled(A), &[mode64(), tip(B)]));
    assert_eq!(kinds(&evs[2..]), [EventKind::Tip { ip: B }]);
}

#[test]
fn sync_paging_and_vmcs_are_standalone() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Pip {
                cr3: 0x2000,
                nr: true,
            },
            Packet::Vmcs { base: 0x4000 },
        ],
    ));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Paging {
                cr3: 0x2000,
                non_root: true
            },
            EventKind::Vmcs { base: 0x4000 }
        ]
    );
}

#[test]
fn enable_and_disable() {
    let evs = decode(&[
        Packet::Psb,
        Packet::Psbend,
        pge(A),
        tnt(&[false]),
        pgd_suppressed(),
        pge(B),
        fup(C),
        pgd(A),
    ]);
    assert_eq!(
        kinds(&evs[1..3]),
        [
            EventKind::Enabled {
                ip: A,
                resumed: false
            },
            EventKind::Tnt { bits: 0, size: 1 },
        ]
    );
    assert!(matches!(evs[3].kind, EventKind::Disabled { .. }) && evs[3].ip_suppressed);
    assert_eq!(
        kinds(&evs[4..]),
        [
            EventKind::Enabled {
                ip: B,
                resumed: false
            },
            EventKind::AsyncDisabled { at: C, ip: A },
        ]
    );
}

#[test]
fn tip_while_disabled_is_bad_context() {
    let (_, e) = decode_with(
        &[Packet::Psb, Packet::Psbend, tip(A)],
        &Config::default(),
        Options::default(),
    );
    assert_eq!(e.code, ErrorCode::BadContext);
}

#[test]
fn tsx_commit_binds_the_fup_abort_also_branches() {
    let intx = Packet::ModeTsx(ModeTsx {
        intx: true,
        abrt: false,
    });
    let abrt = Packet::ModeTsx(ModeTsx {
        intx: false,
        abrt: true,
    });
    let evs = decode(&with(psb_enabled(A), &[intx, fup(B), abrt, fup(C), tip(A)]));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Tsx {
                ip: B,
                speculative: true,
                aborted: false
            },
            EventKind::Tsx {
                ip: C,
                speculative: false,
                aborted: true
            },
            EventKind::AsyncBranch { from: C, to: A },
        ]
    );
    // While disabled, MODE.TSX is reported at once without IP.
    let evs = decode(&[Packet::Psb, Packet::Psbend, intx]);
    assert!(
        matches!(
            evs[1].kind,
            EventKind::Tsx {
                speculative: true,
                ..
            }
        ) && evs[1].ip_suppressed
    );
}

#[test]
fn overflow_resumes_at_the_fup() {
    let ovf_at = encode(&psb_enabled(A)).len() as u64;
    let evs = decode(&with(psb_enabled(A), &[Packet::Ovf, fup(B), tnt(&[true])]));
    assert_eq!(evs[2].offset, ovf_at);
    assert_eq!(evs[3].offset, ovf_at + 2 + 9, "the TNT after OVF and FUP");
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Overflow { ip: B },
            EventKind::Tnt { bits: 1, size: 1 }
        ]
    );
}

#[test]
fn overflow_while_disabled_then_enable() {
    let evs = decode(&with(psb_enabled(A), &[Packet::Ovf, pge(B)]));
    assert!(matches!(evs[2].kind, EventKind::Overflow { .. }) && evs[2].ip_suppressed);
    assert_eq!(
        evs[3].kind,
        EventKind::Enabled {
            ip: B,
            resumed: false
        }
    );
}

#[test]
fn overflow_flushes_events_waiting_for_an_ip_when_disabled() {
    // EXSTOP with IP bit while tracing is disabled: its FUP never comes.
    let evs = decode(&[
        Packet::Psb,
        Packet::Psbend,
        Packet::Exstop { ip: true },
        Packet::Ovf,
    ]);
    assert!(matches!(evs[1].kind, EventKind::Exstop { .. }) && evs[1].ip_suppressed);
    assert!(matches!(evs[2].kind, EventKind::Overflow { .. }) && evs[2].ip_suppressed);
}

#[test]
fn skd010_tip_after_ovf() {
    let ps = with(psb_enabled(A), &[Packet::Ovf, tip(B), tnt(&[true])]);
    let (_, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::BadContext);
    let (evs, e) = decode_with(&ps, &errata(|e| e.skd010 = true), Options::default());
    assert_eq!(e.code, ErrorCode::Eos);
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Overflow { ip: B },
            EventKind::Tnt { bits: 1, size: 1 }
        ]
    );
}

#[test]
fn skd010_mode_tsx_before_fup() {
    let ps = with(
        psb_enabled(A),
        &[
            Packet::Ovf,
            Packet::ModeTsx(ModeTsx {
                intx: true,
                abrt: false,
            }),
            fup(B),
            tnt(&[false]),
        ],
    );
    let (evs, e) = decode_with(&ps, &errata(|e| e.skd010 = true), Options::default());
    assert_eq!(e.code, ErrorCode::Eos);
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Overflow { ip: B },
            EventKind::Tsx {
                ip: B,
                speculative: true,
                aborted: false
            },
            EventKind::Tnt { bits: 0, size: 1 },
        ]
    );
}

#[test]
fn apl11_pgd_after_ovf() {
    let ps = with(
        psb_enabled(A),
        &[
            Packet::Ovf,
            Packet::Tsc { tsc: 0x1000 },
            pgd_suppressed(),
            pge(C),
        ],
    );
    let (_, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::BadContext);
    let (evs, e) = decode_with(&ps, &errata(|e| e.apl11 = true), Options::default());
    assert_eq!(e.code, ErrorCode::Eos);
    assert!(matches!(evs[2].kind, EventKind::Overflow { .. }) && evs[2].ip_suppressed);
    // The overflow is at the time of the OVF; the TSC after it applies to what follows.
    assert_eq!(evs[2].time.tsc, None);
    assert_eq!(
        evs[3].kind,
        EventKind::Enabled {
            ip: C,
            resumed: false
        }
    );
    assert_eq!(evs[3].time.tsc, Some(0x1000));
    assert_eq!(evs.len(), 4);
}

#[test]
fn apl12_fup_after_ovf_while_disabled() {
    let ps = with(psb_enabled(A), &[Packet::Ovf, fup(B), pge(C)]);
    let evs = decode(&ps);
    assert_eq!(evs[2].kind, EventKind::Overflow { ip: B });
    let (evs, e) = decode_with(&ps, &errata(|e| e.apl12 = true), Options::default());
    assert_eq!(e.code, ErrorCode::Eos);
    assert!(matches!(evs[2].kind, EventKind::Overflow { .. }) && evs[2].ip_suppressed);
    assert_eq!(
        evs[3].kind,
        EventKind::Enabled {
            ip: C,
            resumed: false
        }
    );
}

#[test]
fn bdm70_fup_in_psb_before_pge() {
    let ps = [Packet::Psb, fup(A), Packet::Psbend, pge(A)];
    let evs = decode(&ps);
    assert_eq!(
        evs[0].kind,
        EventKind::Enabled {
            ip: A,
            resumed: false
        }
    );
    let (evs, _) = decode_with(&ps, &errata(|e| e.bdm70 = true), Options::default());
    assert!(matches!(evs[0].kind, EventKind::Disabled { .. }));
    assert_eq!(
        evs[1].kind,
        EventKind::Enabled {
            ip: A,
            resumed: false
        }
    );
}

#[test]
fn power_events() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Mwait {
                hints: 0x20,
                ext: 1,
            },
            Packet::Exstop { ip: true },
            fup(B),
            Packet::Pwre {
                state: 2,
                sub_state: 1,
                hw: false,
            },
            Packet::Pwrx {
                last: 2,
                deepest: 3,
                wake: WakeReason {
                    interrupt: true,
                    store: false,
                    autonomous: false,
                },
            },
            Packet::Exstop { ip: false },
        ],
    ));
    assert_eq!(
        kinds(&evs[2..6]),
        [
            EventKind::Mwait {
                ip: B,
                hints: 0x20,
                ext: 1
            },
            EventKind::Exstop { ip: B },
            EventKind::Pwre {
                state: 2,
                sub_state: 1,
                hw: false
            },
            EventKind::Pwrx {
                last: 2,
                deepest: 3,
                interrupt: true,
                store: false,
                autonomous: false
            },
        ]
    );
    assert!(matches!(evs[6].kind, EventKind::Exstop { .. }) && evs[6].ip_suppressed);
    assert_eq!(evs.len(), 7);
}

#[test]
fn mwait_then_exstop_without_ip() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Mwait { hints: 1, ext: 0 },
            Packet::Exstop { ip: false },
        ],
    ));
    assert!(matches!(evs[2].kind, EventKind::Mwait { hints: 1, .. }) && evs[2].ip_suppressed);
    assert!(matches!(evs[3].kind, EventKind::Exstop { .. }) && evs[3].ip_suppressed);
}

#[test]
fn ptwrite_with_and_without_ip() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Ptw {
                size: PtwSize::Eight,
                payload: 0xdead_beef_0000_0001,
                ip: true,
            },
            fup(B),
            Packet::Ptw {
                size: PtwSize::Four,
                payload: 0x42,
                ip: false,
            },
        ],
    ));
    assert_eq!(
        evs[2].kind,
        EventKind::Ptwrite {
            ip: B,
            size: 8,
            payload: 0xdead_beef_0000_0001
        }
    );
    assert!(!evs[2].ip_suppressed);
    assert!(
        matches!(
            evs[3].kind,
            EventKind::Ptwrite {
                size: 4,
                payload: 0x42,
                ..
            }
        ) && evs[3].ip_suppressed
    );
}

fn cfe(ty: u8, vector: u8, ip: bool) -> Packet {
    Packet::Cfe { ty, vector, ip }
}

#[test]
fn event_trace_interrupt_with_cr2() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Evd {
                ty: 0,
                payload: 0xdead_0000,
            },
            cfe(1, 14, true),
            fup(B),
            fup(B),
            tip(C),
        ],
    ));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Interrupt {
                vector: 14,
                cr2: Some(0xdead_0000),
                ip: B
            },
            EventKind::AsyncBranch { from: B, to: C },
        ]
    );
}

#[test]
fn event_trace_interrupt_without_ip_binds_the_async_branch_fup() {
    let evs = decode(&with(psb_enabled(A), &[cfe(1, 32, false), fup(B), tip(C)]));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Interrupt {
                vector: 32,
                cr2: None,
                ip: B
            },
            EventKind::AsyncBranch { from: B, to: C },
        ]
    );
}

#[test]
fn event_trace_vmexit_collects_its_data() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Evd { ty: 2, payload: 48 },
            Packet::Evd {
                ty: 1,
                payload: 0x181,
            },
            cfe(9, 2, true),
            fup(B),
            pgd_suppressed(),
        ],
    ));
    assert_eq!(
        evs[2].kind,
        EventKind::Vmexit {
            vector: Some(2),
            vmxr: Some(48),
            vmxq: Some(0x181),
            ip: B
        }
    );
    assert!(matches!(evs[3].kind, EventKind::Disabled { .. }));
}

#[test]
fn event_trace_duplicate_data_is_bad_context() {
    let ps = with(
        psb_enabled(A),
        &[
            Packet::Evd { ty: 2, payload: 1 },
            Packet::Evd { ty: 2, payload: 2 },
        ],
    );
    let (_, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::BadContext);
    // CR2 data before an IRET does not fit.
    let ps = with(
        psb_enabled(A),
        &[Packet::Evd { ty: 0, payload: 1 }, cfe(2, 0, false)],
    );
    let (_, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::BadContext);
}

#[test]
fn event_trace_standalone_and_suppressed() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            cfe(2, 0, false),    // IRET: now, no IP
            cfe(5, 0x9a, false), // SIPI while enabled: waits for the FUP, IP suppressed
            fup(B),
            tip(C),
            cfe(15, 0, true), // SYSCALL with IP
            fup(A),
        ],
    ));
    assert!(matches!(evs[2].kind, EventKind::Iret { .. }) && evs[2].ip_suppressed);
    assert_eq!(evs[3].kind, EventKind::Sipi { vector: 0x9a });
    assert!(evs[3].ip_suppressed);
    assert_eq!(evs[4].kind, EventKind::AsyncBranch { from: B, to: C });
    assert_eq!(evs[5].kind, EventKind::Syscall { ip: A });
    // RSM/SIPI never carry an IP.
    let (_, e) = decode_with(
        &with(psb_enabled(A), &[cfe(4, 0, true)]),
        &Config::default(),
        Options::default(),
    );
    assert_eq!(e.code, ErrorCode::BadPacket);
}

#[test]
fn event_trace_smi_while_disabled_is_standalone() {
    let evs = decode(&[
        Packet::Psb,
        Packet::Psbend,
        cfe(3, 0, false),
        cfe(12, 7, false),
    ]);
    assert!(matches!(evs[1].kind, EventKind::Smi { .. }) && evs[1].ip_suppressed);
    assert!(matches!(evs[2].kind, EventKind::Uintr { vector: 7, .. }) && evs[2].ip_suppressed);
}

#[test]
fn iflags_events_on_request() {
    let mut m = ModeExec::from_mode(ExecMode::Bit64);
    m.iflag = true;
    let ps = with(psb_enabled(A), &[Packet::ModeExec(m), tip(B)]);
    // Without the option an IF change alone changes nothing.
    assert_eq!(kinds(&decode(&ps)[2..]), [EventKind::Tip { ip: B }]);
    let opts = Options {
        iflags_events: true,
        ..Options::default()
    };
    let (evs, _) = decode_with(&ps, &Config::default(), opts);
    assert_eq!(
        evs[2].kind,
        EventKind::Iflags {
            iflag: false,
            ip: A
        }
    );
    assert_eq!(
        kinds(&evs[3..]),
        [
            EventKind::Tip { ip: B },
            EventKind::Iflags { iflag: true, ip: B }
        ]
    );
}

#[test]
fn trigger() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Trig {
                trbv: 3,
                ip: true,
                mult: false,
                icnt: Some(0),
            },
            fup(B),
            Packet::Trig {
                trbv: 1,
                ip: false,
                mult: true,
                icnt: Some(5),
            },
            Packet::Trig {
                trbv: 2,
                ip: false,
                mult: false,
                icnt: None,
            },
        ],
    ));
    assert_eq!(
        evs[2].kind,
        EventKind::Trig {
            trbv: 3,
            icnt: 0,
            ip: B,
            mult: false
        }
    );
    assert_eq!(
        evs[3].kind,
        EventKind::Trig {
            trbv: 1,
            icnt: 5,
            ip: 0,
            mult: true
        }
    );
    assert!(!evs[3].ip_suppressed && evs[4].ip_suppressed);
}

#[test]
fn stop_mnt_cbr() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            Packet::Cbr { ratio: 20 },
            Packet::Mnt { payload: 9 },
            Packet::Stop,
        ],
    ));
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Cbr { ratio: 20 },
            EventKind::Mnt { payload: 9 },
            EventKind::Stop
        ]
    );
}

#[test]
fn events_carry_time() {
    let evs = decode(&[
        Packet::Psb,
        Packet::Tsc { tsc: 0x1_0000 },
        mode64(),
        fup(A),
        Packet::Psbend,
        tnt(&[true]),
        Packet::Tsc { tsc: 0x2_0000 },
        tip(B),
    ]);
    assert_eq!(evs[0].time.tsc, Some(0x1_0000));
    assert_eq!(evs[2].time.tsc, Some(0x1_0000));
    assert_eq!(evs[3].time.tsc, Some(0x2_0000));
    // No TSC: no time.
    let evs = decode(&psb_enabled(A));
    assert_eq!(evs[0].time.tsc, None);
}

#[test]
fn tick_events_on_request() {
    let ps = with(
        psb_enabled(A),
        &[
            Packet::Tsc { tsc: 100 },
            tnt(&[true]),
            Packet::Tsc { tsc: 100 }, // no change: no tick
            Packet::Tsc { tsc: 200 },
        ],
    );
    let plain = decode(&ps);
    assert!(!plain
        .iter()
        .any(|e| matches!(e.kind, EventKind::Tick { .. })));
    let opts = Options {
        tick_events: true,
        ..Options::default()
    };
    let (evs, e) = decode_with(&ps, &Config::default(), opts);
    assert_eq!(e.code, ErrorCode::Eos);
    assert_eq!(
        kinds(&evs[2..]),
        [
            EventKind::Tick { ip: A },
            EventKind::Tnt { bits: 1, size: 1 },
            EventKind::Tick { ip: A },
        ]
    );
    assert_eq!(evs[2].time.tsc, Some(100));
    assert_eq!(evs[4].time.tsc, Some(200));
}

#[test]
fn offsets_and_resync() {
    let mut ps = psb_enabled(A);
    ps.push(tnt(&[true]));
    let first = encode(&ps).len() as u64;
    ps.extend(psb_enabled(B));
    ps.push(tnt(&[false]));
    let buf = encode(&ps);
    let mut d = EventDecoder::new(&buf, &Config::default(), Options::default());
    assert_eq!(d.offset().map_err(|e| e.code), Err(ErrorCode::NoSync));
    assert_eq!(d.next().map_err(|e| e.code), Err(ErrorCode::NoSync));
    assert_eq!(d.sync_forward(), Ok(0));
    assert_eq!(d.sync_offset(), Some(0));
    assert_eq!(d.sync_forward(), Ok(first));
    assert_eq!(
        d.next().unwrap().kind,
        EventKind::Enabled {
            ip: B,
            resumed: false
        }
    );
    // Backward from the end finds the last PSB; again, the one before.
    let mut d = EventDecoder::new(&buf, &Config::default(), Options::default());
    assert_eq!(d.sync_backward(), Ok(first));
    assert_eq!(d.sync_backward(), Ok(0));
    assert_eq!(d.sync_backward().map_err(|e| e.code), Err(ErrorCode::Eos));
    d.sync_set(first).unwrap();
    assert!(matches!(
        d.next().unwrap().kind,
        EventKind::Enabled { ip: B, .. }
    ));
    assert_eq!(
        d.sync_set(1).map_err(|e| e.code),
        Err(ErrorCode::NoSync),
        "no PSB at offset 1"
    );
}

#[test]
fn unresolved_overflow_needs_a_new_sync() {
    // OVF, then a TNT: no IP to resume at.
    let mut ps = psb_enabled(A);
    let ovf_at = encode(&ps).len() as u64;
    ps.extend([Packet::Ovf, tnt(&[true])]);
    let buf = encode(&ps);
    let mut d = EventDecoder::new(&buf, &Config::default(), Options::default());
    d.sync_forward().unwrap();
    d.next().unwrap();
    d.next().unwrap();
    let e = d.next().unwrap_err();
    assert_eq!(e.code, ErrorCode::BadContext);
    assert_eq!(e.offset, ovf_at + 2, "the TNT");
    assert_eq!(d.offset(), Ok(ovf_at));
    assert_eq!(d.next().map_err(|e| e.code), Err(ErrorCode::NoSync));
}

#[test]
fn unknown_cfe_type_takes_its_fup() {
    let evs = decode(&with(psb_enabled(A), &[cfe(0x1f, 0, true), fup(B), tip(C)]));
    // The FUP belongs to the unknown event: no asynchronous branch, so the TIP is a
    // plain indirect branch.
    assert_eq!(kinds(&evs[2..]), [EventKind::Tip { ip: C }]);
}

#[test]
fn keep_tcal_on_ovf() {
    let config = Config {
        nom_freq: 36,
        ..Config::default()
    };
    let ps = [
        Packet::Psb,
        Packet::Tsc { tsc: 0x10_0000 },
        Packet::Cbr { ratio: 36 },
        mode64(),
        fup(A),
        Packet::Psbend,
        Packet::Ovf,
        fup(B),
        Packet::Cyc { value: 100 },
        tnt(&[true]),
    ];
    // Without: the calibration is gone after the OVF and the CYC is lost.
    let (evs, _) = decode_with(&ps, &config, Options::default());
    let last = evs.last().unwrap();
    assert!(matches!(last.kind, EventKind::Tnt { .. }));
    assert_eq!(last.time.tsc, Some(0x10_0000));
    assert_eq!(last.time.lost_cyc, 1);
    // With: nom_freq/cbr = 1 TSC tick per cycle.
    let opts = Options {
        keep_tcal_on_ovf: true,
        ..Options::default()
    };
    let (evs, _) = decode_with(&ps, &config, opts);
    let last = evs.last().unwrap();
    assert_eq!(last.time.tsc, Some(0x10_0000 + 100));
    assert_eq!(last.time.lost_cyc, 0);
}

#[test]
fn trigger_count_while_disabled_is_bad() {
    let ps = [
        Packet::Psb,
        Packet::Psbend,
        Packet::Trig {
            trbv: 1,
            ip: false,
            mult: false,
            icnt: Some(3),
        },
    ];
    let (_, e) = decode_with(&ps, &Config::default(), Options::default());
    assert_eq!(e.code, ErrorCode::BadPacket);
}

/// libipt rejects a MODE.Exec that changes nothing (or only IF, without iflags events)
/// before a TIP.PGD; hardware may send one when a far branch leaves the filter region,
/// so we let it take up the TIP.PGD silently.
#[test]
fn unchanged_mode_before_disable_is_accepted() {
    let mut m = ModeExec::from_mode(ExecMode::Bit64);
    m.iflag = true;
    let evs = decode(&with(psb_enabled(A), &[Packet::ModeExec(m), pgd(B)]));
    assert_eq!(kinds(&evs[2..]), [EventKind::Disabled { ip: B }]);
    // A real change goes out first, at the (unknown) target.
    let evs = decode(&with(psb_enabled(A), &[mode32(), pgd(B)]));
    assert!(matches!(
        evs[2].kind,
        EventKind::ExecMode {
            mode: ExecMode::Bit32,
            ..
        }
    ));
    assert!(evs[2].ip_suppressed);
    assert_eq!(evs[3].kind, EventKind::Disabled { ip: B });
}

#[test]
fn async_disable_takes_pending_paging() {
    let evs = decode(&with(
        psb_enabled(A),
        &[
            fup(B),
            Packet::Pip {
                cr3: 0x7000,
                nr: false,
            },
            pgd_suppressed(),
        ],
    ));
    assert!(matches!(evs[2].kind, EventKind::AsyncDisabled { at: B, .. }) && evs[2].ip_suppressed);
    assert!(
        matches!(evs[3].kind, EventKind::AsyncPaging { cr3: 0x7000, .. }) && evs[3].ip_suppressed
    );
    assert_eq!(evs.len(), 4);
}
