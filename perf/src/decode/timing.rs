//! Timing (perf's `intel_pt_calc_*_timestamp`): TSC, TMA, MTC, CYC and CBR, the
//! cycle-to-TSC ratio estimated between MTCs, and the sample time of each state.

use super::*;

/// `t * n / d` without overflowing early (perf's `multdiv`).
pub(super) fn multdiv(t: u64, n: u32, d: u32) -> u64 {
    if d == 0 {
        return 0;
    }
    let (n, d) = (u64::from(n), u64::from(d));
    (t / d)
        .wrapping_mul(n)
        .wrapping_add((t % d).wrapping_mul(n) / d)
}

/// `reference` advanced by `cycles` at `cyc_to_tsc` TSC ticks a cycle, as perf
/// computes it: `timestamp += cycle_cnt * cyc_to_tsc` on a `uint64_t`, so the sum
/// is taken in `double` and only then truncated. Truncating the product first
/// lands one tick low where the product falls just short of a whole number (a
/// ratio measured between two MTCs, times the cycles between them, is often
/// 0.999… short of the MTC's own value).
pub(super) fn add_cycles(reference: u64, cycles: u64, cyc_to_tsc: f64) -> u64 {
    (reference as f64 + cycles as f64 * cyc_to_tsc) as u64
}

pub(super) fn lower_power_of_2(x: u64) -> u64 {
    if x == 0 {
        0
    } else {
        1u64 << (63 - x.leading_zeros())
    }
}

/// A full TSC from the 7 bytes of a TSC packet and a reference TSC near it (perf's
/// `intel_pt_8b_tsc`).
///
/// The one copy: the decoder's TSC packets and the session's (the time of a
/// queue's first TSC) both go through it.
pub fn tsc_8b(timestamp: u64, reference: u64) -> u64 {
    let mut t = (timestamp & ((1 << 56) - 1)) | (reference & (0xff << 56));
    if t < reference {
        if reference - t > 1 << 55 {
            t = t.wrapping_add(1 << 56);
        }
    } else if t - reference > 1 << 55 {
        t = t.wrapping_sub(1 << 56);
    }
    t
}

pub(super) const CYC_ENABLE: u64 = 1 << 1;

pub(super) const CYC_THRESHOLD_SHIFT: u32 = 19;

pub(super) const CYC_THRESHOLD: u64 = 0xf << CYC_THRESHOLD_SHIFT;

impl<'a> Decoder<'a> {
    pub(super) fn update_sample_time(&mut self) {
        self.sample_timestamp = self.timestamp;
        self.sample_insn_cnt = self.timestamp_insn_cnt;
        self.state.cycles = self.tot_cyc_cnt;
    }

    pub(super) fn calc_tsc_timestamp(&mut self) {
        self.have_tma = false;
        if self.ref_timestamp != 0 {
            let t = tsc_8b(self.packet.payload, self.ref_timestamp);
            self.tsc_timestamp = t;
            self.timestamp = t;
            self.ref_timestamp = 0;
            self.timestamp_insn_cnt = 0;
        } else if self.timestamp != 0 {
            let mut t = self.packet.payload | (self.timestamp & (0xff << 56));
            self.tsc_timestamp = t;
            if t < self.timestamp && self.timestamp - t < TSC_SLIP {
                t = self.timestamp;
            }
            if t < self.timestamp {
                if self.buf_timestamp == 0 || t.wrapping_add(1 << 56) < self.buf_timestamp {
                    t = t.wrapping_add(1 << 56);
                    self.tsc_timestamp = t;
                } else {
                    t = self.timestamp;
                }
            }
            self.timestamp = t;
            self.timestamp_insn_cnt = 0;
        }
        if self.last_packet_type == Kind::Cyc {
            self.cyc_ref_timestamp = self.timestamp;
            self.cycle_cnt = 0;
            self.have_calc_cyc_to_tsc = false;
            self.calc_cyc_to_tsc_from(false);
        }
    }

    pub(super) fn overflow(&mut self) -> Res {
        self.tx_flags = 0;
        self.set_nr();
        self.timestamp_insn_cnt = 0;
        self.pkt_state = PktState::InSync;
        self.state.from_ip = self.ip;
        self.ip = 0;
        self.pge = false;
        self.clear_fup_event();
        self.overflow = true;
        Err(Stop::Overflow)
    }

    pub(super) fn mtc_cyc_cnt_pge(&mut self) {
        if self.have_cyc {
            return;
        }
        self.cyc_cnt_timestamp = self.timestamp;
        self.base_cyc_cnt = self.tot_cyc_cnt;
    }

    pub(super) fn mtc_cyc_cnt_cbr(&mut self) {
        self.tsc_to_cyc = f64::from(self.cbr) / self.max_non_turbo_ratio_fp;
        if self.pge {
            self.mtc_cyc_cnt_pge();
        }
    }

    pub(super) fn mtc_cyc_cnt_upd(&mut self) {
        if self.have_cyc {
            return;
        }
        self.sample_cyc = true;
        if !self.pge || self.timestamp <= self.cyc_cnt_timestamp {
            return;
        }
        let delta = self.timestamp - self.cyc_cnt_timestamp;
        let tot = (delta as f64 * self.tsc_to_cyc) as u64 + self.base_cyc_cnt;
        if tot > self.tot_cyc_cnt {
            self.tot_cyc_cnt = tot;
        }
    }

    pub(super) fn ctc_to_tsc(&self, ctc: u64) -> u64 {
        if self.tsc_ctc_mult != 0 {
            ctc.wrapping_mul(u64::from(self.tsc_ctc_mult))
        } else {
            multdiv(ctc, self.tsc_ctc_ratio_n, self.tsc_ctc_ratio_d)
        }
    }

    pub(super) fn calc_tma(&mut self) {
        let ctc = self.packet.payload as u32;
        let fc = self.packet.count;
        let ctc_rem = ctc & self.ctc_rem_mask;
        if self.tsc_ctc_ratio_d == 0 {
            return;
        }
        if self.pge && !self.in_psb {
            self.mtc_cyc_cnt_pge();
        } else {
            self.mtc_cyc_cnt_upd();
        }
        self.last_mtc = (ctc >> self.mtc_shift) & 0xff;
        self.last_ctc = u64::from(ctc - ctc_rem);
        self.ctc_timestamp = self
            .tsc_timestamp
            .wrapping_sub(u64::from(fc))
            .wrapping_sub(self.ctc_to_tsc(u64::from(ctc_rem)));
        self.ctc_delta = 0;
        self.have_tma = true;
        self.fixup_last_mtc = true;
    }

    pub(super) fn fixup_last_mtc(mtc: u32, mtc_shift: u32, last_mtc: &mut u32) {
        let first_missing_bit = 1u32 << (16 - mtc_shift);
        let mask = !(first_missing_bit - 1);
        *last_mtc |= mtc & mask;
        if *last_mtc >= mtc {
            *last_mtc = last_mtc.wrapping_sub(first_missing_bit) & 0xff;
        }
    }

    pub(super) fn calc_mtc_timestamp(&mut self) {
        if !self.have_tma {
            return;
        }
        let mtc = self.packet.payload as u32;
        if self.mtc_shift > 8 && self.fixup_last_mtc {
            self.fixup_last_mtc = false;
            let mut last = self.last_mtc;
            Self::fixup_last_mtc(mtc, self.mtc_shift, &mut last);
            self.last_mtc = last;
        }
        let mtc_delta = if mtc > self.last_mtc {
            mtc - self.last_mtc
        } else {
            mtc + 256 - self.last_mtc
        };
        self.ctc_delta += u64::from(mtc_delta) << self.mtc_shift;
        let t = self
            .ctc_timestamp
            .wrapping_add(self.ctc_to_tsc(self.ctc_delta));
        if t >= self.timestamp {
            self.timestamp = t;
        }
        self.mtc_cyc_cnt_upd();
        self.timestamp_insn_cnt = 0;
        self.last_mtc = mtc;
        if self.last_packet_type == Kind::Cyc {
            self.cyc_ref_timestamp = self.timestamp;
            self.cycle_cnt = 0;
            self.have_calc_cyc_to_tsc = false;
            self.calc_cyc_to_tsc_from(true);
        }
    }

    pub(super) fn calc_cbr(&mut self) {
        let cbr = (self.packet.payload & 0xff) as u32;
        self.cbr_payload = self.packet.payload;
        if self.cbr == cbr {
            return;
        }
        self.cbr = cbr;
        self.cbr_cyc_to_tsc = self.max_non_turbo_ratio_fp / f64::from(cbr);
        self.cyc_ref_timestamp = self.timestamp;
        self.cycle_cnt = 0;
        self.mtc_cyc_cnt_cbr();
    }

    pub(super) fn calc_cyc_timestamp(&mut self) {
        let mut t = self.cyc_ref_timestamp;
        self.have_cyc = true;
        self.cycle_cnt = self.cycle_cnt.wrapping_add(self.packet.payload);
        if self.pge {
            self.tot_cyc_cnt = self.tot_cyc_cnt.wrapping_add(self.packet.payload);
        }
        self.sample_cyc = true;
        if self.cyc_ref_timestamp == 0 {
            return;
        }
        if self.have_calc_cyc_to_tsc {
            t = add_cycles(t, self.cycle_cnt, self.calc_cyc_to_tsc);
        } else if self.cbr != 0 {
            t = add_cycles(t, self.cycle_cnt, self.cbr_cyc_to_tsc);
        } else {
            return;
        }
        if t >= self.timestamp {
            self.timestamp = t;
        }
        self.timestamp_insn_cnt = 0;
    }

    /// Works out TSC ticks per cycle from the packets ahead (perf's
    /// `intel_pt_calc_cyc_to_tsc`; only after an MTC).
    pub(super) fn calc_cyc_to_tsc_from(&mut self, from_mtc: bool) {
        if !from_mtc {
            return;
        }
        struct Info {
            cycle_cnt: u64,
            cbr: u32,
            last_mtc: u32,
            ctc_timestamp: u64,
            ctc_delta: u64,
            tsc_timestamp: u64,
            timestamp: u64,
            have_tma: bool,
            fixup_last_mtc: bool,
            cbr_cyc_to_tsc: f64,
        }
        let mut data = Info {
            cycle_cnt: 0,
            cbr: 0,
            last_mtc: self.last_mtc,
            ctc_timestamp: self.ctc_timestamp,
            ctc_delta: self.ctc_delta,
            tsc_timestamp: self.tsc_timestamp,
            timestamp: self.timestamp,
            have_tma: self.have_tma,
            fixup_last_mtc: self.fixup_last_mtc,
            cbr_cyc_to_tsc: 0.0,
        };
        let mut result: Option<f64> = None;
        self.pkt_lookahead(|d, p, last, _pos| {
            let timestamp;
            match p.kind {
                Kind::Tnt
                | Kind::TipPge
                | Kind::Tip
                | Kind::Fup
                | Kind::Psb
                | Kind::Pip
                | Kind::ModeExec
                | Kind::ModeTsx
                | Kind::Psbend
                | Kind::Pad
                | Kind::Vmcs
                | Kind::Mnt
                | Kind::Ptwrite
                | Kind::PtwriteIp
                | Kind::Bbp
                | Kind::Bip
                | Kind::Bep
                | Kind::BepIp
                | Kind::Cfe
                | Kind::CfeIp
                | Kind::Evd => return false,
                Kind::Mtc => {
                    if !data.have_tma {
                        return false;
                    }
                    let mtc = p.payload as u32;
                    if d.mtc_shift > 8 && data.fixup_last_mtc {
                        data.fixup_last_mtc = false;
                        Self::fixup_last_mtc(mtc, d.mtc_shift, &mut data.last_mtc);
                    }
                    let delta = if mtc > data.last_mtc {
                        mtc - data.last_mtc
                    } else {
                        mtc + 256 - data.last_mtc
                    };
                    data.ctc_delta += u64::from(delta) << d.mtc_shift;
                    data.last_mtc = mtc;
                    let t = data
                        .ctc_timestamp
                        .wrapping_add(d.ctc_to_tsc(data.ctc_delta));
                    if t < data.timestamp {
                        return true;
                    }
                    if last != Kind::Cyc {
                        data.timestamp = t;
                        return false;
                    }
                    timestamp = t;
                }
                // TSC packets are not used (timing may have stopped; they slip
                // against CYC in PSB+): from an MTC, a TSC or TMA ends the look.
                Kind::Tsc | Kind::Tma => return true,
                Kind::Cyc => {
                    data.cycle_cnt = data.cycle_cnt.wrapping_add(p.payload);
                    return false;
                }
                Kind::Cbr => {
                    let cbr = p.payload as u32;
                    if data.cbr != 0 && data.cbr != cbr {
                        return true;
                    }
                    data.cbr = cbr;
                    data.cbr_cyc_to_tsc = d.max_non_turbo_ratio_fp / f64::from(cbr);
                    return false;
                }
                _ => return true,
            }
            if data.cbr == 0 && d.cbr != 0 {
                data.cbr = d.cbr;
                data.cbr_cyc_to_tsc = d.cbr_cyc_to_tsc;
            }
            if data.cycle_cnt == 0 {
                return true;
            }
            let cyc_to_tsc = timestamp.wrapping_sub(d.timestamp) as f64 / data.cycle_cnt as f64;
            if data.cbr != 0
                && cyc_to_tsc > data.cbr_cyc_to_tsc
                && cyc_to_tsc / data.cbr_cyc_to_tsc > 1.25
            {
                return true;
            }
            result = Some(cyc_to_tsc);
            true
        });
        // Unused here: the look-ahead's TSC and TMA state.
        let _ = (data.tsc_timestamp, data.ctc_timestamp);
        if let Some(c) = result {
            self.calc_cyc_to_tsc = c;
            self.have_calc_cyc_to_tsc = true;
        }
    }

    pub(super) fn est_timestamp(&self) -> u64 {
        let mut est = self.sample_insn_cnt << 1;
        if self.cbr != 0 && self.p.max_non_turbo_ratio != 0 {
            est = est.wrapping_mul(u64::from(self.p.max_non_turbo_ratio));
            est /= u64::from(self.cbr);
        }
        self.sample_timestamp.wrapping_add(est)
    }
}
