//! Tables, totals and JSON lines for a set of results.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::runner::{Outcome, TestResult};

/// Counts of each outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Passed.
    pub pass: usize,
    /// Ran and differed.
    pub fail: usize,
    /// Could not be judged.
    pub error: usize,
    /// Tool missing.
    pub not_run: usize,
}

impl Counts {
    /// Adds one outcome.
    pub fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Pass => self.pass += 1,
            Outcome::Fail { .. } => self.fail += 1,
            Outcome::Error { .. } => self.error += 1,
            Outcome::NotRun { .. } => self.not_run += 1,
        }
    }

    /// Results whose tool exists (everything but "not run").
    pub fn ran(&self) -> usize {
        self.pass + self.fail + self.error
    }

    /// All results.
    pub fn total(&self) -> usize {
        self.ran() + self.not_run
    }

    /// Pass rate among the results whose tool exists, in percent.
    pub fn pass_percent(&self) -> Option<f64> {
        let ran = self.ran();
        (ran > 0).then(|| self.pass as f64 * 100.0 / ran as f64)
    }
}

/// Per-tool counts (sorted by tool name) and the overall counts.
pub fn totals(results: &[TestResult]) -> (BTreeMap<String, Counts>, Counts) {
    let mut per_tool: BTreeMap<String, Counts> = BTreeMap::new();
    let mut all = Counts::default();
    for r in results {
        per_tool.entry(r.tool.clone()).or_default().add(&r.outcome);
        all.add(&r.outcome);
    }
    (per_tool, all)
}

/// A table with one row per result: file, tool, cpu, status. With
/// `show_details`, the diff or message follows each unsuccessful row
/// (indented); reasons for "not run" are always left out of the rows.
pub fn table(results: &[TestResult], show_details: bool) -> String {
    let width =
        |f: fn(&TestResult) -> usize, min: usize| results.iter().map(f).max().unwrap_or(0).max(min);
    let file_w = width(|r| r.file.len(), 4);
    let tool_w = width(|r| r.tool.len(), 4);
    let cpu_w = width(|r| r.cpu_label().len(), 3);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:file_w$}  {:tool_w$}  {:cpu_w$}  status",
        "file", "tool", "cpu"
    );
    for r in results {
        let _ = writeln!(
            out,
            "{:file_w$}  {:tool_w$}  {:cpu_w$}  {}",
            r.file,
            r.tool,
            r.cpu_label(),
            r.outcome.label()
        );
        if show_details && r.outcome.is_bad() {
            for line in r.outcome.detail().unwrap_or("").lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    out
}

/// The totals block: one line per tool, then all tools.
pub fn totals_text(results: &[TestResult]) -> String {
    let (per_tool, all) = totals(results);
    let mut out = String::new();
    for (tool, counts) in &per_tool {
        let _ = writeln!(out, "{}", totals_line(tool, counts));
    }
    let _ = writeln!(out, "{}", totals_line("total", &all));
    out
}

/// One line of totals, e.g.
/// `ptdump: 150 pass, 2 fail, 0 error, 0 not run (98.7% of 152 run)`.
pub fn totals_line(label: &str, c: &Counts) -> String {
    let percent = match c.pass_percent() {
        Some(p) => format!("{p:.1}% of {} run", c.ran()),
        None => "none run".to_string(),
    };
    format!(
        "{label}: {} pass, {} fail, {} error, {} not run ({percent})",
        c.pass, c.fail, c.error, c.not_run
    )
}

/// One JSON object (single line) describing a result: file, path, tool, cpu,
/// status, ms, and the diff, message or reason where the outcome has one.
pub fn json_result(r: &TestResult) -> String {
    let mut o = serde_json::Map::new();
    o.insert("file".into(), r.file.clone().into());
    o.insert("path".into(), r.path.to_string_lossy().into_owned().into());
    o.insert("tool".into(), r.tool.clone().into());
    o.insert("cpu".into(), r.cpu.clone().into());
    o.insert("status".into(), r.outcome.label().into());
    o.insert("ms".into(), (r.elapsed.as_millis() as u64).into());
    match &r.outcome {
        Outcome::Pass => {}
        Outcome::Fail { diff } => {
            o.insert("diff".into(), diff.clone().into());
        }
        Outcome::Error { message } => {
            o.insert("message".into(), message.clone().into());
        }
        Outcome::NotRun { reason } => {
            o.insert("reason".into(), reason.clone().into());
        }
    }
    serde_json::Value::Object(o).to_string()
}

fn json_counts(c: &Counts) -> serde_json::Value {
    serde_json::json!({
        "pass": c.pass,
        "fail": c.fail,
        "error": c.error,
        "not_run": c.not_run,
    })
}

/// The summary line that ends `--json` output:
/// `{"summary":{"tools":{"ptdump":{…}},"total":{…}}}`.
pub fn json_summary(results: &[TestResult]) -> String {
    let (per_tool, all) = totals(results);
    let tools: serde_json::Map<String, serde_json::Value> = per_tool
        .iter()
        .map(|(tool, c)| (tool.to_string(), json_counts(c)))
        .collect();
    serde_json::json!({ "summary": { "tools": tools, "total": json_counts(&all) } }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    fn result(file: &str, tool: &str, cpu: Option<&str>, outcome: Outcome) -> TestResult {
        TestResult {
            path: PathBuf::from(format!("/x/{file}")),
            file: file.into(),
            tool: tool.into(),
            cpu: cpu.map(str::to_string),
            outcome,
            elapsed: Duration::from_millis(7),
        }
    }

    fn sample() -> Vec<TestResult> {
        vec![
            result("a.ptt", "ptdump", None, Outcome::Pass),
            result(
                "b.ptt",
                "ptdump",
                Some("6/78"),
                Outcome::Fail {
                    diff: "-x\n+y\n".into(),
                },
            ),
            result(
                "b.ptt",
                "ptxed",
                Some("6/78"),
                Outcome::NotRun {
                    reason: "absent".into(),
                },
            ),
            result(
                "c.ptt",
                "ptdump",
                None,
                Outcome::Error {
                    message: "boom".into(),
                },
            ),
        ]
    }

    #[test]
    fn counts_and_percent() {
        let (per_tool, all) = totals(&sample());
        let dump = per_tool["ptdump"];
        assert_eq!(
            (dump.pass, dump.fail, dump.error, dump.not_run),
            (1, 1, 1, 0)
        );
        assert_eq!(per_tool["ptxed"].pass_percent(), None);
        assert_eq!(all.total(), 4);
        assert_eq!(
            totals_line("ptdump", &dump),
            "ptdump: 1 pass, 1 fail, 1 error, 0 not run (33.3% of 3 run)"
        );
    }

    #[test]
    fn table_rows_and_details() {
        let text = table(&sample(), true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "file   tool    cpu   status");
        assert_eq!(lines[2], "b.ptt  ptdump  6/78  fail");
        assert_eq!(lines[3], "    -x");
        assert!(!text.contains("absent"));
        assert!(text.contains("    boom"));
    }

    #[test]
    fn json_lines() {
        let r = &sample()[1];
        assert_eq!(
            json_result(r),
            r#"{"file":"b.ptt","path":"/x/b.ptt","tool":"ptdump","cpu":"6/78","status":"fail","ms":7,"diff":"-x\n+y\n"}"#
        );
        assert_eq!(
            json_summary(&sample()),
            r#"{"summary":{"tools":{"ptdump":{"pass":1,"fail":1,"error":1,"not_run":0},"ptxed":{"pass":0,"fail":0,"error":0,"not_run":1}},"total":{"pass":1,"fail":1,"error":1,"not_run":1}}}"#
        );
    }
}
