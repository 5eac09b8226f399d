//! Running one tool with a time limit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// What a finished tool left behind.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// True if stdout or stderr exceeded [`OUTPUT_LIMIT`] and was cut.
    pub truncated: bool,
}

/// Most bytes kept per stream; a tool stuck in a printing loop must not eat
/// all memory before its timeout.
pub const OUTPUT_LIMIT: usize = 64 << 20;

impl ToolOutput {
    /// Describes an abnormal end (signal, Rust panic), or `None` for a normal
    /// exit. A non-zero exit code alone is not abnormal: libipt's tools exit
    /// with 1 after printing a diagnostic that the test expects.
    pub fn crash(&self) -> Option<String> {
        if self.truncated {
            return Some(format!(
                "wrote more than {} MiB of output",
                OUTPUT_LIMIT >> 20
            ));
        }
        if let Some(signal) = exit_signal(&self.status) {
            return Some(format!("killed by signal {signal}"));
        }
        // Rust's panic handler exits with 101 after printing "panicked at".
        let stderr = String::from_utf8_lossy(&self.stderr);
        if self.status.code() == Some(101) && stderr.contains("panicked at") {
            return Some(format!("panicked: {}", tail(&stderr, 6)));
        }
        None
    }
}

#[cfg(unix)]
fn exit_signal(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn exit_signal(_status: &ExitStatus) -> Option<i32> {
    None
}

/// The last `n` non-empty lines of `text`, joined by ` | `.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines.get(start..).unwrap_or(&[]).join(" | ")
}

/// Why a tool could not be run to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The process could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Waiting for the process failed.
    #[error("waiting for {program} failed: {source}")]
    Wait {
        /// The program.
        program: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The process ran longer than allowed and was killed.
    #[error("{program} timed out after {secs:.1} s and was killed")]
    Timeout {
        /// The program.
        program: PathBuf,
        /// The limit in seconds.
        secs: f64,
    },
}

/// Runs `program args…` in `cwd` with stdin closed, collecting its output.
/// Kills it (and, on Unix, its process group: pttc runs yasm) when it runs
/// longer than `timeout`.
pub fn run_with_timeout(
    program: &Path,
    args: &[String],
    cwd: &Path,
    timeout: Duration,
) -> Result<ToolOutput, ExecError> {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    let mut child = command.spawn().map_err(|source| ExecError::Spawn {
        program: program.to_path_buf(),
        source,
    })?;

    // Drain both pipes concurrently so a chatty tool cannot block on a full pipe.
    let stdout = child.stdout.take().map(spawn_reader);
    let stderr = child.stderr.take().map(spawn_reader);

    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                kill_tree(&mut child);
                break Err(ExecError::Timeout {
                    program: program.to_path_buf(),
                    secs: timeout.as_secs_f64(),
                });
            }
            Ok(None) => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(source) => {
                kill_tree(&mut child);
                break Err(ExecError::Wait {
                    program: program.to_path_buf(),
                    source,
                });
            }
        }
    };
    let (stdout, cut_out) = stdout.map(join_reader).unwrap_or_default();
    let (stderr, cut_err) = stderr.map(join_reader).unwrap_or_default();
    Ok(ToolOutput {
        status: status?,
        stdout,
        stderr,
        truncated: cut_out || cut_err,
    })
}

fn spawn_reader<R: Read + Send + 'static>(pipe: R) -> thread::JoinHandle<(Vec<u8>, bool)> {
    thread::spawn(move || read_capped(pipe, OUTPUT_LIMIT))
}

/// Reads to the end, keeping at most `limit` bytes; true if more came.
/// Keeps draining past the limit so the writer never blocks on the pipe.
fn read_capped<R: Read>(mut pipe: R, limit: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut cut = false;
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                let take = n.min(room);
                kept.extend_from_slice(chunk.get(..take).unwrap_or(&[]));
                cut |= take < n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A read error just ends the capture; what was read so far is kept.
            Err(_) => break,
        }
    }
    (kept, cut)
}

fn join_reader(handle: thread::JoinHandle<(Vec<u8>, bool)>) -> (Vec<u8>, bool) {
    handle.join().unwrap_or_default()
}

fn kill_tree(child: &mut Child) {
    #[cfg(unix)]
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals the process group we
        // created for this child with `process_group(0)`; no memory is touched.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Duration) -> Result<ToolOutput, ExecError> {
        run_with_timeout(
            Path::new("/bin/sh"),
            &["-c".to_string(), script.to_string()],
            Path::new("/"),
            timeout,
        )
    }

    #[test]
    fn captures_output_and_status() {
        let out = sh("echo out; echo err >&2; exit 3", Duration::from_secs(10)).expect("runs");
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
        assert!(out.crash().is_none());
    }

    #[test]
    fn kills_on_timeout_including_grandchildren() {
        let start = Instant::now();
        // The grandchild keeps stdout open; killing only sh would hang the readers.
        let err = sh("sleep 30 & sleep 30", Duration::from_millis(300)).expect_err("times out");
        assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn reports_signals_as_crashes() {
        let out = sh("kill -SEGV $$", Duration::from_secs(10)).expect("runs");
        assert!(out.crash().expect("crash").contains("signal 11"));
    }

    #[test]
    fn missing_program() {
        let err = run_with_timeout(
            Path::new("/nonexistent/tool"),
            &[],
            Path::new("/"),
            Duration::from_secs(1),
        )
        .expect_err("cannot spawn");
        assert!(matches!(err, ExecError::Spawn { .. }));
    }

    #[test]
    fn output_is_capped() {
        let data = vec![b'x'; 20_000];
        let (kept, cut) = read_capped(&data[..], 10_000);
        assert_eq!((kept.len(), cut), (10_000, true));
        let (kept, cut) = read_capped(&data[..], 20_000);
        assert_eq!((kept.len(), cut), (20_000, false));
    }

    #[test]
    fn tail_lines() {
        assert_eq!(tail("a\n\nb\nc\n", 2), "b | c");
        assert_eq!(tail("", 2), "");
    }
}
