//! Trace builders: packets → trace bytes, and a small code image the flow decoders can
//! be steered through.

use pt_encoder::encode_to_vec;
use pt_encoder::packet::{ExecMode, IpCompression, IpPacketKind, IpPayload, ModeExec, Packet, Tnt};

/// The trace bytes of `packets`, in order.
///
/// # Panics
///
/// If a packet cannot be encoded (a test's own mistake).
pub fn encode(packets: &[Packet]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in packets {
        encode_to_vec(p, &mut v).expect("the packet encodes");
    }
    v
}

/// An IP packet of `kind` with the full 64-bit `ip`.
pub fn ip(kind: IpPacketKind, ip: u64) -> Packet {
    Packet::Ip(kind, IpPayload::new(IpCompression::Full, ip))
}

/// A TNT packet with `results` (oldest first): TNT-8 up to 6 of them, else TNT-64.
///
/// # Panics
///
/// With no results or more than 47.
pub fn tnt(results: &[bool]) -> Packet {
    let t = Tnt::from_results(results.iter().copied()).expect("1 to 47 results");
    if results.len() <= 6 {
        Packet::Tnt8(t)
    } else {
        Packet::Tnt64(t)
    }
}

/// A TNT packet from `text`, `!` taken and `.` not (ptdump's notation).
pub fn tnt_str(text: &str) -> Packet {
    let bits: Vec<bool> = text.chars().map(|c| c == '!').collect();
    tnt(&bits)
}

/// MODE.Exec for 64-bit code.
pub fn mode64() -> Packet {
    Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64))
}

/// PSB+ with tracing enabled at `ip` in 64-bit code: PSB, MODE.Exec, FUP, PSBEND.
pub fn psb_at(ip: u64) -> [Packet; 4] {
    [
        Packet::Psb,
        mode64(),
        self::ip(IpPacketKind::Fup, ip),
        Packet::Psbend,
    ]
}

/// Where [`STEER_CODE`] goes.
pub const STEER_BASE: u64 = 0x1000;

/// 64-bit code a trace can steer anywhere (all branches relative or through
/// registers): loops, direct and indirect calls and jumps, returns, and instructions
/// that events bind to (MOV CR3, PTWRITE, SYSCALL, IRET).
pub const STEER_CODE: &[u8] = &[
    0x48, 0x83, 0xc0, 0x01, // 00: add rax, 1
    0xe8, 0x07, 0x00, 0x00, 0x00, // 04: call 0x10
    0x75, 0xf5, // 09: jnz 0x00
    0xff, 0xe0, // 0b: jmp rax
    0x90, 0x90, 0x90, // 0d: nops
    0x90, // 10: nop
    0xff, 0xd3, // 11: call rbx
    0xc3, // 13: ret
    0x0f, 0x22, 0xd8, // 14: mov cr3, rax
    0xf3, 0x0f, 0xae, 0xe0, // 17: ptwrite eax
    0x0f, 0x05, // 1b: syscall
    0xcf, // 1d: iretd
    0xeb, 0xe0, // 1e: jmp 0x00
];

/// Where [`LOOP_CODE`] is loaded.
pub const LOOP_BASE: u64 = 0x1000;

/// [`loop_trace`]'s code: a loop with a direct call, an indirect call, two returns, a conditional branch and
/// an indirect jump.
pub const LOOP_CODE: &[u8] = &[
    0x48, 0x83, 0xc0, 0x01, // 00: add rax, 1
    0xe8, 0x07, 0x00, 0x00, 0x00, // 04: call 0x10
    0x75, 0xf5, // 09: jnz 0x00
    0xff, 0xe0, // 0b: jmp rax
    0x90, 0x90, 0x90, // 0d: nops
    0x90, // 10: nop
    0xff, 0xd3, // 11: call rbx
    0xc3, // 13: ret
];

/// Builds a trace the code above is consistent with: TNT bits for the conditional
/// branch and for returns to calls made since the last PSB (hardware compresses no
/// others), TIPs for the rest, timing packets, and a PSB+ every `psb_every` bytes at
/// any instruction boundary.
struct Gen {
    rng: crate::Rng,
    out: Vec<u8>,
    bits: Vec<bool>,
    /// Return addresses, and whether their call came after the last PSB.
    stack: Vec<(u64, bool)>,
    next_psb: usize,
    psb_every: usize,
    insns: u64,
    /// How TIPs carry their address.
    tip_ip: IpCompression,
}

impl Gen {
    fn put(&mut self, p: Packet) {
        let _ = encode_to_vec(&p, &mut self.out);
    }

    fn flush_tnt(&mut self) {
        if !self.bits.is_empty() {
            let t = Tnt::from_results(self.bits.drain(..)).expect("at most six bits");
            self.put(Packet::Tnt8(t));
        }
    }

    fn timing(&mut self) {
        let v = self.rng.next();
        match v % 8 {
            0 => self.put(Packet::Mtc {
                ctc: (v >> 8) as u8,
            }),
            1 => self.put(Packet::Cyc {
                value: 1 + (v >> 8) % 100,
            }),
            _ => {}
        }
    }

    fn bit(&mut self, b: bool) {
        self.bits.push(b);
        if self.bits.len() == 6 {
            self.flush_tnt();
            self.timing();
        }
    }

    fn tip(&mut self, ip: u64) {
        self.flush_tnt();
        self.timing();
        self.put(Packet::Ip(
            IpPacketKind::Tip,
            IpPayload::new(self.tip_ip, ip),
        ));
    }

    /// Before the instruction at `ip`: a PSB+ if it is time for one.
    fn boundary(&mut self, ip: u64) {
        self.insns += 1;
        if self.out.len() < self.next_psb {
            return;
        }
        self.flush_tnt();
        self.put(Packet::Psb);
        self.put(Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)));
        self.put(Packet::Ip(
            IpPacketKind::Fup,
            IpPayload::new(IpCompression::Full, ip),
        ));
        self.put(Packet::Psbend);
        for e in &mut self.stack {
            e.1 = false;
        }
        self.next_psb = self.out.len() + self.psb_every;
    }

    fn ret(&mut self) -> u64 {
        // Decoders do not pop their stack at a TIP: an uncompressed return leaves the
        // entry there, so hardware can only leave returns uncompressed where the
        // entries below matter no more (calls from before the PSB).
        let (to, fresh) = self.stack.pop().expect("a call before each return");
        if fresh {
            self.bit(true);
        } else {
            self.tip(to);
        }
        to
    }

    fn trace(seed: u64, bytes: usize, psb_every: usize, tip_ip: IpCompression) -> (Vec<u8>, u64) {
        let mut g = Gen {
            rng: crate::Rng(seed),
            out: Vec::new(),
            bits: Vec::new(),
            stack: Vec::new(),
            next_psb: 0,
            psb_every,
            insns: 0,
            tip_ip,
        };
        while g.out.len() < bytes {
            g.boundary(LOOP_BASE); // add
            g.boundary(LOOP_BASE + 0x04); // call 0x10
            g.stack.push((LOOP_BASE + 0x09, true));
            g.boundary(LOOP_BASE + 0x10); // nop
            g.boundary(LOOP_BASE + 0x11); // call rbx
            g.tip(LOOP_BASE + 0x13);
            g.stack.push((LOOP_BASE + 0x13, true));
            g.boundary(LOOP_BASE + 0x13); // ret
            g.ret();
            g.boundary(LOOP_BASE + 0x13); // ret
            g.ret();
            g.boundary(LOOP_BASE + 0x09); // jnz
            let taken = g.rng.below(4) != 0;
            g.bit(taken);
            if !taken {
                g.boundary(LOOP_BASE + 0x0b); // jmp rax
                g.tip(LOOP_BASE);
            }
        }
        g.flush_tnt();
        (g.out, g.insns)
    }
}

/// A valid trace of [`LOOP_CODE`] at [`LOOP_BASE`] (64-bit code) of about `bytes`
/// bytes, with a PSB+ every `psb_every` bytes, random branch outcomes and timing
/// packets from `seed`; and the instructions it holds.
pub fn loop_trace(seed: u64, bytes: usize, psb_every: usize) -> (Vec<u8>, u64) {
    Gen::trace(seed, bytes, psb_every, IpCompression::Full)
}

/// [`loop_trace`] with TIPs whose addresses are compressed as `tip_ip` says (the
/// code's addresses differ only in their low 16 bits, and the PSB+ gives a full IP).
pub fn loop_trace_with(
    seed: u64,
    bytes: usize,
    psb_every: usize,
    tip_ip: IpCompression,
) -> (Vec<u8>, u64) {
    Gen::trace(seed, bytes, psb_every, tip_ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_traces() {
        let t = encode(&[Packet::Psb, Packet::Psbend, tnt_str("!.!")]);
        assert_eq!(&t[..2], &[0x02, 0x82]);
        assert!(matches!(tnt(&[true; 7]), Packet::Tnt64(_)));
        assert_eq!(psb_at(STEER_BASE)[2], ip(IpPacketKind::Fup, 0x1000));
    }
}
