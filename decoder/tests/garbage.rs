//! Garbage, truncated and bit-flipped traces never panic the packet decoder, never make
//! it loop, and every error names an offset inside the trace.

use pt_decoder::{Config, Cpu, Errata, PacketDecoder};
use pt_encoder::packet::IpCompression;
use pt_encoder::{encode_to_vec, ModeExec, Packet, Tnt};
use pt_testkit::Rng;

fn valid_trace(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..rng.below(200) + 1 {
        let p = match rng.below(8) {
            0 => Packet::Psb,
            1 => Packet::Psbend,
            2 => Packet::Tnt8(Tnt::from_payload(rng.below(126) + 2).unwrap()),
            3 => Packet::fup(IpCompression::ALL[rng.below(6) as usize], rng.next()),
            4 => Packet::Cyc {
                value: rng.next() >> (3 + rng.below(61)),
            },
            5 => Packet::ModeExec(ModeExec::default()),
            6 => Packet::Mtc {
                ctc: rng.next() as u8,
            },
            _ => Packet::Tsc {
                tsc: rng.next() >> 8,
            },
        };
        encode_to_vec(&p, &mut v).unwrap();
    }
    v
}

/// Decode everything, resyncing after each error like ptdump; returns packets seen.
fn drain(buf: &[u8], config: &Config) -> usize {
    let mut d = PacketDecoder::new(buf, config);
    let mut count = 0;
    if d.sync_forward().is_err() {
        d.sync_set(0).unwrap();
    }
    let mut last_sync = None;
    // Every resync lands on a later PSB than the one before, so this bound is loose.
    for _ in 0..=buf.len() + 1 {
        let sync = d.sync_offset();
        if let (Some(prev), Some(now)) = (last_sync, sync) {
            assert!(now > prev, "resync went from {prev} back to {now}");
        }
        last_sync = sync;
        // Within one run, offsets increase. (A resync may start up to 15 bytes back,
        // inside a PSB that a bad packet partly consumed, as libipt's does.)
        let mut last_offset = None;
        for r in d.by_ref() {
            match r {
                Ok((off, p)) => {
                    assert!(off < buf.len() as u64);
                    assert!(off + p.size() as u64 <= buf.len() as u64);
                    if let Some(prev) = last_offset {
                        assert!(off > prev, "offsets must increase: {prev} then {off}");
                    }
                    last_offset = Some(off);
                    count += 1;
                }
                Err(e) => assert!(e.offset <= buf.len() as u64),
            }
        }
        if d.sync_forward().is_err() {
            return count;
        }
    }
    panic!(
        "decoder did not reach the end of a {}-byte trace",
        buf.len()
    );
}

#[test]
fn thousands_of_bad_traces() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let skl = Config {
        errata: Errata::for_cpu("6/94".parse::<Cpu>().unwrap()).unwrap(),
        ..Default::default()
    };
    let skx = Config {
        errata: Errata::for_cpu("6/85".parse::<Cpu>().unwrap()).unwrap(),
        ..Default::default()
    };
    for round in 0..3000 {
        let cfg = match round % 3 {
            0 => Config::default(),
            1 => skl,
            _ => skx,
        };
        // Pure garbage.
        let n = rng.below(512) as usize;
        let garbage: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        drain(&garbage, &cfg);
        // A valid trace, truncated at a random point.
        let good = valid_trace(&mut rng);
        let cut = rng.below(good.len() as u64 + 1) as usize;
        drain(&good[..cut], &cfg);
        // A valid trace with random bit flips.
        let mut flipped = good.clone();
        for _ in 0..rng.below(8) + 1 {
            let i = rng.below(flipped.len() as u64) as usize;
            flipped[i] ^= 1 << rng.below(8);
        }
        drain(&flipped, &cfg);
    }
}

#[test]
fn valid_traces_decode_completely() {
    let mut rng = Rng(42);
    for _ in 0..200 {
        let good = valid_trace(&mut rng);
        let mut d = PacketDecoder::new(&good, &Config::default());
        d.sync_set(0).unwrap();
        assert!(d.all(|r| r.is_ok()));
    }
}
