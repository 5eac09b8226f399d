//! `ptdump --perf FILE`: its options. The dump itself reads the perf.data through
//! pt-perf's session, which builds on this crate: the ptdump binary (pt-tools) does
//! it (tools/src/bin/ptdump/perf.rs).

use crate::file::OptionError;

/// The `--perf*` options of ptdump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfDumpArgs {
    /// The perf.data.
    pub file: Option<String>,
    /// Only the queues of these CPUs.
    pub cpus: Option<Vec<u32>>,
    /// Only the queues of these threads.
    pub tids: Option<Vec<u32>>,
}

/// ptdump's help for `--perf`.
pub const HELP: &str = "\
  --perf <file>             dump the AUX data of a perf.data (`perf record -e intel_pt//`)
                            instead of a trace file: each queue (CPU or thread), segment by
                            segment, after a header line.
  --perf:cpu <n>[,<n>...]   only the queues of these CPUs.
  --perf:tid <n>[,<n>...]   only the queues of these threads.
";

impl PerfDumpArgs {
    /// Whether `arg` is one of ours (all take a value).
    pub fn takes(arg: &str) -> bool {
        matches!(arg, "--perf" | "--perf:cpu" | "--perf:tid")
    }

    /// Takes `arg` with its value.
    pub fn set(&mut self, arg: &str, value: &str) -> Result<(), OptionError> {
        match arg {
            "--perf" => {
                if self.file.is_some() {
                    return Err(OptionError::DuplicatePerf(value.to_string()));
                }
                self.file = Some(value.to_string());
            }
            "--perf:cpu" => self
                .cpus
                .get_or_insert_with(Vec::new)
                .extend(OptionError::parse_list(arg, value)?),
            "--perf:tid" => self
                .tids
                .get_or_insert_with(Vec::new)
                .extend(OptionError::parse_list(arg, value)?),
            _ => return Err(OptionError::Unknown(arg.to_string())),
        }
        Ok(())
    }
}
