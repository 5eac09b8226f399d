//! Symbol names as perf 6.1 prints them (`symbol-elf.c`'s `demangle_sym`).
//!
//! perf as distributions build it (without libbfd) demangles with libiberty's
//! `cplus_demangle` and no options: the name without parameters, return type or
//! clone suffixes (`_Z4lvl2i.cold` and `_Z4lvl2i` are both `lvl2`,
//! `_ZNK2ns6Widget3getEi.isra.0` is `ns::Widget::get`), templates kept
//! (`twice<int>`). libiberty's automatic style tries Rust first: legacy Rust
//! symbols lose their hash (`std::rt::lang_start_internal`), v0 symbols are
//! written without hashes or disambiguators. Names that are not mangled stay as
//! they are; so does a name the demanglers cannot read. `.plt` entries are named
//! `demangled@plt`.
//!
//! Rust names go to the `rustc-demangle` crate. C++ names are read by the
//! Itanium ABI demangler of this module, written here because no crate prints
//! libiberty's text: `cpp_demangle` spells vtables `{vtable(X)}`, literals
//! `(unsigned int)8`, keeps `, ` before an empty pack and expands `std::istream`,
//! and its syntax tree and substitution table are private, so its output
//! cannot be re-printed. The demangler has a module per concept:
//! [`ast`] (the tree and the ABI's tables), [`parse`] (the grammar and the
//! substitution table), [`special`] (vtables, typeinfo, thunks, guards, clones)
//! and [`print`] (libiberty's text). It fails (`None`, perf then prints the
//! name raw) where libiberty fails, and on names nested deeper than
//! [`parse::MAX_DEPTH`] or whose text would grow without bound.

mod ast;
mod parse;
mod print;
mod special;

use parse::Parser;

/// perf's name for the symbol `name` (`None`: perf keeps `name` as it is).
pub fn demangle(name: &str) -> Option<String> {
    if let Some(rust) = rust(name) {
        return Some(rust);
    }
    cpp(name)
}

/// A Rust symbol (legacy `_ZN…17h<hash>E` or v0 `_R…`), as libiberty's
/// `rust_demangle` without `DMGL_VERBOSE` prints it.
fn rust(name: &str) -> Option<String> {
    if !(name.starts_with("_ZN") || name.starts_with("_R")) {
        return None;
    }
    let d = rustc_demangle::try_demangle(name).ok()?;
    // rustc-demangle also reads an Itanium name that merely looks Rust-like;
    // libiberty's legacy rule is stricter: the last element is the hash.
    if name.starts_with("_ZN") && !legacy_rust_hash(name) {
        return None;
    }
    Some(format!("{d:#}"))
}

/// Whether a `_ZN…E` name ends in a legacy Rust hash element (`17h` and 16
/// hex digits), libiberty's `rust_is_mangled` test.
fn legacy_rust_hash(name: &str) -> bool {
    let body = name.split('.').next().unwrap_or(name);
    let Some(body) = body.strip_suffix('E') else {
        return false;
    };
    body.len() >= 19
        && body[body.len() - 19..].starts_with("17h")
        && body[body.len() - 16..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
}

/// An Itanium C++ symbol as libiberty's `cplus_demangle(name, 0)` prints it:
/// the name without parameters (what follows it, clone suffixes included,
/// is not looked at), special names with the parameters of what they name.
fn cpp(name: &str) -> Option<String> {
    let mut p = Parser::new(name);
    let root = if name.starts_with("_Z") {
        p.mangled_name(true)?
    } else {
        let (text, rest) = special::global_ctors(name)?;
        let inner = if rest.starts_with("_Z") {
            p.advance(name.len() - rest.len());
            p.mangled_name(false)?
        } else {
            p.add(ast::Node::Name(rest))
        };
        p.add(ast::Node::Global(text, inner))
    };
    // Work and output grow at most this much faster than the name, as long
    // as substitutions do not nest exponentially.
    let budget = 1 << 20 | name.len().saturating_mul(256);
    print::print(&p.nodes, root, budget)
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[track_caller]
    fn is(mangled: &str, want: &str) {
        assert_eq!(demangle(mangled).as_deref(), Some(want), "{mangled}");
    }

    /// Names perf 6.1 printed for a C++ program (g++ 12) and its libraries.
    #[test]
    fn cpp_as_perf_prints() {
        is("_Z4lvl2i", "lvl2");
        is("_Z4lvl2i.cold", "lvl2");
        is("_ZNK2ns6Widget3getEi.isra.0", "ns::Widget::get");
        is("_Z5twiceIiET_S0_", "twice<int>");
        is("_Z5twiceIdET_S0_", "twice<double>");
        is(
            "_ZNSt14error_categoryC2Ev",
            "std::error_category::error_category",
        );
        is(
            "_ZNSt14error_categoryD2Ev",
            "std::error_category::~error_category",
        );
        is("_ZdlPvm", "operator delete");
        is("_Znwm", "operator new");
        is(
            "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE12_M_constructEmc",
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_construct",
        );
        is(
            "_ZNSs4_Rep10_M_destroyERKSaIcE",
            "std::string::_Rep::_M_destroy",
        );
        is(
            "_ZNK10__cxxabiv117__class_type_info11__do_upcastEPKS0_PKvRNS0_15__upcast_resultE",
            "__cxxabiv1::__class_type_info::__do_upcast",
        );
    }

    #[test]
    fn rust_without_hashes() {
        is(
            "_ZN3std2rt19lang_start_internal17h0123456789abcdefE",
            "std::rt::lang_start_internal",
        );
        is("_RNvCs1234_7mycrate3foo", "mycrate::foo");
    }

    #[test]
    fn plain_names_stay() {
        for n in [
            "main",
            "main.cold",
            "_start",
            "__libc_start_main@@GLIBC_2.34",
            "_Z",
            "_Zjunk",
        ] {
            assert_eq!(demangle(n), None, "{n}");
        }
    }
}
