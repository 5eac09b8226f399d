//! The listing on arbitrary code: every byte string, formatted in every mode and
//! syntax, gives text or XED's decode error, never a panic; a decoded instruction lies
//! inside the bytes; a line cached once reads the same the second time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_decoder::image::Image;
use pt_decoder::listing::{Formatter, Listing, ListingOptions, Syntax};
use pt_encoder::ExecMode;

fuzz_target!(|data: &[u8]| {
    let modes = [ExecMode::Bit16, ExecMode::Bit32, ExecMode::Bit64];
    for syntax in [Syntax::Intel, Syntax::Att] {
        let mut f = Formatter::new(syntax);
        for mode in modes {
            let mut text = String::new();
            if let Ok(d) = f.format(data, 0xffff_ffff_ffff_fff0, mode, &mut text) {
                assert!(usize::from(d.size) <= data.len().min(15));
                assert!(!text.is_empty());
            }
        }
    }
    if data.is_empty() {
        return;
    }
    let mut image = Image::new();
    if image.add_bytes(0x1000, data.to_vec(), "fuzz").is_err() {
        return;
    }
    for raw_insn in [false, true] {
        let mut l = Listing::new(ListingOptions {
            raw_insn,
            ..ListingOptions::default()
        });
        for mode in modes {
            let mut ip = 0x1000;
            for _ in 0..data.len() {
                let first = l.line(&image, ip, mode).text().to_vec();
                let line = l.line(&image, ip, mode);
                assert_eq!(line.text(), &first[..]);
                if line.error().is_some() || line.size() == 0 {
                    break;
                }
                ip += u64::from(line.size());
            }
        }
    }
});
