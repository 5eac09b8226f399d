//! The `@sb` directives: side-band streams written next to the trace, one `.sb` file per
//! stream, as libipt's pttc writes them.
//!
//! `@sb primary(fmt[, src])` and `@sb secondary(fmt[, src])` open (or switch back to) the
//! stream `<root>-[<src>-]<fmt>-<prio>.sb`; the directives after it write to that stream.
//! `raw-8/16/32/64(value)` append bytes; the `pevent-*` directives append one perf_event
//! record each (encoded by [`pt_perf_data::records::encode_record`], the project's one
//! writer of perf's record formats), followed by the sample_id fields that
//! `pevent-sample_type(...)` selected (given after the record's own arguments).
//!
//! A pevent stream's configuration is encoded in its final file name, from which libipt's
//! test script derives the tools' `--pevent:*` options:
//! `<root>-[<src>-]pevent-<prio>,sample-type=0x..,time-zero=0x..,time-shift=0x..,time-mult=0x...sb`.
//! pttc has no directive to set the time conversion, so it is always zero/0/1 (perf time
//! equals the TSC value).

use pt_perf_data::records::encode_record;
use pt_perf_data::{
    misc, AttrFlags, Aux, AuxFlags, CStr, Comm, EventAttr, EventDesc, EventTable, ItraceStart,
    Lost, LostSamples, Mmap, Record, SampleId, SampleType, Switch, SwitchCpuWide, Task,
};

use crate::cstr::{token_to_uint, NumError, Strtok};
use crate::labels::Labels;

const DELIMS: &str = " ,";

/// The format of a side-band stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// Only raw directives so far.
    Raw,
    /// perf_event records with this configuration.
    Pevent(PeventConfig),
}

/// A pevent stream's configuration (libipt's `struct pev_config`, the parts pttc sets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeventConfig {
    /// The sample_id fields every record carries (PERF_SAMPLE_* bits).
    pub sample_type: u64,
    /// perf time at TSC 0.
    pub time_zero: u64,
    /// TSC to perf time: shift.
    pub time_shift: u16,
    /// TSC to perf time: multiplier.
    pub time_mult: u32,
    /// A record was written: the configuration can no longer change.
    pub is_final: bool,
}

impl Default for PeventConfig {
    fn default() -> Self {
        Self {
            sample_type: 0,
            time_zero: 0,
            time_shift: 0,
            time_mult: 1,
            is_final: false,
        }
    }
}

impl PeventConfig {
    /// perf time from a TSC value (libipt's `pev_time_from_tsc`).
    pub fn time_from_tsc(&self, tsc: u64) -> u64 {
        let shift = u32::from(self.time_shift);
        let mult = u64::from(self.time_mult);
        let quot = tsc.checked_shr(shift).unwrap_or(0);
        let rem = tsc & 1u64.checked_shl(shift).map_or(u64::MAX, |m| m - 1);
        let quot = quot.wrapping_mul(mult);
        let rem = rem.wrapping_mul(mult).checked_shr(shift).unwrap_or(0);
        self.time_zero.wrapping_add(quot).wrapping_add(rem)
    }
}

/// One side-band stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbFile {
    /// The name it is opened under: `<root>-[<src>-]<fmt>-<prio>.sb`.
    pub name: String,
    /// Its format.
    pub format: Format,
    /// Its content.
    pub bytes: Vec<u8>,
}

impl SbFile {
    /// The name the file is left under: for pevent streams the configuration is appended
    /// before `.sb`, as pttc does.
    pub fn final_name(&self) -> String {
        match &self.format {
            Format::Raw => self.name.clone(),
            Format::Pevent(c) => {
                let base = self.name.strip_suffix(".sb").unwrap_or(&self.name);
                // pttc prints the shift and multiplier with "0x%u".
                format!(
                    "{base},sample-type={:#x},time-zero={:#x},time-shift=0x{},time-mult=0x{}.sb",
                    c.sample_type, c.time_zero, c.time_shift, c.time_mult
                )
            }
        }
    }
}

/// All side-band streams of a .ptt file and the one directives write to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sideband {
    /// The streams in the order they were opened.
    pub files: Vec<SbFile>,
    current: Option<usize>,
}

/// A side-band directive refused, in pttc's words (pttc's messages are free
/// text: which argument is missing or bad, which record could not be written).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SidebandError(String);

fn num(token: &str, bits: u32, what: &str) -> Result<u64, String> {
    token_to_uint(token, bits).map_err(|e| match e {
        NumError::Parse => format!("bad {what}"),
        NumError::TooBig => format!("bad {what} (too big)"),
    })
}

/// The next argument of a directive, or "`what` missing".
fn arg<'a>(t: &mut Strtok<'a>, what: &str) -> Result<&'a str, String> {
    t.next_token(DELIMS)
        .ok_or_else(|| format!("{what} missing"))
}

impl Sideband {
    /// The offset of the next byte in the current stream (for `@sb` labels).
    pub fn offset(&self) -> Result<u64, SidebandError> {
        self.current
            .map(|i| self.files[i].bytes.len() as u64)
            .ok_or_else(|| SidebandError("no sideband file".into()))
    }

    /// The streams in the order pttc prints their names (last opened first).
    pub fn printed(&self) -> impl Iterator<Item = &SbFile> {
        self.files.iter().rev()
    }

    fn open(&mut self, root: &str, fmt: &str, src: Option<&str>, prio: &str) {
        let name = match src {
            Some(src) if !src.is_empty() => format!("{root}-{src}-{fmt}-{prio}.sb"),
            _ => format!("{root}-{fmt}-{prio}.sb"),
        };
        let i = match self.files.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.files.push(SbFile {
                    name,
                    format: Format::Raw,
                    bytes: Vec::new(),
                });
                self.files.len() - 1
            }
        };
        self.current = Some(i);
    }

    fn current(&mut self) -> Result<&mut SbFile, String> {
        match self.current {
            Some(i) => Ok(&mut self.files[i]),
            None => Err("no sideband file".into()),
        }
    }

    fn pevent_config(&mut self) -> Result<&mut PeventConfig, String> {
        let sb = self.current()?;
        if sb.format == Format::Raw {
            sb.format = Format::Pevent(PeventConfig::default());
        }
        match &mut sb.format {
            Format::Pevent(c) => Ok(c),
            Format::Raw => unreachable!("set above"),
        }
    }

    /// Process one `@sb` directive (`name` without its label) with its `payload`.
    /// `root` names the files; `labels` give sections and `org` for
    /// `pevent-mmap-section`, whose file name is `<root>.bin`.
    pub fn process(
        &mut self,
        name: &str,
        payload: &str,
        root: &str,
        labels: &Labels,
    ) -> Result<(), SidebandError> {
        self.directive(name, payload, root, labels)
            .map_err(SidebandError)
    }

    fn directive(
        &mut self,
        name: &str,
        payload: &str,
        root: &str,
        labels: &Labels,
    ) -> Result<(), String> {
        let mut t = Strtok::new(payload);
        match name {
            "primary" | "secondary" => {
                let fmt = t
                    .next_token(DELIMS)
                    .ok_or_else(|| format!("{name} - format missing"))?;
                let src = t.next_token(" ");
                self.open(root, fmt, src, name);
                Ok(())
            }
            "raw-8" | "raw-16" | "raw-32" | "raw-64" => {
                let bits: u32 = name[4..].parse().expect("one of the names above");
                let token = t.next_token(DELIMS).ok_or("missing argument")?;
                let v = num(token, bits, "value")?;
                let bytes = v.to_le_bytes();
                self.current()?
                    .bytes
                    .extend_from_slice(&bytes[..bits as usize / 8]);
                Ok(())
            }
            "pevent-sample_type" => {
                let mut st = 0u64;
                let first = Strtok::new(payload).next_token(DELIMS);
                while let Some(token) = t.next_token(DELIMS) {
                    st |= match token {
                        "tid" => SampleType::TID,
                        "time" => SampleType::TIME,
                        "id" => SampleType::ID,
                        "stream" => SampleType::STREAM_ID,
                        "cpu" => SampleType::CPU,
                        "identifier" => SampleType::IDENTIFIER,
                        // pttc parses the payload's first token here, whichever token
                        // it is at.
                        _ => num(first.unwrap_or(""), 64, token)?,
                    };
                }
                let c = self.pevent_config()?;
                if c.is_final {
                    return Err("the sideband configuration can no longer be modified".into());
                }
                c.sample_type = st;
                Ok(())
            }
            _ => self.pevent(name, payload, &mut t, root, labels),
        }
    }

    fn pevent<'a>(
        &mut self,
        name: &str,
        payload: &'a str,
        t: &mut Strtok<'a>,
        root: &str,
        labels: &Labels,
    ) -> Result<(), String> {
        let u32_ = |s: &str, what: &str| num(s, 32, what).map(|v| v as u32);
        let u64_ = |s: &str, what: &str| num(s, 64, what);
        let binfile = format!("{root}.bin");
        // Records' own fields; the sample_id is filled in below.
        let mut record = match name {
            "pevent-mmap-section" => {
                let section = arg(t, "section")?;
                let pid = u32_(arg(t, "pid")?, "pevent-mmap-section - pid")?;
                let tid = u32_(arg(t, "tid")?, "pevent-mmap-section - tid")?;
                let label = |attr: &str| {
                    labels
                        .asm(&format!("section_{section}_{attr}"))
                        .ok_or_else(|| {
                            format!("pevent-mmap-section - section {attr} (no such label)")
                        })
                };
                let (start, len, file_start) =
                    (label("vstart")?, label("length")?, label("start")?);
                let org = labels
                    .asm("org")
                    .ok_or("pevent-mmap-section - org (no such label)")?;
                if file_start < org {
                    return Err("corrupt section labels".into());
                }
                Record::Mmap(Mmap {
                    pid,
                    tid,
                    start,
                    len,
                    pgoff: file_start - org,
                    filename: CStr(binfile.as_bytes()),
                    ..Default::default()
                })
            }
            "pevent-mmap" => {
                let pid = u32_(arg(t, "pid")?, "pevent-mmap - pid")?;
                let tid = u32_(arg(t, "tid")?, "pevent-mmap - tid")?;
                let start = u64_(arg(t, "addr")?, "pevent-mmap - addr")?;
                let len = u64_(arg(t, "len")?, "pevent-mmap - len")?;
                let pgoff = u64_(arg(t, "pgoff")?, "pevent-mmap - pgoff")?;
                let filename = arg(t, "filename")?;
                Record::Mmap(Mmap {
                    pid,
                    tid,
                    start,
                    len,
                    pgoff,
                    filename: CStr(filename.as_bytes()),
                    ..Default::default()
                })
            }
            "pevent-lost" => Record::Lost(Lost {
                id: u64_(arg(t, "id")?, "pevent-lost - id")?,
                lost: u64_(arg(t, "lost")?, "pevent-lost - lost")?,
                ..Default::default()
            }),
            "pevent-comm" | "pevent-comm.exec" => Record::Comm(Comm {
                misc: if name == "pevent-comm.exec" {
                    misc::COMM_EXEC
                } else {
                    0
                },
                pid: u32_(arg(t, "pid")?, "pevent-comm - pid")?,
                tid: u32_(arg(t, "tid")?, "pevent-comm - tid")?,
                comm: CStr(arg(t, "comm")?.as_bytes()),
                ..Default::default()
            }),
            "pevent-exit" | "pevent-fork" => {
                let task = Task {
                    pid: u32_(arg(t, "pid")?, &format!("{name} - pid"))?,
                    ppid: u32_(arg(t, "ppid")?, &format!("{name} - ppid"))?,
                    tid: u32_(arg(t, "tid")?, &format!("{name} - tid"))?,
                    ptid: u32_(arg(t, "ptid")?, &format!("{name} - ptid"))?,
                    time: u64_(arg(t, "time")?, &format!("{name} - time"))?,
                    ..Default::default()
                };
                if name == "pevent-exit" {
                    Record::Exit(task)
                } else {
                    Record::Fork(task)
                }
            }
            "pevent-aux" => Record::Aux(Aux {
                aux_offset: u64_(arg(t, "offset")?, "pevent-aux - offset")?,
                aux_size: u64_(arg(t, "size")?, "pevent-aux - size")?,
                flags: AuxFlags(u64_(arg(t, "flags")?, "pevent-aux - flags")?),
                ..Default::default()
            }),
            "pevent-itrace-start" => Record::ItraceStart(ItraceStart {
                pid: u32_(arg(t, "pid")?, "pevent-itrace-start - pid")?,
                tid: u32_(arg(t, "tid")?, "pevent-itrace-start - tid")?,
                ..Default::default()
            }),
            "pevent-lost-samples" => Record::LostSamples(LostSamples {
                lost: u64_(arg(t, "lost")?, "pevent-lost-samples - lost")?,
                ..Default::default()
            }),
            "pevent-switch.in" | "pevent-switch.out" => {
                // The samples start at the payload's beginning.
                *t = Strtok::new(payload);
                Record::Switch(Switch {
                    misc: if name.ends_with(".out") {
                        misc::SWITCH_OUT
                    } else {
                        0
                    },
                    ..Default::default()
                })
            }
            "pevent-switch-cpu-wide.in" | "pevent-switch-cpu-wide.out" => {
                Record::SwitchCpuWide(SwitchCpuWide {
                    misc: if name.ends_with(".out") {
                        misc::SWITCH_OUT
                    } else {
                        0
                    },
                    next_prev_pid: u32_(arg(t, "pid")?, "pevent-switch-cpu-wide - next_prev_pid")?,
                    next_prev_tid: u32_(arg(t, "tid")?, "pevent-switch-cpu-wide - next_prev_tid")?,
                    ..Default::default()
                })
            }
            _ => return Err("syntax error (unknown directive)".into()),
        };
        let config = *self.pevent_config()?;
        let sample_id = samples(t, &config)?;
        match &mut record {
            Record::Mmap(r) => r.sample_id = sample_id,
            Record::Lost(r) => r.sample_id = sample_id,
            Record::Comm(r) => r.sample_id = sample_id,
            Record::Exit(r) | Record::Fork(r) => r.sample_id = sample_id,
            Record::Aux(r) => r.sample_id = sample_id,
            Record::ItraceStart(r) => r.sample_id = sample_id,
            Record::LostSamples(r) => r.sample_id = sample_id,
            Record::Switch(r) => r.sample_id = sample_id,
            Record::SwitchCpuWide(r) => r.sample_id = sample_id,
            _ => unreachable!("only the records above are built"),
        }
        if config.sample_type & !SampleType::ID_ALL_BITS != 0 {
            return Err(format!(
                "error writing pevent sample: sample type {:#x} has fields no side-band \
                 record carries",
                config.sample_type
            ));
        }
        let events = EventTable::new(vec![EventDesc {
            attr: EventAttr {
                sample_type: SampleType(config.sample_type),
                flags: AttrFlags(AttrFlags::SAMPLE_ID_ALL),
                ..Default::default()
            },
            ids: Vec::new(),
            name: None,
        }]);
        let sb = self.current()?;
        encode_record(&record, &events, &mut sb.bytes)
            .map_err(|e| format!("error writing pevent sample: {e}"))?;
        if let Format::Pevent(c) = &mut sb.format {
            c.is_final = true;
        }
        Ok(())
    }
}

/// The sample_id fields after a record's arguments, in PERF_SAMPLE_* order: `pid tid`
/// (tid), `tsc` (time; converted to perf time), `id`, `cpu`, `stream`, `identifier`.
fn samples(t: &mut Strtok<'_>, config: &PeventConfig) -> Result<SampleId, String> {
    let st = config.sample_type;
    let mut s = SampleId::default();
    if st & SampleType::TID != 0 {
        s.pid = Some(num(arg(t, "pid")?, 32, "pid")? as u32);
        s.tid = Some(num(arg(t, "tid")?, 32, "tid")? as u32);
    }
    if st & SampleType::TIME != 0 {
        let tsc = num(arg(t, "tsc")?, 64, "tsc")?;
        s.time = Some(config.time_from_tsc(tsc));
    }
    if st & SampleType::ID != 0 {
        s.id = Some(num(arg(t, "id")?, 64, "id")?);
    }
    if st & SampleType::CPU != 0 {
        s.cpu = Some(num(arg(t, "cpu")?, 32, "cpu")? as u32);
    }
    if st & SampleType::STREAM_ID != 0 {
        s.stream_id = Some(num(arg(t, "stream")?, 64, "stream")?);
    }
    if st & SampleType::IDENTIFIER != 0 {
        s.identifier = Some(num(arg(t, "identifier")?, 64, "identifier")?);
    }
    if t.next_token(DELIMS).is_some() {
        return Err("unexpected samples".into());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels() -> Labels {
        let mut code = BTreeMap::new();
        code.insert("l1".to_string(), 0x2000);
        Labels::from_assembly(code, 0x1000, [("text".to_string(), 0x2000, 0x1010, 6)])
    }

    fn run(lines: &[(&str, &str)]) -> Result<Sideband, String> {
        let mut sb = Sideband::default();
        let mut process = |name, payload| {
            sb.process(name, payload, "r", &labels())
                .map_err(|e| e.to_string())
        };
        process("primary", "pevent")?;
        for (name, payload) in lines {
            process(name, payload)?;
        }
        Ok(sb)
    }

    fn bytes(lines: &[(&str, &str)]) -> Vec<u8> {
        run(lines).unwrap().files.remove(0).bytes
    }

    fn header(ty: u32, misc: u16, size: u16) -> Vec<u8> {
        let mut v = ty.to_le_bytes().to_vec();
        v.extend(misc.to_le_bytes());
        v.extend(size.to_le_bytes());
        v
    }

    #[test]
    fn mmap_section_record() {
        let b = bytes(&[("pevent-mmap-section", "text, 1, 2")]);
        let mut want = header(1, 0, 48);
        for v in [1u32, 2] {
            want.extend(v.to_le_bytes());
        }
        for v in [0x2000u64, 6, 0x10] {
            want.extend(v.to_le_bytes());
        }
        want.extend(b"r.bin\0\0\0");
        assert_eq!(b, want);
        assert_eq!(
            run(&[("pevent-mmap-section", "nosuch, 1, 2")]).unwrap_err(),
            "pevent-mmap-section - section vstart (no such label)"
        );
    }

    #[test]
    fn samples_follow_the_arguments_in_pttc_order() {
        // tid, time, id, cpu, stream, identifier on input; perf's order on output.
        let b = bytes(&[
            ("pevent-sample_type", "tid time id stream cpu identifier"),
            ("pevent-comm.exec", "1, 2, ab, 3, 4, 5, 6, 7, 8, 9"),
        ]);
        let mut want = header(3, misc::COMM_EXEC, 8 + 8 + 8 + 48);
        for v in [1u32, 2] {
            want.extend(v.to_le_bytes());
        }
        want.extend(b"ab\0\0\0\0\0\0");
        for v in [3u32, 4] {
            want.extend(v.to_le_bytes());
        }
        for v in [5u64, 6, 8] {
            want.extend(v.to_le_bytes());
        }
        want.extend(7u32.to_le_bytes());
        want.extend(0u32.to_le_bytes());
        want.extend(9u64.to_le_bytes());
        assert_eq!(b, want);
    }

    #[test]
    fn switch_samples_start_at_the_payload() {
        let b = bytes(&[
            ("pevent-sample_type", "time"),
            ("pevent-switch.out", "0x10"),
        ]);
        let mut want = header(14, misc::SWITCH_OUT, 16);
        want.extend(0x10u64.to_le_bytes());
        assert_eq!(b, want);
    }

    #[test]
    fn sample_errors_and_final_configuration() {
        let tid = ("pevent-sample_type", "tid");
        assert_eq!(
            run(&[tid, ("pevent-lost", "1, 2, 3")]).unwrap_err(),
            "tid missing"
        );
        assert_eq!(
            run(&[tid, ("pevent-lost", "1, 2, 3, 4, 5")]).unwrap_err(),
            "unexpected samples"
        );
        assert_eq!(
            run(&[("pevent-lost", "1, 2"), tid]).unwrap_err(),
            "the sideband configuration can no longer be modified"
        );
        assert_eq!(
            run(&[("pevent-sample_type", "0x1"), ("pevent-lost", "1, 2")])
                .unwrap_err()
                .split(':')
                .next(),
            Some("error writing pevent sample")
        );
        assert_eq!(run(&[("pevent-comm", "1, 2")]).unwrap_err(), "comm missing");
        assert_eq!(
            run(&[("pevent-bogus", "")]).unwrap_err(),
            "syntax error (unknown directive)"
        );
        let mut sb = Sideband::default();
        assert_eq!(sb.offset().unwrap_err().to_string(), "no sideband file");
        assert!(sb.process("raw-8", "1", "r", &labels()).is_err());
        sb.process("primary", "raw", "r", &labels()).unwrap();
        sb.process("raw-32", "0x01020304", "r", &labels()).unwrap();
        assert_eq!(sb.offset(), Ok(4));
        assert!(sb.process("raw-8", "0x100", "r", &labels()).is_err());
        assert_eq!(sb.files[0].final_name(), "r-raw-primary.sb");
    }

    #[test]
    fn time_from_tsc() {
        let c = PeventConfig::default();
        assert_eq!(c.time_from_tsc(0x1234), 0x1234);
        let c = PeventConfig {
            time_zero: 100,
            time_shift: 4,
            time_mult: 3,
            ..Default::default()
        };
        // (0x2b >> 4) * 3 + (((0x2b & 0xf) * 3) >> 4) + 100 = 6 + 2 + 100
        assert_eq!(c.time_from_tsc(0x2b), 108);
    }
}
