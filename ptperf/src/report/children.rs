//! perf report's entries of samples with call chains: perf's cumulative mode
//! (`--children`, its default then), where besides its own period (Self) every
//! entry gets the period of the samples whose call chain passes through it
//! (Children), and the call graph below each entry.
//!
//! As perf's `hist_iter_cumulative`: a sample adds its period to its own entry
//! (both columns), then once to every other entry of its call chain, walked in
//! the graph's order; entries equal under the sort keys count once per sample.
//! A chain entry without a symbol is named by its IP (perf takes the chain
//! node's address there, where the sample's own entry has the address in the
//! dso), so such an IP makes an entry of its own.
//!
//! With call graphs on, the sample's own entry gets its whole chain and each
//! other entry the chain from itself on ([`super::callgraph`]); without
//! cumulation (`--no-children`) only the own entry is made. Samples whose
//! entries and chains are the last sample's are added up first and handed on
//! together (chains repeat in runs: a function's samples in a row).

use std::mem;

use super::callgraph::{Forest, Frames, Order, NONE};
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
    /// Its call chain tree's root ([`NONE`]: none yet).
    tree: u32,
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

/// Samples of equal entries and chains, added up.
#[derive(Default)]
struct Run {
    /// The event's histogram ([`NONE`]: no run).
    hist: u32,
    comm: u32,
    thread: (i32, i32),
    /// The sample's own location.
    own: u32,
    /// The chain's locations as entries name them, innermost first.
    locs: Vec<u32>,
    /// The chain's frames, innermost first (with call graphs).
    frames: Vec<u32>,
    /// The samples have no call chain of their own: `locs` are the last
    /// chain's.
    stale: bool,
    period: u64,
    count: u64,
}

impl Run {
    fn same(&self, o: &Run) -> bool {
        self.hist == o.hist
            && self.comm == o.comm
            && self.thread == o.thread
            && self.own == o.own
            && self.stale == o.stale
            && self.locs == o.locs
            && self.frames == o.frames
    }
}

/// The call graphs being built.
pub(super) struct Graphs<'s, 'a> {
    pub forest: Forest,
    pub frames: Frames<'s, 'a>,
    pub order: Order,
}

/// Entries with children periods and call graphs, by event.
pub(super) struct Children<'s, 'a> {
    keys: Vec<SortKey>,
    /// Walk the call chains (off: children are self, as perf's `-g none`, or
    /// `--no-children`).
    cumulate: bool,
    graphs: Option<Graphs<'s, 'a>>,
    hists: Vec<Hist>,
    /// The entries a sample has added to (reused).
    seen: Vec<u32>,
    /// The run being added up, and the next sample's (reused).
    run: Run,
    next: Run,
    /// The chain in the graph's order (reused).
    cursor: Vec<u32>,
    /// The locations of the last sample's chain that had one.
    last_locs: Vec<u32>,
}

impl<'s, 'a> Children<'s, 'a> {
    /// Empty, for `keys`; `cumulate`: add the call chains' entries up;
    /// `graphs`: build call graphs.
    pub(super) fn new(keys: &[SortKey], cumulate: bool, graphs: Option<Graphs<'s, 'a>>) -> Self {
        Children {
            keys: keys.to_vec(),
            cumulate,
            graphs,
            hists: Vec::new(),
            seen: Vec::new(),
            run: Run {
                hist: NONE,
                ..Run::default()
            },
            next: Run::default(),
            cursor: Vec::new(),
            last_locs: Vec::new(),
        }
    }

    /// The call graphs.
    pub(super) fn graphs(&self) -> Option<&Graphs<'s, 'a>> {
        self.graphs.as_ref()
    }

    /// The entry of command `comm` at `loc` (made if new, by `thread`).
    fn entry(
        keys: &[SortKey],
        hists: &Hists,
        h: &mut Hist,
        comm: u32,
        loc: u32,
        thread: (i32, i32),
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
                    thread,
                    tree: NONE,
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
    /// first, starting with its IP; empty: none) is `chain`.
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
        let h = &mut self.hists[hi];
        h.total += s.period;
        h.nr += 1;
        let n = &mut self.next;
        n.hist = hi as u32;
        n.comm = hists.comm_id(comm);
        n.thread = (s.pid, s.tid);
        n.own = hists.locate(s.code, s.pid, s.ip, s.time);
        n.locs.clear();
        n.frames.clear();
        n.stale = s.kind == Kind::Branches;
        if n.stale {
            // perf synthesizes branch samples without call chains, and then
            // accumulates the chain it resolved last (for whatever sample) into
            // the entries' children; the event has no call graphs.
            if self.cumulate {
                n.locs.extend_from_slice(&self.last_locs);
            }
        } else if self.cumulate || self.graphs.is_some() {
            // Only the chain's own entries need its locations.
            for &ip in chain {
                let (loc, chain_loc) = hists.locations(s.code, s.pid, ip, s.time);
                n.locs.push(chain_loc);
                if let Some(g) = &mut self.graphs {
                    let f = g.frames.frame(hists, s.pid, ip, s.time, loc, chain_loc);
                    n.frames.push(f);
                }
            }
            if self.cumulate {
                self.last_locs.clear();
                self.last_locs.extend_from_slice(&n.locs);
            }
        }
        if self.run.hist != NONE && self.run.same(n) {
            self.run.period += s.period;
            self.run.count += 1;
            return;
        }
        self.flush(hists);
        mem::swap(&mut self.run, &mut self.next);
        self.run.period = s.period;
        self.run.count = 1;
    }

    /// Adds the run of samples up into the entries (and their call graphs).
    fn flush(&mut self, hists: &Hists) {
        let r = &self.run;
        if r.hist == NONE {
            return;
        }
        let h = &mut self.hists[r.hist as usize];
        let (period, count) = (r.period, r.count);
        let e = Self::entry(&self.keys, hists, h, r.comm, r.own, r.thread);
        let n = r.locs.len();
        let a = &mut h.entries[e as usize];
        a.period += period;
        a.acc += period;
        if n == 0 {
            // No call chain: nothing more to add up.
            return;
        }
        let caller = self.graphs.as_ref().map_or(Order::Caller, |g| g.order) == Order::Caller;
        if r.stale {
            // Only the depth of the chain from each entry on is kept (perf adds
            // the chain to their call graphs, which it never prints).
            self.seen.clear();
            self.seen.push(e);
            for pos in 0..n {
                let loc = r.locs[if caller { n - 1 - pos } else { pos }];
                let e = Self::entry(&self.keys, hists, h, r.comm, loc, r.thread);
                if !self.seen.contains(&e) {
                    self.seen.push(e);
                    let a = &mut h.entries[e as usize];
                    a.acc += period;
                    a.depth = a.depth.max((n - pos) as u32);
                }
            }
            return;
        }
        let a = &mut h.entries[e as usize];
        a.depth = a.depth.max(n as u32);
        self.cursor.clear();
        if let Some(g) = &mut self.graphs {
            if caller {
                self.cursor.extend(r.frames.iter().rev());
            } else {
                self.cursor.extend(&r.frames);
            }
            if a.tree == NONE {
                a.tree = g.forest.tree();
            }
            g.forest.append(a.tree, &self.cursor, period, count);
        }
        if !self.cumulate {
            return;
        }
        self.seen.clear();
        self.seen.push(e);
        for pos in 0..n {
            let loc = r.locs[if caller { n - 1 - pos } else { pos }];
            let e = Self::entry(&self.keys, hists, h, r.comm, loc, r.thread);
            if self.seen.contains(&e) {
                continue;
            }
            self.seen.push(e);
            let a = &mut h.entries[e as usize];
            a.acc += period;
            a.depth = a.depth.max((n - pos) as u32);
            if let Some(g) = &mut self.graphs {
                if a.tree == NONE {
                    a.tree = g.forest.tree();
                }
                g.forest.append(a.tree, &self.cursor[pos..], period, count);
            }
        }
    }

    /// The tables (call once all samples are in).
    pub(super) fn tables<'h>(&mut self, hists: &'h Hists) -> Vec<Table<'h>> {
        self.flush(hists);
        self.run.hist = NONE;
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
                        tree: a.tree,
                    })
                    .collect(),
            })
            .collect()
    }
}
