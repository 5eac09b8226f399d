//! The flow of a perf.data recording counted for a profile: every AUX queue
//! decoded in blocks, the counts kept per process (each has its own address
//! space), with the files each process mapped.

use std::collections::BTreeMap;

use pt_decoder::image::Image;
use pt_decoder::{Granularity, Item};
use pt_perf::session::{PerfItem, Session};

use super::{AddrCounts, Collector, Module};

/// One process's counts and files.
#[derive(Debug)]
pub struct ProcessCounts {
    /// The process (`None`: code no known process ran, e.g. before the first
    /// context of a CPU queue).
    pub pid: Option<u32>,
    /// Its counts.
    pub counts: AddrCounts,
    /// The files it mapped (the kernel's too), as found on disk.
    pub modules: Vec<Module>,
}

/// What decoding met besides the flow: errors and lost data, as text lines.
#[derive(Debug, Default)]
pub struct Problems {
    /// One line per decode error, lost piece of trace or missing code.
    pub lines: Vec<String>,
}

/// Decodes every queue of `session` and counts its blocks per process.
pub fn collect(session: &Session<'_>) -> (Vec<ProcessCounts>, Problems) {
    let mut per: BTreeMap<Option<u32>, Collector> = BTreeMap::new();
    let mut problems = Problems::default();
    let empty = Image::new();
    for q in 0..session.queues().len() {
        let mut dec = session
            .decoder(q)
            .configure(|b| b.granularity(Granularity::Blocks));
        let mut pid = None;
        while let Some(item) = dec.next() {
            match item {
                PerfItem::Context(c) => pid = c.pid,
                PerfItem::Decoded(Item::Block(b)) => {
                    let image = dec.image().unwrap_or(&empty);
                    per.entry(pid).or_default().block(&b, image);
                }
                PerfItem::Decoded(Item::Error(e)) => {
                    let at = e.offset.and_then(|o| dec.file_offset(o));
                    problems.lines.push(match at {
                        Some(at) => format!("queue {q}: {e} (file offset {at:#x})"),
                        None => format!("queue {q}: {e}"),
                    });
                }
                PerfItem::Lost(l) => problems.lines.push(format!("queue {q}: {l}")),
                PerfItem::NoCode(n) => problems.lines.push(format!("queue {q}: {n}")),
                _ => {}
            }
        }
    }
    let out = per
        .into_iter()
        .map(|(pid, c)| ProcessCounts {
            pid,
            counts: c.finish(),
            modules: modules(session, pid),
        })
        .collect();
    (out, problems)
}

/// The files process `pid` mapped (every mapping it ever had, later ones
/// replacing earlier ones at the same place) and the kernel's.
fn modules(session: &Session<'_>, pid: Option<u32>) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    for m in session.mappings() {
        if m.pid.is_some() && m.pid != pid {
            continue;
        }
        let Ok(file) = session.code_file(m) else {
            continue;
        };
        out.retain(|o| !(o.start < m.end() && m.start < o.end));
        out.push(Module {
            path: file.path.clone(),
            start: m.start,
            end: m.end(),
            file_offset: m.pgoff,
        });
    }
    out.sort_by_key(|m| m.start);
    out
}
