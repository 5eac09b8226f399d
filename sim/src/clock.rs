//! The modeled clocks: core cycles, TSC, the crystal clock (CTC) and the
//! core:bus ratio, from which TSC, TMA, MTC, CYC and CBR packets are made.
//!
//! Every retired instruction costs [`ClockParams::cycles_per_insn`] core
//! cycles and every trip through the kernel [`ClockParams::kernel_cycles`].
//! The TSC runs at the nominal frequency: `nom_freq / cbr` TSC ticks per core
//! cycle. The crystal clock relates to the TSC by CPUID 0x15:
//! `TSC = CTC × EBX / EAX`.

/// Parameters of the clock model (the recording parameters a decoder needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockParams {
    /// Core cycles per retired instruction (N ≥ 1).
    pub cycles_per_insn: u32,
    /// Core cycles spent in the kernel per kernel entry (system call, signal).
    pub kernel_cycles: u32,
    /// Core:bus ratio (core clock = CBR × 100 MHz), reported in CBR packets.
    pub cbr: u8,
    /// Nominal (P1) ratio, MSR_PLATFORM_INFO\[15:8\]: the TSC frequency ÷ 100 MHz.
    pub nom_freq: u8,
    /// CPUID 0x15 EAX: denominator of the TSC/CTC ratio.
    pub cpuid_15_eax: u32,
    /// CPUID 0x15 EBX: numerator of the TSC/CTC ratio.
    pub cpuid_15_ebx: u32,
    /// TSC value when the clock starts.
    pub tsc_start: u64,
}

impl Default for ClockParams {
    /// A 3.2 GHz core on a 2.4 GHz TSC with a 24 MHz crystal.
    fn default() -> Self {
        ClockParams {
            cycles_per_insn: 1,
            kernel_cycles: 2000,
            cbr: 32,
            nom_freq: 24,
            cpuid_15_eax: 2,
            cpuid_15_ebx: 200,
            tsc_start: 0x1_0000_0000,
        }
    }
}

/// Clock parameters that cannot be modeled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClockError {
    /// A ratio or rate is zero.
    #[error("clock parameter {0} must not be zero")]
    Zero(&'static str),
    /// More than 511 TSC ticks per crystal tick do not fit TMA's 9-bit FastCounter.
    #[error("TSC/CTC ratio {ebx}/{eax} exceeds the 9-bit TMA fast counter")]
    RatioTooLarge {
        /// CPUID 0x15 EAX.
        eax: u32,
        /// CPUID 0x15 EBX.
        ebx: u32,
    },
}

impl ClockParams {
    /// Checks that the parameters describe a clock the packets can express.
    pub fn validate(&self) -> Result<(), ClockError> {
        for (v, name) in [
            (self.cycles_per_insn, "cycles_per_insn"),
            (u32::from(self.cbr), "cbr"),
            (u32::from(self.nom_freq), "nom_freq"),
            (self.cpuid_15_eax, "cpuid_15_eax"),
            (self.cpuid_15_ebx, "cpuid_15_ebx"),
        ] {
            if v == 0 {
                return Err(ClockError::Zero(name));
            }
        }
        if self.cpuid_15_ebx / self.cpuid_15_eax > 511 {
            return Err(ClockError::RatioTooLarge {
                eax: self.cpuid_15_eax,
                ebx: self.cpuid_15_ebx,
            });
        }
        Ok(())
    }
}

/// The running clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    p: ClockParams,
    cycles: u64,
}

impl Clock {
    /// A clock at cycle 0 (parameters must be valid).
    pub fn new(p: ClockParams) -> Self {
        Clock { p, cycles: 0 }
    }

    /// The parameters.
    pub fn params(&self) -> &ClockParams {
        &self.p
    }

    /// Core cycles since the start.
    pub fn cycles(&self) -> u64 {
        self.cycles
    }

    /// Advances by `n` core cycles.
    #[inline]
    pub fn advance(&mut self, n: u64) {
        self.cycles = self.cycles.wrapping_add(n);
    }

    /// The TSC now (56 bits are reported).
    pub fn tsc(&self) -> u64 {
        self.tsc_at(self.cycles)
    }

    fn tsc_at(&self, cycles: u64) -> u64 {
        let t = u128::from(cycles) * u128::from(self.p.nom_freq) / u128::from(self.p.cbr);
        self.p.tsc_start.wrapping_add(t as u64)
    }

    /// The crystal clock count at a TSC value.
    pub fn ctc_at_tsc(&self, tsc: u64) -> u64 {
        (u128::from(tsc) * u128::from(self.p.cpuid_15_eax) / u128::from(self.p.cpuid_15_ebx)) as u64
    }

    /// The crystal clock count now.
    pub fn ctc(&self) -> u64 {
        self.ctc_at_tsc(self.tsc())
    }

    /// The first TSC value at which the crystal count is `ctc`.
    pub fn tsc_of_ctc(&self, ctc: u64) -> u64 {
        let num = u128::from(ctc) * u128::from(self.p.cpuid_15_ebx);
        num.div_ceil(u128::from(self.p.cpuid_15_eax)) as u64
    }

    /// The first core cycle at which the TSC reaches `tsc`.
    pub fn cycle_of_tsc(&self, tsc: u64) -> u64 {
        let d = u128::from(tsc.saturating_sub(self.p.tsc_start));
        (d * u128::from(self.p.cbr)).div_ceil(u128::from(self.p.nom_freq)) as u64
    }

    /// TMA's values for the current TSC: CTC\[15:0\] and the fast counter (TSC
    /// ticks since the last crystal edge).
    pub fn tma(&self) -> (u16, u16) {
        let tsc = self.tsc();
        let ctc = self.ctc_at_tsc(tsc);
        let fc = tsc - self.tsc_of_ctc(ctc);
        (ctc as u16, (fc & 0x1ff) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios() {
        let p = ClockParams::default();
        p.validate().unwrap();
        let mut c = Clock::new(p);
        c.advance(32);
        assert_eq!(c.tsc(), p.tsc_start + 24);
        // 100 TSC ticks per crystal tick.
        assert_eq!(c.ctc(), c.tsc() / 100);
        let (ctc, fc) = c.tma();
        assert_eq!(u64::from(ctc), c.ctc() & 0xffff);
        assert_eq!(u64::from(fc), c.tsc() % 100);
        assert_eq!(c.tsc_of_ctc(7), 700);
        assert_eq!(c.cycle_of_tsc(p.tsc_start + 24), 32);
        assert_eq!(c.cycle_of_tsc(p.tsc_start + 25), 34);
        assert_eq!(
            ClockParams {
                cpuid_15_ebx: 2000,
                ..p
            }
            .validate(),
            Err(ClockError::RatioTooLarge { eax: 2, ebx: 2000 })
        );
        assert_eq!(
            ClockParams { cbr: 0, ..p }.validate(),
            Err(ClockError::Zero("cbr"))
        );
    }
}
