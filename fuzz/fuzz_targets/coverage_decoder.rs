//! The coverage decoder on arbitrary trace bytes over a small image with loops,
//! calls, returns, indirect branches and system instructions, from an image or
//! through the page-fetch callback: it never panics, every error offset lies inside
//! the trace, and the bitmap-only path counts what the collecting path counts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_coverage::{CoverageDecoder, EdgeHash, Options, PAGE_SIZE};
use pt_decoder::image::Image;
use pt_testkit::trace::{STEER_BASE as BASE, STEER_CODE as CODE};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the options and the image; the rest is the trace.
    let Some((&pick, trace)) = data.split_first() else {
        return;
    };
    let mut options = Options {
        map_size: 1 << 10,
        hash: if pick & 1 != 0 {
            EdgeHash::Libxdc
        } else {
            EdgeHash::Afl
        },
        ..Options::default()
    };
    if pick & 16 != 0 {
        options.filter.cfg[0] = 1;
        options.filter.a[0] = BASE;
        options.filter.b[0] = BASE + 0x10;
    }
    // Half the time the code is cut short: decoding runs into unmapped bytes.
    let code = if pick & 32 != 0 { &CODE[..0x12] } else { CODE };
    let mut image = Image::new();
    let _ = image.add_bytes(BASE, code.to_vec(), "code");
    let mut plain = CoverageDecoder::new(options);
    let mut collecting = CoverageDecoder::new(Options {
        collect: true,
        ..options
    });
    let outs = if pick & 64 != 0 {
        let mut fetch = |page: u64, buf: &mut [u8; PAGE_SIZE]| {
            if page != BASE & !(PAGE_SIZE as u64 - 1) {
                return false;
            }
            buf.fill(0);
            let at = (BASE - page) as usize;
            buf[at..at + code.len()].copy_from_slice(code);
            true
        };
        [
            plain.decode_with_pages(trace, &mut fetch),
            collecting.decode_with_pages(trace, &mut fetch),
        ]
    } else {
        [plain.decode(trace, &image), collecting.decode(trace, &image)]
    };
    assert_eq!(outs[0], outs[1]);
    assert!(plain.map() == collecting.map());
    for e in collecting.errors() {
        assert!(e.offset <= trace.len() as u64, "{e}");
    }
    // Warm: the same again over the analysis kept from the first run.
    plain.reset();
    let again = if pick & 64 != 0 {
        return;
    } else {
        plain.decode(trace, &image)
    };
    assert_eq!(again, outs[0]);
    assert!(plain.map() == collecting.map());
});
