//! `ptperf coverage` on a C program recorded with the simulated PT CPU: its lcov
//! output is accepted by genhtml and marks executed the lines gcov marks executed on
//! a `gcc --coverage` build of the same program run with the same input; the
//! coverage decoder's edges and blocks equal the flow decoder's on the recording.
//!
//! Where gcov and the DWARF line table disagree on which lines hold code, the two
//! cannot agree line for line; the test names those lines and checks each is one of
//! these (anything else fails):
//!
//! * gcov counts a function's declarator line (`static int f(int c)`) where gcc's
//!   DWARF puts the prologue on the `{` line below it, and the epilogue on the
//!   closing `}` line, which gcov does not list;
//! * gcov counts `case`/`default` labels, which have no instructions of their own
//!   (the switch jumps straight to the statements).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::{dir, ptperf, record};
use pt_coverage::reference::flow_coverage;
use pt_coverage::{CoverageDecoder, Options};
use pt_perf::{Session, SessionOptions};
use pt_perf_data::MappedFile;

const SRC: &str = "tests/programs/coverage.c";
const INPUT: &str = "ab1";

fn run(cmd: &mut Command, what: &str) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// gcov's lines of `src` built with --coverage and run on [`INPUT`]: line →
/// executed (lines gcov does not count are absent).
fn gcov_lines(d: &Path) -> BTreeMap<u32, bool> {
    let cc = pt_testkit::tool("cc", "gcc");
    let gcov = pt_testkit::tool("gcov", "gcc");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(SRC),
        d.join("coverage.c"),
    )
    .unwrap();
    run(
        Command::new(&cc).current_dir(d).args([
            "--coverage",
            "-O0",
            "-c",
            "coverage.c",
            "-o",
            "coverage.o",
        ]),
        "cc --coverage",
    );
    run(
        Command::new(&cc)
            .current_dir(d)
            .args(["--coverage", "coverage.o", "-o", "progcov"]),
        "link",
    );
    run(Command::new(d.join("progcov")).arg(INPUT), "progcov");
    run(Command::new(gcov).current_dir(d).arg("coverage.c"), "gcov");
    let text = std::fs::read_to_string(d.join("coverage.c.gcov")).unwrap();
    let mut lines = BTreeMap::new();
    for l in text.lines() {
        let mut parts = l.splitn(3, ':');
        let (Some(count), Some(line)) = (parts.next(), parts.next()) else {
            continue;
        };
        let (count, line) = (count.trim(), line.trim());
        let Ok(line) = line.parse::<u32>() else {
            continue;
        };
        if count == "-" || line == 0 {
            continue;
        }
        let executed = !(count.starts_with('#') || count.starts_with('='));
        lines.insert(line, executed);
    }
    lines
}

/// Our lcov's lines of coverage.c: line → executed.
fn lcov_lines(info: &str) -> BTreeMap<u32, bool> {
    let mut lines = BTreeMap::new();
    let mut in_file = false;
    for l in info.lines() {
        if let Some(f) = l.strip_prefix("SF:") {
            in_file = f.ends_with("/coverage.c");
        } else if let (true, Some(da)) = (in_file, l.strip_prefix("DA:")) {
            let (line, hits) = da.split_once(',').unwrap();
            lines.insert(line.parse().unwrap(), hits.parse::<u64>().unwrap() > 0);
        }
    }
    lines
}

#[test]
fn lcov_matches_gcov_and_genhtml_takes_it() {
    let d = dir("coverage-lcov");
    let gcov = gcov_lines(&d);
    let prog = common::build("coverage-g", SRC, &["-g", "-O0"]);
    let data = record(
        &d,
        "cov",
        &["-e", "intel_pt/noretcomp,tsc=0,mtc=0/u"],
        &[prog.as_os_str(), INPUT.as_ref()],
    );
    let info = d.join("cov.info");
    let drcov = d.join("cov.drcov");
    let map = d.join("cov.map");
    let summary = run(
        ptperf()
            .args(["coverage", "-F", "-i"])
            .arg(&data)
            .arg("--lcov")
            .arg(&info)
            .arg("--drcov")
            .arg(&drcov)
            .arg("--afl-map")
            .arg(&map),
        "ptperf coverage",
    );
    let prog_name = prog.to_string_lossy().to_string();
    assert!(summary.contains(&prog_name), "{summary}");
    let listed = |f: &str| {
        summary
            .lines()
            .any(|l| l.trim_end().ends_with(&format!(" {f}")))
    };
    assert!(
        listed("classify") && listed("sum") && listed("main"),
        "{summary}"
    );
    assert!(!listed("never_called"), "{summary}");

    // The text of the program's own part, its path and the column padding made
    // stable (ld.so's and libc's lines depend on the system's builds).
    let mut own = Vec::new();
    let mut section = false;
    for l in summary.lines() {
        if l.starts_with('#') || l.trim_start().starts_with(&format!("{prog_name} ")) {
            own.push(l);
        }
        if l.is_empty() {
            section = false;
        } else if l == format!("{prog_name}:") {
            section = true;
        }
        if section {
            own.push(l);
        }
    }
    let own: Vec<String> = own
        .iter()
        .map(|l| l.replace(&prog_name, "[prog]"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    insta::assert_snapshot!("coverage_summary", own.join("\n"));

    // --pid and --tid: the recorded process is all there is; another is nothing.
    let file = MappedFile::open(&data).unwrap();
    let perf = file.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(&data)).unwrap();
    let ctx = session.running(0, None);
    let plain = run(
        ptperf().args(["coverage", "-i"]).arg(&data),
        "ptperf coverage",
    );
    for (opt, id) in [("--pid", ctx.pid.unwrap()), ("--tid", ctx.tid.unwrap())] {
        let only = run(
            ptperf()
                .args(["coverage", "-i"])
                .arg(&data)
                .args([opt, &format!("{id},{}", id + 100_000)]),
            "ptperf coverage --pid/--tid",
        );
        assert_eq!(only, plain, "{opt} {id}");
        let none = run(
            ptperf()
                .args(["coverage", "-i"])
                .arg(&data)
                .args([opt, &(id + 100_000).to_string()]),
            "ptperf coverage --pid/--tid",
        );
        assert_eq!(none.lines().count(), 1, "{opt}: {none}");
    }

    // genhtml turns it into an HTML report.
    let html = d.join("html");
    run(
        Command::new(pt_testkit::tool("genhtml", "lcov"))
            .arg(&info)
            .arg("-o")
            .arg(&html),
        "genhtml",
    );
    assert!(html.join("index.html").is_file());

    let ours = lcov_lines(&std::fs::read_to_string(&info).unwrap());
    let source: Vec<String> =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(SRC))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
    let text = |l: u32| source[l as usize - 1].trim().to_string();
    let mut explained = Vec::new();
    for (&line, &executed) in &gcov {
        match ours.get(&line) {
            Some(&e) => assert_eq!(e, executed, "line {line} `{}`", text(line)),
            None => {
                let t = text(line);
                let declarator = text(line + 1) == "{";
                let label = t.starts_with("case ") || t.starts_with("default");
                assert!(
                    declarator || label,
                    "gcov's line {line} `{t}` has no code in DWARF"
                );
                explained.push(format!("{line} gcov only: `{t}`"));
            }
        }
    }
    for (&line, &executed) in &ours {
        if !gcov.contains_key(&line) {
            let t = text(line);
            assert!(
                t == "{" || t == "}",
                "our line {line} `{t}` is not in gcov's"
            );
            if executed {
                explained.push(format!("{line} ours only: `{t}`"));
            }
        }
    }
    let executed = |m: &BTreeMap<u32, bool>| {
        m.iter()
            .filter(|(_, &e)| e)
            .map(|(&l, _)| l)
            .collect::<BTreeSet<_>>()
    };
    eprintln!(
        "gcov executed {:?}\nours executed {:?}\ndiffering lines: {explained:#?}",
        executed(&gcov),
        executed(&ours)
    );
    assert!(executed(&gcov).len() > 15);

    // drcov: header, module table, then 8-byte records.
    let dr = std::fs::read(&drcov).unwrap();
    let head = String::from_utf8_lossy(&dr[..dr.len().min(2000)]).to_string();
    assert!(head.starts_with("DRCOV VERSION: 2\n"), "{head}");
    assert!(head.contains(&prog_name), "{head}");
    let at = head.find("BB Table: ").unwrap();
    let nl = at + head[at..].find('\n').unwrap();
    let n: usize = head[at + 10..nl].trim_end_matches(" bbs").parse().unwrap();
    assert_eq!(dr.len() - nl - 1, n * 8);

    // The recording's edges and blocks: the coverage decoder's equal the flow
    // decoder's, and the bitmap written is theirs.
    let file = MappedFile::open(&data).unwrap();
    let perf = file.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(&data)).unwrap();
    let mut total = vec![0u8; 1 << 16];
    let mut edges = 0;
    for (q, queue) in session.queues().iter().enumerate() {
        let ctx = session.running(q, None);
        let image = session.image(ctx.pid, None);
        for s in 0..queue.segments.len() {
            let trace = queue.segment_bytes(s);
            let reference = flow_coverage(trace, image, session.config());
            assert!(reference.errors.is_empty(), "{:?}", reference.errors);
            let mut cov = CoverageDecoder::new(Options {
                collect: true,
                config: *session.config(),
                ..Options::default()
            });
            let out = cov.decode(trace, image);
            assert_eq!(out.errors, 0, "{:?}", out.first_error);
            let mut a: Vec<_> = cov
                .edges()
                .map(|(e, n)| (e.from, e.to, e.kind, n))
                .collect();
            let mut b: Vec<_> = reference
                .edge_counts
                .iter()
                .map(|(&(f, t), &(k, n))| (f, t, k, n))
                .collect();
            a.sort();
            b.sort();
            assert_eq!(a, b);
            let mut blocks: Vec<_> = cov.blocks().collect();
            blocks.sort();
            assert_eq!(blocks, reference.block_list());
            assert!(cov.map() == reference.bitmap(Default::default(), 1 << 16));
            edges += a.len();
            for (t, m) in total.iter_mut().zip(cov.map()) {
                *t = t.wrapping_add(*m);
            }
        }
    }
    assert!(edges > 1000, "{edges} edges");
    assert!(std::fs::read(&map).unwrap() == total);
}

/// A per-CPU recording (one CPU, SWITCH_CPU_WIDE records) of a program that forks
/// a child that executes another program: the CPU's trace runs the parent, the
/// child in the parent's image, the child in the new image and the parent again.
/// `ptperf coverage` decodes each piece (from a PSB on) over the image of the
/// thread running then: its per-DSO summary equals that of the same program
/// recorded per thread, and decodes without an error.
#[test]
fn per_cpu_switches_between_images() {
    use pt_testkit::recording::{record as record_layout, Layout};
    let d = dir("cov_per_cpu");
    let prog = common::build("exec_deep", "tests/programs/exec_deep.c", &["-O1", "-g"]);
    let tiny = common::tiny();
    let args = [tiny.to_str().unwrap()];
    let summary = |name: &str, per_cpu: bool| {
        let sub = d.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let (data, sink) = record_layout(
            &sub,
            &prog,
            &args,
            Layout {
                per_cpu,
                ..Layout::default()
            },
        );
        let o = ptperf()
            .args(["coverage", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{name}: {err}");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            err,
            sink.threads.len(),
        )
    };
    let (per_thread, err_t, threads) = summary("per_thread", false);
    let (per_cpu, err_c, _) = summary("per_cpu", true);
    eprintln!("per thread ({threads} threads):\n{per_thread}{err_t}\nper cpu:\n{per_cpu}{err_c}");
    assert_eq!(threads, 2);
    assert!(!err_t.contains("warning"), "{err_t}");
    assert!(!err_c.contains("warning"), "{err_c}");
    for dso in ["prog-exec_deep", "prog-tiny"] {
        assert!(per_cpu.contains(dso), "{dso} missing:\n{per_cpu}");
    }
    assert_eq!(per_cpu, per_thread);
    // It is a per-CPU recording: one queue for both processes, with time.
    let data = d.join("per_cpu/perf.data");
    let file = MappedFile::open(&data).unwrap();
    let perf = file.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(&data)).unwrap();
    assert!(session.per_cpu() && session.is_timed());
    assert_eq!(session.queues().len(), 1);
}
