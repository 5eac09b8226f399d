//! Where the symbols and DWARF of a file are found, in the order perf tries
//! them (`dso__load`'s binary types): the `.gnu_debuglink` file (as named, beside
//! the file, in `.debug/` beside it, under `/usr/lib/debug`), the build-id
//! cache's `debug` entry, Fedora's and Ubuntu's debug trees, the system's
//! `/usr/lib/debug/.build-id/XX/REST.debug`, and the file itself. `--symfs`
//! prefixes the system paths, as perf's `__symbol__join_symfs` does.

use std::path::{Path, PathBuf};

use crate::cache::{system_debug_file, BuildIdCache, EntryKind};

/// `path` under `root` (perf's `--symfs`), or `path` itself.
pub fn under(root: Option<&Path>, path: &str) -> PathBuf {
    match root {
        Some(r) => {
            let mut s = r.as_os_str().to_owned();
            s.push(path);
            PathBuf::from(s)
        }
        None => PathBuf::from(path),
    }
}

/// The `.gnu_debuglink` of the ELF file `data`: the debug file's name and the
/// CRC-32 of its contents.
pub fn debuglink(data: &[u8]) -> Option<(&str, u32)> {
    use object::Object;
    let (name, crc) = object::File::parse(data).ok()?.gnu_debuglink().ok()??;
    Some((std::str::from_utf8(name).ok()?, crc))
}

/// Where perf looks for the debug files of one file.
#[derive(Clone, Debug, Default)]
pub struct DebugSearch {
    /// perf's `--symfs`: the system paths are looked up under it.
    pub symfs: Option<PathBuf>,
}

impl DebugSearch {
    /// Where perf looks for the symbols of the file recorded as `name` and found
    /// at `path` (`None`: not found) with `build_id` (`None`: the file's own),
    /// in perf's order; `path` itself last. Only paths: the caller opens them
    /// and takes the first that has what it wants (perf: a symbol table).
    pub fn candidates(
        &self,
        path: Option<&Path>,
        name: &str,
        build_id: Option<&[u8]>,
    ) -> Vec<PathBuf> {
        let mut v = Vec::new();
        let data = path.and_then(crate::map_file);
        let own_id = data.as_deref().and_then(crate::build_id::build_id);
        let build_id = build_id.filter(|b| !b.is_empty()).or(own_id);
        let root = self.symfs.as_deref();
        if let Some((link, _crc)) = data.as_deref().and_then(debuglink) {
            // perf: the directory of the file's name under --symfs.
            let file = under(root, name);
            let dir = file.parent().unwrap_or(Path::new("/"));
            v.push(PathBuf::from(link));
            v.push(dir.join(link));
            v.push(dir.join(".debug").join(link));
            v.push(PathBuf::from(format!(
                "/usr/lib/debug{}/{link}",
                dir.display()
            )));
        }
        if let Some(id) = build_id {
            v.extend(BuildIdCache::user().and_then(|c| c.linked(id, EntryKind::Debug)));
        }
        v.push(under(root, &format!("/usr/lib/debug{name}.debug")));
        v.push(under(root, &format!("/usr/lib/debug{name}")));
        if let Some(id) = build_id {
            v.extend(system_debug_file(root, id));
        }
        v.extend(path.map(Path::to_path_buf));
        v
    }

    /// The first of [`Self::candidates`] that is a file with a symbol table
    /// (perf's `symsrc_filename`).
    pub fn symbol_file(
        &self,
        path: Option<&Path>,
        name: &str,
        build_id: Option<&[u8]>,
    ) -> Option<PathBuf> {
        self.candidates(path, name, build_id)
            .into_iter()
            .find(|p| crate::map_file(p).is_some_and(|m| crate::symbols::has_symtab(&m)))
    }

    /// The DWARF of the ELF file `data` at `path`, as gdb and llvm's tools
    /// look for it: in the file itself, else in its system debug file by build
    /// id, else in its debuglink file (beside it, in `.debug/` beside it, under
    /// `/usr/lib/debug`). `read` reads a file's bytes (`None`: no DWARF there).
    pub fn dwarf<T>(
        &self,
        path: &Path,
        data: &[u8],
        read: impl Fn(&[u8]) -> Option<T>,
    ) -> Option<T> {
        if let Some(t) = read(data) {
            return Some(t);
        }
        let root = self.symfs.as_deref();
        let mut v = Vec::new();
        if let Some(id) = crate::build_id::build_id(data) {
            v.extend(system_debug_file(root, id));
        }
        if let Some((link, _crc)) = debuglink(data) {
            let dir = path.parent().unwrap_or(Path::new("/"));
            v.push(dir.join(link));
            v.push(dir.join(".debug").join(link));
            if let Ok(rel) = dir.strip_prefix("/") {
                v.push(under(root, "/usr/lib/debug").join(rel).join(link));
            }
        }
        v.into_iter()
            .filter(|c| c != path)
            .find_map(|c| read(&crate::map_file(&c)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_without_a_file() {
        let s = DebugSearch::default();
        let v = s.candidates(None, "/usr/bin/x", Some(&[0xab, 0xcd]));
        let tail: Vec<_> = v.iter().rev().take(3).rev().cloned().collect();
        assert_eq!(
            tail,
            [
                PathBuf::from("/usr/lib/debug/usr/bin/x.debug"),
                PathBuf::from("/usr/lib/debug/usr/bin/x"),
                PathBuf::from("/usr/lib/debug/.build-id/ab/cd.debug"),
            ]
        );
        let s = DebugSearch {
            symfs: Some("/sys".into()),
        };
        let v = s.candidates(None, "/usr/bin/x", None);
        assert_eq!(
            v,
            [
                PathBuf::from("/sys/usr/lib/debug/usr/bin/x.debug"),
                PathBuf::from("/sys/usr/lib/debug/usr/bin/x"),
            ]
        );
    }
}
