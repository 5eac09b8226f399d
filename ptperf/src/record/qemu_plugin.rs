//! The QEMU plugin, built by ptperf's build script and carried in the
//! binary: handed to QEMU through a memfd (`/proc/PID/fd/N`), so nothing
//! is installed or left behind, and plugin and reader always match.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

/// The plugin's bytes.
static PLUGIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libpt_qemu_plugin.so"));

/// The plugin in a memfd, alive as long as this value.
pub(crate) struct Plugin {
    _fd: OwnedFd,
    /// A path QEMU (and the QEMUs it execs) open it by.
    pub(crate) path: PathBuf,
}

/// Puts the plugin where QEMU can load it.
pub(crate) fn materialize() -> Result<Plugin, String> {
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"pt-qemu-plugin".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "memfd_create for the QEMU plugin: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd);
    f.write_all(PLUGIN)
        .map_err(|e| format!("writing the QEMU plugin: {e}"))?;
    let path = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()));
    Ok(Plugin {
        _fd: f.into(),
        path,
    })
}
