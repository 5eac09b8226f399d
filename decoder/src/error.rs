//! Error codes shared by all decoder layers, and the status flags the event-driven
//! decoders return with every step.

/// What went wrong. The variants mirror libipt's `pte_*` codes so that tools can print
/// the same messages; [`ErrorCode::message`] gives libipt's wording.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Internal error.
    Internal,
    /// Invalid argument.
    Invalid,
    /// Decoder out of sync.
    NoSync,
    /// Unknown opcode.
    BadOpcode,
    /// Unknown packet (bad payload or reserved encoding).
    BadPacket,
    /// Unexpected packet context.
    BadContext,
    /// Reached end of trace stream.
    Eos,
    /// Trace stream does not match query.
    BadQuery,
    /// Out of memory.
    NoMem,
    /// Bad configuration.
    BadConfig,
    /// No IP.
    NoIp,
    /// IP has been suppressed.
    IpSuppressed,
    /// No memory mapped at this address.
    NoMap,
    /// Unknown instruction.
    BadInsn,
    /// No timing information.
    NoTime,
    /// No core:bus ratio.
    NoCbr,
    /// Bad image.
    BadImage,
    /// Locking error.
    BadLock,
    /// Not supported.
    NotSupported,
    /// Compressed return without call.
    RetstackEmpty,
    /// Bad compressed return.
    BadRetcomp,
    /// Bad status update.
    BadStatusUpdate,
    /// Expected tracing enabled event.
    NoEnable,
    /// Event ignored. libipt's code for "take the pending event first"; this crate's
    /// decoders say that with a status instead (e.g. [`crate::flow::Progress`]) and never
    /// return it.
    EventIgnored,
    /// Overflow.
    Overflow,
    /// Bad file.
    BadFile,
    /// Unknown cpu.
    BadCpu,
    /// The trace ends inside a packet (not libipt's: it ends the decode there without
    /// an error). Reported with [`crate::Resync::Recover`].
    Truncated,
    /// A hole in the trace: a long run of zero bytes (trace overwritten or never
    /// written) in the middle of the trace (not libipt's). Reported with
    /// [`crate::Resync::Recover`].
    Hole,
    /// The flow ran on for too many instructions without using any trace: an endless
    /// loop that no valid trace can hold (not libipt's, which decodes it forever). See
    /// [`crate::DecoderBuilder::runaway_limit`].
    Runaway,
}

impl ErrorCode {
    /// libipt's `pt_errstr` text for this code.
    pub const fn message(self) -> &'static str {
        match self {
            Self::Internal => "internal error",
            Self::Invalid => "invalid argument",
            Self::NoSync => "decoder out of sync",
            Self::BadOpcode => "unknown opcode",
            Self::BadPacket => "unknown packet",
            Self::BadContext => "unexpected packet context",
            Self::Eos => "reached end of trace stream",
            Self::BadQuery => "trace stream does not match query",
            Self::NoMem => "out of memory",
            Self::BadConfig => "bad configuration",
            Self::NoIp => "no ip",
            Self::IpSuppressed => "ip has been suppressed",
            Self::NoMap => "no memory mapped at this address",
            Self::BadInsn => "unknown instruction",
            Self::NoTime => "no timing information",
            Self::NoCbr => "no core:bus ratio",
            Self::BadImage => "bad image",
            Self::BadLock => "locking error",
            Self::NotSupported => "not supported",
            Self::RetstackEmpty => "compressed return without call",
            Self::BadRetcomp => "bad compressed return",
            Self::BadStatusUpdate => "bad status update",
            Self::NoEnable => "expected tracing enabled event",
            Self::EventIgnored => "event ignored",
            Self::Overflow => "overflow",
            Self::BadFile => "bad file",
            Self::BadCpu => "unknown cpu",
            Self::Truncated => "trace ends inside a packet",
            Self::Hole => "hole in the trace",
            Self::Runaway => "too many instructions without trace",
        }
    }
}

impl core::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ErrorCode {}

/// A decoding error at a trace offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{offset:#x}: {code}")]
pub struct DecodeError {
    /// What went wrong.
    pub code: ErrorCode,
    /// Byte offset in the trace where the failing packet starts.
    pub offset: u64,
}

/// What the caller of an event-driven decoder (the query and flow decoders) should do
/// next: libipt's `pts_*` status bits, returned with every step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Status {
    /// An event is pending: take it (`event()`) before the next step.
    pub event_pending: bool,
    /// The IP is suppressed: tracing is disabled, so where execution goes on is not
    /// known.
    pub ip_suppressed: bool,
    /// The trace ends here (while no event is pending).
    pub eos: bool,
}

impl Status {
    /// libipt's bit encoding (`pts_event_pending` = 1, `pts_ip_suppressed` = 2,
    /// `pts_eos` = 4).
    pub const fn bits(self) -> u32 {
        (self.event_pending as u32) | (self.ip_suppressed as u32) << 1 | (self.eos as u32) << 2
    }
}
