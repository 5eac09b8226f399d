//! `ptperf record` with the perf backend (Intel PT hardware).

use super::{Options, Outcome};

/// Records with the kernel's intel_pt PMU.
pub(super) fn record(o: &Options) -> Result<Outcome, String> {
    let _ = o;
    let (_, _, ready) = pt_hal::probe::Readiness::host();
    if !ready.can_trace() {
        return Err(format!(
            "the perf backend cannot record here: {} (--backend sim records on the simulated PT CPU)",
            ready.summary()
        ));
    }
    Err("the perf backend does not write perf.data yet".into())
}
