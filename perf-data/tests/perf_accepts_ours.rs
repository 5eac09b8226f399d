//! perf 6.1 reads the intel_pt perf.data files our writer makes: it decodes the trace to
//! exactly the instructions of the traced path, its tools accept the file without a
//! warning, and `perf inject` of our file reads back through our reader unchanged in
//! meaning. Also what perf does with an interrupted file, and how our writer avoids it.
mod common;
use common::*;
use pt_perf_data::*;
use std::path::Path;

/// Our intel_pt file of one run of `work`, in a fresh scratch dir.
fn ours(name: &str) -> (Traced, std::path::PathBuf) {
    let dir = scratch(name);
    let t = compile(&dir);
    let data = dir.join("perf.data");
    write_intel_pt(&data, &t, &pt_trace(&t));
    (t, data)
}

/// perf's lines `ip sym` → (ip, sym).
fn ips_and_syms(out: &str) -> Vec<(u64, String)> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split_whitespace();
            let ip = u64::from_str_radix(it.next().unwrap(), 16).unwrap();
            (ip, it.next().unwrap_or("").to_string())
        })
        .collect()
}

fn assert_quiet(what: &str, stderr: &str) {
    for bad in ["arning", "rror", "unknown", "nknown"] {
        assert!(!stderr.contains(bad), "{what} complained:\n{stderr}");
    }
}

#[test]
fn perf_script_decodes_our_intel_pt_file_to_the_traced_path() {
    let (t, data) = ours("accepts_script");
    let (out, err) = perf(&[
        "script",
        "-i",
        data.to_str().unwrap(),
        "--itrace=i1i",
        "-F",
        "ip,sym",
    ]);
    assert_quiet("perf script", &err);
    let got = ips_and_syms(&out);
    let want: Vec<(u64, String)> = t.path.iter().map(|&ip| (ip, "work".to_string())).collect();
    assert_eq!(got, want, "perf script output:\n{out}");
}

#[test]
fn perf_script_times_our_timestamped_intel_pt_file() {
    // tsc in the config, TIME in the sample types, a TSC packet in the trace: perf
    // orders the side-band and the trace by time and stamps the instructions. The
    // AUXTRACE record's reference (the TSC when the data was copied out) is what perf
    // completes the trace's TSC packets with: without it perf 6.1 never finds a
    // timestamp and crashes.
    let dir = scratch("accepts_tsc");
    let t = compile(&dir);
    let data = dir.join("perf.data");
    let tsc = 100_000;
    write_intel_pt_timed(
        &data,
        &t,
        &pt_trace_at(&t, Some(tsc)),
        Some([10_000, 20_000, 30_000, 200_000]),
    );
    let d = data.to_str().unwrap();
    let (out, err) = perf(&[
        "script",
        "-i",
        d,
        "--itrace=i1i",
        "-F",
        "time,ip,sym",
        "--ns",
    ]);
    assert_quiet("perf script", &err);
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), t.path.len(), "{out}");
    for (l, ip) in lines.iter().zip(&t.path) {
        let mut it = l.split_whitespace();
        let time = it.next().unwrap().trim_end_matches(':');
        assert_eq!(time, "0.000100000", "{l}");
        assert_eq!(
            u64::from_str_radix(it.next().unwrap(), 16).unwrap(),
            *ip,
            "{l}"
        );
    }
    let (_, err) = perf(&["report", "--stdio", "-i", d]);
    assert_quiet("perf report", &err);
}

#[test]
fn perf_tools_accept_our_file_without_a_warning() {
    let (_, data) = ours("accepts_tools");
    let d = data.to_str().unwrap();
    let (_, err) = perf(&["report", "--stdio", "-i", d]);
    assert_quiet("perf report", &err);

    let (out, err) = perf(&["evlist", "-v", "-i", d]);
    assert_quiet("perf evlist", &err);
    assert!(
        out.contains(&format!("intel_pt//u: type: {PT_PMU}")),
        "{out}"
    );
    assert!(out.contains("dummy:u: type: 1"), "{out}");

    let (out, err) = perf(&["report", "--header-only", "-i", d]);
    assert_quiet("perf report --header-only", &err);
    assert!(out.contains(&format!("intel_pt = {PT_PMU}")), "{out}");
    assert!(out.contains("contains AUX area data"), "{out}");
    assert!(out.contains("name = intel_pt//u"), "{out}");

    // perf's dump lists our records at our offsets with our sizes.
    let (out, err) = perf(&["script", "-D", "-i", d]);
    assert_quiet("perf script -D", &err);
    let file = MappedFile::open(&data).unwrap();
    let perf_file = file.parse().unwrap();
    let ours: Vec<(u64, &str)> = perf_file
        .records()
        .map(|r| {
            let (at, r) = r.unwrap();
            (at, r.name())
        })
        .collect();
    let theirs: Vec<(u64, String)> = out
        .lines()
        .filter_map(|l| {
            let (at, rest) = l.split_once(" [0x")?;
            let at = u64::from_str_radix(at.strip_prefix("0x")?, 16).ok()?;
            let name = rest.split_once("]: PERF_RECORD_")?.1;
            Some((at, name.split([' ', '(']).next()?.to_string()))
        })
        .collect();
    let ours: Vec<(u64, String)> = ours.into_iter().map(|(a, n)| (a, n.to_string())).collect();
    assert_eq!(ours, theirs);
    assert!(
        out.contains("PERF_RECORD_COMM exec: work:4242/4242"),
        "{out}"
    );
    assert!(out.contains("tid: 4242  cpu: -1"), "{out}");
}

/// Records without their offsets, for comparing files in meaning.
fn meaning(path: &Path) -> (Vec<String>, Vec<(EventAttr, Vec<u64>)>) {
    let file = MappedFile::open(path).unwrap();
    let f = file.parse().unwrap();
    let recs = f
        .records()
        .map(|r| r.unwrap().1)
        .filter(|r| !matches!(r, Record::HeaderAttr { .. } | Record::HeaderFeature { .. }))
        .map(|r| format!("{r:?}"))
        .collect();
    let events = f.events().iter().map(|e| (e.attr, e.ids.clone())).collect();
    (recs, events)
}

#[test]
fn perf_inject_of_our_file_reads_back_the_same() {
    let (_, data) = ours("accepts_inject");
    let d = data.to_str().unwrap();
    let theirs = data.with_file_name("theirs.data");
    perf(&["inject", "-i", d, "-o", theirs.to_str().unwrap()]);
    assert_eq!(meaning(&data), meaning(&theirs));

    // Pipe mode: perf inject -o - (events come as HEADER_ATTR records).
    let (pipe_out, _) = {
        let perf = pt_testkit::tool("perf", "linux-perf");
        let out = std::process::Command::new(perf)
            .args(["inject", "-i", d, "-o", "-"])
            .output()
            .unwrap();
        assert!(out.status.success());
        (out.stdout, ())
    };
    let pipe = data.with_file_name("theirs-pipe.data");
    std::fs::write(&pipe, &pipe_out).unwrap();
    assert_eq!(meaning(&data), meaning(&pipe));
    // The streaming reader sees the same records as the mapped one.
    let mut r = PipeReader::new(&pipe_out[..]).unwrap();
    let mut streamed = Vec::new();
    while let Some((_, rec)) = r.next_record().unwrap() {
        if !matches!(
            rec,
            Record::HeaderAttr { .. } | Record::HeaderFeature { .. }
        ) {
            streamed.push(format!("{rec:?}"));
        }
    }
    assert_eq!(streamed, meaning(&data).0);
    assert_eq!(r.events()[0].name.as_deref(), Some("intel_pt//u"));
}

#[test]
fn perf_inject_itrace_samples_read_back_as_the_traced_path() {
    // perf decodes our trace and writes instruction SAMPLE records: our reader sees
    // exactly the path's IPs, attributed to perf's synthesized instructions event.
    let (t, data) = ours("accepts_inject_itrace");
    let synth = data.with_file_name("synth.data");
    perf(&[
        "inject",
        "--itrace=i1i",
        "-i",
        data.to_str().unwrap(),
        "-o",
        synth.to_str().unwrap(),
    ]);
    let file = MappedFile::open(&synth).unwrap();
    let f = file.parse().unwrap();
    let insn = f
        .events()
        .iter()
        .position(|e| {
            e.name
                .as_deref()
                .is_some_and(|n| n.starts_with("instructions"))
        })
        .expect("an instructions event");
    let mut ips = Vec::new();
    for r in f.records() {
        if let (_, Record::Sample(s)) = r.unwrap() {
            let ev = f.event_table().index_of_id(s.id.unwrap()).unwrap();
            assert_eq!(ev, insn);
            assert_eq!((s.pid, s.tid, s.period), (Some(PID), Some(PID), Some(1)));
            ips.push(s.ip.unwrap());
        }
    }
    assert_eq!(ips, t.path);
}

/// Rewrites the header's data size.
fn set_data_size(path: &Path, size: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[48..56].copy_from_slice(&size.to_le_bytes());
    std::fs::write(path, b).unwrap();
}

#[test]
fn perf_reads_nothing_of_a_file_whose_data_size_is_zero_and_we_read_it_all() {
    // What `perf record` leaves when it is killed before it writes the header at exit.
    let (_, data) = ours("accepts_size_zero");
    let all: Vec<_> = {
        let file = MappedFile::open(&data).unwrap();
        let f = file.parse().unwrap();
        f.records().map(|r| r.unwrap().1.name()).collect()
    };
    set_data_size(&data, 0);
    let perf_bin = pt_testkit::tool("perf", "linux-perf");
    let out = std::process::Command::new(perf_bin)
        .args([
            "script",
            "-i",
            data.to_str().unwrap(),
            "--itrace=i1i",
            "-F",
            "ip",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data size field is 0"), "{err}");
    assert!(out.stdout.is_empty(), "perf decoded something");

    let file = MappedFile::open(&data).unwrap();
    let f = file.parse().unwrap();
    assert!(matches!(f.warnings(), [Warning::DataSizeZero { .. }]));
    // Without the data size the feature table cannot be found: records only.
    let got: Vec<_> = f
        .records()
        .take_while(|r| r.is_ok())
        .map(|r| r.unwrap().1.name())
        .collect();
    assert!(got.len() >= all.len(), "{got:?} vs {all:?}");
    assert_eq!(&got[..all.len()], &all[..]);
}

#[test]
fn an_interrupted_writer_leaves_a_file_perf_decodes_up_to_the_last_checkpoint() {
    let dir = scratch("accepts_interrupted");
    let t = compile(&dir);
    let data = dir.join("perf.data");
    write_intel_pt(&data, &t, &pt_trace(&t));
    // Reopen the finished file as a recorder would have it at a checkpoint, then "kill"
    // it while it writes more: a header still describing the checkpoint, a half-written
    // record after the data.
    let size = std::fs::metadata(&data).unwrap().len();
    let file_data_end = {
        let file = MappedFile::open(&data).unwrap();
        file.parse().unwrap().data_range().end
    };
    let mut bytes = std::fs::read(&data).unwrap();
    assert!(size > file_data_end);
    // Features are still there (the checkpoint wrote them); garbage past the end.
    bytes.extend_from_slice(&[0x47; 100]);
    std::fs::write(&data, &bytes).unwrap();
    let (out, err) = perf(&[
        "script",
        "-i",
        data.to_str().unwrap(),
        "--itrace=i1i",
        "-F",
        "ip,sym",
    ]);
    assert_quiet("perf script", &err);
    assert_eq!(ips_and_syms(&out).len(), t.path.len());

    // The same through the writer: records after a checkpoint, then the process dies
    // (the writer is leaked, nothing more reaches the file).
    let data2 = dir.join("killed.data");
    {
        let f = std::fs::File::create(&data2).unwrap();
        let events = vec![EventDesc {
            attr: tracking_attr(true, false, false, false),
            ids: vec![TRACK_ID],
            name: Some("dummy:u".into()),
        }];
        let mut w = PerfFileWriter::new(f, events).unwrap();
        let comm = |name: &'static str| {
            Record::Comm(Comm {
                misc: 0,
                pid: PID,
                tid: PID,
                comm: name.into(),
                sample_id: SampleId {
                    pid: Some(PID),
                    tid: Some(PID),
                    id: Some(TRACK_ID),
                    ..Default::default()
                },
            })
        };
        w.write(&comm("first")).unwrap();
        w.checkpoint().unwrap();
        w.write(&comm("second")).unwrap();
        w.checkpoint().unwrap();
        // More than the writer buffers: these reach the file (over the features of the
        // last checkpoint, which the header then no longer names) but not its header.
        for _ in 0..30_000 {
            w.write(&comm("lost")).unwrap();
        }
        std::mem::forget(w);
    }
    let (out, err) = perf(&["script", "-D", "-i", data2.to_str().unwrap()]);
    assert_quiet("perf script -D", &err);
    assert!(out.contains("PERF_RECORD_COMM: first:4242/4242"), "{out}");
    assert!(out.contains("PERF_RECORD_COMM: second:4242/4242"), "{out}");
    // The writer checkpointed when its buffer filled: perf sees the records up to there,
    // as our reader does.
    let lost = out.matches("PERF_RECORD_COMM: lost:").count();
    assert!(lost > 0 && lost < 30_000, "{lost}");
    let file = MappedFile::open(&data2).unwrap();
    let ours = file.parse().unwrap().records().count();
    assert_eq!(ours, 2 + lost);
    let (out, err) = perf(&["report", "--header-only", "-i", data2.to_str().unwrap()]);
    assert_quiet("perf report --header-only", &err);
    assert!(out.contains("name = dummy:u"), "{out}");
}
