//! Bad input: a typed error naming the file offset and what is wrong, in one line; no
//! panic, no allocation the input cannot back; what can still be read is read.
use pt_perf_data::*;

const PT_ID: u64 = 5;
const TRACK_ID: u64 = 6;

fn sid(id: u64) -> SampleId {
    SampleId {
        pid: Some(1),
        tid: Some(1),
        id: Some(id),
        ..Default::default()
    }
}

/// A small intel_pt file: AUXTRACE_INFO, COMM, ITRACE_START, AUXTRACE, EXIT, and the
/// offsets of its records.
fn file() -> (Vec<u8>, Vec<u64>) {
    let events = vec![
        EventDesc {
            attr: intel_pt_attr(8, intel_pt::config::DEFAULT, true, false),
            ids: vec![PT_ID],
            name: Some("intel_pt//u".into()),
        },
        EventDesc {
            attr: tracking_attr(true, false, false, true),
            ids: vec![TRACK_ID],
            name: Some("dummy:u".into()),
        },
    ];
    let mut w = PerfFileWriter::new(std::io::Cursor::new(Vec::new()), events).unwrap();
    let mut at = Vec::new();
    let mut track = sid(TRACK_ID);
    track.time = Some(10);
    let mut pt = sid(PT_ID);
    pt.time = Some(20);
    at.push(
        w.write(&Record::AuxtraceInfo(AuxtraceInfo {
            kind: auxtrace_type::INTEL_PT,
            private: AuxtracePrivate::IntelPt(IntelPtInfo::new(8)),
        }))
        .unwrap(),
    );
    at.push(
        w.write(&Record::Comm(Comm {
            misc: 0,
            pid: 1,
            tid: 1,
            comm: "x".into(),
            sample_id: track,
        }))
        .unwrap(),
    );
    at.push(
        w.write(&Record::ItraceStart(ItraceStart {
            misc: 0,
            pid: 1,
            tid: 1,
            sample_id: pt,
        }))
        .unwrap(),
    );
    at.push(
        w.write(&Record::Auxtrace(Auxtrace {
            tid: 1,
            cpu: u32::MAX,
            data: &[
                0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0, 0, 0, 0, 0, 0, 0, 0,
            ],
            ..Default::default()
        }))
        .unwrap(),
    );
    at.push(
        w.write(&Record::Exit(Task {
            pid: 1,
            ppid: 1,
            tid: 1,
            ptid: 1,
            time: 30,
            sample_id: track,
            ..Default::default()
        }))
        .unwrap(),
    );
    (w.finish().unwrap().into_inner(), at)
}

fn one_line(e: &Error) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "{s}");
    assert!(s.starts_with("perf.data offset 0x"), "{s}");
    s
}

/// Records read, then the error that ended them (if any).
fn read_all(b: &[u8]) -> (Vec<(u64, String)>, Vec<Error>) {
    let f = PerfFile::parse(b).unwrap();
    let mut ok = Vec::new();
    let mut errs = Vec::new();
    for r in f.records() {
        match r {
            Ok((at, r)) => ok.push((at, r.name().to_string())),
            Err(e) => errs.push(e),
        }
    }
    (ok, errs)
}

#[test]
fn the_good_file_reads() {
    let (b, at) = file();
    let (ok, errs) = read_all(&b);
    assert!(errs.is_empty());
    assert_eq!(ok.iter().map(|r| r.0).collect::<Vec<_>>(), at);
    let f = PerfFile::parse(&b).unwrap();
    let aux: Vec<_> = f.auxtrace_records().collect();
    assert_eq!(aux.len(), 1);
    assert_eq!(
        (aux[0].0, aux[0].1.tid, aux[0].1.data.len()),
        (at[3], 1, 16)
    );
    let names: Vec<_> = f
        .records()
        .map(|r| f.event_of(&r.unwrap().1).and_then(|e| e.name.clone()))
        .collect();
    let pt = Some("intel_pt//u".to_string());
    let dummy = Some("dummy:u".to_string());
    assert_eq!(names, [pt.clone(), dummy.clone(), pt.clone(), pt, dummy]);
    assert_eq!(f.intel_pt_info().unwrap().unwrap(), IntelPtInfo::new(8));
}

#[test]
fn wrong_magic() {
    let (mut b, _) = file();
    b[..8].copy_from_slice(b"PERFILE1");
    let e = PerfFile::parse(&b).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::BadMagic(_)) && e.offset == 0);
    assert!(one_line(&e).contains("not a perf.data file"));
    let e = PipeReader::new(&b[..]).err().unwrap();
    assert!(matches!(e.kind, ErrorKind::BadMagic(_)));
    b[..8].copy_from_slice(&u64::from_be_bytes(*b"PERFILE2").to_le_bytes());
    assert_eq!(PerfFile::parse(&b).unwrap_err().kind, ErrorKind::BigEndian);
}

#[test]
fn truncated_header_and_empty_file() {
    let (b, _) = file();
    assert_eq!(PerfFile::parse(&[]).unwrap_err().kind, ErrorKind::Empty);
    for n in [4, 8, 15, 16, 60, 103] {
        let e = PerfFile::parse(&b[..n]).unwrap_err();
        one_line(&e);
        assert!(e.offset <= n as u64, "{e}");
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{n}: {e}");
    }
}

#[test]
fn truncated_in_the_data_reads_what_is_there() {
    let (b, at) = file();
    // Cut inside the EXIT record (the last): features are gone too.
    let cut = &b[..at[4] as usize + 20];
    let f = PerfFile::parse(cut).unwrap();
    assert!(matches!(f.warnings(), [Warning::DataPastEnd { .. }]));
    let (ok, errs) = read_all(cut);
    assert_eq!(ok.len(), 4);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].offset, at[4]);
    assert!(
        matches!(errs[0].kind, ErrorKind::RecordPastEnd { ty: 4, .. }),
        "{}",
        errs[0]
    );
    assert!(one_line(&errs[0]).contains("runs past the end"));
}

#[test]
fn auxtrace_size_past_the_end() {
    let (mut b, at) = file();
    let size = at[3] as usize + 8;
    b[size..size + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let (ok, errs) = read_all(&b);
    assert_eq!(ok.len(), 3, "the records before are read");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].offset, at[3]);
    assert!(
        matches!(errs[0].kind, ErrorKind::RecordPastEnd { ty: 71, .. }),
        "{}",
        errs[0]
    );
    // The stream reader neither allocates nor reads past the end.
    let stream = pipe_of(&b);
    let mut p = PipeReader::new(&stream[..]).unwrap();
    let mut n = 0;
    let e = loop {
        match p.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("no error"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(e.kind, ErrorKind::RecordPastEnd { ty: 71, .. }),
        "{e}"
    );
    assert!(n >= 3);
}

/// The file's records as a pipe-mode stream (pipe header + HEADER_ATTRs + the data).
fn pipe_of(b: &[u8]) -> Vec<u8> {
    let f = PerfFile::parse(b).unwrap();
    let mut w = PipeWriter::new(Vec::new()).unwrap();
    for e in f.events() {
        let ids: Vec<u8> = e.ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        w.write(&Record::HeaderAttr {
            attr: e.attr,
            ids: U64s::new(&ids),
        })
        .unwrap();
    }
    let mut out = w.finish().unwrap();
    let r = f.data_range();
    out.extend_from_slice(&b[r.start as usize..]);
    out
}

#[test]
fn record_size_below_its_header() {
    let (mut b, at) = file();
    let p = at[2] as usize + 6;
    b[p..p + 2].copy_from_slice(&4u16.to_le_bytes());
    let (ok, errs) = read_all(&b);
    assert_eq!(ok.len(), 2);
    assert_eq!(
        (errs[0].offset, errs[0].kind),
        (at[2], ErrorKind::RecordTooSmall { ty: 12, size: 4 })
    );
}

#[test]
fn a_record_too_short_for_its_fields_is_an_error_and_reading_goes_on() {
    let (mut b, at) = file();
    // ITRACE_START claims 8 bytes only: no room for its fields and trailer. Shrinking
    // the size breaks the framing, so give the following bytes a record of their own.
    let p = at[2] as usize;
    let size = u16::from_le_bytes([b[p + 6], b[p + 7]]);
    b[p + 6..p + 8].copy_from_slice(&8u16.to_le_bytes());
    let filler = p + 8;
    b[filler..filler + 4].copy_from_slice(&200u32.to_le_bytes());
    b[filler + 6..filler + 8].copy_from_slice(&(size - 8).to_le_bytes());
    let (ok, errs) = read_all(&b);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].offset, at[2]);
    assert!(matches!(
        errs[0].kind,
        ErrorKind::RecordTooShort {
            record: "ITRACE_START",
            ..
        }
    ));
    assert!(one_line(&errs[0]).contains("too short"));
    // The unknown filler record is kept raw; AUXTRACE and EXIT still read.
    let names: Vec<&str> = ok.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        names,
        ["AUXTRACE_INFO", "COMM", "UNKNOWN", "AUXTRACE", "EXIT"]
    );
}

#[test]
fn attr_id_mismatch() {
    let (mut b, at) = file();
    // The COMM's trailer id (its last u64) names no event.
    let p = at[1] as usize;
    let size = u16::from_le_bytes([b[p + 6], b[p + 7]]) as usize;
    b[p + size - 8..p + size].copy_from_slice(&999u64.to_le_bytes());
    let (ok, errs) = read_all(&b);
    assert_eq!(ok.len(), 4, "the others read");
    assert_eq!(
        (errs[0].offset, errs[0].kind),
        (at[1], ErrorKind::UnknownId { id: 999 })
    );
    assert!(one_line(&errs[0]).contains("attr/id mismatch"));
}

#[test]
fn sections_past_the_end_and_overflowing() {
    let (b, _) = file();
    // attrs section: offset at byte 24.
    let mut x = b.clone();
    x[24..32].copy_from_slice(&(u64::MAX - 4).to_le_bytes());
    let e = PerfFile::parse(&x).unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::SectionPastEnd { what: "attrs", .. }),
        "{e}"
    );
    one_line(&e);
    // An attr's ids section.
    let mut x = b.clone();
    let attrs = u64::from_le_bytes(b[24..32].try_into().unwrap()) as usize;
    let ids_at = attrs + 128;
    x[ids_at + 8..ids_at + 16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let e = PerfFile::parse(&x).unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::SectionPastEnd {
                what: "attr ids",
                ..
            }
        ),
        "{e}"
    );
    // attr_size too small for an attr.
    let mut x = b.clone();
    x[16..24].copy_from_slice(&8u64.to_le_bytes());
    assert!(matches!(
        PerfFile::parse(&x).unwrap_err().kind,
        ErrorKind::AttrEntrySize(8)
    ));
    // A feature section past the end is skipped with a warning.
    let mut x = b.clone();
    let data_end = {
        let f = PerfFile::parse(&b).unwrap();
        f.data_range().end as usize
    };
    x[data_end..data_end + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let f = PerfFile::parse(&x).unwrap();
    assert!(
        matches!(f.warnings(), [Warning::BadFeature { .. }]),
        "{:?}",
        f.warnings()
    );
    assert_eq!(f.records().count(), 5);
}

#[test]
fn huge_counts_do_not_allocate() {
    // An ID_INDEX claiming 2^60 entries in a 16-byte record.
    let mut w = PipeWriter::new(Vec::new()).unwrap();
    w.write(&Record::IdIndex(vec![])).unwrap();
    let mut b = w.finish().unwrap();
    b[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let f = PerfFile::parse(&b).unwrap();
    let e = f.records().next().unwrap().unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::CountOverflow {
                what: "ID_INDEX",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.offset, 32, "where the entries should be");
    // A pipe record header claiming more data than the stream has.
    let mut s = PipeWriter::new(Vec::new()).unwrap().finish().unwrap();
    s.extend_from_slice(&71u32.to_le_bytes());
    s.extend_from_slice(&[0, 0, 48, 0]);
    s.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    s.extend_from_slice(&[0; 32]);
    let mut p = PipeReader::new(&s[..]).unwrap();
    let e = p.next_record().unwrap_err();
    assert!(matches!(e.kind, ErrorKind::RecordPastEnd { .. }), "{e}");
    assert!(p.next_record().unwrap().is_none());
}

#[test]
fn writer_errors_name_what_is_missing() {
    let events = vec![EventDesc {
        attr: tracking_attr(true, true, false, true),
        ids: vec![TRACK_ID],
        name: None,
    }];
    let mut w = PerfFileWriter::new(std::io::Cursor::new(Vec::new()), events).unwrap();
    // The event samples CPU and TIME: a trailer without them cannot be written.
    let e = w
        .write(&Record::Comm(Comm {
            comm: "x".into(),
            sample_id: sid(TRACK_ID),
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::MissingField {
            record: "COMM",
            field: "time"
        }
    );
    assert!(e.to_string().contains("COMM record lacks time"));
    let long = vec![b'a'; 70_000];
    let e = w
        .write(&Record::Comm(Comm {
            comm: CStr(&long),
            sample_id: SampleId {
                time: Some(1),
                cpu: Some(0),
                ..sid(TRACK_ID)
            },
            ..Default::default()
        }))
        .unwrap_err();
    assert!(matches!(e.kind, ErrorKind::TooLarge { record: "COMM", .. }));
    assert_eq!(w.data_size(), 0, "nothing half-written");
}

/// What is not a regular file: a directory is refused, a device or a pipe is read
/// as a stream only if it starts with perf.data's magic (so /dev/zero is refused at
/// once), and a pipe fed a whole file reads as the file does.
#[test]
fn special_files_say_what_they_are() {
    let dir = std::env::temp_dir().join(format!("perf-data-special-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let e = MappedFile::open(&dir).unwrap_err().to_string();
    assert_eq!(e, "is a directory, not a perf.data file");
    let e = MappedFile::open("/dev/zero").unwrap_err().to_string();
    assert_eq!(
        e,
        "a character device whose data does not start with perf.data's magic (PERFILE2)"
    );
    let e = MappedFile::open("/dev/null").unwrap_err().to_string();
    assert_eq!(e, "a character device that gave no data, not a perf.data");
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let m = MappedFile::open(&empty).unwrap();
    assert_eq!(m.parse().unwrap_err().kind, ErrorKind::Empty);

    let (b, _) = file();
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let writer = {
        let (fifo, b) = (fifo.clone(), b.clone());
        std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            std::io::Write::write_all(&mut w, &b).unwrap();
        })
    };
    let m = MappedFile::open(&fifo).unwrap();
    writer.join().unwrap();
    assert_eq!(m.bytes(), &b[..]);
    let whole = PerfFile::parse(&b).unwrap();
    let piped = m.parse().unwrap();
    assert_eq!(piped.records().count(), whole.records().count());
    let _ = std::fs::remove_dir_all(&dir);
}
