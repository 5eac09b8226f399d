//! The coverage decoder against the flow decoder: on the same trace, the same edges
//! (with counts), the same basic blocks, and the bitmap AFL's formula gives for that
//! edge sequence — with and without collecting, for both edge formulas.

use proptest::prelude::*;
use pt_coverage::reference::{flow_coverage, FlowCoverage};
use pt_coverage::{CoverageDecoder, EdgeHash, Options};
use pt_decoder::{Config, Image};
use pt_encoder::IpCompression;
use pt_testkit::trace::{self, LOOP_BASE, LOOP_CODE, STEER_BASE, STEER_CODE};

const MAP: usize = 1 << 12;

fn sorted_edges(r: &FlowCoverage) -> Vec<(u64, u64, String, u64)> {
    let mut v: Vec<_> = r
        .edge_counts
        .iter()
        .map(|(&(f, t), &(k, n))| (f, t, k.name().to_string(), n))
        .collect();
    v.sort();
    v
}

/// Compares both decoders on `trace`; `false` if the flow decoder reported an error
/// (then the two need not agree on where to go on).
fn agree(trace: &[u8], image: &Image) -> bool {
    agree_on(trace, image, "trace")
}

fn agree_on(trace: &[u8], image: &Image, what: &str) -> bool {
    let reference = flow_coverage(trace, image, &Config::default());
    if !reference.errors.is_empty() {
        return false;
    }
    for hash in [EdgeHash::Afl, EdgeHash::Libxdc] {
        let options = Options {
            map_size: MAP,
            hash,
            collect: true,
            ..Options::default()
        };
        let mut cov = CoverageDecoder::new(options);
        // Twice: cold, then warm over the graph of the first run.
        for round in 0..2 {
            cov.reset();
            let out = cov.decode(trace, image);
            assert_eq!(out.errors, 0, "{what} round {round}: {:?}", out.first_error);
            let mut edges: Vec<_> = cov
                .edges()
                .map(|(e, n)| (e.from, e.to, e.kind.name().to_string(), n))
                .collect();
            edges.sort();
            assert_eq!(
                edges,
                sorted_edges(&reference),
                "{what}: edges, round {round}"
            );
            let mut blocks: Vec<_> = cov.blocks().collect();
            blocks.sort();
            assert_eq!(
                blocks,
                reference.block_list(),
                "{what}: blocks, round {round}"
            );
            assert!(
                cov.map() == reference.bitmap(hash, MAP),
                "bitmap, round {round}"
            );
        }
        // The bitmap-only path takes other shortcuts.
        let mut fast = CoverageDecoder::new(Options {
            collect: false,
            ..options
        });
        for _ in 0..2 {
            fast.reset();
            let out = fast.decode(trace, image);
            assert_eq!(out.errors, 0);
            assert!(fast.map() == reference.bitmap(hash, MAP), "bitmap only");
        }
    }
    true
}

fn image_at(base: u64, code: &[u8]) -> Image {
    let mut image = Image::new();
    image.add_bytes(base, code.to_vec(), "code").unwrap();
    image
}

#[test]
fn loop_traces_with_compressed_returns_and_timing() {
    let image = image_at(LOOP_BASE, LOOP_CODE);
    for seed in 0..8 {
        let (t, _) = trace::loop_trace(seed, 20_000, 1 + 3000 * seed as usize);
        assert!(agree(&t, &image), "seed {seed}: the flow decoder failed");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Generated valid traces: return compression, TIPs in every compression, PSB+
    /// anywhere, MTC and CYC.
    #[test]
    fn generated_loop_traces(seed in any::<u64>(), len in 64usize..6000, psb in 16usize..4000,
                             comp in 0usize..4) {
        let comp = [IpCompression::Full, IpCompression::Update16, IpCompression::Update32,
                    IpCompression::Sext48][comp];
        let image = image_at(LOOP_BASE, LOOP_CODE);
        let (t, _) = trace::loop_trace_with(seed, len, psb, comp);
        prop_assert!(agree(&t, &image));
    }

    /// Random TNT/TIP streams over code a trace can steer anywhere: where the flow
    /// decoder finds no error, both agree.
    #[test]
    fn steered_traces(steps in proptest::collection::vec((0u8..4, any::<u8>()), 1..40)) {
        use pt_encoder::IpPacketKind;
        let image = image_at(STEER_BASE, STEER_CODE);
        let mut packets = trace::psb_at(STEER_BASE).to_vec();
        packets.insert(1, trace::mode64());
        for (kind, v) in steps {
            match kind {
                0 | 1 => {
                    let bits: Vec<bool> = (0..1 + v % 6).map(|i| v >> i & 1 != 0).collect();
                    packets.push(trace::tnt(&bits));
                }
                2 => packets.push(trace::ip(IpPacketKind::Tip, STEER_BASE + u64::from(v % 0x20))),
                _ => packets.push(trace::ip(IpPacketKind::TipPgd, 0)),
            }
        }
        let t = trace::encode(&packets);
        agree(&t, &image);
    }
}

/// libipt's own test traces: every one the flow decoder decodes without error.
#[test]
fn libipt_corpus() {
    let dir = pt_testkit::corpus();
    let mut compared = Vec::new();
    let mut skipped = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ptt"))
        .collect();
    files.sort();
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let Some(org) = source
            .lines()
            .find_map(|l| l.strip_prefix("org "))
            .and_then(|a| pt_decoder::image::parse_c_number(a.split(';').next()?.trim()))
        else {
            continue;
        };
        let Ok(out) = pt_testgen::gen::generate(&source, &path, None) else {
            continue;
        };
        if out.bin.is_empty() {
            continue;
        }
        let image = image_at(org, &out.bin);
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if agree_on(&out.trace.bytes, &image, &name) {
            compared.push(name);
        } else {
            skipped.push(name);
        }
    }
    eprintln!(
        "compared {}: {compared:?}\nflow errors, skipped {}",
        compared.len(),
        skipped.len()
    );
    assert!(
        compared.len() >= 110,
        "only {} traces compared",
        compared.len()
    );
}

/// A recursion the trace steers: `f` at 0x1000 calls itself (`dec rdi; jz 1f;
/// call f`), then calls `g` (a bare `ret` at 0x1020) in a loop (`1: call g; jnz
/// 1b; ret`); a loop at 0x2000 calls `f` (`call f; jmp 0x2000`).
const RECURSE_CODE: [(u64, &[u8]); 3] = [
    (
        0x1000,
        &[
            0x48, 0xff, 0xcf, 0x74, 0x05, 0xe8, 0xf6, 0xff, 0xff, 0xff, 0xe8, 0x11, 0x00, 0x00,
            0x00, 0x75, 0xf9, 0xc3,
        ],
    ),
    (0x1020, &[0xc3]),
    (0x2000, &[0xe8, 0xfb, 0xef, 0xff, 0xff, 0xeb, 0xf9]),
];

/// Packets of a run through [`RECURSE_CODE`], with return compression as the
/// hardware does it: a stack of 64 return addresses whose oldest a call overwrites
/// when full; a return with none left is a TIP.
#[derive(Default)]
struct Hardware {
    packets: Vec<pt_encoder::Packet>,
    bits: Vec<bool>,
    stack: std::collections::VecDeque<u64>,
}

impl Hardware {
    fn call(&mut self, ret: u64) {
        if self.stack.len() == 64 {
            self.stack.pop_front();
        }
        self.stack.push_back(ret);
    }

    fn ret_to(&mut self, to: u64) {
        if self.stack.pop_back().is_some() {
            self.bits.push(true);
        } else {
            self.flush();
            self.packets
                .push(trace::ip(pt_encoder::IpPacketKind::Tip, to));
        }
    }

    fn flush(&mut self) {
        for chunk in self.bits.chunks(6) {
            self.packets.push(trace::tnt(chunk));
        }
        self.bits.clear();
    }

    /// `f` recursing `depth` more times, each level calling `g` `1 + loops(level)`
    /// times on the way back.
    fn f(&mut self, depth: usize, loops: &mut impl FnMut() -> usize, ret: u64) {
        self.call(ret);
        if depth > 0 {
            self.bits.push(false);
            self.f(depth - 1, loops, 0x100a);
        } else {
            self.bits.push(true);
        }
        let n = 1 + loops();
        for i in 0..n {
            self.call(0x100f);
            self.ret_to(0x100f);
            self.bits.push(i + 1 < n);
        }
        self.ret_to(ret);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Compressed returns in and across TNT packets, with calls, at stack depths
    /// past the 64 return addresses the hardware keeps.
    #[test]
    fn recursion_with_compressed_returns(depths in proptest::collection::vec(0usize..100, 1..12),
                                         seed in any::<u64>()) {
        let mut image = Image::new();
        for (base, code) in RECURSE_CODE {
            image.add_bytes(base, code.to_vec(), "code").unwrap();
        }
        let mut rng = seed | 1;
        let mut loops = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % 5) as usize
        };
        let mut hw = Hardware {
            packets: trace::psb_at(0x2000).to_vec(),
            ..Hardware::default()
        };
        for &depth in &depths {
            hw.f(depth, &mut loops, 0x2005);
        }
        hw.flush();
        let t = trace::encode(&hw.packets);
        prop_assert!(agree(&t, &image), "the flow decoder failed");
    }
}

/// The coverage decoder's edges, blocks and bitmap of `trace`, each sorted, with
/// and without collecting (the bitmap-only path takes other shortcuts), for both
/// edge formulas; and the errors it met.
#[allow(clippy::type_complexity)]
fn coverage_of(
    trace: &[u8],
    image: &Image,
) -> Vec<(
    Vec<(u64, u64, String, u64)>,
    Vec<(pt_coverage::BasicBlock, u64)>,
    Vec<u8>,
    u64,
)> {
    let mut all = Vec::new();
    for hash in [EdgeHash::Afl, EdgeHash::Libxdc] {
        for collect in [true, false] {
            let mut cov = CoverageDecoder::new(Options {
                map_size: MAP,
                hash,
                collect,
                ..Options::default()
            });
            // Cold, then warm.
            for _ in 0..2 {
                cov.reset();
                let out = cov.decode(trace, image);
                let mut edges: Vec<_> = cov
                    .edges()
                    .map(|(e, n)| (e.from, e.to, e.kind.name().to_string(), n))
                    .collect();
                edges.sort();
                let mut blocks: Vec<_> = cov.blocks().collect();
                blocks.sort();
                all.push((edges, blocks, cov.map().to_vec(), out.errors));
            }
        }
    }
    all
}

/// A timing packet (or PAD) of kind `kind` from `v`: CYCs of every length (one
/// byte, two with 02 for an extension byte, up to nine), MTC, PAD.
fn timing_packet(kind: u8, v: u64) -> pt_encoder::Packet {
    use pt_encoder::Packet;
    match kind {
        0 => Packet::Cyc { value: v & 0x1f },
        1 => Packet::Cyc {
            value: 0x20 | v & 0x1f,
        },
        2 => Packet::Cyc { value: v & 0xfff },
        3 => Packet::Cyc {
            value: v >> (3 + v % 61),
        },
        4 => Packet::Mtc { ctc: v as u8 },
        _ => Packet::Pad,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Timing packets change no edge: a trace with its MTC, CYC and PAD packets
    /// taken out, and with more put in between any two packets outside PSB+ (runs
    /// of them, CYCs of every length), gives the same edges, blocks and bitmap,
    /// without an error; and the flow decoder agrees on the one with more.
    #[test]
    fn timing_packets_change_no_edge(seed in any::<u64>(), len in 64usize..6000,
                                     psb in 16usize..4000,
                                     more in proptest::collection::vec(
                                         (any::<u16>(), 0u8..6, any::<u64>()), 0..300)) {
        use pt_encoder::Packet;
        let image = image_at(LOOP_BASE, LOOP_CODE);
        let (t, _) = trace::loop_trace(seed, len, psb);
        // The packets: their bytes, whether they are timing packets (or PAD), and
        // whether a packet may be put in before them (not inside PSB+).
        let mut pkt = pt_decoder::PacketDecoder::new(&t, &Config::default());
        pkt.resume_at(0).unwrap();
        let mut packets: Vec<(&[u8], bool, bool)> = Vec::new();
        let (mut at, mut in_psb) = (0usize, false);
        while let Ok((_, p)) = pkt.next_packet() {
            let end = pkt.offset().unwrap() as usize;
            let timing = matches!(p, Packet::Cyc { .. } | Packet::Mtc { .. } | Packet::Pad);
            packets.push((&t[at..end], timing, !in_psb));
            match p {
                Packet::Psb => in_psb = true,
                Packet::Psbend => in_psb = false,
                _ => {}
            }
            at = end;
        }
        prop_assert_eq!(at, t.len(), "the generated trace decodes to its end");
        let plain: Vec<u8> = packets.iter().filter(|p| !p.1).flat_map(|p| p.0).copied().collect();
        let mut added: Vec<Vec<u8>> = vec![Vec::new(); packets.len() + 1];
        for (i, kind, v) in more {
            let i = usize::from(i) % added.len();
            if packets.get(i).is_none_or(|p| p.2) {
                added[i].extend(trace::encode(&[timing_packet(kind, v)]));
            }
        }
        let mut timed = Vec::new();
        for (i, p) in packets.iter().enumerate() {
            timed.extend(&added[i]);
            timed.extend(p.0);
        }
        timed.extend(&added[packets.len()]);

        let want = coverage_of(&plain, &image);
        prop_assert!(want.iter().all(|c| c.3 == 0), "errors without timing packets");
        prop_assert!(want == coverage_of(&t, &image), "the generated timing packets changed coverage");
        prop_assert!(want == coverage_of(&timed, &image), "added timing packets changed coverage");
        prop_assert!(agree(&timed, &image), "the flow decoder failed");
    }
}
