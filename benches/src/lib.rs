//! Deterministic trace generators for benchmarks and stress tests.
//!
//! Both generators write PSB+ (PSB, TSC, MODE.Exec, FUP, PSBEND) every 4 KiB, as hardware
//! with a small PSB period would, so decoders can sync anywhere.
#![deny(missing_docs)]

pub mod coverage;
pub mod flow;

use pt_encoder::packet::IpCompression;
use pt_encoder::{IpPacketKind, ModeExec, Packet, Tnt};

/// Bytes between PSBs in generated traces.
pub const PSB_PERIOD: usize = 4096;

/// The tests' seeded generator (xorshift64*), so that a benchmark's input is the same
/// on every run.
pub use pt_testkit::Rng;

struct Gen {
    buf: Vec<u8>,
    pos: usize,
    next_psb: usize,
    tsc: u64,
    ip: u64,
}

impl Gen {
    fn new(size: usize) -> Self {
        Self {
            buf: vec![0; size + 256],
            pos: 0,
            next_psb: 0,
            tsc: 0x1_0000,
            ip: 0x40_1000,
        }
    }

    fn put(&mut self, p: Packet) {
        let n = pt_encoder::encode(&p, &mut self.buf[self.pos..]).expect("generator packet");
        self.pos += n;
    }

    /// PSB+ when the period is due. Returns true if it wrote one.
    fn psb_plus(&mut self) -> bool {
        if self.pos < self.next_psb {
            return false;
        }
        self.next_psb = self.pos + PSB_PERIOD;
        self.tsc += 0x1000;
        self.put(Packet::Psb);
        self.put(Packet::Tsc { tsc: self.tsc });
        self.put(Packet::ModeExec(ModeExec {
            csl: true,
            ..Default::default()
        }));
        self.put(Packet::fup(IpCompression::Sext48, self.ip));
        self.put(Packet::Psbend);
        true
    }

    /// The packets written so far (always whole packets).
    fn finish(mut self) -> Vec<u8> {
        self.buf.truncate(self.pos);
        self.buf
    }
}

/// A trace of about `size` bytes that is almost all TNT-8 packets (plus a TNT-64 now and
/// then), like a tight loop.
pub fn tnt_heavy(size: usize) -> Vec<u8> {
    let mut g = Gen::new(size);
    let mut rng = Rng::new(1);
    while g.pos + 64 < size {
        g.psb_plus();
        if rng.below(64) == 0 {
            let n = 1 + rng.below(Tnt::MAX_LONG as u64) as u32;
            let payload = (1u64 << n) | (rng.next() & ((1u64 << n) - 1));
            g.put(Packet::Tnt64(Tnt::from_payload(payload).unwrap()));
        } else {
            let n = 1 + rng.below(Tnt::MAX_SHORT as u64) as u32;
            let payload = (1u64 << n) | (rng.next() & ((1u64 << n) - 1));
            g.put(Packet::Tnt8(Tnt::from_payload(payload).unwrap()));
        }
    }
    g.finish()
}

/// A worst case for branch predictors: packets drawn uniformly at random (TNT, TIPs with
/// every IP compression, MTC, CYC, PAD) with PSB+ every 4 KiB. Real traces repeat
/// themselves far more; see [`mixed`].
pub fn random_mix(size: usize) -> Vec<u8> {
    let mut g = Gen::new(size);
    let mut rng = Rng::new(2);
    let mut mtc = 0u8;
    let mut last = pt_encoder::LastIp::new();
    while g.pos + 64 < size {
        if g.psb_plus() {
            last.reset();
            last.update(pt_encoder::IpPayload::new(IpCompression::Sext48, g.ip));
        }
        match rng.below(16) {
            0..=4 => {
                let n = 1 + rng.below(6) as u32;
                let payload = (1u64 << n) | (rng.next() & ((1u64 << n) - 1));
                g.put(Packet::Tnt8(Tnt::from_payload(payload).unwrap()));
            }
            5..=9 => {
                // A target near, far or very far from the last IP exercises every form.
                let target = match rng.below(5) {
                    0 => (g.ip & !0xffff) | rng.below(0x1_0000),
                    1 => (g.ip & !0xffff_ffff) | rng.below(0x1_0000_0000),
                    2 => 0x7f00_0000_0000 | rng.below(0x1_0000_0000),
                    3 => 0xffff_8000_0000_0000 | rng.below(0x1_0000_0000),
                    _ => rng.next(),
                };
                let mut payload = last.compress(target);
                if rng.below(8) == 0 {
                    payload = pt_encoder::IpPayload::new(IpCompression::Full, target);
                }
                last.update(payload);
                g.ip = target;
                let kind = match rng.below(8) {
                    0 => IpPacketKind::Fup,
                    1 => IpPacketKind::TipPge,
                    2 => IpPacketKind::TipPgd,
                    _ => IpPacketKind::Tip,
                };
                g.put(Packet::Ip(kind, payload));
            }
            10 | 11 => {
                mtc = mtc.wrapping_add(1);
                g.put(Packet::Mtc { ctc: mtc });
            }
            12..=14 => {
                let bits = rng.below(20) + 1;
                g.put(Packet::Cyc {
                    value: rng.below(1 << bits),
                })
            }
            _ => g.put(Packet::Pad),
        }
    }
    g.finish()
}

/// One basic block of the synthetic program behind [`mixed`]: the packets it makes.
#[derive(Clone, Debug)]
struct Block {
    /// Conditional branches in the block (0..=6 TNT results).
    branches: u32,
    /// How the block ends.
    exit: Exit,
    /// Successor blocks and their weights (out of 16).
    succ: [(usize, u64); 3],
    /// Cycle-accurate mode: a CYC before the block's branch packets.
    cyc: bool,
}

#[derive(Clone, Copy, Debug)]
enum Exit {
    /// Falls through or jumps directly: no IP packet.
    Direct,
    /// Indirect branch or return: TIP to the successor.
    Indirect,
    /// Interrupt: FUP at the block, TIP to the successor.
    Interrupt,
    /// Leaves the IP filter (TIP.PGD) and re-enters at the successor (TIP.PGE).
    FilterHop,
}

/// A trace of about `size` bytes that looks like a real program's: a synthetic program of
/// 512 basic blocks in five address regions (so every IP compression appears: near
/// targets update 16 or 32 bits, the shared-library region 48, the kernel region is
/// sign-extended, the high region needs the full 64 bits), walked with skewed branch
/// probabilities; TNT runs, TIPs, FUP+TIP interrupts, TIP.PGD/TIP.PGE filter hops, CYC
/// before branch packets, an MTC every 256 packets, PAD, and PSB+ every 4 KiB.
pub fn mixed(size: usize) -> Vec<u8> {
    const BLOCKS: usize = 512;
    let regions: [u64; 5] = [
        0x0000_0000_0040_0000,
        0x0000_0000_7fff_0000,
        0x0000_7f12_3456_0000,
        0xffff_ffff_8100_0000,
        0x8000_1234_0000_0000,
    ];
    let mut rng = Rng::new(3);
    let addr: Vec<u64> = (0..BLOCKS)
        .map(|i| {
            let region = regions[if i % 16 == 0 { i / 16 % 5 } else { i % 3 }];
            region + rng.below(0x1_0000) * 16 + (i as u64) * 0x1_0000
        })
        .collect();
    let blocks: Vec<Block> = (0..BLOCKS)
        .map(|_| {
            let exit = match rng.below(16) {
                0..=6 => Exit::Direct,
                7..=13 => Exit::Indirect,
                14 => Exit::Interrupt,
                _ => Exit::FilterHop,
            };
            let branches = rng.below(7) as u32;
            let cyc = rng.below(4) != 0;
            let mut s = || rng.below(BLOCKS as u64) as usize;
            Block {
                branches,
                exit,
                succ: [(s(), 12), (s(), 3), (s(), 1)],
                cyc,
            }
        })
        .collect();

    let mut g = Gen::new(size);
    let mut last = pt_encoder::LastIp::new();
    let mut cur = 0usize;
    let mut packets = 0u64;
    let mut mtc = 0u8;
    while g.pos + 64 < size {
        if g.psb_plus() {
            g.ip = addr[cur];
            last.reset();
            last.update(pt_encoder::IpPayload::new(IpCompression::Sext48, g.ip));
        }
        let b = &blocks[cur];
        let pick = rng.below(16);
        let next = if pick < b.succ[0].1 {
            b.succ[0].0
        } else if pick < b.succ[0].1 + b.succ[1].1 {
            b.succ[1].0
        } else {
            b.succ[2].0
        };
        if b.cyc {
            let c = 1 + rng.below(64);
            g.put(Packet::Cyc { value: c });
        }
        if b.branches > 0 {
            // Loops: mostly taken.
            let mut payload = 1u64;
            for _ in 0..b.branches {
                payload = payload << 1 | (rng.below(8) != 0) as u64;
            }
            g.put(Packet::Tnt8(Tnt::from_payload(payload).expect("stop bit")));
        }
        let target = addr[next];
        let mut ip = |kind: IpPacketKind, ip: u64, g: &mut Gen| {
            let mut p = last.compress(ip);
            if ip >> 63 == 1 && ip >> 47 != 0x1_ffff {
                p = pt_encoder::IpPayload::new(IpCompression::Full, ip);
            }
            last.update(p);
            g.put(Packet::Ip(kind, p));
        };
        match b.exit {
            Exit::Direct => {}
            Exit::Indirect => ip(IpPacketKind::Tip, target, &mut g),
            Exit::Interrupt => {
                ip(IpPacketKind::Fup, addr[cur] + 4, &mut g);
                ip(IpPacketKind::Tip, target, &mut g);
            }
            Exit::FilterHop => {
                ip(IpPacketKind::TipPgd, addr[cur] + 8, &mut g);
                ip(IpPacketKind::TipPge, target, &mut g);
            }
        }
        g.ip = target;
        cur = next;
        packets += 1;
        if packets.is_multiple_of(256) {
            mtc = mtc.wrapping_add(1);
            g.put(Packet::Mtc { ctc: mtc });
        }
        if packets.is_multiple_of(1024) {
            g.put(Packet::Pad);
            g.put(Packet::Pad);
        }
    }
    g.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_decoder::{Config, PacketDecoder};

    fn check(buf: &[u8]) -> usize {
        let mut d = PacketDecoder::new(buf, &Config::default());
        d.sync_forward().unwrap();
        let mut n = 0;
        for r in d {
            r.unwrap();
            n += 1;
        }
        n
    }

    #[test]
    fn mixed_has_every_ip_compression() {
        let m = mixed(1 << 20);
        let mut d = PacketDecoder::new(&m, &Config::default());
        d.sync_forward().unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut kinds = std::collections::HashSet::new();
        for r in d {
            let p = r.unwrap().1;
            if let Packet::Ip(k, ip) = p {
                seen.insert(ip.compression);
                kinds.insert(k);
            }
        }
        for c in IpCompression::ALL {
            if c != IpCompression::Suppressed {
                assert!(seen.contains(&c), "{c:?} missing");
            }
        }
        assert_eq!(kinds.len(), 4);
    }

    #[test]
    fn generated_traces_decode_cleanly() {
        let t = tnt_heavy(1 << 20);
        assert!(t.len() > (1 << 20) - 128);
        assert!(check(&t) > 500_000);
        let m = mixed(1 << 20);
        assert!(check(&m) > 100_000);
        let r = random_mix(1 << 20);
        assert!(check(&r) > 100_000);
    }
}
