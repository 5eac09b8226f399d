//! The `ptt_source` fuzz target's minimized corpus (fuzz/corpus/ptt_source: libipt's
//! .ptt files and what the fuzzer grew from them) through the generator on stable
//! Rust: every input gives the files or an error with a line, never a panic.

use std::path::Path;

#[test]
fn every_fuzz_input_generates_or_says_why() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/ptt_source");
    let mut inputs = 0;
    let mut generated = 0;
    for entry in std::fs::read_dir(&dir).expect("the committed corpus") {
        let path = entry.expect("a corpus entry").path();
        let bytes = std::fs::read(&path).expect("a corpus file");
        let Ok(source) = std::str::from_utf8(&bytes) else {
            continue;
        };
        inputs += 1;
        match pt_testgen::gen::generate(source, Path::new("fuzz.ptt"), None) {
            Ok(_) => generated += 1,
            Err(e) => assert!(
                e.to_string().starts_with("fuzz.ptt:"),
                "{}: {e}",
                path.display()
            ),
        }
    }
    assert!(inputs > 1000, "{inputs} inputs in {}", dir.display());
    assert!(generated > 0);
}
