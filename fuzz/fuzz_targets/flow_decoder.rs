//! The decode driver (block and instruction granularity, both resync policies, with
//! and without the counting fast path) on arbitrary trace bytes over a small image
//! with loops, calls, returns, indirect branches and system instructions: it never
//! panics, and every offset it reports lies inside the trace.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_decoder::config::{Config, Cpu, Errata};
use pt_decoder::flow::FlowOptions;
use pt_decoder::image::Image;
use pt_decoder::{Decoder, Granularity, Item, Resync};

use pt_testkit::trace::{STEER_BASE as BASE, STEER_CODE as CODE};

/// Items taken at most: only code that loops without trace (`jmp $`-like) gets there.
const MAX_ITEMS: usize = 50_000;

/// The driver as ptxed runs it: `granularity`, resync policy, counting only or not.
fn decode(
    trace: &[u8],
    image: &Image,
    config: &Config,
    options: FlowOptions,
    granularity: Granularity,
    resync: Resync,
    count_only: bool,
) {
    let dec = Decoder::builder(trace, image)
        .config(config)
        .flow(options)
        .granularity(granularity)
        .resync(resync)
        .count_only(count_only)
        .build();
    for item in dec.take(MAX_ITEMS) {
        let offset = match item {
            Item::Block(b) => Some(b.offset),
            Item::Insn(i) => Some(i.offset),
            Item::Event(e) => Some(e.offset),
            Item::Error(e) => e.offset,
            _ => None,
        };
        if let Some(off) = offset {
            assert!(off <= trace.len() as u64);
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
    let resync = if pick & 128 != 0 {
        Resync::NextIp
    } else {
        Resync::NextPsb
    };
    decode(trace, &image, &config, options, Granularity::Blocks, resync, pick & 64 != 0);
    decode(trace, &image, &config, options, Granularity::Instructions, resync, pick & 64 == 0);
});
