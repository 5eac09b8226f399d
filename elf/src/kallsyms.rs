//! The kernel's symbols as `/proc/kallsyms` lists them (and as perf keeps a copy
//! in its build-id cache, `[kernel.kallsyms]/<build id>/kallsyms`): one line per
//! symbol, `address type name [module]`, no sizes.
//!
//! perf names a kernel address from that list when it has no vmlinux: it keeps
//! the text, data and bss symbols of the kernel image (types `T`, `W`, `D`, `B`
//! in either case; module symbols belong to the modules' own maps), and a
//! symbol ends where the next one starts, as [`SymbolTable::build`] sizes
//! symbols without a size. The running kernel's list is only right for a
//! recording of that kernel: [`running_build_id`] tells which one runs.
//!
//! ```
//! let t = pt_elf::kallsyms::parse(
//!     "ffffffff81000000 T _stext\nffffffff81000100 t helper\nffffffff81000200 T next\n",
//! );
//! assert_eq!(t.find(0xffffffff81000150).unwrap().name(), "helper");
//! ```

use crate::symbols::{Symbol, SymbolTable};
use object::elf;

/// The symbols of a kallsyms list (lines that do not parse are passed over, as
/// perf's reader does).
pub fn parse(text: &str) -> SymbolTable {
    let mut syms = Vec::new();
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        // `[module]`: the symbol is a module's.
        if words.next().is_some() {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let Some(kind) = kind.chars().next().filter(|_| kind.len() == 1) else {
            continue;
        };
        if !matches!(kind.to_ascii_uppercase(), 'T' | 'W' | 'D' | 'B') {
            continue;
        }
        let binding = match kind {
            'W' | 'w' => elf::STB_WEAK,
            k if k.is_ascii_uppercase() => elf::STB_GLOBAL,
            _ => elf::STB_LOCAL,
        };
        syms.push(Symbol::new(addr, addr, name, binding));
    }
    SymbolTable::build(syms, Vec::new())
}

/// The build id of the running kernel (from `/sys/kernel/notes`), if readable.
pub fn running_build_id() -> Option<Vec<u8>> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    crate::build_id::of_notes(&notes).map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_kernels_code_and_data_and_sizes_by_the_next() {
        let t = parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81000010 t local_fn\n\
             ffffffff81000020 W weak_fn\n\
             ffffffff81000030 r rodata_skipped\n\
             ffffffff81000040 D data\n\
             ffffffffc0000000 t mod_fn\t[nf_tables]\n\
             garbage line\n",
        );
        let names: Vec<&str> = t.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["_stext", "local_fn", "weak_fn", "data"]);
        assert_eq!(t.find(0xffffffff8100001f).unwrap().name(), "local_fn");
        // `r` is not kept: weak_fn runs on to the next kept symbol.
        assert_eq!(t.find(0xffffffff81000035).unwrap().name(), "weak_fn");
        assert!(t.find(0xffffffffc0000000).is_none());
    }

    #[test]
    fn finds_the_gnu_build_id_among_notes() {
        let mut notes = Vec::new();
        // A Xen note first, then the build id.
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 1u32, &[1u8, 2, 3][..]),
            (&b"GNU\0"[..], 3, &[0xab; 20][..]),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&kind.to_ne_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert_eq!(crate::build_id::of_notes(&notes), Some(&[0xab; 20][..]));
        assert_eq!(crate::build_id::of_notes(&notes[..20]), None);
        assert_eq!(crate::build_id::of_notes(&[0xff; 40]), None);
    }
}
