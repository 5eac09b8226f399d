//! perf report's cumulative mode (`--children`, its default when samples carry
//! call chains): besides its own period (Self), every entry gets the period of
//! the samples whose call chain passes through it (Children).
//!
//! As perf's `hist_iter_cumulative`: a sample adds its period to its own entry
//! (both columns), then once to every other entry of its call chain, walked
//! from the outermost caller; entries equal under the sort keys count once per
//! sample. A chain entry without a symbol is named by its IP (perf takes the
//! chain node's address there, where the sample's own entry has the address in
//! the dso), so such an IP makes an entry of its own.

use super::hist::{FxMap, Hists};
use super::table::{Entry, Key, Table};
use super::SortKey;
use crate::sample::{Kind, Sample};

/// One entry being added up.
struct Acc {
    comm: u32,
    loc: u32,
    period: u64,
    acc: u64,
    depth: u32,
    thread: (i32, i32),
}

/// One event's entries.
struct Hist {
    kind: Kind,
    entries: Vec<Acc>,
    index: FxMap<Key, u32>,
    /// Entries by (command, location): what `index` gives their key.
    by_loc: FxMap<(u32, u32), u32>,
    total: u64,
    nr: u64,
}

/// Entries with children periods, by event.
pub(super) struct Children {
    keys: Vec<SortKey>,
    /// Walk the call chains (off: children are self, as perf's `-g none`).
    cumulate: bool,
    hists: Vec<Hist>,
    /// The entries a sample has added to (reused).
    seen: Vec<u32>,
}

impl Children {
    /// Empty, for `keys`; `cumulate`: add the call chains' entries up.
    pub(super) fn new(keys: &[SortKey], cumulate: bool) -> Self {
        Children {
            keys: keys.to_vec(),
            cumulate,
            hists: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// The entry of command `comm` at `loc` (made if new).
    fn entry(
        keys: &[SortKey],
        hists: &Hists,
        h: &mut Hist,
        comm: u32,
        loc: u32,
        s: &Sample,
    ) -> u32 {
        if let Some(&e) = h.by_loc.get(&(comm, loc)) {
            return e;
        }
        let key = Key::of(keys, comm, hists.loc(loc));
        let e = match h.index.get(&key) {
            Some(&e) => e,
            None => {
                h.entries.push(Acc {
                    comm,
                    loc,
                    period: 0,
                    acc: 0,
                    depth: 0,
                    thread: (s.pid, s.tid),
                });
                let e = h.entries.len() as u32 - 1;
                h.index.insert(key, e);
                e
            }
        };
        h.by_loc.insert((comm, loc), e);
        e
    }

    /// Adds sample `s` of the thread named `comm`, whose call chain (innermost
    /// first, starting with its IP) is `chain`.
    pub(super) fn add(&mut self, hists: &mut Hists, s: &Sample, comm: Option<&str>, chain: &[u64]) {
        let hi = match self.hists.iter().position(|h| h.kind == s.kind) {
            Some(i) => i,
            None => {
                self.hists.push(Hist {
                    kind: s.kind,
                    entries: Vec::new(),
                    index: FxMap::default(),
                    by_loc: FxMap::default(),
                    total: 0,
                    nr: 0,
                });
                self.hists.len() - 1
            }
        };
        let comm = hists.comm_id(comm);
        let h = &mut self.hists[hi];
        h.total += s.period;
        h.nr += 1;
        let own = std::slice::from_ref(&s.ip);
        let chain = if chain.is_empty() { own } else { chain };
        let loc = hists.locate(s.code, s.pid, s.ip, s.time);
        let e = Self::entry(&self.keys, hists, h, comm, loc, s);
        let depth = chain.len() as u32;
        let a = &mut h.entries[e as usize];
        a.period += s.period;
        a.acc += s.period;
        a.depth = a.depth.max(depth);
        if !self.cumulate {
            return;
        }
        self.seen.clear();
        self.seen.push(e);
        for (pos, &ip) in chain.iter().rev().enumerate() {
            let loc = hists.locate_in_chain(s.code, s.pid, ip, s.time);
            let e = Self::entry(&self.keys, hists, h, comm, loc, s);
            if self.seen.contains(&e) {
                continue;
            }
            self.seen.push(e);
            let a = &mut h.entries[e as usize];
            a.acc += s.period;
            a.depth = a.depth.max(depth - pos as u32);
        }
    }

    /// The tables.
    pub(super) fn tables<'h>(&self, hists: &'h Hists) -> Vec<Table<'h>> {
        self.hists
            .iter()
            .map(|h| Table {
                kind: h.kind,
                total: h.total,
                nr: h.nr,
                entries: h
                    .entries
                    .iter()
                    .map(|a| Entry {
                        comm: hists.comm(a.comm),
                        loc: hists.loc(a.loc),
                        period: a.period,
                        acc: a.acc,
                        depth: a.depth,
                        thread: a.thread,
                    })
                    .collect(),
            })
            .collect()
    }
}
