//! Running `.ptt` files by the protocol of libipt's `script/test.bash`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::diff::diff_ub;
use crate::exec::{run_with_timeout, tail, ToolOutput};
use crate::ptt::{exp_tool, sideband_args, PttInfo};
use crate::reference::{compare_generators, OurRun};
use crate::tools::{ToolKind, ToolPath, Tools};
use crate::ConformanceError;

/// The tool name under which problems of the generator itself are filed when
/// the `.ptt` file names no tool to charge them to.
pub const GENERATOR: &str = "pttestgen";

/// The tool name of the generator-versus-reference comparison
/// ([`Runner::with_reference_generator`]).
pub const REFERENCE_CHECK: &str = "pttestgen=ref";

/// The reason of the [`Outcome::NotRun`] of a side-band test whose tool rejects the
/// side-band options (`--pevent:*`, `--sb:*`): the tool cannot run the test at all.
pub const SIDEBAND_UNSUPPORTED: &str = "this tool does not take the side-band options (--pevent:*)";

/// The verdict for one (file, tool, cpu).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The tool's output matched the expectation.
    Pass,
    /// The tool ran but its output differs; `diff` is a unified diff
    /// (expected → actual).
    Fail {
        /// Unified diff, expected (`.exp`) against actual output.
        diff: String,
    },
    /// The test could not be judged: the generator failed, the tool crashed
    /// or timed out, or the protocol was violated.
    Error {
        /// What went wrong.
        message: String,
    },
    /// The tool does not exist (yet). Never counted as passed.
    NotRun {
        /// Why not.
        reason: String,
    },
}

impl Outcome {
    /// Short lower-case label: `pass`, `fail`, `error`, `not run`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail { .. } => "fail",
            Outcome::Error { .. } => "error",
            Outcome::NotRun { .. } => "not run",
        }
    }

    /// True for [`Outcome::Pass`].
    pub fn is_pass(&self) -> bool {
        matches!(self, Outcome::Pass)
    }

    /// True for failures and errors (what makes a run unsuccessful).
    pub fn is_bad(&self) -> bool {
        matches!(self, Outcome::Fail { .. } | Outcome::Error { .. })
    }

    /// The diff, error message or reason that goes with the outcome.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Outcome::Pass => None,
            Outcome::Fail { diff } => Some(diff),
            Outcome::Error { message } => Some(message),
            Outcome::NotRun { reason } => Some(reason),
        }
    }
}

/// One result: a (file, tool, cpu) triple and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    /// The `.ptt` file as given.
    pub path: PathBuf,
    /// Its file name, e.g. `fup-tip.ptt` (the key used in baselines).
    pub file: String,
    /// `ptdump`, `ptxed`, or whatever an `.exp` name says.
    pub tool: String,
    /// The `--cpu` value, if the file lists cpus.
    pub cpu: Option<String>,
    /// The verdict.
    pub outcome: Outcome,
    /// Wall time of the tool run (of the generator, for generator errors).
    pub elapsed: Duration,
}

impl TestResult {
    /// The cpu as printed in tables and baselines (`-` for none).
    pub fn cpu_label(&self) -> &str {
        self.cpu.as_deref().unwrap_or("-")
    }
}

/// Progress report handed to the callback of [`Runner::run_files`].
#[derive(Debug)]
pub struct Progress<'a> {
    /// Jobs (file × cpu) finished so far.
    pub done: usize,
    /// Jobs in total.
    pub total: usize,
    /// The file whose job just finished.
    pub path: &'a Path,
    /// Its results.
    pub results: &'a [TestResult],
}

/// Runs `.ptt` files with a set of tools.
#[derive(Debug, Clone)]
pub struct Runner {
    tools: Tools,
    timeout: Duration,
    jobs: usize,
    cpus: Option<Vec<String>>,
    reference: Option<PathBuf>,
}

/// Default limit for one tool invocation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);

impl Runner {
    /// A runner with the default timeout and one job per available core.
    pub fn new(tools: Tools) -> Self {
        let jobs = thread::available_parallelism().map_or(1, |n| n.get());
        Runner {
            tools,
            timeout: DEFAULT_TIMEOUT,
            jobs,
            cpus: None,
            reference: None,
        }
    }

    /// Sets the limit for each tool invocation.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the number of parallel jobs (at least 1).
    pub fn with_jobs(mut self, jobs: usize) -> Self {
        self.jobs = jobs.max(1);
        self
    }

    /// Runs every file once per cpu in `cpus` instead of the files' own
    /// `; cpu` lines (test.bash's `-c`); `None` restores the default.
    pub fn with_cpus(mut self, cpus: Option<Vec<String>>) -> Self {
        self.cpus = cpus;
        self
    }

    /// Also checks the generator: runs `reference` (libipt's pttc) on each
    /// file and compares listing, `.pt`, `.bin` and `.exp` files with what
    /// pttestgen wrote, as an extra `pttestgen` result.
    pub fn with_reference_generator(mut self, reference: Option<PathBuf>) -> Self {
        self.reference = reference;
        self
    }

    /// The tools in use.
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// Runs one file for each of its cpus.
    pub fn run_file(&self, path: &Path) -> Vec<TestResult> {
        self.run_files(&[path.to_path_buf()], &|_| {})
    }

    /// Runs files in parallel; results come back in file order, then cpu
    /// order, then `.exp` order. `progress` is called after each job.
    pub fn run_files(
        &self,
        paths: &[PathBuf],
        progress: &(dyn Fn(&Progress<'_>) + Sync),
    ) -> Vec<TestResult> {
        let jobs = plan(paths, self.cpus.as_deref());
        let total = jobs.len();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let finished: Mutex<Vec<(usize, Vec<TestResult>)>> = Mutex::new(Vec::with_capacity(total));
        let workers = self.jobs.min(total).max(1);
        thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(index) else { break };
                    let results = self.run_job(job);
                    let count = done.fetch_add(1, Ordering::Relaxed) + 1;
                    progress(&Progress {
                        done: count,
                        total,
                        path: &job.path,
                        results: &results,
                    });
                    finished
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((index, results));
                });
            }
        });
        let mut finished = finished.into_inner().unwrap_or_else(|e| e.into_inner());
        finished.sort_by_key(|(index, _)| *index);
        finished.into_iter().flat_map(|(_, r)| r).collect()
    }

    fn run_job(&self, job: &Job) -> Vec<TestResult> {
        let mut ctx = JobContext {
            job,
            results: Vec::new(),
        };
        match &job.info {
            Ok(info) => self.run_parsed(&mut ctx, info),
            Err(message) => ctx.push(GENERATOR, error(message.clone()), Duration::ZERO),
        }
        ctx.results
    }

    fn run_parsed(&self, ctx: &mut JobContext<'_>, info: &PttInfo) {
        let declared: Vec<String> = if info.exp_tools.is_empty() {
            vec![GENERATOR.to_string()]
        } else {
            info.exp_tools.clone()
        };
        let missing = |tool: &str| match ToolKind::from_exp_tool(tool) {
            Some(kind) => match self.tools.get(kind) {
                ToolPath::Found(_) => None,
                ToolPath::Missing(reason) => Some(reason.clone()),
            },
            None => None,
        };

        // Nothing to judge if none of the tools exists: skip the generator
        // (unless the generator itself is being judged).
        let reasons: Vec<Option<String>> = declared.iter().map(|t| missing(t)).collect();
        if reasons.iter().all(Option::is_some) && self.reference.is_none() {
            for (tool, reason) in declared.iter().zip(reasons) {
                let reason = reason.unwrap_or_default();
                ctx.push(tool, Outcome::NotRun { reason }, Duration::ZERO);
            }
            return;
        }
        let generator_failed = |ctx: &mut JobContext<'_>, message: String, elapsed: Duration| {
            for tool in &declared {
                let outcome = match missing(tool) {
                    Some(reason) => Outcome::NotRun { reason },
                    None => error(message.clone()),
                };
                ctx.push(tool, outcome, elapsed);
            }
        };

        let pttestgen = match &self.tools.pttestgen {
            ToolPath::Found(p) => p.clone(),
            ToolPath::Missing(reason) => {
                return generator_failed(ctx, format!("no generator: {reason}"), Duration::ZERO)
            }
        };
        let dir = match tempfile::Builder::new().prefix("ptconformance-").tempdir() {
            Ok(dir) => dir,
            Err(e) => {
                return generator_failed(
                    ctx,
                    format!("cannot create a temp dir: {e}"),
                    Duration::ZERO,
                )
            }
        };
        let ptt = absolute(&ctx.job.path);
        let mut args = cpu_args(&ctx.job.cpu);
        args.push(ptt.to_string_lossy().into_owned());

        let start = Instant::now();
        let generated = run_with_timeout(&pttestgen, &args, dir.path(), self.timeout);
        let elapsed = start.elapsed();
        if let Some(reference) = &self.reference {
            let ours = match &generated {
                Ok(out) if out.crash().is_none() && out.status.success() => OurRun::Ok(out),
                Ok(out) => OurRun::Failed(format!(
                    "pttestgen failed ({}): {}",
                    out.crash().unwrap_or_else(|| out.status.to_string()),
                    tail(&String::from_utf8_lossy(&out.stderr), 3)
                )),
                Err(e) => OurRun::Failed(e.to_string()),
            };
            let base = base_name(&ctx.job.path);
            let verdict =
                compare_generators(reference, &args, dir.path(), ours, &base, self.timeout);
            ctx.push(REFERENCE_CHECK, verdict, elapsed);
        }
        let output = match generated {
            Ok(output) => output,
            Err(e) => return generator_failed(ctx, format!("pttestgen: {e}"), elapsed),
        };
        if let Some(crash) = output.crash() {
            return generator_failed(ctx, format!("pttestgen {crash}"), elapsed);
        }
        if !output.status.success() {
            let message = format!(
                "pttestgen failed ({}): {}",
                output.status,
                tail(&String::from_utf8_lossy(&output.stderr), 4)
            );
            return generator_failed(ctx, message, elapsed);
        }

        let base = base_name(&ctx.job.path);
        let listing = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut exps: Vec<&str> = Vec::new();
        let mut sideband: Vec<String> = Vec::new();
        for word in listing.split_whitespace() {
            if word.ends_with(".sb") {
                sideband.extend(sideband_args(word, &base));
            } else if word.ends_with(".exp") {
                if !exps.contains(&word) {
                    exps.push(word);
                }
            } else {
                let message = format!("unexpected pttestgen output '{word}'");
                ctx.push(GENERATOR, error(message), elapsed);
            }
        }
        if exps.is_empty() {
            return generator_failed(
                ctx,
                "pttestgen did not produce any .exp file".into(),
                elapsed,
            );
        }

        let mut covered: Vec<String> = Vec::new();
        for exp in exps {
            let tool = exp_tool(exp, &base);
            covered.push(tool.clone());
            let start = Instant::now();
            let outcome =
                self.check_exp(dir.path(), exp, &tool, &base, info, &ctx.job.cpu, &sideband);
            ctx.push(&tool, outcome, start.elapsed());
        }
        for tool in &info.exp_tools {
            if !covered.contains(tool) {
                let message = format!("pttestgen wrote no .exp file for the .exp({tool}) section");
                ctx.push(tool, error(message), elapsed);
            }
        }
    }

    /// Runs the tool an `.exp` file is for and compares its output.
    #[allow(clippy::too_many_arguments)]
    fn check_exp(
        &self,
        dir: &Path,
        exp: &str,
        tool: &str,
        base: &str,
        info: &PttInfo,
        cpu: &Option<String>,
        sideband: &[String],
    ) -> Outcome {
        let Some(kind) = ToolKind::from_exp_tool(tool) else {
            return error(format!("unknown tool '{tool}' (from {exp})"));
        };
        let program = match self.tools.get(kind) {
            ToolPath::Found(p) => p.clone(),
            ToolPath::Missing(reason) => {
                return Outcome::NotRun {
                    reason: reason.clone(),
                }
            }
        };
        let expected = match fs::read(dir.join(exp)) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => return error(format!("cannot read {exp} written by pttestgen: {e}")),
        };
        let pt = format!("{base}.pt");
        let mut args = Vec::new();
        match kind {
            ToolKind::Ptdump => {
                args.extend(cpu_args(cpu));
                args.extend(info.ptdump_opts.iter().cloned());
                args.extend(sideband.iter().cloned());
                args.push(pt);
            }
            ToolKind::Ptxed => {
                let Some((addr, rest)) = info.org.as_deref().and_then(<[String]>::split_first)
                else {
                    return error("org directive not found in test file".into());
                };
                args.push("--raw".into());
                args.push(format!("{base}.bin:{addr}"));
                args.extend(rest.iter().cloned());
                args.extend(cpu_args(cpu));
                args.extend(info.ptxed_opts.iter().cloned());
                // The suite expects libipt's error handling, not our recovery.
                if crate::tools::is_our_ptxed(&program) {
                    args.push("--libipt-resync".into());
                }
                args.extend(["--no-inst".into(), "--check".into(), "--pt".into(), pt]);
                args.extend(sideband.iter().cloned());
            }
            ToolKind::Pttestgen => return error("pttestgen is not a tool under test".into()),
        }
        let output: ToolOutput = match run_with_timeout(&program, &args, dir, self.timeout) {
            Ok(output) => output,
            Err(e) => return error(e.to_string()),
        };
        if let Some(crash) = output.crash() {
            return error(format!("{tool} {crash}"));
        }
        if kind == ToolKind::Ptxed && !sideband.is_empty() && rejects_sideband(&output) {
            return Outcome::NotRun {
                reason: SIDEBAND_UNSUPPORTED.into(),
            };
        }
        let actual = String::from_utf8_lossy(&output.stdout);
        let out_name = format!("{}.out", exp.strip_suffix(".exp").unwrap_or(exp));
        match diff_ub(&expected, &actual, exp, &out_name) {
            None => Outcome::Pass,
            Some(diff) => Outcome::Fail { diff },
        }
    }
}

/// Whether a tool failed because it does not know a side-band option: a ptxed
/// without side-band support cannot run the test at all, which is not a result.
fn rejects_sideband(output: &ToolOutput) -> bool {
    let stderr = String::from_utf8_lossy(&output.stderr);
    !output.status.success()
        && stderr.lines().any(|l| {
            l.contains("unknown option") && (l.contains("--pevent") || l.contains("--sb:"))
        })
}

fn error(message: String) -> Outcome {
    Outcome::Error { message }
}

fn cpu_args(cpu: &Option<String>) -> Vec<String> {
    match cpu {
        Some(cpu) => vec!["--cpu".into(), cpu.clone()],
        None => Vec::new(),
    }
}

/// `basename "${ptt%%.ptt}"`: the stem the generator names its outputs after.
fn base_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_suffix(".ptt").unwrap_or(&name).to_string()
}

fn absolute(path: &Path) -> PathBuf {
    fs::canonicalize(path)
        .or_else(|_| std::env::current_dir().map(|d| d.join(path)))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// One unit of work: a file with one of its cpus.
#[derive(Debug)]
struct Job {
    path: PathBuf,
    file: String,
    cpu: Option<String>,
    info: Result<PttInfo, String>,
}

struct JobContext<'a> {
    job: &'a Job,
    results: Vec<TestResult>,
}

impl JobContext<'_> {
    fn push(&mut self, tool: &str, outcome: Outcome, elapsed: Duration) {
        self.results.push(TestResult {
            path: self.job.path.clone(),
            file: self.job.file.clone(),
            tool: tool.to_string(),
            cpu: self.job.cpu.clone(),
            outcome,
            elapsed,
        });
    }
}

/// Expands files into (file, cpu) jobs, as `run-ptt-tests` does.
fn plan(paths: &[PathBuf], override_cpus: Option<&[String]>) -> Vec<Job> {
    let mut jobs = Vec::new();
    for path in paths {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let info = fs::read(path)
            .map(|bytes| PttInfo::parse(&String::from_utf8_lossy(&bytes)))
            .map_err(|e| format!("cannot read {}: {e}", path.display()));
        let cpus: Vec<Option<String>> = match (&info, override_cpus) {
            (_, Some(cpus)) if !cpus.is_empty() => cpus.iter().cloned().map(Some).collect(),
            (Ok(info), _) if !info.cpus.is_empty() => info.cpus.iter().cloned().map(Some).collect(),
            _ => vec![None],
        };
        for cpu in cpus {
            jobs.push(Job {
                path: path.clone(),
                file: file.clone(),
                cpu,
                info: info.clone(),
            });
        }
    }
    jobs
}

/// All `*.ptt` files directly inside `dir`, sorted by name.
pub fn list_ptt_files(dir: &Path) -> Result<Vec<PathBuf>, ConformanceError> {
    let read = |source| ConformanceError::ReadDir {
        dir: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        if path.extension().is_some_and(|e| e == "ptt") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The directory of the project's own `.ptt` suite (`conformance/tests`).
pub fn own_suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    /// Writes an executable shell script standing in for a tool.
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        let mut f = fs::File::create(&path).expect("create script");
        writeln!(f, "#!/bin/sh\n{body}").expect("write script");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// A fake generator: writes `<base>-ptdump[-cpu_…].exp` holding "psb" and
    /// an empty trace, and lists the .exp like pttc does.
    const FAKE_GEN: &str = r#"
cpu=""
if [ "$1" = "--cpu" ]; then cpu="-cpu_$(echo $2 | tr / _)"; shift 2; fi
base=$(basename "$1" .ptt)
printf '0000000000000000  psb\n' > "$base-ptdump$cpu.exp"
: > "$base.pt"
printf '%s ' "$base-ptdump$cpu.exp"
"#;

    fn setup(ptdump_body: &str) -> (tempfile::TempDir, Tools) {
        let dir = tempfile::tempdir().expect("tempdir");
        let tools = Tools {
            pttestgen: ToolPath::Found(script(dir.path(), "gen", FAKE_GEN)),
            ptdump: ToolPath::Found(script(dir.path(), "dump", ptdump_body)),
            ptxed: ToolPath::Missing("ptxed does not exist yet".into()),
        };
        (dir, tools)
    }

    fn ptt(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, text).expect("write ptt");
        path
    }

    #[test]
    fn pass_fail_and_cpu_expansion() {
        // The fake ptdump echoes its arguments after the expected line, on
        // stderr, and passes only when called with the file's options.
        let (dir, tools) = setup(
            r#"echo "$@" >&2
case "$*" in
  *"--lastip"*) printf '0000000000000000    psb  \n' ;;
  *) echo wrong ;;
esac"#,
        );
        let good = ptt(
            dir.path(),
            "good.ptt",
            "; opt:ptdump --lastip\n; cpu 6/78\n; cpu 6/94\n; @pt .exp(ptdump)\n",
        );
        let bad = ptt(dir.path(), "bad.ptt", "; @pt .exp(ptdump)\n");
        let runner = Runner::new(tools).with_jobs(2);
        let results = runner.run_files(&[good, bad], &|_| {});
        let summary: Vec<(String, String, String)> = results
            .iter()
            .map(|r| {
                (
                    r.file.clone(),
                    r.cpu_label().to_string(),
                    r.outcome.label().to_string(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("good.ptt".into(), "6/78".into(), "pass".into()),
                ("good.ptt".into(), "6/94".into(), "pass".into()),
                ("bad.ptt".into(), "-".into(), "fail".into()),
            ]
        );
        let Outcome::Fail { diff } = &results[2].outcome else {
            panic!("expected a failure")
        };
        assert!(diff.contains("-0000000000000000  psb\n+wrong\n"), "{diff}");
    }

    #[test]
    fn cpu_override_replaces_the_files_cpus() {
        let (dir, tools) = setup("printf '0000000000000000  psb\\n'");
        let file = ptt(dir.path(), "c.ptt", "; cpu 6/78\n; @pt .exp(ptdump)\n");
        let results = Runner::new(tools)
            .with_cpus(Some(vec!["6/61".into(), "none".into()]))
            .run_file(&file);
        let cpus: Vec<&str> = results.iter().map(TestResult::cpu_label).collect();
        assert_eq!(cpus, ["6/61", "none"]);
        assert!(results.iter().all(|r| r.outcome.is_pass()), "{results:?}");
    }

    #[test]
    fn missing_tool_is_not_run_and_skips_generation() {
        let (dir, tools) = setup("exit 0");
        let file = ptt(dir.path(), "x.ptt", "org 0x1000\n; @pt .exp(ptxed)\n");
        let results = Runner::new(tools).run_file(&file);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].tool, "ptxed");
        assert!(matches!(results[0].outcome, Outcome::NotRun { .. }));
    }

    #[test]
    fn generator_failure_is_charged_to_declared_tools() {
        let (dir, mut tools) = setup("exit 0");
        tools.pttestgen = ToolPath::Found(script(dir.path(), "badgen", "echo boom >&2; exit 2"));
        let file = ptt(
            dir.path(),
            "x.ptt",
            "; @pt .exp(ptdump)\n; @pt .exp(ptxed)\n",
        );
        let results = Runner::new(tools).run_file(&file);
        assert_eq!(results.len(), 2);
        match &results[0].outcome {
            Outcome::Error { message } => assert!(message.contains("boom"), "{message}"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(results[1].outcome, Outcome::NotRun { .. }));
    }

    #[test]
    fn crash_and_timeout_are_errors() {
        let (dir, tools) = setup("kill -ABRT $$");
        let file = ptt(dir.path(), "x.ptt", "; @pt .exp(ptdump)\n");
        let results = Runner::new(tools.clone()).run_file(&file);
        assert!(
            matches!(&results[0].outcome, Outcome::Error { message } if message.contains("signal"))
        );

        let (_dir2, mut slow) = setup("exit 0");
        slow.ptdump = ToolPath::Found(script(dir.path(), "slow", "sleep 20"));
        let start = Instant::now();
        let results = Runner::new(slow)
            .with_timeout(Duration::from_millis(300))
            .run_file(&file);
        assert!(
            matches!(&results[0].outcome, Outcome::Error { message } if message.contains("timed out"))
        );
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn sideband_files_become_arguments_and_unknown_options_are_not_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Writes one .sb stream besides the expectations, as pttc names it.
        let generator = r#"
base=$(basename "$1" .ptt)
sb="$base-pevent-primary,sample-type=0x4,time-zero=0x0,time-shift=0x0,time-mult=0x1.sb"
: > "$sb"; : > "$base.pt"; : > "$base.bin"
printf 'ARGS\n' > "$base-ptdump.exp"
printf 'x\n' > "$base-ptxed.exp"
printf '%s %s %s ' "$base-ptdump.exp" "$base-ptxed.exp" "$sb"
"#;
        let tools = Tools {
            pttestgen: ToolPath::Found(script(dir.path(), "gen", generator)),
            // Passes only with test.bash's arguments for that stream.
            ptdump: ToolPath::Found(script(
                dir.path(),
                "dump",
                r#"[ "$*" = "--pevent:sample-type 0x4 --pevent:time-zero 0x0 --pevent:time-shift 0x0 --pevent:time-mult 0x1 --pevent:primary s-pevent-primary,sample-type=0x4,time-zero=0x0,time-shift=0x0,time-mult=0x1.sb s.pt" ] && echo ARGS"#,
            )),
            ptxed: ToolPath::Found(script(
                dir.path(),
                "xed",
                "echo \"xed: unknown option: --pevent:sample-type.\" >&2; exit 1",
            )),
        };
        let file = ptt(dir.path(), "s.ptt", "org 0x1000\n; @pt .exp(ptdump)\n");
        let results = Runner::new(tools).run_file(&file);
        let got: Vec<(&str, &str)> = results
            .iter()
            .map(|r| (r.tool.as_str(), r.outcome.label()))
            .collect();
        assert_eq!(
            got,
            [("ptdump", "pass"), ("ptxed", "not run")],
            "{results:?}"
        );
    }

    #[test]
    fn unreadable_file_is_an_error() {
        let (dir, tools) = setup("exit 0");
        let results = Runner::new(tools).run_file(&dir.path().join("absent.ptt"));
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].tool, GENERATOR);
        assert!(results[0].outcome.is_bad());
    }

    #[test]
    fn lists_only_ptt_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["b.ptt", "a.ptt", "c.txt"] {
            fs::write(dir.path().join(name), "").expect("write");
        }
        let files = list_ptt_files(dir.path()).expect("list");
        let names: Vec<_> = files.iter().filter_map(|p| p.file_name()).collect();
        assert_eq!(names, ["a.ptt", "b.ptt"]);
        assert!(list_ptt_files(&dir.path().join("nope")).is_err());
    }
}
