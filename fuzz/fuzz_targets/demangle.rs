//! perf's symbol names on arbitrary input (symbol tables come from untrusted
//! ELF files): every string, and every string behind `_Z`, demangles or is
//! refused without a panic, a stack overflow or unbounded text, and the same
//! name always gives the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_elf::demangle::demangle;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for name in [s.to_string(), format!("_Z{s}"), format!("_ZN{s}")] {
        let d = demangle(&name);
        if let Some(text) = &d {
            assert!(text.len() <= 1 << 20, "{} bytes from {name:?}", text.len());
        }
        assert_eq!(d, demangle(&name), "{name:?}");
    }
});
