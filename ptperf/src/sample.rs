//! Samples.

/// perf's sample flags (`PERF_IP_FLAG_*`).
#[allow(missing_docs)]
pub mod flags {
    pub const BRANCH: u32 = 1 << 0;
    pub const CALL: u32 = 1 << 1;
    pub const RETURN: u32 = 1 << 2;
    pub const CONDITIONAL: u32 = 1 << 3;
    pub const SYSCALLRET: u32 = 1 << 4;
    pub const ASYNC: u32 = 1 << 5;
    pub const INTERRUPT: u32 = 1 << 6;
    pub const TX_ABORT: u32 = 1 << 7;
    pub const TRACE_BEGIN: u32 = 1 << 8;
    pub const TRACE_END: u32 = 1 << 9;
    pub const IN_TX: u32 = 1 << 10;
    pub const VMENTRY: u32 = 1 << 11;
    pub const VMEXIT: u32 = 1 << 12;
    pub const INTR_DISABLE: u32 = 1 << 13;
    pub const INTR_TOGGLE: u32 = 1 << 14;
}
