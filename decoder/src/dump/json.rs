//! `--json`: one JSON object per packet or diagnostic line. 64-bit values (IPs, TSC,
//! payloads) are hex strings so that no JSON reader loses precision; small fields are
//! numbers.
//!
//! Written with serde_json's streaming serializer straight into the output buffer:
//! no value is built or allocated per packet (hex strings and the raw bytes are
//! formatted as they are written).

use super::field::{hex_byte, hex_into};
use super::{cfe_type_name, Line};
use crate::error::ErrorCode;
use pt_encoder::packet::sext48;
use pt_encoder::Packet;
use serde::ser::{SerializeMap, Serializer as _};
use std::fmt;

type Map<'o> = serde_json::ser::Compound<'o, &'o mut Vec<u8>, serde_json::ser::CompactFormatter>;

/// One JSON object, its entries written by `f`, then a newline.
fn object(out: &mut Vec<u8>, f: impl FnOnce(&mut Map<'_>) -> serde_json::Result<()>) {
    let mut ser = serde_json::Serializer::new(&mut *out);
    // Writing into a Vec cannot fail, and every key is a string.
    let written = ser.serialize_map(None).and_then(|mut m| {
        f(&mut m)?;
        m.end()
    });
    debug_assert!(written.is_ok(), "{written:?}");
    out.push(b'\n');
}

/// A 64-bit value as a `0x…` string, formatted on the stack by ptdump's own hex writer
/// (the fmt machinery would cost as much as the rest of the line).
struct Hex(u64);

impl serde::Serialize for Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut digits = [0u8; 16];
        let n = hex_into(&mut digits, self.0, 0);
        let mut text = [0u8; 18];
        text[..2].copy_from_slice(b"0x");
        text[2..2 + n].copy_from_slice(&digits[..n]);
        // Hex digits: ASCII.
        s.serialize_str(std::str::from_utf8(&text[..2 + n]).unwrap_or(""))
    }
}

/// A packet's bytes as a string of two hex digits each.
struct RawBytes<'b>(&'b [u8]);

impl serde::Serialize for RawBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Packets are short (a PSB is the longest at 16 bytes); a longer slice is
        // written in pieces through fmt.
        let mut text = [0u8; 64];
        if self.0.len() * 2 > text.len() {
            return s.collect_str(&format_args!("{}", HexBytes(self.0)));
        }
        for (pair, &b) in text.chunks_exact_mut(2).zip(self.0) {
            pair.copy_from_slice(&hex_byte(b));
        }
        s.serialize_str(std::str::from_utf8(&text[..self.0.len() * 2]).unwrap_or(""))
    }
}

/// Bytes in hex through fmt (the rare long case).
struct HexBytes<'b>(&'b [u8]);

impl fmt::Display for HexBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// A diagnostic: `{"offset":…,"diag":…[,"error":…]}`.
pub(super) fn diag(out: &mut Vec<u8>, offset: u64, text: &str, code: Option<ErrorCode>) {
    object(out, |m| {
        m.serialize_entry("offset", &offset)?;
        m.serialize_entry("diag", text)?;
        if let Some(code) = code {
            m.serialize_entry("error", code.message())?;
        }
        Ok(())
    });
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
    object(out, |m| packet_entries(m, offset, size, p, trace, line));
}

fn packet_entries(
    m: &mut Map<'_>,
    offset: u64,
    size: u64,
    p: &Packet,
    trace: &[u8],
    line: &Line,
) -> serde_json::Result<()> {
    m.serialize_entry("offset", &offset)?;
    m.serialize_entry("size", &size)?;
    m.serialize_entry("packet", p.name())?;
    match *p {
        Packet::Ip(_, ip) => {
            m.serialize_entry("ipc", &(ip.compression as u64))?;
            match ip.compression {
                pt_encoder::packet::IpCompression::Suppressed => {}
                pt_encoder::packet::IpCompression::Sext48 => {
                    m.serialize_entry("ip", &Hex(sext48(ip.ip)))?
                }
                _ => m.serialize_entry("ip", &Hex(ip.ip))?,
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
            m.serialize_entry("bits", std::str::from_utf8(&bits[..n]).unwrap_or(""))?;
        }
        Packet::ModeExec(mode) => {
            m.serialize_entry("csl", &mode.csl)?;
            m.serialize_entry("csd", &mode.csd)?;
            m.serialize_entry("if", &mode.iflag)?;
        }
        Packet::ModeTsx(tsx) => {
            m.serialize_entry("intx", &tsx.intx)?;
            m.serialize_entry("abrt", &tsx.abrt)?;
        }
        Packet::Pip { cr3, nr } => {
            m.serialize_entry("cr3", &Hex(cr3))?;
            m.serialize_entry("nr", &nr)?;
        }
        Packet::Vmcs { base } => m.serialize_entry("base", &Hex(base))?,
        Packet::Tsc { tsc } => m.serialize_entry("tsc", &Hex(tsc))?,
        Packet::Mtc { ctc } => m.serialize_entry("ctc", &ctc)?,
        Packet::Tma { ctc, fc } => {
            m.serialize_entry("ctc", &ctc)?;
            m.serialize_entry("fc", &(fc as u64))?;
        }
        Packet::Cyc { value } => m.serialize_entry("cyc", &value)?,
        Packet::Cbr { ratio } => m.serialize_entry("ratio", &ratio)?,
        Packet::Mnt { payload } => m.serialize_entry("payload", &Hex(payload))?,
        Packet::Ptw { size, payload, ip } => {
            m.serialize_entry("plc", &size.bits())?;
            m.serialize_entry("payload", &Hex(payload))?;
            m.serialize_entry("ip", &ip)?;
        }
        Packet::Exstop { ip } => m.serialize_entry("ip", &ip)?,
        Packet::Mwait { hints, ext } => {
            m.serialize_entry("hints", &Hex(hints as u64))?;
            m.serialize_entry("ext", &Hex(ext as u64))?;
        }
        Packet::Pwre {
            state,
            sub_state,
            hw,
        } => {
            m.serialize_entry("state", &(state as u64))?;
            m.serialize_entry("sub_state", &(sub_state as u64))?;
            m.serialize_entry("hw", &hw)?;
        }
        Packet::Pwrx {
            last,
            deepest,
            wake,
        } => {
            m.serialize_entry("last", &(last as u64))?;
            m.serialize_entry("deepest", &(deepest as u64))?;
            m.serialize_entry("interrupt", &wake.interrupt)?;
            m.serialize_entry("store", &wake.store)?;
            m.serialize_entry("autonomous", &wake.autonomous)?;
        }
        Packet::Cfe { ty, vector, ip } => {
            m.serialize_entry("type", &(ty as u64))?;
            m.serialize_entry("type_name", cfe_type_name(ty))?;
            m.serialize_entry("vector", &(vector as u64))?;
            m.serialize_entry("ip", &ip)?;
        }
        Packet::Evd { ty, payload } => {
            m.serialize_entry("type", &(ty as u64))?;
            m.serialize_entry("payload", &Hex(payload))?;
        }
        Packet::Trig {
            trbv,
            ip,
            mult,
            icnt,
        } => {
            m.serialize_entry("trbv", &(trbv as u64))?;
            m.serialize_entry("ip", &ip)?;
            m.serialize_entry("mult", &mult)?;
            if let Some(icnt) = icnt {
                m.serialize_entry("icnt", &(icnt as u64))?;
            }
        }
        _ => {}
    }
    let begin = offset as usize;
    if let Some(bytes) = trace.get(begin..begin.saturating_add(size as usize)) {
        m.serialize_entry("raw", &RawBytes(bytes))?;
    }
    if !line.id.is_empty() {
        m.serialize_entry("track_id", &line.id)?;
        // ptdump's column: ASCII we wrote.
        m.serialize_entry(
            "track",
            std::str::from_utf8(line.track.as_bytes()).unwrap_or(""),
        )?;
    }
    Ok(())
}
