//! The fast path: between packets, whole runs of states at once ([`Decoder::take_run`]),
//! walked over the code walker's cached blocks and TNT runs. It re-walks what
//! [`Decoder::decode`] walks, with its own narrow interface (the [`Walker`]'s
//! `next_block`, `follow_tnt` and `plain_insns`); `tests/fast_path.rs` checks it
//! against `decode` state by state.

use super::*;

impl<'a> Decoder<'a> {
    /// The fast path of perf's walk through a TNT packet (or towards a TIP): the
    /// states the next calls of [`Decoder::decode`] would return while each is
    /// one step of the code with nothing but the step changing (no packet read,
    /// no time change, no event): at most `max` of them into `out`, the decoder
    /// left as if it had returned them one by one (its state is the last one's).
    ///
    /// Applies when instructions are sampled at every instruction (each
    /// instruction a step) or not at all (each branch that perf reports a
    /// step); stops before anything else: an indirect branch, a return that the
    /// return stack cannot take, the TNT packet's end, an unconditional branch
    /// that perf would check for a loop, and a branch from `kernel_start` or
    /// above to below it (the sample time is then estimated). 0 when the fast
    /// path does not apply at all.
    pub fn take_run<W: Walker + ?Sized>(
        &mut self,
        code: &mut W,
        kernel_start: u64,
        max: usize,
        out: &mut Vec<Step>,
    ) -> usize {
        out.clear();
        self.told_exec_mode = None;
        self.tell_exec_mode(code);
        let every_insn = match self.period_type {
            PeriodType::Instructions if self.period == 1 => true,
            PeriodType::None => false,
            _ => return 0,
        };
        let applies = self.state.err.is_none()
            && !self.hop
            && !self.emulated_ptwrite
            && !self.sample_cyc
            && self.cbr == self.cbr_seen
            && self.timestamp == self.sample_timestamp;
        if !applies {
            return 0;
        }
        // A TIP's target is taken without a state of its own only while it
        // changes neither VMX root mode nor the interrupt flag.
        let tip_ok = (self.pip_payload & 1 != 0) == self.nr
            && self.nr == self.next_nr
            && self.iflag == self.next_iflag;
        let is_tip = |p: &Pkt| tip_ok && p.kind == Kind::Tip && p.count != 0;
        let crosses = |from: u64, to: u64| from >= kernel_start && to != 0 && to < kernel_start;
        let mut b = RunBlock::default();
        let data = self.data;
        // The last branch walked after the last state (see `TntWalk::tail`).
        let mut tail = None;
        while out.len() < max {
            if self.pkt_state == PktState::InSync {
                // perf's walk_trace: a TNT packet is walked through, a TIP walked
                // towards; any other packet is the slow path's.
                if !self.next_packet_if(|p| (p.kind == Kind::Tnt && p.count != 0) || is_tip(p)) {
                    break;
                }
                if self.packet.kind == Kind::Tnt {
                    self.tnt = self.packet;
                    self.pkt_state = PktState::Tnt;
                } else {
                    self.set_last_ip();
                    self.pkt_state = PktState::Tip;
                }
            }
            let in_tnt = match self.pkt_state {
                PktState::Tnt | PktState::TntCont => true,
                PktState::Tip => false,
                // Towards a TIP.PGD: plain instructions only (a branch may leave the
                // filter region).
                PktState::TipPgd if every_insn => false,
                _ => break,
            };
            if in_tnt && self.tnt.count != 0 {
                self.tell_exec_mode(code);
                // The conditional branches first, in one go.
                let mut w = TntWalk {
                    ip: self.ip,
                    payload: self.tnt.payload,
                    count: self.tnt.count,
                    cont: self.pkt_state == PktState::TntCont,
                    every_insn,
                    return_compression: self.p.return_compression,
                    kernel_start,
                    no_progress: self.no_progress,
                    stack: Some(&mut self.stack.ips),
                    ret_addr: 0,
                    tot: self.tot_insn_cnt,
                    blocks: 0,
                    updated: false,
                    tail: None,
                    ahead: if self.split_psb {
                        &[]
                    } else {
                        data.get(self.at + self.pkt_step..).unwrap_or(&[])
                    },
                    taken: 0,
                };
                let steps = out.len();
                code.follow_tnt(&mut w, max, out);
                if w.blocks != 0 {
                    if w.tail.is_some() {
                        tail = w.tail;
                    } else if out.len() > steps {
                        tail = None;
                    }
                }
                if w.taken != 0 {
                    // Moved on to the last TNT packet the walk took (a byte).
                    let last = self.at + self.pkt_step + w.taken - 1;
                    self.last_packet_type = Kind::Tnt;
                    self.pos += (last - self.at) as u64;
                    self.at = last;
                    self.packet = packet::tnt8(data[last]).unwrap_or(self.packet);
                    self.pkt_len = 1;
                    self.pkt_step = 1;
                }
                if w.blocks != 0 {
                    let (tot, ip, payload, count, cont) = (w.tot, w.ip, w.payload, w.count, w.cont);
                    let (no_progress, ret_addr, updated) = (w.no_progress, w.ret_addr, w.updated);
                    self.count_insns(tot - self.tot_insn_cnt);
                    if every_insn {
                        self.period_insn_cnt = 0;
                    }
                    if updated {
                        self.update_sample_time();
                    }
                    if ret_addr != 0 {
                        self.ret_addr = ret_addr;
                    }
                    self.mtc_insn = true;
                    self.no_progress = no_progress;
                    self.ip = ip;
                    self.tnt.payload = payload;
                    self.tnt.count = count;
                    self.pkt_state = match (count, cont) {
                        (0, _) => PktState::InSync,
                        (_, true) => PktState::TntCont,
                        (_, false) => PktState::Tnt,
                    };
                    continue;
                }
            }
            self.tell_exec_mode(code);
            if !code.next_block(self.ip, &mut b) {
                break;
            }
            let plain = b.ninsn - 1;
            let insn = b.last;
            // What the branch does, decided before anything moves: its target, or
            // `None` if the run cannot take it. Conditional branches and
            // compressed returns are follow_tnt's: one it left is not taken here.
            let direct_to = b
                .last_ip
                .wrapping_add(u64::from(insn.length))
                .wrapping_add(insn.rel as i64 as u64);
            let to_ip = match (insn.branch, insn.op) {
                (Branch::Conditional, _) => None,
                (_, Op::Ret) if in_tnt => None,
                // perf's loop check counts unconditional branches that follow
                // each other (plain instructions walked one at a time reset it).
                (Branch::Unconditional, _) => (self.pkt_state != PktState::TipPgd
                    && (self.no_progress == 0 || (every_insn && plain != 0)))
                    .then_some(direct_to),
                // Indirect: the TIP's target, walked towards or deferred after the
                // TNT bits.
                _ if self.pkt_state == PktState::Tip => tip_ok.then_some(self.last_ip),
                _ if in_tnt => {
                    let last_ip = self.last_ip;
                    let deferred = self
                        .next_packet_if(|p| is_tip(p) && !crosses(b.last_ip, calc_ip(p, last_ip)));
                    deferred.then(|| {
                        self.set_last_ip();
                        self.last_ip
                    })
                }
                _ => None,
            }
            .filter(|&to| !crosses(b.last_ip, to));
            let Some(to_ip) = to_ip else {
                // The plain instructions before it still make states; the walk
                // stops at the branch, which the next decode takes.
                code.stop_in_block(&b, if every_insn { plain } else { 0 });
                if every_insn && plain != 0 {
                    out.push(Step {
                        plain,
                        plain_at: b.plain_at,
                        tot_insn_cnt: self.tot_insn_cnt + u64::from(plain),
                        ..Step::default()
                    });
                    self.after_plain_steps(plain, b.last_ip);
                }
                break;
            };
            self.mtc_insn = true;
            let plain = if every_insn { plain } else { 0 };
            if every_insn {
                if plain != 0 {
                    self.after_plain_steps(plain, b.last_ip);
                }
                self.count_insns(1);
                self.period_insn_cnt = 0;
            } else {
                self.count_insns(u64::from(b.ninsn));
            }
            let type_ = ty::BRANCH | if every_insn { ty::INSTRUCTION } else { 0 };
            // The return stack as perf's walk keeps it.
            match insn.op {
                Op::Call if insn.branch != Branch::Unconditional || insn.rel != 0 => self
                    .stack
                    .push(b.last_ip.wrapping_add(u64::from(insn.length))),
                Op::Ret => self.ret_addr = self.stack.pop(),
                _ => {}
            }
            if insn.branch == Branch::Unconditional {
                self.no_progress = 1;
            } else {
                self.no_progress = 0;
                if self.pkt_state == PktState::Tip {
                    self.pkt_state = PktState::InSync;
                }
            }
            if to_ip != 0 {
                self.ip = to_ip;
            }
            if self.pkt_state.sample_time() {
                self.update_sample_time();
            }
            out.push(Step {
                plain,
                plain_at: b.plain_at,
                from_ip: b.last_ip,
                to_ip,
                tot_insn_cnt: self.tot_insn_cnt,
                type_,
                op: insn.op,
                len: insn.length,
                insn: insn.buf,
            });
            tail = None;
        }
        let Some(&last) = out.last() else {
            if let Some((op, len, insn)) = tail {
                (self.state.insn_op, self.state.insn_len, self.state.insn) = (op, len, insn);
            }
            return 0;
        };
        // The decoder's state is the last state's.
        if last.type_ != 0 {
            self.state.type_ = last.type_;
            self.state.from_ip = last.from_ip;
            self.state.to_ip = last.to_ip;
            self.state.insn_op = last.op;
            self.state.insn_len = last.len;
            self.state.insn = last.insn;
        } else {
            let p = code
                .plain_insns(last.plain_at, last.plain)
                .last()
                .copied()
                .unwrap_or_default();
            self.state.type_ = ty::INSTRUCTION;
            self.state.from_ip = p.ip;
            self.state.to_ip = 0;
            self.state.insn_op = Op::Other;
            self.state.insn_len = p.len;
            self.state.insn = p.bytes;
        }
        if let Some((op, len, insn)) = tail {
            (self.state.insn_op, self.state.insn_len, self.state.insn) = (op, len, insn);
        }
        self.state.flags = if self.have_cyc { 0 } else { sflags::SAMPLE_IPC };
        self.state.timestamp = self.sample_timestamp;
        self.state.est_timestamp = self.est_timestamp();
        self.state.tot_insn_cnt = self.tot_insn_cnt;
        self.state.tot_cyc_cnt = self.sample_tot_cyc_cnt;
        out.len()
    }

    /// `n` plain instructions walked, each a state of its own, up to `ip`.
    pub(super) fn after_plain_steps(&mut self, n: u32, ip: u64) {
        self.mtc_insn = true;
        self.count_insns(u64::from(n));
        self.period_insn_cnt = 0;
        self.no_progress = 0;
        self.ip = ip;
        if self.pkt_state.sample_time() {
            self.update_sample_time();
        }
    }

    /// Takes the TNT packet's next bit (perf's walk of a conditional branch or
    /// a compressed return).
    pub(super) fn tnt_bit(&mut self) {
        self.tnt.count -= 1;
        self.pkt_state = if self.tnt.count != 0 {
            PktState::TntCont
        } else {
            PktState::InSync
        };
        self.tnt.payload <<= 1;
    }
}
