//! What a session could not read in a damaged recording, counted: the one tally every
//! tool that reads a perf.data reports at its end (and turns into its exit status),
//! beside the [`super::Warning`]s that say where.
//!
//! Losses the recorder itself reported (AUX areas truncated, LOST records, perf's
//! AUXTRACE_ERROR) are not here: they are part of a well-formed recording and reach
//! the decoder as [`super::Lost`] items and warnings. This is what the file's damage
//! took away.

use std::fmt;

/// What the reader skipped in a recording (see the module docs of `session::skipped`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Records whose contents could not be read: each was skipped and reading went on.
    pub records: u64,
    /// A broken record frame (a size below its header, or past the end of the data)
    /// where reading stopped: its file offset and the bytes of records from there to
    /// the end of the data, which were not read.
    pub stopped: Option<(u64, u64)>,
    /// Bytes the header's data section claims beyond the end of the file (the file
    /// was cut short); `u64::MAX` when the claimed end overflows.
    pub past_end: u64,
    /// The header's data size is 0: the recording was not finished (records were
    /// read to the end of the file, as far as they go).
    pub unfinished: bool,
    /// Header features that could not be read (each was skipped).
    pub features: u64,
    /// AUX bytes the AUXTRACE records of each queue claim beyond the end of the
    /// file, by queue number (only queues that miss some).
    pub aux: Vec<(u32, u64)>,
    /// Trace bytes of each queue in which no PSB was found (a zeroed or overwritten
    /// trace: no decoder can start in them), by queue number.
    pub no_psb: Vec<(u32, u64)>,
}

impl Skipped {
    /// Whether nothing was skipped (the file is whole, as far as a reader can tell).
    pub fn is_empty(&self) -> bool {
        *self == Skipped::default()
    }
}

/// One line: `3 records skipped, reading stopped at file offset 0x508 (0x120 bytes of
/// records unread), queue 0: 0x40 AUX bytes missing`.
impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing skipped");
        }
        let mut parts: Vec<String> = Vec::new();
        if self.unfinished {
            parts.push("unfinished recording (the header's data size is 0)".into());
        }
        match self.past_end {
            0 => {}
            u64::MAX => parts.push("the header's data section ends past the file".into()),
            n => parts.push(format!(
                "the file ends {n:#x} bytes before the header's data end"
            )),
        }
        if self.records > 0 {
            let s = if self.records == 1 { "" } else { "s" };
            parts.push(format!("{} unreadable record{s} skipped", self.records));
        }
        if let Some((at, n)) = self.stopped {
            parts.push(format!(
                "reading stopped at a broken record at file offset {at:#x} ({n:#x} bytes of records unread)"
            ));
        }
        for (q, n) in &self.aux {
            parts.push(format!("queue {q}: {n:#x} AUX bytes missing"));
        }
        for (q, n) in &self.no_psb {
            parts.push(format!("queue {q}: {n:#x} trace bytes without a PSB"));
        }
        if self.features > 0 {
            let s = if self.features == 1 { "" } else { "s" };
            parts.push(format!("{} header feature{s} skipped", self.features));
        }
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_of_what_was_skipped() {
        assert!(Skipped::default().is_empty());
        let s = Skipped {
            records: 2,
            stopped: Some((0x508, 0x120)),
            aux: vec![(0, 0x40)],
            ..Default::default()
        };
        assert!(!s.is_empty());
        assert_eq!(
            s.to_string(),
            "2 unreadable records skipped, reading stopped at a broken record at file offset \
             0x508 (0x120 bytes of records unread), queue 0: 0x40 AUX bytes missing"
        );
        let u = Skipped {
            unfinished: true,
            past_end: u64::MAX,
            features: 1,
            ..Default::default()
        };
        assert_eq!(
            u.to_string(),
            "unfinished recording (the header's data size is 0), the header's data section \
             ends past the file, 1 header feature skipped"
        );
    }
}
