//! Decoding a perf.data (ptxed `--perf FILE --quiet`): the session's queue decoder on a
//! recording of a real program, beside the plain flow decoder on the same trace bytes
//! (a raw trace and its images), so that the cost of reading perf.data shows.
//!
//! The program (CPython serializing a list to JSON, about 60M instructions) runs on the
//! simulated PT CPU (valgrind execution source) with TSC, MTC and cycle-accurate
//! timing and a PSB every 4 KiB. The raw trace and its side-band are kept in
//! `target/perf-recorded/` with a perf.data written from them the way a per-thread
//! `perf record -e intel_pt//u` lays it out (COMM, an MMAP2 per mapped file, the
//! trace in 64 KiB AUXTRACE pieces); delete the directory to record anew.
//!
//! Where valgrind or the program is missing, the benchmark says so and skips it. To
//! time the tools on the same input: `ptxed --perf target/perf-recorded/NAME.data
//! --quiet`, and libipt's `ptxed --block-decoder --quiet $(ptrec --ptxed-args
//! target/perf-recorded/NAME.pt)`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_benches::flow::quiet_blocks;
use pt_decoder::config::Config;
use pt_decoder::image::Image;
use pt_decoder::perf::{PerfItem, Session, SessionOptions};
use pt_decoder::sideband::{Explicit, Sideband};
use pt_decoder::{Granularity, Item};
use pt_hal::config::TraceConfig;
use pt_perf_data::intel_pt::config as ptc;
use pt_perf_data::*;
use pt_sim::backend::SimOutput;
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::pt::SimParams;
use pt_sim::record::{record_sim, sideband_path, SimRecording};

const PMU: u32 = 9;
const PT_ID: u64 = 1;
const TRACK_ID: u64 = 2;
const PID: u32 = 1000;
/// AUXTRACE pieces of this size, as perf copies an AUX area of 64 KiB out.
const PIECE: usize = 64 << 10;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/perf-recorded")
}

fn trace_config() -> TraceConfig {
    TraceConfig {
        tsc: true,
        mtc: Some(3),
        cyc: Some(0),
        // 2^(1+11) bytes: a PSB every 4 KiB.
        psb_freq: 1,
        ..TraceConfig::perf_default()
    }
}

/// The intel_pt PMU config of `c`.
fn pt_config(c: &TraceConfig) -> u64 {
    let mut v = ptc::PT | ptc::psb_period(c.psb_freq as u64);
    if c.branch {
        v |= ptc::BRANCH;
    }
    if c.tsc {
        v |= ptc::TSC;
    }
    if c.dis_retc {
        v |= ptc::NORETCOMP;
    }
    if let Some(m) = c.mtc {
        v |= ptc::MTC | ptc::mtc_period(m as u64);
    }
    if let Some(t) = c.cyc {
        v |= ptc::CYC | ptc::cyc_thresh(t as u64);
    }
    v
}

/// Records `cmd` into `NAME.pt` (unless it is there) and writes `NAME.data`.
fn record(name: &str, cmd: &[String]) -> Result<(PathBuf, PathBuf), String> {
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let trace = dir.join(format!("{name}.pt"));
    let data = dir.join(format!("{name}.data"));
    if sideband_path(&trace).exists() && data.exists() {
        return Ok((trace, data));
    }
    let have_valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_valgrind {
        return Err("valgrind is not installed".into());
    }
    let mut source = ValgrindSource::record(&cmd[0], &cmd[1..], ValgrindOptions::default())
        .map_err(|e| e.to_string())?;
    let rec = SimRecording {
        config: trace_config(),
        filters: Vec::new(),
        params: SimParams::default(),
        output: SimOutput::default(),
        trace: trace.clone(),
        log: None,
    };
    eprintln!("recording {name} on the simulator: {}", cmd.join(" "));
    let summary = record_sim(&mut source, &rec, |_| {})?;
    eprintln!(
        "recorded {name}: {} instructions, {} trace bytes",
        summary.instructions, summary.trace_bytes
    );
    write_perf_data(&trace, &data, &cmd[0])?;
    Ok((trace, data))
}

/// The TSC of the first TSC packet in `bytes` (0 if none).
fn first_tsc(bytes: &[u8]) -> u64 {
    let mut dec = pt_decoder::PacketDecoder::new(bytes, &Config::default());
    if dec.sync_forward().is_err() {
        return 0;
    }
    for p in dec {
        match p {
            Ok((_, pt_decoder::Packet::Tsc { tsc })) => return tsc,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    0
}

/// Writes the raw recording `trace` (one thread, its side-band naming the mapped
/// files) as a per-thread intel_pt perf.data.
fn write_perf_data(trace: &Path, out: &Path, comm: &str) -> Result<(), String> {
    let sb = Sideband::read(&sideband_path(trace)).map_err(|e| e.to_string())?;
    let bytes = std::fs::read(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let c = trace_config();
    let events = vec![
        EventDesc {
            attr: intel_pt_attr(PMU, pt_config(&c), true, false),
            ids: vec![PT_ID],
            name: Some("intel_pt//u".into()),
        },
        EventDesc {
            attr: tracking_attr(true, false, false, true),
            ids: vec![TRACK_ID],
            name: Some("dummy:u".into()),
        },
    ];
    let f = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut w =
        PerfFileWriter::new(std::io::BufWriter::new(f), events).map_err(|e| e.to_string())?;
    w.set_feature(pmu_mappings(PMU));
    // A Skylake, as the simulator's default CPU.
    w.set_feature(Feature::CpuId("GenuineIntel,6,94,3".into()));
    let mut info = IntelPtInfo::new(PMU);
    info.cap_user_time_zero = 1;
    info.time_mult = 1;
    let clock = SimParams::default().clock;
    if let Some(m) = &mut info.mtc {
        m.tsc_ctc_ratio_n = clock.cpuid_15_ebx as u64;
        m.tsc_ctc_ratio_d = clock.cpuid_15_eax as u64;
    }
    info.max_non_turbo_ratio = Some(clock.nom_freq as u64);
    let sid = |id: u64, time: u64| SampleId {
        pid: Some(PID),
        tid: Some(PID),
        id: Some(id),
        time: Some(time),
        ..Default::default()
    };
    let start = first_tsc(&bytes).saturating_sub(1);
    let comm = Path::new(comm)
        .file_name()
        .map_or(comm.to_string(), |n| n.to_string_lossy().into_owned());
    let maps = sb.merged_maps();
    let paths: Vec<String> = maps
        .iter()
        .map(|m| sb.resolve(&m.path).to_string_lossy().into_owned())
        .collect();
    let mut records = vec![
        Record::AuxtraceInfo(AuxtraceInfo {
            kind: auxtrace_type::INTEL_PT,
            private: AuxtracePrivate::IntelPt(info),
        }),
        Record::Comm(Comm {
            misc: misc::COMM_EXEC,
            pid: PID,
            tid: PID,
            comm: comm.as_str().into(),
            sample_id: sid(TRACK_ID, start),
        }),
    ];
    for (m, path) in maps.iter().zip(&paths) {
        let mut prot = 0;
        for (ch, bit) in [('r', 1), ('w', 2), ('x', 4)] {
            if m.perms.contains(ch) {
                prot |= bit;
            }
        }
        records.push(Record::Mmap2(Mmap2 {
            misc: misc::USER,
            pid: PID,
            tid: PID,
            start: m.start,
            len: m.end - m.start,
            pgoff: m.file_offset,
            file: Mmap2File::Inode {
                maj: 0,
                min: 0,
                ino: 0,
                ino_generation: 0,
            },
            prot,
            flags: 2,
            filename: path.as_str().into(),
            sample_id: sid(TRACK_ID, start),
        }));
    }
    records.push(Record::ItraceStart(ItraceStart {
        misc: 0,
        pid: PID,
        tid: PID,
        sample_id: sid(PT_ID, start),
    }));
    for r in &records {
        w.write(r).map_err(|e| e.to_string())?;
    }
    let end = bytes.len() as u64;
    for (i, piece) in bytes.chunks(PIECE).enumerate() {
        w.write_auxtrace(
            &Auxtrace {
                offset: (i * PIECE) as u64,
                reference: end,
                idx: 0,
                tid: PID,
                cpu: u32::MAX,
                data: &[],
            },
            &[piece],
        )
        .map_err(|e| e.to_string())?;
    }
    w.write(&Record::FinishedRound).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    Ok(())
}

/// ptxed `--perf --quiet`: every queue's blocks, counted only (the decoder's fast
/// path); the instructions decoded.
fn session_quiet(session: &Session<'_>) -> u64 {
    let mut n = 0;
    for q in 0..session.queues().len() {
        let mut dec = session
            .decoder(q)
            .configure(|b| b.granularity(Granularity::Blocks).count_only(true));
        while dec.next().is_some() {}
        n += dec.counts().insns;
    }
    n
}

/// ptxed `--perf` with its listing's input: every block as an item, with the
/// session's context and time kept; the instructions decoded.
fn session_blocks(session: &Session<'_>) -> u64 {
    let mut n = 0;
    for q in 0..session.queues().len() {
        let mut dec = session
            .decoder(q)
            .configure(|b| b.granularity(Granularity::Blocks));
        while let Some(item) = dec.next() {
            if let PerfItem::Decoded(Item::Block(b)) = item {
                n += b.block.ninsn as u64;
            }
        }
    }
    n
}

/// The raw trace's blocks as items (what `session_blocks` adds to).
fn raw_blocks(trace: &[u8], image: &Image, config: &Config) -> u64 {
    let mut dec = pt_decoder::Decoder::builder(trace, image)
        .config(config)
        .granularity(Granularity::Blocks)
        .build();
    let mut n = 0;
    while let Some(item) = dec.next() {
        if let Item::Block(b) = item {
            n += b.block.ninsn as u64;
        }
    }
    n
}

fn perf_session(c: &mut Criterion) {
    let cmd: Vec<String> = vec![
        "/usr/bin/python3".into(),
        "-S".into(),
        "-c".into(),
        "import json; json.dumps([{'a': i, 'b': str(i)} for i in range(12000)])".into(),
    ];
    let name = "python_json";
    let (trace, data) = match record(name, &cmd) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("perf_session: {name} skipped: {e}");
            return;
        }
    };
    // The raw side: the trace and the image its side-band names.
    let sb = Sideband::read(&sideband_path(&trace)).expect("side-band");
    let mut image = Image::new();
    sb.load(&mut image).expect("image");
    let mut config = Config::default();
    let _ = sb.configure(&mut config, Explicit::default());
    let raw = std::fs::read(&trace).expect("trace");

    let file = MappedFile::open(&data).expect("perf.data");
    let perf = file.parse().expect("parse");
    let len = std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0);

    let mut g = c.benchmark_group("perf_session");
    g.sample_size(10);
    let session = Session::new(&perf, SessionOptions::for_file(&data)).expect("session");
    let n = session_quiet(&session);
    // Both paths must see the same flow, or the figure means nothing.
    assert_eq!(
        quiet_blocks(&raw, &image, &config),
        n,
        "{name}: flows differ"
    );
    eprintln!(
        "{name}: {n} instructions, {} trace bytes, perf.data {len} bytes",
        raw.len()
    );
    g.throughput(Throughput::Elements(n));
    g.bench_function(format!("{name}/raw_quiet"), |b| {
        b.iter(|| quiet_blocks(black_box(&raw), &image, &config))
    });
    g.bench_function(format!("{name}/session_quiet"), |b| {
        b.iter(|| session_quiet(black_box(&session)))
    });
    assert_eq!(session_blocks(&session), n, "{name}: block items differ");
    g.bench_function(format!("{name}/raw_blocks"), |b| {
        b.iter(|| raw_blocks(black_box(&raw), &image, &config))
    });
    g.bench_function(format!("{name}/session_blocks"), |b| {
        b.iter(|| session_blocks(black_box(&session)))
    });
    // Opening the session too: parsing the file, loading the images, joining pieces.
    g.bench_function(format!("{name}/open_and_quiet"), |b| {
        b.iter(|| {
            let perf = file.parse().expect("parse");
            let s = Session::new(&perf, SessionOptions::for_file(&data)).expect("session");
            session_quiet(&s)
        })
    });
    g.finish();
}

criterion_group!(benches, perf_session);
criterion_main!(benches);
