//! The `coverage_decoder` fuzz target's committed corpus (fuzz/corpus/coverage_decoder)
//! on stable Rust, with the target's own checks ([`fuzz_input::check`]).

use std::path::Path;

mod fuzz_input;

#[test]
fn every_fuzz_input_decodes_or_says_where() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/coverage_decoder");
    let (mut inputs, mut clean) = (0, 0);
    for entry in std::fs::read_dir(&dir).expect("the committed corpus") {
        let path = entry.expect("a corpus entry").path();
        let data = std::fs::read(&path).expect("a corpus file");
        inputs += 1;
        let errors = std::panic::catch_unwind(|| fuzz_input::check(&data))
            .unwrap_or_else(|_| panic!("{}", path.display()));
        clean += u32::from(errors == 0);
    }
    assert!(inputs > 1000, "{inputs} inputs in {}", dir.display());
    assert!(clean > 0, "no input decoded without an error");
}
