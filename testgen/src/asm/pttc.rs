//! Label addresses the way pttc computes them: by reading yasm's listing.
//!
//! pttc does not ask the assembler for symbol values; it scans the listing
//! for tokens ending in `:` and adds the org (or the section's `vstart`) to
//! the listed offset. That reading has corner cases (a label on a directive
//! line gets the next listed address, `section_<name>_length` counts the
//! significant bytes of each listed opcode field, a name defined twice is an
//! error), and .ptt expectations were written against it, so we run the same
//! reading over our own listing, which is identical to yasm's.

/// C `strtoull` followed by pttc's "whole token" check.
fn str_to_u64(s: &str, base: u32) -> Option<u64> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, t.get(1..)?),
        Some(b'+') => (false, t.get(1..)?),
        _ => (false, t),
    };
    let (digits, radix) = match base {
        16 => (
            t.strip_prefix("0x")
                .or_else(|| t.strip_prefix("0X"))
                .unwrap_or(t),
            16,
        ),
        0 => {
            if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                (h, 16)
            } else if t.len() > 1 && t.starts_with('0') {
                (t.get(1..)?, 8)
            } else {
                (t, 10)
            }
        }
        b => (t, b),
    };
    if digits.is_empty() {
        return None;
    }
    let v = u64::from_str_radix(digits, radix).ok()?;
    Some(if neg { v.wrapping_neg() } else { v })
}

/// C `sscanf("%x")`: the longest hex prefix (with optional `0x`), if any.
fn scan_hex(s: &str) -> Option<u64> {
    let t = s.trim_start();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    let n = t.bytes().take_while(u8::is_ascii_hexdigit).count();
    let digits = t.get(..n).filter(|d| !d.is_empty())?;
    // sscanf saturates on overflow; no listing field gets there.
    Some(u64::from_str_radix(digits, 16).unwrap_or(u64::MAX))
}

/// C `sscanf("%d")`: an optionally signed decimal prefix.
fn scan_dec(s: &str) -> Option<usize> {
    let t = s.trim_start();
    let t = t.strip_prefix(['+', '-']).unwrap_or(t);
    let n = t.bytes().take_while(u8::is_ascii_digit).count();
    (n > 0).then_some(n)
}

fn tokens(line: &str) -> impl Iterator<Item = &str> {
    line.split(' ').filter(|t| !t.is_empty())
}

/// Why pttc would stop reading a listing's labels (pttc's words).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ListingError(pub String);

/// The label list pttc builds from a listing, in its order; an error where
/// pttc would stop.
pub fn labels(listing: &str) -> Result<Vec<(String, u64)>, ListingError> {
    listing_labels(listing).map_err(ListingError)
}

fn listing_labels(listing: &str) -> Result<Vec<(String, u64)>, String> {
    let lines: Vec<&str> = listing.lines().collect();
    let mut labels = List::default();
    let append = |labels: &mut List, name: &str, v: u64| labels.append(name, v);
    let mut base = 0u64;
    let mut have_org = false;
    let mut length: Option<usize> = None;

    for line in &lines {
        // Directives are the rare lines with a `[`; one byte scan spares the
        // two substring searches on every other line.
        let directive = line.as_bytes().contains(&b'[');
        if let Some(i) = directive.then(|| line.find("[section")).flatten() {
            let rest = line.get(i + "[section".len()..).unwrap_or("");
            let mut words = rest.split([' ', '=', ']']).filter(|t| !t.is_empty());
            let name = words.next().ok_or("section without a name")?;
            length = Some(append(&mut labels, &format!("section_{name}_length"), 0)?);
            while let Some(attr) = words.next() {
                if attr != "start" && attr != "vstart" {
                    return Err(format!("unknown section attribute `{attr}'"));
                }
                let value = words.next().ok_or("section attribute without value")?;
                let v = scan_hex(value).ok_or("bad section attribute value")?;
                append(&mut labels, &format!("section_{name}_{attr}"), v)?;
            }
            continue;
        }
        if let Some(i) = directive.then(|| line.find("[org")).flatten() {
            let rest = line.get(i + "[org".len()..).unwrap_or("");
            let end = rest.find(']').ok_or("no org directive")?;
            base = str_to_u64(rest.get(..end).unwrap_or(""), 0).ok_or("bad org value")?;
            append(&mut labels, "org", base)?;
            have_org = true;
            continue;
        }
        let Some(len_idx) = length else { continue };
        let mut t = tokens(line);
        let (Some(num), Some(addr), Some(op)) = (t.next(), t.next(), t.next()) else {
            continue;
        };
        if str_to_u64(num, 10).is_none() || str_to_u64(addr, 16).is_none() {
            continue;
        }
        let Some(mut value) = str_to_u64(op, 16) else {
            continue;
        };
        let mut size = 0u64;
        while value != 0 {
            size += 1;
            value >>= 8;
        }
        if let Some(l) = labels.get_mut(len_idx) {
            l.1 = l.1.wrapping_add(size);
        }
    }
    if !have_org {
        return Err("no org directive".into());
    }

    let mut i = 0;
    while i < lines.len() {
        let line = lines.get(i).copied().unwrap_or("");
        i += 1;
        let directive = line.as_bytes().contains(&b'[');
        if let Some(p) = directive.then(|| line.find("[section")).flatten() {
            let rest = line.get(p + "[section".len()..).unwrap_or("");
            let name = tokens(rest).next().ok_or("section without a name")?;
            let key = format!("section_{name}_vstart");
            base = labels.value(&key).ok_or(format!("no label `{key}'"))?;
            continue;
        }
        let mut t = tokens(line);
        if t.next().is_none() {
            continue;
        }
        let Some(second) = t.next() else { continue };
        if let Some(name) = second.strip_suffix(':') {
            // A label alone: its address is on the next line that has one;
            // pttc then resumes after that line.
            let mut found = None;
            while i < lines.len() {
                let next = lines.get(i).copied().unwrap_or("");
                let mut nt = next.trim_start();
                if let Some(n) = scan_dec(nt) {
                    nt = nt.trim_start_matches(['+', '-']).get(n..).unwrap_or("");
                    if let Some(a) = scan_hex(nt) {
                        found = Some(a);
                        break;
                    }
                }
                i += 1;
            }
            i += 1;
            let a = found.ok_or(format!("label `{name}' has no address"))?;
            let v = a.checked_add(base).ok_or("label address overflows")?;
            append(&mut labels, name, v)?;
            continue;
        }
        let Some(addr) = scan_hex(second) else {
            continue;
        };
        if t.next().is_none() {
            continue;
        }
        let Some(name) = t.next().and_then(|w| w.strip_suffix(':')) else {
            continue;
        };
        let v = addr.checked_add(base).ok_or("label address overflows")?;
        append(&mut labels, name, v)?;
    }
    Ok(labels.list)
}

/// pttc's label list, in its order, with an index by name (pttc searches its list
/// from the start for each label: a big source would take quadratic time).
#[derive(Default)]
struct List {
    list: Vec<(String, u64)>,
    index: super::NameMap<usize>,
}

impl List {
    /// Appends a label; a name already there is an error, as in pttc.
    fn append(&mut self, name: &str, v: u64) -> Result<usize, String> {
        if self.index.contains_key(name) {
            return Err(format!("label `{name}' is not unique"));
        }
        self.index.insert(name.to_string(), self.list.len());
        self.list.push((name.to_string(), v));
        Ok(self.list.len() - 1)
    }

    fn value(&self, name: &str) -> Option<u64> {
        self.list.get(*self.index.get(name)?).map(|l| l.1)
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut (String, u64)> {
        self.list.get_mut(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_number_parsing() {
        assert_eq!(str_to_u64("0x10", 0), Some(16));
        assert_eq!(str_to_u64("010", 0), Some(8));
        assert_eq!(str_to_u64("10", 0), Some(10));
        assert_eq!(str_to_u64("EBFF", 16), Some(0xebff));
        assert_eq!(str_to_u64("90<rept>", 16), None);
        assert_eq!(str_to_u64("D500-", 16), None);
        assert_eq!(scan_hex("l5:"), None);
        assert_eq!(scan_hex("add:"), Some(0xadd));
        assert_eq!(scan_dec("12 x"), Some(2));
    }

    #[test]
    fn reads_labels_like_pttc() {
        let listing = "\
     1                                 %line 1+1 t.ptt
     2                                 [org 0x1000]
     3                                 [bits 64]
     4 00000000 90                     l0: nop
     5                                 l1:
     6 00000001 EBFF                   l2: jmp l3
     7 00000003 F4                     l3: hlt
";
        let l = labels(listing).unwrap();
        assert_eq!(
            l,
            vec![
                ("org".into(), 0x1000),
                ("l0".into(), 0x1000),
                ("l1".into(), 0x1001),
                ("l3".into(), 0x1003)
            ]
        );
    }

    #[test]
    fn sections_and_lengths() {
        let listing = "\
     1                                 %line 1+1 t.ptt
     2                                 [org 0x1000]
     3                                 [section .a vstart=0x2000]
     4 00000000 0F05                   s0: syscall
     5 00000002 00                     db 0
";
        let l = labels(listing).unwrap();
        // A zero byte counts for nothing: pttc measures the opcode's value.
        assert!(l.contains(&("section_.a_length".into(), 2)));
        assert!(l.contains(&("section_.a_vstart".into(), 0x2000)));
        assert!(l.contains(&("s0".into(), 0x2000)));
    }

    #[test]
    fn failures() {
        assert!(labels("     1 00000000 90 l0: nop\n").is_err());
        let dup = "     2 [org 0]\n     3 00000000 90 a: nop\n     4 00000001 90 a: nop\n";
        assert!(labels(dup).is_err());
        let attr = "     2 [org 0]\n     3 [section .a align=16]\n";
        assert!(labels(attr).is_err());
    }
}
