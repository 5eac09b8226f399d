//! A progress bar for long decodes: on a terminal's stderr only, never in a pipe
//! or a file.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting `total` trace bytes, if stderr is a terminal.
pub fn bar(total: u64) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() || total == 0 {
        return None;
    }
    let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "decoding {wide_bar} {percent:>3}% {bytes}/{total_bytes} {eta}",
    ) {
        b.set_style(style);
    }
    Some(b)
}

/// Hooks `bar` to a synthesizer's progress.
pub fn attach(synth: &mut pt_perf::synth::Synth<'_, '_>, bar: Option<&ProgressBar>) {
    if let Some(b) = bar.cloned() {
        synth.on_progress(move |done, _| b.set_position(done));
    }
}
