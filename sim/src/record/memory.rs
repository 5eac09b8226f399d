//! A sink that keeps a recording in memory, for tests and for tools that look at
//! the streams without a file.

use std::collections::BTreeMap;

use super::{ProcessMemory, RecordError, RecordSink, RecordSummary, ThreadStart, Timed};
use crate::exec::ThreadId;

/// Keeps everything a recording delivers: each thread's trace stream, the task
/// events in the order they came, and what the recorder said about the threads.
///
/// ```
/// use pt_hal::config::TraceConfig;
/// use pt_sim::exec::script::{Directive, Script};
/// use pt_sim::exec::ExecMode;
/// use pt_sim::record::{record_into, MemorySink, SimRecording};
///
/// let mut program = Script::new(0x1000, ExecMode::Bit64)
///     .code(0x1000, &[0xff, 0xc9, 0x75, 0xfc]) // 1000: dec ecx; jnz 1000
///     .directives([Directive::Taken, Directive::NotTaken, Directive::Stop]);
/// let rec = SimRecording::new(TraceConfig::perf_default());
/// let mut sink = MemorySink::default();
/// let summary = record_into(&mut program, &rec, &mut sink, |_| {})?;
/// let (thread, _tsc) = sink.starts[0];
/// assert!(sink.streams[&thread].starts_with(&[0x02, 0x82]), "a PSB first");
/// assert_eq!(sink.summary, Some(summary));
/// # Ok::<(), pt_sim::record::RecordError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemorySink {
    /// The threads whose trace started, in that order, with the TSC it started at.
    pub starts: Vec<(ThreadId, u64)>,
    /// Each thread's trace stream.
    pub streams: BTreeMap<ThreadId, Vec<u8>>,
    /// The task events.
    pub events: Vec<Timed>,
    /// Trace lost: (thread, bytes, TSC).
    pub lost: Vec<(ThreadId, u64, u64)>,
    /// The TSC of each snapshot request.
    pub snapshots: Vec<u64>,
    /// Checkpoints seen.
    pub checkpoints: u64,
    /// The recording's summary, once it has finished.
    pub summary: Option<RecordSummary>,
}

impl RecordSink for MemorySink {
    fn open_thread(&mut self, start: &ThreadStart<'_>) -> Result<(), RecordError> {
        self.starts.push((start.id, start.tsc));
        self.streams.entry(start.id).or_default();
        Ok(())
    }

    fn trace(&mut self, thread: ThreadId, bytes: &[u8], _tsc: u64) -> Result<(), RecordError> {
        self.streams
            .entry(thread)
            .or_default()
            .extend_from_slice(bytes);
        Ok(())
    }

    fn lost(&mut self, thread: ThreadId, size: u64, tsc: u64) -> Result<(), RecordError> {
        self.lost.push((thread, size, tsc));
        Ok(())
    }

    fn task_event(&mut self, event: &Timed) -> Result<(), RecordError> {
        self.events.push(event.clone());
        Ok(())
    }

    fn snapshot(&mut self, tsc: u64) -> Result<(), RecordError> {
        self.snapshots.push(tsc);
        Ok(())
    }

    fn checkpoint(&mut self, _memory: ProcessMemory<'_>, _tsc: u64) -> Result<(), RecordError> {
        self.checkpoints += 1;
        Ok(())
    }

    fn finish(
        &mut self,
        summary: &RecordSummary,
        _memory: ProcessMemory<'_>,
        _tsc: u64,
    ) -> Result<(), RecordError> {
        self.summary = Some(summary.clone());
        Ok(())
    }
}
