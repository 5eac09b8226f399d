//! Checking the generator itself against a reference generator (libipt's
//! pttc): same listing, same trace and image bytes, same expectations (up to
//! the whitespace that `diff -ub` ignores anyway).

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::diff::diff_ub;
use crate::exec::{run_with_timeout, tail, ToolOutput};
use crate::runner::Outcome;

/// How the generator under test ended.
pub(crate) enum OurRun<'a> {
    /// It ran to a successful exit.
    Ok(&'a ToolOutput),
    /// It failed; the text says how.
    Failed(String),
}

/// Runs `reference args…` in a fresh directory and compares what it wrote
/// with what the generator under test wrote into `ours_dir`.
pub(crate) fn compare_generators(
    reference: &Path,
    args: &[String],
    ours_dir: &Path,
    ours: OurRun<'_>,
    base: &str,
    timeout: Duration,
) -> Outcome {
    let dir = match tempfile::Builder::new()
        .prefix("ptconformance-ref-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(e) => {
            return Outcome::Error {
                message: format!("cannot create a temp dir: {e}"),
            }
        }
    };
    let theirs = match run_with_timeout(reference, args, dir.path(), timeout) {
        Ok(output) if output.crash().is_none() && output.status.success() => Some(output),
        Ok(output) => {
            let why = output.crash().unwrap_or_else(|| {
                format!(
                    "{}: {}",
                    output.status,
                    tail(&String::from_utf8_lossy(&output.stderr), 3)
                )
            });
            if let OurRun::Failed(_) = ours {
                // Both reject the file: they agree.
                return Outcome::Pass;
            }
            return Outcome::Error {
                message: format!(
                    "reference generator failed ({why}) but pttestgen accepted the file"
                ),
            };
        }
        Err(e) => {
            return Outcome::Error {
                message: format!("reference generator: {e}"),
            }
        }
    };
    let (ours, theirs) = match (ours, theirs) {
        (OurRun::Ok(ours), Some(theirs)) => (ours, theirs),
        (OurRun::Failed(why), _) => {
            return Outcome::Fail {
                diff: format!("the reference generator accepts the file but {why}"),
            }
        }
        (_, None) => {
            return Outcome::Error {
                message: "reference generator produced nothing".into(),
            }
        }
    };

    let our_list: Vec<&str> = std::str::from_utf8(&ours.stdout)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let their_list: Vec<&str> = std::str::from_utf8(&theirs.stdout)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let mut problems = Vec::new();
    if our_list != their_list {
        problems.push(format!(
            "listed files differ: pttestgen [{}], reference [{}]",
            our_list.join(" "),
            their_list.join(" ")
        ));
    }
    let pt = format!("{base}.pt");
    let bin = format!("{base}.bin");
    let mut names: Vec<&str> = vec![&pt, &bin];
    names.extend(their_list.iter().copied().filter(|n| !n.contains('/')));
    for name in names {
        if let Some(problem) = compare_file(name, ours_dir, dir.path()) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Fail {
            diff: problems.join("\n"),
        }
    }
}

/// Compares one generated file; text expectations with `-b` semantics,
/// everything else byte for byte.
fn compare_file(name: &str, ours_dir: &Path, their_dir: &Path) -> Option<String> {
    let theirs = match fs::read(their_dir.join(name)) {
        Ok(bytes) => bytes,
        Err(e) => return Some(format!("{name}: reference output unreadable: {e}")),
    };
    let ours = match fs::read(ours_dir.join(name)) {
        Ok(bytes) => bytes,
        Err(e) => return Some(format!("{name}: not written by pttestgen ({e})")),
    };
    if name.ends_with(".exp") {
        let ours_text = String::from_utf8_lossy(&ours);
        let their_text = String::from_utf8_lossy(&theirs);
        let reference = format!("{name} (reference)");
        let tested = format!("{name} (pttestgen)");
        return diff_ub(&their_text, &ours_text, &reference, &tested);
    }
    first_difference(&ours, &theirs).map(|at| {
        let byte = |b: &[u8]| b.get(at).map_or("end".to_string(), |v| format!("{v:02x}"));
        format!(
            "{name}: first difference at byte {at:#x}: pttestgen {}, reference {} (sizes {} and {})",
            byte(&ours),
            byte(&theirs),
            ours.len(),
            theirs.len()
        )
    })
}

/// Index of the first differing byte, or `None` when equal.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let common = a.iter().zip(b).position(|(x, y)| x != y);
    match common {
        Some(at) => Some(at),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_differences() {
        assert_eq!(first_difference(b"abc", b"abc"), None);
        assert_eq!(first_difference(b"abc", b"abd"), Some(2));
        assert_eq!(first_difference(b"ab", b"abc"), Some(2));
        assert_eq!(first_difference(b"", b""), None);
    }

    #[test]
    fn compares_files() {
        let ours = tempfile::tempdir().expect("tempdir");
        let theirs = tempfile::tempdir().expect("tempdir");
        fs::write(ours.path().join("t.pt"), [2, 0x82]).expect("write");
        fs::write(theirs.path().join("t.pt"), [2, 0x83]).expect("write");
        fs::write(ours.path().join("t-ptdump.exp"), "a  b\n").expect("write");
        fs::write(theirs.path().join("t-ptdump.exp"), "a b\n").expect("write");
        let problem = compare_file("t.pt", ours.path(), theirs.path()).expect("differs");
        assert!(
            problem.contains("byte 0x1: pttestgen 82, reference 83"),
            "{problem}"
        );
        assert_eq!(
            compare_file("t-ptdump.exp", ours.path(), theirs.path()),
            None
        );
        let missing = compare_file("t.bin", ours.path(), theirs.path()).expect("missing");
        assert!(missing.contains("reference output unreadable"), "{missing}");
    }
}
