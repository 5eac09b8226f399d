//! The perf.data format: one typed record model, a zero-copy reader (file and pipe
//! mode) and a streaming writer whose files Linux perf reads.
//!
//! # Reading
//!
//! Map a file, parse its header, and walk its records (each borrows the mapped bytes:
//! AUXTRACE data is a slice of the file, not a copy):
//!
//! ```no_run
//! use pt_perf_data::{MappedFile, Record};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = MappedFile::open("perf.data")?;
//! let perf = file.parse()?;
//! for e in perf.events() {
//!     println!("event {:?}: type {} config {:#x}", e.name, e.attr.type_, e.attr.config);
//! }
//! for r in perf.records() {
//!     let (offset, record) = r?;
//!     match record {
//!         Record::Auxtrace(a) => println!(
//!             "{offset:#x} AUXTRACE cpu {} tid {} offset {:#x}: {} bytes",
//!             a.cpu as i32, a.tid as i32, a.offset, a.data.len()
//!         ),
//!         Record::Mmap2(m) => println!("{offset:#x} MMAP2 {:#x} {}", m.start, m.filename),
//!         other => println!("{offset:#x} {} time {:?}", other.name(), other.time()),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`PerfFile::ordered_records`] delivers the same records in perf's time order
//! (FINISHED_ROUND rounds); [`PipeReader`] streams a pipe-mode file from any `Read`.
//!
//! # Writing
//!
//! A minimal file: one event, one COMM, finished with EVENT_DESC written for you. Here it
//! goes to memory and is read back:
//!
//! ```
//! use pt_perf_data::{attr_type, sw_config, AttrFlags, Comm, EventAttr, EventDesc};
//! use pt_perf_data::{PerfFile, PerfFileWriter, Record, SampleId, SampleType, ATTR_SIZE};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let attr = EventAttr {
//!     type_: attr_type::SOFTWARE,
//!     size: ATTR_SIZE,
//!     config: sw_config::DUMMY,
//!     sample_type: SampleType(SampleType::TID | SampleType::TIME | SampleType::IDENTIFIER),
//!     flags: AttrFlags(AttrFlags::SAMPLE_ID_ALL | AttrFlags::COMM),
//!     ..Default::default()
//! };
//! let event = EventDesc { attr, ids: vec![7], name: Some("dummy:u".into()) };
//! let mut w = PerfFileWriter::new(std::io::Cursor::new(Vec::new()), vec![event])?;
//! let sample_id = SampleId { pid: Some(42), tid: Some(42), time: Some(1000), id: Some(7), ..Default::default() };
//! w.write(&Record::Comm(Comm { misc: 0, pid: 42, tid: 42, comm: "hello".into(), sample_id }))?;
//! let bytes = w.finish()?.into_inner();
//!
//! let perf = PerfFile::parse(&bytes)?;
//! let (_, r) = perf.records().next().unwrap()?;
//! assert!(matches!(r, Record::Comm(c) if c.comm.as_bytes() == b"hello" && c.sample_id.time == Some(1000)));
//! # Ok(())
//! # }
//! ```
//!
//! An Intel PT recording is written by the one [`RecordingWriter`] (every recorder of
//! the workspace uses it): from the intel_pt event ([`intel_pt_attr`], and
//! [`tracking_attr`] for the side-band) and its [`IntelPtInfo`], it writes the attrs,
//! AUXTRACE_INFO, TIME_CONV and the features perf wants ([`pmu_mappings`],
//! [`host_features`], EVENT_DESC, the AUXTRACE index), then the records in rounds
//! (FINISHED_ROUND), each leaving a complete file on disk, so that a killed recorder or
//! a full disk leaves a file perf reads. perf 6.1 decodes such files offline
//! (`perf script --itrace=i1i`); the tests check it instruction by instruction.
//!
//! # Map
//!
//! - [`attr`]: `perf_event_attr`, sample_type, the events of a file.
//! - [`records`]: every record kind ([`Record`]), its decoding and encoding.
//! - [`intel_pt`]: AUXTRACE_INFO's intel_pt part, the PMU's config bits, perf's attrs.
//! - [`features`]: the header features ([`Feature`]).
//! - [`reader`]: [`MappedFile`], [`PerfFile`] and its record iterators.
//! - [`pipe`]: [`PipeReader`]. [`writer`]: [`PerfFileWriter`], [`PipeWriter`], and
//!   [`write_pipe`] (a perf.data as perf writes a pipe).
//! - [`recording`]: [`RecordingWriter`], the one writer of Intel PT recordings.
//! - [`ordered`]: perf's time ordering ([`RoundQueue`]).
//!
//! Bad input gives an [`Error`] naming the file offset and what is wrong; reading goes
//! on where it soundly can. Byte-swapped (big-endian) files are refused.
#![deny(missing_docs)]

pub mod attr;
mod bytes;
pub mod error;
pub mod features;
pub mod intel_pt;
pub mod ordered;
pub mod pipe;
pub mod reader;
pub mod recording;
pub mod records;
pub mod writer;

pub use attr::{
    attr_type, read_format, sw_config, AttrFlags, EventAttr, EventDesc, EventTable, SampleType,
    ATTR_SIZE, ATTR_SIZE_VER0,
};
pub use bytes::{CStr, U64s};
pub use error::{Error, ErrorKind, Result, Warning};
pub use features::{feature_id, host_features, AuxtraceIndexEntry, BuildIdEntry, Feature};
pub use intel_pt::{intel_pt_attr, pmu_mappings, tracking_attr, IntelPtInfo, IntelPtMtc};
pub use ordered::RoundQueue;
pub use pipe::PipeReader;
pub use reader::{FileHeader, MappedFile, OrderedRecords, PerfFile, Records, Section};
pub use recording::{RecordingError, RecordingSetup, RecordingWriter};
pub use records::{
    auxtrace_type, misc, record_type, Aux, AuxFlags, AuxOutputHwId, Auxtrace, AuxtraceError,
    AuxtraceInfo, AuxtracePrivate, BranchStack, BuildId, BuildIdRecord, Comm, CpuMap, IdIndexEntry,
    ItraceStart, Lost, LostSamples, Mmap, Mmap2, Mmap2File, RawRecord, Record, Regs, Sample,
    SampleId, StackUser, Switch, SwitchCpuWide, Task, ThreadMapEntry, Throttle, TimeConv,
    TimeConvExt,
};
pub use writer::{write_pipe, PerfFileWriter, PipeWriter};
