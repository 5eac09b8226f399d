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
