//! Finding (and if need be building) the tools under test.
//!
//! Each tool is taken from its environment variable (`PTTESTGEN`, `PTDUMP`,
//! `PTXED`) if set, else from beside the running executable (for test
//! binaries in `target/<profile>/deps`, from `target/<profile>`). The
//! project's own tools can be built on demand with
//! `cargo build -p pt-testgen -p pt-tools --bins`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The tools the protocol runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolKind {
    /// Turns a `.ptt` file into a trace, an image and expectations (libipt: pttc).
    Pttestgen,
    /// Packet dumper.
    Ptdump,
    /// Instruction-flow decoder.
    Ptxed,
}

impl ToolKind {
    /// All tools.
    pub const ALL: [ToolKind; 3] = [ToolKind::Pttestgen, ToolKind::Ptdump, ToolKind::Ptxed];

    /// The binary name (without platform suffix).
    pub fn bin_name(self) -> &'static str {
        match self {
            ToolKind::Pttestgen => "pttestgen",
            ToolKind::Ptdump => "ptdump",
            ToolKind::Ptxed => "ptxed",
        }
    }

    /// The environment variable that overrides the tool's path.
    pub fn env_var(self) -> &'static str {
        match self {
            ToolKind::Pttestgen => "PTTESTGEN",
            ToolKind::Ptdump => "PTDUMP",
            ToolKind::Ptxed => "PTXED",
        }
    }

    /// The tool an `.exp` file name refers to, if it is one we can run.
    pub fn from_exp_tool(name: &str) -> Option<ToolKind> {
        match name {
            "ptdump" => Some(ToolKind::Ptdump),
            "ptxed" => Some(ToolKind::Ptxed),
            _ => None,
        }
    }
}

impl fmt::Display for ToolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.bin_name())
    }
}

/// Where a tool is, or why it is not available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolPath {
    /// The executable to run.
    Found(PathBuf),
    /// Why there is nothing to run.
    Missing(String),
}

impl ToolPath {
    /// The path, if found.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ToolPath::Found(p) => Some(p),
            ToolPath::Missing(_) => None,
        }
    }
}

/// When to run `cargo build` for the project's own tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildPolicy {
    /// Never build; use what is there.
    Never,
    /// Build when pttestgen or ptdump is not found.
    IfMissing,
    /// Always build first (cheap when up to date), so that stale binaries
    /// left in `target/` are never tested.
    Always,
}

/// The located tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tools {
    /// pttestgen (or libipt's pttc).
    pub pttestgen: ToolPath,
    /// ptdump.
    pub ptdump: ToolPath,
    /// ptxed.
    pub ptxed: ToolPath,
}

impl Tools {
    /// The path entry of one tool.
    pub fn get(&self, kind: ToolKind) -> &ToolPath {
        match kind {
            ToolKind::Pttestgen => &self.pttestgen,
            ToolKind::Ptdump => &self.ptdump,
            ToolKind::Ptxed => &self.ptxed,
        }
    }

    fn get_mut(&mut self, kind: ToolKind) -> &mut ToolPath {
        match kind {
            ToolKind::Pttestgen => &mut self.pttestgen,
            ToolKind::Ptdump => &mut self.ptdump,
            ToolKind::Ptxed => &mut self.ptxed,
        }
    }

    /// Locates all tools, building the project's own ones per `policy`.
    pub fn discover(policy: BuildPolicy) -> Tools {
        let mut tools = Tools {
            pttestgen: locate(ToolKind::Pttestgen),
            ptdump: locate(ToolKind::Ptdump),
            ptxed: locate(ToolKind::Ptxed),
        };
        let from_env =
            |kind: ToolKind| std::env::var_os(kind.env_var()).is_some_and(|v| !v.is_empty());
        let buildable_missing = [ToolKind::Pttestgen, ToolKind::Ptdump]
            .into_iter()
            .any(|k| !from_env(k) && tools.get(k).path().is_none());
        // ptxed alone is not worth a build: it comes with ptdump.
        let needs_build = [ToolKind::Pttestgen, ToolKind::Ptdump]
            .into_iter()
            .any(|k| !from_env(k));
        let build = match policy {
            BuildPolicy::Never => false,
            BuildPolicy::IfMissing => buildable_missing,
            BuildPolicy::Always => needs_build,
        };
        if build {
            let outcome = build_own_tools();
            for kind in ToolKind::ALL {
                if from_env(kind) {
                    continue;
                }
                let entry = tools.get_mut(kind);
                *entry = match (&outcome, locate(kind)) {
                    (Ok(()), ToolPath::Missing(_)) => ToolPath::Missing(format!(
                        "cargo build -p pt-testgen -p pt-tools --bins produced no `{}` binary",
                        kind.bin_name()
                    )),
                    (Ok(()), found) => found,
                    (Err(why), ToolPath::Missing(_)) => ToolPath::Missing(format!(
                        "{} not found and the build failed: {why}",
                        kind.bin_name()
                    )),
                    // The build failed but an older binary exists: refuse to
                    // test a stale tool silently.
                    (Err(why), ToolPath::Found(path)) => ToolPath::Missing(format!(
                        "build failed, not testing stale {}: {why}",
                        path.display()
                    )),
                };
            }
        }
        tools
    }
}

/// Executable file name on this platform.
fn exe_name(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}

/// The directory cargo put the running executable's sibling binaries in:
/// `target/<profile>` (test binaries live one level down, in `deps`).
pub fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let is_sub = dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples");
    if is_sub {
        dir.parent().map(Path::to_path_buf)
    } else {
        Some(dir.to_path_buf())
    }
}

/// Finds one tool without building anything.
pub fn locate(kind: ToolKind) -> ToolPath {
    if let Some(value) = std::env::var_os(kind.env_var()).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        return if path.is_file() {
            ToolPath::Found(path)
        } else {
            ToolPath::Missing(format!(
                "{}={} is not a file",
                kind.env_var(),
                path.display()
            ))
        };
    }
    let name = exe_name(kind.bin_name());
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    for dir in [exe_dir, profile_dir()].into_iter().flatten() {
        let candidate = dir.join(&name);
        if candidate.is_file() {
            return ToolPath::Found(candidate);
        }
    }
    ToolPath::Missing(format!(
        "{} not built yet (set {} to use another binary)",
        kind.bin_name(),
        kind.env_var()
    ))
}

/// Whether the ptxed at `path` is this project's (its `--version` names pt-decoder):
/// its error handling then must be told to be libipt's (`--libipt-resync`), which
/// libipt's own ptxed would refuse as an unknown option. Asked once per path.
pub fn is_our_ptxed(path: &Path) -> bool {
    static SEEN: Mutex<Vec<(PathBuf, bool)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, ours)) = seen.iter().find(|(p, _)| p == path) {
        return ours;
    }
    let ours = Command::new(path)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("pt-decoder"));
    seen.push((path.to_path_buf(), ours));
    ours
}

/// The workspace this crate was built from.
fn workspace_root() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    root.join("Cargo.toml")
        .is_file()
        .then(|| root.to_path_buf())
}

/// Runs the cargo build of pttestgen/ptdump/ptxed at most once per process.
fn build_own_tools() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    static GUARD: Mutex<()> = Mutex::new(());
    // The mutex makes concurrent callers wait for the one build.
    let _guard = GUARD.lock().unwrap_or_else(|e| e.into_inner());
    RESULT.get_or_init(run_cargo_build).clone()
}

fn run_cargo_build() -> Result<(), String> {
    let root = workspace_root().ok_or("no workspace to build in")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&root)
        .args(["build", "-p", "pt-testgen", "-p", "pt-tools", "--bins"]);
    // Build into the same profile directory the runner lives in.
    match profile_dir()
        .as_deref()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
    {
        Some("debug") | None => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(other) => {
            command.args(["--profile", other]);
        }
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error"))
            .take(5)
            .collect();
        Err(format!(
            "cargo build -p pt-testgen -p pt-tools --bins failed ({}): {}",
            output.status,
            errors.join(" | ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(ToolKind::Ptdump.bin_name(), "ptdump");
        assert_eq!(ToolKind::Pttestgen.env_var(), "PTTESTGEN");
        assert_eq!(ToolKind::from_exp_tool("ptxed"), Some(ToolKind::Ptxed));
        assert_eq!(ToolKind::from_exp_tool("pttc"), None);
    }

    #[test]
    fn profile_dir_skips_deps() {
        // Unit tests run from target/<profile>/deps.
        let dir = profile_dir().expect("exe has a directory");
        assert_ne!(dir.file_name().and_then(|n| n.to_str()), Some("deps"));
    }
}
