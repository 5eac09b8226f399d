//! The event layer: packets → events (libipt's `pt_evt` decoder model).
//!
//! An [`Event`] is what the flow decoders consume: TNT and TIP events drive the
//! instruction flow; the others report what happened (enable/disable, interrupts,
//! paging, timing, power, Event Trace …). Each event carries its timestamp state.

use pt_encoder::ExecMode;

pub mod decoder;
mod queue;

pub use decoder::{EventDecoder, Options};

/// Timing state attached to every event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timestamp {
    /// Estimated TSC at the event, if any timing information is known.
    pub tsc: Option<u64>,
    /// MTC packets that could not be used for time estimation so far.
    pub lost_mtc: u32,
    /// CYC packets that could not be used for time estimation so far.
    pub lost_cyc: u32,
}

/// One event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The event's IP was suppressed (the `ip` fields below are then meaningless).
    pub ip_suppressed: bool,
    /// A status update from PSB+ (not an event that happened at this point).
    pub status_update: bool,
    /// Time at the event.
    pub time: Timestamp,
    /// Trace offset of the packet that produced the event.
    pub offset: u64,
}

impl Event {
    /// The event without its time: what decoders that differ only in their time
    /// calibration have in common (see `BlockDecoder::checkpoint`).
    pub(crate) fn untimed(self) -> Event {
        Event {
            time: Timestamp::default(),
            ..self
        }
    }
}

/// The kinds of events, with their payloads (named as in libipt's `pt_event`; each
/// variant's doc says what its fields mean).
#[allow(missing_docs)]
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Tracing was enabled at `ip` (TIP.PGE; or FUP in PSB+). `resumed`: at the IP where
    /// it was disabled.
    Enabled { ip: u64, resumed: bool },
    /// Tracing was disabled (TIP.PGD) after a branch to `ip`.
    Disabled { ip: u64 },
    /// Tracing was disabled asynchronously at `at` (FUP+TIP.PGD); `ip` is the target.
    AsyncDisabled { at: u64, ip: u64 },
    /// Asynchronous branch (interrupt, exception, …) from `from` to `to` (FUP+TIP).
    AsyncBranch { from: u64, to: u64 },
    /// CR3 changed (PIP) at the next branch.
    Paging { cr3: u64, non_root: bool },
    /// CR3 changed asynchronously at `ip`.
    AsyncPaging { cr3: u64, non_root: bool, ip: u64 },
    /// Internal buffer overflow; tracing resumes at `ip`.
    Overflow { ip: u64 },
    /// Execution mode changed (MODE.Exec).
    ExecMode { mode: ExecMode, ip: u64 },
    /// Transaction state (MODE.TSX + FUP).
    Tsx {
        ip: u64,
        speculative: bool,
        aborted: bool,
    },
    /// Tracing stopped (TraceStop).
    Stop,
    /// VMCS base changed at the next branch.
    Vmcs { base: u64 },
    /// VMCS base changed asynchronously at `ip`.
    AsyncVmcs { base: u64, ip: u64 },
    /// Execution stopped (EXSTOP).
    Exstop { ip: u64 },
    /// MWAIT.
    Mwait { ip: u64, hints: u32, ext: u32 },
    /// Power entry.
    Pwre { state: u8, sub_state: u8, hw: bool },
    /// Power exit.
    Pwrx {
        last: u8,
        deepest: u8,
        interrupt: bool,
        store: bool,
        autonomous: bool,
    },
    /// PTWRITE of `payload` (`size` bytes) at `ip`.
    Ptwrite { ip: u64, size: u8, payload: u64 },
    /// Timing packet seen at `ip` (only when tick events are requested).
    Tick { ip: u64 },
    /// Core:bus ratio.
    Cbr { ratio: u16 },
    /// Maintenance packet.
    Mnt { payload: u64 },
    /// Indirect branch target (TIP).
    Tip { ip: u64 },
    /// Conditional branch results: `size` bits, oldest in bit `size-1`.
    Tnt { bits: u64, size: u8 },
    /// Interrupt flag changed (Event Trace MODE.Exec IF).
    Iflags { iflag: bool, ip: u64 },
    /// Interrupt or exception (CFE INTR), with CR2 for page faults.
    Interrupt {
        vector: u8,
        cr2: Option<u64>,
        ip: u64,
    },
    /// IRET.
    Iret { ip: u64 },
    /// SMI.
    Smi { ip: u64 },
    /// RSM.
    Rsm { ip: u64 },
    /// SIPI with its vector.
    Sipi { vector: u8 },
    /// INIT.
    Init { ip: u64 },
    /// VM entry.
    Vmentry { ip: u64 },
    /// VM exit, with the vector, exit reason and qualification where known.
    Vmexit {
        vector: Option<u8>,
        vmxr: Option<u64>,
        vmxq: Option<u64>,
        ip: u64,
    },
    /// Shutdown.
    Shutdown { ip: u64 },
    /// User interrupt.
    Uintr { vector: u8, ip: u64 },
    /// UIRET.
    Uiret { ip: u64 },
    /// Trigger.
    Trig {
        trbv: u8,
        icnt: u16,
        ip: u64,
        mult: bool,
    },
    /// Software interrupt (FRED).
    Swintr { vector: u8, ip: u64 },
    /// SYSCALL (FRED).
    Syscall { ip: u64 },
}

impl EventKind {
    /// The IP the event's binding packet gave it (a FUP's or a TIP's): where it
    /// happened, or for a branch where it went (`AsyncBranch`: `to`; `AsyncDisabled`:
    /// `ip`). `None` for the kinds without an IP. Meaningless when the event's IP is
    /// suppressed.
    pub fn ip(&self) -> Option<u64> {
        let mut copy = *self;
        copy.ip_field().copied()
    }

    /// Sets the IP that [`ip`](Self::ip) returns (nothing for the kinds without one).
    pub fn set_ip(&mut self, value: u64) {
        if let Some(ip) = self.ip_field() {
            *ip = value;
        }
    }

    /// The field [`ip`](Self::ip) reads and [`set_ip`](Self::set_ip) writes: the one
    /// list of which kinds carry an IP.
    fn ip_field(&mut self) -> Option<&mut u64> {
        use EventKind::*;
        match self {
            Enabled { ip, .. }
            | Disabled { ip }
            | AsyncDisabled { ip, .. }
            | AsyncPaging { ip, .. }
            | Overflow { ip }
            | ExecMode { ip, .. }
            | Tsx { ip, .. }
            | AsyncVmcs { ip, .. }
            | Exstop { ip }
            | Mwait { ip, .. }
            | Ptwrite { ip, .. }
            | Tick { ip }
            | Tip { ip }
            | Iflags { ip, .. }
            | Interrupt { ip, .. }
            | Iret { ip }
            | Smi { ip }
            | Rsm { ip }
            | Init { ip }
            | Vmentry { ip }
            | Vmexit { ip, .. }
            | Shutdown { ip }
            | Uintr { ip, .. }
            | Uiret { ip }
            | Trig { ip, .. }
            | Swintr { ip, .. }
            | Syscall { ip } => Some(ip),
            AsyncBranch { to, .. } => Some(to),
            Paging { .. }
            | Stop
            | Vmcs { .. }
            | Pwre { .. }
            | Pwrx { .. }
            | Cbr { .. }
            | Mnt { .. }
            | Tnt { .. }
            | Sipi { .. } => None,
        }
    }
}
