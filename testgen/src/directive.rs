//! `@pt` packet directives: `psb()`, `tip(3: %l1)`, `tnt(t.n)`, `raw-8(0x2)`, ...
//!
//! Each directive becomes one [`Emit`]: a typed [`Packet`] for pt-encoder, or raw bytes
//! where pttc writes bytes that no well-formed packet has. Arguments are read exactly as
//! pttc reads them (C integer syntax, `strtok` splitting, which trailing text is ignored
//! and which is an error), and values are truncated where libipt's encoder truncates them.

use pt_encoder::packet::{cyc_size, IpCompression, IpPacketKind};
use pt_encoder::{
    encode_to_vec, validate, EncodeError, ModeExec, ModeTsx, Packet, PtwSize, Tnt, WakeReason,
};

use crate::cstr::{is_c_space, scan_c_state, strtol, token_to_uint, Cursor, NumError, Strtok};
use crate::labels::Labels;

/// What one directive puts into the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Emit {
    /// A packet.
    Packet(Packet),
    /// Bytes written as they are: `raw-N` values, and the malformed packets pttc lets a
    /// test write (a TNT without results, a CYC longer than decoders accept).
    Raw(Vec<u8>),
}

impl Emit {
    /// Append the bytes to `out`; returns how many were written.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        match self {
            Emit::Packet(p) => encode_to_vec(p, out),
            Emit::Raw(b) => {
                out.extend_from_slice(b);
                Ok(b.len())
            }
        }
    }
}

/// Why a directive's arguments were rejected (pttc's wording).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// Malformed arguments.
    #[error("parse error")]
    Parse,
    /// Not an integer, or text follows it.
    #[error("integer cannot be parsed")]
    ParseInt,
    /// The integer does not fit its field.
    #[error("integer too big")]
    TooBig,
    /// IP compression missing or not one of 0, 1, 2, 3, 4, 6.
    #[error("ipc missing or has invalid value")]
    Ipc,
    /// No address after the IP compression.
    #[error("ip missing")]
    IpMissing,
    /// Required arguments are missing.
    #[error("no arguments")]
    NoArgs,
    /// Text after the last argument.
    #[error("trailing tokens")]
    TrailingTokens,
    /// A character other than `t`, `n`, `.` or a blank in a TNT.
    #[error("unknown character")]
    UnknownChar,
    /// Not a known directive.
    #[error("unknown directive")]
    UnknownDirective,
    /// A label with no directive after it, or nothing before `(`.
    #[error("missing directive")]
    MissingDirective,
    /// A sub C-state where none is allowed.
    #[error("unexpected sub C-state")]
    SubCState,
    /// A C-state above c14.
    #[error("invalid C-state")]
    InvalidCState,
    /// An unknown label.
    #[error("no such label")]
    NoLabel,
    /// The packet cannot be encoded.
    #[error("{0}")]
    Encode(EncodeError),
}

impl From<NumError> for Reason {
    fn from(e: NumError) -> Self {
        match e {
            NumError::Parse => Reason::ParseInt,
            NumError::TooBig => Reason::TooBig,
        }
    }
}

/// A rejected directive: what pttc would say about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{context} ({reason})")]
pub struct DirectiveError {
    /// What was being parsed, e.g. `tip: parsing failed`.
    pub context: String,
    /// Why it failed.
    pub reason: Reason,
}

fn fail<T>(context: impl Into<String>, reason: impl Into<Reason>) -> Result<T, DirectiveError> {
    Err(DirectiveError {
        context: context.into(),
        reason: reason.into(),
    })
}

/// Parse one packet directive. `name` has no label prefix; `payload` is the text
/// between the parentheses. Both are lower case, as pttc sees them.
pub fn parse_packet(name: &str, payload: &str, labels: &Labels) -> Result<Emit, DirectiveError> {
    let failed = format!("{name}: parsing failed");
    let packet = match name {
        "psb" | "psbend" | "pad" | "ovf" | "stop" => {
            if !payload.is_empty() {
                return fail(failed, Reason::TrailingTokens);
            }
            match name {
                "psb" => Packet::Psb,
                "psbend" => Packet::Psbend,
                "pad" => Packet::Pad,
                "ovf" => Packet::Ovf,
                _ => Packet::Stop,
            }
        }
        "tnt" | "tnt64" => return tnt(name, payload),
        "tip" | "tip.pge" | "tip.pgd" | "fup" => {
            let kind = match name {
                "tip" => IpPacketKind::Tip,
                "tip.pge" => IpPacketKind::TipPge,
                "tip.pgd" => IpPacketKind::TipPgd,
                _ => IpPacketKind::Fup,
            };
            let (compression, ip) = ip_args(payload, labels).or_else(|r| fail(failed, r))?;
            Packet::Ip(kind, pt_encoder::IpPayload::new(compression, ip))
        }
        "mode.exec" => mode_exec(payload)?,
        "mode.tsx" => {
            let (intx, abrt) = match payload {
                "begin" => (true, false),
                "abort" => (false, true),
                "commit" => (false, false),
                _ => {
                    return fail(
                        "mode.tsx: argument must be one of \"begin\", \"abort\" or \"commit\"",
                        Reason::Parse,
                    )
                }
            };
            Packet::ModeTsx(ModeTsx { intx, abrt })
        }
        "pip" => {
            let mut t = Strtok::new(payload);
            let cr3 = first_uint(&mut t, 64).or_else(|r| fail(&failed, r))?;
            let nr = match t.next_token(" ,") {
                None => false,
                Some("nr") => true,
                Some(_) => return fail(failed, Reason::TrailingTokens),
            };
            // libipt keeps CR3[51:5].
            Packet::Pip {
                cr3: cr3 & 0x000f_ffff_ffff_ffe0,
                nr,
            }
        }
        "tsc" => {
            let tsc = first_uint(&mut Strtok::new(payload), 64).or_else(|r| fail(failed, r))?;
            Packet::Tsc {
                tsc: tsc & 0x00ff_ffff_ffff_ffff,
            }
        }
        "cbr" | "mtc" => {
            let v = first_uint(&mut Strtok::new(payload), 8)
                .or_else(|r| fail(format!("{name}: parsing {name} failed"), r))?;
            if name == "cbr" {
                Packet::Cbr { ratio: v as u8 }
            } else {
                Packet::Mtc { ctc: v as u8 }
            }
        }
        "tma" => {
            let (ctc, fc) = tma_args(payload).or_else(|r| fail("tma: parsing tma failed", r))?;
            Packet::Tma { ctc, fc }
        }
        "cyc" => {
            let value = first_uint(&mut Strtok::new(payload), 64)
                .or_else(|r| fail("cyc: parsing cyc failed", r))?;
            if value >> 61 != 0 {
                return Ok(Emit::Raw(cyc_bytes(value)));
            }
            Packet::Cyc { value }
        }
        "vmcs" => {
            let base = first_uint(&mut Strtok::new(payload), 64).or_else(|r| fail(failed, r))?;
            // libipt keeps bits 51:12.
            Packet::Vmcs {
                base: base & 0x000f_ffff_ffff_f000,
            }
        }
        "mnt" => {
            let payload = first_uint(&mut Strtok::new(payload), 64).or_else(|r| fail(failed, r))?;
            Packet::Mnt { payload }
        }
        "exstop" => match payload {
            "ip" => Packet::Exstop { ip: true },
            "" => Packet::Exstop { ip: false },
            _ => return fail(failed, Reason::TrailingTokens),
        },
        "mwait" => {
            let (hints, ext) = mwait_args(payload).or_else(|r| fail(failed, r))?;
            Packet::Mwait { hints, ext }
        }
        "pwre" => pwre(payload)?,
        "pwrx" => pwrx(payload)?,
        "ptw" => ptw(payload)?,
        "cfe" => cfe(payload)?,
        "evd" => evd(payload)?,
        "trig" => trig(payload)?,
        "raw-8" | "raw-16" | "raw-32" | "raw-64" => {
            let bytes: usize = match name {
                "raw-8" => 1,
                "raw-16" => 2,
                "raw-32" => 4,
                _ => 8,
            };
            let v = first_uint(&mut Strtok::new(payload), bytes as u32 * 8)
                .or_else(|r| fail(failed, r))?;
            return Ok(Emit::Raw(v.to_le_bytes()[..bytes].to_vec()));
        }
        _ => return fail("invalid syntax", Reason::UnknownDirective),
    };
    // Values the encoder cannot represent are reported here, with the directive's line.
    validate(&packet).or_else(|e| {
        fail(
            format!("encoder error in directive {name}"),
            Reason::Encode(e),
        )
    })?;
    Ok(Emit::Packet(packet))
}

/// The first blank- or comma-separated token as an unsigned number (pttc's
/// `parse_uintN`); anything after it is ignored.
fn first_uint(t: &mut Strtok<'_>, bits: u32) -> Result<u64, Reason> {
    let token = t.next_token(" ,").ok_or(Reason::NoArgs)?;
    Ok(token_to_uint(token, bits)?)
}

fn tnt(name: &str, payload: &str) -> Result<Emit, DirectiveError> {
    let mut results = Vec::new();
    for b in payload.bytes() {
        match b {
            b'.' => {}
            b't' => results.push(true),
            b'n' => results.push(false),
            _ if is_c_space(b) => {}
            _ => return fail(format!("{name}: parsing failed"), Reason::UnknownChar),
        }
    }
    let long = name == "tnt64";
    let too_many = || DirectiveError {
        context: format!("encoder error in directive {name}"),
        reason: Reason::Encode(EncodeError::FieldOutOfRange {
            packet: if long { "tnt.64" } else { "tnt.8" },
            field: "result count",
        }),
    };
    let max = if long { Tnt::MAX_LONG } else { Tnt::MAX_SHORT } as usize;
    if results.len() > max {
        return Err(too_many());
    }
    // An empty TNT is only a stop bit; libipt's encoder writes it all the same.
    let Some(t) = Tnt::from_results(results) else {
        return Ok(Emit::Raw(if long {
            vec![0x02, 0xa3, 0x01, 0, 0, 0, 0, 0]
        } else {
            vec![0x02]
        }));
    };
    Ok(Emit::Packet(if long {
        Packet::Tnt64(t)
    } else {
        Packet::Tnt8(t)
    }))
}

/// `ipc: addr` where addr is a number or `%label`; the address is truncated to the
/// bits the compression carries.
fn ip_args(payload: &str, labels: &Labels) -> Result<(IpCompression, u64), Reason> {
    let mut t = Strtok::new(payload);
    let ipc = t.next_token(" :").ok_or(Reason::NoArgs)?;
    let ipc = token_to_uint(ipc, 32)?;
    let compression = u8::try_from(ipc)
        .ok()
        .and_then(IpCompression::from_bits)
        .ok_or(Reason::Ipc)?;
    let addr = t.next_token(" :").ok_or(Reason::IpMissing)?;
    let ip = match addr.strip_prefix('%') {
        Some(label) => labels.asm(label).ok_or(Reason::NoLabel)?,
        None => token_to_uint(addr, 64)?,
    };
    if t.next_token(" ").is_some() {
        return Err(Reason::TrailingTokens);
    }
    Ok((compression, ip))
}

fn mode_exec(payload: &str) -> Result<Packet, DirectiveError> {
    let mut c = Cursor::new(payload);
    let (csl, csd) = if c.token("64bit") {
        (true, false)
    } else if c.token("32bit") {
        (false, true)
    } else if c.token("16bit") {
        (false, false)
    } else {
        return fail(
            "mode.exec: bad argument, expected \"16bit\", \"64bit\" or \"32bit\"",
            Reason::Parse,
        );
    };
    let iflag = if c.token(",") {
        if !c.token("if") {
            return fail("mode.exec: bad argument, expected \"if\"", Reason::Parse);
        }
        true
    } else {
        false
    };
    Ok(Packet::ModeExec(ModeExec { csl, csd, iflag }))
}

/// A whole token as C's `strtol` reads it, at most 0xffff; negative values wrap.
fn c_long_u16(token: &str) -> Result<u16, Reason> {
    match strtol(token, 0) {
        Some((v, end)) if end == token.len() => {
            if v > 0xffff {
                Err(Reason::TooBig)
            } else {
                Ok(v as u16)
            }
        }
        _ => Err(Reason::ParseInt),
    }
}

fn tma_args(payload: &str) -> Result<(u16, u16), Reason> {
    let mut t = Strtok::new(payload);
    let ctc = c_long_u16(t.next_token(",").ok_or(Reason::NoArgs)?)?;
    let fc = c_long_u16(t.next_token(" ,").ok_or(Reason::NoArgs)?)?;
    if t.next_token(" ").is_some() {
        return Err(Reason::TrailingTokens);
    }
    Ok((ctc, fc))
}

fn mwait_args(payload: &str) -> Result<(u32, u32), Reason> {
    let mut t = Strtok::new(payload);
    let hints = token_to_uint(t.next_token(",").ok_or(Reason::NoArgs)?, 32)?;
    let ext = token_to_uint(t.next_token(" ,").ok_or(Reason::NoArgs)?, 32)?;
    if t.next_token(" ").is_some() {
        return Err(Reason::TrailingTokens);
    }
    Ok((hints as u32, ext as u32))
}

/// `c<state>[.<sub>]` to the MWAIT encoding (state minus one, modulo 16): c0 is 0xf.
/// A missing sub-state is c0 too.
fn c_state(token: Option<&str>, allow_sub: bool) -> Result<(u8, u8), Reason> {
    let token = token.ok_or(Reason::NoArgs)?;
    let (matches, maj, min) = scan_c_state(token);
    match matches {
        0 => return Err(Reason::NoArgs),
        1 => {}
        2 if !allow_sub => return Err(Reason::SubCState),
        2 if min >= 0xf => return Err(Reason::InvalidCState),
        2 => {}
        _ => return Err(Reason::Parse),
    }
    if maj >= 0xf {
        return Err(Reason::InvalidCState);
    }
    let mwait = |v: u32| (v.wrapping_sub(1) & 0xf) as u8;
    Ok((mwait(maj), mwait(min)))
}

fn pwre(payload: &str) -> Result<Packet, DirectiveError> {
    let mut t = Strtok::new(payload);
    let (state, sub_state) =
        c_state(t.next_token(" , "), true).or_else(|r| fail("pwre: bad C-state", r))?;
    let hw = match t.next_token(" ,") {
        None => false,
        Some("hw") => true,
        Some(_) => return fail("pwre: parsing failed", Reason::TrailingTokens),
    };
    Ok(Packet::Pwre {
        state,
        sub_state,
        hw,
    })
}

fn pwrx(payload: &str) -> Result<Packet, DirectiveError> {
    let mut t = Strtok::new(payload);
    let Some(reason) = t.next_token(":") else {
        return fail("pwrx: parsing failed", Reason::NoArgs);
    };
    let mut wake = WakeReason::default();
    match reason {
        "int" => wake.interrupt = true,
        "st" => wake.store = true,
        "hw" => wake.autonomous = true,
        _ => return fail("pwrx: bad wake reason", Reason::Parse),
    }
    let (last, _) =
        c_state(t.next_token(" ,"), false).or_else(|r| fail("pwrx: bad last C-state", r))?;
    let (deepest, _) =
        c_state(t.next_token(" ,"), false).or_else(|r| fail("pwrx: bad deepest C-state", r))?;
    Ok(Packet::Pwrx {
        last,
        deepest,
        wake,
    })
}

fn ptw(payload: &str) -> Result<Packet, DirectiveError> {
    let mut t = Strtok::new(payload);
    let Some(plc) = t.next_token(":") else {
        return fail("ptw: parsing failed", Reason::NoArgs);
    };
    let plc = token_to_uint(plc, 8).or_else(|e| fail("ptw: bad payload size", e))?;
    let Some(value) = t.next_token(", ") else {
        return fail("ptw: no payload", Reason::NoArgs);
    };
    let value = token_to_uint(value, 64).or_else(|e| fail("ptw: bad payload", e))?;
    let ip = match t.next_token(" ") {
        None => false,
        Some("ip") => true,
        Some(_) => return fail("ptw: parse error", Reason::TrailingTokens),
    };
    let (size, payload) = match plc {
        0 => (PtwSize::Four, value & 0xffff_ffff),
        1 => (PtwSize::Eight, value),
        _ => {
            return fail(
                "encoder error in directive ptw",
                Reason::Encode(EncodeError::FieldOutOfRange {
                    packet: "ptw",
                    field: "payload size",
                }),
            )
        }
    };
    Ok(Packet::Ptw { size, payload, ip })
}

/// A `uint` at the cursor, with pttc's message when there is none.
fn cursor_uint(
    c: &mut Cursor<'_>,
    bits: u32,
    dir: &str,
    what: &str,
) -> Result<u64, DirectiveError> {
    match c.uint(bits) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => fail(
            format!("{dir}: bad argument, expected {what}"),
            Reason::Parse,
        ),
        Err(e) => fail(format!("{dir}: parsing failed"), e),
    }
}

/// CFE types that carry a vector.
const CFE_WITH_VECTOR: [u64; 5] = [0x01, 0x05, 0x09, 0x0c, 0x0e];

fn cfe(payload: &str) -> Result<Packet, DirectiveError> {
    let mut c = Cursor::new(payload);
    let ty = cursor_uint(&mut c, 8, "cfe", "8-bit unsigned integer 'type'")?;
    let vector = if c.token(":") {
        cursor_uint(&mut c, 8, "cfe", " 8-bit unsigned integer 'vector'")?
    } else if CFE_WITH_VECTOR.contains(&ty) {
        return fail("cfe: type needs 'vector' argument", Reason::Parse);
    } else {
        0
    };
    let ip = c.token(",");
    if ip && !c.token("ip") {
        return fail("cfe: bad argument, expected 'ip' keyword", Reason::Parse);
    }
    Ok(Packet::Cfe {
        ty: ty as u8 & 0x1f,
        vector: vector as u8,
        ip,
    })
}

fn evd(payload: &str) -> Result<Packet, DirectiveError> {
    let mut c = Cursor::new(payload);
    let ty = cursor_uint(&mut c, 8, "evd", "8-bit unsigned integer 'type'")?;
    if !c.token(":") {
        return fail("evd: bad argument, expected ':' separator", Reason::Parse);
    }
    let payload = cursor_uint(&mut c, 64, "evd", "64-bit unsigned integer 'payload'")?;
    Ok(Packet::Evd {
        ty: ty as u8 & 0x1f,
        payload,
    })
}

fn trig(payload: &str) -> Result<Packet, DirectiveError> {
    let mut c = Cursor::new(payload);
    let trbv = cursor_uint(&mut c, 8, "trig", "8-bit unsigned integer 'trbv'")?;
    let (mut ip, mut mult, mut icnt) = (false, false, None);
    // Flags follow, each after a comma; an unknown word ends the list.
    while c.token(",") {
        if c.token("ip") {
            ip = true;
        } else if c.token("mult") {
            mult = true;
        } else if c.token("icnt") {
            if !c.token(":") {
                return fail("trig: expected ':' after 'icnt'", Reason::Parse);
            }
            match c.uint(16) {
                Ok(Some(v)) => icnt = Some(v as u16),
                Ok(None) => return fail("trig: expected 16-bit uint 'icnt'", Reason::Parse),
                Err(e) => return fail("trig: parsing failed", e),
            }
        }
    }
    Ok(Packet::Trig {
        trbv: trbv as u8,
        ip,
        mult,
        icnt,
    })
}

/// The CYC encoding for counts that do not fit the 61 bits decoders read: libipt's
/// encoder writes them regardless.
fn cyc_bytes(value: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(cyc_size(value));
    let mut rest = value >> 5;
    let more = |r: u64| u8::from(r != 0);
    out.push(0x03 | more(rest) << 2 | ((value as u8) & 0x1f) << 3);
    while rest != 0 {
        let bits = (rest & 0x7f) as u8;
        rest >>= 7;
        out.push(bits << 1 | more(rest));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels() -> Labels {
        let mut m = BTreeMap::new();
        m.insert("l1".to_string(), 0xffff_8000_0010_2030);
        m.insert("L2".to_string(), 0x1000);
        Labels::from_assembly(m, 0x1000, [])
    }

    fn bytes(name: &str, payload: &str) -> Vec<u8> {
        let e = parse_packet(name, payload, &labels()).unwrap();
        let mut v = Vec::new();
        e.encode_into(&mut v).unwrap();
        v
    }

    fn packet(name: &str, payload: &str) -> Packet {
        match parse_packet(name, payload, &labels()) {
            Ok(Emit::Packet(p)) => p,
            other => panic!("{name}({payload}): {other:?}"),
        }
    }

    fn err(name: &str, payload: &str) -> (String, Reason) {
        let e = parse_packet(name, payload, &labels()).unwrap_err();
        (e.context, e.reason)
    }

    #[test]
    fn argumentless_packets() {
        assert_eq!(bytes("psb", ""), [0x02, 0x82].repeat(8));
        assert_eq!(bytes("psbend", ""), [0x02, 0x23]);
        assert_eq!(bytes("pad", ""), [0x00]);
        assert_eq!(bytes("ovf", ""), [0x02, 0xf3]);
        assert_eq!(bytes("stop", ""), [0x02, 0x83]);
        for name in ["psb", "psbend", "pad", "ovf", "stop"] {
            assert_eq!(err(name, " ").1, Reason::TrailingTokens);
        }
        assert_eq!(err("psb", "x").0, "psb: parsing failed");
    }

    #[test]
    fn tnt_strings() {
        assert_eq!(bytes("tnt", "t.t.n"), [0x1c]);
        assert_eq!(bytes("tnt", "tnnnt"), [0x62]);
        assert_eq!(bytes("tnt", " t t\tn "), [0x1c]);
        assert_eq!(bytes("tnt", ""), [0x02]);
        assert_eq!(bytes("tnt64", ""), [0x02, 0xa3, 0x01, 0, 0, 0, 0, 0]);
        assert_eq!(bytes("tnt64", "tn"), [0x02, 0xa3, 0b110, 0, 0, 0, 0, 0]);
        assert_eq!(
            packet("tnt64", &"t".repeat(47)),
            Packet::Tnt64(Tnt::from_results([true; 47]).unwrap())
        );
        assert_eq!(
            err("tnt", "tx"),
            ("tnt: parsing failed".into(), Reason::UnknownChar)
        );
        assert_eq!(err("tnt", "ttttttt").0, "encoder error in directive tnt");
        assert!(matches!(err("tnt64", &"n".repeat(48)).1, Reason::Encode(_)));
    }

    #[test]
    fn ip_packets() {
        assert_eq!(
            bytes("tip", "3: %l1"),
            [0x6d, 0x30, 0x20, 0x10, 0x00, 0x00, 0x80]
        );
        assert_eq!(bytes("fup", "1: %l1"), [0x3d, 0x30, 0x20]);
        assert_eq!(bytes("tip.pge", "0: %l1"), [0x11]);
        assert_eq!(
            bytes("tip.pgd", "2:0x12345678"),
            [0x41, 0x78, 0x56, 0x34, 0x12]
        );
        assert_eq!(
            bytes("fup", "6: 0x1122334455667788"),
            [0xdd, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        assert_eq!(bytes("tip", "4: 0x1000"), [0x8d, 0, 0x10, 0, 0, 0, 0]);
        assert_eq!(
            err("tip", ""),
            ("tip: parsing failed".into(), Reason::NoArgs)
        );
        assert_eq!(err("tip", "5: 0").1, Reason::Ipc);
        assert_eq!(err("tip", "7: 0").1, Reason::Ipc);
        assert_eq!(err("tip", "x: 0").1, Reason::ParseInt);
        assert_eq!(err("tip", "3:").1, Reason::IpMissing);
        assert_eq!(err("tip", "3: %nolabel").1, Reason::NoLabel);
        // The line is lower-cased before labels are looked up.
        assert_eq!(err("tip", "3: %l2").1, Reason::NoLabel);
        assert_eq!(err("fup", "3: 0x10 x").1, Reason::TrailingTokens);
        assert_eq!(err("fup", "3: 0x10x").1, Reason::ParseInt);
        assert_eq!(
            packet("fup", "3: %org"),
            Packet::fup(IpCompression::Sext48, 0x1000)
        );
    }

    #[test]
    fn mode_packets() {
        assert_eq!(bytes("mode.exec", "64bit"), [0x99, 0x01]);
        assert_eq!(bytes("mode.exec", "32bit"), [0x99, 0x02]);
        assert_eq!(bytes("mode.exec", " 16bit"), [0x99, 0x00]);
        assert_eq!(bytes("mode.exec", "64bit, if"), [0x99, 0x05]);
        assert_eq!(err("mode.exec", "8bit").1, Reason::Parse);
        assert_eq!(
            err("mode.exec", "64bit, of").0,
            "mode.exec: bad argument, expected \"if\""
        );
        assert_eq!(bytes("mode.tsx", "begin"), [0x99, 0x21]);
        assert_eq!(bytes("mode.tsx", "abort"), [0x99, 0x22]);
        assert_eq!(bytes("mode.tsx", "commit"), [0x99, 0x20]);
        assert_eq!(err("mode.tsx", " begin").1, Reason::Parse);
    }

    #[test]
    fn value_packets() {
        assert_eq!(
            bytes("pip", "0xcdef000"),
            [0x02, 0x43, 0x00, 0xef, 0xcd, 0, 0, 0]
        );
        assert_eq!(
            bytes("pip", "0xcdef000, nr"),
            [0x02, 0x43, 0x01, 0xef, 0xcd, 0, 0, 0]
        );
        assert_eq!(
            err("pip", "0x1000, rn"),
            ("pip: parsing failed".into(), Reason::TrailingTokens)
        );
        assert_eq!(err("pip", "").1, Reason::NoArgs);
        assert_eq!(bytes("tsc", "0xa0000"), [0x19, 0, 0, 0x0a, 0, 0, 0, 0]);
        assert_eq!(
            bytes("tsc", "0x10, ignored"),
            [0x19, 0x10, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes("cbr", "0x24"), [0x02, 0x03, 0x24, 0]);
        assert_eq!(
            err("cbr", "256"),
            ("cbr: parsing cbr failed".into(), Reason::TooBig)
        );
        assert_eq!(bytes("mtc", "0xc"), [0x59, 0x0c]);
        assert_eq!(
            bytes("tma", "0x102, 0x8"),
            [0x02, 0x73, 0x02, 0x01, 0, 0x08, 0]
        );
        assert_eq!(err("tma", "0x10000, 1").1, Reason::TooBig);
        assert_eq!(err("tma", "1").1, Reason::NoArgs);
        assert_eq!(err("tma", "1 , 2").1, Reason::ParseInt);
        assert_eq!(err("tma", "1, 2 3").1, Reason::TrailingTokens);
        assert!(matches!(err("tma", "1, 0x200").1, Reason::Encode(_)));
        assert_eq!(bytes("cyc", "0x3"), [0x1b]);
        assert_eq!(bytes("cyc", "0x100"), [0x07, 0x10]);
        assert_eq!(
            bytes("cyc", "0xffffffffffffffff"),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0e]
        );
        assert_eq!(
            bytes("vmcs", "0xcdef000"),
            [0x02, 0xc8, 0xef, 0xcd, 0, 0, 0]
        );
        assert_eq!(
            bytes("mnt", "0x1122334455667788"),
            [0x02, 0xc3, 0x88, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        assert_eq!(err("mnt", "0x1x").0, "mnt: parsing failed");
    }

    #[test]
    fn power_packets() {
        assert_eq!(bytes("exstop", ""), [0x02, 0x62]);
        assert_eq!(bytes("exstop", "ip"), [0x02, 0xe2]);
        assert_eq!(err("exstop", "ip ").1, Reason::TrailingTokens);
        assert_eq!(
            bytes("mwait", "0x1, 0x2"),
            [0x02, 0xc2, 1, 0, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(err("mwait", "0x1 , 0x2").1, Reason::ParseInt);
        assert_eq!(err("mwait", "0x1").1, Reason::NoArgs);
        assert_eq!(err("mwait", "1, 2, 3").1, Reason::TrailingTokens);
        assert_eq!(err("mwait", "0x100000000, 2").1, Reason::TooBig);
        assert_eq!(
            packet("pwre", "c1.0"),
            Packet::Pwre {
                state: 0,
                sub_state: 0xf,
                hw: false
            }
        );
        assert_eq!(
            packet("pwre", "c0, hw"),
            Packet::Pwre {
                state: 0xf,
                sub_state: 0xf,
                hw: true
            }
        );
        assert_eq!(
            packet("pwre", "c2.3"),
            Packet::Pwre {
                state: 1,
                sub_state: 2,
                hw: false
            }
        );
        assert_eq!(err("pwre", "c15").1, Reason::InvalidCState);
        assert_eq!(err("pwre", "c1.15").1, Reason::InvalidCState);
        assert_eq!(err("pwre", "x1").1, Reason::NoArgs);
        assert_eq!(
            err("pwre", ""),
            ("pwre: bad C-state".into(), Reason::NoArgs)
        );
        assert_eq!(
            err("pwre", "c"),
            ("pwre: bad C-state".into(), Reason::Parse)
        );
        assert_eq!(err("pwre", "c1, sw").1, Reason::TrailingTokens);
        let wake = |interrupt, store, autonomous| WakeReason {
            interrupt,
            store,
            autonomous,
        };
        assert_eq!(
            packet("pwrx", "int: c1, c6"),
            Packet::Pwrx {
                last: 0,
                deepest: 5,
                wake: wake(true, false, false)
            }
        );
        assert_eq!(
            bytes("pwrx", "st: c2, c0"),
            [0x02, 0xa2, 0x1f, 0x04, 0, 0, 0]
        );
        assert_eq!(
            packet("pwrx", "hw: c1, c1"),
            Packet::Pwrx {
                last: 0,
                deepest: 0,
                wake: wake(false, false, true)
            }
        );
        assert_eq!(err("pwrx", "").1, Reason::NoArgs);
        assert_eq!(err("pwrx", "ext: c1, c1").0, "pwrx: bad wake reason");
        assert_eq!(
            err("pwrx", "int: c1.1, c1"),
            ("pwrx: bad last C-state".into(), Reason::SubCState)
        );
        assert_eq!(
            err("pwrx", "int: c1"),
            ("pwrx: bad deepest C-state".into(), Reason::NoArgs)
        );
    }

    #[test]
    fn ptw_packets() {
        assert_eq!(bytes("ptw", "0: 0x1234"), [0x02, 0x12, 0x34, 0x12, 0, 0]);
        assert_eq!(
            bytes("ptw", "1: 0x1234, ip"),
            [0x02, 0xb2, 0x34, 0x12, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes("ptw", "0: 0x123456789"),
            [0x02, 0x12, 0x89, 0x67, 0x45, 0x23]
        );
        assert_eq!(
            err("ptw", ""),
            ("ptw: parsing failed".into(), Reason::NoArgs)
        );
        assert_eq!(err("ptw", "x: 1").0, "ptw: bad payload size");
        assert_eq!(err("ptw", "0:").0, "ptw: no payload");
        assert_eq!(err("ptw", "0: y").0, "ptw: bad payload");
        assert_eq!(
            err("ptw", "0: 1, pi"),
            ("ptw: parse error".into(), Reason::TrailingTokens)
        );
        assert_eq!(err("ptw", "2: 1").0, "encoder error in directive ptw");
    }

    #[test]
    fn event_trace_packets() {
        assert_eq!(bytes("cfe", "1: 14"), [0x02, 0x13, 0x01, 0x0e]);
        assert_eq!(bytes("cfe", "2, ip"), [0x02, 0x13, 0x82, 0x00]);
        assert_eq!(bytes("cfe", "0xe: 3, ip"), [0x02, 0x13, 0x8e, 0x03]);
        assert_eq!(err("cfe", "1").0, "cfe: type needs 'vector' argument");
        assert_eq!(err("cfe", "x").1, Reason::Parse);
        assert_eq!(err("cfe", "0x100").1, Reason::TooBig);
        assert_eq!(err("cfe", "1: x").1, Reason::Parse);
        assert_eq!(
            err("cfe", "2, xp").0,
            "cfe: bad argument, expected 'ip' keyword"
        );
        assert_eq!(
            bytes("evd", "1: 0x1122"),
            [0x02, 0x53, 0x01, 0x22, 0x11, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            err("evd", "1 0x11").0,
            "evd: bad argument, expected ':' separator"
        );
        assert_eq!(err("evd", "1:").1, Reason::Parse);
        assert_eq!(bytes("trig", "0x3"), [0xd9, 0x00, 0x03]);
        assert_eq!(bytes("trig", "1, ip, mult"), [0xd9, 0xa0, 0x01]);
        assert_eq!(
            bytes("trig", "1, icnt: 0x102"),
            [0xd9, 0x40, 0x01, 0x02, 0x01]
        );
        assert_eq!(bytes("trig", "1, what"), [0xd9, 0x00, 0x01]);
        assert_eq!(
            err("trig", "1, icnt 3").0,
            "trig: expected ':' after 'icnt'"
        );
        assert_eq!(
            err("trig", "1, icnt: x").0,
            "trig: expected 16-bit uint 'icnt'"
        );
        assert_eq!(err("trig", "1, icnt: 0x10000").1, Reason::TooBig);
    }

    #[test]
    fn raw_values() {
        assert_eq!(bytes("raw-8", "0x2"), [0x02]);
        assert_eq!(bytes("raw-16", "0x102"), [0x02, 0x01]);
        assert_eq!(bytes("raw-32", "0x1"), [1, 0, 0, 0]);
        assert_eq!(bytes("raw-64", "0x1"), [1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(err("raw-8", "0x100").1, Reason::TooBig);
        assert_eq!(err("raw-8", "").1, Reason::NoArgs);
    }

    #[test]
    fn unknown_directives() {
        assert_eq!(
            err("psb ", ""),
            ("invalid syntax".into(), Reason::UnknownDirective)
        );
        assert_eq!(err("bogus", "").1, Reason::UnknownDirective);
    }
}
