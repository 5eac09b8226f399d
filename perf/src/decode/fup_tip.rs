//! The packets that say where the flow went (perf's `intel_pt_walk_fup`,
//! `intel_pt_walk_tip`, `intel_pt_walk_tnt`, `intel_pt_walk_fup_tip`): FUP with the
//! events it binds (MODE, IF, PTWRITE, power events, EVD), TIP, TIP.PGE/PGD, TNT and
//! MODE.TSX.

use super::*;

impl<'a> Decoder<'a> {
    /// The mode of a MODE.Exec packet (perf's packet has the bits in its payload).
    fn packet_exec_mode(&self) -> ExecMode {
        match self.packet.payload {
            16 => ExecMode::Bit16,
            32 => ExecMode::Bit32,
            _ => ExecMode::Bit64,
        }
    }

    /// Tells the walker the mode of the code, if it does not know it yet.
    #[inline(always)]
    pub(super) fn tell_exec_mode<W: Walker + ?Sized>(&mut self, code: &mut W) {
        if self.told_exec_mode != Some(self.exec_mode) {
            code.set_exec_mode(self.exec_mode);
            self.told_exec_mode = Some(self.exec_mode);
        }
    }

    /// MODE.Exec in PSB+: the mode of the code at the PSB+'s FUP.
    pub(super) fn mode_exec_status(&mut self) {
        self.exec_mode = self.packet_exec_mode();
        self.pending_exec_mode = None;
        let iflag = self.packet.count & 4 != 0;
        self.iflag = iflag;
        self.next_iflag = iflag;
        self.state.from_iflag = iflag;
        self.state.to_iflag = iflag;
    }

    /// MODE.Exec outside PSB+: the mode of the next TIP's (or TIP.PGE's) target.
    pub(super) fn mode_exec(&mut self) {
        self.pending_exec_mode = Some(self.packet_exec_mode());
        self.next_iflag = self.packet.count & 4 != 0;
    }

    pub(super) fn sample_iflag(&mut self) {
        self.state.type_ |= ty::IFLAG_CHG;
        self.state.from_iflag = self.iflag;
        self.state.to_iflag = self.next_iflag;
        self.iflag = self.next_iflag;
    }

    pub(super) fn sample_iflag_chg(&mut self) {
        if self.iflag != self.next_iflag {
            self.sample_iflag();
        }
    }

    pub(super) fn clear_fup_event(&mut self) {
        self.set_fup_tx_flags = false;
        self.set_fup_ptw = false;
        self.set_fup_mwait = false;
        self.set_fup_pwre = false;
        self.set_fup_exstop = false;
        self.set_fup_bep = false;
        self.set_fup_cfe_ip = false;
        self.set_fup_cfe = false;
        self.evd_cnt = 0;
        self.set_fup_mode_exec = false;
        self.iflag = self.next_iflag;
    }

    /// The events bound to a FUP; whether there were any.
    pub(super) fn fup_event(&mut self, code: &mut dyn Walker, no_tip: bool) -> bool {
        let ty0 = self.state.type_;
        let mut sample_fup_insn = false;
        let mut ret = false;
        self.state.type_ &= !ty::BRANCH;
        self.state.insn_op = Op::Other;
        self.state.insn_len = 0;

        if self.set_fup_cfe_ip || self.set_fup_cfe {
            let ip = self.set_fup_cfe_ip;
            self.set_fup_cfe_ip = false;
            self.set_fup_cfe = false;
            self.state.type_ |= ty::EVT;
            if !ip && self.pge {
                self.state.type_ |= ty::BRANCH;
            }
            self.state.cfe_type = self.fup_cfe_pkt.count;
            self.state.cfe_vector = self.fup_cfe_pkt.payload as u32;
            self.state.evd_cnt = self.evd_cnt;
            self.state.evd = self.evd;
            self.evd_cnt = 0;
            if ip || self.pge {
                self.state.flags |= sflags::FUP_IP;
            }
            ret = true;
        }
        if self.set_fup_mode_exec {
            self.set_fup_mode_exec = false;
            self.sample_iflag();
            sample_fup_insn = no_tip;
            ret = true;
        }
        if self.set_fup_tx_flags {
            self.set_fup_tx_flags = false;
            self.tx_flags = self.fup_tx_flags;
            self.state.type_ |= ty::TRANSACTION;
            if self.fup_tx_flags & sflags::ABORT_TX != 0 {
                self.state.type_ |= ty::BRANCH;
            }
            self.state.flags = self.fup_tx_flags;
            ret = true;
        }
        if self.set_fup_ptw {
            self.set_fup_ptw = false;
            self.state.type_ |= ty::PTW;
            self.state.flags |= sflags::FUP_IP;
            self.state.ptw_payload = self.fup_ptw_payload;
            ret = true;
        }
        if self.set_fup_mwait {
            self.set_fup_mwait = false;
            self.state.type_ |= ty::MWAIT_OP;
            self.state.mwait_payload = self.fup_mwait_payload;
            ret = true;
        }
        if self.set_fup_pwre {
            self.set_fup_pwre = false;
            self.state.type_ |= ty::PWR_ENTRY;
            self.state.pwre_payload = self.fup_pwre_payload;
            ret = true;
        }
        if self.set_fup_exstop {
            self.set_fup_exstop = false;
            self.state.type_ |= ty::EX_STOP;
            self.state.flags |= sflags::FUP_IP;
            ret = true;
        }
        if self.set_fup_bep {
            self.set_fup_bep = false;
            self.state.type_ |= ty::BLK_ITEMS;
            ret = true;
        }
        if self.overflow {
            self.overflow = false;
            if !ret && !self.pge {
                if self.hop {
                    self.state.type_ = 0;
                    self.pkt_state = PktState::Resample;
                }
                self.pge = true;
                self.state.type_ |= ty::BRANCH | ty::TRACE_BEGIN;
                self.state.from_ip = 0;
                self.state.to_ip = self.ip;
                return true;
            }
        }
        if ret {
            self.state.from_ip = self.ip;
            self.state.to_ip = 0;
            if sample_fup_insn {
                self.sample_fup_insn(code);
            }
        } else {
            self.state.type_ = ty0;
        }
        ret
    }

    pub(super) fn fup_with_nlip(&self, insn: &PerfInsn, ip: u64, walked: &Res<Walked>) -> bool {
        self.p.fup_with_nlip
            && walked.is_ok()
            && insn.branch == Branch::Indirect
            && ip == self.ip.wrapping_add(u64::from(insn.length))
    }

    pub(super) fn walk_fup(&mut self, code: &mut dyn Walker) -> Res {
        let mut insn = PerfInsn::default();
        let ip = self.last_ip;
        loop {
            let r = self.walk_insn(code, &mut insn, ip);
            if r == Ok(Walked::Return) {
                return Ok(());
            }
            if r == Err(Stop::Again) || self.fup_with_nlip(&insn, ip, &r) {
                let no_tip = self.pkt_state != PktState::Fup;
                self.pkt_state = PktState::InSync;
                if self.fup_event(code, no_tip) && no_tip {
                    return Ok(());
                }
                return Err(Stop::Again);
            }
            self.set_fup_tx_flags = false;
            r?;
            if insn.branch == Branch::Indirect || insn.branch == Branch::Conditional {
                self.pkt_state = PktState::ErrResync;
                return Err(Stop::Mismatch);
            }
            // perf reports an internal error and walks on (its loop ignores it).
            let _ = self.bug();
        }
    }

    pub(super) fn bug(&mut self) -> Res {
        self.pkt_state = PktState::NoPsb;
        Err(Stop::Bug)
    }

    pub(super) fn update_nr(&mut self) {
        self.next_nr = self.pip_payload & 1 != 0;
    }

    pub(super) fn set_nr(&mut self) {
        self.nr = self.pip_payload & 1 != 0;
        self.next_nr = self.nr;
    }

    pub(super) fn set_pip(&mut self) {
        self.pip_payload = self.packet.payload;
        self.set_nr();
    }

    pub(super) fn set_last_ip(&mut self) {
        self.last_ip = calc_ip(&self.packet, self.last_ip);
        self.have_last_ip = true;
        // A MODE.Exec binds to the TIP or TIP.PGE after it: its target runs in the
        // new mode (the walk up to the branch, done before, in the old one).
        if matches!(self.packet.kind, Kind::Tip | Kind::TipPge) {
            if let Some(m) = self.pending_exec_mode.take() {
                self.exec_mode = m;
            }
        }
    }

    pub(super) fn set_ip(&mut self) {
        self.set_last_ip();
        self.ip = self.last_ip;
    }

    pub(super) fn pgd_ip(&mut self, code: &mut dyn Walker, ip: u64) -> Option<bool> {
        code.pgd_ip(ip)
    }

    pub(super) fn walk_tip(&mut self, code: &mut dyn Walker) -> Res {
        let mut insn = PerfInsn::default();
        let r = self.walk_insn(code, &mut insn, 0);
        if r == Ok(Walked::Return)
            && self.pkt_state == PktState::TipPgd
            && self.state.type_ & ty::BRANCH != 0
            && self.pgd_ip(code, self.state.to_ip) == Some(true)
        {
            // An unconditional branch out of the filter region.
            self.no_progress = 0;
            self.pge = false;
            self.continuous_period = false;
            self.pkt_state = PktState::InSync;
            self.state.type_ |= ty::TRACE_END;
            self.update_nr();
            return Ok(());
        }
        if r? == Walked::Return {
            return Ok(());
        }
        self.update_nr();
        self.sample_iflag_chg();

        if insn.branch == Branch::Indirect {
            if self.pkt_state == PktState::TipPgd {
                self.pge = false;
                self.continuous_period = false;
                self.pkt_state = PktState::InSync;
                self.state.from_ip = self.ip;
                if self.packet.count == 0 {
                    self.state.to_ip = 0;
                } else {
                    self.state.to_ip = self.last_ip;
                    self.ip = self.last_ip;
                }
                self.state.type_ |= ty::TRACE_END;
            } else {
                self.pkt_state = PktState::InSync;
                self.state.from_ip = self.ip;
                if self.packet.count == 0 {
                    self.state.to_ip = 0;
                } else {
                    self.state.to_ip = self.last_ip;
                    self.ip = self.last_ip;
                }
            }
            return Ok(());
        }

        if insn.branch == Branch::Conditional {
            let to_ip = self
                .ip
                .wrapping_add(u64::from(insn.length))
                .wrapping_add(insn.rel as i64 as u64);
            if self.pkt_state == PktState::TipPgd && self.pgd_ip(code, to_ip) == Some(true) {
                // A conditional branch out of the filter region.
                self.pge = false;
                self.continuous_period = false;
                self.pkt_state = PktState::InSync;
                self.ip = to_ip;
                self.state.from_ip = self.ip;
                self.state.to_ip = to_ip;
                self.state.type_ |= ty::TRACE_END;
                return Ok(());
            }
            self.pkt_state = PktState::ErrResync;
            return Err(Stop::Mismatch);
        }
        self.bug()
    }

    pub(super) fn emulated_ptwrite_state(&mut self) -> Res {
        self.emulated_ptwrite = false;
        Err(Stop::Eptw)
    }

    pub(super) fn walk_tnt(&mut self, code: &mut dyn Walker) -> Res {
        let mut insn = PerfInsn::default();
        loop {
            if self.emulated_ptwrite {
                return self.emulated_ptwrite_state();
            }
            let r = self.walk_insn(code, &mut insn, 0);
            match r {
                Ok(Walked::Return) => {
                    self.emulated_ptwrite = insn.emulated_ptwrite;
                    return Ok(());
                }
                Err(e) => {
                    self.emulated_ptwrite = false;
                    return Err(e);
                }
                Ok(Walked::Branch) => {}
            }

            if insn.op == Op::Ret {
                if !self.p.return_compression || self.ret_addr == 0 || self.tnt.payload & BIT63 == 0
                {
                    self.pkt_state = PktState::ErrResync;
                    return Err(Stop::Mismatch);
                }
                self.tnt_bit();
                self.state.from_ip = self.ip;
                self.ip = self.ret_addr;
                self.state.to_ip = self.ip;
                return Ok(());
            }

            if insn.branch == Branch::Indirect {
                // A TIP deferred after the TNT.
                self.get_next_packet()?;
                if self.packet.kind != Kind::Tip || self.packet.count == 0 {
                    self.pkt_state = PktState::ErrResync;
                    self.pkt_step = 0;
                    return Err(Stop::Mismatch);
                }
                self.set_last_ip();
                self.state.from_ip = self.ip;
                self.state.to_ip = self.last_ip;
                self.ip = self.last_ip;
                self.update_nr();
                self.sample_iflag_chg();
                return Ok(());
            }

            if insn.branch == Branch::Conditional {
                self.tnt.count -= 1;
                self.pkt_state = if self.tnt.count != 0 {
                    PktState::TntCont
                } else {
                    PktState::InSync
                };
                if self.tnt.payload & BIT63 != 0 {
                    self.tnt.payload <<= 1;
                    self.state.from_ip = self.ip;
                    self.ip = self
                        .ip
                        .wrapping_add(u64::from(insn.length))
                        .wrapping_add(insn.rel as i64 as u64);
                    self.state.to_ip = self.ip;
                    return Ok(());
                }
                // An instruction sample at a branch not taken.
                if self.state.type_ & ty::INSTRUCTION != 0 {
                    self.tnt.payload <<= 1;
                    self.state.type_ = ty::INSTRUCTION;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    self.ip = self.ip.wrapping_add(u64::from(insn.length));
                    return Ok(());
                }
                self.sample_cyc = false;
                self.ip = self.ip.wrapping_add(u64::from(insn.length));
                if self.tnt.count == 0 {
                    self.update_sample_time();
                    return Err(Stop::Again);
                }
                self.tnt.payload <<= 1;
                continue;
            }
            return self.bug();
        }
    }

    pub(super) fn mode_tsx(&mut self, no_tip: &mut bool) -> Res {
        let fup_tx_flags = (self.packet.payload as u32) & (sflags::IN_TX | sflags::ABORT_TX);
        self.get_next_packet()?;
        if self.packet.kind == Kind::Fup {
            self.fup_tx_flags = fup_tx_flags;
            self.set_fup_tx_flags = true;
            if self.fup_tx_flags & sflags::ABORT_TX == 0 {
                *no_tip = true;
            }
        } else {
            self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX;
        }
        Ok(())
    }

    pub(super) fn evd(&mut self) -> Res {
        if self.evd_cnt as usize >= MAX_EVDS {
            return Err(Stop::Bug);
        }
        self.evd[self.evd_cnt as usize] = (self.packet.count, self.packet.payload);
        self.evd_cnt += 1;
        Ok(())
    }

    pub(super) fn walk_fup_tip(&mut self) -> Res {
        if self.tx_flags & sflags::ABORT_TX != 0 {
            self.tx_flags = 0;
            self.state.flags &= !sflags::IN_TX;
            self.state.flags |= sflags::ABORT_TX;
        } else {
            self.state.flags |= sflags::ASYNC;
        }
        loop {
            self.get_next_packet()?;
            match self.packet.kind {
                Kind::Tnt
                | Kind::Fup
                | Kind::TraceStop
                | Kind::Psb
                | Kind::Tsc
                | Kind::Tma
                | Kind::ModeTsx
                | Kind::Bad
                | Kind::Psbend
                | Kind::Ptwrite
                | Kind::PtwriteIp
                | Kind::Exstop
                | Kind::ExstopIp
                | Kind::Mwait
                | Kind::Pwre
                | Kind::Pwrx
                | Kind::Bbp
                | Kind::Bip
                | Kind::Bep
                | Kind::BepIp
                | Kind::Cfe
                | Kind::CfeIp
                | Kind::Evd => {
                    self.pkt_state = PktState::ErrResync;
                    self.pkt_step = 0;
                    return Err(Stop::Mismatch);
                }
                Kind::Cbr => self.calc_cbr(),
                Kind::Ovf => return self.overflow(),
                Kind::TipPgd => {
                    self.state.from_ip = self.ip;
                    if self.packet.count == 0 {
                        self.state.to_ip = 0;
                    } else {
                        self.set_ip();
                        self.state.to_ip = self.ip;
                    }
                    self.pge = false;
                    self.continuous_period = false;
                    self.state.type_ |= ty::TRACE_END;
                    self.update_nr();
                    return Ok(());
                }
                Kind::TipPge => {
                    self.pge = true;
                    self.state.from_ip = 0;
                    if self.packet.count == 0 {
                        self.state.to_ip = 0;
                    } else {
                        self.set_ip();
                        self.state.to_ip = self.ip;
                    }
                    self.state.type_ |= ty::TRACE_BEGIN;
                    self.mtc_cyc_cnt_pge();
                    self.set_nr();
                    return Ok(());
                }
                Kind::Tip => {
                    self.state.from_ip = self.ip;
                    if self.packet.count == 0 {
                        self.state.to_ip = 0;
                    } else {
                        self.set_ip();
                        self.state.to_ip = self.ip;
                    }
                    self.update_nr();
                    self.sample_iflag_chg();
                    return Ok(());
                }
                Kind::Pip => self.pip_payload = self.packet.payload,
                Kind::Mtc => {
                    self.calc_mtc_timestamp();
                    if self.period_type == PeriodType::Mtc {
                        self.state.type_ |= ty::INSTRUCTION;
                    }
                }
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::ModeExec => self.mode_exec(),
                Kind::Vmcs | Kind::Mnt | Kind::Pad => {}
            }
        }
    }

    pub(super) fn fup_in_psb(&mut self, code: &mut dyn Walker) -> Res {
        if self.ip != self.last_ip {
            let r = self.walk_fup(code);
            if r != Err(Stop::Again) {
                return r;
            }
        }
        self.pkt_state = PktState::InSync;
        if self.psb().is_err() {
            self.pkt_state = PktState::ErrResync;
            return Err(Stop::Mismatch);
        }
        Ok(())
    }

    /// A PSB+ whose FUP tells where execution is: walk to it first.
    pub(super) fn psb_with_fup(&mut self, code: &mut dyn Walker) -> Option<Res> {
        if !self.p.branch_enable {
            return None;
        }
        let mut fup: Option<Pkt> = None;
        let mut after_psbend = 0u32;
        self.pkt_lookahead(|_, p, _, _| match p.kind {
            Kind::Pad
            | Kind::Mnt
            | Kind::Tsc
            | Kind::Tma
            | Kind::ModeExec
            | Kind::ModeTsx
            | Kind::Mtc
            | Kind::Cyc
            | Kind::Vmcs
            | Kind::Cbr
            | Kind::Pip => {
                if after_psbend != 0 {
                    after_psbend -= 1;
                    if after_psbend == 0 {
                        return true;
                    }
                }
                false
            }
            Kind::Fup => {
                if after_psbend != 0 {
                    return true;
                }
                if fup.is_some() || p.count == 0 {
                    return true;
                }
                fup = Some(*p);
                false
            }
            Kind::Psbend => {
                if fup.is_none() {
                    return true;
                }
                // Look on for a TIP.PGE.
                after_psbend = 6;
                false
            }
            Kind::TipPge => {
                // A FUP in PSB+ followed by TIP.PGE is ignored.
                if after_psbend != 0 {
                    fup = None;
                }
                true
            }
            Kind::Ptwrite
            | Kind::PtwriteIp
            | Kind::Exstop
            | Kind::ExstopIp
            | Kind::Mwait
            | Kind::Pwre
            | Kind::Pwrx
            | Kind::Bbp
            | Kind::Bip
            | Kind::Bep
            | Kind::BepIp
            | Kind::Cfe
            | Kind::CfeIp
            | Kind::Evd => {
                if after_psbend != 0 {
                    after_psbend -= 1;
                    return after_psbend == 0;
                }
                true
            }
            _ => true,
        });
        let fup = fup?;
        self.packet = fup;
        self.set_last_ip();
        self.pkt_state = PktState::FupInPsb;
        Some(self.fup_in_psb(code))
    }
}
