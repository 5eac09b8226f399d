//! `ptperf timeline` on a recorded multi-threaded C program: its calls are
//! exactly `ptperf script --call-ret-trace`'s, nested as script nests them; the
//! Perfetto protobuf holds the same calls; the size budget; a range or thread
//! that matches nothing; and the timeline opened in speedscope in headless
//! Chromium shows each thread's functions.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// The program's own functions, by the thread that calls them.
const MAIN_FNS: &[&str] = &["green_main", "hot_big", "hot_small"];
const RED_FNS: &[&str] = &["red_worker", "red_outer", "red_inner"];
const BLUE_FNS: &[&str] = &["blue_worker", "blue_inner"];

/// The program recorded once (three threads).
fn recording() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let prog = build(
            "timeline",
            "tests/programs/timeline.c",
            &["-O1", "-pthread", "-static"],
        );
        let d = dir("timeline-rec");
        record(&d, "threads", &[], &[prog.as_os_str()])
    })
}

fn run_ok(args: &[&OsStr]) -> Vec<u8> {
    let o = ptperf().args(args).output().unwrap();
    assert!(o.status.success(), "ptperf {args:?}: {}", stderr(&o));
    o.stdout
}

/// `ptperf timeline -i DATA ARGS -o -` parsed.
fn timeline(data: &Path, args: &[&str]) -> Value {
    let mut a: Vec<&OsStr> = vec![
        OsStr::new("timeline"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("-"),
    ];
    a.extend(args.iter().map(OsStr::new));
    serde_json::from_slice(&run_ok(&a)).expect("our JSON parses")
}

/// One call as both sides give it: thread, name, call and return times (ns),
/// and its depth where it is certain (see [`our_calls`]).
type Call = (i64, String, u64, u64, Option<u32>);

fn ns(us: f64) -> u64 {
    (us * 1000.0).round() as u64
}

/// The complete events of a Chrome trace, in file order.
fn complete_events(tl: &Value) -> Vec<&Value> {
    tl["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect()
}

/// The calls of our JSON whose call and return were both seen. Their depth
/// is rebuilt from the file's order (each thread's calls as they began) and
/// the times: exactly for calls that take time; a call of no time at the time
/// another ends could be its child or its sibling, so its depth is not
/// compared. Checks on the way that every call lies within its caller.
fn our_calls(tl: &Value) -> Vec<Call> {
    let mut stacks: BTreeMap<i64, Vec<(u64, u64)>> = BTreeMap::new();
    let mut last_begin: BTreeMap<i64, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for e in complete_events(tl) {
        let tid = e["tid"].as_i64().unwrap();
        let begin = ns(e["ts"].as_f64().unwrap());
        let end = begin + ns(e["dur"].as_f64().unwrap());
        let lb = last_begin.entry(tid).or_insert(0);
        assert!(begin >= *lb, "thread {tid}: calls out of order at {e}");
        *lb = begin;
        let st = stacks.entry(tid).or_default();
        while st.last().is_some_and(|&(b, en)| !(b <= begin && end <= en)) {
            st.pop();
        }
        let depth = st.len() as u32;
        st.push((begin, end));
        let a = &e["args"];
        assert!(a["dso"].is_string(), "{e}");
        let name = e["name"].as_str().unwrap().to_string();
        if a["no_call"] == true || a["no_return"] == true || name == "[not traced]" {
            continue;
        }
        out.push((tid, name, begin, end, (end > begin).then_some(depth)));
    }
    out
}

/// The calls `ptperf script --call-ret-trace` shows returning: a call line and
/// the return line at its indentation (the call's depth) on its thread.
fn script_calls(text: &str) -> Vec<Call> {
    let mut stacks: BTreeMap<i64, Vec<(u32, String, u64)>> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((head, tail)) = line.split_once('\t') else {
            continue;
        };
        // "comm tid time: flags (dso)"
        let Some((left, rest)) = head.split_once(": ") else {
            continue;
        };
        let mut w = left.split_whitespace().rev();
        let (Some(time), Some(tid)) = (w.next(), w.next()) else {
            continue;
        };
        let (s, f) = time.split_once('.').expect("a time in seconds");
        let t = s.parse::<u64>().unwrap() * 1_000_000_000 + f.parse::<u64>().unwrap();
        let tid: i64 = tid.parse().unwrap();
        let flags = rest.split(" (").next().unwrap_or("").trim();
        let level = (tail.len() - tail.trim_start().len()) as u32 / 4;
        let name = tail.trim().to_string();
        let st = stacks.entry(tid).or_default();
        match flags {
            "call" => st.push((level, name, t)),
            "return" => {
                while st.last().is_some_and(|(l, _, _)| *l > level) {
                    st.pop();
                }
                if st.last().is_some_and(|(l, _, _)| *l == level) {
                    let (l, n, tc) = st.pop().unwrap();
                    out.push((tid, n, tc, t, (t > tc).then_some(l)));
                }
            }
            _ => {}
        }
    }
    out
}

fn counts(v: &[Call]) -> BTreeMap<&Call, usize> {
    let mut m = BTreeMap::new();
    for c in v {
        *m.entry(c).or_default() += 1;
    }
    m
}

/// Thread ids and the program functions each runs, from our JSON.
fn threads_and_functions(tl: &Value) -> BTreeMap<i64, BTreeSet<String>> {
    let mut m: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for e in complete_events(tl) {
        let name = e["name"].as_str().unwrap();
        let own = MAIN_FNS.iter().chain(RED_FNS).chain(BLUE_FNS);
        let set = m.entry(e["tid"].as_i64().unwrap()).or_default();
        if own.clone().any(|f| *f == name) {
            set.insert(name.to_string());
        }
    }
    m
}

#[test]
fn calls_nest_and_time_as_script_call_ret_trace() {
    let data = recording();
    let tl = timeline(data, &[]);
    let script = String::from_utf8(run_ok(&[
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--call-ret-trace"),
    ]))
    .unwrap();
    let ours = our_calls(&tl);
    let theirs = script_calls(&script);
    assert!(theirs.len() > 500, "script shows {} calls", theirs.len());
    let (o, t) = (counts(&ours), counts(&theirs));
    let only_ours: Vec<_> = o
        .iter()
        .filter(|(c, n)| t.get(*c) != Some(n))
        .take(5)
        .collect();
    let only_script: Vec<_> = t
        .iter()
        .filter(|(c, n)| o.get(*c) != Some(n))
        .take(5)
        .collect();
    assert!(
        only_ours.is_empty() && only_script.is_empty(),
        "ours but not script's: {only_ours:?}\nscript's but not ours: {only_script:?}"
    );
    // Calls that take time are compared with their depths too.
    assert!(ours.iter().filter(|c| c.4.is_some()).count() > 30);

    // Three threads, each with its own functions.
    let m = threads_and_functions(&tl);
    assert_eq!(m.len(), 3, "{m:?}");
    for fns in [MAIN_FNS, RED_FNS, BLUE_FNS] {
        assert!(
            m.values().any(|s| fns.iter().all(|f| s.contains(*f))),
            "no thread runs {fns:?}: {m:?}"
        );
    }
    // Trace begin/end and the CBR counter are there too; metadata names the threads.
    let evs = tl["traceEvents"].as_array().unwrap();
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "i" && e["name"] == "trace begin"));
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "C" && e["args"]["MHz"].as_u64().is_some()));
    let named: BTreeSet<i64> = evs
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["tid"].as_i64().unwrap())
        .collect();
    assert_eq!(named, m.keys().copied().collect());
}

#[test]
fn perfetto_trace_holds_the_same_calls() {
    use prost::Message;
    use ptperf::timeline::perfetto::Trace;
    let data = recording();
    let tl = timeline(data, &[]);
    let d = dir("timeline-perfetto");
    let out = d.join("t.pftrace");
    run_ok(&[
        OsStr::new("timeline"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("-o"),
        out.as_os_str(),
    ]);
    let bytes = std::fs::read(&out).unwrap();
    let trace = Trace::decode(bytes.as_slice()).expect("a Perfetto trace");
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let mut tids: BTreeMap<u64, i64> = BTreeMap::new();
    // Per track: open slices, last time, and the (name, begin, end) closed.
    let mut open: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    let mut got: Vec<(i64, String, u64, u64)> = Vec::new();
    for (i, p) in trace.packet.iter().enumerate() {
        assert_eq!(p.trusted_packet_sequence_id, Some(1));
        // The first clears the interned names; the begins refer to them.
        let begin = p.track_event.as_ref().is_some_and(|e| e.r#type == Some(1));
        let flags = match (i, begin) {
            (0, _) => Some(1),
            (_, true) => Some(2),
            _ => None,
        };
        assert_eq!(p.sequence_flags, flags, "packet {i}");
        if let Some(idata) = &p.interned_data {
            for n in &idata.event_names {
                names.insert(n.iid.unwrap(), n.name.clone().unwrap());
            }
        }
        if let Some(td) = &p.track_descriptor {
            if let Some(t) = &td.thread {
                tids.insert(td.uuid.unwrap(), i64::from(t.tid.unwrap()));
            }
        }
        let Some(ev) = &p.track_event else { continue };
        let track = ev.track_uuid.unwrap();
        let ts = p.timestamp.unwrap();
        match ev.r#type {
            Some(1) => {
                assert!(
                    ts >= *last.get(&track).unwrap_or(&0),
                    "packet {i} goes back"
                );
                last.insert(track, ts);
                let name = names[&ev.name_iid.unwrap()].clone();
                open.entry(track).or_default().push((name, ts));
            }
            Some(2) => {
                assert!(
                    ts >= *last.get(&track).unwrap_or(&0),
                    "packet {i} goes back"
                );
                last.insert(track, ts);
                let (name, b) = open
                    .get_mut(&track)
                    .and_then(Vec::pop)
                    .expect("an open slice");
                got.push((tids[&track], name, b, ts));
            }
            _ => {}
        }
    }
    assert!(open.values().all(Vec::is_empty), "slices left open");
    let mut want: Vec<(i64, String, u64, u64)> = complete_events(&tl)
        .iter()
        .map(|e| {
            let b = ns(e["ts"].as_f64().unwrap());
            (
                e["tid"].as_i64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
                b,
                b + ns(e["dur"].as_f64().unwrap()),
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the Perfetto trace's calls differ from the JSON's"
    );
    // Compact: less than half the JSON's size.
    let json_len = serde_json::to_vec(&tl).unwrap().len();
    assert!(bytes.len() * 2 < json_len, "{} vs {json_len}", bytes.len());
}

#[test]
fn max_events_picks_a_threshold_and_counts_what_it_drops() {
    let data = recording();
    let all = complete_events(&timeline(data, &[])).len();
    let o = ptperf()
        .arg("timeline")
        .arg("-i")
        .arg(data)
        .args(["--max-events", "120", "-o", "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--max-events 120: keeping the calls of "),
        "{err}"
    );
    let tl: Value = serde_json::from_slice(&o.stdout).unwrap();
    let evs = tl["traceEvents"].as_array().unwrap();
    let n = evs.iter().filter(|e| e["ph"] != "M").count();
    assert!(n <= 120 && n > 30, "{n} events");
    let min = tl["otherData"]["min_duration_ns"].as_u64().unwrap();
    assert!(min > 0);
    assert!(
        err.contains(&ptperf::timeline::budget::show_duration(min)),
        "{err}"
    );
    let kept = complete_events(&tl);
    assert!(kept.iter().all(|e| ns(e["dur"].as_f64().unwrap()) >= min));
    let dropped = tl["otherData"]["dropped_calls"].as_u64().unwrap() as usize;
    assert_eq!(kept.len() + dropped, all);
    let counted: u64 = kept
        .iter()
        .map(|e| e["args"]["dropped_calls"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        counted > 0 && counted as usize <= dropped,
        "{counted} of {dropped}"
    );

    // --min-duration keeps exactly the calls that long.
    let tl = timeline(data, &["--min-duration", &format!("{min}ns")]);
    assert_eq!(complete_events(&tl).len(), kept.len());
}

#[test]
fn a_thread_or_time_range_that_matches_nothing_says_so() {
    let data = recording();
    for (args, says) in [
        (&["--tid", "999999"][..], "no thread 999999"),
        (
            &["--time", "0.000001,0.000002"][..],
            "no calls in the time range",
        ),
    ] {
        let d = dir("timeline-nothing");
        let out = d.join("t.json");
        let o = ptperf()
            .arg("timeline")
            .arg("-i")
            .arg(data)
            .args(args)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.contains(says) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
        assert!(!out.exists(), "{args:?}: wrote a file anyway");
    }
    // One thread alone: only its calls.
    let all = timeline(data, &[]);
    let m = threads_and_functions(&all);
    let (&tid, fns) = m.iter().find(|(_, s)| s.contains("red_inner")).unwrap();
    let one = timeline(data, &["--tid", &tid.to_string()]);
    let m1 = threads_and_functions(&one);
    assert_eq!(m1.keys().copied().collect::<Vec<_>>(), [tid]);
    assert_eq!(&m1[&tid], fns);
}

#[test]
fn stdout_is_a_good_pipe_citizen() {
    let data = recording().clone();
    pt_testkit::assert_stdout_errors(|| {
        let mut c = ptperf();
        c.arg("timeline").arg("-i").arg(&data).args(["-o", "-"]);
        c
    });
}

#[test]
fn speedscope_shows_each_threads_functions() {
    let (chromium, app) = (pt_testkit::chromium(), pt_testkit::speedscope());
    let data = recording();
    let d = dir("timeline-speedscope");
    let all = timeline(data, &[]);
    let threads = threads_and_functions(&all);
    assert_eq!(threads.len(), 3);
    for tid in threads.keys() {
        let f = d.join(format!("t{tid}.json"));
        run_ok(&[
            OsStr::new("timeline"),
            OsStr::new("-i"),
            data.as_os_str(),
            OsStr::new("--tid"),
            OsStr::new(&tid.to_string()),
            OsStr::new("-o"),
            f.as_os_str(),
        ]);
    }
    let server = pt_testkit::serve::Server::start(
        vec![("/".into(), app), ("/data".into(), d.clone())],
        std::time::Duration::from_secs(300),
    )
    .unwrap();
    let own: BTreeSet<&str> = MAIN_FNS
        .iter()
        .chain(RED_FNS)
        .chain(BLUE_FNS)
        .copied()
        .collect();
    for (tid, fns) in &threads {
        assert!(
            !fns.is_empty(),
            "thread {tid} runs none of the program's functions"
        );
        let profile = server.url(&format!("/data/t{tid}.json"));
        // The sandwich view lists every function of the profile as a table.
        let url = server.url(&format!(
            "/index.html#profileURL={}&view=sandwich",
            profile.replace(':', "%3A").replace('/', "%2F")
        ));
        let o = pt_testkit::headless(
            &chromium,
            &["--window-size=1600,2400", "--dump-dom"],
            &url,
            15_000,
        );
        let dom = String::from_utf8_lossy(&o.stdout);
        assert!(
            dom.contains(&format!("tid {tid})")),
            "thread {tid}: speedscope did not open its timeline: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for f in fns {
            assert!(
                dom.contains(&format!(">{f} {{")),
                "thread {tid}: no {f} on the page"
            );
        }
        // Other threads' functions are not on this thread's page.
        for f in own.iter().filter(|f| !fns.contains(**f)) {
            assert!(
                !dom.contains(&format!(">{f} {{")),
                "thread {tid}: {f} on its page"
            );
        }
    }
}
