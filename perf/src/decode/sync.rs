//! Trace data and synchronization (perf's `intel_pt_get_data`, `intel_pt_get_next_packet`,
//! `intel_pt_walk_psb`, `intel_pt_walk_to_ip`, `intel_pt_sync`): the buffers one after
//! the other, packets out of them (a PSB split over two buffers included), the walk
//! over PSB+ and the search for the next place decoding can start.

use super::*;

/// The PSB's bytes (the encoder's, the one description of the packets).
pub(super) use pt_encoder::packet::PSB_BYTES as PSB;

/// The first PSB in `buf`.
pub(super) fn find_psb(buf: &[u8]) -> Option<usize> {
    pt_decoder::packet::find_psb_forward(buf, 0)
}

/// The TSC in the PSB+ at the start of `buf` (perf's `intel_pt_next_tsc`).
pub(super) fn next_tsc(buf: &[u8]) -> Option<u64> {
    let mut pd = packet::decoder(buf);
    let mut at = 0;
    while at < buf.len() {
        let (p, n) = packet::decode(&mut pd, buf, at)?;
        match p.kind {
            Kind::Tsc => return Some(p.payload),
            Kind::Psbend => return None,
            _ => at += n,
        }
    }
    None
}

impl<'a> Decoder<'a> {
    pub(super) fn len(&self) -> usize {
        if self.split_psb {
            PSB.len().saturating_sub(self.at)
        } else {
            self.data.len().saturating_sub(self.at)
        }
    }

    pub(super) fn reposition(&mut self) {
        self.ip = 0;
        self.pkt_state = PktState::NoPsb;
        self.timestamp = 0;
        self.have_tma = false;
    }

    /// The next buffer (perf's `intel_pt_get_data`): `Link` if it does not continue
    /// the last one.
    pub(super) fn get_data(&mut self, reposition: bool) -> Res {
        self.pkt_step = 0;
        let Some(b) = self.bufs.get(self.next_buf_idx).copied() else {
            return Err(Stop::NoData);
        };
        self.next_buf_idx += 1;
        self.data = b.data;
        self.at = 0;
        self.split_psb = false;
        self.pd = None;
        if b.data.is_empty() {
            return Err(Stop::NoData);
        }
        self.buf_timestamp = b.reference;
        if !b.consecutive || reposition {
            self.reposition();
            self.ref_timestamp = b.reference;
            self.state.trace_nr = b.trace_nr;
            return Err(Stop::Link);
        }
        Ok(())
    }

    pub(super) fn get_next_data(&mut self, reposition: bool) -> Res {
        if let Some((data, at)) = self.split_rest.take() {
            self.data = data;
            self.at = at;
            self.split_psb = false;
            self.pd = None;
            return Ok(());
        }
        self.get_data(reposition)
    }

    /// The packet at the current position, with its length; `None`: a bad packet.
    pub(super) fn read_packet(&mut self) -> Option<(Pkt, usize)> {
        if self.split_psb {
            return Some((
                Pkt {
                    kind: Kind::Psb,
                    count: 0,
                    payload: 0,
                },
                PSB.len(),
            ));
        }
        self.read_packet_at(self.at)
    }

    pub(super) fn bad_packet(&mut self) -> Res {
        self.tx_flags = 0;
        self.have_tma = false;
        self.pkt_len = 1;
        self.pkt_step = 1;
        self.packet = Pkt::BAD;
        if self.pkt_state != PktState::NoPsb {
            // perf's INTEL_PT_STATE_ERR1 keeps the packet state.
        }
        Err(Stop::BadMsg)
    }

    pub(super) fn get_next_packet(&mut self) -> Res {
        self.last_packet_type = self.packet.kind;
        loop {
            self.pos += self.pkt_step as u64;
            self.at += self.pkt_step;
            if self.len() == 0 {
                self.get_next_data(false)?;
            }
            match self.read_packet() {
                Some((p, n)) => {
                    self.packet = p;
                    self.pkt_len = n;
                    self.pkt_step = n;
                }
                None => return self.bad_packet(),
            }
            if self.packet.kind != Kind::Pad {
                return Ok(());
            }
        }
    }

    /// Moves on to the next packet (as [`Decoder::get_next_packet`] would) if it
    /// is in the current buffer and `want` takes it; else nothing changes.
    pub(super) fn next_packet_if(&mut self, want: impl Fn(&Pkt) -> bool) -> bool {
        if self.split_psb {
            return false;
        }
        let mut at = self.at + self.pkt_step;
        let mut skipped = self.pkt_step;
        let (p, n) = loop {
            let Some(&byte) = self.data.get(at) else {
                return false;
            };
            let Some((p, n)) = packet::tnt8(byte)
                .map(|p| (p, 1))
                .or_else(|| packet::tip_at(self.data, at))
                .or_else(|| self.read_packet_at(at))
            else {
                return false;
            };
            if p.kind != Kind::Pad {
                break (p, n);
            }
            at += n;
            skipped += n;
        };
        if !want(&p) {
            return false;
        }
        self.last_packet_type = self.packet.kind;
        self.pos += skipped as u64;
        self.at = at;
        self.packet = p;
        self.pkt_len = n;
        self.pkt_step = n;
        true
    }

    /// The packet at `at` in the current buffer.
    pub(super) fn read_packet_at(&mut self, at: usize) -> Option<(Pkt, usize)> {
        let data = self.data;
        let pd = self.pd.get_or_insert_with(|| packet::decoder(data));
        if pd.offset().ok() != Some(at as u64) && pd.sync_set(at as u64).is_err() {
            return None;
        }
        packet::next(pd, data)
    }

    /// Looks at the packets after the current one in the current buffer, handing
    /// each (but PADs) to `cb` with the type of the packet before, until `cb` says
    /// stop (perf's `intel_pt_pkt_lookahead`).
    pub(super) fn pkt_lookahead(&self, mut cb: impl FnMut(&Self, &Pkt, Kind, u64) -> bool) {
        if self.split_psb {
            return;
        }
        let data = self.data;
        let mut at = self.at;
        let mut step = self.pkt_step;
        let mut pos = self.pos;
        let mut last = self.last_packet_type;
        let mut pd = packet::decoder(data);
        loop {
            let p = loop {
                pos += step as u64;
                at += step;
                if at >= data.len() {
                    return;
                }
                let Some((p, n)) = packet::decode(&mut pd, data, at) else {
                    return;
                };
                step = n;
                if p.kind != Kind::Pad {
                    break p;
                }
            };
            if cb(self, &p, last, pos) {
                return;
            }
            last = p.kind;
        }
    }

    /// Walks PSB+ when already in sync.
    pub(super) fn walk_psbend(&mut self) -> Res {
        self.in_psb = true;
        let r = loop {
            if let Err(e) = self.get_next_packet() {
                break Err(e);
            }
            match self.packet.kind {
                Kind::Psbend => break Ok(()),
                Kind::TipPgd
                | Kind::TipPge
                | Kind::Tip
                | Kind::Tnt
                | Kind::TraceStop
                | Kind::Bad
                | Kind::Psb
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
                    self.have_tma = false;
                    break Err(Stop::Again);
                }
                Kind::Ovf => break self.overflow(),
                Kind::Tsc => self.calc_tsc_timestamp(),
                Kind::Tma => self.calc_tma(),
                Kind::Cbr => self.calc_cbr(),
                Kind::ModeExec => self.mode_exec_status(),
                Kind::Pip => self.set_pip(),
                Kind::Fup => {
                    self.pge = true;
                    if self.packet.count != 0 {
                        self.set_last_ip();
                        self.psb_ip = self.last_ip;
                    }
                }
                Kind::ModeTsx => self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX,
                Kind::Mtc => {
                    self.calc_mtc_timestamp();
                    if self.period_type == PeriodType::Mtc {
                        self.state.type_ |= ty::INSTRUCTION;
                    }
                }
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::Vmcs | Kind::Mnt | Kind::Pad => {}
            }
        };
        self.in_psb = false;
        r
    }

    pub(super) fn psb(&mut self) -> Res {
        self.last_ip = 0;
        self.psb_ip = 0;
        self.have_last_ip = true;
        self.stack.clear();
        self.walk_psbend()?;
        self.state.type_ = ty::PSB_EVT;
        self.state.from_ip = self.psb_ip;
        self.state.to_ip = 0;
        Ok(())
    }

    pub(super) fn have_ip(&self) -> bool {
        self.packet.count != 0
            && (self.have_last_ip || self.packet.count == 3 || self.packet.count == 6)
    }

    /// Walks PSB+ to get in sync.
    pub(super) fn walk_psb(&mut self) -> Res {
        self.in_psb = true;
        let r = loop {
            if let Err(e) = self.get_next_packet() {
                break Err(e);
            }
            match self.packet.kind {
                Kind::TipPgd
                | Kind::TipPge
                | Kind::Tip
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
                    if self.packet.kind == Kind::TipPgd {
                        self.continuous_period = false;
                    }
                    break Err(Stop::Mismatch);
                }
                Kind::Fup => {
                    self.pge = true;
                    if self.have_ip() {
                        self.set_ip();
                        self.psb_ip = self.ip;
                    }
                }
                Kind::Mtc => self.calc_mtc_timestamp(),
                Kind::Tsc => self.calc_tsc_timestamp(),
                Kind::Tma => self.calc_tma(),
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::Cbr => self.calc_cbr(),
                Kind::Pip => self.set_pip(),
                Kind::ModeExec => self.mode_exec_status(),
                Kind::ModeTsx => self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX,
                Kind::TraceStop | Kind::Tnt => {
                    if self.packet.kind == Kind::TraceStop {
                        self.pge = false;
                        self.continuous_period = false;
                        self.tx_flags = 0;
                    }
                    self.have_tma = false;
                    self.pkt_state = if self.ip != 0 {
                        PktState::InSync
                    } else {
                        PktState::ErrResync
                    };
                    break Err(Stop::Mismatch);
                }
                Kind::Bad => break self.bug(),
                Kind::Ovf => break self.overflow(),
                Kind::Psbend => break Ok(()),
                Kind::Psb | Kind::Vmcs | Kind::Mnt | Kind::Pad => {}
            }
        };
        self.in_psb = false;
        r
    }

    pub(super) fn walk_to_ip(&mut self) -> Res {
        loop {
            self.get_next_packet()?;
            match self.packet.kind {
                Kind::TipPgd => {
                    self.continuous_period = false;
                    self.pge = false;
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip == 0 {
                        continue;
                    }
                    self.state.type_ |= ty::TRACE_END;
                    return Ok(());
                }
                Kind::TipPge => {
                    self.pge = true;
                    self.mtc_cyc_cnt_pge();
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip == 0 {
                        continue;
                    }
                    self.state.type_ |= ty::TRACE_BEGIN;
                    return Ok(());
                }
                Kind::Tip => {
                    self.pge = true;
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip == 0 {
                        continue;
                    }
                    return Ok(());
                }
                Kind::Fup => {
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip != 0 {
                        return Ok(());
                    }
                }
                Kind::Mtc => self.calc_mtc_timestamp(),
                Kind::Tsc => self.calc_tsc_timestamp(),
                Kind::Tma => self.calc_tma(),
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::Cbr => self.calc_cbr(),
                Kind::Pip => self.set_pip(),
                Kind::ModeExec => self.mode_exec_status(),
                Kind::ModeTsx => self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX,
                Kind::Ovf => return self.overflow(),
                Kind::Bad => return self.bug(),
                Kind::TraceStop => {
                    self.pge = false;
                    self.continuous_period = false;
                    self.tx_flags = 0;
                    self.have_tma = false;
                }
                Kind::Psb => {
                    self.state.psb_offset = self.pos;
                    self.psb_ip = 0;
                    self.last_ip = 0;
                    self.have_last_ip = true;
                    self.stack.clear();
                    self.walk_psb()?;
                    self.state.type_ = ty::PSB_EVT;
                    self.state.from_ip = self.psb_ip;
                    self.state.to_ip = 0;
                    return Ok(());
                }
                _ => {}
            }
        }
    }

    pub(super) fn sync_ip(&mut self) -> Res {
        self.clear_fup_event();
        self.overflow = false;
        if !self.p.branch_enable {
            self.pkt_state = PktState::InSync;
            self.state.type_ = 0;
            return Ok(());
        }
        self.walk_to_ip()?;
        if self.state.type_ & ty::PSB_EVT != 0 && self.ip == 0 {
            return Ok(());
        }
        self.pkt_state = if self.hop {
            PktState::Resample
        } else {
            PktState::InSync
        };
        self.state.from_ip = 0;
        self.state.to_ip = self.ip;
        Ok(())
    }

    /// The part of a PSB at the end of the current buffer.
    pub(super) fn part_psb(&self) -> usize {
        let buf = &self.data[self.at.min(self.data.len())..];
        for i in (1..PSB.len()).rev() {
            if i > buf.len() {
                continue;
            }
            if buf[buf.len() - i..] == PSB[..i] {
                return i;
            }
        }
        0
    }

    pub(super) fn get_split_psb(&mut self, part: usize) -> Res {
        self.pos += self.len() as u64;
        self.at = self.data.len();
        self.get_next_data(false)?;
        let rest = PSB.len() - part;
        if rest > self.data.len() || self.data[..rest] != PSB[part..] {
            return Ok(());
        }
        self.pos -= part as u64;
        self.split_rest = Some((self.data, rest));
        self.split_psb = true;
        self.at = 0;
        Ok(())
    }

    pub(super) fn scan_for_psb(&mut self) -> Res {
        loop {
            if self.len() == 0 {
                self.get_next_data(false)?;
            }
            if self.split_psb {
                self.pkt_step = 0;
                return self.get_next_packet();
            }
            let start = self.at.min(self.data.len());
            match find_psb(&self.data[start..]) {
                Some(n) => {
                    self.pkt_step = n;
                    return self.get_next_packet();
                }
                None => {
                    let part = self.part_psb();
                    if part != 0 {
                        self.get_split_psb(part)?;
                    } else {
                        self.pos += self.len() as u64;
                        self.at = self.data.len();
                    }
                }
            }
        }
    }

    pub(super) fn sync(&mut self, code: &mut dyn Walker) -> Res {
        self.pge = false;
        self.continuous_period = false;
        self.have_last_ip = false;
        self.last_ip = 0;
        self.psb_ip = 0;
        self.ip = 0;
        self.stack.clear();
        self.scan_for_psb()?;
        self.have_last_ip = true;
        self.pkt_state = PktState::InSync;
        self.walk_psb()?;
        let _ = code;
        self.state.type_ = ty::PSB_EVT;
        self.state.from_ip = self.psb_ip;
        self.state.to_ip = 0;
        if self.ip != 0 {
            // In hop mode, resample to get the PSB FUP's IP as an instruction.
            self.pkt_state = if self.hop {
                PktState::Resample
            } else {
                PktState::InSync
            };
        }
        Ok(())
    }

    /// Moves on to the last PSB whose TSC is before `timestamp` (perf's
    /// `intel_pt_fast_forward`, for time ranges): first to the last buffer that
    /// starts before it, then PSB by PSB.
    pub fn fast_forward(&mut self, timestamp: u64) {
        let mut buf_timestamp = 0;
        for b in self.bufs.iter().skip(self.next_buf_idx) {
            if b.data.is_empty() {
                continue;
            }
            let Some(tsc) = find_psb(b.data).and_then(|o| next_tsc(&b.data[o..])) else {
                continue;
            };
            if tsc_8b(tsc, b.reference) < timestamp {
                buf_timestamp = b.reference;
            } else {
                break;
            }
        }
        if buf_timestamp != 0 {
            loop {
                self.pos += self.len() as u64;
                self.at = self.data.len();
                self.split_psb = false;
                match self.get_next_data(true) {
                    Ok(()) | Err(Stop::Link) => {}
                    Err(_) => return,
                }
                if self.buf_timestamp == buf_timestamp {
                    break;
                }
            }
        }
        if self.data.is_empty() || self.split_psb {
            return;
        }
        let Some(first) = find_psb(&self.data[self.at.min(self.data.len())..]) else {
            return;
        };
        let mut off = self.at + first;
        while let Some(tsc) = next_tsc(&self.data[off..]) {
            if tsc_8b(tsc, self.buf_timestamp) >= timestamp {
                break;
            }
            self.pos += (off - self.at) as u64;
            self.at = off;
            self.pkt_step = 0;
            self.pd = None;
            self.reposition();
            match pt_decoder::packet::find_psb_forward(self.data, off + 1) {
                Some(n) => off = n,
                None => break,
            }
        }
    }
}
