//! The `coverage_decoder` fuzz target's committed corpus (fuzz/corpus/coverage_decoder)
//! on stable Rust, with the target's checks: never a panic, every error offset inside
//! the trace, the bitmap-only path counting what the collecting path counts, and a
//! warm decode (over the analysis of the first) giving the same again. (The target's
//! page-fetch variant is left to the fuzzer: here every input reads the image.)

use std::path::Path;

use pt_coverage::{CoverageDecoder, EdgeHash, Options};
use pt_decoder::image::Image;
use pt_testkit::trace::{STEER_BASE as BASE, STEER_CODE as CODE};

/// One input as the target reads it: the first byte picks the options and the image,
/// the rest is the trace. Returns the errors met.
fn replay(data: &[u8]) -> u64 {
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
    let code = if pick & 32 != 0 { &CODE[..0x12] } else { CODE };
    let mut image = Image::new();
    image.add_bytes(BASE, code.to_vec(), "code").unwrap();
    let mut plain = CoverageDecoder::new(options);
    let mut collecting = CoverageDecoder::new(Options {
        collect: true,
        ..options
    });
    let out = plain.decode(trace, &image);
    assert_eq!(out, collecting.decode(trace, &image));
    assert!(plain.map() == collecting.map());
    for e in collecting.errors() {
        assert!(e.offset <= trace.len() as u64, "{e}");
    }
    plain.reset();
    assert_eq!(plain.decode(trace, &image), out);
    assert!(plain.map() == collecting.map());
    out.errors
}

#[test]
fn every_fuzz_input_decodes_or_says_where() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/coverage_decoder");
    let (mut inputs, mut clean) = (0, 0);
    for entry in std::fs::read_dir(&dir).expect("the committed corpus") {
        let path = entry.expect("a corpus entry").path();
        let data = std::fs::read(&path).expect("a corpus file");
        inputs += 1;
        let errors = std::panic::catch_unwind(|| replay(&data))
            .unwrap_or_else(|_| panic!("{}", path.display()));
        clean += u32::from(errors == 0);
    }
    assert!(inputs > 1000, "{inputs} inputs in {}", dir.display());
    assert!(clean > 0, "no input decoded without an error");
}
