//! Instruction sampling (perf's `intel_pt_sample_insn`, `intel_pt_next_period`): the
//! period counted as the walk goes, in instructions or in ticks.

use super::*;

impl<'a> Decoder<'a> {
    pub(super) fn next_period(&mut self) -> u64 {
        let mut timestamp = self.timestamp.wrapping_add(self.timestamp_insn_cnt);
        let mut masked = timestamp & self.period_mask;
        if self.continuous_period {
            if masked > self.last_masked_timestamp {
                return 1;
            }
        } else {
            timestamp = timestamp.wrapping_add(1);
            masked = timestamp & self.period_mask;
            if masked > self.last_masked_timestamp {
                self.last_masked_timestamp = masked;
                self.continuous_period = true;
            }
        }
        if masked < self.last_masked_timestamp {
            return self.period_ticks;
        }
        self.period_ticks
            .wrapping_sub(timestamp.wrapping_sub(masked))
    }

    pub(super) fn next_sample(&mut self) -> u64 {
        match self.period_type {
            PeriodType::Instructions => self.period.wrapping_sub(self.period_insn_cnt),
            PeriodType::Ticks => self.next_period(),
            PeriodType::None | PeriodType::Mtc => 0,
        }
    }

    pub(super) fn sample_insn(&mut self) {
        match self.period_type {
            PeriodType::Instructions => self.period_insn_cnt = 0,
            PeriodType::Ticks => {
                let timestamp = self.timestamp.wrapping_add(self.timestamp_insn_cnt);
                let masked = timestamp & self.period_mask;
                if masked > self.last_masked_timestamp {
                    self.last_masked_timestamp = masked;
                } else {
                    self.last_masked_timestamp =
                        self.last_masked_timestamp.wrapping_add(self.period_ticks);
                }
            }
            PeriodType::None | PeriodType::Mtc => {}
        }
        self.state.type_ |= ty::INSTRUCTION;
    }

    pub(super) fn count_insns(&mut self, n: u64) {
        self.tot_insn_cnt += n;
        self.timestamp_insn_cnt += n;
        self.sample_insn_cnt += n;
        self.period_insn_cnt += n;
    }

    /// Samples the FUP's instruction with the FUP's event.
    pub(super) fn sample_fup_insn(&mut self, code: &mut dyn Walker) {
        self.state.insn_op = Op::Other;
        self.state.insn_len = 0;
        if !self.p.branch_enable || !self.pge || self.hop || self.ip != self.last_ip {
            return;
        }
        self.mtc_insn = true;
        let max = self.next_sample();
        if max != 1 {
            return;
        }
        let mut insn = PerfInsn::default();
        let mut ip = self.ip;
        self.tell_exec_mode(code);
        let Ok(cnt) = code.walk(&mut insn, &mut ip, 0, max, self.state.to_nr) else {
            return;
        };
        self.ip = ip;
        if insn.branch != Branch::None {
            return;
        }
        self.count_insns(cnt);
        self.sample_insn();
        self.state.type_ |= ty::INSTRUCTION;
        self.ip = self.ip.wrapping_add(u64::from(insn.length));
    }
}
