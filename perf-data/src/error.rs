//! Errors and warnings of the perf.data layer.
//!
//! Every error names the file offset where the reader found something wrong (for the
//! writer: the data offset it was writing at) and what is wrong, in one line.

/// A perf.data reading or writing error: where (file offset) and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("perf.data offset {offset:#x}: {kind}")]
pub struct Error {
    /// File offset of the byte (record, section) that is wrong.
    pub offset: u64,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl Error {
    /// An error of `kind` at `offset`.
    pub fn new(offset: u64, kind: ErrorKind) -> Self {
        Error { offset, kind }
    }
}

/// What is wrong (see [`Error`] for where).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The file is empty.
    #[error("empty file: no perf.data header")]
    Empty,
    /// The first eight bytes are not `PERFILE2`.
    #[error("bad magic {0:#018x}: not a perf.data file")]
    BadMagic(u64),
    /// A byte-swapped (big-endian) perf.data; this layer reads little-endian files only.
    #[error("byte-swapped (big-endian) perf.data files are not supported")]
    BigEndian,
    /// The file header's size field is neither the file (104) nor the pipe (16) header.
    #[error("unsupported file header size {0}")]
    HeaderSize(u64),
    /// The file ends inside `what`.
    #[error("truncated {what}: needs {need} bytes, {have} left")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes it needs.
        need: u64,
        /// Bytes that are left.
        have: u64,
    },
    /// A section named by the header lies (partly) past the end of the file.
    #[error(
        "{what} section {start:#x}..{end:#x} lies past the end of the file ({file_size:#x} bytes)"
    )]
    SectionPastEnd {
        /// Which section.
        what: &'static str,
        /// Its start.
        start: u64,
        /// Its end (may have overflowed to `u64::MAX`).
        end: u64,
        /// The file's size.
        file_size: u64,
    },
    /// A record's header size is below the 8 bytes of the header itself.
    #[error("record type {ty} has size {size}, less than its 8-byte header")]
    RecordTooSmall {
        /// The record type.
        ty: u32,
        /// Its size field.
        size: u16,
    },
    /// A record reaches past the end of the data section.
    #[error("record type {ty} of {size} bytes runs past the end of the data ({left} bytes left)")]
    RecordPastEnd {
        /// The record type.
        ty: u32,
        /// Its size (header plus, for AUXTRACE and TRACING_DATA, the data after it).
        size: u64,
        /// Bytes left in the data section.
        left: u64,
    },
    /// A record is too short for its fixed fields (or its sample_id trailer).
    #[error("{record} record of {size} bytes is too short: needs {need}")]
    RecordTooShort {
        /// The record's name.
        record: &'static str,
        /// Its size.
        size: u64,
        /// The size its fields need.
        need: u64,
    },
    /// A count or size inside a record or feature does not fit the space it has.
    #[error("{what}: {count} entries do not fit in {room} bytes")]
    CountOverflow {
        /// Which count.
        what: &'static str,
        /// The count read.
        count: u64,
        /// Bytes available.
        room: u64,
    },
    /// A record's sample id names no event attribute of the file.
    #[error("sample id {id} belongs to no event attribute (attr/id mismatch)")]
    UnknownId {
        /// The id read from the record.
        id: u64,
    },
    /// A record needs an event attribute but the file has none.
    #[error("record needs an event attribute but the file has none")]
    NoAttr,
    /// An attr's size field is below PERF_ATTR_SIZE_VER0 (64) or above its slot.
    #[error("perf_event_attr size {size} is invalid (room {room})")]
    AttrSize {
        /// The attr's size field.
        size: u32,
        /// Bytes the attr may occupy.
        room: u64,
    },
    /// The header's attr entry size is too small for an attr and its id section.
    #[error("attr entry size {0} is too small")]
    AttrEntrySize(u64),
    /// A field of a record or feature holds a value its format does not allow.
    #[error("{0}")]
    Invalid(&'static str),
    /// A record to be written lacks a field that the event's sample_type requires.
    #[error("{record} record lacks {field}, which its event's sample_type requires")]
    MissingField {
        /// The record's name.
        record: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A record to be written does not fit the 16-bit record size.
    #[error("{record} record of {size} bytes does not fit perf's 16-bit record size")]
    TooLarge {
        /// The record's name.
        record: &'static str,
        /// The size it would have.
        size: u64,
    },
    /// An I/O error.
    #[error("I/O error: {0}")]
    Io(std::io::ErrorKind),
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Something unusual that does not stop reading.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warning {
    /// The header's data size is 0: the recording was not finished (perf record killed,
    /// or a writer that never reached a checkpoint). perf reads no records of such a file;
    /// this reader reads records up to the end of the file.
    DataSizeZero {
        /// Where the data starts.
        data_offset: u64,
    },
    /// The data section claimed by the header runs past the end of the file; records are
    /// read up to the end of the file.
    DataPastEnd {
        /// The header's data end.
        claimed_end: u64,
        /// The file's size.
        file_size: u64,
    },
    /// A feature section could not be read (it is skipped, as perf does).
    BadFeature {
        /// The feature's number.
        feature: u16,
        /// Why.
        error: Error,
    },
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::DataSizeZero { data_offset } => write!(
                f,
                "the header's data size is 0 (recording not properly finished); reading records from {data_offset:#x} to the end of the file"
            ),
            Warning::DataPastEnd {
                claimed_end,
                file_size,
            } => write!(
                f,
                "the header's data section ends at {claimed_end:#x}, past the end of the file ({file_size:#x}); reading up to the end"
            ),
            Warning::BadFeature { feature, error } => {
                write!(f, "feature {feature} skipped: {error}")
            }
        }
    }
}

impl From<std::io::Error> for ErrorKind {
    fn from(e: std::io::Error) -> Self {
        ErrorKind::Io(e.kind())
    }
}
