//! The ABI's `<special-name>`s (`T…`, `G…`): virtual tables, type
//! information, thunks, guard variables, clones; and g++'s
//! `_GLOBAL__I_`/`_GLOBAL__D_` constructor lists.
//!
//! What a special name names is read with its parameters (libiberty's
//! `d_encoding` below the top), so a thunk prints as
//! `virtual thunk to A::~A()`.

use super::ast::{Id, Node};
use super::parse::Parser;

/// `T…` or `G…` at the reader's position.
pub(super) fn special_name(p: &mut Parser<'_>) -> Option<Id> {
    if p.check(b'T') {
        let (text, what) = match p.next_char() {
            b'V' => ("vtable for ", What::Type),
            b'T' => ("VTT for ", What::Type),
            b'I' => ("typeinfo for ", What::Type),
            b'S' => ("typeinfo name for ", What::Type),
            b'F' => ("typeinfo fn for ", What::Type),
            b'J' => ("java Class for ", What::Type),
            b'H' => ("TLS init function for ", What::Name),
            b'W' => ("TLS wrapper function for ", What::Name),
            b'A' => ("template parameter object for ", What::TemplateArg),
            b'h' => {
                call_offset(p, b'h')?;
                ("non-virtual thunk to ", What::Encoding)
            }
            b'v' => {
                call_offset(p, b'v')?;
                ("virtual thunk to ", What::Encoding)
            }
            b'c' => {
                let c = p.next_char();
                call_offset(p, c)?;
                let c = p.next_char();
                call_offset(p, c)?;
                ("covariant return thunk to ", What::Encoding)
            }
            b'C' => {
                // TC <derived type> <offset> _ <base type>
                let derived = p.type_()?;
                if p.number() < 0 || !p.check(b'_') {
                    return None;
                }
                let base = p.type_()?;
                return Some(p.add(Node::ConstructionVtable(base, derived)));
            }
            _ => return None,
        };
        let inner = match what {
            What::Type => p.type_()?,
            What::Name => p.name(false)?,
            What::TemplateArg => p.template_arg()?,
            What::Encoding => p.encoding(false)?,
        };
        return Some(p.add(Node::Special(text, inner)));
    }
    if p.check(b'G') {
        let (text, inner) = match p.next_char() {
            b'V' => ("guard variable for ", p.name(false)?),
            b'R' => {
                let name = p.name(false)?;
                let start = p.rest();
                let n = p.number();
                let digits = &start[..start.len() - p.rest().len()];
                if n < 0 {
                    return None;
                }
                let digits = digits.trim_start_matches('0');
                let num = p.add(Node::Name(if digits.is_empty() { "0" } else { digits }));
                return Some(p.add(Node::RefTemp(name, num)));
            }
            b'A' => ("hidden alias for ", p.encoding(false)?),
            b'T' => match p.next_char() {
                b'n' => ("non-transaction clone for ", p.encoding(false)?),
                _ => ("transaction clone for ", p.encoding(false)?),
            },
            _ => return None,
        };
        return Some(p.add(Node::Special(text, inner)));
    }
    None
}

enum What {
    Type,
    Name,
    TemplateArg,
    Encoding,
}

/// `h <offset> _` or `v <offset> _ <virtual offset> _`, not printed.
fn call_offset(p: &mut Parser<'_>, c: u8) -> Option<()> {
    match c {
        b'h' => {
            p.number();
        }
        b'v' => {
            p.number();
            if !p.check(b'_') {
                return None;
            }
            p.number();
        }
        _ => return None,
    }
    p.check(b'_').then_some(())
}

/// g++'s `_GLOBAL_[._$][ID]_<rest>`: `global constructors keyed to rest`
/// (rest demangled when it is mangled).
pub(super) fn global_ctors(name: &str) -> Option<(&'static str, &str)> {
    let b = name.as_bytes();
    if b.len() < 11
        || !name.starts_with("_GLOBAL_")
        || !matches!(b[8], b'.' | b'_' | b'$')
        || b[10] != b'_'
    {
        return None;
    }
    let text = match b[9] {
        b'I' => "global constructors keyed to ",
        b'D' => "global destructors keyed to ",
        _ => return None,
    };
    Some((text, &name[11..]))
}
