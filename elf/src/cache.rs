//! perf's build-id cache (`~/.debug`, `--buildid-dir`, `$PERF_BUILDID_DIR`):
//! `DIR/NAME/HEX/KIND` holds a copy of the file recorded as `NAME` with build
//! id `HEX` (`KIND`: `elf`, `vdso`, `kallsyms`, `debug`), and the link
//! `DIR/.build-id/XX/REST` (the first two hex digits, then the rest) points at
//! `../../NAME/HEX`. perf looks files up through the link; this toolkit writes
//! the same layout so that `perf --buildid-dir DIR` finds what it kept.

use std::path::{Path, PathBuf};

use crate::build_id::hex;
use crate::Error;

/// What a cache entry holds (the file name inside `DIR/NAME/HEX/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A user-space ELF file (`elf`).
    Elf,
    /// A vDSO image (`vdso`).
    Vdso,
    /// The kernel's symbols (`kallsyms`).
    Kallsyms,
    /// A separate debug file (`debug`).
    Debug,
}

impl EntryKind {
    /// The entry's file name.
    pub fn file_name(self) -> &'static str {
        match self {
            EntryKind::Elf => "elf",
            EntryKind::Vdso => "vdso",
            EntryKind::Kallsyms => "kallsyms",
            EntryKind::Debug => "debug",
        }
    }
}

/// One build-id cache directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildIdCache {
    dir: PathBuf,
}

impl BuildIdCache {
    /// The cache at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BuildIdCache { dir: dir.into() }
    }

    /// perf's default cache: `$PERF_BUILDID_DIR`, else `~/.debug`.
    pub fn user() -> Option<Self> {
        if let Some(d) = std::env::var_os("PERF_BUILDID_DIR").filter(|d| !d.is_empty()) {
            return Some(Self::new(d));
        }
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| Self::new(PathBuf::from(h).join(".debug")))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `DIR/.build-id/XX/REST` (`None` for an id of less than two bytes).
    pub fn link(&self, id: &[u8]) -> Option<PathBuf> {
        let h = hex(id);
        (h.len() > 2).then(|| self.dir.join(".build-id").join(&h[..2]).join(&h[2..]))
    }

    /// The entry of `kind` through the link: `DIR/.build-id/XX/REST/KIND`.
    pub fn linked(&self, id: &[u8], kind: EntryKind) -> Option<PathBuf> {
        self.link(id).map(|l| l.join(kind.file_name()))
    }

    /// The entry in the cache's own tree: `DIR/NAME/HEX/KIND` (`NAME` without
    /// its leading `/`), where it is found even when the link was lost.
    pub fn entry(&self, name: &str, id: &[u8], kind: EntryKind) -> PathBuf {
        self.dir
            .join(name.trim_start_matches('/'))
            .join(hex(id))
            .join(kind.file_name())
    }

    /// Where perf finds the file of `name` with `id`, in its order: the link
    /// (a file itself, or a directory holding the entry), then the cache's tree.
    pub fn lookup(&self, name: &str, id: &[u8], kind: EntryKind) -> Vec<PathBuf> {
        let mut v = Vec::with_capacity(2);
        if let Some(link) = self.link(id) {
            if link.is_file() {
                v.push(link);
            } else {
                v.push(link.join(kind.file_name()));
            }
        }
        v.push(self.entry(name, id, kind));
        v
    }

    /// Writes `bytes` as the entry of `name` with `id` and links it as perf
    /// does; returns the entry's path.
    pub fn add(
        &self,
        name: &str,
        id: &[u8],
        kind: EntryKind,
        bytes: &[u8],
    ) -> Result<PathBuf, Error> {
        let file = self.entry(name, id, kind);
        let dir = file.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        std::fs::write(&file, bytes).map_err(|e| Error::io(&file, e))?;
        let Some(link) = self.link(id) else {
            return Ok(file);
        };
        if let Some(links) = link.parent() {
            std::fs::create_dir_all(links).map_err(|e| Error::io(links, e))?;
        }
        if std::fs::symlink_metadata(&link).is_err() {
            let target = Path::new("../..")
                .join(name.trim_start_matches('/'))
                .join(hex(id));
            std::os::unix::fs::symlink(&target, &link).map_err(|e| Error::io(&link, e))?;
        }
        Ok(file)
    }

    /// Removes the entry of `name` with `id` and its link (what is not there
    /// is no error).
    pub fn remove(&self, name: &str, id: &[u8], kind: EntryKind) {
        if let Some(dir) = self.entry(name, id, kind).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(link) = self.link(id) {
            let _ = std::fs::remove_file(link);
        }
    }
}

/// The system's debug file of build id `id`:
/// `/usr/lib/debug/.build-id/XX/REST.debug` (under `root`, perf's `--symfs`).
pub fn system_debug_file(root: Option<&Path>, id: &[u8]) -> Option<PathBuf> {
    let h = hex(id);
    (h.len() > 2).then(|| {
        crate::debug_file::under(
            root,
            &format!("/usr/lib/debug/.build-id/{}/{}.debug", &h[..2], &h[2..]),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let c = BuildIdCache::new("/c");
        let id = [0xab, 0xcd, 0xef];
        assert_eq!(c.link(&id).unwrap(), Path::new("/c/.build-id/ab/cdef"));
        assert_eq!(
            c.linked(&id, EntryKind::Vdso).unwrap(),
            Path::new("/c/.build-id/ab/cdef/vdso")
        );
        assert_eq!(
            c.entry("/usr/bin/x", &id, EntryKind::Elf),
            Path::new("/c/usr/bin/x/abcdef/elf")
        );
        assert_eq!(c.link(&[1]), None);
        assert_eq!(
            system_debug_file(None, &id).unwrap(),
            Path::new("/usr/lib/debug/.build-id/ab/cdef.debug")
        );
        assert_eq!(
            system_debug_file(Some(Path::new("/root")), &id).unwrap(),
            Path::new("/root/usr/lib/debug/.build-id/ab/cdef.debug")
        );
    }

    #[test]
    fn add_links_and_finds() {
        let dir = std::env::temp_dir().join(format!("pt-elf-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = BuildIdCache::new(&dir);
        let id = [0x12, 0x34, 0x56, 0x78];
        let f = c.add("[vdso]", &id, EntryKind::Vdso, b"code").unwrap();
        assert_eq!(f, dir.join("[vdso]/12345678/vdso"));
        let found = &c.lookup("[vdso]", &id, EntryKind::Vdso)[0];
        assert_eq!(std::fs::read(found).unwrap(), b"code");
        c.remove("[vdso]", &id, EntryKind::Vdso);
        assert!(!found.exists() && !f.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
