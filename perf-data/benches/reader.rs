//! Reading a large AUXTRACE-heavy perf.data (64 MiB of AUX data in 64 KiB pieces among
//! side-band records, as a per-cpu intel_pt recording looks): walking the records, and
//! walking them while reading every AUX byte (the data is a slice of the mapped file,
//! so this runs at memory speed). linux-perf-data's reader on the same file for scale.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pt_perf_data::*;
use std::path::PathBuf;

const CHUNK: usize = 64 << 10;
const CHUNKS: usize = 1024;

fn make_file() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-auxtrace.data");
    if path.exists() {
        return path;
    }
    let events = vec![
        EventDesc {
            attr: intel_pt_attr(8, intel_pt::config::DEFAULT, true, true),
            ids: vec![1, 2],
            name: Some("intel_pt//u".into()),
        },
        EventDesc {
            attr: tracking_attr(true, true, true, true),
            ids: vec![3, 4],
            name: Some("dummy:u".into()),
        },
    ];
    let f = std::fs::File::create(&path).unwrap();
    let mut w = PerfFileWriter::new(std::io::BufWriter::new(f), events).unwrap();
    let data: Vec<u8> = (0..CHUNK).map(|i| (i * 7) as u8).collect();
    for i in 0..CHUNKS {
        let sid = SampleId {
            pid: Some(10),
            tid: Some(10),
            time: Some(i as u64 * 1000),
            id: Some(3 + (i as u64 & 1)),
            cpu: Some(i as u32 & 1),
            ..Default::default()
        };
        w.write(&Record::SwitchCpuWide(SwitchCpuWide {
            misc: 0,
            next_prev_pid: 10,
            next_prev_tid: 10,
            sample_id: sid,
        }))
        .unwrap();
        w.write(&Record::Aux(Aux {
            aux_offset: (i * CHUNK) as u64,
            aux_size: CHUNK as u64,
            sample_id: SampleId {
                id: Some(1 + (i as u64 & 1)),
                ..sid
            },
            ..Default::default()
        }))
        .unwrap();
        w.write(&Record::Auxtrace(Auxtrace {
            offset: (i * CHUNK) as u64,
            idx: i as u32 & 1,
            tid: u32::MAX,
            cpu: i as u32 & 1,
            data: &data,
            ..Default::default()
        }))
        .unwrap();
        if i % 16 == 15 {
            w.write(&Record::FinishedRound).unwrap();
        }
    }
    w.finish().unwrap();
    path
}

fn bench(c: &mut Criterion) {
    let path = make_file();
    let file = MappedFile::open(&path).unwrap();
    let bytes = file.bytes().len() as u64;
    let mut g = c.benchmark_group("perf_data_read");
    g.throughput(Throughput::Bytes(bytes));
    g.sample_size(20);
    g.bench_function("records", |b| {
        b.iter(|| {
            let f = file.parse().unwrap();
            let mut n = 0u64;
            for r in f.records() {
                if let Ok((_, Record::Auxtrace(a))) = r {
                    n += a.data.len() as u64;
                }
            }
            assert_eq!(n, (CHUNK * CHUNKS) as u64);
            n
        })
    });
    g.bench_function("records+aux_bytes", |b| {
        b.iter(|| {
            let f = file.parse().unwrap();
            let mut x = 0u64;
            for r in f.records() {
                if let Ok((_, Record::Auxtrace(a))) = r {
                    for w in a.data.chunks_exact(8) {
                        x ^= u64::from_le_bytes(w.try_into().unwrap());
                    }
                }
            }
            x
        })
    });
    g.bench_function("ordered_records", |b| {
        b.iter(|| file.parse().unwrap().ordered_records().count())
    });
    g.bench_function("linux-perf-data", |b| {
        b.iter(|| {
            use linux_perf_data::{PerfFileReader, PerfFileRecord};
            let r = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
            let PerfFileReader {
                mut perf_file,
                mut record_iter,
            } = PerfFileReader::parse_file(r).unwrap();
            let mut n = 0usize;
            while let Some(rec) = record_iter.next_record(&mut perf_file).unwrap() {
                if let PerfFileRecord::UserRecord(u) = rec {
                    n += u.data.len();
                }
            }
            n
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
