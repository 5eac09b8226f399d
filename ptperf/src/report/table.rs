//! perf report's `--stdio` table of [`Hists`]: a header per event, then one
//! line per row of the sort keys, by overhead.

use std::cmp::Ordering;
use std::io::Write;
use std::rc::Rc;

use super::hist::{FxMap, Hists, Loc, SymKey};
use super::{samples, SortKey};
use crate::sample::Kind;

/// A row as the sort keys see it: the columns they compare.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    comm: Option<Rc<str>>,
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

/// One printed row.
struct Line<'h> {
    key: Key,
    comm: &'h Rc<str>,
    loc: &'h Loc,
    period: u64,
}

/// Writes the table of every event, in `names`' order (perf's).
pub(super) fn write(
    out: &mut impl Write,
    hists: &Hists,
    names: &[(Kind, String)],
    keys: &[SortKey],
) {
    let _ = writeln!(
        out,
        "# To display the perf.data header info, please use --header/--header-only options.\n#"
    );
    let mut order: Vec<usize> = (0..hists.hists.len()).collect();
    order.sort_by_key(|&i| names.iter().position(|(k, _)| *k == hists.hists[i].kind));
    for i in order {
        let h = &hists.hists[i];
        let name = names
            .iter()
            .find(|(k, _)| *k == h.kind)
            .map_or(h.kind.name().to_string(), |(_, n)| n.clone());
        let _ = writeln!(out, "#\n# Total Lost Samples: 0\n#");
        let _ = writeln!(out, "# Samples: {} of event '{name}'", samples(h.nr));
        let _ = writeln!(out, "# Event count (approx.): {}\n#", h.total);
        // Rows the sort keys do not tell apart are one.
        let has = |k: SortKey| keys.contains(&k);
        let mut lines: Vec<Line> = Vec::with_capacity(h.rows.len());
        let mut index: FxMap<Key, usize> = FxMap::default();
        for r in &h.rows {
            let comm = hists.comm(r.comm);
            let loc = hists.loc(r.loc);
            let key = Key {
                comm: has(SortKey::Comm).then(|| comm.clone()),
                dso: has(SortKey::Dso).then(|| loc.dso.clone()),
                sym: has(SortKey::Sym).then(|| match &loc.sym {
                    SymKey::Named(n, start) => SymCol::Named(
                        (!has(SortKey::Dso)).then(|| loc.dso.clone()).flatten(),
                        *start,
                        n.clone(),
                    ),
                    SymKey::Addr(a) => SymCol::Addr(*a),
                }),
            };
            match index.get(&key) {
                Some(&j) => lines[j].period += r.period,
                None => {
                    index.insert(key.clone(), lines.len());
                    lines.push(Line {
                        key,
                        comm,
                        loc,
                        period: r.period,
                    });
                }
            }
        }
        lines.sort_by(|a, b| b.period.cmp(&a.period).then_with(|| compare(a, b, keys)));
        let col = |l: &Line, key: SortKey| -> String {
            match key {
                SortKey::Comm => l.comm.to_string(),
                SortKey::Dso => l.loc.dso.as_deref().unwrap_or("[unknown]").to_string(),
                SortKey::Sym => match &l.loc.sym {
                    SymKey::Named(n, _) => format!("[.] {n}"),
                    SymKey::Addr(0) => "[.] 0000000000000000".to_string(),
                    SymKey::Addr(x) => format!("[.] {x:#018x}"),
                },
            }
        };
        let header = |key: SortKey| match key {
            SortKey::Comm => "Command",
            SortKey::Dso => "Shared Object",
            SortKey::Sym => "Symbol",
        };
        // perf widens the dso column to 16 (an address's digits) when some symbol
        // is unresolved.
        let unresolved = lines
            .iter()
            .any(|l| matches!(l.loc.sym, SymKey::Addr(_)));
        let widths: Vec<usize> = keys
            .iter()
            .map(|&key| {
                let w = lines
                    .iter()
                    .map(|l| col(l, key).len())
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
        let mut h1 = String::from("# Overhead");
        let mut h2 = String::from("# ........");
        for (i, &key) in keys.iter().enumerate() {
            h1.push_str(&format!("  {:<w$}", header(key), w = widths[i]));
            h2.push_str(&format!("  {}", ".".repeat(widths[i])));
        }
        let _ = writeln!(out, "{h1}\n{h2}\n#");
        for l in &lines {
            let pct = if h.total == 0 {
                0.0
            } else {
                100.0 * l.period as f64 / h.total as f64
            };
            let mut line = format!("  {:>8}", format!("{pct:.2}%"));
            for (i, &key) in keys.iter().enumerate() {
                let c = col(l, key);
                if i + 1 == keys.len() {
                    line.push_str(&format!("  {c}"));
                } else {
                    line.push_str(&format!("  {c:<w$}", w = widths[i]));
                }
            }
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "\n");
    }
}

/// perf's order of rows of equal overhead: by the sort keys in turn.
fn compare(a: &Line, b: &Line, keys: &[SortKey]) -> Ordering {
    for k in keys {
        let o = match k {
            SortKey::Comm => a.comm.cmp(b.comm),
            SortKey::Dso => match (&a.loc.dso, &b.loc.dso) {
                (Some(x), Some(y)) => x.cmp(y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
            SortKey::Sym => match (&a.loc.sym, &b.loc.sym) {
                (SymKey::Named(x, xs), SymKey::Named(y, ys)) => x.cmp(y).then(xs.cmp(ys)),
                (SymKey::Named(..), SymKey::Addr(_)) => Ordering::Less,
                (SymKey::Addr(_), SymKey::Named(..)) => Ordering::Greater,
                (SymKey::Addr(x), SymKey::Addr(y)) => x.cmp(y),
            },
        };
        if o.is_ne() {
            return o;
        }
    }
    let _ = (&a.key, &b.key);
    Ordering::Equal
}
