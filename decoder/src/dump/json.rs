//! `--json`: one JSON object per packet or diagnostic line. 64-bit values (IPs, TSC,
//! payloads) are hex strings so that no JSON reader loses precision; small fields are
//! numbers.
//!
//! Written with serde_json's compact [`Formatter`] straight into the output buffer:
//! no value is built or allocated per packet. Text that may need escaping (a
//! diagnostic, ptdump's tracking column) goes through serde's `Serialize` and is
//! escaped by serde_json; a packet's keys and values are names, hex digits and TNT
//! bits, which JSON never escapes, so they are written as string fragments without
//! serde_json's byte-by-byte escape scan (that scan made `--json` 1.7 times as slow
//! as the text dump: a third of all instructions).

use super::field::{hex_byte, hex_into};
use super::{cfe_type_name, Line};
use crate::error::ErrorCode;
use pt_encoder::packet::sext48;
use pt_encoder::Packet;
use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};

/// Writing into a `Vec` cannot fail.
#[inline]
fn ok<E: std::fmt::Debug>(r: Result<(), E>) {
    debug_assert!(r.is_ok(), "{r:?}");
}

/// Whether JSON writes `s` as it is: printable ASCII other than `"` and `\`.
fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// One JSON object being written into the output, then a newline.
struct Object<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> Object<'o> {
    fn new(out: &'o mut Vec<u8>) -> Self {
        ok(CompactFormatter.begin_object(out));
        Object { out, first: true }
    }

    #[inline]
    fn key(&mut self, key: &'static str) {
        debug_assert!(plain(key), "{key}");
        let (f, out) = (&mut CompactFormatter, &mut *self.out);
        ok(f.begin_object_key(out, self.first));
        self.first = false;
        ok(f.begin_string(out));
        ok(f.write_string_fragment(out, key));
        ok(f.end_string(out));
        ok(f.end_object_key(out));
        ok(f.begin_object_value(out));
    }

    #[inline]
    fn u64(&mut self, key: &'static str, v: u64) {
        self.key(key);
        ok(CompactFormatter.write_u64(self.out, v));
        ok(CompactFormatter.end_object_value(self.out));
    }

    #[inline]
    fn bool(&mut self, key: &'static str, v: bool) {
        self.key(key);
        ok(CompactFormatter.write_bool(self.out, v));
        ok(CompactFormatter.end_object_value(self.out));
    }

    /// A string JSON writes as it is ([`plain`]): names, hex digits, TNT bits.
    #[inline]
    fn plain(&mut self, key: &'static str, v: &str) {
        debug_assert!(plain(v), "{v}");
        self.key(key);
        let (f, out) = (&mut CompactFormatter, &mut *self.out);
        ok(f.begin_string(out));
        ok(f.write_string_fragment(out, v));
        ok(f.end_string(out));
        ok(f.end_object_value(out));
    }

    /// Any text, escaped by serde_json.
    fn text(&mut self, key: &'static str, v: &str) {
        self.key(key);
        ok(v.serialize(&mut serde_json::Serializer::new(&mut *self.out)));
        ok(CompactFormatter.end_object_value(self.out));
    }

    /// A 64-bit value as a `0x…` string, formatted on the stack by ptdump's own hex
    /// writer (the fmt machinery would cost as much as the rest of the line).
    #[inline]
    fn hex(&mut self, key: &'static str, v: u64) {
        let mut digits = [0u8; 16];
        let n = hex_into(&mut digits, v, 0);
        let mut text = [0u8; 18];
        text[..2].copy_from_slice(b"0x");
        text[2..2 + n].copy_from_slice(&digits[..n]);
        // Hex digits: ASCII.
        self.plain(key, std::str::from_utf8(&text[..2 + n]).unwrap_or(""));
    }

    /// Bytes as a string of two hex digits each.
    fn raw(&mut self, key: &'static str, bytes: &[u8]) {
        self.key(key);
        let (f, out) = (&mut CompactFormatter, &mut *self.out);
        ok(f.begin_string(out));
        // Packets are short (a PSB is the longest at 16 bytes): 32 digits at a time.
        for chunk in bytes.chunks(16) {
            let mut text = [0u8; 32];
            for (pair, &b) in text.chunks_exact_mut(2).zip(chunk) {
                pair.copy_from_slice(&hex_byte(b));
            }
            let digits = std::str::from_utf8(&text[..chunk.len() * 2]).unwrap_or("");
            ok(f.write_string_fragment(out, digits));
        }
        ok(f.end_string(out));
        ok(f.end_object_value(out));
    }

    fn end(self) {
        ok(CompactFormatter.end_object(self.out));
        self.out.push(b'\n');
    }
}

/// A diagnostic: `{"offset":…,"diag":…[,"error":…]}`.
pub(super) fn diag(out: &mut Vec<u8>, offset: u64, text: &str, code: Option<ErrorCode>) {
    let mut o = Object::new(out);
    o.u64("offset", offset);
    o.text("diag", text);
    if let Some(code) = code {
        o.text("error", code.message());
    }
    o.end();
}

/// A packet: offset, size, ptdump's name, the decoded fields, the raw bytes and the
/// tracking column if any.
pub(super) fn packet(
    out: &mut Vec<u8>,
    offset: u64,
    size: u64,
    p: &Packet,
    trace: &[u8],
    line: &Line,
) {
    let mut m = Object::new(out);
    m.u64("offset", offset);
    m.u64("size", size);
    m.plain("packet", p.name());
    match *p {
        Packet::Ip(_, ip) => {
            m.u64("ipc", ip.compression as u64);
            match ip.compression {
                pt_encoder::packet::IpCompression::Suppressed => {}
                pt_encoder::packet::IpCompression::Sext48 => m.hex("ip", sext48(ip.ip)),
                _ => m.hex("ip", ip.ip),
            }
        }
        Packet::Tnt8(t) | Packet::Tnt64(t) => {
            let mut bits = [0u8; 47];
            let mut n = 0;
            for taken in t.iter() {
                if let Some(slot) = bits.get_mut(n) {
                    *slot = if taken { b'!' } else { b'.' };
                    n += 1;
                }
            }
            // Only `!` and `.`: ASCII.
            m.plain("bits", std::str::from_utf8(&bits[..n]).unwrap_or(""));
        }
        Packet::ModeExec(mode) => {
            m.bool("csl", mode.csl);
            m.bool("csd", mode.csd);
            m.bool("if", mode.iflag);
        }
        Packet::ModeTsx(tsx) => {
            m.bool("intx", tsx.intx);
            m.bool("abrt", tsx.abrt);
        }
        Packet::Pip { cr3, nr } => {
            m.hex("cr3", cr3);
            m.bool("nr", nr);
        }
        Packet::Vmcs { base } => m.hex("base", base),
        Packet::Tsc { tsc } => m.hex("tsc", tsc),
        Packet::Mtc { ctc } => m.u64("ctc", ctc.into()),
        Packet::Tma { ctc, fc } => {
            m.u64("ctc", ctc.into());
            m.u64("fc", fc as u64);
        }
        Packet::Cyc { value } => m.u64("cyc", value),
        Packet::Cbr { ratio } => m.u64("ratio", ratio.into()),
        Packet::Mnt { payload } => m.hex("payload", payload),
        Packet::Ptw { size, payload, ip } => {
            m.u64("plc", size.bits().into());
            m.hex("payload", payload);
            m.bool("ip", ip);
        }
        Packet::Exstop { ip } => m.bool("ip", ip),
        Packet::Mwait { hints, ext } => {
            m.hex("hints", hints as u64);
            m.hex("ext", ext as u64);
        }
        Packet::Pwre {
            state,
            sub_state,
            hw,
        } => {
            m.u64("state", state as u64);
            m.u64("sub_state", sub_state as u64);
            m.bool("hw", hw);
        }
        Packet::Pwrx {
            last,
            deepest,
            wake,
        } => {
            m.u64("last", last as u64);
            m.u64("deepest", deepest as u64);
            m.bool("interrupt", wake.interrupt);
            m.bool("store", wake.store);
            m.bool("autonomous", wake.autonomous);
        }
        Packet::Cfe { ty, vector, ip } => {
            m.u64("type", ty as u64);
            m.plain("type_name", cfe_type_name(ty));
            m.u64("vector", vector as u64);
            m.bool("ip", ip);
        }
        Packet::Evd { ty, payload } => {
            m.u64("type", ty as u64);
            m.hex("payload", payload);
        }
        Packet::Trig {
            trbv,
            ip,
            mult,
            icnt,
        } => {
            m.u64("trbv", trbv as u64);
            m.bool("ip", ip);
            m.bool("mult", mult);
            if let Some(icnt) = icnt {
                m.u64("icnt", icnt as u64);
            }
        }
        _ => {}
    }
    let begin = offset as usize;
    if let Some(bytes) = trace.get(begin..begin.saturating_add(size as usize)) {
        m.raw("raw", bytes);
    }
    if !line.id.is_empty() {
        m.text("track_id", line.id);
        // ptdump's column: ASCII we wrote, escaped all the same.
        m.text(
            "track",
            std::str::from_utf8(line.track.as_bytes()).unwrap_or(""),
        );
    }
    m.end();
}
