//! This process's vDSO as a file perf and our loaders can open, without a
//! named temporary file that could be left behind.
//!
//! perf reads the vDSO of its own process when a recording's copy is missing
//! (`vdso__get_file`). Its copy goes to `/tmp`, and so did ours: a tool killed
//! by SIGPIPE (`ptperf script | head -1`) or ending on a full stdout left it
//! there. Here the bytes live in an anonymous memory file (`memfd_create`)
//! named by `/proc/self/fd/N` while the value lives; where memfd is not
//! available, in a temporary file unlinked as soon as it is open. Either way
//! the kernel frees it when the process ends, however it ends.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

/// This process's vDSO image, as the kernel maps it (the same image it maps into
/// every process of this ABI on this kernel); `None` where there is none.
pub fn own_vdso() -> Option<&'static [u8]> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (a, b) = line.split_whitespace().next()?.split_once('-')?;
    let (a, b) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    if b <= a || b - a > 1 << 20 {
        return None;
    }
    // SAFETY: the kernel maps the vDSO readable over the whole range
    // /proc/self/maps gives, for the life of the process, and never changes it.
    Some(unsafe { std::slice::from_raw_parts(a as *const u8, (b - a) as usize) })
}

/// A copy of this process's vDSO, open for as long as the value lives.
#[derive(Debug)]
pub struct OwnVdso {
    file: File,
    path: PathBuf,
}

impl OwnVdso {
    /// The copy (`None` where this process has no vDSO or no copy can be made).
    pub fn new() -> Option<Self> {
        Self::of_bytes(own_vdso()?)
    }

    /// A file of `bytes` that disappears with the value (or the process).
    pub fn of_bytes(bytes: &[u8]) -> Option<Self> {
        let mut file = memfd().or_else(unlinked_temp)?;
        file.write_all(bytes).ok()?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Some(OwnVdso { file, path })
    }

    /// A path that opens the copy while the value lives (in this process only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// An anonymous memory file (Linux 3.17 and later).
fn memfd() -> Option<File> {
    let name = c"ptperf-vdso";
    // SAFETY: a valid NUL-terminated name; the returned descriptor is ours.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: a fresh descriptor owned by nothing else.
    (fd >= 0).then(|| unsafe { File::from_raw_fd(fd) })
}

/// A temporary file removed from its folder right after it is created.
fn unlinked_temp() -> Option<File> {
    for i in 0..100u32 {
        let path = std::env::temp_dir().join(format!(".ptperf-vdso-{}-{i}", std::process::id()));
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        else {
            continue;
        };
        let _ = std::fs::remove_file(&path);
        return Some(f);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_reads_back_and_leaves_nothing() {
        let before: Vec<_> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().contains("vdso"))
            .collect();
        let v = OwnVdso::of_bytes(b"\x7fELF and more").unwrap();
        assert_eq!(std::fs::read(v.path()).unwrap(), b"\x7fELF and more");
        let after: Vec<_> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().contains("vdso"))
            .collect();
        assert_eq!(before, after);
        let p = v.path().to_path_buf();
        drop(v);
        assert!(std::fs::read(p).is_err());
    }

    #[test]
    fn own_vdso_has_its_build_id() {
        let v = OwnVdso::new().expect("a Linux process has a vDSO");
        let bytes = std::fs::read(v.path()).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert!(crate::build_id::build_id(&bytes).is_some());
    }
}
