//! The perf.data decoding session on arbitrary bytes: no panic, no hang; warnings and
//! lost-data positions name offsets inside the input; the queues decode (a bounded
//! number of items, since code that loops without trace never ends) with their
//! context, in time order when the recording is timed, and the file offsets they
//! report lie inside the input.
//!
//! The code comes from `perf_sysroot/` beside this crate (the seeds name `/code.bin`,
//! `/perf_parent`, `/perf_child`…: small programs of the session tests), so that
//! mutated recordings switch images and decode real code without any file outside
//! the repository.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_perf::session::{PerfItem, QueueDecoder, Session, SessionOptions};
use pt_decoder::{Granularity, Item};
use pt_perf_data::PerfFile;
use std::path::PathBuf;

/// Items decoded per input, over all queues.
const BUDGET: usize = 1500;

/// Checks one item of `dec` against the input's length.
fn check(session: &Session<'_>, dec: &QueueDecoder<'_, '_>, item: PerfItem, len: u64) {
    match item {
        PerfItem::Decoded(Item::Block(b)) => {
            if let Some(fo) = dec.file_offset(b.offset) {
                assert!(fo <= len);
            }
        }
        PerfItem::Decoded(Item::Insn(i)) => {
            if let Some(fo) = dec.file_offset(i.offset) {
                assert!(fo <= len);
            }
        }
        PerfItem::Decoded(Item::Error(e)) => {
            if let Some(fo) = e.offset.and_then(|o| dec.file_offset(o)) {
                assert!(fo <= len, "{e}");
            }
        }
        PerfItem::Lost(l) => {
            assert!(l.record_offset < len);
            let _ = l.to_string();
        }
        PerfItem::NoCode(c) => {
            let _ = c.to_string();
        }
        PerfItem::Context(c) => {
            if let Some(t) = c.tid {
                let _ = session.comm(t, dec.time());
            }
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let Ok(file) = PerfFile::parse(data) else {
        return;
    };
    let options = SessionOptions {
        sysroot: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("perf_sysroot")),
        ..Default::default()
    };
    let Ok(session) = Session::new(&file, options) else {
        return;
    };
    for w in session.warnings() {
        let _ = w.to_string();
    }
    // What the damage took away lies inside the input and says so in a line.
    let skipped = session.skipped();
    if let Some((at, unread)) = skipped.stopped {
        assert!(at < len && unread <= len - at, "{skipped}");
    }
    assert!(skipped.no_psb.iter().all(|&(_, n)| n <= len), "{skipped}");
    assert_eq!(skipped.is_empty(), *skipped == Default::default());
    let _ = skipped.to_string();
    for queue in session.queues() {
        for p in &queue.pieces {
            assert!(p.record_offset < len && p.data_offset <= len);
        }
        for (i, s) in queue.segments.iter().enumerate() {
            assert_eq!(queue.segment_bytes(i).len(), s.len());
        }
    }
    // Both granularities over the corpus, one per input.
    let granularity = if data.len() % 2 == 0 {
        Granularity::Instructions
    } else {
        Granularity::Blocks
    };
    let mut left = BUDGET;
    if session.is_timed() {
        let all: Vec<usize> = (0..session.queues().len()).collect();
        let mut dec = session.timed_decoder(&all, move |b| b.granularity(granularity));
        while left > 0 {
            let Some((q, item)) = dec.next() else { break };
            left -= 1;
            check(&session, &dec.queues()[q], item, len);
        }
    } else {
        for &q in session.timeless_order() {
            let mut dec = session
                .decoder(q)
                .configure(move |b| b.granularity(granularity));
            while left > 0 {
                let Some(item) = dec.next() else { break };
                left -= 1;
                check(&session, &dec, item, len);
            }
            let _ = dec.counts();
        }
    }
});
