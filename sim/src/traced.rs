//! Which recorded instructions a trace configuration traces: the ground truth
//! a decoded flow is compared with, decided from the execution alone (each
//! instruction's privilege level, the CR3 at the time and its IP), so that it
//! can check the PT logic rather than repeat it.

use pt_hal::config::TraceConfig;
use pt_hal::msr::AddrCfg;

use std::collections::HashMap;

use crate::exec::insn::{decode_at, KernelEntry};
use crate::exec::{
    BranchClass, CloneKind, CodeMemory, Event, ExecItem, Mapping, Retired, ThreadCursor, ThreadId,
};
use crate::pt::cr3_of_pid;
use crate::record::{resolve_filters, FilterSpec};

/// Whether a decoder shows the instruction as executed. INT n, INT3 and
/// INTO are reported with FUP(their IP) + TIP/TIP.PGD, which decoders take
/// as an interrupt before the instruction (libipt's convention): they are
/// not shown.
fn shown(r: &Retired, mem: &CodeMemory) -> bool {
    if r.class != BranchClass::KernelEntry {
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
/// trace, the instructions of that thread ([`Self::thread`]). Address
/// filters given as perf's ([`Self::filters`]) are resolved in each process
/// as it is mapped at the time, as the recorder (and the kernel) does.
/// TraceStop ranges are not followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedFilter {
    os: bool,
    user: bool,
    branch: bool,
    cr3_match: Option<u64>,
    ranges: Vec<(u64, u64)>,
    /// perf's filters, resolved per process (they replace `ranges`).
    specs: Vec<FilterSpec>,
    /// Each process's mappings now (with `specs`).
    maps: HashMap<u32, Vec<Mapping>>,
    /// `specs` resolved in each process, until its mappings change.
    resolved: HashMap<u32, Vec<(u64, u64)>>,
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
            specs: Vec::new(),
            maps: HashMap::new(),
            resolved: HashMap::new(),
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

    /// Address filters as perf gives them (`filter START/SIZE@FILE`):
    /// resolved in the process of each instruction as it is mapped then
    /// (they replace the configuration's ranges).
    pub fn filters(self, specs: &[FilterSpec]) -> Self {
        TracedFilter {
            specs: specs.to_vec(),
            ..self
        }
    }

    /// Only the items after the thread's `n`-th exec (and before the next):
    /// the trace of one program the thread ran.
    pub fn execs(self, n: u32) -> Self {
        TracedFilter {
            execs: Some(n),
            ..self
        }
    }

    /// Follows the mappings of the item's process (with perf's filters).
    fn follow_maps(&mut self, thread: ThreadId, item: &ExecItem) {
        if self.specs.is_empty() {
            return;
        }
        match item {
            ExecItem::Event(Event::Mappings(m)) => {
                self.maps.insert(thread.pid, m.clone());
                self.resolved.remove(&thread.pid);
            }
            ExecItem::Event(Event::Clone { child, kind }) if *kind != CloneKind::Thread => {
                let m = self.maps.get(&thread.pid).cloned().unwrap_or_default();
                self.maps.insert(child.pid, m);
                self.resolved.remove(&child.pid);
            }
            _ => {}
        }
    }

    /// The FilterEn ranges for an instruction of process `pid`.
    fn ranges_of(&mut self, pid: u32) -> &[(u64, u64)] {
        if self.specs.is_empty() {
            return &self.ranges;
        }
        let (specs, maps) = (&self.specs, &self.maps);
        self.resolved.entry(pid).or_insert_with(|| {
            let m = maps.get(&pid).map(|m| &m[..]).unwrap_or(&[]);
            resolve_filters(specs, m)
                .into_iter()
                .filter(|r| r.cfg == pt_hal::msr::AddrCfg::Filter)
                .map(|r| (r.start, r.end))
                .collect()
        })
    }

    /// Takes the next item in program order; returns the instruction if it
    /// retired with PacketEn = 1 (its CPL, the CR3 and its IP traced).
    pub fn traced<'i>(&mut self, item: &'i ExecItem) -> Option<&'i Retired> {
        let thread = self.cursor.follow(item);
        self.follow_maps(thread, item);
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
                let ranges = self.ranges_of(thread.pid);
                let in_range =
                    ranges.is_empty() || ranges.iter().any(|&(a, b)| a <= r.ip && r.ip <= b);
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
