//! Which recorded instructions a trace configuration traces: the ground truth
//! a decoded flow is compared with, decided from the execution alone (each
//! instruction's privilege level, the CR3 at the time and its IP), so that it
//! can check the PT logic rather than repeat it.

use pt_hal::config::TraceConfig;
use pt_hal::msr::{AddrCfg, RtitCtl};

use crate::exec::insn::{decode_at, KernelEntry};
use crate::exec::{CodeMemory, Event, ExecItem, InsnClass, Retired, ThreadCursor, ThreadId};
use crate::pt::cr3_of_pid;
use crate::sideband::Sideband;

/// Whether a decoder shows the instruction as executed. INT n, INT3 and
/// INTO are reported with FUP(their IP) + TIP/TIP.PGD, which decoders take
/// as an interrupt before the instruction (libipt's convention): they are
/// not shown.
fn shown(r: &Retired, mem: &CodeMemory) -> bool {
    if r.class != InsnClass::KernelEntry {
        return true;
    }
    matches!(
        decode_at(mem, r.ip, r.mode)
            .ok()
            .and_then(|d| d.kernel_entry),
        Some(KernelEntry::Syscall | KernelEntry::Sysenter)
    )
}

/// Which recorded instructions a configuration traces and a decoder shows,
/// decided from each instruction's privilege level, the CR3 at the time
/// (from [`Event::Exec`] and [`Event::MovCr3`]) and its IP; for one thread's
/// trace, the instructions of that thread ([`Self::thread`]). TraceStop
/// ranges are not followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedFilter {
    os: bool,
    user: bool,
    branch: bool,
    cr3_match: Option<u64>,
    ranges: Vec<(u64, u64)>,
    cr3: u64,
    thread: Option<ThreadId>,
    cursor: ThreadCursor,
    /// Only the items after this many execs of the thread (and before the
    /// next): one program's trace file.
    execs: Option<u32>,
    execs_seen: u32,
}

impl TracedFilter {
    /// The filter of a configuration.
    pub fn new(cfg: &TraceConfig) -> Self {
        TracedFilter {
            os: cfg.os,
            user: cfg.user,
            branch: cfg.branch,
            cr3_match: cfg.cr3_filter,
            ranges: cfg
                .ranges
                .iter()
                .filter(|r| r.cfg == AddrCfg::Filter)
                .map(|r| (r.start, r.end))
                .collect(),
            cr3: 0,
            thread: None,
            cursor: ThreadCursor::new(),
            execs: None,
            execs_seen: 0,
        }
    }

    /// Only the items of `thread` (a per-thread trace's ground truth).
    pub fn thread(self, thread: ThreadId) -> Self {
        TracedFilter {
            thread: Some(thread),
            ..self
        }
    }

    /// The filter of the configuration a side-band file records (`rtit-ctl`,
    /// `addr`, `cr3-match`), starting in the address space of its `pid`, for
    /// the thread `pid`/`tid` if it names one (`tid`: a per-thread trace),
    /// after its `execs`-th exec (one program's trace of the thread).
    pub fn from_sideband(sb: &Sideband) -> Self {
        let num = |v: &str| match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        };
        let param = |k: &str| sb.param(k).and_then(num).unwrap_or(0);
        let ctl = RtitCtl(param("rtit-ctl"));
        let mut ranges = Vec::new();
        for (k, v) in &sb.params {
            if k != "addr" {
                continue;
            }
            let f: Vec<u64> = v.split(' ').filter_map(num).collect();
            if let [n, a, b] = f[..] {
                if ctl.addr_cfg(n as u8) == Some(AddrCfg::Filter) {
                    ranges.push((a, b));
                }
            }
        }
        let pid = param("pid") as u32;
        TracedFilter {
            os: ctl.os(),
            user: ctl.user(),
            branch: ctl.branch_en(),
            cr3_match: ctl.cr3_filter().then(|| param("cr3-match")),
            ranges,
            cr3: cr3_of_pid(pid),
            thread: sb.param("tid").and_then(num).map(|tid| ThreadId {
                pid,
                tid: tid as u32,
            }),
            cursor: ThreadCursor::new(),
            execs: sb.param("execs").and_then(num).map(|n| n as u32),
            execs_seen: 0,
        }
    }

    /// Takes the next item in program order; returns the instruction if it
    /// retired with PacketEn = 1 (its CPL, the CR3 and its IP traced).
    pub fn traced<'i>(&mut self, item: &'i ExecItem) -> Option<&'i Retired> {
        let thread = self.cursor.follow(item);
        if self.thread.is_some_and(|t| t != thread) {
            return None;
        }
        if let (Some(n), ExecItem::Event(Event::Exec { .. })) = (self.execs, item) {
            self.execs_seen += 1;
            if self.execs_seen != n {
                return None;
            }
        }
        if self.execs.is_some_and(|n| n != self.execs_seen) {
            return None;
        }
        match item {
            ExecItem::Insn(r) => {
                let cpl_ok = if r.kernel { self.os } else { self.user };
                let cr3_ok = self
                    .cr3_match
                    .map_or(true, |m| m & !0x1f == self.cr3 & !0x1f);
                let in_range = self.ranges.is_empty()
                    || self.ranges.iter().any(|&(a, b)| a <= r.ip && r.ip <= b);
                (self.branch && cpl_ok && cr3_ok && in_range).then_some(r)
            }
            ExecItem::Event(Event::Exec { pid, .. }) => {
                self.cr3 = cr3_of_pid(*pid);
                None
            }
            ExecItem::Event(Event::MovCr3 { cr3 }) => {
                self.cr3 = *cr3;
                None
            }
            ExecItem::Event(_) => None,
        }
    }

    /// [`Self::traced`], and shown by a decoder (not an INT n, which is
    /// reported as an interrupt before it): the IP the decoded flow holds.
    pub fn shown(&mut self, item: &ExecItem, mem: &CodeMemory) -> Option<u64> {
        self.traced(item).filter(|r| shown(r, mem)).map(|r| r.ip)
    }
}
