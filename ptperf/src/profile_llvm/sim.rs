//! The flow of a simulated recording (`ptrec --backend sim`: a trace and its
//! side-band file) counted for a profile. perf.data recordings go through the
//! perf.data decoding session instead.

use std::path::Path;

use pt_decoder::image::Image;
use pt_decoder::{Decoder, Granularity, Item};
use pt_sim::sideband::Sideband;

use super::{Collector, Module};

/// Decodes the trace `trace` with its side-band `sideband` into `collector`;
/// returns the mapped files and the decode errors met (decoding goes on after
/// each at the next PSB).
pub fn collect(
    trace: &Path,
    sideband: &Path,
    collector: &mut Collector,
) -> Result<(Vec<Module>, Vec<String>), String> {
    let sb = Sideband::read(sideband)?;
    let bytes = std::fs::read(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let config = crate::verify::config_of(&sb);
    let mut image = Image::new();
    let args = sb.ptxed_args();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--raw" {
            if let Some(v) = it.next() {
                image
                    .add_raw_arg(v)
                    .map_err(|e| format!("side-band image {v}: {e}"))?;
            }
        }
    }
    let mut dec = Decoder::builder(&bytes, &image)
        .config(&config)
        .granularity(Granularity::Blocks)
        .build();
    let mut errors = Vec::new();
    let mut slot = Item::default();
    while dec.next_into(&mut slot) {
        match slot {
            Item::Block(b) => collector.block(&b, &image),
            Item::Error(e) => errors.push(e.to_string()),
            _ => {}
        }
    }
    let modules = sb
        .merged_maps()
        .into_iter()
        .map(|m| Module {
            path: m.path,
            start: m.start,
            end: m.end,
            file_offset: m.file_offset,
        })
        .collect();
    Ok((modules, errors))
}
