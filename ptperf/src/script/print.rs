//! perf script's lines (builtin-script.c's `process_event` and
//! `perf_sample__fprintf_bts`), written by hand into one buffer: no `format!` per
//! line.

use pt_perf::session::Session;
use pt_perf_data::{AttrFlags, PerfFile};

use super::fields::{f, OutType, Selection};
use super::pair_texts::{Miss, PairKey, PairTexts};
use super::{Plan, TimeFrom};
use pt_elf::Symbols;
use pt_perf::decode::{PlainInsn, Step};
use pt_perf::itrace::SynthOpts;
use pt_perf::sample::{flags, Kind, Sample, TraceError};
use pt_perf::synth::Stacks;

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

    /// perf's "%16" PRIx64 of `ip`, given `last`, an address and its text
    /// (which becomes `ip`'s): an address mostly differs from the one before
    /// in its last two or four digits, and only those are written anew.
    #[inline]
    pub fn hex16_after(last: &mut (u64, [u8; 16]), ip: u64) -> [u8; 16] {
        let changed = ip ^ last.0;
        let d = &mut last.1;
        if ip < 0x1_0000 || changed >= 0x1_0000 {
            *d = hex16_spaced(ip);
        } else {
            if changed >= 0x100 {
                d[12..14].copy_from_slice(&HEX2[((ip >> 8) & 0xff) as usize]);
            }
            d[14..].copy_from_slice(&HEX2[(ip & 0xff) as usize]);
        }
        last.0 = ip;
        *d
    }

    /// The two hex digits of each byte value.
    pub static HEX2: [[u8; 2]; 256] = {
        let mut t = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = [HEX[i >> 4], HEX[i & 15]];
            i += 1;
        }
        t
    };

    /// The 8 hex digits of `h` as a little-endian word of ASCII bytes.
    #[inline]
    pub fn eight(h: u32) -> u64 {
        let mut x = u64::from(h);
        x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
        x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
        x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
        // Bytes hold nibbles, least significant first; digits above 9 get
        // 'a' - '0' - 10 more.
        let over9 = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        (x + 0x3030_3030_3030_3030 + over9 * 39).swap_bytes()
    }

    /// `eight(h)` with its leading zeros (all but the last) as spaces.
    #[inline]
    pub fn eight_spaced(h: u32) -> u64 {
        let d = eight(h);
        // The first `blanks` bytes (the low ones of the word) become spaces.
        let blanks = (h.leading_zeros() / 4).min(7);
        let low = (1u64 << (8 * blanks)) - 1;
        (d & !low) | (0x2020_2020_2020_2020 & low)
    }

    /// perf's "%16" PRIx64: the digits, leading zeros as spaces.
    #[inline]
    pub fn hex16_spaced(v: u64) -> [u8; 16] {
        let (hi, lo) = ((v >> 32) as u32, v as u32);
        let mut out = [b' '; 16];
        if hi != 0 {
            out[..8].copy_from_slice(&eight_spaced(hi).to_le_bytes());
            out[8..].copy_from_slice(&eight(lo).to_le_bytes());
        } else {
            out[8..].copy_from_slice(&eight_spaced(lo).to_le_bytes());
        }
        out
    }

    /// `%*x` (right-aligned in `width`).
    #[inline]
    pub fn hex_w(buf: &mut Vec<u8>, v: u64, width: usize) {
        if width == 16 {
            buf.extend_from_slice(&hex16_spaced(v));
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

    /// A short text kept padded to whole 32-byte chunks, so that appending it
    /// copies fixed-size chunks (a few vector moves) instead of calling memcpy
    /// for a length known only at run time.
    #[derive(Clone, Default)]
    pub struct Padded {
        /// The text, then padding up to a multiple of 32 bytes.
        bytes: Vec<u8>,
        /// The text's length.
        n: usize,
    }

    impl Padded {
        /// Replaces the text by what `f` writes.
        pub fn set(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
            self.bytes.clear();
            f(&mut self.bytes);
            self.n = self.bytes.len();
            let padded = self.n.div_ceil(32).max(1) * 32;
            self.bytes.resize(padded, b' ');
        }

        /// Appends the text to `buf`.
        #[inline]
        pub fn put(&self, buf: &mut Vec<u8>) {
            let total = self.bytes.len();
            buf.reserve(total);
            let start = buf.len();
            let src = self.bytes.as_ptr();
            // SAFETY: `reserve` made room for `total` bytes after `start`; `bytes`
            // holds `total` bytes (whole 32-byte chunks); a vector's spare
            // capacity never overlaps another vector's bytes; the chunks copied
            // cover the `n` bytes `set_len` makes part of `buf`.
            unsafe {
                let dst = buf.as_mut_ptr().add(start);
                let mut i = 0;
                while i < total {
                    std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), 32);
                    i += 32;
                }
                buf.set_len(start + self.n);
            }
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

    /// `%0*u` for `v` below `10^n` (`n` at most 10), two digits at a time.
    #[inline]
    pub fn digits(buf: &mut Vec<u8>, v: u64, n: usize) {
        let mut tmp = [b'0'; 10];
        let mut i = 10;
        let mut v = v;
        while v >= 100 && i >= 2 {
            let r = (v % 100) as usize;
            v /= 100;
            i -= 2;
            tmp[i..i + 2].copy_from_slice(&PAIRS[2 * r..2 * r + 2]);
        }
        if i >= 2 {
            let r = v as usize % 100;
            tmp[i - 2..i].copy_from_slice(&PAIRS[2 * r..2 * r + 2]);
        }
        buf.extend_from_slice(&tmp[10 - n.min(10)..]);
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
        fn hex16_after_is_printf() {
            // Walks of small steps (one digit pair or two changing), jumps, and
            // addresses below 0x10000 where the leading blanks move.
            let mut last = (u64::MAX, [b' '; 16]);
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let mut ip: u64 = 0x7fff_0000_fff0;
            for i in 0..50_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ip = match i % 97 {
                    0 => x,
                    1 => x & 0x1_ffff,
                    2 => x & 0xfff,
                    _ => ip.wrapping_add(x % 17),
                };
                let text = super::hex16_after(&mut last, ip);
                assert_eq!(
                    std::str::from_utf8(&text).unwrap(),
                    format!("{ip:16x}"),
                    "{i}"
                );
            }
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
                    super::digits(&mut b, v % 1_000_000, 6);
                    super::digits(&mut b, v % 1_000_000_000, 9);
                    let want = format!(
                        "{v}{:7}{:5}{:06}{:06}{:09}",
                        v % 1_000_000,
                        -((v % 100_000) as i64),
                        v % 1000,
                        v % 1_000_000,
                        v % 1_000_000_000
                    );
                    assert_eq!(String::from_utf8(b).unwrap(), want);
                }
            }
        }
    }
}

/// perf's `PERF_TYPE_SYNTH`: the type of events perf synthesizes.
const PERF_TYPE_SYNTH: u32 = 4_000_000_000;

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

/// A resolved address by (code image, pid, address), with its printed
/// `sym+0xoff (dso)` text for the fields it was last printed with (the text's
/// buffer is reused when the slot is taken by another address).
#[derive(Clone)]
struct CacheEntry {
    key: (u64, i32, u64),
    r: Resolved,
    text: w::Padded,
    /// The `SYM | SYMOFFSET | DSO` bits `text` is for (`u64::MAX`: none yet).
    text_fields: u64,
}

/// `sym+0xoff (dso)` as perf's `sample__fprintf_sym` writes it after the IP.
fn write_sym_part(b: &mut Vec<u8>, r: &Resolved, fields: u64, pad_dso: usize) {
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
        write_dso_name(b, &r.dso, pad_dso);
        b.push(b')');
    }
}

/// A dso name as perf writes it (padded to `pad` with `--call-trace`).
fn write_dso_name(b: &mut Vec<u8>, dso: &str, pad: usize) {
    if pad != 0 {
        let n = dso.len().min(pad - 1);
        b.extend_from_slice(&dso.as_bytes()[..n]);
        w::pad(b, pad - n);
    } else {
        b.extend_from_slice(dso.as_bytes());
    }
}

/// Sets of two branch-pair texts in [`Printer`]'s cache: 2^this.
const PAIR_SETS_BITS: u32 = 15;
/// Slots of [`Printer`]'s cache of resolved addresses: 2^this.
const SYM_SLOTS_BITS: u32 = 16;
/// Bytes of branch-pair texts kept at most (some 70,000 branches' texts).
const PAIR_ARENA: usize = 16 << 20;

/// A mapping's dso name and symbols.
struct MapSyms {
    dso: std::rc::Rc<str>,
    table: Option<pt_elf::TableId>,
    /// Where other mappings of the process (or the kernel's) overlap it:
    /// between these, every address resolves to it (for one code image).
    holes: Vec<(u64, u64)>,
}

/// The stretch of addresses the last instruction sample's `sym+0xoff (dso)`
/// came from: same code image, process, mapping and symbol answer (perf's
/// lookup gives the span), so the text is `head`, the offset, `tail`.
struct SpanRun {
    stamp: u64,
    pid: i32,
    /// The IPs it holds for.
    lo: u64,
    hi: u64,
    /// IP minus this is the address in the symbol's space, minus the
    /// symbol's start the offset (`None`: no offset printed).
    off_base: Option<u64>,
    /// The `SYM | SYMOFFSET | DSO` bits the texts are for.
    mask: u64,
    head: w::Padded,
    tail: w::Padded,
}

/// The mapping the last span run was made in: (code image, pid, the IPs
/// between its holes around the last IP, mapping key, start, file offset).
type MapRun = (u64, i32, u64, u64, usize, u64, u64);

/// The part of a line before the time that stays while the thread, CPU and
/// fields do: (tid, pid, cpu, fields, unpadded comm, the comm's text pointer).
type PrefixKey = (i32, i32, i32, u64, bool, usize);
/// What a line's head depends on: thread, time as shown (ns or us), pid, CPU,
/// period, event, flags (if shown) and fields.
type HeadKey = (i32, Option<u64>, i32, i32, u64, Kind, u32, u64);

/// Prints samples as perf script does.
pub struct Printer<'s, 'a> {
    session: &'s Session<'a>,
    sel: Selection,
    ns: bool,
    /// What the time column counts from, and the sample time it counts
    /// from now (the first's or the previous one's).
    time_from: TimeFrom,
    time_base: Option<u64>,
    /// The time the line being written shows.
    line_time: u64,
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
    /// Resolved addresses by (code image, pid, address): a direct-mapped
    /// table of indices into `entries` plus one (0: empty). Zeroed memory is
    /// mapped lazily, so the table costs only the pages used.
    slots: Vec<u32>,
    entries: Vec<CacheEntry>,
    /// Branch lines' texts from the source address on, by (code image, pid,
    /// source, target), with the fields they were printed with.
    pairs: PairTexts,
    /// Dso names and symbols by mapping (its address in the session).
    map_syms: std::collections::HashMap<usize, MapSyms>,
    /// The last instruction sample's span (see [`SpanRun`]) and mapping.
    span_run: Option<SpanRun>,
    map_run: Option<MapRun>,
    /// The last symbol named: (table, start, name).
    last_sym: Option<(usize, u64, std::rc::Rc<str>)>,
    /// Hardware events print `-F ip` only (no call chains, no flags).
    ip_only: bool,
    /// By event index: the recorded samples of this event are printed as
    /// branches (perf's `is_bts_event`).
    bts: Vec<bool>,
    /// The upper half of the last IP printed by the `-F ip` path, and its text.
    /// The last address printed with "%16x" and its text.
    ip_text: (u64, [u8; 16]),
    /// The last line's text before the time, and what it depends on.
    prefix: w::Padded,
    prefix_key: Option<PrefixKey>,
    /// The last time's whole seconds and their `%5lu.` text.
    time_secs: u64,
    time_head: w::Padded,
    /// The last line's period and event columns, for (period, kind).
    mid: w::Padded,
    mid_key: Option<(u64, Kind)>,
    /// The last line's columns before its addresses, and what they depend on.
    head: w::Padded,
    head_key: Option<HeadKey>,
    /// Source lines (`-F srcline,srcfile`), loaded on first use.
    srclines: Option<pt_elf::srcline::SrcLines>,
    /// srcline texts by (code image, pid, address) (`None`: perf prints none).
    srcline_cache: std::collections::HashMap<(u64, i32, u64), Option<std::rc::Rc<str>>>,
    /// Source files with their directories (`--full-source-path`).
    pub full_source_path: bool,
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
    ) -> Result<Self, crate::Error> {
        Self::checked(session, perf, plan, opts).map_err(crate::Error::Usage)
    }

    fn checked(
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
        // A recording of samples (no trace): the fields are checked against
        // its first sampling event's (perf checks the first event of each
        // type; dummy and PMU events such as intel_pt// do not sample).
        let sampler = (!session.traced()).then(|| {
            perf.events()
                .iter()
                .find(|e| e.attr.type_ < 6 && !(e.attr.type_ == 1 && e.attr.config == 9))
                .map(|e| (e.attr, e.name.clone().unwrap_or_default()))
                .unwrap_or_default()
        });
        let sampling = sampler.as_ref().map(|(a, _)| *a);
        let mut base = match sampling {
            Some(a) => a.sample_type.0 & st::MASK,
            None => pt.sample_type.0 & st::MASK | st::IP | st::TID | st::PERIOD,
        };
        if timeless {
            base &= !st::TIME;
        } else if sampling.is_none() {
            base |= st::TIME;
        }
        if sampling.is_none() && !session.per_cpu() {
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
        // A recording of samples synthesizes nothing (perf ignores --itrace
        // there).
        let synthesized = if sampling.is_some() {
            SynthOpts::default()
        } else {
            *opts
        };
        if synthesized.branches {
            add(Kind::Branches, true);
        }
        if synthesized.instructions {
            add(Kind::Instructions, true);
        }
        if synthesized.transactions {
            add(Kind::Transactions, false);
        }
        if synthesized.ptwrites {
            add(Kind::Ptwrite, false);
        }
        if synthesized.pwr_events {
            add(Kind::Cbr, false);
            add(Kind::Psb, false);
            if pwr_evt {
                add(Kind::Mwait, false);
                add(Kind::Pwre, false);
                add(Kind::Exstop, false);
                add(Kind::Pwrx, false);
            }
        }
        // Recorded samples are printed by their event's name, as they are;
        // a BTS-like event's (branches sampled at every branch) as branches.
        let mut bts = Vec::new();
        if sampling.is_some() {
            for (i, e) in perf.events().iter().enumerate() {
                let name = e.name.clone().unwrap_or_default();
                names.push((Kind::Recorded(i as u16), name.into_bytes()));
                bts.push(pt_perf::recorded::is_bts_event(&e.attr));
            }
        }
        let recorded_chains = sampling.is_some()
            && perf
                .events()
                .iter()
                .any(|e| e.attr.sample_type.has(pt_perf_data::SampleType::CALLCHAIN));
        let name_width = evnames.iter().map(String::len).max().unwrap_or(0);

        // The first hardware event decides which default fields stay
        // (perf's evsel__check_attr).
        let hw_type = if opts.branches && sampling.is_none() {
            base | st::ADDR
        } else {
            base
        };
        let synth_type = base & !st::PERIOD;
        let mut sel = plan.sel;
        let first_hw = match &sampler {
            Some((_, name)) => Some(name.clone()),
            None => names
                .iter()
                .find(|(k, _)| !k.is_synth())
                .map(|(_, n)| String::from_utf8_lossy(n).into_owned()),
        };
        let first_synth = names
            .iter()
            .find(|(k, _)| k.is_synth())
            .map(|(_, n)| String::from_utf8_lossy(n).into_owned());
        // (output type, sample type, event name, whether fields it lacks are
        // dropped from the output, whether user-set ADDR and CPU pass).
        let mut checked: Vec<(OutType, u64, String, bool, bool)> = Vec::new();
        if let Some((attr, name)) = &sampler {
            // perf checks the first event of each type (hardware, software,
            // …, PMUs such as intel_pt// last), dummy events aside, against
            // the one field list; only the sampling event's lacks matter to
            // what is printed. User-set ADDR and CPU pass where the file has
            // the AUXTRACE feature.
            let allow = perf
                .feature_ids()
                .contains(&pt_perf_data::feature_id::AUXTRACE);
            let order = |t: u32| if t == PERF_TYPE_SYNTH { 6 } else { t.min(7) };
            for rank in 0..8 {
                let first = perf.events().iter().find(|e| {
                    order(e.attr.type_) == rank && !(e.attr.type_ == 1 && e.attr.config == 9)
                });
                if let Some(e) = first {
                    let is_sampler = e.attr == *attr;
                    let stype = if is_sampler {
                        base
                    } else {
                        e.attr.sample_type.0 & st::MASK
                    };
                    let n = if is_sampler {
                        name.clone()
                    } else {
                        e.name.clone().unwrap_or_default()
                    };
                    checked.push((OutType::Hardware, stype, n, is_sampler, allow));
                }
            }
        } else {
            checked.extend(first_hw.map(|n| (OutType::Hardware, hw_type, n, true, true)));
            checked.extend(first_synth.map(|n| (OutType::Synth, synth_type, n, true, true)));
        }
        for (t, stype, name, remove, allow) in checked {
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
                    if allow_user && allow {
                        continue;
                    }
                    return Err(format!(
                        "Samples for '{name}' event do not have {msg} attribute set. Cannot print '{fname}' field."
                    ));
                }
                if remove {
                    o.fields &= !field;
                }
            }
            if o.fields & f::SYMOFFSET != 0 && o.fields & f::SYM == 0 {
                return Err("Display of offsets requested but symbol is notselected.".into());
            }
            if o.fields & (f::SRCLINE | f::SRCFILE) != 0 && o.fields & f::IP == 0 {
                return Err("Display of source line number requested but sample IP is not\nselected. Hence, no address to lookup the source line number.".into());
            }
        }
        Ok(Printer {
            session,
            sel,
            ns: plan.ns,
            time_from: plan.time_from,
            time_base: None,
            line_time: 0,
            name_width,
            names,
            hw_type,
            symbols: Symbols::new(plan.symbols.clone()),
            unknown: "[unknown]".into(),
            dso_names: Default::default(),
            sym_names: Default::default(),
            buf: Vec::with_capacity(1 << 17),
            cbr2khz: 0,
            slots: vec![0; 1 << SYM_SLOTS_BITS],
            entries: Vec::new(),
            map_syms: Default::default(),
            pairs: PairTexts::new(PAIR_SETS_BITS, PAIR_ARENA),
            span_run: None,
            map_run: None,
            last_sym: None,
            ip_text: (u64::MAX, [b' '; 16]),
            ip_only: sel.out[OutType::Hardware as usize].fields == f::IP
                && !opts.callchain
                && !recorded_chains
                && !sel.flags,
            prefix: Default::default(),
            prefix_key: None,
            time_secs: u64::MAX,
            time_head: Default::default(),
            mid: Default::default(),
            mid_key: None,
            head: Default::default(),
            head_key: None,
            comm_cache: None,
            spacing: 0,
            flag_texts: Default::default(),
            callchains: opts.callchain || recorded_chains,
            bts,
            pad_dso: if plan.pad_dso { 50 } else { 0 },
            srclines: None,
            srcline_cache: Default::default(),
            full_source_path: false,
        })
    }

    /// [`Self::resolve_uncached`] through a direct-mapped cache keyed by the code
    /// image the sample ran in (its mappings do not change while it is the same)
    /// and the address.
    pub(crate) fn resolve(&mut self, stamp: u64, pid: i32, ip: u64, time: Option<u64>) -> Resolved {
        let slot = Self::slot(stamp, ip);
        let i = self.fill(slot, stamp, pid, ip, time);
        self.entries[i].r.clone()
    }

    /// The cache slot of (code image, pid, address).
    #[inline]
    fn slot(stamp: u64, ip: u64) -> usize {
        ((ip ^ stamp.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> (64 - SYM_SLOTS_BITS)) as usize
    }

    /// The entry of (stamp, pid, ip), made if `slot` holds another.
    #[inline(always)]
    fn fill(&mut self, slot: usize, stamp: u64, pid: i32, ip: u64, time: Option<u64>) -> usize {
        match self.slots[slot].checked_sub(1) {
            Some(i) if self.entries[i as usize].key == (stamp, pid, ip) => i as usize,
            _ => self.fill_miss(slot, stamp, pid, ip, time),
        }
    }

    #[cold]
    #[inline(never)]
    fn fill_miss(
        &mut self,
        slot: usize,
        stamp: u64,
        pid: i32,
        ip: u64,
        time: Option<u64>,
    ) -> usize {
        let r = self.resolve_uncached(pid, ip, time);
        let key = (stamp, pid, ip);
        match self.slots[slot].checked_sub(1) {
            Some(i) => {
                // The slot's entry (and its text's buffer) is reused.
                let e = &mut self.entries[i as usize];
                (e.key, e.r, e.text_fields) = (key, r, u64::MAX);
                i as usize
            }
            None => {
                self.entries.push(CacheEntry {
                    key,
                    r,
                    text: Default::default(),
                    text_fields: u64::MAX,
                });
                self.slots[slot] = self.entries.len() as u32;
                self.entries.len() - 1
            }
        }
    }

    /// Appends `ip`'s `sym+0xoff (dso)` text for `fields`, formatted once per
    /// cached address.
    #[inline]
    fn sym_text(&mut self, stamp: u64, pid: i32, ip: u64, time: Option<u64>, fields: u64) {
        let slot = Self::slot(stamp, ip);
        let i = self.fill(slot, stamp, pid, ip, time);
        let mask = fields & (f::SYM | f::SYMOFFSET | f::DSO);
        let e = &mut self.entries[i];
        if e.text_fields != mask {
            let pad = self.pad_dso;
            let r = &e.r;
            e.text.set(|b| write_sym_part(b, r, mask, pad));
            e.text_fields = mask;
        }
        e.text.put(&mut self.buf);
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
        let addr = ip.wrapping_sub(m.start).wrapping_add(m.pgoff);
        // The session's mappings do not move: one entry per mapping holds its
        // dso name and symbols (no file search, no path hashing per miss).
        let key = m as *const pt_perf::session::Mapping as usize;
        if !self.map_syms.contains_key(&key) {
            let ms = self.map_syms_of(m);
            self.map_syms.insert(key, ms);
        }
        let Some(ms) = self.map_syms.get(&key) else {
            unreachable!("inserted above")
        };
        let dso = ms.dso.clone();
        let Some(tkey) = ms.table else {
            return Resolved { sym: None, dso };
        };
        let table = self.symbols.table(tkey);
        let sym = match table.find(addr) {
            Some(sy) => {
                let off = addr - sy.start;
                let start = sy.start;
                let name = match &self.last_sym {
                    Some((k, st, n)) if *k == tkey && *st == start => n.clone(),
                    _ => {
                        let n = match self.sym_names.get(&(tkey, start)) {
                            Some(n) => n.clone(),
                            None => {
                                let n: std::rc::Rc<str> = sy.name().into();
                                self.sym_names.insert((tkey, start), n.clone());
                                n
                            }
                        };
                        self.last_sym = Some((tkey, start, n.clone()));
                        n
                    }
                };
                Some((name, off))
            }
            None => None,
        };
        Resolved { sym, dso }
    }

    /// A mapping's dso name, symbols and holes.
    fn map_syms_of(&mut self, m: &pt_perf::session::Mapping) -> MapSyms {
        let dso = match self.dso_names.get(&m.filename) {
            Some(d) => d.clone(),
            None => {
                let d: std::rc::Rc<str> = m.dso_name().into();
                self.dso_names.insert(m.filename.clone(), d.clone());
                d
            }
        };
        let table = self.session.symbol_table(m, &mut self.symbols);
        let end = m.start.saturating_add(m.len);
        let holes = self
            .session
            .mappings()
            .iter()
            .filter(|o| {
                !std::ptr::eq(*o, m)
                    && (o.pid == m.pid || o.pid.is_none() || m.pid.is_none())
                    && o.start < end
                    && m.start < o.start.saturating_add(o.len)
            })
            .map(|o| (o.start, o.start.saturating_add(o.len)))
            .collect();
        MapSyms { dso, table, holes }
    }

    /// An instruction sample's `sym+0xoff (dso)` from the last span's texts,
    /// if its IP is in that span; false if not.
    #[inline]
    fn span_text(&mut self, s: &Sample, fields: u64) -> bool {
        let mask = fields & (f::SYM | f::SYMOFFSET | f::DSO);
        let Some(r) = &self.span_run else {
            return false;
        };
        if r.stamp != s.code || r.pid != s.pid || s.ip < r.lo || s.ip >= r.hi || r.mask != mask {
            return false;
        }
        r.head.put(&mut self.buf);
        if let Some(base) = r.off_base {
            w::hex(&mut self.buf, s.ip.wrapping_sub(base));
        }
        r.tail.put(&mut self.buf);
        true
    }

    /// Makes the span of `s.ip` the one [`Self::span_text`] tries first and
    /// prints its text; false (nothing printed) where it cannot (no mapping, an
    /// IP where mappings overlap).
    #[inline(never)]
    fn new_span(&mut self, s: &Sample, fields: u64) -> bool {
        let mask = fields & (f::SYM | f::SYMOFFSET | f::DSO);
        // The mapping: the last one while the IP stays between its holes.
        let hit = matches!(self.map_run, Some((st, pid, lo, hi, ..))
            if st == s.code && pid == s.pid && s.ip >= lo && s.ip < hi);
        if !hit {
            let ses = self.session;
            let pid = (s.pid >= 0).then_some(s.pid as u32);
            let Some(m) = ses.mapping(pid, s.ip, s.time) else {
                return false;
            };
            let key = m as *const pt_perf::session::Mapping as usize;
            if !self.map_syms.contains_key(&key) {
                let ms = self.map_syms_of(m);
                self.map_syms.insert(key, ms);
            }
            let Some(ms) = self.map_syms.get(&key) else {
                return false;
            };
            let (mut lo, mut hi) = (m.start, m.start.saturating_add(m.len));
            for &(a, b) in &ms.holes {
                if a <= s.ip && s.ip < b {
                    return false;
                }
                if b <= s.ip {
                    lo = lo.max(b);
                } else {
                    hi = hi.min(a);
                }
            }
            self.map_run = Some((s.code, s.pid, lo, hi, key, m.start, m.pgoff));
        }
        let Some((_, _, mlo, mhi, key, start, pgoff)) = self.map_run else {
            return false;
        };
        let Some(ms) = self.map_syms.get(&key) else {
            return false;
        };
        // IP to the symbol space and back.
        let to_addr = pgoff.wrapping_sub(start);
        let addr = s.ip.wrapping_add(to_addr);
        let (span, name, sym_start) = match ms.table {
            Some(t) => {
                let table = self.symbols.table(t);
                let l = table.lookup(addr);
                match l.sym {
                    Some(id) => {
                        let sy = table.symbol(id);
                        ((l.start, l.end), Some(sy.name()), sy.start)
                    }
                    None => ((l.start, l.end), None, 0),
                }
            }
            None => ((0, u64::MAX), None, 0),
        };
        // The span in IPs (wrapping arithmetic as the address's).
        let lo = mlo.max(span.0.wrapping_sub(to_addr).min(s.ip));
        let hi = if span.1 == u64::MAX {
            mhi
        } else {
            mhi.min(span.1.wrapping_sub(to_addr).max(s.ip.saturating_add(1)))
        };
        let mut run = self.span_run.take().unwrap_or(SpanRun {
            stamp: 0,
            pid: 0,
            lo: 0,
            hi: 0,
            off_base: None,
            mask: 0,
            head: Default::default(),
            tail: Default::default(),
        });
        run.head.set(|b| {
            if mask & f::SYM != 0 {
                b.push(b' ');
                match name {
                    Some(n) => {
                        b.extend_from_slice(n.as_bytes());
                        if mask & f::SYMOFFSET != 0 {
                            b.extend_from_slice(b"+0x");
                        }
                    }
                    None => b.extend_from_slice(b"[unknown]"),
                }
            }
        });
        let pad = self.pad_dso;
        let dso = &ms.dso;
        run.tail.set(|b| {
            if mask & f::DSO != 0 {
                b.extend_from_slice(b" (");
                write_dso_name(b, dso, pad);
                b.push(b')');
            }
        });
        run.off_base = (name.is_some() && mask & (f::SYM | f::SYMOFFSET) == f::SYM | f::SYMOFFSET)
            .then(|| sym_start.wrapping_sub(to_addr));
        run.stamp = s.code;
        run.pid = s.pid;
        run.lo = lo;
        run.hi = hi;
        run.mask = mask;
        self.span_run = Some(run);
        self.span_text(s, fields)
    }

    /// perf's srcline text of `ip` (`None` where perf prints none: no mapping,
    /// or addr2line's `??:0`), cached per address.
    fn srcline_of(
        &mut self,
        stamp: u64,
        pid: i32,
        ip: u64,
        time: Option<u64>,
    ) -> Option<std::rc::Rc<str>> {
        if let Some(v) = self.srcline_cache.get(&(stamp, pid, ip)) {
            return v.clone();
        }
        let s = self.session;
        let m = s.mapping((pid >= 0).then_some(pid as u32), ip, time);
        let text = m.and_then(|m| {
            let path = s.code_file(m).ok().map(|f| f.path.as_path());
            let bid = m.build_id.filter(|b| b.len > 0);
            let addr = ip.wrapping_sub(m.start).wrapping_add(m.pgoff);
            let full = self.full_source_path;
            let search = self.symbols.options().search.clone();
            self.srclines
                .get_or_insert_with(|| pt_elf::srcline::SrcLines::new(full).with_search(search))
                .srcline(m.dso_name(), path, bid.as_ref().map(|b| b.as_bytes()), addr)
        });
        self.srcline_cache.insert((stamp, pid, ip), text.clone());
        text
    }

    /// The `-F srcline` (and ptperf's `srcfile`) line of `ip`: `prefix` and the
    /// text, or nothing.
    #[inline]
    fn srcline(&mut self, fields: u64, s: &Sample, ip: u64, prefix: &[u8]) {
        if fields & (f::SRCLINE | f::SRCFILE) != 0 {
            self.srcline_text(fields, s, ip, prefix);
        }
    }

    #[inline(never)]
    fn srcline_text(&mut self, fields: u64, s: &Sample, ip: u64, prefix: &[u8]) {
        let Some(text) = self.srcline_of(s.code, s.pid, ip, s.time) else {
            return;
        };
        if fields & f::SRCLINE != 0 {
            self.buf.extend_from_slice(prefix);
            self.buf.extend_from_slice(text.as_bytes());
        }
        if fields & f::SRCFILE != 0 {
            // The file of `file:line`; perf's `short_name[addr]` has none.
            if let Some((file, _)) = text.rsplit_once(':').filter(|_| !text.ends_with(']')) {
                self.buf.extend_from_slice(prefix);
                self.buf.extend_from_slice(file.as_bytes());
            }
        }
    }

    /// The thread's name at `time` (cached for the span the name holds).
    #[inline]
    pub(crate) fn comm(&mut self, tid: i32, time: Option<u64>) -> Option<&'s str> {
        if let (Some((ctid, lo, hi, c)), Some(t)) = (self.comm_cache, time) {
            if ctid == tid && t >= lo && t < hi {
                return c;
            }
        }
        self.comm_lookup(tid, time)
    }

    #[inline(never)]
    fn comm_lookup(&mut self, tid: i32, time: Option<u64>) -> Option<&'s str> {
        if tid < 0 {
            return None;
        }
        let t = time.unwrap_or(0);
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

    /// The time a line shows for a sample at `t` (perf's
    /// `perf_sample__fprintf_start`); called once a line.
    fn shown_time(&mut self, t: u64) -> u64 {
        match self.time_from {
            TimeFrom::Clock => t,
            TimeFrom::FirstSample => t.wrapping_sub(*self.time_base.get_or_insert(t)),
            TimeFrom::PreviousSample => {
                let d = self.time_base.map_or(0, |p| t.wrapping_sub(p));
                self.time_base = Some(t);
                d
            }
        }
    }

    fn time(&mut self, t: u64) {
        let secs = t / 1_000_000_000;
        let ns = t % 1_000_000_000;
        // "%5lu." (also the head of "%12s" of "%lu.%06lu": the seconds take what
        // the 7 characters of ".uuuuuu" leave), formatted when the second changes.
        if secs != self.time_secs {
            self.time_head.set(|b| {
                w::dec_w(b, secs, 5);
                b.push(b'.');
            });
            self.time_secs = secs;
        }
        let b = &mut self.buf;
        self.time_head.put(b);
        if self.ns {
            w::digits(b, ns, 9);
        } else {
            w::digits(b, ns / 1000, 6);
        }
        b.extend_from_slice(b": ");
    }

    /// perf's `perf_sample__fprintf_start`: the columns before the time are
    /// formatted when the thread, CPU or name change, else copied.
    fn start(&mut self, fields: u64, s: &Sample) {
        // Events with call chains (all but branches) have the name unpadded.
        let unpadded = self.callchains && fields & f::IP != 0 && !self.is_branch(s.kind);
        let comm = if fields & f::COMM != 0 {
            self.comm(s.tid, s.time)
        } else {
            None
        };
        let key = (
            s.tid,
            s.pid,
            s.cpu,
            fields,
            unpadded,
            comm.map_or(0, |c| c.as_ptr() as usize ^ c.len().rotate_left(48)),
        );
        if self.prefix_key != Some(key) {
            self.prefix
                .set(|b| Self::write_prefix(b, fields, s, comm, unpadded));
            self.prefix_key = Some(key);
        }
        self.prefix.put(&mut self.buf);
        if fields & f::TIME != 0 {
            self.time(self.line_time);
        }
    }

    /// The comm, pid/tid and cpu columns.
    fn write_prefix(b: &mut Vec<u8>, fields: u64, s: &Sample, comm: Option<&str>, unpadded: bool) {
        if fields & f::COMM != 0 {
            let width = if unpadded { 0 } else { 16 };
            match comm {
                Some(c) => w::str_w(b, c.as_bytes(), width),
                None => {
                    let mut t = vec![b':'];
                    w::int(&mut t, i64::from(s.tid));
                    w::str_w(b, &t, width);
                }
            }
            b.push(b' ');
        }
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
        write_dso_name(&mut self.buf, dso, self.pad_dso);
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
                    m.kind != pt_perf::session::MappingKind::Kernel,
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
            self.srcline(fields, s, ip, b"\n  ");
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
        match s.kind {
            // A recorded sample: its event's name as the file gives it.
            Kind::Recorded(_) => {
                let name = self
                    .names
                    .iter()
                    .find(|(k, _)| *k == s.kind)
                    .map(|(_, n)| String::from_utf8_lossy(n).into_owned())
                    .unwrap_or_default();
                self.json_str(&name);
            }
            k => self.json_str(k.name()),
        }
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

    /// perf's "%16" PRIx64 of `v`, from the last address's text
    /// ([`w::hex16_after`]).
    #[inline]
    fn hex16(&mut self, v: u64) -> [u8; 16] {
        w::hex16_after(&mut self.ip_text, v)
    }

    /// A branch's " ip sym+off (dso)".
    #[inline]
    fn branch_from(&mut self, s: &Sample, fields: u64) {
        let mut t = [b' '; 17];
        t[1..].copy_from_slice(&self.hex16(s.ip));
        self.buf.extend_from_slice(&t);
        if fields & (f::SYM | f::DSO) != 0 {
            self.sym_text(s.code, s.pid, s.ip, s.time, fields);
        }
    }

    /// A branch's " => addr sym+off (dso)".
    #[inline]
    fn branch_to(&mut self, s: &Sample, fields: u64) {
        let mut t = *b" => 0123456789abcdef";
        t[4..].copy_from_slice(&self.hex16(s.addr));
        self.buf.extend_from_slice(&t);
        if fields & (f::SYM | f::DSO) != 0 {
            self.sym_text(s.code, s.pid, s.addr, s.time, fields);
        }
    }

    /// Both parts of a branch's line, through a two-way cache by (code image,
    /// pid, source, target): a loop's branches print the same text again and
    /// again.
    #[inline(always)]
    fn branch_pair(&mut self, s: &Sample, fields: u64) {
        let key = PairKey {
            code: s.code,
            pid: s.pid,
            ip: s.ip,
            addr: s.addr,
        };
        if let Err(miss) = self.pairs.put(&key, fields, &mut self.buf) {
            self.new_pair(s, fields, &key, miss);
        }
    }

    /// [`Printer::branch_pair`]'s text formatted, and kept.
    #[inline(never)]
    fn new_pair(&mut self, s: &Sample, fields: u64, key: &PairKey, miss: Miss) {
        let start = self.buf.len();
        self.branch_from(s, fields);
        self.branch_to(s, fields);
        self.pairs.insert(miss, key, fields, &self.buf[start..]);
    }

    /// `-F ip` lines of a run of instruction samples ([`SampleSink::insns`]):
    /// `false` (nothing written) unless `-F ip` alone is printed for them.
    ///
    /// [`SampleSink::insns`]: pt_perf::synth::SampleSink::insns
    pub fn ip_lines(&mut self, first: &Sample, more: &[PlainInsn]) -> bool {
        if !self.ip_only || first.kind.is_synth() || first.kind == Kind::Branches {
            return false;
        }
        self.ip_run(
            std::iter::once(first.ip).chain(more.iter().map(|p| p.ip)),
            more.len() + 1,
        );
        true
    }

    /// Instruction samples print `-F ip` alone ([`Printer::ip_run`] serves
    /// them).
    pub fn ip_only(&self) -> bool {
        self.ip_only
    }

    /// `-F ip` lines of `n` instruction samples at `ips`.
    #[inline]
    pub fn ip_run(&mut self, ips: impl Iterator<Item = u64>, n: usize) {
        // Fixed 18-byte lines written in place. An address mostly differs from
        // the one before in its last two or four digits: only those are
        // written anew (from a table of digit pairs).
        let start = self.buf.len();
        self.buf.resize(start + 18 * n, b'\n');
        let mut text = self.ip_text;
        for (line, ip) in self.buf[start..].chunks_exact_mut(18).zip(ips) {
            line[0] = b' ';
            line[1..17].copy_from_slice(&w::hex16_after(&mut text, ip));
        }
        self.ip_text = text;
    }

    /// Lines of a run of branch samples ([`SampleSink::branches`]): `false`
    /// (nothing written) unless each line is its head and the branch's two
    /// addresses with their symbols (perf's default branch fields, or fewer),
    /// as a line of its own would be written.
    ///
    /// [`SampleSink::branches`]: pt_perf::synth::SampleSink::branches
    pub fn branch_lines(&mut self, like: &Sample, steps: &[Step]) -> bool {
        let out = self.sel.out[OutType::Hardware as usize];
        let fields = out.fields;
        let show_addr = fields & f::ADDR != 0 || (self.hw_type & st::ADDR != 0 && !out.user_set);
        let other =
            f::CALLINDENT | f::IPC | f::SRCLINE | f::SRCFILE | f::INSN | f::INSNLEN | f::BRSTACK;
        if like.kind != Kind::Branches
            || self.sel.flags
            || fields & f::IP == 0
            || !show_addr
            || fields & other != 0
        {
            return false;
        }
        let Some((first, rest)) = steps.split_first() else {
            return true;
        };
        // The first line in full (its head formatted if new), the others
        // from the head it left and the branch pairs' texts.
        let mut s = pt_perf::synth::branch_sample(like, first);
        self.sample_line(&s, &Stacks::default());
        for step in rest {
            (s.ip, s.addr) = (step.from_ip, step.to_ip);
            self.head.put(&mut self.buf);
            self.branch_pair(&s, fields);
            self.buf.push(b'\n');
        }
        true
    }

    /// Whether `k`'s samples are printed as branches (`ip => addr`).
    #[inline]
    fn is_branch(&self, k: Kind) -> bool {
        match k {
            Kind::Branches => true,
            Kind::Recorded(i) => self.bts.get(usize::from(i)).copied().unwrap_or(false),
            _ => false,
        }
    }

    /// One sample's line, without call chain or branch stack.
    pub fn sample(&mut self, s: &Sample) {
        self.sample_with(s, &Stacks::default());
    }

    /// One sample's line (and lines of its call chain).
    #[inline(always)]
    pub fn sample_with(&mut self, s: &Sample, st: &Stacks) {
        if self.ip_only && !s.kind.is_synth() && !self.is_branch(s.kind) {
            self.ip_run(std::iter::once(s.ip), 1);
            return;
        }
        self.sample_line(s, st);
    }

    #[inline(never)]
    fn sample_line(&mut self, s: &Sample, st: &Stacks) {
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
        // The columns before the addresses are the same for the samples of a
        // run (same thread, time, period, event and flags): formatted once.
        let at = match s.time {
            Some(t) if fields & f::TIME != 0 => Some(self.shown_time(t)),
            t => t,
        };
        self.line_time = at.unwrap_or(0);
        let shown = at.map(|t| if self.ns { t } else { t / 1000 });
        let flags_shown = if self.sel.flags { s.flags } else { 0 };
        let key = (
            s.tid,
            shown,
            s.pid,
            s.cpu,
            s.period,
            s.kind,
            flags_shown,
            fields,
        );
        if self.head_key == Some(key) {
            self.head.put(&mut self.buf);
        } else {
            let at = self.buf.len();
            self.head_columns(fields, s);
            let written = &self.buf[at..];
            self.head.set(|b| b.extend_from_slice(written));
            self.head_key = Some(key);
        }
        if self.is_branch(s.kind) {
            // perf_sample__fprintf_bts
            if fields & f::CALLINDENT != 0 {
                self.callindent(s, fields);
            }
            let show_addr =
                fields & f::ADDR != 0 || (self.hw_type & st::ADDR != 0 && !out.user_set);
            if fields & f::IP != 0 && show_addr {
                self.branch_pair(s, fields);
            } else {
                if fields & f::IP != 0 {
                    self.branch_from(s, fields);
                }
                if show_addr {
                    self.branch_to(s, fields);
                }
            }
            if fields & f::IPC != 0 {
                self.ipc(fields, s);
            }
            if fields & f::IP != 0 {
                self.srcline(fields, s, s.ip, b"\n  ");
            }
            if fields & (f::INSN | f::INSNLEN) != 0 {
                self.insn(fields, s);
            }
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
                let mut t = [b' '; 17];
                t[1..].copy_from_slice(&self.hex16(s.ip));
                self.buf.extend_from_slice(&t);
                if fields & (f::SYM | f::DSO) != 0
                    && !self.span_text(s, fields)
                    && !self.new_span(s, fields)
                {
                    self.sym_text(s.code, s.pid, s.ip, s.time, fields);
                }
                self.srcline(fields, s, s.ip, b"\n  ");
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

    /// The columns of a sample's line before its addresses: command, thread,
    /// CPU, time, period, event and flags.
    fn head_columns(&mut self, fields: u64, s: &Sample) {
        self.start(fields, s);
        if fields & (f::PERIOD | f::EVNAME) != 0 {
            // The period and event columns, formatted when they change (the
            // fields are the kind's output type's).
            let key = (s.period, s.kind);
            if self.mid_key != Some(key) {
                let name = self
                    .names
                    .iter()
                    .find(|(k, _)| *k == s.kind)
                    .map_or(&b"[unknown]"[..], |(_, n)| n.as_slice());
                let width = self.name_width;
                self.mid.set(|b| {
                    if fields & f::PERIOD != 0 {
                        w::dec_w(b, s.period, 10);
                        b.push(b' ');
                    }
                    if fields & f::EVNAME != 0 {
                        w::str_w(b, name, width);
                        b.extend_from_slice(b": ");
                    }
                });
                self.mid_key = Some(key);
            }
            self.mid.put(&mut self.buf);
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
