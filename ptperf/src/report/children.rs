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
//! cumulation (`--no-children`) only the own entry is made. Samples that add
//! to the same entries with the same chains are added up first and handed on
//! together, once all are in: a trace has far fewer distinct chains than
//! samples, and each one costs work by the square of its length.

use std::hash::{Hash, Hasher};

use super::callgraph::{Forest, Frames, Order, NONE};
use super::hist::{FxHasher, FxMap, Hists};
use super::table::{Entry, Key, Table};
use super::SortKey;
use pt_perf::sample::{Kind, Sample};

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

/// What a sample adds to, as words: its event's histogram, command, thread
/// (pid, tid), own location, whether its chain is another sample's (perf's
/// branch samples have none of their own), the chain's length, its locations as
/// entries name them and its frames (with call graphs), innermost first.
const HIST: usize = 0;
const COMM: usize = 1;
const PID: usize = 2;
const TID: usize = 3;
const OWN: usize = 4;
const STALE: usize = 5;
const LEN: usize = 6;
const LOCS: usize = 7;

/// Words of runs kept before they are added up (64 MiB): memory stays flat
/// however many distinct chains a trace has.
const RUN_WORDS: usize = 1 << 24;

/// Samples added up by what they add to: perf's result does not depend on the
/// order they come in, but for which sample makes an entry (its thread), so
/// they are handed on in the order each key first came (every so often, all
/// so far: an entry is still made by the first sample that adds to it).
struct Runs {
    /// The keys, one after the other.
    words: Vec<u32>,
    runs: Vec<RunSum>,
    /// The last run of each key's hash (others chained through `RunSum::same`).
    index: FxMap<u64, u32>,
    /// The last sample's run ([`NONE`]: none).
    last: u32,
}

/// One key's samples.
struct RunSum {
    at: usize,
    len: u32,
    /// The previous run with the same key hash ([`NONE`]: none).
    same: u32,
    period: u64,
    count: u64,
}

impl Default for Runs {
    fn default() -> Self {
        Runs {
            words: Vec::new(),
            runs: Vec::new(),
            index: FxMap::default(),
            last: NONE,
        }
    }
}

impl Runs {
    fn key(&self, r: u32) -> &[u32] {
        let r = &self.runs[r as usize];
        &self.words[r.at..r.at + r.len as usize]
    }

    /// Adds a sample of `period` with `key`.
    fn add(&mut self, key: &[u32], period: u64) {
        if self.last != NONE && self.key(self.last) == key {
            let r = &mut self.runs[self.last as usize];
            r.period += period;
            r.count += 1;
            return;
        }
        let mut h = FxHasher::default();
        key.hash(&mut h);
        let hash = h.finish();
        let first = self.index.get(&hash).copied().unwrap_or(NONE);
        let mut r = first;
        while r != NONE && self.key(r) != key {
            r = self.runs[r as usize].same;
        }
        if r == NONE {
            r = self.runs.len() as u32;
            self.runs.push(RunSum {
                at: self.words.len(),
                len: key.len() as u32,
                same: first,
                period: 0,
                count: 0,
            });
            self.words.extend_from_slice(key);
            self.index.insert(hash, r);
        }
        let run = &mut self.runs[r as usize];
        run.period += period;
        run.count += 1;
        self.last = r;
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
    /// The samples so far.
    runs: Runs,
    /// The next sample's key (reused).
    key: Vec<u32>,
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
            runs: Runs::default(),
            key: Vec::new(),
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
        if !self.cumulate && self.graphs.is_none() {
            // Own entries alone (`-g none`): nothing to gain from runs.
            let comm = hists.comm_id(comm);
            let own = hists.locate(s.code, s.pid, s.ip, s.time);
            let e = Self::entry(&self.keys, hists, h, comm, own, (s.pid, s.tid));
            let a = &mut h.entries[e as usize];
            a.period += s.period;
            a.acc += s.period;
            return;
        }
        let k = &mut self.key;
        k.clear();
        let stale = s.kind == Kind::Branches;
        k.extend([
            hi as u32,
            hists.comm_id(comm),
            s.pid as u32,
            s.tid as u32,
            hists.locate(s.code, s.pid, s.ip, s.time),
            u32::from(stale),
            0,
        ]);
        if stale {
            // perf synthesizes branch samples without call chains, and then
            // accumulates the chain it resolved last (for whatever sample) into
            // the entries' children; the event has no call graphs.
            if self.cumulate {
                k.extend_from_slice(&self.last_locs);
            }
        } else {
            // Only the chain's own entries need its locations.
            let mut frames = std::mem::take(&mut self.cursor);
            frames.clear();
            for &ip in chain {
                let (loc, chain_loc) = hists.locations(s.code, s.pid, ip, s.time);
                k.push(chain_loc);
                if let Some(g) = &mut self.graphs {
                    frames.push(g.frames.frame(hists, s.pid, ip, s.time, loc, chain_loc));
                }
            }
            k.extend_from_slice(&frames);
            self.cursor = frames;
            if self.cumulate {
                self.last_locs.clear();
                self.last_locs
                    .extend_from_slice(&k[LOCS..LOCS + chain.len()]);
            }
        }
        k[LEN] = if stale && self.cumulate {
            self.last_locs.len()
        } else {
            chain.len()
        } as u32;
        self.runs.add(&self.key, s.period);
        if self.runs.words.len() > RUN_WORDS {
            self.flush_all(hists);
        }
    }

    /// Adds all runs so far up, in the order they came, and starts anew.
    fn flush_all(&mut self, hists: &Hists) {
        for r in 0..self.runs.runs.len() as u32 {
            self.flush(hists, r);
        }
        self.runs = Runs::default();
    }

    /// Adds the samples of run `r` up into the entries (and their call graphs).
    fn flush(&mut self, hists: &Hists, r: u32) {
        let RunSum { period, count, .. } = self.runs.runs[r as usize];
        let key = self.runs.key(r);
        let (comm, own) = (key[COMM], key[OWN]);
        let thread = (key[PID] as i32, key[TID] as i32);
        let n = key[LEN] as usize;
        let locs = &key[LOCS..LOCS + n];
        let frames = &key[LOCS + n..];
        let h = &mut self.hists[key[HIST] as usize];
        let e = Self::entry(&self.keys, hists, h, comm, own, thread);
        let a = &mut h.entries[e as usize];
        a.period += period;
        a.acc += period;
        if n == 0 {
            // No call chain: nothing more to add up.
            return;
        }
        let caller = self.graphs.as_ref().map_or(Order::Caller, |g| g.order) == Order::Caller;
        // A branch sample's (stale) chain only adds up into the entries, and
        // the depth of the chain from each on (perf adds it to their call
        // graphs, which it never prints).
        let stale = key[STALE] != 0;
        self.cursor.clear();
        if !stale {
            let a = &mut h.entries[e as usize];
            a.depth = a.depth.max(n as u32);
            if let Some(g) = &mut self.graphs {
                if caller {
                    self.cursor.extend(frames.iter().rev());
                } else {
                    self.cursor.extend(frames);
                }
                if a.tree == NONE {
                    a.tree = g.forest.tree();
                }
                g.forest.append(a.tree, &self.cursor, period, count as u32);
            }
        }
        if !self.cumulate {
            return;
        }
        self.seen.clear();
        self.seen.push(e);
        for pos in 0..n {
            let loc = locs[if caller { n - 1 - pos } else { pos }];
            let e = Self::entry(&self.keys, hists, h, comm, loc, thread);
            if self.seen.contains(&e) {
                continue;
            }
            self.seen.push(e);
            let a = &mut h.entries[e as usize];
            a.acc += period;
            a.depth = a.depth.max((n - pos) as u32);
            if let (Some(g), false) = (&mut self.graphs, stale) {
                if a.tree == NONE {
                    a.tree = g.forest.tree();
                }
                g.forest
                    .append(a.tree, &self.cursor[pos..], period, count as u32);
            }
        }
    }

    /// The tables (call once all samples are in).
    pub(super) fn tables<'h>(&mut self, hists: &'h Hists) -> Vec<Table<'h>> {
        self.flush_all(hists);
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
