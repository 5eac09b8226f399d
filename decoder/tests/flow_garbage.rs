//! Mutated traces and bad images (unmapped code, truncated instructions, the wrong
//! execution mode, random bytes) never panic the decode driver and its flow decoders
//! and never keep them from finishing: every run ends within a bounded number of
//! items, at both granularities, with and without the counting fast path.

use pt_decoder::config::{Config, Errata};
use pt_decoder::flow::{AddrFilter, FlowOptions};
use pt_decoder::image::Image;
use pt_decoder::{Decoder, Granularity, Item, Resync};
use pt_encoder::encode_to_vec;
use pt_encoder::packet::{
    ExecMode, IpCompression, IpPacketKind, IpPayload, ModeExec, ModeTsx, Packet, PtwSize, Tnt,
};
use pt_testkit::Rng;

use pt_testkit::trace::{STEER_BASE as BASE, STEER_CODE as CODE};

fn ip_packet(rng: &mut Rng, kind: IpPacketKind) -> Packet {
    let ip = BASE + rng.below(0x28);
    let payload = if rng.below(8) == 0 {
        IpPayload::SUPPRESSED
    } else {
        IpPayload::new(IpCompression::Full, ip)
    };
    Packet::Ip(kind, payload)
}

/// A plausible trace: PSB+ and a mix of control-flow and other packets.
fn trace(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    let mut packets = vec![
        Packet::Psb,
        Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        Packet::Ip(IpPacketKind::Fup, IpPayload::new(IpCompression::Full, BASE)),
        Packet::Psbend,
    ];
    for _ in 0..rng.below(60) + 1 {
        let p = match rng.below(16) {
            0..=4 => Packet::Tnt8(Tnt::from_payload(rng.below(126) + 2).expect("tnt")),
            5 => Packet::Tnt64(Tnt::from_payload((rng.next() >> 17) | 2).expect("tnt")),
            6 | 7 => ip_packet(rng, IpPacketKind::Tip),
            8 => ip_packet(rng, IpPacketKind::TipPge),
            9 => ip_packet(rng, IpPacketKind::TipPgd),
            10 => ip_packet(rng, IpPacketKind::Fup),
            11 => Packet::ModeTsx(ModeTsx {
                intx: rng.below(2) == 0,
                abrt: rng.below(2) == 0,
            }),
            12 => Packet::Ptw {
                size: PtwSize::Four,
                payload: rng.next() & 0xffff_ffff,
                ip: rng.below(2) == 0,
            },
            13 => Packet::Pip {
                cr3: (rng.next() & 0xffff_ffff) << 5,
                nr: false,
            },
            14 => Packet::Ovf,
            _ => Packet::ModeExec(ModeExec {
                csl: rng.below(4) != 0,
                csd: rng.below(4) == 0,
                iflag: rng.below(2) == 0,
            }),
        };
        packets.push(p);
        if rng.below(20) == 0 {
            packets.extend([
                Packet::Psb,
                Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
                Packet::Ip(IpPacketKind::Fup, IpPayload::new(IpCompression::Full, BASE)),
                Packet::Psbend,
            ]);
        }
    }
    for p in &packets {
        let _ = encode_to_vec(p, &mut v);
    }
    v
}

/// Flip bits, cut, duplicate or drop ranges.
fn mutate(rng: &mut Rng, mut t: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.below(4) {
        if t.is_empty() {
            break;
        }
        let at = rng.below(t.len() as u64) as usize;
        match rng.below(4) {
            0 => t[at] ^= 1 << rng.below(8),
            1 => t.truncate(at),
            2 => {
                let end = (at + rng.below(16) as usize).min(t.len());
                let piece = t[at..end].to_vec();
                t.splice(at..at, piece);
            }
            _ => {
                let end = (at + rng.below(8) as usize).min(t.len());
                t.drain(at..end);
            }
        }
    }
    t
}

/// The code image, sometimes broken: cut short (truncated instructions), split into
/// sections, with random bytes, or empty.
fn image(rng: &mut Rng) -> Image {
    let mut image = Image::new();
    let mut code = CODE.to_vec();
    match rng.below(6) {
        0 => code.truncate(rng.below(CODE.len() as u64) as usize + 1),
        1 => {
            for b in code.iter_mut() {
                if rng.below(4) == 0 {
                    *b = rng.next() as u8;
                }
            }
        }
        2 => {
            let cut = rng.below(CODE.len() as u64 - 1) as usize + 1;
            let rest = code.split_off(cut);
            let _ = image.add_bytes(BASE + cut as u64, rest, "tail");
        }
        3 => return image,
        _ => {}
    }
    let _ = image.add_bytes(BASE, code, "code");
    image
}

fn config(rng: &mut Rng) -> (Config, FlowOptions) {
    let mut config = Config::default();
    if rng.below(2) == 0 {
        // Skylake: SKD007, SKD010, SKD022, SKL014, SKL168, BDM70.
        config.errata = Errata::for_cpu("6/94".parse().expect("cpu")).expect("errata");
    } else if rng.below(2) == 0 {
        // Broadwell: BDM64, BDM70.
        config.errata = Errata::for_cpu("6/61".parse().expect("cpu")).expect("errata");
    }
    let mut filter = AddrFilter::default();
    if rng.below(3) == 0 {
        filter.cfg[0] = 1;
        filter.a[0] = BASE;
        filter.b[0] = BASE + 0x10;
    }
    let options = FlowOptions {
        end_on_call: rng.below(2) == 0,
        end_on_jump: rng.below(2) == 0,
        tick_events: rng.below(2) == 0,
        iflags_events: rng.below(2) == 0,
        keep_tcal_on_ovf: false,
        filter,
    };
    (config, options)
}

/// Items taken before a run is considered stuck (straight-line loops such as `jmp $`
/// legitimately never need trace, so the bound is on items, not on the result).
const MAX_ITEMS: usize = 20_000;

/// Decode with the driver under each resync policy: as ptxed `--resync-on-error`
/// does, as ptxed does by default (recovering) and as libipt's ptxed does by default
/// (count-only: as ptxed `--quiet`, through the fast path); returns the most items
/// a run took.
fn run(
    trace: &[u8],
    image: &Image,
    config: &Config,
    options: FlowOptions,
    granularity: Granularity,
    count_only: bool,
) -> usize {
    [Resync::NextIp, Resync::Recover, Resync::NextPsb]
        .into_iter()
        .map(|resync| {
            run_with(
                trace,
                image,
                config,
                options,
                granularity,
                count_only,
                resync,
            )
        })
        .max()
        .unwrap_or(0)
}

fn run_with(
    trace: &[u8],
    image: &Image,
    config: &Config,
    options: FlowOptions,
    granularity: Granularity,
    count_only: bool,
    resync: Resync,
) -> usize {
    let dec = Decoder::builder(trace, image)
        .config(config)
        .flow(options)
        .granularity(granularity)
        .resync(resync)
        .count_only(count_only)
        .build();
    let len = trace.len() as u64;
    let (mut items, mut spinning) = (0, 0);
    let mut last_offset = None;
    for item in dec {
        items += 1;
        if items > MAX_ITEMS {
            assert!(spinning > 1000, "no progress without a code loop");
            return items;
        }
        // Code that loops without needing trace (e.g. `jmp $`) runs forever in libipt
        // too; anything else must make progress in the trace.
        let offset = match item {
            Item::Block(b) => {
                assert!(b.block.ninsn <= 0xffff);
                (b.block.ninsn > 0).then_some(b.offset)
            }
            Item::Insn(i) => Some(i.offset),
            Item::Counts(_) => last_offset,
            Item::Error(e) => {
                assert!(e.offset.is_none_or(|o| o <= len), "{e}");
                None
            }
            _ => None,
        };
        if let Some(o) = offset {
            assert!(o <= len);
        }
        if offset.is_some() && offset == last_offset {
            spinning += 1;
        } else {
            spinning = 0;
        }
        last_offset = offset;
    }
    items
}

#[test]
fn mutated_traces_and_bad_images_never_panic() {
    let mut rng = Rng(0x5eed_f10f);
    let mut stuck = 0;
    for round in 0..3000 {
        let t = trace(&mut rng);
        let trace = mutate(&mut rng, t);
        let image = image(&mut rng);
        let (config, options) = config(&mut rng);
        let quiet = round % 2 == 0;
        if run(&trace, &image, &config, options, Granularity::Blocks, quiet) > MAX_ITEMS {
            stuck += 1;
        }
        run(
            &trace,
            &image,
            &config,
            options,
            Granularity::Instructions,
            !quiet,
        );
    }
    // Random code may loop without needing trace (`jmp $`), which `run` allows;
    // with this seed none does, and nothing else may keep a run from ending.
    assert_eq!(stuck, 0, "{stuck} runs hit the call bound");
}

#[test]
fn random_bytes_as_trace_and_code() {
    let mut rng = Rng(0xbad_c0de);
    for _ in 0..1000 {
        let len = rng.below(300) as usize;
        let mut trace: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Give the decoders something to synchronize on now and then.
        if rng.below(2) == 0 {
            let at = rng.below(len as u64 + 1) as usize;
            let mut psb = Vec::new();
            let _ = encode_to_vec(&Packet::Psb, &mut psb);
            trace.splice(at..at, psb);
        }
        let code: Vec<u8> = (0..rng.below(64) + 1).map(|_| rng.next() as u8).collect();
        let mut image = Image::new();
        let _ = image.add_bytes(BASE, code, "random");
        let (config, options) = config(&mut rng);
        run(&trace, &image, &config, options, Granularity::Blocks, true);
        run(
            &trace,
            &image,
            &config,
            options,
            Granularity::Instructions,
            false,
        );
    }
}

#[test]
fn wrong_execution_mode() {
    // 64-bit code decoded as 16- and 32-bit code, and the reserved mode.
    let mut rng = Rng(42);
    for mode in [ExecMode::Bit16, ExecMode::Bit32, ExecMode::Unknown] {
        for _ in 0..100 {
            let mut v = Vec::new();
            let packets = [
                Packet::Psb,
                Packet::Psbend,
                Packet::ModeExec(ModeExec::from_mode(mode)),
                Packet::Ip(
                    IpPacketKind::TipPge,
                    IpPayload::new(IpCompression::Full, BASE),
                ),
                Packet::Tnt8(Tnt::from_payload(rng.below(126) + 2).expect("tnt")),
                Packet::Ip(
                    IpPacketKind::Tip,
                    IpPayload::new(IpCompression::Full, BASE + 0x10),
                ),
            ];
            for p in &packets {
                let _ = encode_to_vec(p, &mut v);
            }
            let mut image = Image::new();
            let _ = image.add_bytes(BASE, CODE.to_vec(), "code");
            let (config, options) = config(&mut rng);
            assert!(run(&v, &image, &config, options, Granularity::Blocks, false) <= MAX_ITEMS + 1);
            run(
                &v,
                &image,
                &config,
                options,
                Granularity::Instructions,
                true,
            );
        }
    }
}
