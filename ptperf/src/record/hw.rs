//! `ptperf record` with the perf backend (Intel PT hardware).

use super::{Options, Outcome};

/// Records with the kernel's intel_pt PMU.
pub(super) fn record(o: &Options) -> Result<Outcome, String> {
    let _ = o;
    Err("not yet".into())
}
