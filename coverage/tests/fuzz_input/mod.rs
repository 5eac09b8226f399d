//! One input of the `coverage_decoder` fuzz target, checked: shared by the target
//! (fuzz/fuzz_targets/coverage_decoder.rs) and its corpus replay on stable
//! (tests/fuzz_corpus.rs), so that both read an input the same way.

use pt_coverage::{CoverageDecoder, EdgeHash, Options, PAGE_SIZE};
use pt_decoder::image::Image;
use pt_testkit::trace::{STEER_BASE as BASE, STEER_CODE as CODE};

/// Decodes `data` (the first byte picks the options and the image, the rest is the
/// trace) from an image or through the page-fetch callback: never a panic, every
/// error offset inside the trace, the bitmap-only path counting what the collecting
/// path counts, and a warm decode giving the same again. Returns the errors met.
pub fn check(data: &[u8]) -> u64 {
    let Some((&pick, trace)) = data.split_first() else {
        return 0;
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
    image
        .add_bytes(BASE, code.to_vec(), "code")
        .expect("an empty image takes the code");
    let mut plain = CoverageDecoder::new(options);
    let mut collecting = CoverageDecoder::new(Options {
        collect: true,
        ..options
    });
    let pages = pick & 64 != 0;
    let outs = if pages {
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
        [
            plain.decode(trace, &image),
            collecting.decode(trace, &image),
        ]
    };
    assert_eq!(outs[0], outs[1]);
    assert!(plain.map() == collecting.map());
    for e in collecting.errors() {
        assert!(e.offset <= trace.len() as u64, "{e}");
    }
    if !pages {
        // Warm: the same again over the analysis kept from the first run.
        plain.reset();
        assert_eq!(plain.decode(trace, &image), outs[0]);
        assert!(plain.map() == collecting.map());
    }
    outs[0].errors
}
