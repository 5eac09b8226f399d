//! Bad input: errors carry the trace offset, the edges found before them are kept,
//! decoding goes on at the next PSB, and nothing panics.

use pt_coverage::{CoverageDecoder, ErrorKind, Options, PAGE_SIZE};
use pt_decoder::Image;
use pt_testkit::trace::{self, LOOP_BASE, LOOP_CODE};

fn image(code: &[u8]) -> Image {
    let mut image = Image::new();
    image.add_bytes(LOOP_BASE, code.to_vec(), "code").unwrap();
    image
}

fn collecting() -> CoverageDecoder {
    CoverageDecoder::new(Options {
        collect: true,
        ..Options::default()
    })
}

#[test]
fn a_trace_that_does_not_match_the_image() {
    // The loop's trace over code whose `jnz` became `jmp rax`: a TNT bit where the
    // code needs a TIP.
    let (t, _) = trace::loop_trace(1, 4000, 1000);
    let mut code = LOOP_CODE.to_vec();
    code[9] = 0xff;
    code[10] = 0xe0;
    let mut cov = collecting();
    let out = cov.decode(&t, &image(&code));
    let e = out.first_error.expect("an error");
    assert!(
        matches!(e.kind, ErrorKind::Mismatch | ErrorKind::EmptyReturnStack),
        "{e}"
    );
    assert!(e.offset > 0 && (e.offset as usize) < t.len(), "{e}");
    // Before it: the call into the loop's helper and its indirect call.
    assert!(cov.edges().count() >= 2, "edges kept");
    // Going on at each PSB: one error per PSB at least.
    assert!(out.errors >= 3, "{out:?}");
    assert!(e.to_string().contains("offset 0x"), "{e}");
}

#[test]
fn a_page_the_callback_cannot_supply() {
    let (t, _) = trace::loop_trace(2, 4000, 1000);
    // The code's page, and nothing else: then no page at all.
    let mut fetch = |page: u64, buf: &mut [u8; PAGE_SIZE]| {
        if page != LOOP_BASE & !(PAGE_SIZE as u64 - 1) {
            return false;
        }
        buf.fill(0xcc);
        let at = (LOOP_BASE - page) as usize;
        buf[at..at + LOOP_CODE.len()].copy_from_slice(LOOP_CODE);
        true
    };
    let mut cov = collecting();
    let out = cov.decode_with_pages(&t, &mut fetch);
    assert_eq!(out.errors, 0, "{:?}", out.first_error);
    let warm: Vec<_> = cov.edges().collect();
    assert!(warm.len() >= 5);

    // Another binary: a TIP into a page nobody has.
    let mut none = |_: u64, _: &mut [u8; PAGE_SIZE]| false;
    cov.forget_code();
    cov.reset();
    let out = cov.decode_with_pages(&t, &mut none);
    let e = out.first_error.expect("an error");
    assert_eq!(e.kind, ErrorKind::NoMap);
    assert_eq!(
        e.ip & !(PAGE_SIZE as u64 - 1),
        LOOP_BASE & !(PAGE_SIZE as u64 - 1)
    );
}

#[test]
fn a_damaged_packet() {
    let (mut t, _) = trace::loop_trace(3, 8000, 2000);
    let img = image(LOOP_CODE);
    let mut whole = collecting();
    assert_eq!(whole.decode(&t, &img).errors, 0);
    let all: u64 = whole.edges().map(|(_, n)| n).sum();
    // A reserved opcode in the middle.
    let at = t.len() / 2;
    t[at] = 0x02;
    t[at + 1] = 0xff;
    let mut cov = collecting();
    let out = cov.decode(&t, &img);
    let e = out.first_error.expect("an error");
    // At the damage, or at the packet after it that the damage made wrong.
    assert!(
        e.offset >= at as u64 - 16 && e.offset <= at as u64 + 32,
        "{e} vs {at}"
    );
    let kept: u64 = cov.edges().map(|(_, n)| n).sum();
    assert!(kept > all / 3 && kept < all, "{kept} of {all}");
}

#[test]
fn garbage_never_panics() {
    let img = image(LOOP_CODE);
    let mut rng = pt_testkit::Rng::new(7);
    let mut cov = CoverageDecoder::new(Options::default());
    let (good, _) = trace::loop_trace(4, 3000, 500);
    for round in 0..300 {
        let mut t = good.clone();
        for _ in 0..1 + round % 8 {
            let i = rng.below(t.len() as u64) as usize;
            t[i] = rng.next() as u8;
        }
        let n = rng.below(t.len() as u64) as usize;
        let _ = cov.decode(&t[..n], &img);
        let _ = cov.decode(&t, &img);
    }
}
