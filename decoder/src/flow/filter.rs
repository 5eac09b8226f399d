//! IP filter ranges (IA32_RTIT_ADDRn_CFG/_A/_B) as the flow decoders need them.

/// ADDRn_CFG value of a FilterEn range.
pub const CFG_FILTER: u8 = 1;
/// ADDRn_CFG value of a TraceStop range.
pub const CFG_STOP: u8 = 2;

/// Up to four address ranges; both bounds are inclusive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddrFilter {
    /// ADDRn_CFG per range (0 = unused).
    pub cfg: [u8; 4],
    /// ADDRn_A (first address) per range.
    pub a: [u64; 4],
    /// ADDRn_B (last address) per range.
    pub b: [u64; 4],
}

impl AddrFilter {
    /// Whether any range is configured (any non-zero ADDRn_CFG).
    pub fn is_configured(&self) -> bool {
        self.cfg.iter().any(|&c| c != 0)
    }

    /// The RTIT_CTL bits 47:32 this filter corresponds to (ADDRn_CFG nibbles).
    pub fn addr_cfg(&self) -> u16 {
        self.cfg
            .iter()
            .enumerate()
            .fold(0, |acc, (n, &c)| acc | (u16::from(c & 0xf) << (4 * n)))
    }

    /// Whether tracing is on at `ip`: not inside a TraceStop range, and inside a
    /// FilterEn range if there is one (libipt's `pt_filter_addr_check`).
    pub fn allows(&self, ip: u64) -> bool {
        let inside = |n: usize| self.a[n] <= ip && ip <= self.b[n];
        if (0..4).any(|n| self.cfg[n] == CFG_STOP && inside(n)) {
            return false;
        }
        let mut have_filter = false;
        for n in 0..4 {
            if self.cfg[n] == CFG_FILTER {
                if inside(n) {
                    return true;
                }
                have_filter = true;
            }
        }
        !have_filter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_ranges_allow_everything() {
        let f = AddrFilter::default();
        assert!(!f.is_configured());
        assert!(f.allows(0) && f.allows(u64::MAX));
    }

    #[test]
    fn filter_ranges_are_inclusive() {
        let mut f = AddrFilter::default();
        f.cfg[0] = CFG_FILTER;
        f.a[0] = 0x1000;
        f.b[0] = 0x10ff;
        assert!(f.is_configured());
        assert_eq!(f.addr_cfg(), 1);
        assert!(!f.allows(0xfff));
        assert!(f.allows(0x1000) && f.allows(0x10ff));
        assert!(!f.allows(0x1100));
        f.cfg[2] = CFG_FILTER;
        f.a[2] = 0x5000;
        f.b[2] = 0x5000;
        assert!(f.allows(0x5000));
        assert_eq!(f.addr_cfg(), 0x101);
    }

    #[test]
    fn stop_ranges_win() {
        let mut f = AddrFilter::default();
        f.cfg[1] = CFG_STOP;
        f.a[1] = 0x2000;
        f.b[1] = 0x2fff;
        assert!(f.allows(0x1000));
        assert!(!f.allows(0x2000) && !f.allows(0x2fff));
        f.cfg[0] = CFG_FILTER;
        f.a[0] = 0;
        f.b[0] = u64::MAX;
        assert!(!f.allows(0x2800));
        assert!(f.allows(0x3000));
    }
}
