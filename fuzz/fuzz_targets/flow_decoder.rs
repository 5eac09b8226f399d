//! The block and instruction flow decoders on arbitrary trace bytes over a small image
//! with loops, calls, returns, indirect branches and system instructions: they never
//! panic, and ptxed's loop (resync after errors) finishes in a bounded number of calls
//! unless the code itself loops without needing trace.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_decoder::config::{Config, Cpu, Errata};
use pt_decoder::error::ErrorCode;
use pt_decoder::flow::{Block, BlockDecoder, FlowOptions, InsnDecoder, InsnInfo, Status};
use pt_decoder::image::Image;
use pt_encoder::packet::ExecMode;

const BASE: u64 = 0x1000;

/// Code the trace can steer through (all branches relative or through registers).
const CODE: &[u8] = &[
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

const MAX_CALLS: usize = 50_000;

fn blocks(trace: &[u8], image: &Image, config: &Config, options: FlowOptions, skip: bool) {
    let mut dec = BlockDecoder::new(trace, image, config, options);
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
    let mut calls = 0;
    let mut last_sync = None;
    'sync: loop {
        let mut status = match dec.sync_forward() {
            Ok(s) => s,
            Err(ErrorCode::Eos) => return,
            Err(_) => {
                // A failed sync must still move forward.
                let at = dec.offset().ok();
                if at <= last_sync {
                    return;
                }
                last_sync = at;
                continue;
            }
        };
        loop {
            calls += 1;
            if calls > MAX_CALLS {
                // Only code that loops without trace (`jmp $`-like) may get here.
                return;
            }
            let r = if status.event_pending {
                dec.event().map(|(_, s)| s)
            } else if status.eos {
                return;
            } else {
                if skip {
                    let _ = dec.skip_blocks();
                }
                dec.next(&mut block)
            };
            if let Ok(off) = dec.offset() {
                assert!(off <= trace.len() as u64);
            }
            match r {
                Ok(s) => status = s,
                Err(ErrorCode::Eos) => return,
                Err(_) => match dec.resync() {
                    Ok(s) => status = s,
                    Err(ErrorCode::EventIgnored) => {
                        status = Status {
                            event_pending: true,
                            ..Default::default()
                        }
                    }
                    Err(_) => continue 'sync,
                },
            }
        }
    }
}

fn insns(trace: &[u8], image: &Image, config: &Config, options: FlowOptions) {
    let mut dec = InsnDecoder::new(trace, image, config, options);
    let mut insn = InsnInfo {
        ip: 0,
        size: 0,
        mode: ExecMode::Unknown,
        speculative: false,
        isid: 0,
        class: None,
    };
    let Ok(mut status) = dec.sync_forward() else {
        return;
    };
    for _ in 0..MAX_CALLS {
        let r = if status.event_pending {
            dec.event().map(|(_, s)| s)
        } else if status.eos {
            return;
        } else {
            match dec.next(&mut insn) {
                Err(ErrorCode::EventIgnored) => Ok(Status {
                    event_pending: true,
                    ..Default::default()
                }),
                r => r,
            }
        };
        match r {
            Ok(s) => status = s,
            Err(ErrorCode::Eos) => return,
            Err(_) => match dec.sync_forward() {
                Ok(s) => status = s,
                Err(_) => return,
            },
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks errata, options and the image; the rest is the trace.
    let Some((&pick, trace)) = data.split_first() else {
        return;
    };
    let mut config = Config::default();
    if pick & 1 != 0 {
        let skl = Cpu {
            family: 6,
            model: 0x5e,
            stepping: 0,
        };
        config.errata = Errata::for_cpu(skl).unwrap_or_default();
    }
    let mut options = FlowOptions {
        end_on_call: pick & 2 != 0,
        end_on_jump: pick & 4 != 0,
        tick_events: pick & 8 != 0,
        ..FlowOptions::default()
    };
    if pick & 16 != 0 {
        options.filter.cfg[0] = 1;
        options.filter.a[0] = BASE;
        options.filter.b[0] = BASE + 0x10;
    }
    let mut image = Image::new();
    // Half the time the code is cut short: decoding runs into unmapped bytes.
    let code = if pick & 32 != 0 { &CODE[..0x12] } else { CODE };
    let _ = image.add_bytes(BASE, code.to_vec(), "code");
    blocks(trace, &image, &config, options, pick & 64 != 0);
    insns(trace, &image, &config, options);
});
