//! Flow decoder tests over small generated images and scripted traces.

use super::*;
use crate::config::Config;
use crate::error::ErrorCode;
use crate::event::EventKind;
use crate::image::Image;
use pt_encoder::packet::{ExecMode, IpCompression, IpPacketKind, IpPayload, ModeExec, Packet, Tnt};
use pt_encoder::Encoder;

const BASE: u64 = 0x1000;

/// A trace builder: PSB+, then what the test adds.
struct T {
    buf: Vec<u8>,
    len: usize,
}

impl T {
    fn new() -> Self {
        let mut t = T {
            buf: vec![0; 4096],
            len: 0,
        };
        t.push(&Packet::Psb);
        t.push(&Packet::Psbend);
        t
    }

    fn push(&mut self, p: &Packet) -> &mut Self {
        let mut enc = Encoder::new(&mut self.buf[self.len..]);
        enc.next(p).expect("packet fits");
        self.len += enc.offset();
        self
    }

    fn ip(&mut self, kind: IpPacketKind, ip: u64) -> &mut Self {
        self.push(&Packet::Ip(kind, IpPayload::new(IpCompression::Full, ip)))
    }

    fn enable(&mut self, ip: u64) -> &mut Self {
        self.push(&Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)));
        self.ip(IpPacketKind::TipPge, ip)
    }

    fn tnt(&mut self, bits: &[bool]) -> &mut Self {
        let tnt = Tnt::from_results(bits.iter().copied()).expect("1..47 bits");
        if bits.len() <= 6 {
            self.push(&Packet::Tnt8(tnt))
        } else {
            self.push(&Packet::Tnt64(tnt))
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

fn image(code: &[u8]) -> Image {
    let mut image = Image::new();
    image
        .add_bytes(BASE, code.to_vec(), "code")
        .expect("section");
    image
}

/// What a decoder run produced, as text: one line per block (`first..last n`),
/// event or error.
fn run_blocks(trace: &[u8], image: &Image, options: FlowOptions) -> Vec<String> {
    let mut out = Vec::new();
    let mut dec = BlockDecoder::new(trace, image, &Config::default(), options);
    let mut status = match dec.sync_forward() {
        Ok(s) => s,
        Err(e) => return vec![format!("sync error: {e}")],
    };
    let mut block = Block {
        ip: 0,
        end_ip: 0,
        mode: ExecMode::Unknown,
        ninsn: 0,
        speculative: false,
        truncated: false,
        isid: 0,
        class: None,
    };
    for _ in 0..1000 {
        while status.event_pending {
            match dec.event() {
                Ok((ev, s)) => {
                    if !ev.status_update {
                        out.push(event_text(&ev.kind));
                    }
                    status = s;
                }
                Err(e) => {
                    out.push(format!("error: {e}"));
                    return out;
                }
            }
        }
        if status.eos {
            out.push("eos".into());
            return out;
        }
        let r = dec.next(&mut block);
        if block.ninsn > 0 {
            out.push(format!(
                "{:x}..{:x} {}",
                block.ip, block.end_ip, block.ninsn
            ));
        }
        match r {
            Ok(s) => status = s,
            Err(e) => {
                out.push(format!("error: {e}"));
                return out;
            }
        }
    }
    out.push("too long".into());
    out
}

fn event_text(kind: &EventKind) -> String {
    match kind {
        EventKind::Enabled { ip, resumed } => {
            format!("{} {ip:x}", if *resumed { "resumed" } else { "enabled" })
        }
        EventKind::Disabled { .. } => "disabled".into(),
        EventKind::ExecMode { .. } => "mode".into(),
        other => format!("{other:?}"),
    }
}

/// The instruction decoder's IPs, for comparison with the blocks.
fn run_insns(trace: &[u8], image: &Image) -> (Vec<u64>, Option<ErrorCode>) {
    let mut ips = Vec::new();
    let mut dec = InsnDecoder::new(trace, image, &Config::default(), FlowOptions::default());
    let mut status = match dec.sync_forward() {
        Ok(s) => s,
        Err(e) => return (ips, Some(e)),
    };
    let mut insn = InsnInfo {
        ip: 0,
        size: 0,
        mode: ExecMode::Unknown,
        speculative: false,
        isid: 0,
        class: None,
    };
    for _ in 0..10_000 {
        while status.event_pending {
            match dec.event() {
                Ok((_, s)) => status = s,
                Err(e) => return (ips, Some(e)),
            }
        }
        if status.eos {
            return (ips, None);
        }
        match dec.next(&mut insn) {
            Ok(Progress::Done(s)) => {
                ips.push(insn.ip);
                status = s;
            }
            Ok(Progress::EventFirst) => status.event_pending = true,
            Err(e) => {
                if insn.class.is_some() {
                    ips.push(insn.ip);
                }
                return (ips, Some(e));
            }
        }
    }
    (ips, Some(ErrorCode::Internal))
}

// L: add rax, 1 (4); nop (1); jnz L (2)
const LOOP: &[u8] = &[0x48, 0x83, 0xc0, 0x01, 0x90, 0x75, 0xf9];

#[test]
fn loop_follows_tnt_bits() {
    let mut t = T::new();
    t.enable(BASE).tnt(&[true, true, false]);
    let out = run_blocks(t.bytes(), &image(LOOP), FlowOptions::default());
    assert_eq!(
        out,
        [
            "enabled 1000",
            "mode",
            "1000..1005 3",
            "1000..1005 3",
            "1000..1005 3",
            "eos"
        ]
    );
}

#[test]
fn skip_blocks_counts_like_next() {
    let bits = [true; 47];
    let mut t = T::new();
    t.enable(BASE);
    for _ in 0..20 {
        t.tnt(&bits);
    }
    t.tnt(&[true, false]).ip(IpPacketKind::TipPgd, BASE + 7);
    let image = image(LOOP);
    // Reference: block by block.
    let reference = run_blocks(t.bytes(), &image, FlowOptions::default());
    let blocks = reference.iter().filter(|l| l.starts_with("1000..")).count() as u64;
    // With skipping (twice, so that the memo is used).
    for _ in 0..2 {
        let mut dec = BlockDecoder::new(
            t.bytes(),
            &image,
            &Config::default(),
            FlowOptions::default(),
        );
        let mut status = dec.sync_forward().expect("sync");
        let mut block = Block {
            ip: 0,
            end_ip: 0,
            mode: ExecMode::Unknown,
            ninsn: 0,
            speculative: false,
            truncated: false,
            isid: 0,
            class: None,
        };
        let (mut insns, mut nblocks, mut skipped) = (0u64, 0u64, 0u64);
        loop {
            while status.event_pending {
                status = dec.event().expect("event").1;
            }
            if status.eos {
                break;
            }
            let (i, b) = dec.skip_blocks();
            skipped += b;
            insns += i;
            nblocks += b;
            status = dec.next(&mut block).expect("block");
            insns += u64::from(block.ninsn);
            nblocks += u64::from(block.ninsn > 0);
        }
        // Every TNT bit is a block, skipped or not.
        assert_eq!(nblocks, blocks);
        assert_eq!(insns, blocks * 3);
        assert!(skipped > blocks / 2, "skipped only {skipped} of {blocks}");
    }
}

// call F (5); nop (1); ... F: nop; ret
const CALL_RET: &[u8] = &[0xe8, 0x01, 0x00, 0x00, 0x00, 0x90, 0x90, 0xc3];

#[test]
fn compressed_return_pops_the_call() {
    let mut t = T::new();
    t.enable(BASE)
        .tnt(&[true])
        .ip(IpPacketKind::TipPgd, BASE + 5);
    let out = run_blocks(t.bytes(), &image(CALL_RET), FlowOptions::default());
    // libipt ends the block after the call while it learns the code.
    assert_eq!(
        out,
        [
            "enabled 1000",
            "mode",
            "1000..1000 1",
            "1006..1007 2",
            "disabled",
            "eos"
        ]
    );
}

#[test]
fn uncompressed_return_takes_a_tip() {
    let mut t = T::new();
    t.enable(BASE)
        .ip(IpPacketKind::Tip, BASE + 5)
        .ip(IpPacketKind::TipPgd, BASE + 6);
    let out = run_blocks(t.bytes(), &image(CALL_RET), FlowOptions::default());
    assert_eq!(
        out,
        [
            "enabled 1000",
            "mode",
            "1000..1000 1",
            "1006..1007 2",
            "1005..1005 1",
            "disabled",
            "eos"
        ]
    );
}

#[test]
fn compressed_return_without_call_fails() {
    // Start at F: the return has no call on the stack.
    let mut t = T::new();
    t.enable(BASE + 6).tnt(&[true]);
    let out = run_blocks(t.bytes(), &image(CALL_RET), FlowOptions::default());
    assert_eq!(
        out.last().map(String::as_str),
        Some("error: compressed return without call")
    );
}

#[test]
fn not_taken_return_is_bad() {
    let mut t = T::new();
    t.enable(BASE).tnt(&[false]);
    let out = run_blocks(t.bytes(), &image(CALL_RET), FlowOptions::default());
    assert_eq!(
        out.last().map(String::as_str),
        Some("error: bad compressed return")
    );
}

#[test]
fn end_on_call_ends_blocks_at_direct_calls() {
    // Run the call twice so that the second pass is over known code.
    // L: call F; jnz L (2) ... F: ret
    let code = [0xe8, 0x02, 0x00, 0x00, 0x00, 0x75, 0xf9, 0xc3];
    let mut t = T::new();
    t.enable(BASE).tnt(&[true, true, true, false]);
    let image = image(&code);
    let plain = run_blocks(t.bytes(), &image, FlowOptions::default());
    assert_eq!(
        plain,
        [
            "enabled 1000",
            "mode",
            "1000..1000 1",
            "1007..1007 1",
            "1005..1005 1",
            "1000..1007 2",
            "1005..1005 1",
            "eos"
        ]
    );
    let options = FlowOptions {
        end_on_call: true,
        ..FlowOptions::default()
    };
    let ended = run_blocks(t.bytes(), &image, options);
    assert_eq!(
        ended,
        [
            "enabled 1000",
            "mode",
            "1000..1000 1",
            "1007..1007 1",
            "1005..1005 1",
            "1000..1000 1",
            "1007..1007 1",
            "1005..1005 1",
            "eos"
        ]
    );
}

#[test]
fn indirect_jump_uses_the_tip() {
    // jmp rax (2); nop; nop; target: nop; hlt
    let code = [0xff, 0xe0, 0x90, 0x90, 0x90, 0xf4];
    let mut t = T::new();
    t.enable(BASE)
        .ip(IpPacketKind::Tip, BASE + 4)
        .ip(IpPacketKind::TipPgd, BASE + 5);
    let out = run_blocks(t.bytes(), &image(&code), FlowOptions::default());
    assert_eq!(
        out,
        [
            "enabled 1000",
            "mode",
            "1000..1000 1",
            "1004..1004 1",
            "disabled",
            "eos"
        ]
    );
}

#[test]
fn deferred_tip_behind_tnt() {
    // call rbx (2); jz +0 (2) (at the return address) ... F (at 0x1010): ret
    let mut code = vec![0x90; 0x11];
    code[..4].copy_from_slice(&[0xff, 0xd3, 0x74, 0x00]);
    code[0x10] = 0xc3;
    let mut t = T::new();
    // The TNT holding the return and the jz comes before the call's TIP.
    t.enable(BASE)
        .tnt(&[true, true])
        .ip(IpPacketKind::Tip, BASE + 0x10)
        .ip(IpPacketKind::TipPgd, BASE + 4);
    let out = run_blocks(t.bytes(), &image(&code), FlowOptions::default());
    assert_eq!(
        out,
        [
            "enabled 1000",
            "mode",
            "1000..1000 1",
            "1010..1010 1",
            "1002..1002 1",
            "disabled",
            "eos"
        ]
    );
}

#[test]
fn resumed_when_enabled_at_the_disable_ip() {
    // call rax (2) at 0x1000; 0x1002: nop; nop
    let code = [0xff, 0xd0, 0x90, 0x90];
    let mut t = T::new();
    // Disabled by the call; enabled again at its return address.
    t.enable(BASE)
        .ip(IpPacketKind::TipPgd, 0x3000)
        .ip(IpPacketKind::TipPge, BASE + 2)
        .ip(IpPacketKind::TipPgd, BASE + 3);
    let out = run_blocks(t.bytes(), &image(&code), FlowOptions::default());
    assert_eq!(
        out,
        [
            "enabled 1000",
            "mode",
            "1000..1000 1",
            "disabled",
            "resumed 1002",
            "1002..1002 1",
            "disabled",
            "eos"
        ]
    );
}

#[test]
fn unmapped_code_is_an_error() {
    let mut t = T::new();
    t.enable(0x9000).tnt(&[true]);
    let out = run_blocks(t.bytes(), &image(LOOP), FlowOptions::default());
    assert_eq!(
        out.last().map(String::as_str),
        Some("error: no memory mapped at this address")
    );
}

#[test]
fn resync_goes_on_after_an_error() {
    // Unmapped start, then a TIP to mapped code.
    let mut t = T::new();
    t.enable(0x9000)
        .ip(IpPacketKind::Tip, BASE)
        .tnt(&[false])
        .ip(IpPacketKind::TipPgd, BASE + 7);
    let image = image(LOOP);
    let mut dec = BlockDecoder::new(
        t.bytes(),
        &image,
        &Config::default(),
        FlowOptions::default(),
    );
    let mut status = dec.sync_forward().expect("sync");
    let mut block = Block {
        ip: 0,
        end_ip: 0,
        mode: ExecMode::Unknown,
        ninsn: 0,
        speculative: false,
        truncated: false,
        isid: 0,
        class: None,
    };
    while status.event_pending {
        status = dec.event().expect("event").1;
    }
    assert_eq!(dec.next(&mut block), Err(ErrorCode::NoMap));
    let Ok(Progress::Done(status)) = dec.resync() else {
        panic!("no resync at the TIP");
    };
    assert!(!status.ip_suppressed);
    let status = dec.next(&mut block).expect("block after resync");
    assert_eq!((block.ip, block.ninsn), (BASE, 3));
    assert!(!status.event_pending);
    // The disable binds at the fall-through address: an empty block, then the event.
    let status = dec.next(&mut block).expect("empty block");
    assert_eq!((block.ip, block.ninsn), (BASE + 7, 0));
    assert!(status.event_pending);
}

#[test]
fn insn_decoder_matches_blocks() {
    let code: Vec<u8> = [CALL_RET, LOOP].concat();
    let mut t = T::new();
    t.enable(BASE)
        .tnt(&[true])
        .ip(IpPacketKind::Tip, BASE + 8)
        .tnt(&[true, true, false]);
    t.ip(IpPacketKind::TipPgd, BASE + 15);
    let image = image(&code);
    let blocks = run_blocks(t.bytes(), &image, FlowOptions::default());
    let (ips, err) = run_insns(t.bytes(), &image);
    assert_eq!(err, None);
    let total: usize = blocks
        .iter()
        .filter(|l| l.contains(".."))
        .filter_map(|l| l.split(' ').nth(1).and_then(|n| n.parse::<usize>().ok()))
        .sum();
    assert_eq!(ips.len(), total);
    assert_eq!(&ips[..3], &[0x1000, 0x1006, 0x1007]);
    assert_eq!(ips.iter().filter(|&&ip| ip == 0x100d).count(), 3);
}

#[test]
fn skl014_binds_a_suppressed_disable_to_a_direct_jump_out_of_the_filter() {
    // 0x1000: nop; jmp 0x2000 (5)   (0x2000 outside the filter range)
    let mut code = vec![0x90; 0x1008];
    code[1..6].copy_from_slice(&[0xe9, 0xfa, 0x0f, 0x00, 0x00]);
    let mut t = T::new();
    t.enable(BASE)
        .push(&Packet::Ip(IpPacketKind::TipPgd, IpPayload::SUPPRESSED));
    let image = image(&code);
    let mut options = FlowOptions::default();
    options.filter.cfg[0] = filter::CFG_FILTER;
    options.filter.a[0] = 0x1000;
    options.filter.b[0] = 0x1fff;
    let config = Config {
        errata: crate::config::Errata {
            skl014: true,
            ..Default::default()
        },
        ..Config::default()
    };
    let mut dec = BlockDecoder::new(t.bytes(), &image, &config, options);
    let mut status = dec.sync_forward().expect("sync");
    while status.event_pending {
        status = dec.event().expect("event").1;
    }
    let mut block = Block {
        ip: 0,
        end_ip: 0,
        mode: ExecMode::Unknown,
        ninsn: 0,
        speculative: false,
        truncated: false,
        isid: 0,
        class: None,
    };
    let status = dec.next(&mut block).expect("block");
    assert_eq!((block.ip, block.end_ip, block.ninsn), (BASE, BASE + 1, 2));
    assert!(status.event_pending);
    let (ev, _) = dec.event().expect("disabled");
    assert!(matches!(ev.kind, EventKind::Disabled { .. }));
}

#[test]
fn long_straight_runs_end_after_0x400_new_instructions() {
    let mut code = vec![0x90; 0x500];
    code.push(0xc3);
    let mut t = T::new();
    t.enable(BASE)
        .ip(IpPacketKind::Tip, BASE)
        .ip(IpPacketKind::Tip, BASE)
        .ip(IpPacketKind::TipPgd, BASE);
    let out = run_blocks(t.bytes(), &image(&code), FlowOptions::default());
    // First pass: libipt learns 0x400 instructions, then the rest; second pass is one block.
    assert_eq!(
        out,
        [
            "enabled 1000",
            "mode",
            "1000..13ff 1024",
            "1400..1500 257",
            "1000..1500 1281",
            "disabled",
            "eos"
        ]
    );
}

/// Decode counting instructions and blocks, with or without `skip_blocks`; the last
/// item is how the run ended.
fn count(trace: &[u8], image: &Image, skip: bool) -> (u64, u64, String) {
    let (insns, blocks, end, _) = count_skipped(trace, image, skip);
    (insns, blocks, end)
}

/// [`count`], and how many of the blocks `skip_blocks` took.
fn count_skipped(trace: &[u8], image: &Image, skip: bool) -> (u64, u64, String, u64) {
    let mut skipped = 0;
    let (insns, blocks, end) = count_inner(trace, image, skip, &mut skipped);
    (insns, blocks, end, skipped)
}

fn count_inner(trace: &[u8], image: &Image, skip: bool, skipped: &mut u64) -> (u64, u64, String) {
    let mut dec = BlockDecoder::new(trace, image, &Config::default(), FlowOptions::default());
    let mut status = dec.sync_forward().expect("sync");
    let mut block = Block {
        ip: 0,
        end_ip: 0,
        mode: ExecMode::Unknown,
        ninsn: 0,
        speculative: false,
        truncated: false,
        isid: 0,
        class: None,
    };
    let (mut insns, mut blocks) = (0u64, 0u64);
    loop {
        while status.event_pending {
            match dec.event() {
                Ok((_, s)) => status = s,
                Err(e) => return (insns, blocks, format!("event error {e}")),
            }
        }
        if status.eos {
            return (insns, blocks, "eos".into());
        }
        if skip {
            let (i, b) = dec.skip_blocks();
            insns += i;
            blocks += b;
            *skipped += b;
        }
        let r = dec.next(&mut block);
        insns += u64::from(block.ninsn);
        blocks += 1;
        match r {
            Ok(s) => status = s,
            Err(e) => return (insns, blocks, format!("error {e} at {:x}", block.ip)),
        }
    }
}

#[test]
fn skip_blocks_follows_calls_and_compressed_returns() {
    // L: add rax, 1; call F; jmp M; (pad) M: jnz L; ret  F: nop; ret
    let code = [
        0x48, 0x83, 0xc0, 0x01, // 00 add rax, 1
        0xe8, 0x06, 0x00, 0x00, 0x00, // 04 call 0x0f
        0xeb, 0x01, // 09 jmp 0x0c
        0x90, // 0b
        0x75, 0xf2, // 0c jnz 0x00
        0xc3, // 0e ret (returns to a call before the trace: needs the real stack)
        0x90, 0xc3, // 0f F: nop; ret
    ];
    let image = image(&code);
    let mut t = T::new();
    t.enable(BASE);
    // Per iteration: ret of F (taken), jnz (taken); last: jnz not taken.
    let mut bits = Vec::new();
    for _ in 0..200 {
        bits.extend([true, true]);
    }
    bits.extend([true, false]);
    for chunk in bits.chunks(47) {
        t.tnt(chunk);
    }
    // The final ret finds no call on the stack.
    t.tnt(&[true]);
    let plain = count(t.bytes(), &image, false);
    let skipped = count(t.bytes(), &image, true);
    assert_eq!(plain, skipped);
    assert_eq!(plain.2, "error compressed return without call at 100e");
    assert_eq!(plain.0, 201 * 6 + 1);
}

#[test]
fn skip_blocks_keeps_the_return_stack_exact_when_full() {
    // Deep recursion: R: call R2 ... each level calls the next; returns unwind.
    // 0x00: call 0x10 (depth counter via TNT), 0x05: jnz 0x00, 0x07: ret
    // 0x10: jz 0x16; call 0x10; ret? -- keep it simple: a chain of 70 calls.
    let mut code = Vec::new();
    for i in 0..70u32 {
        // call next level (5 bytes each, each level at 8-byte stride: call +3, ret)
        let at = i * 8;
        let target = at + 8;
        let rel = target.wrapping_sub(at + 5);
        code.extend([0xe8]);
        code.extend(rel.to_le_bytes());
        code.extend([0x75, 0x00, 0xc3]); // jnz +0; ret
    }
    code.extend([0x90, 0xc3]); // deepest: nop; ret
    let image = image(&code);
    let mut t = T::new();
    t.enable(BASE);
    // Unwind: each level returns (compressed) then its jnz (not taken), then ret.
    let mut bits = vec![true]; // deepest ret
    for _ in 0..70 {
        bits.extend([false, true]); // jnz not taken, ret
    }
    for chunk in bits.chunks(47) {
        t.tnt(chunk);
    }
    let plain = count(t.bytes(), &image, false);
    let skipped = count(t.bytes(), &image, true);
    assert_eq!(plain, skipped);
    // The stack holds 64 return addresses: the outer returns fail like libipt's.
    assert!(
        plain.2.starts_with("error compressed return without call"),
        "{plain:?}"
    );
}

#[test]
fn skip_blocks_takes_tips_like_next() {
    // M: call rbx (→ G); jmp rcx (→ N)  N: jnz M; ret  G: add rax, 1; ret
    let mut code = vec![0x90; 0x30];
    code[0x00..0x04].copy_from_slice(&[0xff, 0xd3, 0xff, 0xe1]);
    code[0x10..0x13].copy_from_slice(&[0x75, 0xee, 0xc3]);
    code[0x20..0x25].copy_from_slice(&[0x48, 0x83, 0xc0, 0x01, 0xc3]);
    let image = image(&code);
    let mut t = T::new();
    t.enable(BASE);
    for i in 0..120 {
        // Packets between branches keep the skip from taking the branch before them.
        if i % 11 == 5 {
            t.push(&Packet::Psb)
                .push(&Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)))
                .ip(IpPacketKind::Fup, BASE)
                .push(&Packet::Psbend);
        }
        if i % 3 == 0 {
            t.push(&Packet::Pad);
        }
        t.ip(IpPacketKind::Tip, BASE + 0x20).tnt(&[true]);
        if i % 5 == 0 {
            t.push(&Packet::Cyc { value: 3 });
        }
        if i % 7 == 0 {
            t.push(&Packet::Mtc { ctc: i as u8 });
        }
        t.ip(IpPacketKind::Tip, BASE + 0x10);
        t.tnt(&[i != 119]);
    }
    // The final ret finds no call on the stack.
    t.tnt(&[true]);
    let plain = count(t.bytes(), &image, false);
    let (i, b, end, taken) = count_skipped(t.bytes(), &image, true);
    assert_eq!(plain, (i, b, end));
    // Most blocks are skipped: all but those before a packet that is not a branch.
    assert!(taken > 400, "{taken} of {b} blocks skipped");
    assert_eq!(plain.2, "error compressed return without call at 1012");
    assert_eq!(plain.0, 120 * 5 + 1);
}

use pt_testkit::Rng;

/// Stub code (all branches relative), at `STUB + k * 0x40`:
/// `E: call F; call rbx; sub rdx, 1; jnz E; jmp rcx; F: nop; ret; G: add rax, 1; ret`.
const STUB_CODE: &[u8] = &[
    0xe8, 0x0a, 0x00, 0x00, 0x00, 0xff, 0xd3, 0x48, 0x83, 0xea, 0x01, 0x75, 0xf3, 0xff, 0xe1, 0x90,
    0xc3, 0x48, 0x83, 0xc0, 0x01, 0xc3,
];
const STUB: u64 = BASE + 0x100;
/// `M: add rax, 1; call FM; jmp rsi; FM: nop; ret` at `BASE`.
const MAIN_CODE: &[u8] = &[
    0x48, 0x83, 0xc0, 0x01, 0xe8, 0x02, 0x00, 0x00, 0x00, 0xff, 0xe6, 0x90, 0xc3,
];

/// A trace of the stub program with noise: TNT-8 packets of the bits gathered between
/// TIPs, compressed and uncompressed returns, TIPs with every compression, PAD, CYC,
/// MTC, PSB+ and now and then something that does not fit (a wrong return bit, a TIP
/// to nowhere, an asynchronous branch, MODE.Exec, OVF, a disable and enable).
fn noisy_calls_trace(seed: u64, rounds: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut last = pt_encoder::LastIp::new();
    let mut bits: Vec<bool> = Vec::new();
    let put = |out: &mut Vec<u8>, p: &Packet| {
        pt_encoder::encode_to_vec(p, out).expect("packet");
    };
    let psb_plus = |out: &mut Vec<u8>, last: &mut pt_encoder::LastIp, ip: u64, tsc: u64| {
        put(out, &Packet::Psb);
        put(out, &Packet::Tsc { tsc });
        put(out, &Packet::Tma { ctc: 0, fc: 0 });
        put(out, &Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)));
        last.reset();
        let p = IpPayload::new(IpCompression::Sext48, ip);
        last.update(p);
        put(out, &Packet::Ip(IpPacketKind::Fup, p));
        put(out, &Packet::Psbend);
    };
    psb_plus(&mut out, &mut last, BASE, 0x1000);
    let mut tsc = 0x1000;
    let mut ctc = 0u8;
    // Flush the TNT bits, add noise, then the TIP to `ip`.
    let mut tip = |out: &mut Vec<u8>,
                   bits: &mut Vec<bool>,
                   last: &mut pt_encoder::LastIp,
                   rng: &mut Rng,
                   ip: u64| {
        for chunk in bits.chunks(6) {
            let tnt = Tnt::from_results(chunk.iter().copied()).expect("bits");
            put(out, &Packet::Tnt8(tnt));
            if rng.below(6) == 0 {
                put(
                    out,
                    &Packet::Cyc {
                        value: 1 + rng.below(300),
                    },
                );
            }
        }
        bits.clear();
        match rng.below(40) {
            0..=5 => put(out, &Packet::Pad),
            6..=14 => put(
                out,
                &Packet::Cyc {
                    value: 1 + rng.below(300),
                },
            ),
            15..=17 => {
                ctc = ctc.wrapping_add(1 + rng.below(3) as u8);
                put(out, &Packet::Mtc { ctc });
            }
            18 => {
                // Tracing goes off and on again.
                put(
                    out,
                    &Packet::Ip(
                        IpPacketKind::TipPgd,
                        IpPayload::new(IpCompression::Suppressed, 0),
                    ),
                );
                let p = last.compress(ip);
                last.update(p);
                put(out, &Packet::Ip(IpPacketKind::TipPge, p));
                return;
            }
            19 => put(out, &Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64))),
            20 if rng.below(4) == 0 => {
                // A TIP to where nothing is mapped.
                let p = IpPayload::new(IpCompression::Full, 0xdead_0000);
                last.update(p);
                put(out, &Packet::Ip(IpPacketKind::Tip, p));
            }
            21 if rng.below(4) == 0 => put(out, &Packet::Ovf),
            _ => {}
        }
        let mut p = last.compress(ip);
        if rng.below(5) == 0 {
            p = IpPayload::new(IpCompression::Full, ip);
        }
        last.update(p);
        put(out, &Packet::Ip(IpPacketKind::Tip, p));
        if rng.below(50) == 0 {
            tsc += 0x1_0000;
            psb_plus(out, last, ip, tsc);
        }
    };
    for _ in 0..rounds {
        // M: add; call FM; nop; ret (compressed); jmp rsi → E.
        bits.push(true);
        let e = STUB + rng.below(4) * 0x40;
        tip(&mut out, &mut bits, &mut last, &mut rng, e);
        let n = 1 + rng.below(4);
        for r in 0..n {
            // call F; nop; ret (compressed, now and then a wrong bit); call rbx → G.
            bits.push(rng.below(100) != 0);
            tip(&mut out, &mut bits, &mut last, &mut rng, e + 0x11);
            // add; ret: compressed or through a TIP.
            if rng.below(3) == 0 {
                tip(&mut out, &mut bits, &mut last, &mut rng, e + 7);
            } else {
                bits.push(true);
            }
            bits.push(r + 1 < n);
        }
        // jmp rcx → M.
        tip(&mut out, &mut bits, &mut last, &mut rng, BASE);
    }
    out
}

fn stubs_image() -> Image {
    let mut code = MAIN_CODE.to_vec();
    code.resize(0x100, 0xcc);
    for _ in 0..4 {
        let at = code.len();
        code.extend_from_slice(STUB_CODE);
        code.resize(at + 0x40, 0xcc);
    }
    image(&code)
}

/// Runs two block decoders side by side, one with `skip_blocks`: the plain one must
/// take the same blocks one by one, and both must then agree on everything they show
/// (time, offset, the next block, events, errors) up to the end of the trace.
fn skip_matches_next(trace: &[u8], image: &Image, config: &Config) -> u64 {
    let mut a = BlockDecoder::new(trace, image, config, FlowOptions::default());
    let mut b = BlockDecoder::new(trace, image, config, FlowOptions::default());
    let empty = Block {
        ip: 0,
        end_ip: 0,
        mode: ExecMode::Unknown,
        ninsn: 0,
        speculative: false,
        truncated: false,
        isid: 0,
        class: None,
    };
    let (mut ba, mut bb) = (empty, empty);
    let sa = a.sync_forward();
    assert_eq!(sa, b.sync_forward());
    let mut status = sa.expect("sync");
    let mut skipped = 0;
    for _ in 0..1_000_000 {
        while status.event_pending {
            let (ea, eb) = (a.event(), b.event());
            assert_eq!(ea, eb);
            match ea {
                Ok((_, s)) => status = s,
                Err(_) => {
                    let (ra, rb) = (a.resync(), b.resync());
                    assert_eq!(ra, rb);
                    match ra {
                        Ok(Progress::Done(s)) => status = s,
                        Ok(Progress::EventFirst) => status.event_pending = true,
                        Err(_) => {
                            let (ra, rb) = (a.sync_forward(), b.sync_forward());
                            assert_eq!(ra, rb);
                            match ra {
                                Ok(s) => status = s,
                                Err(_) => return skipped,
                            }
                        }
                    }
                }
            }
        }
        if status.eos {
            return skipped;
        }
        let (insns, blocks) = b.skip_blocks();
        skipped += blocks;
        let mut sum = 0;
        for _ in 0..blocks {
            let s = a.next(&mut ba).expect("a skipped block decodes");
            assert!(!s.event_pending && !s.eos, "{s:?}");
            sum += u64::from(ba.ninsn);
        }
        assert_eq!(sum, insns);
        assert_eq!(a.time(), b.time());
        assert_eq!(a.offset(), b.offset());
        assert_eq!(a.asid(), b.asid());
        assert_eq!(a.core_bus_ratio(), b.core_bus_ratio());
        let (ra, rb) = (a.next(&mut ba), b.next(&mut bb));
        assert_eq!((ra, ba), (rb, bb));
        status = match ra {
            Ok(s) => s,
            Err(_) => {
                let (ra, rb) = (a.resync(), b.resync());
                assert_eq!(ra, rb);
                match ra {
                    Ok(Progress::Done(s)) => s,
                    Ok(Progress::EventFirst) => Status {
                        event_pending: true,
                        ..Status::default()
                    },
                    Err(_) => {
                        let (ra, rb) = (a.sync_forward(), b.sync_forward());
                        assert_eq!(ra, rb);
                        match ra {
                            Ok(s) => s,
                            Err(_) => return skipped,
                        }
                    }
                }
            }
        };
    }
    panic!("the trace did not end");
}

#[test]
fn skip_blocks_agrees_with_next_on_noisy_call_traces() {
    let image = stubs_image();
    let timed = Config {
        mtc_freq: 3,
        nom_freq: 4,
        cpuid_0x15_eax: 1,
        cpuid_0x15_ebx: 2,
        ..Config::default()
    };
    let mut skipped = 0;
    for seed in 1..40 {
        let trace = noisy_calls_trace(seed, 300);
        for config in [Config::default(), timed] {
            skipped += skip_matches_next(&trace, &image, &config);
        }
    }
    assert!(skipped > 10_000, "only {skipped} blocks skipped");
}

/// Random TNT-8 and TNT-64 packets (bits and sizes at random) with timing packets,
/// PAD and now and then PSB+ over code with a loop, a call and a compressed return:
/// long TNT runs (the run memo) and short ones (block by block) side by side.
#[test]
fn skip_blocks_agrees_with_next_on_random_tnt_traces() {
    // L: add rax, 1; call F; jmp M; (pad) M: jnz L; ret  F: nop; ret
    let code = [
        0x48, 0x83, 0xc0, 0x01, 0xe8, 0x06, 0x00, 0x00, 0x00, 0xeb, 0x01, 0x90, 0x75, 0xf2, 0xc3,
        0x90, 0xc3,
    ];
    let image = image(&code);
    let mut skipped = 0;
    for seed in 1..30 {
        let mut rng = Rng::new(seed * 0x9e37_79b9);
        let mut t = T {
            buf: vec![0; 1 << 16],
            len: 0,
        };
        t.push(&Packet::Psb).push(&Packet::Psbend).enable(BASE);
        for _ in 0..600 {
            let n = if rng.below(3) == 0 {
                7 + rng.below(41)
            } else {
                1 + rng.below(6)
            } as usize;
            // Mostly taken: the loop goes round and the returns are compressed.
            let bits: Vec<bool> = (0..n).map(|_| rng.below(12) != 0).collect();
            t.tnt(&bits);
            match rng.below(12) {
                0 => {
                    t.push(&Packet::Cyc {
                        value: 1 + rng.below(99),
                    });
                }
                1 => {
                    t.push(&Packet::Mtc {
                        ctc: rng.below(256) as u8,
                    });
                }
                2 => {
                    t.push(&Packet::Pad);
                }
                3 if rng.below(4) == 0 => {
                    t.push(&Packet::Psb)
                        .push(&Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)))
                        .ip(IpPacketKind::Fup, BASE)
                        .push(&Packet::Psbend);
                }
                _ => {}
            }
        }
        skipped += skip_matches_next(t.bytes(), &image, &Config::default());
    }
    assert!(skipped > 2_000, "only {skipped} blocks skipped");
}
