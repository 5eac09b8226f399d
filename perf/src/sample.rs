//! Samples synthesized from an Intel PT trace, as perf's intel-pt.c synthesizes
//! them (`struct perf_sample` with the fields intel-pt.c fills in), and perf's
//! sample flags.
//!
//! [`crate::synth`] produces them; `ptperf script` prints them, exporters store
//! them. A [`Sample`] is a small `Copy` value: a consumer that keeps samples copies
//! the ones it wants.

/// perf's sample flags (`PERF_IP_FLAG_*`, include/uapi/linux/perf_event.h and
/// tools/perf/util/event.h): what kind of branch a sample is. This module is the
/// one owner of these constants in the workspace.
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

    /// perf's one-letter names of the flag bits, lowest bit first
    /// (`PERF_IP_FLAG_CHARS`).
    pub const CHARS: &[u8] = b"bcrosyiABExghDt";

    /// The names `perf script -F flags` gives the usual combinations.
    const NAMES: &[(u32, &str)] = &[
        (BRANCH | CALL, "call"),
        (BRANCH | RETURN, "return"),
        (BRANCH | CONDITIONAL, "jcc"),
        (BRANCH, "jmp"),
        (BRANCH | CALL | INTERRUPT, "int"),
        (BRANCH | RETURN | INTERRUPT, "iret"),
        (BRANCH | CALL | SYSCALLRET, "syscall"),
        (BRANCH | RETURN | SYSCALLRET, "sysret"),
        (BRANCH | ASYNC, "async"),
        (BRANCH | CALL | ASYNC | INTERRUPT, "hw int"),
        (BRANCH | TX_ABORT, "tx abrt"),
        (BRANCH | TRACE_BEGIN, "tr strt"),
        (BRANCH | TRACE_END, "tr end"),
        (BRANCH | CALL | VMENTRY, "vmentry"),
        (BRANCH | CALL | VMEXIT, "vmexit"),
    ];

    /// The name of exactly these flags, if perf has one.
    pub fn name(f: u32) -> Option<&'static str> {
        NAMES.iter().find(|&&(x, _)| x == f).map(|&(_, n)| n)
    }

    /// The flags as `perf script -F flags` writes them (perf's
    /// `perf_sample__sprintf_flags`, without the padding around it).
    pub fn to_string(f: u32) -> String {
        let xf = IN_TX | INTR_DISABLE | INTR_TOGGLE;
        let xs = if f & xf != 0 {
            format!(
                "({}{}{})",
                if f & IN_TX != 0 { "x" } else { "" },
                if f & INTR_DISABLE != 0 { "D" } else { "" },
                if f & INTR_TOGGLE != 0 { "t" } else { "" }
            )
        } else {
            String::new()
        };
        if let Some(n) = name(f & !xf) {
            return format!("{n:<15}{xs:>6}");
        }
        if f & TRACE_BEGIN != 0 {
            if let Some(n) = name(f & !(xf | TRACE_BEGIN)) {
                return format!("tr strt {n:<7}{xs:>6}");
            }
        }
        if f & TRACE_END != 0 {
            if let Some(n) = name(f & !(xf | TRACE_END)) {
                return format!("tr end  {n:<7}{xs:>6}");
            }
        }
        let mut s = String::new();
        for i in 0..32 {
            if f & (1 << i) != 0 {
                s.push(CHARS.get(i).map_or('?', |&c| c as char));
            }
        }
        s
    }
}

/// The kind of a synthesized sample: which of perf's synthesized events it
/// belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `instructions` (`--itrace=i`).
    Instructions,
    /// `branches` (`--itrace=b`, `c`, `r`).
    Branches,
    /// `transactions` (`--itrace=x`).
    Transactions,
    /// `ptwrite` (`--itrace=w`).
    Ptwrite,
    /// `cbr`: a core-to-bus ratio change (`--itrace=p`).
    Cbr,
    /// `psb`: a PSB (`--itrace=p`).
    Psb,
    /// `mwait` (`--itrace=p`).
    Mwait,
    /// `pwre` (`--itrace=p`).
    Pwre,
    /// `exstop` (`--itrace=p`).
    Exstop,
    /// `pwrx` (`--itrace=p`).
    Pwrx,
    /// Not synthesized: a PERF_RECORD_SAMPLE of the recording (`perf record
    /// -e cycles`, `perf inject --itrace`'s output), of the event at this
    /// index of the file's events ([`crate::recorded`]).
    Recorded(u16),
}

impl Kind {
    /// perf's event name (without modifiers).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Instructions => "instructions",
            Kind::Branches => "branches",
            Kind::Transactions => "transactions",
            Kind::Ptwrite => "ptwrite",
            Kind::Cbr => "cbr",
            Kind::Psb => "psb",
            Kind::Mwait => "mwait",
            Kind::Pwre => "pwre",
            Kind::Exstop => "exstop",
            Kind::Pwrx => "pwrx",
            Kind::Recorded(_) => "recorded",
        }
    }

    /// Whether perf synthesizes it as a `PERF_TYPE_SYNTH` event (with raw data;
    /// false for a recorded sample).
    pub fn is_synth(self) -> bool {
        !matches!(
            self,
            Kind::Instructions | Kind::Branches | Kind::Transactions | Kind::Recorded(_)
        )
    }
}

/// One synthesized sample (perf's `struct perf_sample` as intel-pt.c fills it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Which event.
    pub kind: Kind,
    /// The instruction (for a branch: its source; 0 for a trace begin).
    pub ip: u64,
    /// A branch's target (0 for a trace end).
    pub addr: u64,
    /// [`flags`] bits.
    pub flags: u32,
    /// perf time (ns), `None` when decoding without timestamps.
    pub time: Option<u64>,
    /// The TSC the time comes from.
    pub tsc: u64,
    /// CPU (-1: unknown, per-thread recordings).
    pub cpu: i32,
    /// Process (-1: unknown).
    pub pid: i32,
    /// Thread (-1: unknown).
    pub tid: i32,
    /// Instructions since the last sample of this kind (perf's period).
    pub period: u64,
    /// Instructions for IPC (0: none).
    pub insn_cnt: u64,
    /// Cycles for IPC (0: none).
    pub cyc_cnt: u64,
    /// Length of the branch instruction (0: not known).
    pub insn_len: u8,
    /// Its bytes.
    pub insn: [u8; 16],
    /// The event's raw payload: CBR (ratio), PSB (offset), PTWRITE (payload),
    /// MWAIT/PWRE/PWRX payloads.
    pub payload: u64,
    /// PTWRITE: the FUP's IP is the PTWRITE's. CBR: the maximum non-turbo ratio.
    pub aux: u32,
    /// The thread's call depth after this branch (perf's `thread_stack__depth`;
    /// kept only when a thread stack is, e.g. for `-F callindent`).
    pub depth: u32,
    /// Where the sample came from: the queue's index in the session.
    pub queue: u32,
    /// The code image (`pt_decoder::image::Image::stamp`) the thread ran when
    /// sampled: addresses of samples with the same stamp resolve the same way.
    pub code: u64,
}

/// A decoder error, as perf reports it (`PERF_RECORD_AUXTRACE_ERROR` of type
/// "instruction trace").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// perf's error code (`INTEL_PT_ERR_*`).
    pub code: u32,
    /// perf's message.
    pub msg: &'static str,
    /// CPU (-1: unknown).
    pub cpu: i32,
    /// Process (-1: unknown).
    pub pid: i32,
    /// Thread (-1: unknown).
    pub tid: i32,
    /// Where (0: unknown).
    pub ip: u64,
    /// perf time (ns; 0 when decoding without timestamps).
    pub time: u64,
    /// The queue's index in the session.
    pub queue: u32,
}

#[cfg(test)]
mod tests {
    use super::flags::*;

    #[test]
    fn flag_strings_are_perfs() {
        // perf: "%-15s%6s" (name, extra flags), or "tr strt %-7s%6s".
        assert_eq!(to_string(BRANCH | CALL), format!("{:<21}", "call"));
        assert_eq!(
            to_string(BRANCH | TRACE_BEGIN),
            format!("{:<21}", "tr strt")
        );
        assert_eq!(
            to_string(BRANCH | CALL | SYSCALLRET | TRACE_END),
            format!("{:<21}", "tr end  syscall")
        );
        assert_eq!(
            to_string(BRANCH | CONDITIONAL | IN_TX),
            format!("{:<15}{:>6}", "jcc", "(x)")
        );
        assert_eq!(to_string(BRANCH | CALL | RETURN), "bcr");
    }
}
