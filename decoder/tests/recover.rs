//! Recovery from damage ([`Resync::Recover`]): damaged traces never panic or hang the
//! decoder under any policy, and where it goes on after the damage, its flow is the
//! undamaged flow, instruction for instruction.

use proptest::prelude::*;
use pt_decoder::packet::recover::{ResumeKind, HOLE_MIN};
use pt_decoder::{Decoder, ErrorCode, Granularity, Image, Item, Resync};
use pt_encoder::packet::IpCompression;
use pt_testkit::trace::{loop_trace_with, LOOP_BASE, LOOP_CODE};
use pt_testkit::Rng;

fn image() -> Image {
    let mut image = Image::new();
    image
        .add_bytes(LOOP_BASE, LOOP_CODE.to_vec(), "code")
        .expect("section");
    image
}

/// How a test damages a trace.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// `n` bytes from `at` on replaced by other values.
    Flip { at: usize, n: usize, seed: u64 },
    /// `n` bytes from `at` on zeroed.
    Zero { at: usize, n: usize },
    /// `n` bytes from `at` on removed.
    Cut { at: usize, n: usize },
    /// Everything from `at` on removed.
    Truncate { at: usize },
}

impl Damage {
    fn apply(self, t: &mut Vec<u8>) {
        let len = t.len();
        match self {
            Damage::Flip { at, n, seed } => {
                let mut rng = Rng(seed);
                for b in t.iter_mut().skip(at % len).take(n) {
                    *b ^= 1 + rng.below(255) as u8;
                }
            }
            Damage::Zero { at, n } => {
                for b in t.iter_mut().skip(at % len).take(n) {
                    *b = 0;
                }
            }
            Damage::Cut { at, n } => {
                let at = at % len;
                t.drain(at..(at + n).min(len));
            }
            Damage::Truncate { at } => t.truncate(at % len),
        }
    }

    /// The damaged bytes `(start, end)`, if the bytes after them stay where they were.
    fn in_place(self, len: usize) -> Option<(usize, usize)> {
        match self {
            Damage::Flip { at, n, .. } | Damage::Zero { at, n } => {
                Some((at % len, (at % len + n).min(len)))
            }
            _ => None,
        }
    }
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1..40usize, any::<u64>()).prop_map(|(at, n, seed)| Damage::Flip {
            at,
            n,
            seed
        }),
        (any::<usize>(), 1..(2 * HOLE_MIN)).prop_map(|(at, n)| Damage::Zero { at, n }),
        (any::<usize>(), 1..600usize).prop_map(|(at, n)| Damage::Cut { at, n }),
        any::<usize>().prop_map(|at| Damage::Truncate { at }),
    ]
}

fn compression() -> impl Strategy<Value = IpCompression> {
    prop_oneof![
        Just(IpCompression::Full),
        Just(IpCompression::Sext48),
        Just(IpCompression::Update16),
        Just(IpCompression::Update32),
    ]
}

const POLICIES: [Resync; 3] = [Resync::Recover, Resync::NextPsb, Resync::NextIp];

/// Decode `trace` to the end; the instructions decoded. Panics if the decode does not
/// end within a bound on its items or breaks a rule on offsets.
fn decode_all(
    trace: &[u8],
    image: &Image,
    resync: Resync,
    granularity: Granularity,
    count_only: bool,
) -> u64 {
    let len = trace.len() as u64;
    let dec = Decoder::builder(trace, image)
        .resync(resync)
        .granularity(granularity)
        .count_only(count_only)
        .runaway_limit(10_000)
        .build();
    let (mut items, mut insns) = (0u64, 0u64);
    for item in dec {
        items += 1;
        assert!(items < 1_000_000, "{resync:?}: no end");
        match item {
            Item::Block(b) => insns += u64::from(b.block.ninsn),
            Item::Insn(_) => insns += 1,
            Item::Counts(c) => insns += c.insns,
            Item::Error(e) => {
                assert!(e.offset.is_none_or(|o| o <= len), "{e}");
                if resync != Resync::Recover {
                    assert!(!matches!(e.code, ErrorCode::Truncated | ErrorCode::Hole));
                }
            }
            Item::Skipped(s) => {
                assert_eq!(resync, Resync::Recover);
                assert!(s.from <= len && s.to <= len, "{s:?}");
                if let Some(at) = s.at {
                    assert_eq!(at.offset, s.to);
                }
            }
            _ => {}
        }
    }
    insns
}

/// A run of decoded instructions, (trace offset, address), with the resume point it
/// started at (offset and kind), if any.
type Segment = (Option<(u64, ResumeKind)>, Vec<(u64, u64)>);

/// The instructions of a decode, as (trace offset, address), broken into segments
/// at errors; each segment with the resume point it started at, if any.
fn segments(trace: &[u8], image: &Image, resync: Resync) -> Vec<Segment> {
    let dec = Decoder::builder(trace, image)
        .resync(resync)
        .granularity(Granularity::Instructions)
        .build();
    let mut out = vec![(None, Vec::new())];
    for item in dec {
        match item {
            Item::Insn(i) => out
                .last_mut()
                .expect("a segment")
                .1
                .push((i.offset, i.insn.ip)),
            Item::Error(_) => out.push((None, Vec::new())),
            Item::Skipped(s) => out.push((s.at.map(|a| (a.offset, a.kind)), Vec::new())),
            _ => {}
        }
    }
    out
}

/// Damage a generated trace in place; every segment the decoder resumes at a point
/// after the damage must be the undamaged flow from there (offsets and addresses).
/// Returns the instructions so checked, and those of them resumed at an IP packet.
fn check_resumed_flow(
    seed: u64,
    psb_every: usize,
    tip_ip: IpCompression,
    damage: Damage,
) -> (usize, usize) {
    let image = image();
    let (good, _) = loop_trace_with(seed, 6 << 10, psb_every, tip_ip);
    let mut bad = good.clone();
    damage.apply(&mut bad);
    let Some((_, end)) = damage.in_place(good.len()) else {
        return (0, 0);
    };
    let truth: Vec<(u64, u64)> = segments(&good, &image, Resync::Recover)
        .into_iter()
        .flat_map(|(_, s)| s)
        .collect();
    let (mut checked, mut at_ip) = (0, 0);
    for (at, seg) in segments(&bad, &image, Resync::Recover) {
        let Some((offset, kind)) = at else { continue };
        if offset < end as u64 || seg.is_empty() {
            continue;
        }
        // The same addresses from a place near the same offset (where offsets
        // change between packets depends on how the decoder came there).
        let ips: Vec<u64> = seg.iter().map(|x| x.1).collect();
        let fits = (0..truth.len())
            .filter(|&j| truth[j].1 == ips[0] && truth[j].0.abs_diff(seg[0].0) <= 32)
            .any(|j| {
                truth.len() >= j + ips.len()
                    && truth[j..j + ips.len()]
                        .iter()
                        .map(|x| x.1)
                        .eq(ips.iter().copied())
            });
        assert!(
            fits,
            "seed {seed}, {damage:?}, {tip_ip:?}: the flow resumed at {kind:?} {offset:#x} is not the undamaged flow: {:x?}",
            &seg[..seg.len().min(8)]
        );
        checked += seg.len();
        if kind != ResumeKind::Psb {
            at_ip += seg.len();
        }
    }
    (checked, at_ip)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn damaged_traces_never_panic_or_hang(
        seed in any::<u64>(),
        psb_every in 300..3000usize,
        tip_ip in compression(),
        damage in prop::collection::vec(damage(), 1..4),
    ) {
        let image = image();
        let (mut trace, _) = loop_trace_with(seed, 4 << 10, psb_every, tip_ip);
        for d in damage {
            if !trace.is_empty() {
                d.apply(&mut trace);
            }
        }
        for resync in POLICIES {
            let blocks = decode_all(&trace, &image, resync, Granularity::Blocks, false);
            let insns = decode_all(&trace, &image, resync, Granularity::Instructions, false);
            prop_assert_eq!(blocks, insns);
            let counted = decode_all(&trace, &image, resync, Granularity::Blocks, true);
            prop_assert_eq!(blocks, counted);
        }
    }

    #[test]
    fn the_flow_resumed_after_damage_is_the_undamaged_flow(
        seed in any::<u64>(),
        psb_every in 500..4000usize,
        tip_ip in compression(),
        damage in damage(),
    ) {
        check_resumed_flow(seed, psb_every, tip_ip, damage);
    }
}

/// The property above checks something: resumes past the damage are common, also at
/// compressed IP packets (completed with the image, tried up to the next PSB+).
#[test]
fn resumes_past_the_damage_are_common() {
    let mut rng = Rng(0x0007_e50e);
    for tip_ip in [IpCompression::Full, IpCompression::Update16] {
        let (mut checked, mut runs, mut at_ip) = (0, 0, 0);
        for i in 0..40 {
            let damage = Damage::Flip {
                at: rng.below(6 << 10) as usize,
                n: 1 + rng.below(8) as usize,
                seed: i,
            };
            let (n, ip) = check_resumed_flow(i, 2000 + rng.below(2000) as usize, tip_ip, damage);
            runs += usize::from(n > 0);
            checked += n;
            at_ip += ip;
        }
        assert!(
            at_ip > checked / 10,
            "{tip_ip:?}: {at_ip} of {checked} resumed at an IP packet"
        );
        assert!(
            runs >= 20,
            "{tip_ip:?}: only {runs} of 40 runs resumed after the damage ({checked} instructions)"
        );
    }
}

/// A hole and a trace that ends inside a packet are errors at their offsets; the
/// decode goes on after the hole.
#[test]
fn holes_and_truncation_are_reported() {
    let image = image();
    let (good, _) = loop_trace_with(3, 8 << 10, 1500, IpCompression::Full);
    let mut t = good.clone();
    t[3000..3000 + 2 * HOLE_MIN].fill(0);
    // Cut inside the last packet: the trace ends with a full TIP or a TNT; make it
    // end inside a full TIP.
    t.extend([0xcd, 0x00, 0x10]);
    let mut errors = Vec::new();
    let mut after_hole = 0;
    for item in Decoder::builder(&t, &image).build() {
        match item {
            Item::Error(e) => errors.push((e.code, e.offset)),
            Item::Insn(_) | Item::Block(_) if errors.iter().any(|e| e.0 == ErrorCode::Hole) => {
                after_hole += 1
            }
            _ => {}
        }
    }
    let hole = errors
        .iter()
        .find(|e| e.0 == ErrorCode::Hole)
        .expect("a hole error");
    assert!(
        hole.1.is_some_and(|o| (2990..=3000).contains(&o)),
        "{errors:?}"
    );
    assert!(after_hole > 0, "nothing decoded after the hole");
    let cut = errors.last().expect("errors");
    assert_eq!(
        *cut,
        (ErrorCode::Truncated, Some(good.len() as u64)),
        "{errors:?}"
    );
    // libipt's policy reports neither.
    for item in Decoder::builder(&t, &image).resync(Resync::NextPsb).build() {
        if let Item::Error(e) = item {
            assert!(
                !matches!(e.code, ErrorCode::Hole | ErrorCode::Truncated),
                "{e}"
            );
        }
    }
}

/// Code that loops without trace (`jmp $`) with trace still to come: the runaway
/// guard ends it with an error at the decoder's offset, under every policy; with no
/// guard the flow goes on (libipt's way), here until the test stops taking items.
#[test]
fn the_runaway_guard_ends_an_endless_flow() {
    use pt_testkit::trace::{encode, ip, mode64, tnt};
    let mut image = Image::new();
    image
        .add_bytes(0x2000, vec![0xeb, 0xfe], "jmp $")
        .expect("section");
    let trace = encode(&[
        pt_encoder::Packet::Psb,
        mode64(),
        ip(pt_encoder::IpPacketKind::Fup, 0x2000),
        pt_encoder::Packet::Psbend,
        tnt(&[true, false]),
    ]);
    for resync in POLICIES {
        for (granularity, count_only) in [
            (Granularity::Blocks, false),
            (Granularity::Instructions, false),
            (Granularity::Blocks, true),
            (Granularity::Instructions, true),
        ] {
            let dec = Decoder::builder(&trace, &image)
                .resync(resync)
                .granularity(granularity)
                .count_only(count_only)
                .runaway_limit(5000)
                .build();
            let (mut insns, mut runaway) = (0u64, None);
            for item in dec.take(100_000) {
                match item {
                    Item::Block(b) => insns += u64::from(b.block.ninsn),
                    Item::Insn(_) => insns += 1,
                    Item::Counts(c) => insns += c.insns,
                    Item::Error(e) if e.code == ErrorCode::Runaway => runaway = Some(e),
                    _ => {}
                }
            }
            let e = runaway.unwrap_or_else(|| panic!("{resync:?} {granularity:?}: no runaway"));
            assert!(e.offset.is_some_and(|o| o <= trace.len() as u64), "{e}");
            assert!((5000..=5000 + 0x10000).contains(&insns), "{insns}");
        }
    }
    // No guard: it goes on.
    let dec = Decoder::builder(&trace, &image).runaway_limit(0).build();
    let insns: u64 = dec
        .take(200)
        .filter_map(|i| match i {
            Item::Block(b) => Some(u64::from(b.block.ninsn)),
            _ => None,
        })
        .sum();
    assert!(insns > 100_000, "{insns}");
}
