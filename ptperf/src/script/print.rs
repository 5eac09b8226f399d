//! perf script's lines (builtin-script.c's `process_event` and
//! `perf_sample__fprintf_bts`), written by hand into one buffer: no `format!` per
//! line.

use pt_decoder::perf::Session;
use pt_perf_data::{AttrFlags, PerfFile};

use super::fields::{f, OutType, Selection};
use super::Plan;
use crate::itrace::SynthOpts;
use crate::sample::{flags, Kind, Sample, TraceError};
use crate::symbols::Symbols;
use crate::synth::Stacks;

/// Writes numbers and padding into a byte buffer.
pub(crate) mod w {
    const HEX: &[u8; 16] = b"0123456789abcdef";

    /// `%x`.
    pub fn hex(buf: &mut Vec<u8>, v: u64) {
        let mut tmp = [0u8; 16];
        let mut i = 16;
        let mut v = v;
        loop {
            i -= 1;
            tmp[i] = HEX[(v & 15) as usize];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        buf.extend_from_slice(&tmp[i..]);
    }

    /// The 16 hex digits of `v` (zero-padded), computed eight at a time in a
    /// word: each nibble spread into a byte, then turned into its ASCII digit.
    #[inline]
    fn hex16(v: u64) -> [u8; 16] {
        fn eight(h: u32) -> u64 {
            let mut x = u64::from(h);
            x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
            x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
            x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
            // Bytes hold nibbles, least significant first; digits above 9 get
            // 'a' - '0' - 10 more.
            let over9 = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
            (x + 0x3030_3030_3030_3030 + over9 * 39).swap_bytes()
        }
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&eight((v >> 32) as u32).to_le_bytes());
        out[8..].copy_from_slice(&eight(v as u32).to_le_bytes());
        out
    }

    /// `%*x` (right-aligned in `width`).
    #[inline]
    pub fn hex_w(buf: &mut Vec<u8>, v: u64, width: usize) {
        if width == 16 {
            // perf's "%16" PRIx64: the digits, leading zeros as spaces.
            let d = u128::from_le_bytes(hex16(v));
            // The first `blanks` bytes (the low ones of the word) become spaces.
            let blanks = (v.leading_zeros() / 4).min(15);
            let low = (1u128 << (8 * blanks)) - 1;
            let d = (d & !low) | (u128::from_le_bytes([b' '; 16]) & low);
            buf.extend_from_slice(&d.to_le_bytes());
            return;
        }
        let digits = if v == 0 {
            1
        } else {
            (64 - v.leading_zeros() as usize).div_ceil(4)
        };
        let total = width.max(digits);
        let start = buf.len();
        buf.resize(start + total, b' ');
        let out = &mut buf[start + total - digits..start + total];
        let mut x = v;
        for c in out.iter_mut().rev() {
            *c = HEX[(x & 15) as usize];
            x >>= 4;
        }
    }

    /// "00" to "99".
    const PAIRS: [u8; 200] = {
        let mut t = [0u8; 200];
        let mut i = 0;
        while i < 100 {
            t[2 * i] = b'0' + (i / 10) as u8;
            t[2 * i + 1] = b'0' + (i % 10) as u8;
            i += 1;
        }
        t
    };

    /// `%u`, two digits at a time.
    pub fn dec(buf: &mut Vec<u8>, v: u64) {
        let mut tmp = [0u8; 20];
        let mut i = 20;
        let mut v = v;
        while v >= 100 {
            let r = (v % 100) as usize;
            v /= 100;
            i -= 2;
            tmp[i..i + 2].copy_from_slice(&PAIRS[2 * r..2 * r + 2]);
        }
        if v >= 10 {
            i -= 2;
            let r = v as usize;
            tmp[i..i + 2].copy_from_slice(&PAIRS[2 * r..2 * r + 2]);
        } else {
            i -= 1;
            tmp[i] = b'0' + v as u8;
        }
        buf.extend_from_slice(&tmp[i..]);
    }

    /// `%d`.
    pub fn int(buf: &mut Vec<u8>, v: i64) {
        if v < 0 {
            buf.push(b'-');
        }
        dec(buf, v.unsigned_abs());
    }

    fn int_len(v: i64) -> usize {
        let u = v.unsigned_abs();
        let digits = if u == 0 { 1 } else { u.ilog10() as usize + 1 };
        usize::from(v < 0) + digits
    }

    /// `%*u` without a temporary.
    pub fn dec_w(buf: &mut Vec<u8>, v: u64, width: usize) {
        pad(buf, width.saturating_sub(int_len(v as i64)));
        dec(buf, v);
    }

    /// `%*d`.
    pub fn int_w(buf: &mut Vec<u8>, v: i64, width: usize) {
        pad(buf, width.saturating_sub(int_len(v)));
        int(buf, v);
    }

    /// `%-*d`.
    pub fn int_lw(buf: &mut Vec<u8>, v: i64, width: usize) {
        int(buf, v);
        pad(buf, width.saturating_sub(int_len(v)));
    }

    /// `%0*u`.
    pub fn dec_z(buf: &mut Vec<u8>, v: u64, width: usize) {
        let n = int_len(v as i64);
        for _ in n..width {
            buf.push(b'0');
        }
        dec(buf, v);
    }

    /// `n` spaces.
    pub fn pad(buf: &mut Vec<u8>, n: usize) {
        buf.resize(buf.len() + n, b' ');
    }

    /// `%*s`.
    pub fn str_w(buf: &mut Vec<u8>, s: &[u8], width: usize) {
        pad(buf, width.saturating_sub(s.len()));
        buf.extend_from_slice(s);
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn hex_w_16_is_printf() {
            let mut v: u64 = 0;
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            for i in 0..20_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Every width of value, and the edges.
                let cand = [x >> (i % 64), i, u64::MAX, 0, 0xa, 0x10, 0x9f];
                for &c in &cand {
                    v = c;
                    let mut b = Vec::new();
                    super::hex_w(&mut b, v, 16);
                    assert_eq!(String::from_utf8(b).unwrap(), format!("{v:16x}"));
                }
            }
            assert_eq!(v, 0x9f);
        }

        #[test]
        fn dec_and_widths_are_printf() {
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for i in 0..20_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                for v in [x >> (i % 64), i, u64::MAX, 0, 9, 10, 99, 100] {
                    let mut b = Vec::new();
                    super::dec(&mut b, v);
                    super::dec_w(&mut b, v % 1_000_000, 7);
                    super::int_w(&mut b, -((v % 100_000) as i64), 5);
                    super::dec_z(&mut b, v % 1000, 6);
                    let want = format!(
                        "{v}{:7}{:5}{:06}",
                        v % 1_000_000,
                        -((v % 100_000) as i64),
                        v % 1000
                    );
                    assert_eq!(String::from_utf8(b).unwrap(), want);
                }
            }
        }
    }
}

/// perf's `PERF_SAMPLE_*` bits used here.
mod st {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    /// `PERF_SAMPLE_MASK`'s bits below the ones perf masks out.
    pub const MASK: u64 = (1 << 20) - 1;
}

/// The symbol part of a line, resolved once per address.
#[derive(Clone)]
pub(crate) struct Resolved {
    /// `sym+0xoff` or `[unknown]` pieces.
    pub sym: Option<(std::rc::Rc<str>, u64)>,
    /// The dso's name (as recorded; `[unknown]` outside any mapping).
    pub dso: std::rc::Rc<str>,
}

/// A resolved address by (code image, pid, address).
type CacheEntry = ((u64, i32, u64), Resolved);

/// Prints samples as perf script does.
pub struct Printer<'s, 'a> {
    session: &'s Session<'a>,
    sel: Selection,
    ns: bool,
    name_width: usize,
    /// Event names with perf's modifiers, by [`Kind`].
    names: Vec<(Kind, Vec<u8>)>,
    /// Sample types of the two output types' first events.
    hw_type: u64,
    symbols: Symbols,
    unknown: std::rc::Rc<str>,
    dso_names: std::collections::HashMap<String, std::rc::Rc<str>>,
    sym_names: std::collections::HashMap<(usize, u64), std::rc::Rc<str>>,
    /// The output.
    pub buf: Vec<u8>,
    /// kHz per CBR unit (for `cbr` events' frequency).
    pub cbr2khz: u64,
    /// Samples carry call chains (`--itrace=g`): printed one entry a line.
    callchains: bool,
    /// `-F flags` texts by flags (few combinations occur: a short list searched
    /// in order is cheaper than hashing per sample).
    flag_texts: Vec<(u32, Vec<u8>)>,
    /// perf's `spacing` of callindent lines (kept from line to line).
    spacing: usize,
    /// Width dso names are padded to (perf's `pad_output_len_dso`; 0: none).
    pub pad_dso: usize,
    /// The last thread name looked up: (tid, from, until, name).
    comm_cache: Option<(i32, u64, u64, Option<&'s str>)>,
    /// Resolved addresses by (code image, pid, address).
    cache: Vec<Option<CacheEntry>>,
}

/// perf's event modifiers (`evsel__add_modifiers`) of an attr.
pub(crate) fn modifiers(flags_: AttrFlags, precise: u8) -> String {
    let ex = |b: u64| flags_.has(b);
    let mut m = String::new();
    let mut guest_default = false;
    if ex(AttrFlags::EXCLUDE_KERNEL) || ex(AttrFlags::EXCLUDE_USER) || ex(AttrFlags::EXCLUDE_HV) {
        if !ex(AttrFlags::EXCLUDE_KERNEL) {
            m.push('k');
        }
        if !ex(AttrFlags::EXCLUDE_USER) {
            m.push('u');
        }
        if !ex(AttrFlags::EXCLUDE_HV) {
            m.push('h');
        }
        guest_default = true;
    }
    for _ in 0..precise {
        m.push('p');
    }
    if ex(AttrFlags::EXCLUDE_HOST) || ex(AttrFlags::EXCLUDE_GUEST) == guest_default {
        if !ex(AttrFlags::EXCLUDE_HOST) {
            m.push('H');
        }
        if !ex(AttrFlags::EXCLUDE_GUEST) {
            m.push('G');
        }
    }
    if m.is_empty() {
        m
    } else {
        format!(":{m}")
    }
}

impl<'s, 'a> Printer<'s, 'a> {
    /// A printer for `plan` over `session` (`perf` is its file, for the events'
    /// names); perf's error line if a field cannot be printed.
    pub fn new(
        session: &'s Session<'a>,
        perf: &PerfFile<'_>,
        plan: &Plan,
        opts: &SynthOpts,
    ) -> Result<Self, String> {
        let pmu = session.info().pmu_type;
        let pt = perf
            .events()
            .iter()
            .find(|e| u64::from(e.attr.type_) == pmu)
            .map(|e| e.attr)
            .unwrap_or_default();
        let timeless = !session.is_timed() || opts.timeless_decoding;
        let mut base = pt.sample_type.0 & st::MASK | st::IP | st::TID | st::PERIOD;
        if timeless {
            base &= !st::TIME;
        } else {
            base |= st::TIME;
        }
        if !session.per_cpu() {
            base &= !st::CPU;
        }
        let modf = modifiers(pt.flags, 0);
        let mut names: Vec<(Kind, Vec<u8>)> = Vec::new();
        let mut evnames: Vec<String> = perf
            .events()
            .iter()
            .map(|e| e.name.clone().unwrap_or_default())
            .collect();
        let mut add = |k: Kind, modded: bool| {
            let n = if modded {
                format!("{}{modf}", k.name())
            } else {
                k.name().to_string()
            };
            evnames.push(n.clone());
            names.push((k, n.into_bytes()));
        };
        let pwr_evt = session.pt_config() & (1 << 4) != 0;
        if opts.branches {
            add(Kind::Branches, true);
        }
        if opts.instructions {
            add(Kind::Instructions, true);
        }
        if opts.transactions {
            add(Kind::Transactions, false);
        }
        if opts.ptwrites {
            add(Kind::Ptwrite, false);
        }
        if opts.pwr_events {
            add(Kind::Cbr, false);
            add(Kind::Psb, false);
            if pwr_evt {
                add(Kind::Mwait, false);
                add(Kind::Pwre, false);
                add(Kind::Exstop, false);
                add(Kind::Pwrx, false);
            }
        }
        let name_width = evnames.iter().map(String::len).max().unwrap_or(0);

        // The first hardware event decides which default fields stay
        // (perf's evsel__check_attr).
        let hw_type = if opts.branches { base | st::ADDR } else { base };
        let synth_type = base & !st::PERIOD;
        let mut sel = plan.sel;
        let first_hw = names
            .iter()
            .find(|(k, _)| !k.is_synth())
            .map(|(_, n)| String::from_utf8_lossy(n).into_owned());
        let first_synth = names
            .iter()
            .find(|(k, _)| k.is_synth())
            .map(|(_, n)| String::from_utf8_lossy(n).into_owned());
        for (t, stype, name) in [
            (OutType::Hardware, hw_type, first_hw),
            (OutType::Synth, synth_type, first_synth),
        ] {
            let Some(name) = name else { continue };
            let o = &mut sel.out[t as usize];
            let checks: [(u64, u64, &str, &str, bool); 4] = [
                (f::ADDR, st::ADDR, "ADDR", "addr", true),
                (f::PID | f::TID, st::TID, "TID", "tid", false),
                (f::TIME, st::TIME, "TIME", "time", false),
                (f::CPU, st::CPU, "CPU", "cpu", true),
            ];
            for (field, bit, msg, fname, allow_user) in checks {
                if o.fields & field == 0 || stype & bit != 0 {
                    continue;
                }
                if o.user_set_fields & field != 0 {
                    if allow_user {
                        continue;
                    }
                    return Err(format!(
                        "Samples for '{name}' event do not have {msg} attribute set. Cannot print '{fname}' field."
                    ));
                }
                o.fields &= !field;
            }
            if o.fields & f::SYMOFFSET != 0 && o.fields & f::SYM == 0 {
                return Err("Display of offsets requested but symbol is notselected.".into());
            }
        }
        Ok(Printer {
            session,
            sel,
            ns: plan.ns,
            name_width,
            names,
            hw_type,
            symbols: Symbols::new(),
            unknown: "[unknown]".into(),
            dso_names: Default::default(),
            sym_names: Default::default(),
            buf: Vec::with_capacity(1 << 17),
            cbr2khz: 0,
            cache: vec![None; 1 << 13],
            comm_cache: None,
            spacing: 0,
            flag_texts: Default::default(),
            callchains: opts.callchain,
            pad_dso: if plan.pad_dso { 50 } else { 0 },
        })
    }

    /// [`Self::resolve_uncached`] through a direct-mapped cache keyed by the code
    /// image the sample ran in (its mappings do not change while it is the same)
    /// and the address.
    pub(crate) fn resolve(&mut self, stamp: u64, pid: i32, ip: u64, time: Option<u64>) -> Resolved {
        let slot = ((ip ^ stamp.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> 51) as usize;
        if let Some((k, r)) = &self.cache[slot] {
            if *k == (stamp, pid, ip) {
                return r.clone();
            }
        }
        let r = self.resolve_uncached(pid, ip, time);
        self.cache[slot] = Some(((stamp, pid, ip), r.clone()));
        r
    }

    /// What `ip` of process `pid` at `time` is: symbol and offset, and the dso.
    fn resolve_uncached(&mut self, pid: i32, ip: u64, time: Option<u64>) -> Resolved {
        let s = self.session;
        let pid = (pid >= 0).then_some(pid as u32);
        let Some(m) = s.mapping(pid, ip, time) else {
            return Resolved {
                sym: None,
                dso: self.unknown.clone(),
            };
        };
        let dso = match self.dso_names.get(&m.filename) {
            Some(d) => d.clone(),
            None => {
                let d: std::rc::Rc<str> = m.filename.as_str().into();
                self.dso_names.insert(m.filename.clone(), d.clone());
                d
            }
        };
        let addr = ip.wrapping_sub(m.start).wrapping_add(m.pgoff);
        let Ok(file) = s.code_file(m) else {
            return Resolved { sym: None, dso };
        };
        let bid = m.build_id.filter(|b| b.len > 0);
        let table =
            self.symbols
                .of_dso(&file.path, &m.filename, bid.as_ref().map(|b| b.as_bytes()));
        let key = table as *const _ as usize;
        let sym = match table.find(addr) {
            Some(sy) => {
                let off = addr - sy.start;
                let start = sy.start;
                let name = match self.sym_names.get(&(key, start)) {
                    Some(n) => n.clone(),
                    None => {
                        let n: std::rc::Rc<str> = sy.name.as_str().into();
                        self.sym_names.insert((key, start), n.clone());
                        n
                    }
                };
                Some((name, off))
            }
            None => None,
        };
        Resolved { sym, dso }
    }

    /// `sym+0xoff (dso)` as perf's `sample__fprintf_sym` writes it after the IP.
    fn sym_part(&mut self, r: &Resolved, fields: u64) {
        let b = &mut self.buf;
        if fields & f::SYM != 0 {
            b.push(b' ');
            match &r.sym {
                Some((name, off)) => {
                    b.extend_from_slice(name.as_bytes());
                    if fields & f::SYMOFFSET != 0 {
                        b.extend_from_slice(b"+0x");
                        w::hex(b, *off);
                    }
                }
                None => b.extend_from_slice(b"[unknown]"),
            }
        }
        if fields & f::DSO != 0 {
            b.extend_from_slice(b" (");
            self.dso_name(&r.dso.clone());
            self.buf.push(b')');
        }
    }

    /// The thread's name at `time` (cached for the span the name holds).
    pub(crate) fn comm(&mut self, tid: i32, time: Option<u64>) -> Option<&'s str> {
        if tid < 0 {
            return None;
        }
        let t = time.unwrap_or(0);
        if let Some((ctid, lo, hi, c)) = self.comm_cache {
            if ctid == tid && time.is_some() && t >= lo && t < hi {
                return c;
            }
        }
        let th = self.session.thread(tid as u32, time)?;
        let comm = th.comm_at(time);
        if time.is_some() {
            // The span: from this name's change (or the thread's start) to the next
            // change, the thread's exit or the next thread of the same id.
            let lo = th
                .comms
                .iter()
                .rev()
                .find(|c| c.time <= t)
                .map_or(th.start.unwrap_or(0), |c| c.time.max(th.start.unwrap_or(0)));
            let hi = th
                .comms
                .iter()
                .find(|c| c.time > t)
                .map_or(u64::MAX, |c| c.time);
            let hi = self
                .session
                .threads()
                .filter(|o| o.tid == tid as u32)
                .filter_map(|o| o.start)
                .filter(|&st| st > t)
                .fold(hi, u64::min);
            self.comm_cache = Some((tid, lo.min(t), hi, comm));
        }
        comm
    }

    fn time(&mut self, t: u64) {
        let b = &mut self.buf;
        let secs = t / 1_000_000_000;
        let ns = t % 1_000_000_000;
        if self.ns {
            // "%5lu.%09llu: "
            w::dec_w(b, secs, 5);
            b.push(b'.');
            w::dec_z(b, ns, 9);
        } else {
            // "%12s: " of "%lu.%06lu": the seconds take what the 7 characters of
            // ".uuuuuu" leave.
            w::dec_w(b, secs, 5);
            b.push(b'.');
            w::dec_z(b, ns / 1000, 6);
        }
        b.extend_from_slice(b": ");
    }

    /// perf's `perf_sample__fprintf_start`.
    fn start(&mut self, fields: u64, s: &Sample) {
        if fields & f::COMM != 0 {
            let tid = s.tid;
            let comm = self.comm(tid, s.time);
            let b = &mut self.buf;
            // Events with call chains (all but branches) have the name unpadded.
            let width = if self.callchains && fields & f::IP != 0 && s.kind != Kind::Branches {
                0
            } else {
                16
            };
            match comm {
                Some(c) => w::str_w(b, c.as_bytes(), width),
                None => {
                    let mut t = vec![b':'];
                    w::int(&mut t, i64::from(tid));
                    w::str_w(b, &t, width);
                }
            }
            b.push(b' ');
        }
        let b = &mut self.buf;
        if fields & f::PID != 0 && fields & f::TID != 0 {
            w::int_w(b, i64::from(s.pid), 5);
            b.push(b'/');
            w::int_lw(b, i64::from(s.tid), 5);
            b.push(b' ');
        } else if fields & f::PID != 0 {
            w::int_w(b, i64::from(s.pid), 5);
            b.push(b' ');
        } else if fields & f::TID != 0 {
            w::int_w(b, i64::from(s.tid), 5);
            b.push(b' ');
        }
        if fields & f::CPU != 0 {
            b.push(b'[');
            if s.cpu < 0 {
                b.push(b'-');
                w::dec_z(b, u64::from(s.cpu.unsigned_abs()), 2);
            } else {
                w::dec_z(b, s.cpu as u64, 3);
            }
            b.extend_from_slice(b"] ");
        }
        if fields & f::TIME != 0 {
            self.time(s.time.unwrap_or(0));
        }
    }

    fn insn(&mut self, fields: u64, s: &Sample) {
        let b = &mut self.buf;
        if fields & f::INSNLEN != 0 {
            b.extend_from_slice(b" ilen: ");
            w::dec(b, u64::from(s.insn_len));
        }
        if fields & f::INSN != 0 && s.insn_len != 0 {
            b.extend_from_slice(b" insn:");
            for &x in &s.insn[..usize::from(s.insn_len).min(16)] {
                b.push(b' ');
                b.push(b"0123456789abcdef"[usize::from(x >> 4)]);
                b.push(b"0123456789abcdef"[usize::from(x & 15)]);
            }
        }
    }

    fn ipc(&mut self, fields: u64, s: &Sample) {
        if fields & f::IPC == 0 || s.cyc_cnt == 0 || s.insn_cnt == 0 {
            return;
        }
        let ipc = s.insn_cnt * 100 / s.cyc_cnt;
        let b = &mut self.buf;
        b.extend_from_slice(b" \t IPC: ");
        w::dec(b, ipc / 100);
        b.push(b'.');
        w::dec_z(b, ipc % 100, 2);
        b.extend_from_slice(b" (");
        w::dec(b, s.insn_cnt);
        b.push(b'/');
        w::dec(b, s.cyc_cnt);
        b.extend_from_slice(b") ");
    }

    /// The synthesized event's text, padded as perf pads it (34 columns).
    fn synth(&mut self, s: &Sample, cbr2khz: u64) {
        let b = &mut self.buf;
        let at = b.len();
        match s.kind {
            Kind::Psb => {
                b.extend_from_slice(b" psb offs: ");
                if s.payload == 0 {
                    b.push(b'0');
                } else {
                    b.extend_from_slice(b"0x");
                    w::hex(b, s.payload);
                }
            }
            Kind::Cbr => {
                let cbr = s.payload & 0xff;
                let mnt = u64::from(s.aux & 0xff);
                let freq = ((cbr * cbr2khz) as u32 as u64 + 500) / 1000;
                b.extend_from_slice(b" cbr: ");
                let mut t = Vec::new();
                w::dec(&mut t, cbr);
                w::str_w(b, &t, 2);
                b.extend_from_slice(b" freq: ");
                t.clear();
                w::dec(&mut t, freq);
                w::str_w(b, &t, 4);
                b.extend_from_slice(b" MHz ");
                if let Some(q) = (1000 * cbr).checked_div(mnt) {
                    let pct = (5 + q) / 10;
                    b.push(b'(');
                    t.clear();
                    w::dec(&mut t, pct);
                    w::str_w(b, &t, 3);
                    b.extend_from_slice(b"%) ");
                }
            }
            Kind::Ptwrite => {
                b.extend_from_slice(b" IP: ");
                w::dec(b, u64::from(s.aux));
                b.extend_from_slice(b" payload: ");
                if s.payload == 0 {
                    b.push(b'0');
                } else {
                    b.extend_from_slice(b"0x");
                    w::hex(b, s.payload);
                }
                b.push(b' ');
                let bytes = s.payload.to_le_bytes();
                let n = bytes.iter().position(|&c| c == 0).unwrap_or(8);
                let printable = bytes[..n].iter().all(|c| (0x20..0x7f).contains(c))
                    && bytes[n..].iter().all(|&c| c == 0);
                if printable {
                    b.extend_from_slice(&bytes[..n]);
                }
                b.push(b' ');
            }
            Kind::Mwait => {
                b.extend_from_slice(b" hints: 0x");
                w::hex(b, s.payload & 0xff);
                b.extend_from_slice(b" extensions: 0x");
                w::hex(b, (s.payload >> 32) & 3);
                b.push(b' ');
            }
            Kind::Pwre => {
                b.extend_from_slice(b" hw: ");
                w::dec(b, (s.payload >> 7) & 1);
                b.extend_from_slice(b" cstate: ");
                w::dec(b, (s.payload >> 12) & 0xf);
                b.extend_from_slice(b" sub-cstate: ");
                w::dec(b, (s.payload >> 8) & 0xf);
                b.push(b' ');
            }
            Kind::Exstop => {
                b.extend_from_slice(b" IP: ");
                w::dec(b, u64::from(s.aux));
                b.push(b' ');
            }
            Kind::Pwrx => {
                b.extend_from_slice(b" deepest cstate: ");
                w::dec(b, (s.payload >> 4) & 0xf);
                b.extend_from_slice(b" last cstate: ");
                w::dec(b, s.payload & 0xf);
                b.extend_from_slice(b" wake reason: 0x");
                w::hex(b, (s.payload >> 8) & 0xf);
                b.push(b' ');
            }
            _ => {}
        }
        let len = b.len() - at;
        if len > 0 && len < 34 {
            w::pad(b, 34 - len);
        }
    }

    /// The synthesized events' names with perf's modifiers, in perf's order.
    pub fn event_names(&self) -> Vec<(Kind, String)> {
        self.names
            .iter()
            .map(|(k, n)| (*k, String::from_utf8_lossy(n).into_owned()))
            .collect()
    }

    /// A dso name as perf writes it (padded with `--call-trace`).
    fn dso_name(&mut self, dso: &str) {
        let b = &mut self.buf;
        if self.pad_dso != 0 {
            let n = dso.len().min(self.pad_dso - 1);
            b.extend_from_slice(&dso.as_bytes()[..n]);
            w::pad(b, self.pad_dso - n);
        } else {
            b.extend_from_slice(dso.as_bytes());
        }
    }

    /// perf's `perf_sample__fprintf_callindent`: the call depth as indentation and
    /// the function called or returned from.
    fn callindent(&mut self, s: &Sample, fields: u64) {
        let mut depth = s.depth as usize;
        if s.flags & flags::RETURN != 0 {
            depth += 1;
        }
        let al = self.resolve(s.code, s.pid, s.ip, s.time);
        let mut ip = 0;
        let mut name: Option<std::rc::Rc<str>> = None;
        if s.flags & (flags::CALL | flags::TRACE_BEGIN) != 0 {
            let r = self.resolve(s.code, s.pid, s.addr, s.time);
            match r.sym {
                Some((n, _)) => name = Some(n),
                None => ip = s.addr,
            }
        } else if s.flags & (flags::RETURN | flags::TRACE_END) != 0 {
            match &al.sym {
                Some((n, _)) => name = Some(n.clone()),
                None => ip = s.ip,
            }
        }
        if fields & f::DSO != 0 && fields & (f::IP | f::ADDR) == 0 {
            self.buf.push(b'(');
            self.dso_name(&al.dso.clone());
            self.buf.extend_from_slice(b")\t");
        }
        let start = self.buf.len();
        if let Some(n) = &name {
            w::pad(&mut self.buf, depth * 4);
            self.buf.extend_from_slice(n.as_bytes());
        } else if ip != 0 {
            w::pad(&mut self.buf, depth * 4);
            w::hex_w(&mut self.buf, ip, 16);
        }
        let len = self.buf.len() - start;
        if len > self.spacing || (len != 0 && len + 52 < self.spacing) {
            self.spacing = (len + 4).div_ceil(32) * 32;
        }
        if len < self.spacing {
            w::pad(&mut self.buf, self.spacing - len);
        }
    }

    /// perf's `perf_sample__fprintf_brstack`.
    fn brstack(&mut self, s: &Sample, st: &Stacks, fields: u64) {
        for e in &st.branches {
            self.buf.extend_from_slice(b" 0x");
            w::hex(&mut self.buf, e.from);
            if fields & f::DSO != 0 {
                let r = self.resolve(s.code, s.pid, e.from, s.time);
                self.buf.push(b'(');
                self.dso_name(&r.dso.clone());
                self.buf.push(b')');
            }
            self.buf.extend_from_slice(b"/0x");
            w::hex(&mut self.buf, e.to);
            if fields & f::DSO != 0 {
                let r = self.resolve(s.code, s.pid, e.to, s.time);
                self.buf.push(b'(');
                self.dso_name(&r.dso.clone());
                self.buf.push(b')');
            }
            self.buf.extend_from_slice(b"/-/");
            self.buf.push(if e.in_tx { b'X' } else { b'-' });
            self.buf.push(b'/');
            self.buf.push(if e.abort { b'A' } else { b'-' });
            self.buf.extend_from_slice(b"/0/ ");
        }
    }

    /// perf's `sample__fprintf_callchain`: one line per entry, the addresses
    /// file-relative in user-space code.
    fn callchain(&mut self, s: &Sample, st: &Stacks, fields: u64) {
        for &ip in &st.callchain {
            let pid = (s.pid >= 0).then_some(s.pid as u32);
            let m = self.session.mapping(pid, ip, s.time).map(|m| {
                (
                    m.start,
                    m.pgoff,
                    m.kind != pt_decoder::perf::MappingKind::Kernel,
                )
            });
            let r = self.resolve(s.code, s.pid, ip, s.time);
            let addr = match m {
                Some((start, pgoff, true)) => ip.wrapping_sub(start).wrapping_add(pgoff),
                _ => ip,
            };
            self.buf.push(b'\t');
            w::hex_w(&mut self.buf, addr, 16);
            if fields & f::SYM != 0 {
                self.buf.push(b' ');
                match &r.sym {
                    Some((name, off)) => {
                        self.buf.extend_from_slice(name.as_bytes());
                        if fields & f::SYMOFFSET != 0 {
                            self.buf.extend_from_slice(b"+0x");
                            w::hex(&mut self.buf, *off);
                        }
                    }
                    None => self.buf.extend_from_slice(b"[unknown]"),
                }
            }
            if fields & f::DSO != 0 {
                self.buf.extend_from_slice(b" (");
                self.dso_name(&r.dso.clone());
                self.buf.push(b')');
            }
            self.buf.push(b'\n');
        }
    }

    /// A JSON string.
    fn json_str(&mut self, v: &str) {
        let b = &mut self.buf;
        b.push(b'"');
        for c in v.chars() {
            match c {
                '"' => b.extend_from_slice(b"\\\""),
                '\\' => b.extend_from_slice(b"\\\\"),
                c if (c as u32) < 0x20 => {
                    b.extend_from_slice(b"\\u00");
                    b.push(b"0123456789abcdef"[(c as usize) >> 4]);
                    b.push(b"0123456789abcdef"[(c as usize) & 15]);
                }
                c => {
                    let mut t = [0u8; 4];
                    b.extend_from_slice(c.encode_utf8(&mut t).as_bytes());
                }
            }
        }
        b.push(b'"');
    }

    fn json_key(&mut self, k: &str) {
        self.buf.extend_from_slice(b",\"");
        self.buf.extend_from_slice(k.as_bytes());
        self.buf.extend_from_slice(b"\":");
    }

    fn json_addr(&mut self, key: &str, s: &Sample, a: u64) {
        self.json_key(key);
        self.buf.extend_from_slice(b"\"0x");
        w::hex(&mut self.buf, a);
        self.buf.push(b'"');
        let r = self.resolve(s.code, s.pid, a, s.time);
        if let Some((name, off)) = &r.sym {
            self.json_key(&format!("{key}_sym"));
            self.json_str(&name.clone());
            self.json_key(&format!("{key}_symoff"));
            w::dec(&mut self.buf, *off);
        }
        self.json_key(&format!("{key}_dso"));
        self.json_str(&r.dso.clone());
    }

    /// One sample as a JSON object on a line (`--json`): every field perf can
    /// print for it, whatever `-F` says.
    pub fn json(&mut self, s: &Sample, st: &Stacks) {
        self.buf.extend_from_slice(b"{\"event\":");
        self.json_str(s.kind.name());
        let comm = self.comm(s.tid, s.time);
        if let Some(c) = comm {
            self.json_key("comm");
            self.json_str(c);
        }
        for (k, v) in [("pid", s.pid), ("tid", s.tid), ("cpu", s.cpu)] {
            self.json_key(k);
            w::int(&mut self.buf, i64::from(v));
        }
        if let Some(t) = s.time {
            self.json_key("time");
            w::dec(&mut self.buf, t);
        }
        self.json_key("period");
        w::dec(&mut self.buf, s.period);
        self.json_addr("ip", s, s.ip);
        if s.kind == Kind::Branches {
            self.json_addr("addr", s, s.addr);
        }
        self.json_key("flags");
        let fs = flags::to_string(s.flags);
        self.json_str(fs.trim_end());
        if s.insn_len != 0 {
            self.json_key("insn");
            self.buf.push(b'"');
            for &x in &s.insn[..usize::from(s.insn_len).min(16)] {
                self.buf.push(b"0123456789abcdef"[usize::from(x >> 4)]);
                self.buf.push(b"0123456789abcdef"[usize::from(x & 15)]);
            }
            self.buf.push(b'"');
        }
        if s.cyc_cnt != 0 {
            self.json_key("insn_cnt");
            w::dec(&mut self.buf, s.insn_cnt);
            self.json_key("cyc_cnt");
            w::dec(&mut self.buf, s.cyc_cnt);
        }
        if s.kind.is_synth() {
            self.json_key("payload");
            w::dec(&mut self.buf, s.payload);
        }
        if !st.callchain.is_empty() {
            self.json_key("callchain");
            self.buf.push(b'[');
            for (i, ip) in st.callchain.iter().enumerate() {
                if i > 0 {
                    self.buf.push(b',');
                }
                self.buf.extend_from_slice(b"\"0x");
                w::hex(&mut self.buf, *ip);
                self.buf.push(b'"');
            }
            self.buf.push(b']');
        }
        if !st.branches.is_empty() {
            self.json_key("brstack");
            self.buf.push(b'[');
            for (i, e) in st.branches.iter().enumerate() {
                if i > 0 {
                    self.buf.push(b',');
                }
                self.buf.extend_from_slice(b"{\"from\":\"0x");
                w::hex(&mut self.buf, e.from);
                self.buf.extend_from_slice(b"\",\"to\":\"0x");
                w::hex(&mut self.buf, e.to);
                self.buf.extend_from_slice(b"\"}");
            }
            self.buf.push(b']');
        }
        self.buf.extend_from_slice(b"}\n");
    }

    /// A decoder error as a JSON object on a line.
    pub fn json_error(&mut self, e: &TraceError) {
        self.buf
            .extend_from_slice(b"{\"event\":\"error\",\"code\":");
        w::dec(&mut self.buf, u64::from(e.code));
        self.json_key("msg");
        self.json_str(e.msg);
        for (k, v) in [("pid", e.pid), ("tid", e.tid), ("cpu", e.cpu)] {
            self.json_key(k);
            w::int(&mut self.buf, i64::from(v));
        }
        self.json_key("time");
        w::dec(&mut self.buf, e.time);
        self.json_key("ip");
        self.buf.extend_from_slice(b"\"0x");
        w::hex(&mut self.buf, e.ip);
        self.buf.extend_from_slice(b"\"}\n");
    }

    /// One sample's line, without call chain or branch stack.
    pub fn sample(&mut self, s: &Sample) {
        self.sample_with(s, &Stacks::default());
    }

    /// One sample's line (and lines of its call chain).
    pub fn sample_with(&mut self, s: &Sample, st: &Stacks) {
        let t = if s.kind.is_synth() {
            OutType::Synth
        } else {
            OutType::Hardware
        };
        let out = self.sel.out[t as usize];
        let fields = out.fields;
        if fields == 0 {
            return;
        }
        self.start(fields, s);
        let b = &mut self.buf;
        if fields & f::PERIOD != 0 {
            w::dec_w(b, s.period, 10);
            b.push(b' ');
        }
        if fields & f::EVNAME != 0 {
            let name = self
                .names
                .iter()
                .find(|(k, _)| *k == s.kind)
                .map_or(&b"[unknown]"[..], |(_, n)| n.as_slice());
            w::str_w(b, name, self.name_width);
            b.extend_from_slice(b": ");
        }
        if self.sel.flags {
            // "  %-21s ", each flag combination formatted once.
            let i = match self.flag_texts.iter().position(|(k, _)| *k == s.flags) {
                Some(i) => i,
                None => {
                    let t = format!("  {:<21} ", flags::to_string(s.flags)).into_bytes();
                    self.flag_texts.push((s.flags, t));
                    self.flag_texts.len() - 1
                }
            };
            self.buf.extend_from_slice(&self.flag_texts[i].1);
        }
        if s.kind == Kind::Branches {
            // perf_sample__fprintf_bts
            if fields & f::CALLINDENT != 0 {
                self.callindent(s, fields);
            }
            if fields & f::IP != 0 {
                self.buf.push(b' ');
                w::hex_w(&mut self.buf, s.ip, 16);
                if fields & (f::SYM | f::DSO) != 0 {
                    let r = self.resolve(s.code, s.pid, s.ip, s.time);
                    self.sym_part(&r, fields);
                }
            }
            if fields & f::ADDR != 0 || (self.hw_type & st::ADDR != 0 && !out.user_set) {
                self.buf.extend_from_slice(b" => ");
                w::hex_w(&mut self.buf, s.addr, 16);
                if fields & (f::SYM | f::DSO) != 0 {
                    let r = self.resolve(s.code, s.pid, s.addr, s.time);
                    self.sym_part(&r, fields);
                }
            }
            self.ipc(fields, s);
            self.insn(fields, s);
            self.buf.push(b'\n');
            return;
        }
        if t == OutType::Synth && fields & f::SYNTH != 0 {
            self.synth(s, self.cbr2khz);
        }
        if fields & f::ADDR != 0 {
            w::hex_w(&mut self.buf, s.addr, 16);
        }
        if fields & f::IP != 0 {
            if self.callchains {
                self.buf.push(b'\n');
                self.callchain(s, st, fields);
            } else {
                self.buf.push(b' ');
                w::hex_w(&mut self.buf, s.ip, 16);
                if fields & (f::SYM | f::DSO) != 0 {
                    let r = self.resolve(s.code, s.pid, s.ip, s.time);
                    self.sym_part(&r, fields);
                }
            }
        }
        if fields & f::BRSTACK != 0 {
            self.brstack(s, st, fields);
        }
        if fields & (f::INSN | f::INSNLEN | f::IPC) != 0 {
            self.insn(fields, s);
            self.ipc(fields, s);
        }
        self.buf.push(b'\n');
    }

    /// A decoder error's line (perf's `perf_event__fprintf_auxtrace_error`).
    pub fn error(&mut self, e: &TraceError) {
        let b = &mut self.buf;
        b.extend_from_slice(b" instruction trace error type 1");
        if e.time != 0 {
            b.extend_from_slice(b" time ");
            w::dec(b, e.time / 1_000_000_000);
            b.push(b'.');
            w::dec_z(b, e.time % 1_000_000_000, 9);
        } else {
            b.extend_from_slice(b" time 0");
        }
        b.extend_from_slice(b" cpu ");
        w::int(b, i64::from(e.cpu));
        b.extend_from_slice(b" pid ");
        w::int(b, i64::from(e.pid));
        b.extend_from_slice(b" tid ");
        w::int(b, i64::from(e.tid));
        b.extend_from_slice(b" ip ");
        if e.ip == 0 {
            b.push(b'0');
        } else {
            b.extend_from_slice(b"0x");
            w::hex(b, e.ip);
        }
        b.extend_from_slice(b" code ");
        w::dec(b, u64::from(e.code));
        b.extend_from_slice(b": ");
        b.extend_from_slice(e.msg.as_bytes());
        b.push(b'\n');
    }
}
