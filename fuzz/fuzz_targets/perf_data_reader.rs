//! The perf.data reader on arbitrary bytes, in file and pipe mode: no panic, every error
//! names an offset inside the input, records lie inside it, and every record that encodes
//! reads back equal (the writer and the reader share one model).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_perf_data::records::{encode_record, parse_record};
use pt_perf_data::{EventTable, MappedFile, PerfFile, PipeReader, Record};

/// Encodes `r` and parses it back with the same events.
fn round_trip(r: &Record<'_>, events: &EventTable) {
    // AUXTRACE and TRACING_DATA data is padded to 8 bytes when written: compare the rest.
    if matches!(r, Record::Auxtrace(_) | Record::HeaderTracingData { .. }) {
        return;
    }
    let mut buf = Vec::new();
    if encode_record(r, events, &mut buf).is_err() {
        return;
    }
    let ty = u32::from_le_bytes(buf[..4].try_into().unwrap());
    let misc = u16::from_le_bytes(buf[4..6].try_into().unwrap());
    let size = u16::from_le_bytes(buf[6..8].try_into().unwrap()) as usize;
    assert_eq!(size, buf.len());
    let back = parse_record(ty, misc, &buf[8..size], &[], 0, events)
        .unwrap_or_else(|e| panic!("{r:?} encoded but did not parse back: {e}"));
    assert_eq!(&back, r);
}

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    // As a stream (a pipe): all of it if it starts with the magic, else refused.
    match MappedFile::read_stream(data, "a pipe") {
        Ok(m) => assert_eq!(m.bytes(), data),
        Err(_) => assert!(data.len() < 8 || !data.starts_with(b"PERFILE2")),
    }
    match PerfFile::parse(data) {
        Ok(f) => {
            let _ = f.features();
            let _ = f.intel_pt_info();
            for r in f.records() {
                match r {
                    Ok((at, rec)) => {
                        assert!(at < len);
                        round_trip(&rec, f.event_table());
                    }
                    Err(e) => assert!(e.offset <= len, "{e}"),
                }
            }
            let n = f.ordered_records().count();
            assert_eq!(n, f.records().count());
        }
        Err(e) => assert!(e.offset <= len, "{e}"),
    }
    if let Ok(mut p) = PipeReader::new(data) {
        loop {
            match p.next_record() {
                Ok(Some((at, _))) => assert!(at < len),
                Ok(None) => break,
                Err(e) => assert!(e.offset <= len, "{e}"),
            }
        }
    }
});
