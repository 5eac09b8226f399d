//! perf report's call graphs: the tree of call chains below each entry, built
//! and printed as perf 6.1 does it (`-g graph,0.5,caller,function,percent` and
//! the other `-g` settings).
//!
//! Each entry owns a tree of the call chains of the samples that made it (in
//! cumulative mode, the part of each chain from the entry on). A node holds a
//! run of frames that no chain leaves halfway, the period of the samples whose
//! chain ends there (`hit`) and of those that go on below (`children_hit`), and
//! the same as sample counts. Adding a chain walks down the nodes it matches,
//! splits a node where the chain leaves it, and adds the rest as a new child.
//! The tree of a set of chains does not depend on the order they came in, so
//! equal chains in a row are added once with their summed period.
//!
//! Frames are compared as perf's `-g` sort key says: by symbol (`function`; an
//! address without one by its IP) or by IP (`address`). A frame's name is the
//! symbol's, else its IP in hex; with `address`, the symbol's source line too.
//! Siblings print by their (cumulated) period, largest first; equal ones in
//! perf's tree order: the shared object (in the order perf made them, which
//! follows the build-id table and then the mappings) and the address, both
//! descending.
//!
//! Printing follows perf's stdio browser: `graph` (percentages of the event's
//! total), `fractal` (of the parent node's), `flat` (every chain with its own
//! period, whole) and `folded` (one line a chain, frames joined by `;`), with
//! the threshold, the print limit and the value (percent, period or count).

use std::fmt::Write as _;
use std::rc::Rc;

use pt_perf::session::Session;

use super::hist::{FxMap, Hists, SymKey};
use pt_elf::srcline::{Answer, SrcLines};

/// No node or frame.
pub(super) const NONE: u32 = u32::MAX;

/// How the graph is printed (perf's `print_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A tree, percentages of the event's total.
    Graph,
    /// A tree, percentages of the parent node's.
    Fractal,
    /// Every chain whole, with its own period.
    Flat,
    /// One line a chain, frames joined by `;`.
    Folded,
}

/// Which end of a chain comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// The outermost caller first.
    Caller,
    /// The sampled function first.
    Callee,
}

/// What tells frames apart (perf's `sort_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainKey {
    /// The symbol (an address without one by itself).
    Function,
    /// The address, printed with its source line.
    Address,
}

/// What a node shows (perf's `value`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Its period as a percentage.
    Percent,
    /// Its period.
    Period,
    /// Its number of samples.
    Count,
}

/// The call graph settings of `-g`/`--call-graph`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// The print type.
    pub mode: Mode,
    /// Nodes below this percentage are left out (of the total, or of the parent
    /// node in fractal mode).
    pub min_percent: f64,
    /// At most this many nodes a level (0: all).
    pub print_limit: u32,
    /// The chains' order.
    pub order: Order,
    /// Whether `order` was given (else cumulative mode takes `caller`).
    pub order_set: bool,
    /// What tells frames apart.
    pub key: ChainKey,
    /// What nodes show.
    pub value: Value,
}

impl Default for Params {
    /// perf's defaults before any `-g`: graph, 0.5%, callee order, function, percent.
    fn default() -> Self {
        Params {
            mode: Mode::Graph,
            min_percent: 0.5,
            print_limit: 0,
            order: Order::Callee,
            order_set: false,
            key: ChainKey::Function,
            value: Value::Percent,
        }
    }
}

/// What a bare `-g` stands for (perf report's).
pub const DEFAULT_OPT: &str = "graph,0.5,caller,function,percent";

/// The call graph options of a command line: each `-g` in turn on top of the
/// last, as perf takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setting {
    /// Some `-g` was given (perf then wants call chains in the file).
    pub given: bool,
    /// The graph is off (`-g none`, `--no-call-graph`).
    pub none: bool,
    /// The settings.
    pub params: Params,
}

impl Setting {
    /// The setting of the `-g` values `values` (an empty one: bare `-g`), in the
    /// order given; `no_call_graph`: `--no-call-graph` came last.
    pub fn parse(values: &[String], no_call_graph: bool) -> Result<Setting, crate::Error> {
        let mut s = Setting {
            given: false,
            none: false,
            params: Params::default(),
        };
        for v in values {
            let v = if v.is_empty() { DEFAULT_OPT } else { v };
            s.given = true;
            s.none = false;
            s.apply(v).map_err(crate::Error::Usage)?;
        }
        if no_call_graph {
            s.given = false;
            s.none = true;
        }
        Ok(s)
    }

    /// Applies one `-g` value: comma separated words, each a prefix of a
    /// keyword (tried as print type, order, sort key, value in turn), else the
    /// threshold, then the print limit.
    fn apply(&mut self, v: &str) -> Result<(), String> {
        let p = &mut self.params;
        let mut threshold_set = false;
        for t in v.split(',').filter(|t| !t.is_empty()) {
            let is = |word: &str| word.starts_with(t);
            if is("none") {
                self.none = true;
                return Ok(());
            }
            if is("graph") {
                p.mode = Mode::Graph;
            } else if is("flat") {
                p.mode = Mode::Flat;
            } else if is("fractal") {
                p.mode = Mode::Fractal;
            } else if is("folded") {
                p.mode = Mode::Folded;
            } else if is("caller") {
                p.order = Order::Caller;
                p.order_set = true;
            } else if is("callee") {
                p.order = Order::Callee;
                p.order_set = true;
            } else if is("function") {
                p.key = ChainKey::Function;
            } else if is("address") {
                p.key = ChainKey::Address;
            } else if is("srcline") {
                return Err(unsupported(t, "the srcline sort key"));
            } else if is("branch") {
                return Err(unsupported(t, "branch call stacks"));
            } else if is("percent") {
                p.value = Value::Percent;
            } else if is("period") {
                p.value = Value::Period;
            } else if is("count") {
                p.value = Value::Count;
            } else if !threshold_set {
                p.min_percent = strtod_prefix(t).ok_or_else(|| invalid(t))?;
                threshold_set = true;
            } else {
                p.print_limit = strtoul_prefix(t).ok_or_else(|| invalid(t))? as u32;
            }
        }
        Ok(())
    }
}

fn invalid(t: &str) -> String {
    format!(
        "ptperf report: invalid --call-graph word `{t}' (expected \
         print_type,threshold[,print_limit],order,sort_key,value: \
         graph|flat|fractal|folded|none, a percentage, a number, caller|callee, \
         function|address, percent|period|count)"
    )
}

fn unsupported(t: &str, what: &str) -> String {
    format!("ptperf report: --call-graph `{t}': {what} is not supported")
}

/// The number C's `strtod` reads at the start of `t` (leading blanks, sign,
/// digits with a decimal point, exponent; `inf`, `nan`), `None` if none.
fn strtod_prefix(t: &str) -> Option<f64> {
    let s = t.trim_start();
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i = 1;
    }
    let rest = s[i..].to_ascii_lowercase();
    for word in ["infinity", "inf", "nan"] {
        if rest.starts_with(word) {
            let v = if word == "nan" {
                f64::NAN
            } else {
                f64::INFINITY
            };
            return Some(if b[0] == b'-' { -v } else { v });
        }
    }
    let digits = |mut j: usize| {
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        j
    };
    let int_end = digits(i);
    let mut end = int_end;
    let mut any = int_end > i;
    if b.get(end) == Some(&b'.') {
        let frac_end = digits(end + 1);
        any |= frac_end > end + 1;
        end = frac_end;
    }
    if !any {
        return None;
    }
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let mut j = end + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let k = digits(j);
        if k > j {
            end = k;
        }
    }
    s[..end].parse().ok()
}

/// The number C's `strtoul` (base 0: `0x` hex, `0` octal) reads at the start of
/// `t`, `None` if none (a negative one wraps, as C's does).
fn strtoul_prefix(t: &str) -> Option<u64> {
    let s = t.trim_start();
    let (neg, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, body) = if (s.starts_with("0x") || s.starts_with("0X"))
        && s.as_bytes().get(2).is_some_and(u8::is_ascii_hexdigit)
    {
        (16, &s[2..])
    } else if s.starts_with('0') {
        (8, s)
    } else {
        (10, s)
    };
    let n = body.chars().take_while(|c| c.is_digit(radix)).count();
    if n == 0 {
        return None;
    }
    let mut v: u64 = 0;
    for c in body[..n].chars() {
        v = v
            .saturating_mul(u64::from(radix))
            .saturating_add(u64::from(c.to_digit(radix).unwrap_or(0)));
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// One node: a run of frames and the periods and samples that end in it or go
/// on below it (counts wrap, as perf's `unsigned int`s do).
#[derive(Clone, Copy, Debug)]
struct Node {
    /// Its frames: `Forest::frames[first..first + len]` (a chain has at most
    /// `MAX_CALLCHAIN_SZ` + 1 < 2^16).
    first: u32,
    len: u16,
    /// How many children, up to 2^16 - 1 (above [`WIDE`], they are found
    /// through `Forest::kids`).
    kids: u16,
    hit: u64,
    children_hit: u64,
    count: u32,
    children_count: u32,
    /// The first child, and the next sibling ([`NONE`]: none).
    child: u32,
    next: u32,
}

impl Node {
    fn cumul(&self) -> u64 {
        self.hit.wrapping_add(self.children_hit)
    }
    fn cumul_count(&self) -> u32 {
        self.count.wrapping_add(self.children_count)
    }
}

/// Children a node has before they are found by hash rather than by walking
/// them (a chain's innermost frame is often an address without a symbol:
/// each instruction of such code makes a sibling).
const WIDE: u16 = 8;

/// Every entry's call chain tree, in one arena.
#[derive(Default)]
pub(super) struct Forest {
    nodes: Vec<Node>,
    /// The nodes' frames (each node's a contiguous run).
    frames: Vec<u32>,
    /// The children of wide nodes by (node, first frame).
    kids: FxMap<(u32, u32), u32>,
}

impl Forest {
    /// A new empty tree; returns its root.
    pub(super) fn tree(&mut self) -> u32 {
        self.node(0, 0)
    }

    fn node(&mut self, first: u32, len: usize) -> u32 {
        self.nodes.push(Node {
            first,
            len: len as u16,
            kids: 0,
            hit: 0,
            children_hit: 0,
            count: 0,
            children_count: 0,
            child: NONE,
            next: NONE,
        });
        self.nodes.len() as u32 - 1
    }

    fn frames_of(&self, n: u32) -> &[u32] {
        let n = &self.nodes[n as usize];
        &self.frames[n.first as usize..n.first as usize + usize::from(n.len)]
    }

    fn first_frame(&self, n: u32) -> u32 {
        self.frames[self.nodes[n as usize].first as usize]
    }

    /// The child of `node` whose first frame is `f` ([`NONE`]: none).
    fn find(&mut self, node: u32, f: u32) -> u32 {
        let n = &self.nodes[node as usize];
        if n.kids > WIDE {
            return self.kids.get(&(node, f)).copied().unwrap_or(NONE);
        }
        let (mut prev, mut c) = (NONE, n.child);
        while c != NONE && self.first_frame(c) != f {
            prev = c;
            c = self.nodes[c as usize].next;
        }
        if c != NONE && prev != NONE {
            // The child just found goes first: chains come in runs.
            let next = self.nodes[c as usize].next;
            self.nodes[prev as usize].next = next;
            self.nodes[c as usize].next = self.nodes[node as usize].child;
            self.nodes[node as usize].child = c;
        }
        c
    }

    /// Adds `chain` (frames in print order), `count` samples of `period` in all,
    /// to the tree of `root`.
    pub(super) fn append(&mut self, root: u32, chain: &[u32], period: u64, count: u32) {
        if chain.is_empty() {
            return;
        }
        let mut node = root;
        let mut pos = 0;
        loop {
            // `node` is matched whole and frames remain: they go below it.
            let n = &mut self.nodes[node as usize];
            n.children_hit += period;
            n.children_count = n.children_count.wrapping_add(count);
            let c = self.find(node, chain[pos]);
            if c == NONE {
                self.add_child(node, &chain[pos..], period, count);
                return;
            }
            let have = self.frames_of(c);
            let k = have
                .iter()
                .zip(&chain[pos..])
                .take_while(|(a, b)| a == b)
                .count();
            if k < have.len() {
                self.split(c, k);
                let n = &mut self.nodes[c as usize];
                if pos + k == chain.len() {
                    n.hit = period;
                    n.count = count;
                } else {
                    n.children_hit += period;
                    n.children_count = n.children_count.wrapping_add(count);
                    self.add_child(c, &chain[pos + k..], period, count);
                }
                return;
            }
            pos += k;
            if pos == chain.len() {
                let n = &mut self.nodes[c as usize];
                n.hit += period;
                n.count = n.count.wrapping_add(count);
                return;
            }
            node = c;
        }
    }

    /// Adds a child of `parent` holding `frames`.
    fn add_child(&mut self, parent: u32, frames: &[u32], period: u64, count: u32) {
        let first = self.frames.len() as u32;
        self.frames.extend_from_slice(frames);
        let c = self.node(first, frames.len());
        let p = &mut self.nodes[parent as usize];
        let next = p.child;
        p.child = c;
        p.kids = p.kids.saturating_add(1);
        let kids = p.kids;
        let n = &mut self.nodes[c as usize];
        n.hit = period;
        n.count = count;
        n.next = next;
        if kids == WIDE + 1 {
            // Wide from now on: every child by hash.
            let mut k = c;
            while k != NONE {
                self.kids.insert((parent, self.first_frame(k)), k);
                k = self.nodes[k as usize].next;
            }
        } else if kids > WIDE {
            self.kids.insert((parent, frames[0]), c);
        }
    }

    /// Cuts node `c` after its first `k` frames: the rest, with its periods and
    /// children, becomes its only child.
    fn split(&mut self, c: u32, k: usize) {
        let old = self.nodes[c as usize];
        let m = self.node(old.first + k as u32, usize::from(old.len) - k);
        {
            let n = &mut self.nodes[m as usize];
            n.hit = old.hit;
            n.children_hit = old.children_hit;
            n.count = old.count;
            n.children_count = old.children_count;
            n.child = old.child;
            n.kids = old.kids;
        }
        let mut g = old.child;
        while g != NONE && old.kids > WIDE {
            let f = self.first_frame(g);
            self.kids.remove(&(c, f));
            self.kids.insert((m, f), g);
            g = self.nodes[g as usize].next;
        }
        let n = &mut self.nodes[c as usize];
        n.len = k as u16;
        n.child = m;
        n.kids = 1;
        n.hit = 0;
        n.count = 0;
        n.children_hit = old.cumul();
        n.children_count = old.cumul_count();
    }

    fn children(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        let mut c = self.nodes[n as usize].child;
        std::iter::from_fn(move || {
            let this = c;
            if this == NONE {
                return None;
            }
            c = self.nodes[this as usize].next;
            Some(this)
        })
    }
}

/// A frame as printed and as perf's tree orders it.
#[derive(Clone, Debug)]
pub(super) struct Frame {
    /// What is printed.
    pub name: Rc<str>,
    /// The shared object's place in perf's order (0: none).
    pub rank: u32,
    /// The address perf compares within it.
    pub addr: u64,
}

/// The frames of call chain addresses, numbered as the sort key tells them
/// apart.
pub(super) struct Frames<'s, 'a> {
    key: ChainKey,
    session: &'s Session<'a>,
    /// Shared objects' short names by the order perf made them (from 1).
    ranks: FxMap<Rc<str>, u32>,
    /// `function`: frames by chain location.
    by_loc: Vec<u32>,
    /// `address`: frames by (shared object's rank, IP).
    by_ip: FxMap<(u32, u64), u32>,
    info: Vec<Frame>,
    srclines: Option<SrcLines>,
}

impl<'s, 'a> Frames<'s, 'a> {
    /// Frames of `session`'s addresses under `key`; `dsos`: file names in the
    /// order perf makes its shared objects.
    pub(super) fn new(key: ChainKey, session: &'s Session<'a>, dsos: Vec<String>) -> Self {
        let mut ranks: FxMap<Rc<str>, u32> = FxMap::default();
        for d in &dsos {
            let n = ranks.len() as u32 + 1;
            ranks.entry(super::hist::short(d).into()).or_insert(n);
        }
        Frames {
            key,
            session,
            ranks,
            by_loc: Vec::new(),
            by_ip: FxMap::default(),
            info: Vec::new(),
            srclines: None,
        }
    }

    /// Frame `id`.
    pub(super) fn get(&self, id: u32) -> &Frame {
        &self.info[id as usize]
    }

    fn rank(&self, dso: Option<&Rc<str>>) -> u32 {
        dso.map_or(0, |d| self.ranks.get(d).copied().unwrap_or(u32::MAX))
    }

    /// The frame of call chain address `ip` (of process `pid` running code
    /// `code` at `time`), whose location is `loc` as a sample's and `chain_loc`
    /// as a chain entry's ([`Hists::locations`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn frame(
        &mut self,
        hists: &Hists,
        pid: i32,
        ip: u64,
        time: Option<u64>,
        loc: u32,
        chain_loc: u32,
    ) -> u32 {
        match self.key {
            ChainKey::Function => {
                if let Some(&f) = self.by_loc.get(chain_loc as usize) {
                    if f != NONE {
                        return f;
                    }
                }
                let l = hists.loc(chain_loc);
                let rank = self.rank(l.dso.as_ref());
                let (name, addr) = match (&l.sym, &hists.loc(loc).sym) {
                    (SymKey::Named(n, start), _) => (n.clone(), *start),
                    (SymKey::Addr(_), SymKey::Addr(a)) => (hex(ip), *a),
                    (SymKey::Addr(_), SymKey::Named(..)) => (hex(ip), ip),
                };
                let f = self.push(Frame { name, rank, addr });
                let i = chain_loc as usize;
                if self.by_loc.len() <= i {
                    self.by_loc.resize(i + 1, NONE);
                }
                self.by_loc[i] = f;
                f
            }
            ChainKey::Address => {
                let l = hists.loc(chain_loc);
                let rank = self.rank(l.dso.as_ref());
                if let Some(&f) = self.by_ip.get(&(rank, ip)) {
                    return f;
                }
                let name = match &l.sym {
                    SymKey::Named(n, start) => match self.srcline(pid, ip, time) {
                        Some((Answer::Line { file, line }, _)) => format!("{n} {file}:{line}"),
                        // addr2line's `??:?` is a file `??` at line 0 to perf.
                        Some((Answer::NoFile, _)) => format!("{n} ??:0"),
                        // Nothing (`??:0`): the offset in the symbol.
                        Some((Answer::NotFound, addr)) => {
                            format!("{n} +{}", addr.wrapping_sub(*start))
                        }
                        None => n.to_string(),
                    }
                    .into(),
                    SymKey::Addr(_) => hex(ip),
                };
                let f = self.push(Frame {
                    name,
                    rank,
                    addr: ip,
                });
                self.by_ip.insert((rank, ip), f);
                f
            }
        }
    }

    fn push(&mut self, f: Frame) -> u32 {
        self.info.push(f);
        self.info.len() as u32 - 1
    }

    /// addr2line's answer for `ip` and the address in its dso; `None`: not
    /// mapped.
    fn srcline(&mut self, pid: i32, ip: u64, time: Option<u64>) -> Option<(Answer, u64)> {
        let m = self
            .session
            .mapping((pid >= 0).then_some(pid as u32), ip, time)?;
        let addr = m.file_offset(ip);
        let path = self.session.code_file(m).ok().map(|f| f.path.clone());
        let bid = m.build_id.filter(|b| b.len > 0);
        let answer = self
            .srclines
            .get_or_insert_with(|| SrcLines::new(false))
            .answer(
                &m.filename,
                path.as_deref(),
                bid.as_ref().map(|b| b.as_bytes()),
                addr,
            );
        Some((answer, addr))
    }
}

/// perf's `%#llx`: `0` for zero.
fn hex(ip: u64) -> Rc<str> {
    if ip == 0 {
        "0".into()
    } else {
        format!("{ip:#x}").into()
    }
}

/// Prints entries' trees as perf's stdio report does.
pub(super) struct Printer<'f, 's, 'a> {
    pub forest: &'f Forest,
    pub frames: &'f Frames<'s, 'a>,
    pub params: Params,
    /// Leave out a single chain's first frame (perf does when the sort order
    /// starts with `sym`: it is the entry's own symbol).
    pub skip_first: bool,
}

impl Printer<'_, '_, '_> {
    /// A frame's text as perf prints it: written into a buffer of 1024
    /// bytes (`callchain_list__sym_name`), so cut at 1023 (long C++ names).
    fn name(&self, f: u32) -> &str {
        let name: &str = &self.frames.get(f).name;
        let mut end = name.len().min(1023);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        &name[..end]
    }

    /// The order of siblings: cumulated period, then perf's tree order.
    fn sorted(&self, parent: u32, min_hit: u64) -> Vec<u32> {
        let nodes = &self.forest.nodes;
        let hits = |c: u32| nodes[c as usize].cumul();
        let mut v: Vec<u32> = self
            .forest
            .children(parent)
            .filter(|&c| hits(c) >= min_hit)
            .collect();
        v.sort_by(|&a, &b| {
            hits(b)
                .cmp(&hits(a))
                .then_with(|| self.key(b).cmp(&self.key(a)))
        });
        v
    }

    /// A node's place in perf's tree of siblings (by its first frame).
    fn key(&self, n: u32) -> (u32, u64) {
        let f = self.frames.get(self.forest.frames_of(n)[0]);
        (f.rank, f.addr)
    }

    /// Appends a node's value (period `hits` of `count` samples) as
    /// `--call-graph`'s value says.
    fn value(&self, out: &mut String, hits: u64, count: u32, total: u64) {
        match self.params.value {
            Value::Percent => {
                let p = if total == 0 {
                    0.0
                } else {
                    hits as f64 * 100.0 / total as f64
                };
                let _ = write!(out, "{p:.2}%");
            }
            Value::Period => {
                let _ = write!(out, "{hits}");
            }
            Value::Count => {
                let _ = write!(out, "{count}");
            }
        }
    }

    /// The minimum period of a node in graph, flat and folded mode (perf's
    /// threshold of the event's total, truncated).
    fn min_hit(&self, total: u64) -> u64 {
        (total as f64 * (self.params.min_percent / 100.0)) as u64
    }

    /// Appends the graph lines of the tree `root` of an entry whose own period
    /// is `parent` in an event of period `total`.
    pub(super) fn print(&self, out: &mut String, root: u32, total: u64, parent: u64) {
        if root == NONE {
            return;
        }
        match self.params.mode {
            Mode::Graph | Mode::Fractal => self.graph(out, root, total, parent),
            Mode::Flat | Mode::Folded => self.flat(out, root, total),
        }
    }

    /// The children of `n` shown in graph mode.
    fn graph_children(&self, n: u32, total: u64) -> Vec<u32> {
        let min = match self.params.mode {
            Mode::Fractal => {
                let ch = self.forest.nodes[n as usize].children_hit;
                (ch as f64 * (self.params.min_percent / 100.0)).ceil() as u64
            }
            _ => self.min_hit(total),
        };
        self.sorted(n, min)
    }

    fn graph(&self, out: &mut String, root: u32, total: u64, parent: u64) {
        let start = out.len();
        let mut left = 0;
        let mut level = self.graph_children(root, total);
        let mut above = root;
        // A single chain at the top with the entry's whole period is printed
        // plainly, without a percentage.
        if let [only] = level[..] {
            if self.forest.nodes[only as usize].cumul() == parent {
                let mut printed = 0u32;
                for (i, &f) in self.forest.frames_of(only).iter().enumerate() {
                    if i == 0 && self.skip_first {
                        continue;
                    }
                    if printed == 0 {
                        margin(out, left);
                        out.push_str("|\n");
                        margin(out, left);
                        out.push_str("---");
                        left += 3;
                    } else {
                        margin(out, left);
                    }
                    out.push_str(self.name(f));
                    out.push('\n');
                    printed += 1;
                    if printed == self.params.print_limit {
                        break;
                    }
                }
                above = only;
                level = self.graph_children(only, total);
            }
        }
        let total = if self.params.mode == Mode::Fractal {
            parent
        } else {
            total
        };
        self.graph_level(out, &level, above, total, 1, 1, left);
        if out.len() != start {
            out.push('\n');
        }
    }

    /// One level of the graph: the nodes `level` below `above`, at `depth`;
    /// `mask`: the levels whose pipes go on.
    #[allow(clippy::too_many_arguments)]
    fn graph_level(
        &self,
        out: &mut String,
        level: &[u32],
        above: u32,
        total: u64,
        depth: u32,
        mask: u32,
        left: usize,
    ) {
        let fractal = self.params.mode == Mode::Fractal;
        let mut remaining = total;
        let mut new_mask = mask;
        let mut counted = 0u32;
        let mut printed = 0u32;
        for (i, &c) in level.iter().enumerate() {
            let n = &self.forest.nodes[c as usize];
            remaining = remaining.wrapping_sub(n.cumul());
            counted = counted.wrapping_add(n.cumul_count());
            // The last one closes its level's pipe, unless fractal mode still
            // shows the rest below it.
            if i + 1 == level.len() && (!fractal || remaining == 0) {
                new_mask &= !bit(depth - 1);
            }
            pipes(out, depth, mask, left);
            for (j, &f) in self.forest.frames_of(c).iter().enumerate() {
                self.line(out, depth, new_mask, j == 0, left, |o| {
                    self.value(o, n.cumul(), n.cumul_count(), total)
                });
                out.push_str(self.name(f));
                out.push('\n');
            }
            let below = if fractal { n.children_hit } else { total };
            let next = self.graph_children(c, total);
            self.graph_level(out, &next, c, below, depth + 1, new_mask | bit(depth), left);
            printed += 1;
            if printed == self.params.print_limit {
                break;
            }
        }
        if fractal && remaining != 0 && remaining != total {
            let mut rest = 0u32;
            if self.params.value == Value::Count && !level.is_empty() {
                let all = self.forest.nodes[above as usize].children_count;
                rest = all.wrapping_sub(counted);
                if rest == 0 {
                    return;
                }
            }
            new_mask &= !bit(depth - 1);
            self.line(out, depth, new_mask, true, left, |o| {
                self.value(o, remaining, rest, total)
            });
            // perf 6.1 allocates its stand-in symbol for the rest without
            // clearing it, and so adds ` (inlined)` when the memory's bit says so.
            out.push_str("[...]\n");
        }
    }

    /// The start of a frame's line: the pipes of the levels above, and on a
    /// node's first frame its value.
    fn line(
        &self,
        out: &mut String,
        depth: u32,
        mask: u32,
        first: bool,
        left: usize,
        value: impl FnOnce(&mut String),
    ) {
        margin(out, left);
        let mut value = Some(value);
        for i in 0..depth {
            out.push(if mask & bit(i) != 0 { '|' } else { ' ' });
            if first && i == depth - 1 {
                out.push_str("--");
                if let Some(v) = value.take() {
                    v(out);
                }
                out.push_str("--");
            } else {
                out.push_str("          ");
            }
        }
    }

    /// Flat and folded mode: every node that samples ended in, by its own
    /// period, with its whole chain.
    fn flat(&self, out: &mut String, root: u32, total: u64) {
        let min = self.min_hit(total);
        let mut picked = Vec::new();
        let mut parents = FxMap::default();
        self.post_order(root, min, &mut picked, &mut parents);
        let nodes = &self.forest.nodes;
        picked.sort_by(|&a, &b| nodes[b as usize].hit.cmp(&nodes[a as usize].hit));
        let mut path = Vec::new();
        for (i, &n) in picked.iter().enumerate() {
            path.clear();
            let mut up = n;
            while up != root {
                path.push(up);
                up = parents[&up];
            }
            let node = &nodes[n as usize];
            let frames = path
                .iter()
                .rev()
                .flat_map(|&p| self.forest.frames_of(p).iter().copied());
            if self.params.mode == Mode::Folded {
                self.value(out, node.hit, node.count, total);
                out.push(' ');
                for (j, f) in frames.enumerate() {
                    if j > 0 {
                        out.push(';');
                    }
                    out.push_str(self.name(f));
                }
                out.push('\n');
            } else {
                out.push_str("           ");
                self.value(out, node.cumul(), node.cumul_count(), total);
                out.push('\n');
                for f in frames {
                    out.push_str("                ");
                    out.push_str(self.name(f));
                    out.push('\n');
                }
                out.push('\n');
            }
            if i + 1 == self.params.print_limit as usize {
                break;
            }
        }
    }

    /// The nodes below and at `n` with a period of at least `min` (and not 0),
    /// children first in perf's tree order; `parents`: the parent of each node
    /// below `n`.
    fn post_order(&self, n: u32, min: u64, picked: &mut Vec<u32>, parents: &mut FxMap<u32, u32>) {
        let mut kids: Vec<u32> = self.forest.children(n).collect();
        kids.sort_by_key(|&c| std::cmp::Reverse(self.key(c)));
        for c in kids {
            parents.insert(c, n);
            self.post_order(c, min, picked, parents);
        }
        let h = self.forest.nodes[n as usize].hit;
        if h != 0 && h >= min {
            picked.push(n);
        }
    }
}

/// perf's `1 << i` on an int (x86 takes the count modulo 32).
fn bit(i: u32) -> u32 {
    1u32.wrapping_shl(i)
}

/// The left margin of graph lines.
fn margin(out: &mut String, left: usize) {
    for _ in 0..12 + left {
        out.push(' ');
    }
}

/// A line of pipes between nodes.
fn pipes(out: &mut String, depth: u32, mask: u32, left: usize) {
    margin(out, left);
    for i in 0..depth {
        out.push_str(if mask & bit(i) != 0 {
            "|          "
        } else {
            "           "
        });
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree of `root` as text: each node's frames, hit, children hit and
    /// counts, children sorted by first frame.
    fn dump(f: &Forest, n: u32, depth: usize, out: &mut String) {
        let node = &f.nodes[n as usize];
        let _ = writeln!(
            out,
            "{}{:?} {}/{} {}/{}",
            "  ".repeat(depth),
            f.frames_of(n),
            node.hit,
            node.children_hit,
            node.count,
            node.children_count
        );
        let mut kids: Vec<u32> = f.children(n).collect();
        kids.sort_by_key(|&c| f.frames_of(c)[0]);
        for c in kids {
            dump(f, c, depth + 1, out);
        }
    }

    fn tree(chains: &[(&[u32], u64)]) -> String {
        let mut f = Forest::default();
        let root = f.tree();
        for (c, p) in chains {
            f.append(root, c, *p, 1);
        }
        let mut s = String::new();
        dump(&f, root, 0, &mut s);
        s
    }

    #[test]
    fn append_extends_and_splits() {
        // One chain, then one that stops inside it, then one that leaves it.
        let t = tree(&[(&[1, 2, 3, 4], 10), (&[1, 2], 5), (&[1, 2, 7], 1)]);
        assert_eq!(
            t,
            "[] 0/16 0/3\n\
             \x20 [1, 2] 5/11 1/2\n\
             \x20   [3, 4] 10/0 1/0\n\
             \x20   [7] 1/0 1/0\n"
        );
        // The same chains in another order make the same tree.
        assert_eq!(
            t,
            tree(&[(&[1, 2, 7], 1), (&[1, 2], 5), (&[1, 2, 3, 4], 10)])
        );
        assert_eq!(
            t,
            tree(&[(&[1, 2], 5), (&[1, 2, 3, 4], 10), (&[1, 2, 7], 1)])
        );
    }

    #[test]
    fn split_keeps_children_below() {
        // A node with children split above them: they move to its lower half.
        let t = tree(&[
            (&[1, 2, 3], 1),
            (&[1, 2, 3, 4], 2),
            (&[1, 2, 3, 5], 3),
            (&[1, 9], 4),
        ]);
        assert_eq!(
            t,
            "[] 0/10 0/4\n\
             \x20 [1] 0/10 0/4\n\
             \x20   [2, 3] 1/5 1/2\n\
             \x20     [4] 2/0 1/0\n\
             \x20     [5] 3/0 1/0\n\
             \x20   [9] 4/0 1/0\n"
        );
    }

    #[test]
    fn equal_chains_add_up() {
        let mut f = Forest::default();
        let root = f.tree();
        f.append(root, &[1, 2], 3, 1);
        f.append(root, &[1, 2], 4, 2);
        f.append(root, &[], 100, 1);
        let mut s = String::new();
        dump(&f, root, 0, &mut s);
        assert_eq!(s, "[] 0/7 0/3\n  [1, 2] 7/0 3/0\n");
    }

    #[test]
    fn call_graph_words_as_perf() {
        let p = |v: &[&str]| {
            Setting::parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>(), false)
        };
        let s = p(&[""]).unwrap();
        assert!(s.given && !s.none);
        assert_eq!(s.params.order, Order::Caller);
        assert!(s.params.order_set);
        let s = p(&["f,0.1,5,cal,a,co"]).unwrap().params;
        assert_eq!(
            (
                s.mode,
                s.min_percent,
                s.print_limit,
                s.order,
                s.key,
                s.value
            ),
            (
                Mode::Flat,
                0.1,
                5,
                Order::Caller,
                ChainKey::Address,
                Value::Count
            )
        );
        assert_eq!(p(&["fo"]).unwrap().params.mode, Mode::Folded);
        assert_eq!(p(&["fr"]).unwrap().params.mode, Mode::Fractal);
        // Later words and later options win; a number after the print limit is
        // the print limit again; `none` ends the value.
        let s = p(&["graph,1,2,3", "callee"]).unwrap();
        assert_eq!(s.params.print_limit, 3);
        assert_eq!(s.params.order, Order::Callee);
        assert!(p(&["caller,n,junk"]).unwrap().none);
        assert!(!p(&["none", "graph"]).unwrap().none);
        assert_eq!(p(&["0x10,0x10"]).unwrap().params.print_limit, 16);
        assert_eq!(p(&["2.5e1x"]).unwrap().params.min_percent, 25.0);
        assert!(p(&["junk"]).is_err());
        assert!(p(&["0.5,x"]).is_err());
        assert!(p(&["branch"])
            .unwrap_err()
            .to_string()
            .contains("not supported"));
        assert!(p(&["srcline"])
            .unwrap_err()
            .to_string()
            .contains("not supported"));
        assert!(Setting::parse(&["graph".into()], true).unwrap().none);
    }
}
