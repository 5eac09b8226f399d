//! Baselines: the committed list of (file, tool, cpu) results that passed.
//!
//! Format: one result per line, `file<TAB>tool<TAB>cpu` with `-` for "no
//! cpu"; `#` starts a comment line; blank lines are ignored. Sorted, so that
//! updates make small diffs.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::runner::{Outcome, TestResult};
use crate::ConformanceError;

/// The identity of one result.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `.ptt` file name.
    pub file: String,
    /// Tool name.
    pub tool: String,
    /// Cpu, `-` for none.
    pub cpu: String,
}

impl Key {
    /// The key of a result.
    pub fn of(result: &TestResult) -> Key {
        Key {
            file: result.file.clone(),
            tool: result.tool.clone(),
            cpu: result.cpu_label().to_string(),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.file, self.tool, self.cpu)
    }
}

/// A set of results known to pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Baseline {
    /// The passing results.
    pub passes: BTreeSet<Key>,
}

/// How a run compares with a baseline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Baselined passes that no longer pass, with what they are now.
    pub regressions: Vec<(Key, String)>,
    /// Passes not in the baseline.
    pub new_passes: Vec<Key>,
}

impl Baseline {
    /// The passes among `results`.
    pub fn from_results(results: &[TestResult]) -> Baseline {
        Baseline {
            passes: results
                .iter()
                .filter(|r| r.outcome.is_pass())
                .map(Key::of)
                .collect(),
        }
    }

    /// Parses the text of a baseline file.
    pub fn parse(text: &str) -> Result<Baseline, ConformanceError> {
        let mut passes = BTreeSet::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let [file, tool, cpu] = fields.as_slice() else {
                return Err(ConformanceError::BaselineSyntax {
                    line: index + 1,
                    text: line.to_string(),
                });
            };
            passes.insert(Key {
                file: file.to_string(),
                tool: tool.to_string(),
                cpu: cpu.to_string(),
            });
        }
        Ok(Baseline { passes })
    }

    /// Reads a baseline file.
    pub fn load(path: &Path) -> Result<Baseline, ConformanceError> {
        let text = fs::read_to_string(path).map_err(|source| ConformanceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Baseline::parse(&text)
    }

    /// The file text.
    pub fn to_text(&self) -> String {
        let mut out = String::from(
            "# Conformance baseline: (file, tool, cpu) results that passed.\n\
             # Regenerate with `ptconformance --corpus DIR --write-baseline FILE`.\n",
        );
        for key in &self.passes {
            let _ = writeln!(out, "{}\t{}\t{}", key.file, key.tool, key.cpu);
        }
        out
    }

    /// Writes the baseline file.
    pub fn save(&self, path: &Path) -> Result<(), ConformanceError> {
        fs::write(path, self.to_text()).map_err(|source| ConformanceError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The part of the baseline that concerns the given files (for runs
    /// that were filtered down to a subset of the corpus).
    pub fn restricted_to<'a>(&self, files: impl IntoIterator<Item = &'a str>) -> Baseline {
        let files: BTreeSet<&str> = files.into_iter().collect();
        Baseline {
            passes: self
                .passes
                .iter()
                .filter(|k| files.contains(k.file.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// Compares a run with the baseline. A baselined pass that is missing
    /// from the run counts as a regression.
    pub fn compare(&self, results: &[TestResult]) -> Comparison {
        let mut comparison = Comparison::default();
        let mut seen = BTreeSet::new();
        for r in results {
            let key = Key::of(r);
            let baselined = self.passes.contains(&key);
            match (&r.outcome, baselined) {
                (Outcome::Pass, false) => comparison.new_passes.push(key.clone()),
                (Outcome::Pass, true) => {}
                (other, true) => comparison
                    .regressions
                    .push((key.clone(), other.label().to_string())),
                (_, false) => {}
            }
            seen.insert(key);
        }
        for key in self.passes.difference(&seen) {
            comparison
                .regressions
                .push((key.clone(), "missing from the run".to_string()));
        }
        comparison
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    fn result(file: &str, cpu: Option<&str>, outcome: Outcome) -> TestResult {
        TestResult {
            path: PathBuf::from(file),
            file: file.into(),
            tool: "ptdump".into(),
            cpu: cpu.map(str::to_string),
            outcome,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn round_trip() {
        let results = [
            result("b.ptt", Some("6/78"), Outcome::Pass),
            result("a.ptt", None, Outcome::Pass),
            result(
                "c.ptt",
                None,
                Outcome::Fail {
                    diff: String::new(),
                },
            ),
        ];
        let baseline = Baseline::from_results(&results);
        let text = baseline.to_text();
        assert!(
            text.ends_with("a.ptt\tptdump\t-\nb.ptt\tptdump\t6/78\n"),
            "{text}"
        );
        assert_eq!(Baseline::parse(&text).expect("parses"), baseline);
    }

    #[test]
    fn rejects_bad_lines() {
        let err = Baseline::parse("# c\n\na.ptt ptdump -\n").expect_err("spaces");
        assert!(matches!(
            err,
            ConformanceError::BaselineSyntax { line: 3, .. }
        ));
    }

    #[test]
    fn finds_regressions_and_new_passes() {
        let baseline = Baseline::parse("a.ptt\tptdump\t-\nb.ptt\tptdump\t-\ngone.ptt\tptdump\t-\n")
            .expect("parses");
        let results = [
            result("a.ptt", None, Outcome::Pass),
            result(
                "b.ptt",
                None,
                Outcome::Error {
                    message: "x".into(),
                },
            ),
            result("c.ptt", None, Outcome::Pass),
        ];
        let cmp = baseline.compare(&results);
        let regressions: Vec<String> = cmp
            .regressions
            .iter()
            .map(|(k, why)| format!("{k}: {why}"))
            .collect();
        assert_eq!(
            regressions,
            [
                "b.ptt ptdump -: error",
                "gone.ptt ptdump -: missing from the run"
            ]
        );
        assert_eq!(cmp.new_passes.len(), 1);
        assert_eq!(cmp.new_passes[0].file, "c.ptt");

        let subset = baseline.restricted_to(["a.ptt", "c.ptt"]);
        assert_eq!(subset.passes.len(), 1);
        assert!(subset.compare(&results[..1]).regressions.is_empty());
    }
}
