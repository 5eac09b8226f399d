//! What the side-band tests of ptdump and ptxed share: perf_event side-band files
//! encoded with pt-perf-data, and runs of our tool or libipt's on them.

use pt_perf_data::records::encode_record;
use pt_perf_data::{AttrFlags, EventAttr, EventDesc, EventTable, Record, SampleId, SampleType};
use std::path::Path;
use std::process::Command;

/// One event with `sample_type` and sample_id_all, as the side-band's attr.
pub fn events(sample_type: u64) -> EventTable {
    EventTable::new(vec![EventDesc {
        attr: EventAttr {
            sample_type: SampleType(sample_type),
            flags: AttrFlags(AttrFlags::SAMPLE_ID_ALL),
            ..Default::default()
        },
        ids: Vec::new(),
        name: None,
    }])
}

/// The sample_id of a record that has one.
pub fn sample_id_mut<'r>(r: &'r mut Record<'_>) -> Option<&'r mut SampleId> {
    Some(match r {
        Record::Mmap(x) => &mut x.sample_id,
        Record::Mmap2(x) => &mut x.sample_id,
        Record::Comm(x) => &mut x.sample_id,
        Record::Fork(x) | Record::Exit(x) => &mut x.sample_id,
        Record::Lost(x) => &mut x.sample_id,
        Record::LostSamples(x) => &mut x.sample_id,
        Record::Throttle(x) => &mut x.sample_id,
        Record::Aux(x) => &mut x.sample_id,
        Record::ItraceStart(x) => &mut x.sample_id,
        Record::Switch(x) => &mut x.sample_id,
        Record::SwitchCpuWide(x) => &mut x.sample_id,
        _ => return None,
    })
}

/// `records` as a side-band file whose samples have `sample_type`.
pub fn encode(records: &[Record<'_>], sample_type: u64) -> Vec<u8> {
    let ev = events(sample_type);
    let mut out = Vec::new();
    for r in records {
        encode_record(r, &ev, &mut out).expect("encode");
    }
    out
}

/// Runs `exe` in `dir` with `flags` (split at blanks), then `inputs`; stdout then
/// stderr. `libs`: libipt's tool, with `PT_REFERENCE_LIBS` as its `LD_LIBRARY_PATH`.
pub fn run(exe: &Path, dir: &Path, flags: &str, inputs: &[&str], libs: bool) -> String {
    let mut c = Command::new(exe);
    c.args(flags.split_whitespace())
        .args(inputs)
        .current_dir(dir);
    if libs {
        c.env(
            "LD_LIBRARY_PATH",
            std::env::var_os("PT_REFERENCE_LIBS").unwrap_or_default(),
        );
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}
