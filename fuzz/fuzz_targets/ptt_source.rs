//! pttestgen on arbitrary source text: every input gives the generated files or a
//! `file:line: message` error, never a panic, a hang or unbounded memory; a file that
//! assembles once assembles the same the second time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.ptt");
    match pt_testgen::gen::generate(source, path, None) {
        Ok(first) => {
            let again = pt_testgen::gen::generate(source, path, None)
                .expect("a file that generated once generates again");
            assert_eq!(first.bin, again.bin);
            assert_eq!(first.lst, again.lst);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
