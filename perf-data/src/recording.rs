//! The one writer of Intel PT recordings: what `perf record -e intel_pt//` writes,
//! for every recorder of the workspace (the perf backend of pt-hal, the simulator's
//! recorder, the tests' hand-made recordings).
//!
//! A recording is the intel_pt event (and, as perf adds it, a tracking `dummy` event
//! for the side-band), AUXTRACE_INFO describing the trace unit, TIME_CONV when the
//! TSC converts to perf time, the header features perf wants (PMU_MAPPINGS naming the
//! intel_pt PMU, the host's, HEADER_CMDLINE, EVENT_DESC, the AUXTRACE index), then the
//! side-band and AUXTRACE records as the recorder produces them.
//!
//! # Written as perf writes: in rounds
//!
//! The recorder ends each round (what it drained from its buffers) with
//! [`RecordingWriter::finish_round`]: a FINISHED_ROUND record, after which the file on
//! disk is complete: the records so far, the features after them, and a header whose
//! data size covers them (see [`crate::writer`]). So a recorder killed at any moment
//! (SIGKILL, a crash, the machine's power) leaves a file that perf and our readers read
//! up to its last round, and a write that fails (a full disk) leaves the file as it was
//! at the last round. Every error names the file ([`RecordingError`]).
//!
//! ```
//! use pt_perf_data::intel_pt::{config, intel_pt_attr};
//! use pt_perf_data::{Auxtrace, EventDesc, IntelPtInfo, PerfFile, Record};
//! use pt_perf_data::{RecordingSetup, RecordingWriter};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pmu = 8;
//! let trace = EventDesc {
//!     attr: intel_pt_attr(pmu, config::DEFAULT, true, false),
//!     ids: vec![1],
//!     name: Some("intel_pt//u".into()),
//! };
//! let setup = RecordingSetup::new(trace, IntelPtInfo::new(pmu));
//! let out = std::io::Cursor::new(Vec::new());
//! let mut w = RecordingWriter::new(out, "memory", setup)?;
//! w.finish_init()?;
//! let psb = [0x02, 0x82].repeat(8);
//! let aux = Auxtrace { offset: 0, reference: 0, idx: 0, tid: 42, cpu: u32::MAX, data: &[] };
//! w.write_auxtrace(&aux, &[&psb])?;
//! w.finish_round()?;
//! let bytes = w.finish()?.into_inner();
//!
//! let perf = PerfFile::parse(&bytes)?;
//! let kinds: Vec<&str> = perf.records().map(|r| r.map(|(_, r)| r.name())).collect::<Result<_, _>>()?;
//! assert_eq!(kinds, ["AUXTRACE_INFO", "FINISHED_INIT", "AUXTRACE", "FINISHED_ROUND"]);
//! # Ok(())
//! # }
//! ```

use std::fs::File;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use crate::attr::EventDesc;
use crate::error::{Error, ErrorKind};
use crate::features::{host_features, Feature};
use crate::intel_pt::{pmu_mappings, IntelPtInfo};
use crate::records::{
    auxtrace_type, Auxtrace, AuxtraceInfo, AuxtracePrivate, Record, TimeConv, TimeConvExt,
};
use crate::writer::PerfFileWriter;

/// What a recording is: its events and its trace unit (see the module docs).
#[derive(Clone, Debug)]
pub struct RecordingSetup {
    /// The intel_pt event: its attr's type is the PMU type of `info` (perf checks that
    /// they agree).
    pub trace: EventDesc,
    /// The tracking event carrying the side-band, when the recording has one apart
    /// from the intel_pt event (perf's `dummy:u`).
    pub tracking: Option<EventDesc>,
    /// AUXTRACE_INFO's intel_pt part.
    pub info: IntelPtInfo,
    /// Whether TIME_CONV follows AUXTRACE_INFO (from `info`'s time_shift, time_mult
    /// and time_zero, in perf 6.1's extended form).
    pub time_conv: bool,
    /// HEADER_VERSION.
    pub perf_version: String,
    /// HEADER_CMDLINE: the recorder's command line.
    pub cmdline: Vec<String>,
}

impl RecordingSetup {
    /// A recording of `trace` described by `info`: no tracking event, no TIME_CONV, this
    /// crate's version as HEADER_VERSION and an empty command line.
    pub fn new(trace: EventDesc, info: IntelPtInfo) -> Self {
        RecordingSetup {
            trace,
            tracking: None,
            info,
            time_conv: false,
            perf_version: format!("6.1 (pt-perf-data {})", env!("CARGO_PKG_VERSION")),
            cmdline: Vec::new(),
        }
    }
}

/// A recording could not be written: which file, and the writer's error (with the
/// file offset it was writing at).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {error}", path.display())]
pub struct RecordingError {
    /// The file (the name given to [`RecordingWriter::new`]).
    pub path: PathBuf,
    /// What went wrong, and where.
    pub error: Error,
}

/// Writes an Intel PT recording as perf does (see the module docs).
pub struct RecordingWriter<W: Write + Seek = File> {
    w: PerfFileWriter<W>,
    path: PathBuf,
    info: IntelPtInfo,
}

impl RecordingWriter<File> {
    /// Creates (or replaces) the file `path` and starts the recording in it.
    pub fn create(path: impl AsRef<Path>, setup: RecordingSetup) -> Result<Self, RecordingError> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| RecordingError {
            path: path.to_path_buf(),
            error: Error::new(0, ErrorKind::Io(e.kind())),
        })?;
        RecordingWriter::new(file, path, setup)
    }
}

impl<W: Write + Seek> RecordingWriter<W> {
    /// Starts the recording in `out` (`path` names it in errors): header, attrs, the
    /// features, AUXTRACE_INFO and (if asked) TIME_CONV.
    pub fn new(
        out: W,
        path: impl Into<PathBuf>,
        setup: RecordingSetup,
    ) -> Result<Self, RecordingError> {
        let path = path.into();
        let fail = |error| RecordingError {
            path: path.clone(),
            error,
        };
        let pmu = setup.trace.attr.type_;
        if u64::from(pmu) != setup.info.pmu_type {
            return Err(fail(Error::new(
                0,
                ErrorKind::Invalid("the intel_pt event's type is not AUXTRACE_INFO's PMU type"),
            )));
        }
        let mut events = vec![setup.trace];
        events.extend(setup.tracking);
        let mut w = PerfFileWriter::new(out, events).map_err(fail)?;
        w.set_feature(pmu_mappings(pmu));
        for f in host_features(&setup.perf_version, &setup.cmdline) {
            w.set_feature(f);
        }
        let mut rw = RecordingWriter {
            w,
            path,
            info: setup.info,
        };
        rw.write(&Record::AuxtraceInfo(AuxtraceInfo {
            kind: auxtrace_type::INTEL_PT,
            private: AuxtracePrivate::IntelPt(rw.info.clone()),
        }))?;
        if setup.time_conv {
            rw.write(&Record::TimeConv(TimeConv {
                time_shift: rw.info.time_shift,
                time_mult: rw.info.time_mult,
                time_zero: rw.info.time_zero,
                ext: Some(TimeConvExt {
                    time_cycles: 0,
                    time_mask: 0,
                    cap_user_time_zero: rw.info.cap_user_time_zero != 0,
                    cap_user_time_short: false,
                }),
            }))?;
        }
        Ok(rw)
    }

    fn fail(&self, error: Error) -> RecordingError {
        RecordingError {
            path: self.path.clone(),
            error,
        }
    }

    /// The file's name, as errors give it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The AUXTRACE_INFO written.
    pub fn info(&self) -> &IntelPtInfo {
        &self.info
    }

    /// The events.
    pub fn events(&self) -> &[EventDesc] {
        self.w.events()
    }

    /// Sets a header feature, replacing the one of the same number (the host's CPU
    /// for a simulated one, BUILD_ID as the recording learns build ids). It reaches the
    /// file at the next round.
    pub fn set_feature(&mut self, f: Feature) {
        self.w.set_feature(f);
    }

    /// The file offset the next record will have.
    pub fn offset(&self) -> u64 {
        self.w.offset()
    }

    /// Appends a record (side-band, or an AUXTRACE whose data is in one piece); returns
    /// its file offset.
    pub fn write(&mut self, r: &Record<'_>) -> Result<u64, RecordingError> {
        self.w.write(r).map_err(|e| self.fail(e))
    }

    /// Appends an AUXTRACE record whose data comes in pieces (an AUX ring that
    /// wrapped); `a.data` is ignored.
    pub fn write_auxtrace(
        &mut self,
        a: &Auxtrace<'_>,
        parts: &[&[u8]],
    ) -> Result<u64, RecordingError> {
        self.w.write_auxtrace(a, parts).map_err(|e| self.fail(e))
    }

    /// Ends the synthesized records that describe the recording's start (perf's
    /// FINISHED_INIT) and makes the file complete on disk.
    pub fn finish_init(&mut self) -> Result<(), RecordingError> {
        self.write(&Record::FinishedInit)?;
        self.checkpoint()
    }

    /// Ends a round: a FINISHED_ROUND record (what came before may be sorted by time),
    /// then the file on disk is made complete up to here.
    pub fn finish_round(&mut self) -> Result<(), RecordingError> {
        self.write(&Record::FinishedRound)?;
        self.checkpoint()
    }

    /// Makes the file on disk complete up to here without ending a round (a snapshot
    /// written at once, features that changed).
    pub fn checkpoint(&mut self) -> Result<(), RecordingError> {
        self.w.checkpoint().map_err(|e| self.fail(e))
    }

    /// Completes the file and hands back the output. The last round should have been
    /// finished ([`Self::finish_round`]).
    pub fn finish(self) -> Result<W, RecordingError> {
        let RecordingWriter { w, path, .. } = self;
        w.finish().map_err(|error| RecordingError { path, error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intel_pt::{config, intel_pt_attr, tracking_attr};
    use crate::reader::PerfFile;
    use crate::SampleId;
    use std::io::Cursor;

    fn setup() -> RecordingSetup {
        let pmu = 9;
        let mut info = IntelPtInfo::new(pmu);
        info.time_mult = 1;
        info.cap_user_time_zero = 1;
        let mut s = RecordingSetup::new(
            EventDesc {
                attr: intel_pt_attr(pmu, config::DEFAULT, true, false),
                ids: vec![1],
                name: Some("intel_pt//u".into()),
            },
            info,
        );
        s.tracking = Some(EventDesc {
            attr: tracking_attr(true, false, false, true),
            ids: vec![2],
            name: Some("dummy:u".into()),
        });
        s.time_conv = true;
        s.cmdline = vec!["test".into()];
        s
    }

    fn comm(n: u32) -> Record<'static> {
        Record::Comm(crate::Comm {
            misc: 0,
            pid: n,
            tid: n,
            comm: "x".into(),
            sample_id: SampleId {
                pid: Some(n),
                tid: Some(n),
                time: Some(u64::from(n)),
                id: Some(2),
                ..Default::default()
            },
        })
    }

    fn names(bytes: &[u8]) -> Vec<&'static str> {
        let perf = PerfFile::parse(bytes).unwrap();
        assert!(perf.warnings().is_empty(), "{:?}", perf.warnings());
        perf.records().map(|r| r.unwrap().1.name()).collect()
    }

    #[test]
    fn writes_what_perf_record_writes() {
        let mut w = RecordingWriter::new(Cursor::new(Vec::new()), "mem", setup()).unwrap();
        w.finish_init().unwrap();
        w.write(&comm(5)).unwrap();
        w.finish_round().unwrap();
        let bytes = w.finish().unwrap().into_inner();
        assert_eq!(
            names(&bytes),
            [
                "AUXTRACE_INFO",
                "TIME_CONV",
                "FINISHED_INIT",
                "COMM",
                "FINISHED_ROUND"
            ]
        );
        let perf = PerfFile::parse(&bytes).unwrap();
        assert_eq!(perf.events().len(), 2);
        let f: Vec<Feature> = perf
            .features()
            .into_iter()
            .map(|(_, f)| f.unwrap())
            .collect();
        assert!(f
            .iter()
            .any(|f| matches!(f, Feature::PmuMappings(m) if m.contains(&(9, "intel_pt".into())))));
        assert!(f
            .iter()
            .any(|f| matches!(f, Feature::Cmdline(c) if c == &["test"])));
    }

    #[test]
    fn the_pmu_types_must_agree() {
        let mut s = setup();
        s.info.pmu_type = 10;
        let e = RecordingWriter::new(Cursor::new(Vec::new()), "x.data", s)
            .err()
            .unwrap();
        assert!(e.to_string().starts_with("x.data: "), "{e}");
    }

    /// A recorder killed after a round: what is on disk then reads as the records up to
    /// that round, with no warning (the header is consistent).
    #[test]
    fn a_file_cut_off_after_a_round_reads_up_to_it() {
        let mut w = RecordingWriter::new(Cursor::new(Vec::new()), "mem", setup()).unwrap();
        w.finish_init().unwrap();
        let mut on_disk = Vec::new();
        for round in 0..3 {
            w.write(&comm(round)).unwrap();
            w.finish_round().unwrap();
            on_disk.push(w.w_bytes());
            // Records of the next round, not yet ended: the header does not cover them.
            w.write(&comm(100 + round)).unwrap();
        }
        for (round, bytes) in on_disk.iter().enumerate() {
            let n = names(bytes);
            // This round's record and the one written after the round before.
            assert_eq!(n.iter().filter(|&&k| k == "COMM").count(), 2 * round + 1);
            assert_eq!(n.last(), Some(&"FINISHED_ROUND"));
        }
    }

    /// A sink that fails with ENOSPC once `room` bytes are written.
    struct Full {
        data: Cursor<Vec<u8>>,
        room: u64,
    }

    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let pos = self.data.position();
            if pos + b.len() as u64 > self.room {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            self.data.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Seek for Full {
        fn seek(&mut self, p: std::io::SeekFrom) -> std::io::Result<u64> {
            self.data.seek(p)
        }
    }

    /// A full disk: the error names the file and where it was writing, and the file
    /// reads as it was at the last round.
    #[test]
    fn a_full_disk_names_the_file_and_keeps_the_last_round() {
        let out = Full {
            data: Cursor::new(Vec::new()),
            room: 64 << 10,
        };
        let mut w = RecordingWriter::new(out, "/mnt/full/perf.data", setup()).unwrap();
        w.finish_init().unwrap();
        let trace = vec![0x02u8; 4096];
        let aux = |offset| Auxtrace {
            offset,
            reference: 0,
            idx: 0,
            tid: 1,
            cpu: u32::MAX,
            data: &trace,
        };
        let mut rounds = 0;
        let err = loop {
            let r = w
                .write(&Record::Auxtrace(aux(rounds * 4096)))
                .and_then(|_| w.finish_round());
            match r {
                Ok(()) => rounds += 1,
                Err(e) => break e,
            }
            assert!(rounds < 100, "the sink never filled");
        };
        let msg = err.to_string();
        assert!(msg.starts_with("/mnt/full/perf.data: "), "{msg}");
        let enospc = std::io::Error::from_raw_os_error(28).kind();
        assert_eq!(err.error.kind, ErrorKind::Io(enospc));
        assert!(rounds > 0);
        let bytes = w.w_bytes();
        drop(w);
        let n = names(&bytes);
        assert_eq!(
            n.iter().filter(|&&k| k == "AUXTRACE").count(),
            rounds as usize
        );
    }

    impl RecordingWriter<Cursor<Vec<u8>>> {
        /// The bytes on disk now.
        fn w_bytes(&mut self) -> Vec<u8> {
            self.w.out_ref().get_ref().clone()
        }
    }

    impl RecordingWriter<Full> {
        fn w_bytes(&mut self) -> Vec<u8> {
            self.w.out_ref().data.get_ref().clone()
        }
    }
}
