//! Progress displays for every tool, through indicatif: drawn on stderr when it
//! is a terminal, and not at all otherwise (a pipe or a log file gets no
//! control characters).
//!
//! ```
//! let bar = pt_cli::progress::bar(100, "{wide_bar} {pos}/{len}");
//! if let Some(b) = &bar {
//!     b.inc(1);
//! }
//! pt_cli::progress::finish(bar);
//! ```

use std::io::IsTerminal;

pub use indicatif::ProgressBar;
use indicatif::{ProgressDrawTarget, ProgressStyle};

/// Whether progress is shown: stderr is a terminal.
pub fn shown() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar of `total` steps in indicatif's `template`, if stderr is a terminal
/// (`None` otherwise, or for a total of 0).
pub fn bar(total: u64, template: &str) -> Option<ProgressBar> {
    if !shown() || total == 0 {
        return None;
    }
    Some(styled(ProgressBar::new(total), template))
}

/// A counter without a known end (a spinner and what `template` shows), if
/// stderr is a terminal.
pub fn counter(template: &str) -> Option<ProgressBar> {
    if !shown() {
        return None;
    }
    Some(styled(ProgressBar::new_spinner(), template))
}

fn styled(b: ProgressBar, template: &str) -> ProgressBar {
    b.set_draw_target(ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        b.set_style(style);
    }
    b
}

/// Clears a bar from the terminal when the work is done.
pub fn finish(bar: Option<ProgressBar>) {
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
