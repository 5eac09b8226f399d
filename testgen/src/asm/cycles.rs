//! Circular references, refused before layout as yasm refuses them ("circular
//! reference detected"): an `equ` whose value depends on itself, where it is used
//! (yasm lets one that nothing uses be), and a `times`
//! count that depends on its own length (a label after the line whose address the
//! repetitions move, not cancelled by another such label: `times end - $` is
//! circular, `times end - start` with both after the line is not).
//!
//! Without this the layout passes settle such values at whatever they first were
//! (0) and the source assembles to something yasm never writes.

use std::collections::HashMap;

use super::expr::Expr;
use super::parse::{Body, DataItem, Line, Operand, Stmt};
use super::AsmError;

/// yasm's words.
const CIRCULAR: &str = "circular reference detected";

/// How deep `equ`s are substituted into a `times` count before the check falls back
/// to "any later label" (a long chain of `equ`s in a count is not worth more).
const MAX_DEPTH: usize = 32;

/// Refuses the first circular reference of `lines`, naming its line.
pub fn check(lines: &[Line], file: &str) -> Result<(), AsmError> {
    let mut equs: HashMap<&str, (usize, &Expr)> = HashMap::new();
    let mut labels: HashMap<&str, usize> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = &line.label {
            match &line.stmt {
                Stmt::Equ(e) => {
                    equs.entry(name).or_insert((i, e));
                }
                _ => {
                    labels.entry(name).or_insert(i);
                }
            }
        }
    }
    let circular = |i: usize| AsmError {
        file: file.to_string(),
        line: lines.get(i).map_or(0, |l| l.number),
        message: CIRCULAR.into(),
    };
    // As yasm: an `equ` that depends on itself is an error where it is used.
    let mut cycles = EquCycles {
        equs: &equs,
        known: super::NameMap::default(),
    };
    for (i, line) in lines.iter().enumerate() {
        let mut used = false;
        line_exprs(line, &mut |e| {
            e.for_each_symbol(&mut |s| used = used || cycles.circular(s));
        });
        if used {
            return Err(circular(i));
        }
    }
    for (i, line) in lines.iter().enumerate() {
        if let Stmt::Emit { times: Some(t), .. } = &line.stmt {
            if t.depends_on_layout() && moves_itself(t, i, &equs, &labels) {
                return Err(circular(i));
            }
        }
    }
    Ok(())
}

/// Which `equ`s depend on themselves (directly or through others): those that
/// reach a cycle of `equ`s. An iterative depth-first search with memos: a long
/// chain must not overflow the stack.
struct EquCycles<'l, 'e> {
    equs: &'e HashMap<&'l str, (usize, &'l Expr)>,
    /// `true`: reaches a cycle; `false`: does not; absent: not known yet.
    known: super::NameMap<bool>,
}

impl EquCycles<'_, '_> {
    fn children(&self, name: &str) -> Vec<String> {
        let mut v = Vec::new();
        if let Some((_, e)) = self.equs.get(name) {
            e.for_each_symbol(&mut |s| {
                if self.equs.contains_key(s.name.as_str()) {
                    v.push(s.to_string());
                }
            });
        }
        v
    }

    /// Whether `name` (an `equ`) reaches a cycle.
    fn circular(&mut self, name: &str) -> bool {
        if !self.equs.contains_key(name) {
            return false;
        }
        if let Some(&b) = self.known.get(name) {
            return b;
        }
        // (name, children left, a child reaches a cycle)
        let mut stack: Vec<(String, Vec<String>, bool)> =
            vec![(name.to_string(), self.children(name), false)];
        let mut open: std::collections::HashSet<String> = std::collections::HashSet::new();
        open.insert(name.to_string());
        while let Some((_, kids, _)) = stack.last_mut() {
            match kids.pop() {
                None => {
                    let (n, _, bad) = stack.pop().unwrap_or_default();
                    open.remove(&n);
                    self.known.insert(n, bad);
                    if let Some(parent) = stack.last_mut() {
                        parent.2 |= bad;
                    }
                }
                Some(k) => {
                    let bad = if open.contains(&k) {
                        Some(true)
                    } else {
                        self.known.get(&k).copied()
                    };
                    match bad {
                        Some(b) => {
                            if let Some(top) = stack.last_mut() {
                                top.2 |= b;
                            }
                        }
                        None => {
                            open.insert(k.clone());
                            let c = self.children(&k);
                            stack.push((k, c, false));
                        }
                    }
                }
            }
        }
        self.known.get(name).copied().unwrap_or(false)
    }
}

/// Visits the expressions of `line` (not an `equ`'s own value).
pub(super) fn line_exprs(line: &Line, f: &mut dyn FnMut(&Expr)) {
    match &line.stmt {
        Stmt::Org(e) => f(e),
        Stmt::Align { boundary, fill } => {
            f(boundary);
            if let Some(x) = fill {
                f(x);
            }
        }
        Stmt::Section(d) => {
            for e in [&d.start, &d.vstart].into_iter().flatten() {
                f(e);
            }
        }
        Stmt::Emit { times, body } => {
            if let Some(t) = times {
                f(t);
            }
            match body {
                Body::Insn(insn) => {
                    for o in &insn.operands {
                        match o {
                            Operand::Imm(i) => f(&i.expr),
                            Operand::Mem(m) => {
                                if let Some(d) = &m.disp {
                                    f(d);
                                }
                            }
                            Operand::Far { seg, off } => {
                                f(seg);
                                f(off);
                            }
                            Operand::Reg(_) => {}
                        }
                    }
                }
                Body::Data { items, .. } => {
                    for i in items {
                        if let DataItem::Expr(e) = i {
                            f(e);
                        }
                    }
                }
                Body::Reserve { count, .. } => f(count),
            }
        }
        Stmt::Empty | Stmt::Bits(_) | Stmt::Equ(_) | Stmt::DefaultRel(_) | Stmt::Ignored => {}
    }
}

/// `e` with its `equ`s substituted (`None` past [`MAX_DEPTH`]).
fn expand(e: &Expr, equs: &HashMap<&str, (usize, &Expr)>, depth: usize) -> Option<Expr> {
    Some(match e {
        Expr::Sym(s) => match equs.get(s.name.as_str()) {
            Some((_, v)) if depth < MAX_DEPTH => expand(v, equs, depth + 1)?,
            Some(_) => return None,
            None => e.clone(),
        },
        Expr::Unary(op, a) => Expr::Unary(*op, Box::new(expand(a, equs, depth)?)),
        Expr::Binary(op, a, b) => Expr::Binary(
            *op,
            Box::new(expand(a, equs, depth)?),
            Box::new(expand(b, equs, depth)?),
        ),
        other => other.clone(),
    })
}

/// Whether the count `t` of the `times` on line `i` changes with the line's own
/// length.
fn moves_itself(
    t: &Expr,
    i: usize,
    equs: &HashMap<&str, (usize, &Expr)>,
    labels: &HashMap<&str, usize>,
) -> bool {
    let after = |s: &str| labels.get(s).is_some_and(|&at| at > i);
    if let Some(terms) = expand(t, equs, 0).and_then(|e| e.location_terms()) {
        // Each label after the line moves by the line's length: the count moves by
        // that times the sum of their coefficients.
        let moved: i64 = terms
            .iter()
            .filter(|(s, _)| after(s))
            .map(|(_, c)| *c)
            .sum();
        return moved != 0;
    }
    // Not a sum of locations: any label after the line (through any `equ`s) may
    // move it.
    let mut seen: Vec<String> = Vec::new();
    let mut todo: Vec<String> = Vec::new();
    t.for_each_symbol(&mut |s| todo.push(s.to_string()));
    while let Some(s) = todo.pop() {
        if seen.contains(&s) {
            continue;
        }
        if after(&s) {
            return true;
        }
        if let Some((_, e)) = equs.get(s.as_str()) {
            e.for_each_symbol(&mut |x| todo.push(x.to_string()));
        }
        seen.push(s);
    }
    false
}

#[cfg(test)]
mod tests {
    use crate::asm::assemble;

    fn err_line(src: &str) -> Option<(usize, String)> {
        assemble(src, "t.ptt").err().map(|e| (e.line, e.message))
    }

    #[test]
    fn circular_equs_are_refused() {
        let src = "bits 64\norg 0x1000\na equ b + 1\nb equ c\nc equ a\nnop\nd equ a\ndb d\n";
        assert_eq!(
            err_line(src),
            Some((8, "circular reference detected".into()))
        );
        // Unused, as yasm lets it be.
        assert_eq!(err_line("bits 64\norg 0\nx equ x\nnop\n"), None);
        assert_eq!(
            err_line("bits 64\norg 0\nx equ x\nmov eax, [x + 4]\n"),
            Some((4, "circular reference detected".into()))
        );
        // A chain is fine, however long.
        let mut chain = String::from("bits 64\norg 0\nv0 equ 1\n");
        for k in 1..5000 {
            chain.push_str(&format!("v{k} equ v{} + 1\n", k - 1));
        }
        chain.push_str("mov eax, v4999\n");
        assert_eq!(err_line(&chain), None);
    }

    #[test]
    fn times_that_move_their_own_count_are_refused() {
        let fwd = "bits 64\norg 0\ntimes end - $ nop\nnop\nend:\n";
        assert_eq!(
            err_line(fwd),
            Some((3, "circular reference detected".into()))
        );
        let via_equ = "bits 64\norg 0\nn equ end - $$\ntimes n nop\nend: nop\n";
        assert_eq!(
            err_line(via_equ),
            Some((4, "circular reference detected".into()))
        );
        // Both ends after the line: the difference does not move.
        let span = "bits 64\norg 0\ntimes e - s db 0\ns: nop\nnop\ne: nop\n";
        assert_eq!(err_line(span), None);
        let a = assemble(span, "t.ptt").unwrap();
        assert_eq!(&a.bytes[..2], &[0, 0]);
        // Backward references are plain constants.
        let back = "bits 64\norg 0\ns: nop\ne:\ntimes e - s int3\n";
        assert_eq!(err_line(back), None);
    }
}
