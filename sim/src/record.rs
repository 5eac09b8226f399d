//! Recording on the simulator: an execution source in, a trace file, a
//! side-band file and (optionally) an execution log out. This is `ptrec`'s
//! simulator path, usable from tests.
//!
//! The trace is written as it is produced, so a recording that is killed
//! leaves a trace that decodes up to where it ends; the side-band is
//! rewritten at every image change.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use pt_hal::backend::{TraceBackend, TraceItem};
use pt_hal::config::{AddrRange, TraceConfig};
use pt_hal::msr::AddrCfg;

use crate::backend::{SimBackend, SimOutput};
use crate::exec::log::LogWriter;
use crate::exec::{CodeMemory, Event, ExecItem, ExecutionSource, ExitKind, Mapping, StopReason};
use crate::pt::{PtError, SimParams};
use crate::sideband::SidebandWriter;

/// An address filter as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSpec {
    /// FilterEn range (`filter`) or TraceStop range (`stop`).
    pub cfg: AddrCfg,
    /// Start address (in the object's ELF address space when `object` is set).
    pub start: u64,
    /// Size in bytes (≥ 1).
    pub size: u64,
    /// The object the addresses refer to.
    pub object: Option<PathBuf>,
}

impl FilterSpec {
    /// Parses perf's syntax (`filter 0x1000/0x100@/bin/ls`, `stop …`; several
    /// separated by `,`) or a plain `START-END` (END exclusive).
    pub fn parse_list(s: &str) -> Result<Vec<Self>, String> {
        let num = |t: &str| -> Result<u64, String> {
            let t = t.trim();
            let r = match t.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => t.parse(),
            };
            r.map_err(|_| format!("bad number `{t}` in filter"))
        };
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Some((a, b)) = part.split_once('-').filter(|_| !part.contains(' ')) {
                let (start, end) = (num(a)?, num(b)?);
                if end <= start {
                    return Err(format!("empty filter range `{part}`"));
                }
                out.push(FilterSpec {
                    cfg: AddrCfg::Filter,
                    start,
                    size: end - start,
                    object: None,
                });
                continue;
            }
            let (kind, rest) = part.split_once(' ').ok_or_else(|| {
                format!("filter `{part}`: expected `filter|stop START/SIZE[@FILE]`")
            })?;
            let cfg = match kind {
                "filter" => AddrCfg::Filter,
                "stop" => AddrCfg::TraceStop,
                _ => return Err(format!("filter `{part}`: unknown action `{kind}`")),
            };
            let (range, object) = match rest.split_once('@') {
                Some((r, o)) => (r, Some(PathBuf::from(o.trim()))),
                None => (rest, None),
            };
            let (start, size) = match range.split_once('/') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => (num(range)?, 1),
            };
            if size == 0 {
                return Err(format!("filter `{part}`: size 0"));
            }
            out.push(FilterSpec {
                cfg,
                start,
                size,
                object,
            });
        }
        Ok(out)
    }
}

/// The lowest PT_LOAD virtual address of an ELF file, page aligned.
fn elf_first_load(path: &Path) -> Option<u64> {
    let d = std::fs::read(path).ok()?;
    let u16_at = |o: usize| d.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        d.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |o: usize| {
        d.get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if d.get(..4)? != b"\x7fELF" {
        return None;
    }
    let is64 = *d.get(4)? == 2;
    let (phoff, phentsize, phnum) = if is64 {
        (
            u64_at(0x20)? as usize,
            u16_at(0x36)? as usize,
            u16_at(0x38)?,
        )
    } else {
        (
            u32_at(0x1c)? as usize,
            u16_at(0x2a)? as usize,
            u16_at(0x2c)?,
        )
    };
    let mut lowest: Option<u64> = None;
    for i in 0..usize::from(phnum) {
        let o = phoff + i * phentsize;
        if u32_at(o)? != 1 {
            continue;
        }
        let vaddr = if is64 {
            u64_at(o + 0x10)?
        } else {
            u64::from(u32_at(o + 8)?)
        };
        lowest = Some(lowest.map_or(vaddr, |l| l.min(vaddr)));
    }
    lowest.map(|v| v & !0xfff)
}

/// Turns filters into absolute address ranges using the process's mappings.
pub fn resolve_filters(filters: &[FilterSpec], maps: &[Mapping]) -> Result<Vec<AddrRange>, String> {
    filters
        .iter()
        .map(|f| {
            let bias = match &f.object {
                None => 0,
                Some(obj) => {
                    let canon = std::fs::canonicalize(obj).unwrap_or_else(|_| obj.clone());
                    let m = maps
                        .iter()
                        .find(|m| m.offset == 0 && Path::new(&m.path) == canon)
                        .ok_or_else(|| format!("filter object {} is not mapped", obj.display()))?;
                    let first = elf_first_load(&canon)
                        .ok_or_else(|| format!("{}: not an ELF file", canon.display()))?;
                    m.start.wrapping_sub(first)
                }
            };
            let start = f.start.wrapping_add(bias);
            Ok(AddrRange {
                cfg: f.cfg,
                start,
                end: start.wrapping_add(f.size - 1),
            })
        })
        .collect()
}

/// What to record.
#[derive(Clone, Debug)]
pub struct SimRecording {
    /// The trace configuration (address ranges come from `filters`).
    pub config: TraceConfig,
    /// Address filters, resolved when the program is mapped.
    pub filters: Vec<FilterSpec>,
    /// Clock and logic parameters.
    pub params: SimParams,
    /// The simulated output area.
    pub output: SimOutput,
    /// The trace file; the side-band goes to `TRACE.sideband`.
    pub trace: PathBuf,
    /// Where to keep the execution log (None: not kept).
    pub log: Option<PathBuf>,
}

/// What a recording produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordSummary {
    /// Retired instructions.
    pub instructions: u64,
    /// Of which traced (PacketEn = 1).
    pub traced: u64,
    /// Trace bytes written.
    pub trace_bytes: u64,
    /// Bytes lost (overwritten or stopped).
    pub lost_bytes: u64,
    /// PSB+ sequences.
    pub psbs: u64,
    /// OVF packets.
    pub overflows: u64,
    /// How the program ended, if it did.
    pub exit: Option<ExitKind>,
    /// Why the recording ended early, if it did.
    pub stopped: Option<StopReason>,
    /// The error that ended the execution source early, if any.
    pub source_error: Option<String>,
    /// Seconds spent.
    pub seconds: f64,
}

/// The side-band file next to a trace.
pub fn sideband_path(trace: &Path) -> PathBuf {
    let mut s = trace.as_os_str().to_owned();
    s.push(".sideband");
    PathBuf::from(s)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

struct Images {
    list: Vec<(u64, Vec<Mapping>)>,
}

fn write_sideband(
    path: &Path,
    trace: &Path,
    head: &SidebandWriter,
    images: &Images,
    mem: &CodeMemory,
    tail: &[(String, String)],
) -> Result<(), String> {
    let mut w = head.clone();
    for (offset, maps) in &images.list {
        w.image(*offset, maps, |start, end| {
            let mut p = trace.as_os_str().to_owned();
            p.push(format!(".code-{start:x}"));
            let p = PathBuf::from(p);
            let len = usize::try_from(end.wrapping_sub(start)).ok()?.min(1 << 24);
            let mut bytes = vec![0u8; len];
            let mut any = false;
            let mut a = 0;
            while a < len {
                let n = mem.read(start + a as u64, &mut bytes[a..(a + 4096).min(len)]);
                any |= n > 0;
                a += 4096;
            }
            if !any {
                return None;
            }
            std::fs::write(&p, &bytes).ok()?;
            Some(p)
        });
    }
    for (k, v) in tail {
        w.line(k, v);
    }
    std::fs::write(path, w.text()).map_err(io(path))
}

/// Instructions between checkpoints (progress report, files flushed).
pub const CHECKPOINT: u64 = 1 << 16;

/// Runs `source` through the simulator. `progress(instructions)` is called
/// at every checkpoint ([`CHECKPOINT`] instructions). Kernel tracing (OS = 1)
/// needs a source that [shows the kernel](ExecutionSource::shows_kernel);
/// others are refused ([`PtError::KernelTracing`]).
pub fn record_sim(
    source: &mut dyn ExecutionSource,
    rec: &SimRecording,
    mut progress: impl FnMut(u64),
) -> Result<RecordSummary, String> {
    let started = std::time::Instant::now();
    if rec.config.os && !source.shows_kernel() {
        return Err(PtError::KernelTracing.to_string());
    }
    // Like perf record -o, write into a directory that does not exist yet.
    if let Some(dir) = rec.trace.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let trace_file = File::create(&rec.trace).map_err(io(&rec.trace))?;
    let mut trace = BufWriter::with_capacity(1 << 20, trace_file);
    let sb_path = sideband_path(&rec.trace);
    let mut log = match &rec.log {
        Some(p) => {
            let out = BufWriter::new(File::create(p).map_err(io(p))?);
            Some(LogWriter::with_kernel(out, source.shows_kernel()).map_err(io(p))?)
        }
        None => None,
    };
    let mut backend: Option<SimBackend> = None;
    let mut head: Option<SidebandWriter> = None;
    let mut images = Images { list: Vec::new() };
    let mut maps: Vec<Mapping> = Vec::new();
    let mut pid = 0u32;
    let mut summary = RecordSummary::default();
    let mut items = Vec::new();
    let mut written = 0u64;
    let mut next_progress = CHECKPOINT;
    let drain = |b: &mut SimBackend,
                 items: &mut Vec<TraceItem>,
                 trace: &mut BufWriter<File>,
                 written: &mut u64,
                 lost: &mut u64|
     -> Result<(), String> {
        b.read(items).map_err(|e| e.to_string())?;
        for it in items.drain(..) {
            match it {
                TraceItem::Data { bytes, .. } => {
                    trace.write_all(&bytes).map_err(io(&rec.trace))?;
                    *written += bytes.len() as u64;
                }
                TraceItem::Lost { size, .. } => *lost += size.unwrap_or(0),
            }
        }
        Ok(())
    };
    loop {
        let item = match source.next_item() {
            Ok(Some(i)) => i,
            Ok(None) => break,
            Err(e) => {
                summary.source_error = Some(e.to_string());
                break;
            }
        };
        if let Some(l) = &mut log {
            if let Err(e) = l.write_item(&item, source.memory()) {
                summary.source_error = Some(format!("execution log: {e}"));
                break;
            }
        }
        match &item {
            ExecItem::Event(Event::Exec { pid: p, .. }) => pid = *p,
            ExecItem::Event(Event::Mappings(m)) => {
                let exec_of = |v: &[Mapping]| -> Vec<Mapping> {
                    v.iter().filter(|m| m.perms.exec).cloned().collect()
                };
                let changed = exec_of(m) != exec_of(&maps);
                maps = m.clone();
                if let (Some(b), true) = (&backend, changed) {
                    images
                        .list
                        .push((b.cpu_ref().logic().produced(), maps.clone()));
                    if let Some(h) = &head {
                        write_sideband(&sb_path, &rec.trace, h, &images, source.memory(), &[])?;
                    }
                }
            }
            ExecItem::Event(Event::Exit(k)) => summary.exit = Some(*k),
            ExecItem::Event(Event::Stopped(r)) => summary.stopped = Some(*r),
            ExecItem::Insn(_) if backend.is_none() => {
                let mut cfg = rec.config;
                let ranges = resolve_filters(&rec.filters, &maps)?;
                if ranges.len() > cfg.ranges.len() {
                    return Err(format!("at most {} address filters", cfg.ranges.len()));
                }
                for (slot, r) in cfg.ranges.iter_mut().zip(ranges) {
                    *slot = r;
                }
                let mut b = SimBackend::new(rec.params, rec.output).map_err(|e| e.to_string())?;
                b.configure(&cfg).map_err(|e| e.to_string())?;
                // Events before the first instruction (exec, mappings) set the process state.
                b.feed(
                    &ExecItem::Event(Event::Exec {
                        pid,
                        path: String::new(),
                    }),
                    source.memory(),
                );
                b.start().map_err(|e| e.to_string())?;
                let h = SidebandWriter::new(&rec.params.clock, &cfg.to_regs(), pid);
                images.list.push((0, maps.clone()));
                write_sideband(&sb_path, &rec.trace, &h, &images, source.memory(), &[])?;
                head = Some(h);
                backend = Some(b);
            }
            _ => {}
        }
        if let Some(b) = &mut backend {
            b.feed(&item, source.memory());
            if b.unread() >= b.capacity() / 2 {
                drain(
                    b,
                    &mut items,
                    &mut trace,
                    &mut written,
                    &mut summary.lost_bytes,
                )?;
            }
            if let ExecItem::Insn(_) = item {
                summary.instructions += 1;
                if summary.instructions >= next_progress {
                    // A checkpoint: what was traced so far reaches the files, so
                    // a recording killed later keeps a decodable prefix.
                    next_progress += CHECKPOINT;
                    progress(summary.instructions);
                    drain(
                        b,
                        &mut items,
                        &mut trace,
                        &mut written,
                        &mut summary.lost_bytes,
                    )?;
                    trace.flush().map_err(io(&rec.trace))?;
                    if let Some(l) = &mut log {
                        l.flush().map_err(|e| e.to_string())?;
                    }
                }
            }
        }
    }
    let mut tail = Vec::new();
    if let Some(b) = &mut backend {
        b.stop().map_err(|e| e.to_string())?;
        drain(
            b,
            &mut items,
            &mut trace,
            &mut written,
            &mut summary.lost_bytes,
        )?;
        let st = b.cpu_ref().logic().stats();
        summary.traced = st.traced;
        summary.psbs = st.psbs;
        summary.overflows = st.overflows;
    }
    trace.flush().map_err(io(&rec.trace))?;
    if let Some(l) = log {
        l.finish().map_err(|e| e.to_string())?;
    }
    summary.trace_bytes = written;
    match summary.exit {
        Some(ExitKind::Exited(c)) => tail.push(("exit".into(), format!("exited {c}"))),
        Some(ExitKind::Killed(s)) => tail.push(("exit".into(), format!("killed {s}"))),
        None => {}
    }
    if summary.stopped.is_none() && summary.source_error.is_none() {
        tail.push(("end".into(), written.to_string()));
    }
    if let Some(h) = &head {
        write_sideband(&sb_path, &rec.trace, h, &images, source.memory(), &tail)?;
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Perms;

    #[test]
    fn filter_syntax() {
        let f = FilterSpec::parse_list("filter 0x1000/0x100@/bin/true, stop 0x2000").unwrap();
        assert_eq!(
            f,
            vec![
                FilterSpec {
                    cfg: AddrCfg::Filter,
                    start: 0x1000,
                    size: 0x100,
                    object: Some(PathBuf::from("/bin/true")),
                },
                FilterSpec {
                    cfg: AddrCfg::TraceStop,
                    start: 0x2000,
                    size: 1,
                    object: None,
                },
            ]
        );
        let f = FilterSpec::parse_list("0x401000-0x402000").unwrap();
        assert_eq!((f[0].start, f[0].size), (0x401000, 0x1000));
        for bad in ["0x2000-0x1000", "jump 1/2", "filter 1/0", "filter x/1"] {
            assert!(FilterSpec::parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_filters_follow_the_load_address() {
        let exe = std::fs::canonicalize("/bin/true").unwrap();
        let first = elf_first_load(&exe).expect("an ELF");
        let maps = vec![Mapping {
            start: 0x5555_5555_4000,
            end: 0x5555_5555_6000,
            offset: 0,
            perms: Perms {
                read: true,
                ..Perms::default()
            },
            path: exe.display().to_string(),
        }];
        let f = FilterSpec::parse_list(&format!("filter {:#x}/0x10@/bin/true", first + 0x2000))
            .unwrap();
        let r = resolve_filters(&f, &maps).unwrap();
        assert_eq!((r[0].start, r[0].end), (0x5555_5555_6000, 0x5555_5555_600f));
        let missing = FilterSpec::parse_list("filter 0/1@/bin/sh").unwrap();
        assert!(resolve_filters(&missing, &maps).is_err());
    }
}
