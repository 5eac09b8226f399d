//! `--json`: one JSON object per packet or diagnostic line. 64-bit values (IPs, TSC,
//! payloads) are hex strings so that no JSON reader loses precision; small fields are
//! numbers.

use super::field::{push_dec, push_hex};
use super::{cfe_type_name, Line};
use crate::error::ErrorCode;
use pt_encoder::packet::sext48;
use pt_encoder::Packet;

fn key(out: &mut Vec<u8>, k: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}

fn num(out: &mut Vec<u8>, k: &str, v: u64) {
    key(out, k);
    push_dec(out, v);
}

fn hex(out: &mut Vec<u8>, k: &str, v: u64) {
    key(out, k);
    out.extend_from_slice(b"\"0x");
    push_hex(out, v);
    out.push(b'"');
}

fn flag(out: &mut Vec<u8>, k: &str, v: bool) {
    key(out, k);
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

/// A string from our own fixed vocabulary or ptdump's columns: no characters that need
/// escaping besides the quote and backslash, which are escaped anyway.
fn string(out: &mut Vec<u8>, k: &str, s: &[u8]) {
    key(out, k);
    out.push(b'"');
    for &b in s {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// A diagnostic: `{"offset":…,"diag":…[,"error":…]}`.
pub(super) fn diag(out: &mut Vec<u8>, offset: u64, text: &str, code: Option<ErrorCode>) {
    out.extend_from_slice(b"{\"offset\":");
    push_dec(out, offset);
    string(out, "diag", text.as_bytes());
    if let Some(code) = code {
        string(out, "error", code.message().as_bytes());
    }
    out.extend_from_slice(b"}\n");
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
    out.extend_from_slice(b"{\"offset\":");
    push_dec(out, offset);
    num(out, "size", size);
    string(out, "packet", p.name().as_bytes());
    match *p {
        Packet::Ip(_, ip) => {
            num(out, "ipc", ip.compression as u64);
            match ip.compression {
                pt_encoder::packet::IpCompression::Suppressed => {}
                pt_encoder::packet::IpCompression::Sext48 => hex(out, "ip", sext48(ip.ip)),
                _ => hex(out, "ip", ip.ip),
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
            string(out, "bits", &bits[..n]);
        }
        Packet::ModeExec(m) => {
            flag(out, "csl", m.csl);
            flag(out, "csd", m.csd);
            flag(out, "if", m.iflag);
        }
        Packet::ModeTsx(m) => {
            flag(out, "intx", m.intx);
            flag(out, "abrt", m.abrt);
        }
        Packet::Pip { cr3, nr } => {
            hex(out, "cr3", cr3);
            flag(out, "nr", nr);
        }
        Packet::Vmcs { base } => hex(out, "base", base),
        Packet::Tsc { tsc } => hex(out, "tsc", tsc),
        Packet::Mtc { ctc } => num(out, "ctc", ctc as u64),
        Packet::Tma { ctc, fc } => {
            num(out, "ctc", ctc as u64);
            num(out, "fc", fc as u64);
        }
        Packet::Cyc { value } => num(out, "cyc", value),
        Packet::Cbr { ratio } => num(out, "ratio", ratio as u64),
        Packet::Mnt { payload } => hex(out, "payload", payload),
        Packet::Ptw { size, payload, ip } => {
            num(out, "plc", size.bits() as u64);
            hex(out, "payload", payload);
            flag(out, "ip", ip);
        }
        Packet::Exstop { ip } => flag(out, "ip", ip),
        Packet::Mwait { hints, ext } => {
            hex(out, "hints", hints as u64);
            hex(out, "ext", ext as u64);
        }
        Packet::Pwre {
            state,
            sub_state,
            hw,
        } => {
            num(out, "state", state as u64);
            num(out, "sub_state", sub_state as u64);
            flag(out, "hw", hw);
        }
        Packet::Pwrx {
            last,
            deepest,
            wake,
        } => {
            num(out, "last", last as u64);
            num(out, "deepest", deepest as u64);
            flag(out, "interrupt", wake.interrupt);
            flag(out, "store", wake.store);
            flag(out, "autonomous", wake.autonomous);
        }
        Packet::Cfe { ty, vector, ip } => {
            num(out, "type", ty as u64);
            string(out, "type_name", cfe_type_name(ty).as_bytes());
            num(out, "vector", vector as u64);
            flag(out, "ip", ip);
        }
        Packet::Evd { ty, payload } => {
            num(out, "type", ty as u64);
            hex(out, "payload", payload);
        }
        Packet::Trig {
            trbv,
            ip,
            mult,
            icnt,
        } => {
            num(out, "trbv", trbv as u64);
            flag(out, "ip", ip);
            flag(out, "mult", mult);
            if let Some(icnt) = icnt {
                num(out, "icnt", icnt as u64);
            }
        }
        _ => {}
    }
    let begin = offset as usize;
    if let Some(bytes) = trace.get(begin..begin.saturating_add(size as usize)) {
        key(out, "raw");
        out.push(b'"');
        for &b in bytes {
            if b < 0x10 {
                out.push(b'0');
            }
            push_hex(out, b as u64);
        }
        out.push(b'"');
    }
    if !line.id.is_empty() {
        string(out, "track_id", line.id.as_bytes());
        string(out, "track", line.track.as_bytes());
    }
    out.extend_from_slice(b"}\n");
}
