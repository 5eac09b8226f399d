//! perf report's `--stdio` table: a header per event, then one line per entry
//! of the sort keys, by overhead (and, with call chains, by children first).

use std::cmp::Ordering;
use std::io::Write;
use std::rc::Rc;

use super::callgraph::{Printer, NONE};
use super::hist::{FxMap, Hists, Loc, SymKey};
use super::{samples, SortKey};
use pt_perf::sample::Kind;

/// A row as the sort keys see it: the columns they compare (perf's
/// `hist_entry__cmp`). Entries with equal keys are one.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    comm: Option<u32>,
    /// `Some(None)`: the dso column, outside any mapping.
    dso: Option<Option<Rc<str>>>,
    sym: Option<SymCol>,
}

/// The symbol as perf's `sym` key compares it: a symbol by its start (and its
/// dso when the dso is no key of its own), an unknown one by address alone.
#[derive(Clone, PartialEq, Eq, Hash)]
enum SymCol {
    Named(Option<Rc<str>>, u64, Rc<str>),
    Addr(u64),
}

impl Key {
    /// The key of command `comm` at `loc` under `keys`.
    pub(super) fn of(keys: &[SortKey], comm: u32, loc: &Loc) -> Key {
        let has = |k: SortKey| keys.contains(&k);
        Key {
            comm: has(SortKey::Comm).then_some(comm),
            dso: has(SortKey::Dso).then(|| loc.dso.clone()),
            sym: has(SortKey::Sym).then(|| match &loc.sym {
                SymKey::Named(n, start) => SymCol::Named(
                    (!has(SortKey::Dso)).then(|| loc.dso.clone()).flatten(),
                    *start,
                    n.clone(),
                ),
                SymKey::Addr(a) => SymCol::Addr(*a),
            }),
        }
    }
}

/// One entry of a table.
pub(super) struct Entry<'h> {
    pub comm: &'h Rc<str>,
    pub loc: &'h Loc,
    /// Self period.
    pub period: u64,
    /// Children period (the entry's and its callees').
    pub acc: u64,
    /// The longest call chain from the entry to a sample's IP (perf's
    /// `max_depth` of its call chains).
    pub depth: u32,
    /// The thread that made it (pid, tid).
    pub thread: (i32, i32),
    /// Its call graph's root ([`super::callgraph::NONE`]: none).
    pub tree: u32,
}

/// One event's entries.
pub(super) struct Table<'h> {
    pub kind: Kind,
    pub total: u64,
    pub nr: u64,
    pub entries: Vec<Entry<'h>>,
}

/// How the table is laid out.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    /// The Children column (perf's cumulative mode).
    pub children: bool,
    /// Call graphs are on: entries of equal children of one thread go caller
    /// first.
    pub graph: bool,
    /// The call graphs' order is caller first: `depth` is the longest chain
    /// from the entry down (else up).
    pub caller: bool,
}

/// The tables of `hists`' rows, merged by `keys`.
pub(super) fn of_hists<'h>(hists: &'h Hists, keys: &[SortKey]) -> Vec<Table<'h>> {
    // With all three keys, rows (by command and location) are entries already.
    let all = [SortKey::Comm, SortKey::Dso, SortKey::Sym]
        .iter()
        .all(|k| keys.contains(k));
    let mut tables = Vec::new();
    for h in &hists.hists {
        if all {
            tables.push(Table {
                kind: h.kind,
                total: h.total,
                nr: h.nr,
                entries: h
                    .rows
                    .iter()
                    .map(|r| Entry {
                        comm: hists.comm(r.comm),
                        loc: hists.loc(r.loc),
                        period: r.period,
                        acc: r.period,
                        depth: 0,
                        thread: (0, 0),
                        tree: NONE,
                    })
                    .collect(),
            });
            continue;
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(h.rows.len());
        let mut index: FxMap<Key, usize> = FxMap::default();
        for r in &h.rows {
            let loc = hists.loc(r.loc);
            let key = Key::of(keys, r.comm, loc);
            match index.get(&key) {
                Some(&j) => {
                    entries[j].period += r.period;
                    entries[j].acc += r.period;
                }
                None => {
                    index.insert(key, entries.len());
                    entries.push(Entry {
                        comm: hists.comm(r.comm),
                        loc,
                        period: r.period,
                        acc: r.period,
                        depth: 0,
                        thread: (0, 0),
                        tree: NONE,
                    });
                }
            }
        }
        tables.push(Table {
            kind: h.kind,
            total: h.total,
            nr: h.nr,
            entries,
        });
    }
    tables
}

/// Writes every event's table, in `names`' order (perf's), with `graph`'s call
/// graphs below the entries.
pub(super) fn write(
    out: &mut impl Write,
    mut tables: Vec<Table>,
    names: &[(Kind, String)],
    keys: &[SortKey],
    layout: Layout,
    graph: Option<&Printer>,
) {
    let _ = out.write_all(super::HEADER.as_bytes());
    let _ = writeln!(out, "#\n# Total Lost Samples: 0\n#");
    tables.sort_by_key(|t| names.iter().position(|(k, _)| *k == t.kind));
    for t in &mut tables {
        let name = names
            .iter()
            .find(|(k, _)| *k == t.kind)
            .map_or(t.kind.name().to_string(), |(_, n)| n.clone());
        let _ = writeln!(out, "# Samples: {} of event '{name}'", samples(t.nr));
        let _ = writeln!(out, "# Event count (approx.): {}\n#", t.total);
        let lines = &mut t.entries;
        // perf's order: the children, callers first within a thread (when
        // call graphs are on), self, then the sort keys.
        let perf_cmp = |a: &Entry, b: &Entry| {
            let mut o = Ordering::Equal;
            if layout.children {
                o = b.acc.cmp(&a.acc);
                if o.is_eq() && layout.graph && a.thread == b.thread {
                    o = if layout.caller {
                        b.depth.cmp(&a.depth)
                    } else {
                        a.depth.cmp(&b.depth)
                    };
                }
            }
            o.then_with(|| b.period.cmp(&a.period))
                .then_with(|| compare(a, b, keys))
        };
        if layout.children && layout.graph {
            // Across threads that order is not transitive: perf's result is
            // what inserting the entries one by one into its tree makes of it.
            lines.sort_by(|a, b| collapse_order(a, b, keys));
            let taken = std::mem::take(lines);
            *lines = tree_order(taken, perf_cmp);
        } else {
            lines.sort_by(perf_cmp);
        }
        let header = |key: SortKey| match key {
            SortKey::Comm => "Command",
            SortKey::Dso => "Shared Object",
            SortKey::Sym => "Symbol",
        };
        // perf widens the dso column to 16 (an address's digits) when some symbol
        // is unresolved.
        let unresolved = lines.iter().any(|l| matches!(l.loc.sym, SymKey::Addr(_)));
        let widths: Vec<usize> = keys
            .iter()
            .map(|&key| {
                let w = lines
                    .iter()
                    .map(|l| col_len(l, key))
                    .chain([header(key).len()])
                    .max()
                    .unwrap_or(0);
                match key {
                    SortKey::Dso if unresolved => w.max(16),
                    SortKey::Sym if unresolved => w.max(22),
                    _ => w,
                }
            })
            .collect();
        let (mut h1, mut h2) = if layout.children {
            (
                String::from("# Children      Self"),
                String::from("# ........  ........"),
            )
        } else {
            (String::from("# Overhead"), String::from("# ........"))
        };
        for (i, &key) in keys.iter().enumerate() {
            // perf writes each column's title into a buffer of 1024 bytes.
            let w = widths[i].min(1023);
            h1.push_str(&format!("  {:<w$}", header(key)));
            h2.push_str(&format!("  {}", ".".repeat(widths[i])));
        }
        let _ = writeln!(out, "{h1}\n{h2}\n#");
        let total = t.total;
        // Rows come by overhead: consecutive ones often share a percentage, so
        // the last ones formatted are kept.
        let mut cache: [(u64, String); 2] = [(u64::MAX, String::new()), (u64::MAX, String::new())];
        let mut pct = |line: &mut String, which: usize, p: u64| {
            let (cp, text) = &mut cache[which];
            if *cp != p || text.is_empty() {
                let v = if total == 0 {
                    0.0
                } else {
                    100.0 * p as f64 / total as f64
                };
                // perf's "%7.2f%%" in a column of 8.
                text.clear();
                let _ = std::fmt::Write::write_fmt(text, format_args!("  {v:>7.2}%"));
                *cp = p;
            }
            line.push_str(text);
        };
        let mut line = String::with_capacity(256);
        let pad = |line: &mut String, s: &str, w: usize| {
            line.push_str(s);
            line.extend(std::iter::repeat(' ').take(w.saturating_sub(s.len())));
        };
        for l in lines.iter() {
            line.clear();
            if layout.children {
                pct(&mut line, 0, l.acc);
            }
            pct(&mut line, 1, l.period);
            // perf pads the command and dso columns, and the symbol's only
            // when a column follows.
            for (i, &key) in keys.iter().enumerate() {
                line.push_str("  ");
                let start = line.len();
                match key {
                    SortKey::Comm => pad(&mut line, l.comm, widths[i]),
                    SortKey::Dso => pad(
                        &mut line,
                        l.loc.dso.as_deref().unwrap_or("[unknown]"),
                        widths[i],
                    ),
                    SortKey::Sym => {
                        line.push_str(level(l.loc));
                        match &l.loc.sym {
                            SymKey::Named(n, _) => line.push_str(n),
                            SymKey::Addr(0) => line.push_str("0000000000000000"),
                            SymKey::Addr(x) => {
                                line.push_str("0x");
                                hex16(&mut line, *x);
                            }
                        }
                    }
                }
                if key == SortKey::Sym && i + 1 < keys.len() {
                    let n = line[start..].len();
                    line.extend(std::iter::repeat(' ').take(widths[i].saturating_sub(n)));
                }
            }
            line.push('\n');
            if let Some(g) = graph {
                let own = if layout.children { l.acc } else { l.period };
                g.print(&mut line, l.tree, total, own);
            }
            if out.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
        let _ = writeln!(out, "\n");
    }
}

/// An address as 16 hexadecimal digits (`%016llx`).
fn hex16(line: &mut String, x: u64) {
    for i in 0..16 {
        let n = (x >> (60 - 4 * i)) & 15;
        line.push(char::from(b"0123456789abcdef"[n as usize]));
    }
}

/// The width of an entry's column.
fn col_len(l: &Entry, key: SortKey) -> usize {
    match key {
        SortKey::Comm => l.comm.len(),
        SortKey::Dso => l.loc.dso.as_deref().map_or(9, str::len),
        SortKey::Sym => match &l.loc.sym {
            SymKey::Named(n, _) => 4 + n.len(),
            SymKey::Addr(_) => 4 + 18,
        },
    }
}

/// The order perf keeps its entries in before it sorts them for output (its
/// `collapse` order): by command, by dso (none last), symbols by start before
/// addresses without one by address.
fn collapse_order(a: &Entry, b: &Entry, keys: &[SortKey]) -> Ordering {
    let dso = || match (&a.loc.dso, &b.loc.dso) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    for k in keys {
        let o = match k {
            SortKey::Comm => a.comm.cmp(b.comm),
            SortKey::Dso => dso(),
            SortKey::Sym => match (&a.loc.sym, &b.loc.sym) {
                (SymKey::Addr(x), SymKey::Addr(y)) => x.cmp(y),
                (x, y) => {
                    // Symbols are told apart by dso too when it is no key.
                    let d = if keys.contains(&SortKey::Dso) {
                        Ordering::Equal
                    } else {
                        dso()
                    };
                    d.then_with(|| match (x, y) {
                        (SymKey::Named(xn, xs), SymKey::Named(yn, ys)) => {
                            xs.cmp(ys).then_with(|| xn.cmp(yn))
                        }
                        (SymKey::Named(..), _) => Ordering::Less,
                        _ => Ordering::Greater,
                    })
                }
            },
        };
        if o.is_ne() {
            return o;
        }
    }
    Ordering::Equal
}

/// `items` in the order a red-black tree holds them after they were inserted
/// one by one, in turn, each to the left of a node it compares `Less` with
/// and else to its right (perf's output tree; with an order that is not
/// transitive, the tree's shape decides, so its balancing is perf's too).
fn tree_order<T>(items: Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    // The symbols' red-black tree, with entry ids for items (insertion order).
    let mut tree = pt_elf::symbols::tree::Tree::new();
    for i in 0..items.len() {
        tree.insert_by(0, 0, |at, _| cmp(&items[i], &items[at as usize]).is_lt());
    }
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    tree.in_order()
        .into_iter()
        .filter_map(|i| slots[i as usize].take())
        .collect()
}

/// perf's order of entries of equal overhead: by the sort keys in turn.
fn compare(a: &Entry, b: &Entry, keys: &[SortKey]) -> Ordering {
    // Names are shared: the same one is equal without comparing bytes.
    let text = |x: &Rc<str>, y: &Rc<str>| {
        if Rc::ptr_eq(x, y) {
            Ordering::Equal
        } else {
            x.cmp(y)
        }
    };
    for k in keys {
        let o = match k {
            SortKey::Comm => text(a.comm, b.comm),
            SortKey::Dso => match (&a.loc.dso, &b.loc.dso) {
                (Some(x), Some(y)) => text(x, y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
            SortKey::Sym => match (&a.loc.sym, &b.loc.sym) {
                (SymKey::Named(x, xs), SymKey::Named(y, ys)) => text(x, y).then(xs.cmp(ys)),
                (SymKey::Named(..), SymKey::Addr(_)) => Ordering::Less,
                (SymKey::Addr(_), SymKey::Named(..)) => Ordering::Greater,
                (SymKey::Addr(x), SymKey::Addr(y)) => x.cmp(y),
            },
        };
        if o.is_ne() {
            return o;
        }
    }
    Ordering::Equal
}

/// perf's privilege level column: `[k] ` for the kernel's code (its map, or an
/// address in the kernel's half outside any map), `[.] ` for user space.
fn level(loc: &super::hist::Loc) -> &'static str {
    let kernel = match (&loc.dso, &loc.sym) {
        (Some(d), _) => d.starts_with("[kernel.") || d.starts_with("[guest.kernel"),
        (None, SymKey::Addr(x)) => *x >= 0xffff_8000_0000_0000,
        (None, SymKey::Named(..)) => false,
    };
    if kernel {
        "[k] "
    } else {
        "[.] "
    }
}

#[cfg(test)]
mod tests {
    use super::tree_order;
    use std::cmp::Ordering;

    #[test]
    fn tree_order_is_a_stable_sort_for_an_order() {
        // (key, insertion number): equal keys keep their insertion order.
        let mut seed = 12345u32;
        let items: Vec<(u32, usize)> = (0..500)
            .map(|i| {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                ((seed >> 16) % 40, i)
            })
            .collect();
        let mut want = items.clone();
        want.sort_by_key(|&(k, _)| k);
        assert_eq!(tree_order(items, |a, b| a.0.cmp(&b.0)), want);
    }

    #[test]
    fn tree_order_follows_the_tree_shape() {
        // An order that is not transitive: the tree decides. Inserting 1, 2, 3
        // into a red-black tree makes 2 the root; then 4 goes below 3 unless it
        // is "less" than 2 as well.
        let cmp = |a: &u32, b: &u32| match (a, b) {
            (4, 2) => Ordering::Less,
            _ => a.cmp(b),
        };
        assert_eq!(tree_order(vec![1, 2, 3, 4], cmp), vec![1, 4, 2, 3]);
    }
}
