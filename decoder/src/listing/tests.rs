//! The listing's text against XED's, and its line cache.

use super::*;
use crate::image::Image;

/// XED's text for representative encodings of every instruction form iced-x86 decodes,
/// in 16-, 32- and 64-bit code (see the file's header).
const TABLE: &str = include_str!("../../tests/data/xed_table.txt");

fn mode_of(bits: &str) -> ExecMode {
    match bits {
        "16" => ExecMode::Bit16,
        "32" => ExecMode::Bit32,
        "64" => ExecMode::Bit64,
        _ => panic!("bad mode {bits}"),
    }
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// The `"…"` fields of a table line.
fn quoted(mut rest: &str) -> Vec<&str> {
    let mut out = Vec::new();
    while let Some(start) = rest.find('"') {
        let Some(len) = rest[start + 1..].find('"') else {
            break;
        };
        out.push(&rest[start + 1..start + 1 + len]);
        rest = &rest[start + 2 + len..];
    }
    out
}

fn text(f: &mut Formatter, bytes: &[u8], ip: u64, mode: ExecMode) -> String {
    let mut s = String::new();
    match f.format(bytes, ip, mode, &mut s) {
        Ok(d) => {
            assert_eq!(usize::from(d.size), bytes.len(), "{bytes:02x?}: length");
            s
        }
        Err(e) => format!("error {e}"),
    }
}

#[test]
fn every_form_reads_as_xed_prints_it() {
    let mut intel = Formatter::new(Syntax::Intel);
    let mut att = Formatter::new(Syntax::Att);
    let mut wrong = Vec::new();
    let mut lines = 0;
    for line in TABLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut fields = line.split(' ');
        let (Some(bits), Some(hex)) = (fields.next(), fields.next()) else {
            panic!("bad table line {line:?}");
        };
        let (mode, bytes) = (mode_of(bits), unhex(hex));
        let texts = quoted(line);
        let want: Vec<String> = if fields.next() == Some("error") {
            vec![format!("error {}", texts[0]); 2]
        } else {
            texts.iter().map(|t| t.to_string()).collect()
        };
        let got = [
            text(&mut intel, &bytes, 0x10_0000, mode),
            text(&mut att, &bytes, 0x10_0000, mode),
        ];
        if got[..] != want[..] {
            wrong.push(format!("{line}\n    got {got:?}"));
        }
        lines += 1;
    }
    assert!(lines > 5000, "only {lines} table lines");
    assert!(
        wrong.is_empty(),
        "{} of {lines} differ from XED:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(30)].join("\n")
    );
}

fn image(code: &[u8]) -> Image {
    let mut image = Image::new();
    image.add_bytes(0x1000, code.to_vec(), "code").unwrap();
    image
}

#[test]
fn lines_hold_what_the_options_ask_for() {
    // lea rax, [rip+0x10]; xbegin +0x10; jz 0x1000
    let code = [
        0x48, 0x8d, 0x05, 0x10, 0, 0, 0, 0xc7, 0xf8, 0x10, 0, 0, 0, 0x74, 0xf1,
    ];
    let image = image(&code);
    let mut l = Listing::new(ListingOptions::default());
    let line = l.line(&image, 0x1000, ExecMode::Bit64);
    assert_eq!(line.text(), b"0000000000001000  lea rax, ptr [rip+0x10]\n");
    assert_eq!(
        (line.size(), line.next_ip(), line.error()),
        (7, 0x1007, None)
    );
    // XBEGIN has a branch displacement: libipt's ptxed walks on to its target.
    let line = l.line(&image, 0x1007, ExecMode::Bit64);
    assert_eq!(line.text(), b"0000000000001007  xbegin 0x101d\n");
    assert_eq!(line.next_ip(), 0x101d);
    let line = l.line(&image, 0x100d, ExecMode::Bit64);
    assert_eq!(line.next_ip(), 0x1000);

    let mut raw = Listing::new(ListingOptions {
        raw_insn: true,
        ..ListingOptions::default()
    });
    let line = raw.line(&image, 0x100d, ExecMode::Bit64);
    let want = format!("000000000000100d 74 f1{}  jz 0x1000\n", "   ".repeat(13));
    assert_eq!(line.text(), want.as_bytes());

    let mut bare = Listing::new(ListingOptions {
        no_inst: true,
        raw_insn: true,
        ..ListingOptions::default()
    });
    let line = bare.line(&image, 0x100d, ExecMode::Bit64);
    assert_eq!(
        (line.text(), line.next_ip()),
        (&b"000000000000100d\n"[..], 0x1000)
    );

    let mut att = Listing::new(ListingOptions {
        syntax: Syntax::Att,
        ..ListingOptions::default()
    });
    let line = att.line(&image, 0x1000, ExecMode::Bit64);
    assert_eq!(line.text(), b"0000000000001000  lea 0x10(%rip), %rax\n");
}

#[test]
fn errors_read_as_ptxed_prints_them() {
    // 0F A7 C2: a VIA opcode XED does not know; E8 cut short by the end of the code.
    let image = image(&[0x0f, 0xa7, 0xc2, 0xe8, 0x00]);
    let mut l = Listing::new(ListingOptions::default());
    let line = l.line(&image, 0x1000, ExecMode::Bit64);
    let want = format!(
        "0000000000001000 0f a7 c2 e8 00{} [xed decode error: (2) GENERAL_ERROR]\n",
        "   ".repeat(10)
    );
    assert_eq!(line.text(), want.as_bytes());
    assert_eq!(line.error(), Some(LineError::Xed(XedError::GENERAL_ERROR)));
    let line = l.line(&image, 0x1003, ExecMode::Bit64);
    assert_eq!(
        line.error(),
        Some(LineError::Xed(XedError::BUFFER_TOO_SHORT))
    );
    let line = l.line(&image, 0x2000, ExecMode::Bit64);
    assert_eq!(
        line.text(),
        b"0000000000002000 [fetch error: no memory mapped at this address]\n"
    );
    assert!(matches!(line.error(), Some(LineError::Fetch(_))));
}

#[test]
fn lines_are_dropped_when_the_code_changes() {
    let mut image = image(&[0x90, 0xc3]);
    let mut l = Listing::new(ListingOptions::default());
    assert_eq!(
        l.line(&image, 0x1000, ExecMode::Bit64).text(),
        b"0000000000001000  nop\n"
    );
    // The same address in another mode is another line.
    let mut im16 = Image::new();
    im16.add_bytes(0x1000, vec![0x66, 0x90], "16").unwrap();
    image.add_bytes(0x1000, vec![0xcc], "int3").unwrap();
    assert_eq!(
        l.line(&image, 0x1000, ExecMode::Bit64).text(),
        b"0000000000001000  int3 \n"
    );
    assert_eq!(
        l.line(&im16, 0x1000, ExecMode::Bit16).text(),
        b"0000000000001000  data32 nop\n"
    );
    assert_eq!(
        l.line(&im16, 0x1000, ExecMode::Bit32).text(),
        b"0000000000001000  data16 nop\n"
    );
}

#[test]
fn long_lines_are_rendered_each_time() {
    // lock xacquire add qword ptr fs:[r12+r13*8-0x12345678], 0x7fffffff with raw bytes:
    // more than a cache slot holds.
    let code = [
        0x64, 0xf2, 0xf0, 0x4b, 0x81, 0x84, 0xec, 0x88, 0xa9, 0xcb, 0xed, 0xff, 0xff, 0xff, 0x7f,
    ];
    let image = image(&code);
    let mut l = Listing::new(ListingOptions {
        raw_insn: true,
        ..ListingOptions::default()
    });
    let first = l.line(&image, 0x1000, ExecMode::Bit64).text().to_vec();
    let again = l.line(&image, 0x1000, ExecMode::Bit64).text().to_vec();
    assert_eq!(first, again);
    let text = String::from_utf8(first).unwrap();
    assert!(
        text.ends_with("  xacquire lock add qword ptr fs:[r12+r13*8-0x12345678], 0x7fffffff\n"),
        "{text}"
    );
}

#[test]
fn fwait_and_jmpabs() {
    let mut f = Formatter::new(Syntax::Intel);
    // 9B DF E0: FWAIT, then FNSTSW AX.
    assert_eq!(text(&mut f, &[0x9b], 0, ExecMode::Bit64), "fwait");
    let mut s = String::new();
    let d = f
        .format(&[0x9b, 0xdf, 0xe0], 0, ExecMode::Bit64, &mut s)
        .unwrap();
    assert_eq!((d.size, s.as_str()), (1, "fwait"));
    assert_eq!(text(&mut f, &[0xdf, 0xe0], 0, ExecMode::Bit64), "fnstsw ax");
    // APX JMPABS, which iced-x86 does not decode.
    let jmpabs = [0xd5, 0x00, 0xa1, 0x0d, 0x10, 0, 0, 0, 0, 0, 0];
    assert_eq!(
        text(&mut f, &jmpabs, 0x1000, ExecMode::Bit64),
        "jmpabs 0x100d"
    );
    let mut att = Formatter::new(Syntax::Att);
    assert_eq!(
        text(&mut att, &jmpabs, 0x1000, ExecMode::Bit64),
        "jmpabs $0x100d"
    );
    assert_eq!(
        f.format(&[0x90], 0, ExecMode::Unknown, &mut s),
        Err(XedError::INVALID_MODE)
    );
}
