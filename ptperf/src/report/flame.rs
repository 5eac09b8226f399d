//! `--flamegraph FILE`: the report's folded stacks (`--folded`, one owner of
//! them) drawn as an SVG flame graph by the `inferno` crate, its frames as wide
//! as their samples' periods; `--icicle` draws it top down.

use std::io::Write;

use inferno::flamegraph::{self, Direction, Options};

/// How the flame graph is titled and drawn.
pub(super) struct Graph {
    /// The title.
    pub title: String,
    /// What the counts are (the samples' event: their periods are summed).
    pub count_name: String,
    /// Top down.
    pub icicle: bool,
}

impl Graph {
    /// Draws the folded stacks `lines` (stack and count, sorted) into `path`
    /// ('-': stdout).
    pub fn write(&self, path: &str, lines: &[(String, u64)]) -> Result<(), crate::Error> {
        let text: Vec<String> = lines.iter().map(|(l, n)| format!("{l} {n}")).collect();
        let mut opts = Options::default();
        opts.title = self.title.clone();
        opts.count_name = self.count_name.clone();
        if self.icicle {
            opts.direction = Direction::Inverted;
        }
        let total: u64 = lines.iter().map(|(_, n)| n).sum();
        opts.subtitle = Some(format!(
            "{total} {} in {} stacks",
            self.count_name,
            lines.len()
        ));
        let err = |e: std::io::Error| crate::Error::Io {
            path: format!("ptperf report: {path}").into(),
            source: e,
        };
        if lines.is_empty() {
            return Err(crate::Error::Nothing(format!(
                "ptperf report: no samples to draw in {path}"
            )));
        }
        if path == "-" {
            let mut out = std::io::BufWriter::new(pt_cli::stdout());
            let _ = flamegraph::from_lines(&mut opts, text.iter().map(String::as_str), &mut out)
                .and_then(|()| out.flush());
            return Ok(());
        }
        let f = std::fs::File::create(path).map_err(err)?;
        let mut out = std::io::BufWriter::new(f);
        flamegraph::from_lines(&mut opts, text.iter().map(String::as_str), &mut out)
            .and_then(|()| out.flush())
            .map_err(err)
    }
}
