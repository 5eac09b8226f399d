//! Encodings to check the listing against XED, and the check.
//!
//! The listing ([`pt_decoder::listing`]) must print every instruction as libipt's ptxed
//! prints it through XED. This tool writes encodings, one per line as
//! `<bits> <ip, hex> <bytes, hex>`:
//!
//! - `sweep ELF...`: the unique encodings of the executable sections of ELF files (a
//!   linear sweep: what compilers emit);
//! - `random COUNT SEED BITS`: random bytes behind random prefixes, REX, VEX and EVEX
//!   that iced-x86 decodes;
//! - `forms BITS SEED PER`: up to PER encodings of every instruction form (iced-x86
//!   code) valid in BITS-bit code.
//!
//! XED's text for them comes from a small program around XED (not part of this
//! repository) that decodes each line with `xed_decode` in the line's mode and formats
//! it with `xed_format_generic`, default options and the line's address as the runtime
//! address, exactly as libipt's ptxed does, and prints `<length>\t<Intel>\t<AT&T>` or
//! `ERR:(<n>) <name>` for XED's decode error. Then:
//!
//! - `compare ENCODINGS XED [att]`: lists where the listing's text differs, by form;
//! - `select ENCODINGS XED ...`: the table `tests/data/xed_table.txt` (representative
//!   encodings of every form; the files' order is the order of preference).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;

use iced_x86::{Code, Decoder, DecoderOptions, EncodingKind, Instruction, OpKind, Register};
use pt_decoder::listing::{Formatter, Syntax};
use pt_encoder::ExecMode;

/// The tests' seeded generator.
fn next(seed: &mut pt_testkit::Rng) -> u64 {
    seed.next()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn mode(bits: u32) -> ExecMode {
    match bits {
        16 => ExecMode::Bit16,
        32 => ExecMode::Bit32,
        _ => ExecMode::Bit64,
    }
}

/// The decoder options of the listing (XED's decode of the F3 forms).
const OPTIONS: u32 =
    DecoderOptions::NO_MPFX_0FBC | DecoderOptions::NO_MPFX_0FBD | DecoderOptions::NO_WBNOINVD;

/// One line of an encodings file.
fn parse(line: &str) -> (u32, u64, Vec<u8>) {
    let mut f = line.split(' ');
    let bits = f.next().and_then(|b| b.parse().ok()).expect("bits");
    let ip = f
        .next()
        .and_then(|ip| u64::from_str_radix(ip, 16).ok())
        .expect("ip");
    (bits, ip, unhex(f.next().expect("bytes")))
}

fn sweep(files: &[String], out: &mut impl Write) {
    use object::{Object, ObjectSection, SectionKind};
    let mut seen = HashSet::new();
    for f in files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{f}: {e}"));
        let bits = if file.is_64() { 64 } else { 32 };
        for s in file.sections().filter(|s| s.kind() == SectionKind::Text) {
            let Ok(code) = s.data() else { continue };
            let mut pos = 0;
            while pos < code.len() {
                let end = (pos + 15).min(code.len());
                let i = Decoder::with_ip(bits, &code[pos..end], 0, OPTIONS).decode();
                if i.is_invalid() {
                    pos += 1;
                    continue;
                }
                let b = &code[pos..pos + i.len()];
                if seen.insert(b.to_vec()) {
                    let _ = writeln!(out, "{bits} 100000 {}", hex(b));
                }
                pos += i.len();
            }
        }
    }
}

fn random(count: usize, seed: u64, bits: u32, out: &mut impl Write) {
    let mut seed = pt_testkit::Rng::new(seed);
    let mut seen = HashSet::new();
    while seen.len() < count {
        let mut b = Vec::new();
        let prefixes = [
            0x66, 0x67, 0xf2, 0xf3, 0xf0, 0x2e, 0x3e, 0x26, 0x36, 0x64, 0x65, 0x66, 0xf3,
        ];
        for _ in 0..next(&mut seed) % 4 {
            if next(&mut seed).is_multiple_of(3) {
                b.push(prefixes[(next(&mut seed) % prefixes.len() as u64) as usize]);
            }
        }
        if bits == 64 && next(&mut seed).is_multiple_of(3) {
            b.push(0x40 | (next(&mut seed) % 16) as u8);
        }
        match next(&mut seed) % 10 {
            0..=2 => {}
            3..=4 => b.push(0x0f),
            5 => b.extend([0x0f, 0x38]),
            6 => b.extend([0x0f, 0x3a]),
            7 => b.push(0xc5),
            8 => b.push(0xc4),
            _ => b.push(0x62),
        }
        for _ in 0..16 {
            b.push(next(&mut seed) as u8);
        }
        let i = Decoder::with_ip(bits, &b[..15], 0x10_0000, 0).decode();
        if !i.is_invalid() && seen.insert(b[..i.len()].to_vec()) {
            let _ = writeln!(out, "{bits} 100000 {}", hex(&b[..i.len()]));
        }
    }
}

/// Random bytes shaped by the form's opcode description: its prefixes, escape or
/// VEX/EVEX/XOP fields, opcode, ModRM group; the rest random.
fn form_bytes(
    code: Code,
    bits: u32,
    seed: &mut pt_testkit::Rng,
    attempt: usize,
) -> Option<Vec<u8>> {
    use iced_x86::{MandatoryPrefix, OpCodeOperandKind, OpCodeTableKind};
    let oc = code.op_code();
    let mut r = || next(seed);
    let mut b: Vec<u8> = Vec::new();
    if r() % 5 == 0 {
        b.push([0x26u8, 0x2e, 0x36, 0x3e, 0x64, 0x65][(r() % 6) as usize]);
    }
    let asz = oc.address_size();
    if (asz != 0 && asz != bits && !(bits == 64 && asz == 64)) || (asz == 0 && r() % 6 == 0) {
        b.push(0x67);
    }
    let mpfx = match oc.mandatory_prefix() {
        MandatoryPrefix::P66 => Some(0x66u8),
        MandatoryPrefix::PF3 => Some(0xf3),
        MandatoryPrefix::PF2 => Some(0xf2),
        _ => None,
    };
    let pp = match oc.mandatory_prefix() {
        MandatoryPrefix::P66 => 1,
        MandatoryPrefix::PF3 => 2,
        MandatoryPrefix::PF2 => 3,
        _ => 0,
    };
    let osz = oc.operand_size();
    let opcode: Vec<u8> = (0..oc.op_code_len())
        .rev()
        .map(|i| (oc.op_code() >> (8 * i)) as u8)
        .collect();
    let plus_r = oc.op_kinds().iter().any(|k| {
        matches!(
            k,
            OpCodeOperandKind::r8_opcode
                | OpCodeOperandKind::r16_opcode
                | OpCodeOperandKind::r32_opcode
                | OpCodeOperandKind::r64_opcode
        )
    });
    let group = oc.group_index() as u8 & 7;
    let modrm = |r: &mut dyn FnMut() -> u64| -> u8 {
        if oc.is_rm_group() {
            0xc0 | (group << 3) | (oc.rm_group_index() as u8 & 7)
        } else if oc.is_group() {
            (r() as u8 & 0xc7) | (group << 3)
        } else {
            r() as u8
        }
    };
    let w = |r: &mut dyn FnMut() -> u64| {
        if oc.is_wig() || (oc.is_wig32() && bits != 64) {
            (r() & 1) as u8
        } else {
            oc.w() as u8
        }
    };
    let vvvv = |r: &mut dyn FnMut() -> u64| {
        let v = if r().is_multiple_of(2) {
            0xf
        } else {
            (r() & 0xf) as u8
        };
        if bits != 64 {
            v | 8
        } else {
            v
        }
    };
    match oc.encoding() {
        EncodingKind::Legacy => {
            if (osz == 16 && bits != 16) || (osz == 32 && bits == 16) {
                b.push(0x66);
            }
            b.extend(mpfx);
            if r() % 8 == 0 {
                b.push([0xf0u8, 0xf2, 0xf3][(r() % 3) as usize]);
            }
            if bits == 64 {
                let mut rex = 0u8;
                if osz == 64 && !oc.default_op_size64() && !oc.force_op_size64() {
                    rex |= 0x48;
                }
                if r() % 2 == 0 {
                    rex |= 0x40 | (r() as u8 & 7);
                }
                if rex != 0 {
                    b.push(rex);
                }
            }
            match oc.table() {
                OpCodeTableKind::T0F => b.push(0x0f),
                OpCodeTableKind::T0F38 => b.extend([0x0f, 0x38]),
                OpCodeTableKind::T0F3A => b.extend([0x0f, 0x3a]),
                _ => {}
            }
            let mut op = opcode.clone();
            if plus_r {
                if let Some(last) = op.last_mut() {
                    *last += (r() % 8) as u8;
                }
            }
            b.extend(op);
            b.push(modrm(&mut r));
        }
        EncodingKind::VEX | EncodingKind::XOP => {
            let map = match oc.table() {
                OpCodeTableKind::T0F38 => 2,
                OpCodeTableKind::T0F3A => 3,
                OpCodeTableKind::MAP8 => 8,
                OpCodeTableKind::MAP9 => 9,
                OpCodeTableKind::MAP10 => 10,
                _ => 1,
            };
            let mut rxb = r() as u8 & 0xe0;
            if bits != 64 {
                rxb |= 0xc0;
            }
            let l = if oc.is_lig() {
                (r() & 1) as u8
            } else {
                oc.l() as u8
            };
            b.push(if oc.encoding() == EncodingKind::XOP {
                0x8f
            } else {
                0xc4
            });
            b.push(rxb | map);
            b.push((w(&mut r) << 7) | (vvvv(&mut r) << 3) | (l << 2) | pp);
            b.extend(opcode.last());
            b.push(modrm(&mut r));
        }
        EncodingKind::EVEX => {
            let map = match oc.table() {
                OpCodeTableKind::T0F38 => 2,
                OpCodeTableKind::T0F3A => 3,
                OpCodeTableKind::MAP5 => 5,
                OpCodeTableKind::MAP6 => 6,
                _ => 1,
            };
            let mut p0 = r() as u8 & 0xf0;
            if bits != 64 {
                p0 |= 0xf0;
            }
            b.push(0x62);
            b.push(p0 | map);
            b.push((w(&mut r) << 7) | (vvvv(&mut r) << 3) | 4 | pp);
            let l = if oc.is_lig() {
                (r() % 3) as u8
            } else {
                oc.l() as u8
            };
            let mut p2 = (r() as u8 & 0x97) | (l << 5);
            if r() % 2 == 0 || bits != 64 {
                p2 |= 8;
            }
            if attempt.is_multiple_of(3) {
                p2 &= !0x10;
            }
            b.push(p2);
            b.extend(opcode.last());
            b.push(modrm(&mut r));
        }
        EncodingKind::D3NOW => {
            b.extend([0x0f, 0x0f]);
            let m = if r() % 2 == 0 {
                0xc0 | (r() as u8 & 0x3f)
            } else if bits == 16 {
                (r() as u8 & 0x38) | [0, 1, 2, 3, 4, 5, 7][(r() % 7) as usize]
            } else {
                (r() as u8 & 0x38) | [0, 1, 2, 3, 6, 7][(r() % 6) as usize]
            };
            b.push(m);
            b.push(oc.op_code() as u8);
            return Some(b);
        }
        _ => return None,
    }
    for _ in 0..12 {
        b.push(r() as u8);
    }
    Some(b)
}

fn forms(bits: u32, seed: u64, per: usize, out: &mut impl Write) {
    let mut seed = pt_testkit::Rng::new(seed);
    let mut missing = 0;
    for code in Code::values() {
        let oc = code.op_code();
        let valid = match bits {
            16 => oc.mode16(),
            32 => oc.mode32(),
            _ => oc.mode64(),
        };
        if !oc.is_instruction() || oc.decoder_option() != 0 || oc.fwait() || !valid {
            continue;
        }
        let mut found = std::collections::BTreeSet::new();
        for attempt in 0..400 {
            if found.len() >= per {
                break;
            }
            let Some(b) = form_bytes(code, bits, &mut seed, attempt) else {
                break;
            };
            let i = Decoder::with_ip(bits, &b, 0x10_0000, 0).decode();
            if i.code() == code && i.len() <= 15 {
                found.insert(b[..i.len()].to_vec());
            }
        }
        if found.is_empty() {
            missing += 1;
            eprintln!("no encoding of {code:?} ({})", oc.op_code_string());
        }
        for e in found {
            let _ = writeln!(out, "{bits} 100000 {}", hex(&e));
        }
    }
    eprintln!("{missing} forms without an encoding");
}

fn iced(bits: u32, bytes: &[u8], ip: u64) -> Instruction {
    Decoder::with_ip(bits, bytes, ip, OPTIONS).decode()
}

fn compare(encodings: &str, xed: &str, syntax: Syntax, out: &mut impl Write) {
    let encodings = std::fs::read_to_string(encodings).expect("encodings");
    let xed = std::fs::read_to_string(xed).expect("XED's text");
    let mut f = Formatter::new(syntax);
    let mut by_form: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let (mut total, mut wrong) = (0, 0);
    for (line, x) in encodings.lines().zip(xed.lines()) {
        let (bits, ip, bytes) = parse(line);
        total += 1;
        let mut got = String::new();
        let got = match f.format(&bytes, ip, mode(bits), &mut got) {
            Ok(d) if usize::from(d.size) == bytes.len() => got,
            Ok(d) => format!("length {}", d.size),
            Err(e) => format!("ERR:{e}"),
        };
        let want = match x.split('\t').collect::<Vec<_>>()[..] {
            [_, intel, att, ..] => match syntax {
                Syntax::Intel => intel.to_string(),
                Syntax::Att => att.to_string(),
            },
            _ => x.to_string(),
        };
        if got != want {
            wrong += 1;
            let form = format!("{:?}", iced(bits, &bytes, ip).code());
            let e = by_form.entry(form).or_default();
            e.0 += 1;
            if e.1.is_empty() {
                e.1 = format!("{line}\n    XED:  {want:?}\n    ours: {got:?}");
            }
        }
    }
    let mut forms: Vec<_> = by_form.into_iter().collect();
    forms.sort_by_key(|f| std::cmp::Reverse(f.1 .0));
    for (form, (n, example)) in &forms {
        let _ = writeln!(out, "{n:6} {form}\n  {example}");
    }
    let _ = writeln!(
        out,
        "{total} encodings, {wrong} differ ({} forms)",
        forms.len()
    );
}

fn select(files: &[String], out: &mut impl Write) {
    let mut seen = HashSet::new();
    for pair in files.chunks(2) {
        let [encodings, xed] = pair else {
            panic!("select needs pairs of files")
        };
        let real = encodings.contains("sweep");
        let encodings = std::fs::read_to_string(encodings).expect("encodings");
        let xed = std::fs::read_to_string(xed).expect("XED's text");
        for (line, x) in encodings.lines().zip(xed.lines()) {
            let (bits, ip, bytes) = parse(line);
            let i = iced(bits, &bytes, ip);
            if i.is_invalid() {
                continue;
            }
            let legacy = matches!(i.encoding(), EncodingKind::Legacy | EncodingKind::D3NOW);
            if bits == 16 && !legacy {
                continue;
            }
            let memory = (0..i.op_count()).any(|n| {
                !matches!(i.op_kind(n), OpKind::Register)
                    && format!("{:?}", i.op_kind(n)).starts_with("Memory")
            });
            let mut prefixes = 0u32;
            for &b in &bytes {
                match b {
                    0xf0 => prefixes |= 1,
                    0xf2 => prefixes |= 2,
                    0xf3 => prefixes |= 4,
                    0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 => prefixes |= 8,
                    0x66 => prefixes |= 16,
                    0x67 => prefixes |= 32,
                    0x40..=0x4f if bits == 64 => {}
                    _ => break,
                }
            }
            let decorations = u32::from(i.op_mask() != Register::None)
                | u32::from(i.zeroing_masking()) << 1
                | u32::from(i.is_broadcast()) << 2
                | u32::from(i.suppress_all_exceptions()) << 3;
            let error = x.starts_with("ERR");
            // 64-bit: every form with and without memory, and the prefix and decoration
            // variants compilers use; 32-bit: with and without memory for legacy forms;
            // 16-bit: the legacy forms.
            let key = match bits {
                64 if real => (bits, i.code(), memory, prefixes, decorations, error),
                64 => (bits, i.code(), memory, 0, 0, error),
                32 if legacy => (bits, i.code(), memory, 0, 0, error),
                _ => (bits, i.code(), false, 0, 0, error),
            };
            if !seen.insert(key) {
                continue;
            }
            let h = hex(&bytes);
            match x.split('\t').collect::<Vec<_>>()[..] {
                [_, intel, att, ..] => {
                    let _ = writeln!(out, "{bits} {h} \"{intel}\" \"{att}\"");
                }
                _ => {
                    let _ = writeln!(out, "{bits} {h} error \"{}\"", x.trim_start_matches("ERR:"));
                }
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let num = |i: usize| -> u64 {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("argument {i}: a number"))
    };
    match args.first().map(String::as_str) {
        Some("sweep") => sweep(&args[1..], &mut out),
        Some("random") => random(num(1) as usize, num(2), num(3) as u32, &mut out),
        Some("forms") => forms(num(1) as u32, num(2), num(3) as usize, &mut out),
        Some("compare") => {
            let syntax = if args.get(3).is_some_and(|a| a == "att") {
                Syntax::Att
            } else {
                Syntax::Intel
            };
            compare(&args[1], &args[2], syntax, &mut out)
        }
        Some("select") => select(&args[1..], &mut out),
        _ => eprintln!(
            "usage: listing_corpus sweep ELF... | random COUNT SEED BITS | forms BITS SEED PER\n\
             \x20      | compare ENCODINGS XED [att] | select ENCODINGS XED..."
        ),
    }
}
