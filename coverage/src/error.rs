//! The coverage layer's errors.

use pt_decoder::ErrorCode;

/// What went wrong (see [`CoverageError`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The packet layer failed (a damaged or truncated packet, no PSB, …).
    #[error("trace: {0}")]
    Trace(ErrorCode),
    /// No code is mapped at the IP (and the page-fetch callback had none).
    #[error("no code at the IP")]
    NoMap,
    /// The bytes at the IP are not a valid instruction.
    #[error("invalid instruction")]
    BadInsn,
    /// The trace does not match the code: a TNT bit where the code needs a TIP, or
    /// the other way round, or a not-taken compressed return.
    #[error("trace does not match the code")]
    Mismatch,
    /// A compressed return with no call on the return stack.
    #[error("compressed return with an empty return stack")]
    EmptyReturnStack,
    /// Straight-line code through direct jumps went on for too long without needing
    /// trace (a `jmp .` loop, or runaway decoding of data).
    #[error("runaway walk without trace")]
    Runaway,
}

/// An error met while decoding coverage: the edges found before it are kept, and
/// decoding goes on at the next PSB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at offset {offset:#x}, ip {ip:#x}")]
pub struct CoverageError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The trace offset of the packet being decoded.
    pub offset: u64,
    /// The instruction address concerned (0 if none).
    pub ip: u64,
}

impl From<ErrorCode> for ErrorKind {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::NoMap => ErrorKind::NoMap,
            ErrorCode::BadInsn => ErrorKind::BadInsn,
            ErrorCode::BadQuery => ErrorKind::Mismatch,
            other => ErrorKind::Trace(other),
        }
    }
}
