//! The progress bar of a long decode ([`pt_cli::progress`]: on a terminal's stderr
//! only, never in a pipe or a file), fed by a synthesizer.

use pt_cli::progress::ProgressBar;

/// A bar counting `total` trace bytes, if stderr is a terminal.
pub fn bar(total: u64) -> Option<ProgressBar> {
    pt_cli::progress::bar(
        total,
        "decoding {wide_bar} {percent:>3}% {bytes}/{total_bytes} {eta}",
    )
}

/// Hooks `bar` to a synthesizer's progress.
pub fn attach(synth: &mut pt_perf::synth::Synth<'_, '_>, bar: Option<&ProgressBar>) {
    if let Some(b) = bar.cloned() {
        synth.on_progress(move |done, _| b.set_position(done));
    }
}
