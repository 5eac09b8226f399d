//! pt-elf: what the toolkit knows about ELF files and their symbols, as perf
//! knows it. One owner for each piece, used by every tool (script, report,
//! export, the profile writers), the perf.data session and the simulator's
//! recorder.
//!
//! # Map
//!
//! | module | what | perf's source |
//! |---|---|---|
//! | [`build_id`] | the GNU build id of an ELF image (note sections, else `PT_NOTE` segments), stand-in ids (SHA-1 of the bytes), hex | `filename__read_build_id` |
//! | [`cache`] | the build-id cache layout, `DIR/.build-id/XX/REST` and `DIR/NAME/HEX/KIND`, read and written | `build-id.c` |
//! | [`debug_file`] | where symbols and DWARF are found: debuglink, the caches, `/usr/lib/debug`, `--symfs` | `dso__read_binary_type_filename` |
//! | [`symbols`] | perf's symbol table of a file: which symbols it keeps, `name@plt` entries, ifunc resolvers, duplicates, and its tree search; [`Symbols`] caches one per file | `symbol-elf.c`, `symbol.c` |
//! | [`demangle`] | names as perf prints them (C++ and Rust, without parameters) | `demangle_sym` |
//! | [`kallsyms`] | the kernel's symbols from a kallsyms list, the running kernel's build id | `kallsyms__parse`, `dso__load_kallsyms` |
//! | [`bias`] | load bias and file offsets through `PT_LOAD` segments | `map__map_ip` |
//! | [`srcline`] | source lines as perf prints them (binutils' `addr2line` answers) | `srcline.c` |
//! | [`vdso`] | this process's vDSO as a file that leaves nothing behind | `vdso__get_file` |
//!
//! Addresses in a [`SymbolTable`] are file offsets, as perf's `map__map_ip`
//! gives them for an IP: `ip - map start + map pgoff`.
//!
//! # Example
//!
//! The symbols of this very program, looked up the way `perf script` names an
//! address:
//!
//! ```
//! use pt_elf::{build_id, Symbols, SymbolOptions};
//!
//! let exe = std::env::current_exe()?;
//! let bytes = std::fs::read(&exe)?;
//! // The build id perf records for the file, in perf's hex.
//! let id = build_id::build_id(&bytes).map(build_id::hex);
//! println!("build id: {id:?}");
//!
//! let mut symbols = Symbols::new(SymbolOptions::default());
//! let name = exe.to_string_lossy();
//! let table = symbols.dso_table(&exe, &name, None);
//! let t = symbols.table(table);
//! // `main`'s file offset, and what perf would print there.
//! let main = t.iter().find(|s| s.name() == "main").expect("a main symbol");
//! let found = t.find(main.start + 1).expect("a symbol");
//! assert_eq!(found.name(), "main");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

pub mod bias;
pub mod build_id;
pub mod cache;
pub mod debug_file;
pub mod demangle;
pub mod kallsyms;
pub mod srcline;
pub mod symbols;
pub mod vdso;

pub use cache::{BuildIdCache, EntryKind};
pub use debug_file::DebugSearch;
pub use symbols::{Lookup, Symbol, SymbolId, SymbolOptions, SymbolTable, Symbols, TableId};

/// What can go wrong in this layer.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Error {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A regular file's bytes, mapped read-only (`None`: not a file or unreadable).
pub(crate) fn map_file(path: &Path) -> Option<memmap2::Mmap> {
    let f = std::fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    // SAFETY: the file is only read; a file changed under us gives wrong
    // answers, and `object` and gimli check every offset they read.
    unsafe { memmap2::Mmap::map(&f) }.ok()
}
