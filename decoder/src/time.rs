//! Timing: estimating the TSC from TSC, TMA, MTC, CYC and CBR packets, and calibrating the
//! core-cycle to TSC ratio that CYC packets need.
//!
//! The model follows libipt's (so that tools built on it print the same numbers):
//!
//! * [`Time`] keeps the estimate. A TSC packet sets it; TMA relates the TSC to the crystal
//!   clock (CTC) and the fast counter; each MTC advances a *base* by the CTC ticks since the
//!   last MTC (or TMA), converted to TSC ticks with CPUID 0x15 (`tsc = ctc * EBX / EAX`);
//!   CYC packets add core cycles times the calibrated ratio on top of that base.
//! * [`TimeCal`] estimates the ratio "fast-counter (TSC) ticks per core cycle" (`fcr`), a
//!   fixed-point number with [`FCR_SHIFT`] fraction bits: from CBR if the nominal frequency
//!   is known, else from CYC sums between MTCs or between TSCs in PSB+.
//!
//! Shifts by configuration values use wrapping semantics (the count taken modulo the
//! width), as the x86 shift instructions the reference implementation compiles to.

use crate::config::Config;
use crate::error::ErrorCode;

/// Fraction bits of the fixed-point calibration value (`fcr`).
pub const FCR_SHIFT: u32 = 8;

/// MTC payload bits.
const MTC_BITS: u32 = 8;
/// CTC bits a TMA packet carries.
const TMA_CTC_BITS: u32 = 16;
const TMA_CTC_MASK: u32 = 0xffff;
const MTC_MASK: u32 = 0xff;
/// TSC packet payload bits.
const TSC_BITS: u32 = 56;

/// CTC ticks from `last_ctc` to `ctc`, allowing for one wrap of the `mtc_freq + 8` bits
/// that MTC packets provide.
fn ctc_delta(ctc: u32, last_ctc: u32, config: &Config) -> Result<u32, ErrorCode> {
    let mut ctc = ctc;
    if ctc < last_ctc {
        ctc = ctc.wrapping_add(1u32.wrapping_shl(config.mtc_freq as u32 + MTC_BITS));
        if ctc < last_ctc {
            return Err(ErrorCode::BadPacket);
        }
    }
    Ok(ctc - last_ctc)
}

/// CTC ticks to TSC ticks: `ctc * CPUID.15H:EBX / CPUID.15H:EAX`.
fn ctc_to_fc(ctc: u64, config: &Config) -> Result<u64, ErrorCode> {
    let (eax, ebx) = (config.cpuid_0x15_eax as u64, config.cpuid_0x15_ebx as u64);
    if eax == 0 || ebx == 0 {
        return Err(ErrorCode::BadConfig);
    }
    Ok(ctc.wrapping_mul(ebx) / eax)
}

/// The estimated time stamp counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time {
    /// The estimated TSC.
    tsc: u64,
    /// The TSC at the last TSC/MTC (before CYC refinements).
    base: u64,
    /// Fast-counter (TSC) ticks added by CYC since `base`.
    fc: u64,
    /// The last CTC value (from MTC or TMA), adjusted.
    ctc: u32,
    /// The CTC value when `fc` was last cleared.
    ctc_cyc: u32,
    /// MTC updates lost since the last TSC.
    lost_mtc: u32,
    /// CYC updates lost (no calibration) since the last TSC or MTC.
    lost_cyc: u32,
    /// The last core:bus ratio.
    cbr: u8,
    have_tsc: bool,
    have_cbr: bool,
    have_tma: bool,
    have_mtc: bool,
}

impl Time {
    /// No timing information yet.
    pub const fn new() -> Self {
        Self {
            tsc: 0,
            base: 0,
            fc: 0,
            ctc: 0,
            ctc_cyc: 0,
            lost_mtc: 0,
            lost_cyc: 0,
            cbr: 0,
            have_tsc: false,
            have_cbr: false,
            have_tma: false,
            have_mtc: false,
        }
    }

    /// The estimated TSC; [`ErrorCode::NoTime`] before the first TSC packet.
    pub fn query_tsc(&self) -> Result<u64, ErrorCode> {
        if self.have_tsc {
            Ok(self.tsc)
        } else {
            Err(ErrorCode::NoTime)
        }
    }

    /// The estimate even without a TSC packet (time relative to the start of tracking).
    pub fn tsc(&self) -> u64 {
        self.tsc
    }

    /// MTC and CYC updates lost since the last full update.
    pub fn lost(&self) -> (u32, u32) {
        (self.lost_mtc, self.lost_cyc)
    }

    /// The last core:bus ratio; [`ErrorCode::NoCbr`] if none was seen.
    pub fn query_cbr(&self) -> Result<u8, ErrorCode> {
        if self.have_cbr {
            Ok(self.cbr)
        } else {
            Err(ErrorCode::NoCbr)
        }
    }

    /// A TSC packet: the full time. Also recovers from earlier losses.
    pub fn update_tsc(&mut self, tsc: u64) {
        self.have_tsc = true;
        self.have_tma = false;
        self.have_mtc = false;
        self.tsc = tsc;
        self.base = tsc;
        self.ctc = 0;
        self.fc = 0;
        self.lost_mtc = 0;
        self.lost_cyc = 0;
    }

    /// A CBR packet. A zero ratio is [`ErrorCode::BadPacket`].
    pub fn update_cbr(&mut self, ratio: u8) -> Result<(), ErrorCode> {
        if ratio == 0 {
            return Err(ErrorCode::BadPacket);
        }
        self.have_cbr = true;
        self.cbr = ratio;
        Ok(())
    }

    /// A TMA packet: CTC and fast counter at the preceding TSC.
    ///
    /// Needs that TSC ([`ErrorCode::BadContext`] otherwise, also for a second TMA).
    pub fn update_tma(&mut self, ctc: u16, fc: u16, config: &Config) -> Result<(), ErrorCode> {
        if !self.have_tsc || self.have_tma {
            return Err(ErrorCode::BadContext);
        }
        // MTCs between TSC and TMA are ignored, so none can have been applied.
        if self.have_mtc {
            return Err(ErrorCode::Internal);
        }
        let mtc_hi = config.mtc_freq as u32 + MTC_BITS;
        let ctc_mask = 1u32.wrapping_shl(mtc_hi).wrapping_sub(1);
        self.have_tma = true;
        self.base = self.base.wrapping_sub(fc as u64);
        self.fc = self.fc.wrapping_add(fc as u64);
        // If TMA holds all the CTC bits an MTC provides, it serves as the first MTC.
        // Otherwise the next MTC supplies the missing high bits.
        if mtc_hi <= TMA_CTC_BITS {
            self.have_mtc = true;
        }
        self.ctc = ctc as u32 & ctc_mask;
        self.ctc_cyc = self.ctc;
        Ok(())
    }

    /// An MTC packet carrying CTC bits `mtc_freq + 7 .. mtc_freq`.
    pub fn update_mtc(&mut self, payload: u8, config: &Config) -> Result<(), ErrorCode> {
        // MTCs between a TSC and its TMA would look like CTC overflows; skip them.
        if self.have_tsc && !self.have_tma {
            return Ok(());
        }
        let have_mtc = self.have_mtc;
        let mut last_ctc = self.ctc;
        let ctc = (payload as u32).wrapping_shl(config.mtc_freq as u32);

        if self.fc != 0 || self.lost_cyc != 0 || !have_mtc {
            self.ctc_cyc = ctc;
        }
        self.have_mtc = true;
        self.fc = 0;
        self.ctc = ctc;
        self.lost_cyc = 0;

        if !have_mtc {
            // Without a TMA we cannot tell where in this MTC period tracing started.
            if !self.have_tma {
                return Ok(());
            }
            if last_ctc & !TMA_CTC_MASK != 0 {
                return Err(ErrorCode::Internal);
            }
            // Take the high CTC bits TMA did not provide from this MTC, one TMA period
            // earlier if the low bits wrapped in between.
            let ctc_lo = ctc & TMA_CTC_MASK;
            let mut ctc_hi = ctc & !TMA_CTC_MASK;
            if ctc_lo < last_ctc {
                ctc_hi = ctc_hi.wrapping_sub(1 << TMA_CTC_BITS);
                ctc_hi &= MTC_MASK.wrapping_shl(config.mtc_freq as u32);
            }
            last_ctc |= ctc_hi;
        }

        let delta = match ctc_delta(ctc, last_ctc, config) {
            Ok(d) => d,
            Err(e) => {
                self.lost_mtc += 1;
                return Err(e);
            }
        };
        let tsc = ctc_to_fc(delta as u64, config)?;
        self.base = self.base.wrapping_add(tsc);
        self.tsc = self.base;
        Ok(())
    }

    /// The part of a CYC count that falls into the current MTC period, if the CYC spans
    /// several: subtract the cycles the calibration expects for the earlier periods.
    fn adjust_cyc(&self, cyc: u64, config: &Config, fcr: u64) -> Result<u64, ErrorCode> {
        if fcr == 0 {
            return Err(ErrorCode::Internal);
        }
        if self.ctc == self.ctc_cyc {
            return Ok(cyc);
        }
        let delta = ctc_delta(self.ctc, self.ctc_cyc, config)?;
        let fc = ctc_to_fc(delta as u64, config)?;
        let old_cyc = fc.wrapping_shl(FCR_SHIFT) / fcr;
        // Rather run slow than fast: never go below zero.
        Ok(cyc.max(old_cyc) - old_cyc)
    }

    /// A CYC packet with `fcr` from [`TimeCal::fcr`]; `fcr == 0` (no calibration) only
    /// counts the CYC as lost.
    #[inline]
    pub fn update_cyc(&mut self, value: u64, config: &Config, fcr: u64) -> Result<(), ErrorCode> {
        if fcr == 0 {
            self.lost_cyc += 1;
            return Ok(());
        }
        let mut cyc = value;
        if self.fc == 0 {
            cyc = self.adjust_cyc(cyc, config, fcr)?;
        }
        self.fc = self.fc.wrapping_add(cyc.wrapping_mul(fcr) >> FCR_SHIFT);
        self.tsc = self.base.wrapping_add(self.fc);
        Ok(())
    }
}

/// Calibration of the fast-counter:cycles ratio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeCal {
    /// The current ratio, [`FCR_SHIFT`] fraction bits.
    fcr: u64,
    /// Smallest and largest ratio seen; `min > max` means "none yet".
    min_fcr: u64,
    max_fcr: u64,
    /// The last TSC (for calibrating at the next TSC in PSB+).
    tsc: u64,
    /// Cycles since that TSC.
    cyc_tsc: u64,
    /// Cycles since the last MTC.
    cyc_mtc: u64,
    /// The last MTC's CTC value.
    ctc: u32,
    /// MTC calibrations lost since the last successful one.
    lost_mtc: u32,
    have_mtc: bool,
    /// Check the first MTC after a PSB for erratum SKL168.
    check_skl168: bool,
}

impl Default for TimeCal {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeCal {
    /// No calibration yet.
    pub const fn new() -> Self {
        Self {
            fcr: 0,
            min_fcr: u64::MAX,
            max_fcr: 0,
            tsc: 0,
            cyc_tsc: 0,
            cyc_mtc: 0,
            ctc: 0,
            lost_mtc: 0,
            have_mtc: false,
            check_skl168: false,
        }
    }

    #[inline]
    fn have_fcr(&self) -> bool {
        self.min_fcr <= self.max_fcr
    }

    /// The ratio (fixed point, [`FCR_SHIFT`] fraction bits); [`ErrorCode::NoTime`] if
    /// there is none yet.
    #[inline]
    pub fn fcr(&self) -> Result<u64, ErrorCode> {
        if self.have_fcr() {
            Ok(self.fcr)
        } else {
            Err(ErrorCode::NoTime)
        }
    }

    /// Set the ratio (fixed point).
    pub fn set_fcr(&mut self, fcr: u64) {
        self.fcr = fcr;
        self.min_fcr = self.min_fcr.min(fcr);
        self.max_fcr = self.max_fcr.max(fcr);
    }

    /// MTC calibrations lost since the last successful one.
    pub fn lost_mtc(&self) -> u32 {
        self.lost_mtc
    }

    /// A PSB: arms the SKL168 check if that erratum applies.
    pub fn update_psb(&mut self, config: &Config) {
        if config.errata.skl168 {
            self.check_skl168 = true;
        }
    }

    /// A TSC outside PSB+: time may have been lost, so it only starts a new interval.
    pub fn update_tsc(&mut self, tsc: u64) {
        self.tsc = tsc;
        self.cyc_tsc = 0;
    }

    /// A TSC in PSB+: calibrate from the cycles since the previous TSC (if there are no
    /// MTCs, which are preferred).
    pub fn header_tsc(&mut self, tsc: u64) -> Result<(), ErrorCode> {
        let last_tsc = self.tsc;
        let cyc = self.cyc_tsc;
        self.tsc = tsc;
        self.cyc_tsc = 0;
        if last_tsc == 0 || cyc == 0 || self.have_mtc {
            return Ok(());
        }
        let mut tsc = tsc;
        if tsc < last_tsc {
            tsc = tsc.wrapping_add(1 << TSC_BITS);
            if tsc < last_tsc {
                return Err(ErrorCode::BadPacket);
            }
        }
        let delta = tsc - last_tsc;
        // The numerator is shifted for precision; refuse rather than overflow.
        if delta & !(u64::MAX >> FCR_SHIFT) != 0 {
            return Err(ErrorCode::Internal);
        }
        self.set_fcr((delta << FCR_SHIFT) / cyc);
        Ok(())
    }

    /// A CBR outside PSB+: the frequency changed, so start over, then use it.
    pub fn update_cbr(&mut self, ratio: u8, config: &Config) -> Result<(), ErrorCode> {
        *self = Self::new();
        self.header_cbr(ratio, config)
    }

    /// A CBR in PSB+: with a known nominal frequency, `fcr = nom_freq / cbr`.
    pub fn header_cbr(&mut self, ratio: u8, config: &Config) -> Result<(), ErrorCode> {
        let p1 = config.nom_freq as u64;
        if p1 == 0 {
            return Ok(());
        }
        if ratio == 0 {
            return Err(ErrorCode::BadPacket);
        }
        self.set_fcr((p1 << FCR_SHIFT) / ratio as u64);
        Ok(())
    }

    /// A TMA packet: nothing to calibrate.
    pub fn update_tma(&mut self) {}

    /// An MTC: calibrate from the cycles since the previous MTC.
    pub fn update_mtc(&mut self, payload: u8, config: &Config) -> Result<(), ErrorCode> {
        let last_ctc = self.ctc;
        let cyc = self.cyc_mtc;
        let check_skl168 = self.check_skl168;
        self.check_skl168 = false;
        let ctc = (payload as u32).wrapping_shl(config.mtc_freq as u32);

        // Two MTCs are needed.
        if !self.have_mtc {
            self.cyc_mtc = 0;
            self.ctc = ctc;
            self.have_mtc = true;
            return Ok(());
        }
        // Without cycles, spread the next ones over the combined period.
        if cyc == 0 {
            return Ok(());
        }
        self.cyc_mtc = 0;
        self.ctc = ctc;
        // Counted as lost unless the calibration below succeeds.
        self.lost_mtc += 1;

        let delta = ctc_delta(ctc, last_ctc, config)?;
        let fc = ctc_to_fc(delta as u64, config)?;
        if fc & !(u64::MAX >> FCR_SHIFT) != 0 {
            return Err(ErrorCode::Internal);
        }
        let fcr = (fc << FCR_SHIFT) / cyc;

        // SKL168: CYCs right before a PSB may be dropped. Skip the first MTC after a PSB
        // if MTCs were lost or if a 4096-cycle wrap CYC seems to be missing.
        if check_skl168 {
            if 1u32.wrapping_shl(config.mtc_freq as u32) < delta {
                return Ok(());
            }
            if config.mtc_freq < 10 && self.have_fcr() {
                let dfc = self.fcr.wrapping_mul(cyc.wrapping_add(0xf00)) >> FCR_SHIFT;
                if dfc < fc {
                    return Ok(());
                }
            }
        }
        self.set_fcr(fcr);
        self.lost_mtc = 0;
        Ok(())
    }

    /// A CYC packet: count its cycles.
    #[inline]
    pub fn update_cyc(&mut self, value: u64) {
        self.cyc_mtc = self.cyc_mtc.wrapping_add(value);
        self.cyc_tsc = self.cyc_tsc.wrapping_add(value);
    }

    /// An OVF when calibration is kept: forget the intervals in flight, keep `fcr`.
    pub fn update_ovf(&mut self) {
        self.tsc = 0;
        self.cyc_tsc = 0;
        self.cyc_mtc = 0;
        self.ctc = 0;
        self.have_mtc = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mtc_freq: u8, eax: u32, ebx: u32, nom_freq: u8) -> Config {
        Config {
            mtc_freq,
            nom_freq,
            cpuid_0x15_eax: eax,
            cpuid_0x15_ebx: ebx,
            ..Default::default()
        }
    }

    #[test]
    fn tsc_tma_mtc_relative() {
        // Spec §3.2: mtc-freq 4, EAX 2, EBX 1.
        let c = cfg(4, 2, 1, 0);
        let mut t = Time::new();
        assert_eq!(t.query_tsc(), Err(ErrorCode::NoTime));
        t.update_tsc(0xa0000);
        t.update_tma(0xf012, 6, &c).unwrap();
        assert_eq!(t.query_tsc(), Ok(0xa0000));
        t.update_mtc(2, &c).unwrap();
        assert_eq!(t.query_tsc(), Ok(0xa0001));
        t.update_mtc(3, &c).unwrap();
        assert_eq!(t.query_tsc(), Ok(0xa0009));
    }

    #[test]
    fn tma_needs_a_tsc_and_only_one() {
        let c = cfg(4, 2, 1, 0);
        let mut t = Time::new();
        assert_eq!(t.update_tma(1, 1, &c), Err(ErrorCode::BadContext));
        t.update_tsc(10);
        t.update_tma(1, 1, &c).unwrap();
        assert_eq!(t.update_tma(1, 1, &c), Err(ErrorCode::BadContext));
    }

    #[test]
    fn mtc_needs_cpuid_0x15() {
        let c = cfg(0, 0, 0, 0);
        let mut t = Time::new();
        t.update_tsc(0x1000);
        t.update_tma(0, 0, &c).unwrap();
        assert_eq!(t.update_mtc(1, &c), Err(ErrorCode::BadConfig));
        let mut cal = TimeCal::new();
        cal.update_mtc(1, &c).unwrap();
        cal.update_cyc(3);
        assert_eq!(cal.update_mtc(2, &c), Err(ErrorCode::BadConfig));
        assert_eq!(cal.lost_mtc(), 1);
    }

    #[test]
    fn mtc_between_tsc_and_tma_is_ignored_and_first_mtc_without_tma_too() {
        let c = cfg(0, 1, 1, 0);
        let mut t = Time::new();
        t.update_tsc(0x100);
        t.update_mtc(0x80, &c).unwrap();
        assert_eq!(t.query_tsc(), Ok(0x100));
        // No TSC at all: the first MTC only starts counting.
        let mut t = Time::new();
        t.update_mtc(0x10, &c).unwrap();
        assert_eq!(t.tsc(), 0);
        t.update_mtc(0x14, &c).unwrap();
        assert_eq!(t.tsc(), 4);
        // A wrap of the 8 MTC bits is corrected once.
        t.update_mtc(0x02, &c).unwrap();
        assert_eq!(t.tsc(), 4 + 0xee);
    }

    #[test]
    fn infrequent_mtc_takes_high_ctc_bits_from_the_first_mtc() {
        // mtc_freq 12: TMA gives CTC[15:0], MTC bits 19:12.
        let c = cfg(12, 1, 1, 0);
        let mut t = Time::new();
        t.update_tsc(0x10000);
        t.update_tma(0xf000, 0, &c).unwrap();
        // MTC 0x10 = CTC 0x10000: the TMA was at 0x0f000 → 0x1000 ticks later.
        t.update_mtc(0x10, &c).unwrap();
        assert_eq!(t.query_tsc(), Ok(0x11000));
    }

    #[test]
    fn cbr_calibration_and_cyc() {
        // Spec §3.2: --nom-freq 4 and CBR 2 give fcr 2, so CYC 3 adds 6.
        let c = cfg(4, 2, 1, 4);
        let mut cal = TimeCal::new();
        assert_eq!(cal.fcr(), Err(ErrorCode::NoTime));
        cal.header_cbr(2, &c).unwrap();
        assert_eq!(cal.fcr(), Ok(2 << FCR_SHIFT));
        let mut t = Time::new();
        t.update_tsc(0xa000);
        t.update_cyc(3, &c, cal.fcr().unwrap()).unwrap();
        assert_eq!(t.query_tsc(), Ok(0xa006));
        // Without calibration a CYC is lost and time stays.
        t.update_cyc(3, &c, 0).unwrap();
        assert_eq!(t.query_tsc(), Ok(0xa006));
        assert_eq!(t.lost(), (0, 1));
        assert_eq!(cal.header_cbr(0, &c), Err(ErrorCode::BadPacket));
        assert_eq!(t.update_cbr(0), Err(ErrorCode::BadPacket));
        t.update_cbr(7).unwrap();
        assert_eq!(t.query_cbr(), Ok(7));
    }

    #[test]
    fn cbr_without_nominal_frequency_does_not_calibrate() {
        let c = cfg(0, 1, 1, 0);
        let mut cal = TimeCal::new();
        cal.set_fcr(5 << FCR_SHIFT);
        // Outside PSB+ a CBR resets the calibration.
        cal.update_cbr(3, &c).unwrap();
        assert_eq!(cal.fcr(), Err(ErrorCode::NoTime));
    }

    #[test]
    fn mtc_calibration() {
        // mtc_freq 0, EAX 1, EBX 4: one MTC period = 4 TSC ticks.
        let c = cfg(0, 1, 4, 0);
        let mut cal = TimeCal::new();
        cal.update_mtc(1, &c).unwrap();
        cal.update_cyc(2);
        cal.update_mtc(2, &c).unwrap();
        assert_eq!(cal.fcr(), Ok(2 << FCR_SHIFT));
        // An MTC without cycles in between keeps the old value.
        cal.update_mtc(3, &c).unwrap();
        assert_eq!(cal.fcr(), Ok(2 << FCR_SHIFT));
        cal.update_cyc(16);
        // The interval runs from MTC 2 (MTC 3 had no cycles): 12 ticks over 16 cycles.
        cal.update_mtc(5, &c).unwrap();
        assert_eq!(cal.fcr(), Ok(3 << (FCR_SHIFT - 2)));
    }

    #[test]
    fn tsc_calibration_in_psb_plus_only_without_mtc() {
        let c = cfg(0, 1, 4, 0);
        let mut cal = TimeCal::new();
        cal.header_tsc(0x1000).unwrap();
        cal.update_cyc(0x80);
        cal.header_tsc(0x1100).unwrap();
        assert_eq!(cal.fcr(), Ok(2 << FCR_SHIFT));
        // A TSC outside PSB+ only restarts the interval.
        cal.update_cyc(0x10);
        cal.update_tsc(0x2000);
        cal.update_cyc(0x100);
        cal.header_tsc(0x2100).unwrap();
        assert_eq!(cal.fcr(), Ok(1 << FCR_SHIFT));
        // With MTCs seen, TSC calibration is skipped.
        cal.update_mtc(1, &c).unwrap();
        cal.update_cyc(1);
        cal.header_tsc(0x9000).unwrap();
        assert_eq!(cal.fcr(), Ok(1 << FCR_SHIFT));
    }

    #[test]
    fn ovf_keeps_fcr_but_forgets_intervals() {
        let c = cfg(0, 1, 4, 0);
        let mut cal = TimeCal::new();
        cal.set_fcr(3 << FCR_SHIFT);
        cal.update_mtc(1, &c).unwrap();
        cal.update_cyc(100);
        cal.update_ovf();
        assert_eq!(cal.fcr(), Ok(3 << FCR_SHIFT));
        // The next MTC is a first MTC again.
        cal.update_mtc(2, &c).unwrap();
        assert_eq!(cal.fcr(), Ok(3 << FCR_SHIFT));
    }

    #[test]
    fn skl168_skips_first_mtc_after_psb_when_mtcs_were_lost() {
        let mut c = cfg(0, 1, 4, 0);
        c.errata.skl168 = true;
        let mut cal = TimeCal::new();
        cal.update_mtc(1, &c).unwrap();
        cal.update_psb(&c);
        cal.update_cyc(4);
        cal.update_mtc(4, &c).unwrap(); // three periods: MTCs lost
        assert_eq!(cal.fcr(), Err(ErrorCode::NoTime));
        assert_eq!(cal.lost_mtc(), 1);
        cal.update_cyc(4);
        cal.update_mtc(5, &c).unwrap();
        assert_eq!(cal.fcr(), Ok(1 << FCR_SHIFT));
    }

    #[test]
    fn cyc_spanning_mtc_periods_is_adjusted() {
        // fcr 1: one cycle per TSC tick; one MTC period = 4 ticks.
        let c = cfg(0, 1, 4, 0);
        let mut t = Time::new();
        t.update_tsc(0x100);
        t.update_tma(0, 0, &c).unwrap();
        t.update_cyc(1, &c, 1 << FCR_SHIFT).unwrap(); // 0x101
        t.update_mtc(1, &c).unwrap(); // 0x104; the CYC reset point moves to CTC 1
        t.update_mtc(3, &c).unwrap(); // 0x10c; no CYC since: it stays at CTC 1
                                      // This CYC spans two periods since the last CYC: 8 cycles expected there.
        t.update_cyc(10, &c, 1 << FCR_SHIFT).unwrap();
        assert_eq!(t.query_tsc(), Ok(0x10e));
    }
}
