//! encode → decode is the identity, for random packets of every kind and for streams.

use proptest::prelude::*;
use pt_decoder::packet::{decode_packet, PacketContext};
use pt_decoder::{Config, Errata, PacketDecoder};
use pt_encoder::packet::IpCompression;
use pt_encoder::{
    encode_to_vec, IpPacketKind, IpPayload, ModeExec, ModeTsx, Packet, PtwSize, Tnt, WakeReason,
};

fn ip_payload() -> impl Strategy<Value = IpPayload> {
    (
        prop::sample::select(IpCompression::ALL.to_vec()),
        any::<u64>(),
    )
        .prop_map(|(c, ip)| IpPayload::new(c, ip))
}

fn ip_kind() -> impl Strategy<Value = IpPacketKind> {
    prop::sample::select(vec![
        IpPacketKind::Tip,
        IpPacketKind::TipPge,
        IpPacketKind::TipPgd,
        IpPacketKind::Fup,
    ])
}

fn tnt(max: u32) -> impl Strategy<Value = Tnt> {
    (1..=max, any::<u64>()).prop_map(|(n, bits)| {
        let payload = (1u64 << n) | (bits & ((1u64 << n) - 1));
        Tnt::from_payload(payload).unwrap()
    })
}

/// Every packet kind outside a PEBS block (BIP needs its BBP; see `pebs_blocks`).
fn packet() -> impl Strategy<Value = Packet> {
    prop_oneof![
        Just(Packet::Pad),
        Just(Packet::Psb),
        Just(Packet::Psbend),
        Just(Packet::Ovf),
        Just(Packet::Stop),
        tnt(Tnt::MAX_SHORT).prop_map(Packet::Tnt8),
        tnt(Tnt::MAX_LONG).prop_map(Packet::Tnt64),
        (ip_kind(), ip_payload()).prop_map(|(k, p)| Packet::Ip(k, p)),
        any::<(bool, bool, bool)>().prop_map(|(csl, csd, iflag)| Packet::ModeExec(ModeExec {
            csl,
            csd,
            iflag
        })),
        any::<(bool, bool)>().prop_map(|(intx, abrt)| Packet::ModeTsx(ModeTsx { intx, abrt })),
        (any::<u64>(), any::<bool>()).prop_map(|(c, nr)| Packet::Pip {
            cr3: c & 0x000f_ffff_ffff_ffe0,
            nr
        }),
        any::<u64>().prop_map(|b| Packet::Vmcs {
            base: b & 0x000f_ffff_ffff_f000
        }),
        any::<u64>().prop_map(|t| Packet::Tsc { tsc: t >> 8 }),
        any::<u8>().prop_map(|ctc| Packet::Mtc { ctc }),
        (any::<u16>(), 0u16..512).prop_map(|(ctc, fc)| Packet::Tma { ctc, fc }),
        (0u32..61, any::<u64>()).prop_map(|(bits, v)| Packet::Cyc {
            value: v & ((1u64 << bits) - 1)
        }),
        any::<u8>().prop_map(|ratio| Packet::Cbr { ratio }),
        any::<u64>().prop_map(|payload| Packet::Mnt { payload }),
        (any::<bool>(), any::<u64>(), any::<bool>()).prop_map(|(eight, p, ip)| Packet::Ptw {
            size: if eight { PtwSize::Eight } else { PtwSize::Four },
            payload: if eight { p } else { p & 0xffff_ffff },
            ip
        }),
        any::<bool>().prop_map(|ip| Packet::Exstop { ip }),
        any::<(u32, u32)>().prop_map(|(hints, ext)| Packet::Mwait { hints, ext }),
        (0u8..16, 0u8..16, any::<bool>()).prop_map(|(state, sub_state, hw)| Packet::Pwre {
            state,
            sub_state,
            hw
        }),
        (0u8..16, 0u8..16, any::<(bool, bool, bool)>()).prop_map(|(last, deepest, (i, s, a))| {
            Packet::Pwrx {
                last,
                deepest,
                wake: WakeReason {
                    interrupt: i,
                    store: s,
                    autonomous: a,
                },
            }
        }),
        (0u8..32, any::<u8>(), any::<bool>()).prop_map(|(ty, vector, ip)| Packet::Cfe {
            ty,
            vector,
            ip
        }),
        (0u8..32, any::<u64>()).prop_map(|(ty, payload)| Packet::Evd { ty, payload }),
        (
            any::<u8>(),
            any::<bool>(),
            any::<bool>(),
            any::<Option<u16>>()
        )
            .prop_map(|(trbv, ip, mult, icnt)| Packet::Trig {
                trbv,
                ip,
                mult,
                icnt
            }),
        any::<bool>().prop_map(|ip| Packet::Bep { ip }),
    ]
}

fn decode_all(buf: &[u8]) -> Vec<Packet> {
    let mut d = PacketDecoder::new(buf, &Config::default());
    d.sync_set(0).unwrap();
    d.map(|r| r.expect("valid stream").1).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn single_packet_roundtrip(p in packet()) {
        let mut buf = Vec::new();
        let n = encode_to_vec(&p, &mut buf).unwrap();
        prop_assert_eq!(n, p.size());
        let (q, size) = decode_packet(&buf, &Errata::default(), PacketContext::default()).unwrap();
        prop_assert_eq!(q, p);
        prop_assert_eq!(size, n);
        // Every proper prefix is a truncated packet, never something else.
        for cut in 0..n {
            let r = decode_packet(&buf[..cut], &Errata::default(), PacketContext::default());
            prop_assert!(r.is_err(), "prefix {} of {:?} decoded as {:?}", cut, p, r);
        }
    }

    #[test]
    fn stream_roundtrip(ps in prop::collection::vec(packet(), 1..64)) {
        let mut buf = Vec::new();
        for p in &ps {
            encode_to_vec(p, &mut buf).unwrap();
        }
        prop_assert_eq!(decode_all(&buf), ps);
    }

    #[test]
    fn pebs_blocks(ty in 0u8..32, sz4 in any::<bool>(),
                   items in prop::collection::vec((0u8..32, any::<u64>()), 0..8),
                   ip in any::<bool>()) {
        let mut ps = vec![Packet::Bbp { sz4, ty }];
        for (id, payload) in items {
            let payload = if sz4 { payload & 0xffff_ffff } else { payload };
            ps.push(Packet::Bip { id, payload, sz4 });
        }
        ps.push(Packet::Bep { ip });
        let mut buf = Vec::new();
        for p in &ps {
            encode_to_vec(p, &mut buf).unwrap();
        }
        prop_assert_eq!(decode_all(&buf), ps);
    }
}

#[test]
fn pwre_hw_flag_from_either_bit() {
    // B2[7] per the SDM, B2[3] as libipt's encoder writes it.
    for b2 in [0x80u8, 0x08, 0x88] {
        let (p, _) = decode_packet(
            &[0x02, 0x22, b2, 0x10],
            &Errata::default(),
            PacketContext::default(),
        )
        .unwrap();
        assert!(matches!(p, Packet::Pwre { hw: true, .. }), "{b2:#x}");
    }
    let (p, _) = decode_packet(
        &[0x02, 0x22, 0x00, 0x10],
        &Errata::default(),
        PacketContext::default(),
    )
    .unwrap();
    assert!(matches!(
        p,
        Packet::Pwre {
            hw: false,
            state: 1,
            sub_state: 0
        }
    ));
}

/// Everything a decoder hands out while walking `buf` with resyncs, typed.
#[derive(Debug, PartialEq)]
enum Seen {
    Packet(u64, Packet),
    Error(u64, pt_decoder::ErrorCode),
}

fn walk_typed(buf: &[u8], config: &Config) -> Vec<Seen> {
    let mut d = PacketDecoder::new(buf, config);
    let mut seen = Vec::new();
    if d.sync_set(0).is_err() {
        return seen;
    }
    loop {
        match d.decode_with(|off, p| {
            seen.push(Seen::Packet(off, p));
            std::ops::ControlFlow::Continue(())
        }) {
            Ok(_) => return seen,
            Err(e) => {
                seen.push(Seen::Error(e.offset, e.code));
                if d.sync_forward().is_err() {
                    return seen;
                }
            }
        }
    }
}

/// As [`walk_typed`] through the record decoder; also checks that every record's size
/// reaches to where the next packet (or error, or the end) starts.
fn walk_records(buf: &[u8], config: &Config) -> Vec<Seen> {
    let mut d = PacketDecoder::new(buf, config);
    let mut seen = Vec::new();
    if d.sync_set(0).is_err() {
        return seen;
    }
    loop {
        let mut end: Option<u64> = None;
        let r = d.decode_records_with(|off, r| {
            if let Some(end) = end {
                // SKD007: an OVF starts one byte into what looked like a CYC.
                let skipped = u64::from(r.kind() == pt_decoder::packet::PacketKind::Ovf);
                assert!(
                    off == end || off == end + skipped,
                    "a record's size does not reach the next packet"
                );
            }
            end = Some(off + r.size() as u64);
            seen.push(Seen::Packet(off, r.packet()));
            std::ops::ControlFlow::Continue(())
        });
        match r {
            Ok(_) => {
                assert!(end.is_none_or(|e| e == buf.len() as u64));
                return seen;
            }
            Err(e) => {
                assert!(end.is_none_or(|end| end == e.offset));
                seen.push(Seen::Error(e.offset, e.code));
                if d.sync_forward().is_err() {
                    return seen;
                }
            }
        }
    }
}

/// A stream with PSBs in it, then `flips` random bytes overwritten.
fn mangled(ps: &[Packet], flips: &[(usize, u8)]) -> Vec<u8> {
    let mut buf = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        if i % 16 == 0 {
            encode_to_vec(&Packet::Psb, &mut buf).unwrap();
        }
        encode_to_vec(p, &mut buf).unwrap();
    }
    let n = buf.len();
    for &(at, b) in flips {
        if n > 0 {
            buf[at % n] = b;
        }
    }
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn record_roundtrip(p in packet()) {
        let r = pt_decoder::packet::PacketRecord::from(p);
        prop_assert_eq!(r.packet(), p);
        prop_assert_eq!(r.size(), p.size());
    }

    /// The record decoder sees exactly what the typed decoder sees, errors included, with
    /// and without the SKD007 workaround (which changes what a CYC may be followed by).
    #[test]
    fn records_match_packets(ps in prop::collection::vec(packet(), 1..96),
                             flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
                             skd007 in any::<bool>()) {
        let buf = mangled(&ps, &flips);
        let mut config = Config::default();
        config.errata.skd007 = skd007;
        prop_assert_eq!(walk_records(&buf, &config), walk_typed(&buf, &config));
    }

    /// The parallel record fold gives the same pieces, packets and errors as the typed
    /// parallel fold.
    #[test]
    fn paired_record_fold_matches(ps in prop::collection::vec(packet(), 1..300),
                                  flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
                                  threads in 1usize..6) {
        let buf = mangled(&ps, &flips);
        let config = Config::default();
        let records = pt_decoder::parallel::par_fold_records(&buf, &config, threads, Vec::new, |v, off, r| {
            v.push((off, r.packet()))
        });
        let typed = pt_decoder::parallel::par_fold(&buf, &config, threads, Vec::new, |v, off, p| {
            v.push((off, p))
        });
        let flat = |pieces: &[pt_decoder::parallel::Piece<Vec<(u64, Packet)>>]| {
            pieces.iter().map(|p| (p.range.clone(), p.value.clone(), p.errors.clone())).collect::<Vec<_>>()
        };
        prop_assert_eq!(flat(&records), flat(&typed));
    }

    /// The record iterator, stepped with `next` and run with `fold`, matches the typed
    /// iterator packet for packet, error for error.
    #[test]
    fn record_iterator_matches_packet_iterator(ps in prop::collection::vec(packet(), 1..96),
                                               flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
        let buf = mangled(&ps, &flips);
        let config = Config::default();
        let fresh = || {
            let mut d = PacketDecoder::new(&buf, &config);
            d.sync_set(0).unwrap();
            d
        };
        let typed: Vec<_> = fresh().collect();
        let mut d = fresh();
        let mut stepped = Vec::new();
        // A `for` loop steps with `next`.
        for r in d.records() {
            stepped.push(r.map(|(off, r)| (off, r.packet())));
        }
        prop_assert_eq!(&stepped, &typed);
        let mut d = fresh();
        let folded = d.records().fold(Vec::new(), |mut v, r| {
            v.push(r.map(|(off, r)| (off, r.packet())));
            v
        });
        prop_assert_eq!(&folded, &typed);
    }

    /// `peek_packet` says what `next_packet` will return, and changes nothing.
    #[test]
    fn peek_matches_next(ps in prop::collection::vec(packet(), 1..64),
                         flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
                         skd007 in any::<bool>()) {
        let buf = mangled(&ps, &flips);
        let mut config = Config::default();
        config.errata.skd007 = skd007;
        let mut d = PacketDecoder::new(&buf, &config);
        d.sync_set(0).unwrap();
        for _ in 0..buf.len() + 1 {
            let peeked = d.peek_packet();
            prop_assert_eq!(d.peek_packet(), peeked);
            let next = d.next_packet();
            prop_assert_eq!(&peeked, &next);
            if next.is_err() && d.sync_forward().is_err() {
                break;
            }
        }
    }
}
