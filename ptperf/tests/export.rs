//! `ptperf export`: a program with known call counts recorded on the simulator
//! into perf.data (as perf lays it out), exported into SQLite and into a
//! throwaway PostgreSQL server, and checked with SQL: the samples are perf's
//! (as many as `perf script --itrace=bpw` prints), their ids dense, every call
//! on a call path chain that reaches the root, the calls of each function as
//! many as the program makes, and perf's views answer.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use pt_testkit::recording as perf_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use perf_support::{program, record, scratch, Layout, NOLIBC};
use pg_server::PgServer;
use rusqlite::Connection;

use pt_testkit::pg_server;

fn ptperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptperf"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The recording the tests share (the simulator takes a while).
fn recording() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let prog = program("export_calls", NOLIBC);
        let dir = scratch("export_recording");
        let (file, _) = record(&dir, &prog, &[], Layout::default());
        file
    })
}

/// Samples `perf script --itrace=bpw` (branches, PTWRITE and power events)
/// prints for `file`.
fn perf_branch_samples(file: &Path) -> u64 {
    let perf = pt_testkit::tool("perf", "linux-perf");
    let out = run(Command::new(perf)
        .args(["script", "--itrace=bpw", "-F", "ip,addr", "-i"])
        .arg(file)
        .env("PERF_PAGER", "cat")
        .env("HOME", perf_support::tmp()));
    assert!(out.status.success(), "perf script: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count() as u64
}

/// The calls the program makes, by function.
const CALLS: [(&str, i64); 3] = [("mid", 200), ("leaf", 800), ("fib", 1973)];

/// The checks both databases answer the same way: `q` runs a query that
/// returns one integer.
fn check_database(q: &mut dyn FnMut(&str) -> i64, expected_samples: u64) {
    // Perf's zero rows plus one per sample; ids 0..n without a gap.
    let n = q("SELECT count(*) FROM samples");
    assert_eq!(n as u64, expected_samples + 1, "samples");
    assert_eq!(q("SELECT min(id) FROM samples"), 0);
    assert_eq!(
        q("SELECT max(id) FROM samples"),
        n - 1,
        "sample ids are dense"
    );
    assert_eq!(q("SELECT count(DISTINCT id) FROM samples"), n);
    // Every sample's thread, comm, dso and symbol exist.
    for (col, table) in [
        ("thread_id", "threads"),
        ("comm_id", "comms"),
        ("dso_id", "dsos"),
        ("symbol_id", "symbols"),
        ("to_symbol_id", "symbols"),
        ("branch_type", "branch_types"),
    ] {
        assert_eq!(
            q(&format!(
                "SELECT count(*) FROM samples WHERE {col} NOT IN (SELECT id FROM {table})"
            )),
            0,
            "samples.{col} without a {table} row"
        );
    }
    // Each call's path is in call_paths, and its chain of parents ends at the root.
    assert_eq!(
        q("SELECT count(*) FROM calls WHERE call_path_id NOT IN (SELECT id FROM call_paths)"),
        0
    );
    assert_eq!(
        q("WITH RECURSIVE up(id, parent_id, depth) AS ( \
             SELECT id, parent_id, 0 FROM call_paths \
             UNION ALL SELECT up.id, p.parent_id, up.depth + 1 FROM up \
             JOIN call_paths p ON p.id = up.parent_id WHERE up.parent_id <> 0 AND up.depth < 1000) \
           SELECT count(*) FROM (SELECT id FROM up GROUP BY id HAVING min(parent_id) <> 0) AS x"),
        0,
        "a call path whose chain does not reach the root"
    );
    assert_eq!(
        q("SELECT count(*) FROM calls WHERE id <> 0 AND (call_id NOT IN (SELECT id FROM samples) \
           OR return_id NOT IN (SELECT id FROM samples) OR parent_id NOT IN (SELECT id FROM calls))"),
        0,
        "calls referring to no sample or no caller"
    );
    // The program's calls, function by function: called and returned.
    for (f, n) in CALLS {
        assert_eq!(
            q(&format!(
                "SELECT count(*) FROM calls_view WHERE symbol = '{f}' AND flags = ''"
            )),
            n,
            "calls of {f}"
        );
    }
    // Each call of leaf is under a call of mid; fib's under fib or _start.
    assert_eq!(
        q(
            "SELECT count(*) FROM calls c JOIN call_paths p ON p.id = c.call_path_id \
           JOIN symbols s ON s.id = p.symbol_id JOIN call_paths pp ON pp.id = p.parent_id \
           JOIN symbols ps ON ps.id = pp.symbol_id WHERE s.name = 'leaf' AND ps.name = 'mid'"
        ),
        800
    );
    // The views answer.
    for v in [
        "samples_view",
        "calls_view",
        "call_paths_view",
        "machines_view",
        "dsos_view",
        "symbols_view",
        "threads_view",
        "comm_threads_view",
    ] {
        assert!(q(&format!("SELECT count(*) FROM {v}")) > 0, "{v}");
    }
    assert_eq!(
        q("SELECT count(*) FROM samples_view WHERE branch_type_name = 'call' AND symbol = 'mid'"),
        800,
        "mid's calls of leaf as samples"
    );
    // perf's zero call row marks the unknown comm too.
    assert_eq!(
        q("SELECT count(*) FROM comms WHERE has_calls AND id <> 0"),
        1
    );
}

#[test]
fn sqlite_export() {
    let file = recording();
    let expected = perf_branch_samples(file);
    let dir = scratch("export_sqlite");
    let db = dir.join("pt.db");
    let out = run(ptperf()
        .args(["export", "sqlite"])
        .arg(&db)
        .args(["branches", "calls", "--itrace=bpw", "-i"])
        .arg(file));
    assert!(out.status.success(), "{}", stderr(&out));
    let conn = Connection::open(&db).unwrap();
    let mut q = |sql: &str| -> i64 {
        conn.query_row(sql, [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    check_database(&mut q, expected);
    // The branches layout: no period, weight, transaction_, data_src.
    assert_eq!(q("SELECT count(*) FROM pragma_table_info('samples')"), 21);
    // Nothing left beside it.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("pt.db")]);
}

#[test]
fn postgres_export() {
    let file = recording();
    let expected = perf_branch_samples(file);
    let server = PgServer::start();
    let out = run(ptperf()
        .args([
            "export",
            "postgres",
            &server.conninfo("pt_test"),
            "calls",
            "--itrace=bpw",
            "-i",
        ])
        .arg(file));
    assert!(out.status.success(), "{}", stderr(&out));
    let mut client = server.client("pt_test");
    let mut q = |sql: &str| -> i64 {
        let row = client
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.try_get::<_, i64>(0)
            .or_else(|_| row.try_get::<_, i32>(0).map(i64::from))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    check_database(&mut q, expected);
    // The all layout, perf's column name.
    assert_eq!(
        q("SELECT count(*) FROM information_schema.columns WHERE table_name = 'samples'"),
        25
    );
    assert_eq!(
        q("SELECT count(*) FROM information_schema.columns WHERE table_name = 'samples' AND column_name = 'transaction'"),
        1
    );
    // perf's keys are there.
    assert!(q("SELECT count(*) FROM information_schema.table_constraints WHERE constraint_type = 'FOREIGN KEY'") >= 20);
    drop(client);

    // The database exists now: a second export says so and leaves it alone.
    let out = run(ptperf()
        .args(["export", "postgres", &server.conninfo("pt_test"), "-i"])
        .arg(file));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(
        server
            .client("pt_test")
            .query_one("SELECT count(*) FROM samples", &[])
            .unwrap()
            .get::<_, i64>(0) as u64,
        expected + 1
    );
}

/// Every row of `table` in `db`, the columns `cols`, in id order, as text.
fn rows(db: &Path, table: &str, cols: &str) -> Vec<String> {
    let conn = Connection::open(db).unwrap();
    let mut st = conn
        .prepare(&format!("SELECT {cols} FROM {table} ORDER BY id"))
        .unwrap();
    let n = st.column_count();
    let rows = st
        .query_map([], |r| {
            let mut line = Vec::new();
            for i in 0..n {
                let v: rusqlite::types::Value = r.get(i)?;
                line.push(format!("{v:?}"));
            }
            Ok(line.join("|"))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// perf's own export-to-sqlite.py (run by perf's embedded Python with PySide2's
/// QtSql: Debian package python3-pyside2.qtsql) and ours on the same perf.data
/// write the same tables, row for row and column for column (times and IPC
/// counts included: the samples are `ptperf script`'s, as perf synthesizes them).
#[test]
fn same_tables_as_perfs_export_to_sqlite() {
    compare_with_perf(recording(), "export_vs_perf", &[]);
}

/// The same on a per-CPU recording of three threads of a static libc program
/// (one AUX area per CPU, SWITCH_CPU_WIDE records, the vdso), with perf's
/// context_switches table.
#[test]
fn same_tables_as_perfs_export_to_sqlite_per_cpu() {
    let prog = perf_support::program_as(
        "perf_threads",
        "perf_threads",
        &["-O1", "-static", "-pthread"],
    );
    let dir = scratch("export_per_cpu_recording");
    let layout = Layout {
        per_cpu: true,
        vdso_cache: true,
        ..Layout::default()
    };
    let (file, _) = record(&dir, &prog, &[], layout);
    compare_with_perf(
        &file,
        "export_vs_perf_per_cpu",
        &[(
            "context_switches",
            "id, machine_id, cpu, thread_out_id, comm_out_id, thread_in_id, comm_in_id, flags",
        )],
    );
}

/// A dynamically linked two-thread C program: the dynamic linker, libc and
/// its debug files (`/usr/lib/debug/.build-id`), ifunc resolvers and `.plt`
/// entries. The export names every symbol as `ptperf script` and perf do (one
/// symbol loader): perf's tables row for row, so the same row counts and the
/// same most-called symbols, which are the C library's and the dynamic
/// linker's, not "unknown".
#[test]
fn same_symbols_as_perfs_export_to_sqlite_dynamic_threads() {
    let prog =
        perf_support::program_as("perf_threads_dynamic", "perf_threads", &["-O1", "-pthread"]);
    let dir = scratch("export_dynamic_threads_recording");
    let layout = Layout {
        vdso_cache: true,
        ..Layout::default()
    };
    let (file, _) = record(&dir, &prog, &[], layout);
    let d = scratch("export_vs_perf_dynamic_threads");
    compare_with_perf_as(&file, &d, &[], "bpw", &["branches", "calls"]);
    let top = |db: &Path| -> Vec<(String, i64)> {
        let conn = Connection::open(db).unwrap();
        let mut st = conn
            .prepare(
                "SELECT s.name, COUNT(*) AS n FROM calls c \
                 JOIN call_paths p ON p.id = c.call_path_id \
                 JOIN symbols s ON s.id = p.symbol_id \
                 GROUP BY s.name ORDER BY n DESC, s.name LIMIT 10",
            )
            .unwrap();
        let r = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        r.map(Result::unwrap).collect()
    };
    let (theirs, ours) = (top(&d.join("perf.db")), top(&d.join("ours.db")));
    assert_eq!(ours, theirs);
    assert!(ours.len() == 10, "{ours:?}");
    assert!(
        ours.iter()
            .any(|(n, _)| n == "_dl_lookup_symbol_x" || n == "do_lookup_x"),
        "the dynamic linker's symbol lookup among the most called: {ours:?}"
    );
    assert!(!ours.iter().any(|(n, _)| n == "unknown"), "{ours:?}");
    let conn = Connection::open(d.join("ours.db")).unwrap();
    let unknown: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM calls c JOIN call_paths p ON p.id = c.call_path_id \
             JOIN symbols s ON s.id = p.symbol_id WHERE s.name = 'unknown'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let all: i64 = conn
        .query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0))
        .unwrap();
    assert!(
        unknown * 100 < all,
        "{unknown} of {all} calls to unknown code"
    );
}

/// With call chains (`callchains`, perf's `g`): perf keeps them for its
/// instructions samples, so both events are exported (`--itrace=bi100ig`), and
/// each sample's call_path_id names the call path of its chain, numbered with
/// the calls' paths in one tree as perf's db-export numbers them. (perf 6.1's
/// script needs `calls` with `callchains`: without, its trace_begin writes to
/// the calls table it did not create and fails.)
#[test]
fn same_tables_as_perfs_export_to_sqlite_with_callchains() {
    let dir = scratch("export_vs_perf_callchains");
    for (itrace, words) in [
        ("bi100ig", &["branches", "calls", "callchains"][..]),
        ("i50ig", &["all", "calls", "callchains"][..]),
        ("bg", &["branches", "calls", "callchains"][..]),
    ] {
        let sub = dir.join(format!("{itrace}-{}", words.join("-")));
        std::fs::create_dir_all(&sub).unwrap();
        compare_with_perf_as(recording(), &sub, &[], itrace, words);
        if itrace != "bg" {
            let db = Connection::open(sub.join("ours.db")).unwrap();
            let q = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
            // Chains were stored, and every one reaches the root.
            assert!(q("SELECT COUNT(*) FROM samples WHERE call_path_id != 0") > 0);
            assert_eq!(
                q("SELECT COUNT(*) FROM samples s LEFT JOIN call_paths c \
                   ON c.id = s.call_path_id WHERE c.id IS NULL"),
                0
            );
        }
    }
}

/// PTWRITE and power events: the program's recording with PTW, MWAIT, PWRE,
/// EXSTOP (with its FUP) and PWRX packets after its first PSB+ (the simulator
/// traces no PTWRITE instruction and models no power events), exported by
/// with `--itrace=bpw` (perf's p and w) and by perf's export-to-sqlite.py:
/// the samples and the ptwrite, cbr, mwait, pwre, exstop and pwrx tables agree.
/// Without pwr_evt in the config, perf makes no mwait, pwre, exstop and pwrx
/// events but still synthesizes their samples, which it takes for its first
/// event's (intel_pt//u), with no table rows: so do we.
#[test]
fn same_tables_as_perfs_export_to_sqlite_with_ptwrite_and_power_events() {
    use pt_perf_data::intel_pt::config::{PTW, PWR_EVT};
    compare_ptwrite_and_power_events("export_vs_perf_pwr", PWR_EVT | PTW);
    compare_ptwrite_and_power_events("export_vs_perf_pwr_off", PTW);
}

fn compare_ptwrite_and_power_events(name: &str, config_bits: u64) {
    let dir = scratch(name);
    let file = ptwrite_and_power_recording(&dir, config_bits);
    let sub = dir.join("cmp");
    std::fs::create_dir_all(&sub).unwrap();
    let pwr = config_bits & pt_perf_data::intel_pt::config::PWR_EVT != 0;
    let tables = [
        ("ptwrite", "*"),
        ("mwait", "*"),
        ("pwre", "*"),
        ("exstop", "*"),
        ("pwrx", "*"),
    ];
    // Without pwr_evt, perf drops the empty power tables (the schemas are
    // compared too).
    let extra = if pwr { &tables[..] } else { &tables[..1] };
    compare_with_perf_as(&file, &sub, extra, "bpw", &["all", "calls"]);
}

/// The program's recording in `dir` with the intel_pt config bits
/// `config_bits` added and PTW (two), MWAIT, PWRE, EXSTOP with its FUP, and
/// PWRX packets after the first TIP.PGE of its trace.
fn ptwrite_and_power_recording(dir: &Path, config_bits: u64) -> PathBuf {
    use pt_encoder::{encode, IpPacketKind, Packet, PtwSize, WakeReason};
    let prog = program("export_calls", NOLIBC);
    let layout = Layout {
        config_bits,
        ..Layout::default()
    };
    let (_, mut sink) = record(dir, &prog, &[], layout);
    let bytes = sink.stream_bytes_mut(0).expect("a trace stream");
    // After the first TIP.PGE (tracing on): its IP, and where it ends.
    let mut dec = pt_decoder::PacketDecoder::new(bytes, &pt_decoder::Config::default());
    dec.sync_forward().expect("a PSB");
    let (fup, at) = loop {
        if let Packet::Ip(IpPacketKind::TipPge, ip) = dec.next_packet().expect("a TIP.PGE").1 {
            break (ip, dec.offset().unwrap() as usize);
        }
    };
    let packets = [
        Packet::Ptw {
            size: PtwSize::Eight,
            payload: 0x1234_5678_9abc_def0,
            ip: false,
        },
        Packet::Ptw {
            size: PtwSize::Four,
            payload: 0xcafe,
            ip: false,
        },
        Packet::Mwait {
            hints: 0x21,
            ext: 1,
        },
        Packet::Pwre {
            state: 2,
            sub_state: 1,
            hw: true,
        },
        Packet::Exstop { ip: true },
        Packet::Ip(IpPacketKind::Fup, fup),
        Packet::Pwrx {
            last: 2,
            deepest: 3,
            wake: WakeReason {
                interrupt: true,
                store: false,
                autonomous: false,
            },
        },
    ];
    let mut add = Vec::new();
    for p in &packets {
        let mut b = [0u8; 16];
        let n = encode(p, &mut b).unwrap();
        add.extend_from_slice(&b[..n]);
    }
    bytes.splice(at..at, add);
    let file = dir.join("pwr.data");
    sink.write(&file);
    file
}

/// The same PTWRITE and power events, and call chains, through PostgreSQL's
/// binary COPY: the rows the packets make, and as many samples and chains as
/// the SQLite export of the same file.
#[test]
fn postgres_ptwrite_power_events_and_callchains() {
    use pt_perf_data::intel_pt::config::{PTW, PWR_EVT};
    let dir = scratch("export_pg_pwr");
    let file = ptwrite_and_power_recording(&dir, PWR_EVT | PTW);
    let words = ["calls", "callchains", "--itrace=bpwi100ig", "-i"];
    let lite = dir.join("ours.db");
    let out = run(ptperf()
        .args(["export", "sqlite"])
        .arg(&lite)
        .args(words)
        .arg(&file));
    assert!(out.status.success(), "{}", stderr(&out));
    let server = PgServer::start();
    let out = run(ptperf()
        .args(["export", "postgres", &server.conninfo("pt_pwr")])
        .args(words)
        .arg(&file));
    assert!(out.status.success(), "{}", stderr(&out));
    let mut client = server.client("pt_pwr");
    let mut pg = |sql: &str| -> String {
        let row = client
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.get::<_, Option<String>>(0).unwrap_or_default()
    };
    let db = Connection::open(&lite).unwrap();
    let lite_count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    for (table, rows) in [
        ("ptwrite", "1311768467463790320 false,51966 false"),
        ("mwait", "33 1"),
        ("pwre", "2 1 true"),
        ("exstop", "true"),
        ("pwrx", "3 2 1"),
        ("cbr", "32 1333 133"),
    ] {
        let cols = match table {
            "ptwrite" => "payload || ' ' || exact_ip",
            "mwait" => "hints || ' ' || extensions",
            "pwre" => "cstate || ' ' || subcstate || ' ' || hw",
            "exstop" => "exact_ip::text",
            "pwrx" => "deepest_cstate || ' ' || last_cstate || ' ' || wake_reason",
            _ => "cbr || ' ' || mhz || ' ' || percent",
        };
        let sql = format!("SELECT string_agg({cols}, ',' ORDER BY id) FROM {table} WHERE id <> 0");
        assert_eq!(pg(&sql), rows, "{table}");
    }
    for sql in [
        "SELECT count(*) FROM samples",
        "SELECT count(*) FROM samples WHERE call_path_id <> 0",
        "SELECT count(*) FROM call_paths",
        "SELECT count(*) FROM calls",
    ] {
        let n: i64 = pg(&format!("SELECT ({sql})::text")).parse().unwrap();
        assert_eq!(n, lite_count(sql), "{sql}");
    }
    assert!(lite_count("SELECT count(*) FROM samples WHERE call_path_id <> 0") > 0);
    let n: i64 = pg("SELECT count(*)::text FROM power_events_view")
        .parse()
        .unwrap();
    assert_eq!(n, 5, "power_events_view: cbr, mwait, pwre, exstop, pwrx");
}

/// By default the export holds the samples perf's export-to-sqlite.py gets when
/// run as its documentation shows (`perf script -s export-to-sqlite.py DB
/// branches calls`, no --itrace: perf script's default, the calls as branch
/// samples with PTWRITE and power events): the same tables row for row, so
/// the same row counts, as `perf script` prints lines.
#[test]
fn default_samples_are_those_of_perfs_documented_run() {
    let file = recording();
    let dir = scratch("export_default_vs_perf");
    compare_with_perf_as(file, &dir, &[], "", &["branches", "calls"]);
    let perf = pt_testkit::tool("perf", "linux-perf");
    let out = run(Command::new(perf)
        .args(["script", "-i"])
        .arg(file)
        .env("PERF_PAGER", "cat")
        .env("HOME", perf_support::tmp()));
    assert!(out.status.success(), "perf script: {}", stderr(&out));
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    let samples = rows(&dir.join("ours.db"), "samples", "id").len();
    // perf's zero row, then one per sample.
    assert_eq!(samples, lines + 1);
    assert!(lines < perf_branch_samples(file) as usize, "only the calls");
}

/// Exports `file` with perf's export-to-sqlite.py and with ours and compares
/// perf's tables and `extra` (table, columns) row for row, and the schemas.
fn compare_with_perf(file: &Path, name: &str, extra: &[(&str, &str)]) {
    compare_with_perf_as(file, &scratch(name), extra, "bpw", &["branches", "calls"]);
}

/// [`compare_with_perf`] in `dir`, both sides given `--itrace=ITRACE` (none
/// if empty: the defaults) and the script's arguments `words`.
fn compare_with_perf_as(
    file: &Path,
    dir: &Path,
    extra: &[(&str, &str)],
    itrace: &str,
    words: &[&str],
) {
    let script = Path::new("/usr/lib/perf-core/scripts/python/export-to-sqlite.py");
    assert!(
        script.exists(),
        "this test needs perf's scripts (Debian package linux-perf)"
    );
    let perf = pt_testkit::tool("perf", "linux-perf");
    let theirs = dir.join("perf.db");
    // perf looks for the vdso in the build-id cache beside the file, as we do.
    let mut cache = file.as_os_str().to_owned();
    cache.push(".debug");
    let itrace_arg: Vec<String> = if itrace.is_empty() {
        vec![]
    } else {
        vec![format!("--itrace={itrace}")]
    };
    let out = run(Command::new(perf)
        .arg("--buildid-dir")
        .arg(cache)
        .arg("script")
        .args(&itrace_arg)
        .arg("-i")
        .arg(file)
        .arg("-s")
        .arg(script)
        .arg(&theirs)
        .args(words)
        .env("PERF_PAGER", "cat")
        .env("HOME", perf_support::tmp()));
    assert!(
        out.status.success() && theirs.exists(),
        "perf's export-to-sqlite.py failed (it needs Debian's python3-pyside2.qtsql): {}",
        stderr(&out)
    );
    let ours = dir.join("ours.db");
    let out = run(ptperf()
        .args(["export", "sqlite"])
        .arg(&ours)
        .args(words)
        .args(&itrace_arg)
        .arg("-i")
        .arg(file));
    assert!(out.status.success(), "{}", stderr(&out));
    for (table, cols) in [
        ("selected_events", "*"),
        ("machines", "*"),
        ("threads", "*"),
        ("comms", "*"),
        ("comm_threads", "*"),
        ("dsos", "*"),
        ("symbols", "*"),
        ("branch_types", "*"),
        ("samples", "*"),
        ("call_paths", "*"),
        ("calls", "*"),
    ]
    .into_iter()
    .chain(
        // perf's script writes Python 3 quotients (1333.812) into these
        // integer columns; ours are their integer parts, as its PostgreSQL
        // script writes them.
        (itrace.is_empty() || itrace.contains('p')).then_some((
            "cbr",
            "id, cbr, CAST(mhz AS INTEGER), CAST(percent AS INTEGER)",
        )),
    )
    .filter(|(t, _)| *t != "calls" || words.contains(&"calls"))
    .filter(|(t, _)| *t != "call_paths" || words.iter().any(|w| w.starts_with("call")))
    .chain(extra.iter().copied())
    {
        let (a, b) = (rows(&theirs, table, cols), rows(&ours, table, cols));
        assert!(!a.is_empty(), "perf's {table} is empty");
        if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
            panic!(
                "{table} differs at row {i} ({} rows in perf's, {} in ours):\nperf: {:?}\nours: {:?}",
                a.len(),
                b.len(),
                a.get(i),
                b.get(i)
            );
        }
    }
    // The same tables and views, column for column.
    let schema = |db: &Path| -> Vec<String> {
        let conn = Connection::open(db).unwrap();
        let mut st = conn
            .prepare(
                "SELECT m.type, m.name, p.name, p.type FROM sqlite_master m \
                      JOIN pragma_table_info(m.name) p ORDER BY m.name, p.cid",
            )
            .unwrap();
        let r = st
            .query_map([], |r| {
                Ok(format!(
                    "{} {} {} {}",
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?
                ))
            })
            .unwrap();
        r.map(Result::unwrap).collect()
    };
    assert_eq!(schema(&ours), schema(&theirs));
}

/// One line on stderr, a failure exit status.
fn one_line_failure(out: &Output) -> String {
    assert!(!out.status.success(), "succeeded: {}", stderr(out));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    err
}

/// The files in `dir`.
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn sqlite_bad_targets() {
    let file = recording();
    let dir = scratch("export_sqlite_bad");
    let db = dir.join("pt.db");
    // A good database first.
    let out = run(ptperf()
        .args(["export", "sqlite"])
        .arg(&db)
        .args(["-q", "-i"])
        .arg(file));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "-q: {}", stderr(&out));
    let good = std::fs::read(&db).unwrap();

    // It exists: perf refuses, so do we, and leave it alone.
    let err = one_line_failure(&run(ptperf()
        .args(["export", "sqlite"])
        .arg(&db)
        .arg("-i")
        .arg(file)));
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&db).unwrap(), good);

    // The disk fills up half way (a file size limit; SIGXFSZ ignored, so writes
    // fail with EFBIG): the good database stays as it was, nothing is left beside it.
    let out = run(Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 64; exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_ptperf"))
        .args(["export", "sqlite", "-f"])
        .arg(&db)
        .args(["calls", "-i"])
        .arg(file));
    let err = one_line_failure(&out);
    assert!(err.contains("pt.db"), "{err}");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        good,
        "the good database was touched"
    );
    assert_eq!(files(&dir), ["pt.db"]);

    // A directory that does not exist.
    let err = one_line_failure(&run(ptperf()
        .args(["export", "sqlite"])
        .arg(dir.join("none/pt.db"))
        .arg("-i")
        .arg(file)));
    assert!(err.contains("none/pt.db"), "{err}");

    // Not a perf.data: said before any database is made.
    let junk = dir.join("junk.data");
    std::fs::write(&junk, b"not a perf.data").unwrap();
    let err = one_line_failure(&run(ptperf()
        .args(["export", "sqlite"])
        .arg(dir.join("junk.db"))
        .arg("-i")
        .arg(&junk)));
    assert!(err.contains("junk.data"), "{err}");
    assert_eq!(files(&dir), ["junk.data", "pt.db"]);
}

/// A directory the export may not write to (as root, that needs another user:
/// root writes anywhere).
#[test]
fn sqlite_read_only_directory() {
    use std::os::unix::fs::PermissionsExt;
    let file = recording();
    let dir = scratch("export_sqlite_ro");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let db = dir.join("pt.db");
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"])
            .arg(env!("CARGO_BIN_EXE_ptperf"));
        c
    } else {
        ptperf()
    };
    let out = run(cmd.args(["export", "sqlite"]).arg(&db).arg("-i").arg(file));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = one_line_failure(&out);
    assert!(err.contains("pt.db"), "{err}");
    assert!(files(&dir).is_empty(), "{:?}", files(&dir));
}

/// A TCP proxy to `port` that cuts each connection once the client has sent
/// more than `limit` bytes on it (a connection dropped in the middle of a load).
fn cutting_proxy(port: u16, limit: usize) -> u16 {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                return;
            };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(Shutdown::Both);
            });
            let (mut c, mut s) = (client, server);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut sent = 0;
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    sent += n;
                    if sent > limit {
                        break;
                    }
                }
                let _ = c.shutdown(Shutdown::Both);
                let _ = s.shutdown(Shutdown::Both);
            });
        }
    });
    proxy
}

#[test]
fn postgres_failures() {
    let file = recording();
    // No server there.
    let sock = scratch("export_pg_none");
    let err = one_line_failure(&run(ptperf()
        .args(["export", "postgres"])
        .arg(format!(
            "host={} port=1 user=postgres dbname=pt",
            sock.display()
        ))
        .arg("-i")
        .arg(file)));
    assert!(err.contains("connect"), "{err}");

    let server = PgServer::start();
    // The connection drops in the middle of the load (after 100 KB of COPY
    // data): one line, and the half-made database is dropped again.
    let proxy = cutting_proxy(server.port, 100_000);
    let out = run(ptperf()
        .args(["export", "postgres"])
        .arg(format!(
            "host=127.0.0.1 port={proxy} user=postgres dbname=pt_cut"
        ))
        .args(["calls", "-i"])
        .arg(file));
    let err = one_line_failure(&out);
    assert!(err.contains("PostgreSQL"), "{err}");
    let mut c = server.client("postgres");
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = 'pt_cut'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the half database is still there");

    // A user the server does not know: the server's reason, one line.
    let err = one_line_failure(&run(ptperf()
        .args(["export", "postgres"])
        .arg(
            server
                .conninfo("pt_user")
                .replace("user=postgres", "user=nosuchuser"),
        )
        .arg("-i")
        .arg(file)));
    assert!(err.contains("nosuchuser"), "{err}");
}
