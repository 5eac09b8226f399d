//! `perf script -F`: which fields are printed for which events (perf's
//! `output[]` table and `parse_output_fields`).

/// Field bits (perf's `PERF_OUTPUT_*`).
#[allow(missing_docs)]
pub mod f {
    pub const COMM: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const PID: u64 = 1 << 2;
    pub const TIME: u64 = 1 << 3;
    pub const CPU: u64 = 1 << 4;
    pub const EVNAME: u64 = 1 << 5;
    pub const TRACE: u64 = 1 << 6;
    pub const IP: u64 = 1 << 7;
    pub const SYM: u64 = 1 << 8;
    pub const DSO: u64 = 1 << 9;
    pub const ADDR: u64 = 1 << 10;
    pub const SYMOFFSET: u64 = 1 << 11;
    pub const SRCLINE: u64 = 1 << 12;
    pub const PERIOD: u64 = 1 << 13;
    pub const IREGS: u64 = 1 << 14;
    pub const BRSTACK: u64 = 1 << 15;
    pub const BRSTACKSYM: u64 = 1 << 16;
    pub const DATA_SRC: u64 = 1 << 17;
    pub const WEIGHT: u64 = 1 << 18;
    pub const BPF_OUTPUT: u64 = 1 << 19;
    pub const CALLINDENT: u64 = 1 << 20;
    pub const INSN: u64 = 1 << 21;
    pub const INSNLEN: u64 = 1 << 22;
    pub const BRSTACKINSN: u64 = 1 << 23;
    pub const BRSTACKOFF: u64 = 1 << 24;
    pub const SYNTH: u64 = 1 << 25;
    pub const PHYS_ADDR: u64 = 1 << 26;
    pub const UREGS: u64 = 1 << 27;
    pub const METRIC: u64 = 1 << 28;
    pub const MISC: u64 = 1 << 29;
    pub const SRCCODE: u64 = 1 << 30;
    pub const IPC: u64 = 1 << 31;
    pub const TOD: u64 = 1 << 32;
    pub const DATA_PAGE_SIZE: u64 = 1 << 33;
    pub const CODE_PAGE_SIZE: u64 = 1 << 34;
    pub const INS_LAT: u64 = 1 << 35;
    pub const BRSTACKINSNLEN: u64 = 1 << 36;
    pub const MACHINE_PID: u64 = 1 << 37;
    pub const VCPU: u64 = 1 << 38;
    /// ptperf's own: the source file of the srcline (perf script has no
    /// such field; perf report has it as a sort key).
    pub const SRCFILE: u64 = 1 << 48;
}

/// perf's field names.
pub const NAMES: &[(&str, u64)] = &[
    ("comm", f::COMM),
    ("tid", f::TID),
    ("pid", f::PID),
    ("time", f::TIME),
    ("cpu", f::CPU),
    ("event", f::EVNAME),
    ("trace", f::TRACE),
    ("ip", f::IP),
    ("sym", f::SYM),
    ("dso", f::DSO),
    ("addr", f::ADDR),
    ("symoff", f::SYMOFFSET),
    ("srcline", f::SRCLINE),
    ("period", f::PERIOD),
    ("iregs", f::IREGS),
    ("uregs", f::UREGS),
    ("brstack", f::BRSTACK),
    ("brstacksym", f::BRSTACKSYM),
    ("data_src", f::DATA_SRC),
    ("weight", f::WEIGHT),
    ("bpf-output", f::BPF_OUTPUT),
    ("callindent", f::CALLINDENT),
    ("insn", f::INSN),
    ("insnlen", f::INSNLEN),
    ("brstackinsn", f::BRSTACKINSN),
    ("brstackoff", f::BRSTACKOFF),
    ("synth", f::SYNTH),
    ("phys_addr", f::PHYS_ADDR),
    ("metric", f::METRIC),
    ("misc", f::MISC),
    ("srccode", f::SRCCODE),
    ("ipc", f::IPC),
    ("tod", f::TOD),
    ("data_page_size", f::DATA_PAGE_SIZE),
    ("code_page_size", f::CODE_PAGE_SIZE),
    ("ins_lat", f::INS_LAT),
    ("brstackinsnlen", f::BRSTACKINSNLEN),
    ("machine_pid", f::MACHINE_PID),
    ("vcpu", f::VCPU),
    ("srcfile", f::SRCFILE),
];

/// The fields this tool prints; the others are accepted by perf but not here.
pub const SUPPORTED: u64 = f::COMM
    | f::TID
    | f::PID
    | f::TIME
    | f::CPU
    | f::EVNAME
    | f::IP
    | f::SYM
    | f::DSO
    | f::ADDR
    | f::SYMOFFSET
    | f::SRCLINE
    | f::SRCFILE
    | f::PERIOD
    | f::INSN
    | f::INSNLEN
    | f::SYNTH
    | f::IPC
    | f::CALLINDENT
    | f::BRSTACK;

/// The two output types Intel PT samples fall in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    /// `PERF_TYPE_HARDWARE`: instructions, branches, transactions.
    Hardware = 0,
    /// `PERF_TYPE_SYNTH`: ptwrite, power events, psb, cbr.
    Synth = 1,
}

/// One output type's fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// The fields.
    pub fields: u64,
    /// Set by `-F` (not only added to).
    pub user_set: bool,
    /// Fields the user named.
    pub user_set_fields: u64,
}

/// The field selection of both output types, and `flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    /// By [`OutType`].
    pub out: [Output; 2],
    /// `flags` (perf's `print_flags`).
    pub flags: bool,
}

const DEFAULT_COMMON: u64 =
    f::COMM | f::TID | f::CPU | f::TIME | f::EVNAME | f::IP | f::SYM | f::SYMOFFSET | f::DSO;

impl Default for Selection {
    fn default() -> Self {
        Selection {
            out: [
                Output {
                    fields: DEFAULT_COMMON | f::PERIOD,
                    ..Default::default()
                },
                Output {
                    fields: DEFAULT_COMMON | f::SYNTH,
                    ..Default::default()
                },
            ],
            flags: false,
        }
    }
}

/// A bad `-F`: the message to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadFields(pub String);

impl std::fmt::Display for BadFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadFields {}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Default,
    Set,
    Add,
    Remove,
}

impl Selection {
    /// What perf warns before it applies `-F s` to this selection: a list
    /// that replaces fields someone set already.
    pub fn override_warning(&self, s: &str) -> Option<String> {
        match s.split_once(':') {
            Some((t, _)) => {
                let (t, name) = match t {
                    "hw" | "hardware" => (OutType::Hardware, "hardware"),
                    "synth" => (OutType::Synth, "synth"),
                    _ => return None,
                };
                self.out[t as usize]
                    .user_set
                    .then(|| format!("Overriding previous field request for {name} events."))
            }
            None if s.is_empty() || s.contains(['+', '-']) => None,
            None => self
                .out
                .iter()
                .any(|o| o.user_set)
                .then(|| "Overriding previous field request for all events.".to_string()),
        }
    }

    /// Applies a `-F` string (perf's `parse_output_fields`, for field lists that
    /// apply to every event type, with an optional `hw:`/`synth:` prefix).
    pub fn parse(&mut self, s: &str) -> Result<(), BadFields> {
        let (types, list): (&[OutType], &str) = match s.split_once(':') {
            Some(("hw" | "hardware", rest)) => (&[OutType::Hardware], rest),
            Some(("synth", rest)) => (&[OutType::Synth], rest),
            Some((t, _)) => {
                return Err(BadFields(format!(
                    "Invalid event type in field string: '{t}' (this tool knows hw and synth)"
                )))
            }
            None => (&[OutType::Hardware, OutType::Synth], s),
        };
        if list.is_empty() && types.len() == 2 {
            return Err(BadFields(
                "Cannot set fields to 'none' for all event types.".into(),
            ));
        }
        // A list with no + or - replaces the fields; one with them edits them.
        if !list.contains(['+', '-']) {
            for &t in types {
                let o = &mut self.out[t as usize];
                o.fields = 0;
                o.user_set = true;
            }
        }
        let mut change = Change::Default;
        for tok in list.split(',').filter(|t| !t.is_empty()) {
            let mut tok = tok;
            if let Some(t) = tok.strip_prefix('+') {
                if change == Change::Set {
                    return Err(bad_mix());
                }
                change = Change::Add;
                tok = t;
            } else if let Some(t) = tok.strip_prefix('-') {
                if change == Change::Set {
                    return Err(bad_mix());
                }
                change = Change::Remove;
                tok = t;
            } else {
                if change != Change::Set && change != Change::Default {
                    return Err(bad_mix());
                }
                change = Change::Set;
            }
            if tok == "flags" {
                self.flags = change != Change::Remove;
                continue;
            }
            let Some(&(_, bit)) = NAMES.iter().find(|(n, _)| *n == tok) else {
                return Err(BadFields(format!("Invalid field requested: '{tok}'")));
            };
            if bit & SUPPORTED == 0 {
                return Err(BadFields(format!(
                    "Field '{tok}' is perf's, but ptperf script does not print it yet"
                )));
            }
            for &t in types {
                let o = &mut self.out[t as usize];
                if change == Change::Remove {
                    o.fields &= !bit;
                    o.user_set_fields &= !bit;
                } else {
                    o.fields |= bit;
                    o.user_set_fields |= bit;
                }
                o.user_set = true;
            }
        }
        Ok(())
    }
}

fn bad_mix() -> BadFields {
    BadFields("Cannot mix +-field with overridden fields".into())
}
