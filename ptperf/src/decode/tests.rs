//! The decoder on hand-made traces.

use super::*;

/// CYC time is summed in floating point before it is truncated, as in perf: a
/// ratio of 1/49 ticks a cycle times 49 cycles is 0.999… in `double`; added to
/// any TSC of more than one tick it rounds to the next tick, as the MTC it was
/// measured against says.
#[test]
fn cycles_add_as_perf_adds_them() {
    let ratio = 1.0 / 49.0;
    assert!(49.0 * ratio < 1.0);
    assert_eq!(
        add_cycles(1_000_000_000_000_000, 49, ratio),
        1_000_000_000_000_001
    );
    assert_eq!(add_cycles(1000, 49, ratio), 1001);
    // From zero the sum is the product itself, truncated.
    assert_eq!(add_cycles(0, 49, ratio), 0);
    assert_eq!(add_cycles(1000, 10, 2.5), 1025);
}

/// `multdiv` does not overflow where `t * n` would.
#[test]
fn multdiv_without_overflow() {
    assert_eq!(multdiv(u64::MAX / 2, 4, 8), u64::MAX / 4);
    assert_eq!(multdiv(10, 3, 0), 0);
    assert_eq!(multdiv(1000, 2, 3), 666);
}

/// A TSC packet's 7 bytes take the upper byte of the reference nearest to it.
#[test]
fn tsc_8b_takes_the_nearest_wrap() {
    let r = 0x0100_0000_0000_0010;
    assert_eq!(tsc_8b(0x20, r), 0x0100_0000_0000_0020);
    // Just below the reference's 2^56 boundary: the previous epoch.
    assert_eq!(tsc_8b(0x00ff_ffff_ffff_fff0, r), 0x00ff_ffff_ffff_fff0);
    // A reference just below a wrap and a packet just after it.
    let r = 0x01ff_ffff_ffff_fff0;
    assert_eq!(tsc_8b(0x10, r), 0x0200_0000_0000_0010);
}
