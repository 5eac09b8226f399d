//! The coverage decoder on arbitrary trace bytes over a small image with loops,
//! calls, returns, indirect branches and system instructions, from an image or
//! through the page-fetch callback: it never panics, every error offset lies inside
//! the trace, and the bitmap-only path counts what the collecting path counts. The
//! check is the one the corpus replay on stable runs (coverage/tests/fuzz_input).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../coverage/tests/fuzz_input/mod.rs"]
mod fuzz_input;

fuzz_target!(|data: &[u8]| {
    fuzz_input::check(data);
});
