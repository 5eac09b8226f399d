//! Expressions: the nasm/yasm operator set over 64-bit integers, with labels,
//! `$` (start of the current line) and `$$` (start of the current section).
//!
//! Evaluation tracks how many location terms an expression keeps after
//! differences cancel (`l2 - l1` has none, `l1 + 4` has one). yasm treats a
//! value with a location term as relocatable and never shrinks its field, so
//! the instruction encoder needs to know.

use iced_x86::Register;

/// A binary operator, by nasm precedence group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `|`
    Or,
    /// `^`
    Xor,
    /// `&`
    And,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (unsigned)
    Div,
    /// `//` (signed)
    SDiv,
    /// `%` (unsigned)
    Mod,
    /// `%%` (signed)
    SMod,
}

/// A unary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `-`
    Neg,
    /// `~`
    Not,
    /// `!`
    LogicalNot,
}

/// A label or `equ` name as an expression names it, fully qualified (local
/// labels carry their parent).
///
/// The parser numbers the names it reads ([`Symbol::number`]), so that layout,
/// which evaluates every expression on every pass, finds a name's definition
/// by index instead of hashing and comparing the name each time. Equality and
/// hashing look at the name only: the number is an index, not an identity.
#[derive(Debug, Clone)]
pub struct Symbol {
    /// The name.
    pub name: String,
    /// The parser's number for the name (equal names, equal numbers), or
    /// [`Symbol::UNNUMBERED`].
    pub number: u32,
}

impl Symbol {
    /// The number of a symbol no parser numbered: it is looked up by name.
    pub const UNNUMBERED: u32 = u32::MAX;
}

impl PartialEq for Symbol {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Symbol {}

impl std::hash::Hash for Symbol {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl std::ops::Deref for Symbol {
    type Target = str;
    fn deref(&self) -> &str {
        &self.name
    }
}

impl From<&str> for Symbol {
    fn from(name: &str) -> Self {
        Symbol {
            name: name.to_string(),
            number: Symbol::UNNUMBERED,
        }
    }
}

/// An expression tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// A number (already converted to 64 bits).
    Num(i64),
    /// A label or `equ` name.
    Sym(Symbol),
    /// `$`: the address of the start of the current line.
    Here,
    /// `$$`: the address of the start of the current section.
    SectionStart,
    /// A register; only valid inside a memory operand.
    Reg(Register),
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// True if the expression mentions a label, `$` or `$$` anywhere: its value
    /// may then change between layout passes.
    pub fn depends_on_layout(&self) -> bool {
        match self {
            Expr::Num(_) | Expr::Reg(_) => false,
            Expr::Sym(_) | Expr::Here | Expr::SectionStart => true,
            Expr::Unary(_, e) => e.depends_on_layout(),
            Expr::Binary(_, a, b) => a.depends_on_layout() || b.depends_on_layout(),
        }
    }

    /// True if the value may change between layout passes once terms that
    /// cancel (`l1 - l1`, `$ - $`) are dropped, as yasm drops them when it
    /// parses the expression.
    pub fn varies_with_layout(&self) -> bool {
        let mut terms = std::collections::BTreeMap::new();
        if self.linear_terms(1, &mut terms) {
            terms.values().any(|c| *c != 0)
        } else {
            self.depends_on_layout()
        }
    }

    /// The location terms (labels, `$`, `$$`) with their coefficients, if the
    /// expression is a sum of such terms and numbers.
    pub fn location_terms(&self) -> Option<std::collections::BTreeMap<String, i64>> {
        let mut terms = std::collections::BTreeMap::new();
        self.linear_terms(1, &mut terms).then_some(terms)
    }

    /// Adds `sign` times each location term to `terms`; false if the
    /// expression is not a sum of such terms and numbers.
    fn linear_terms(&self, sign: i64, terms: &mut std::collections::BTreeMap<String, i64>) -> bool {
        let mut add = |k: &str| *terms.entry(k.to_string()).or_insert(0) += sign;
        match self {
            Expr::Num(_) => true,
            Expr::Sym(s) => {
                add(s);
                true
            }
            Expr::Here => {
                add("$");
                true
            }
            Expr::SectionStart => {
                add("$$");
                true
            }
            Expr::Reg(_) => false,
            Expr::Unary(UnOp::Neg, e) => e.linear_terms(-sign, terms),
            Expr::Unary(_, e) => !e.depends_on_layout(),
            Expr::Binary(BinOp::Add, a, b) => {
                a.linear_terms(sign, terms) && b.linear_terms(sign, terms)
            }
            Expr::Binary(BinOp::Sub, a, b) => {
                a.linear_terms(sign, terms) && b.linear_terms(-sign, terms)
            }
            Expr::Binary(_, a, b) => !a.depends_on_layout() && !b.depends_on_layout(),
        }
    }

    /// True if the expression contains a register term.
    pub fn has_register(&self) -> bool {
        match self {
            Expr::Reg(_) => true,
            Expr::Num(_) | Expr::Sym(_) | Expr::Here | Expr::SectionStart => false,
            Expr::Unary(_, e) => e.has_register(),
            Expr::Binary(_, a, b) => a.has_register() || b.has_register(),
        }
    }

    /// Visits every symbol in the expression.
    pub fn for_each_symbol(&self, f: &mut dyn FnMut(&Symbol)) {
        match self {
            Expr::Sym(s) => f(s),
            Expr::Num(_) | Expr::Reg(_) | Expr::Here | Expr::SectionStart => {}
            Expr::Unary(_, e) => e.for_each_symbol(f),
            Expr::Binary(_, a, b) => {
                a.for_each_symbol(f);
                b.for_each_symbol(f);
            }
        }
    }
}

/// The value of an evaluated expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    /// The value, wrapping at 64 bits.
    pub value: i64,
    /// Net count of location terms (labels, `$`, `$$`); zero means the value
    /// is a plain number (differences of locations cancel).
    pub relocs: i32,
    /// True if an undefined symbol was replaced by a provisional value.
    pub provisional: bool,
    /// True if a label of another section takes part: yasm then never
    /// shrinks the field (no short branch, no imm8, no disp8).
    pub foreign: bool,
}

impl Value {
    /// A plain number.
    pub const fn num(value: i64) -> Self {
        Value {
            value,
            relocs: 0,
            provisional: false,
            foreign: false,
        }
    }

    /// True if the value is a plain number, not an address.
    pub const fn is_absolute(&self) -> bool {
        self.relocs == 0
    }
}

/// Why an expression has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvalError {
    /// The symbol is not defined anywhere.
    Undefined(String),
    /// Division or modulo by zero.
    DivideByZero,
    /// A register where a number was expected.
    Register,
    /// An operator applied to an address that only makes sense on numbers.
    NotConstant,
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::Undefined(s) => write!(f, "undefined symbol `{s}'"),
            EvalError::DivideByZero => write!(f, "divide by zero"),
            EvalError::Register => write!(f, "register not allowed in this expression"),
            EvalError::NotConstant => write!(f, "expression is not a constant"),
        }
    }
}

/// What an expression refers to while it is evaluated.
pub trait Scope {
    /// The value of a symbol: `Some((value, is_location))`, or `None` if unknown.
    fn symbol(&self, name: &str) -> Option<(i64, bool)>;
    /// The address of `$`.
    fn here(&self) -> i64;
    /// The address of `$$`.
    fn section_start(&self) -> i64;
    /// True while laying out: unknown symbols then get a provisional value.
    fn provisional(&self) -> bool;
    /// True if the symbol is a label in another section than the current one.
    fn foreign(&self, _name: &str) -> bool {
        false
    }
    /// [`Self::symbol`] and [`Self::foreign`] in one: `Some((value,
    /// is_location, foreign))`. A scope with a name table overrides it to
    /// look the name up once.
    fn lookup(&self, name: &str) -> Option<(i64, bool, bool)> {
        self.symbol(name)
            .map(|(v, loc)| (v, loc, self.foreign(name)))
    }
    /// [`Self::lookup`] of a symbol; a scope with a table by
    /// [`Symbol::number`] overrides it to skip the name.
    fn lookup_symbol(&self, symbol: &Symbol) -> Option<(i64, bool, bool)> {
        self.lookup(&symbol.name)
    }
}

/// Evaluates an expression.
pub fn eval(expr: &Expr, scope: &dyn Scope) -> Result<Value, EvalError> {
    match expr {
        Expr::Num(n) => Ok(Value::num(*n)),
        Expr::Here => Ok(Value {
            value: scope.here(),
            relocs: 1,
            provisional: false,
            foreign: false,
        }),
        Expr::SectionStart => Ok(Value {
            value: scope.section_start(),
            relocs: 1,
            provisional: false,
            foreign: false,
        }),
        Expr::Reg(_) => Err(EvalError::Register),
        Expr::Sym(symbol) => match scope.lookup_symbol(symbol) {
            Some((v, is_loc, foreign)) => Ok(Value {
                value: v,
                relocs: i32::from(is_loc),
                provisional: false,
                foreign,
            }),
            None if scope.provisional() => {
                // Forward reference in an early pass: pretend it is right here,
                // which makes branches start out short as yasm's do.
                Ok(Value {
                    value: scope.here(),
                    relocs: 1,
                    provisional: true,
                    foreign: false,
                })
            }
            None => Err(EvalError::Undefined(symbol.name.clone())),
        },
        Expr::Unary(op, e) => {
            let v = eval(e, scope)?;
            let value = match op {
                UnOp::Neg => v.value.wrapping_neg(),
                UnOp::Not => !v.value,
                UnOp::LogicalNot => i64::from(v.value == 0),
            };
            let relocs = match op {
                UnOp::Neg => -v.relocs,
                _ if v.relocs != 0 => return not_constant(v, scope),
                _ => 0,
            };
            Ok(Value {
                value,
                relocs,
                provisional: v.provisional,
                foreign: v.foreign,
            })
        }
        Expr::Binary(op, a, b) => {
            let x = eval(a, scope)?;
            let y = eval(b, scope)?;
            let provisional = x.provisional || y.provisional;
            let (value, relocs) = match op {
                BinOp::Add => (x.value.wrapping_add(y.value), x.relocs + y.relocs),
                BinOp::Sub => (x.value.wrapping_sub(y.value), x.relocs - y.relocs),
                _ => {
                    if x.relocs != 0 || y.relocs != 0 {
                        // Multiplying or masking an address: yasm rejects it
                        // unless the operand is a plain number; during early
                        // passes keep going with a best guess.
                        if !(scope.provisional() && provisional) {
                            return Err(EvalError::NotConstant);
                        }
                    }
                    (arith(*op, x.value, y.value, provisional)?, 0)
                }
            };
            Ok(Value {
                value,
                relocs,
                provisional,
                foreign: x.foreign || y.foreign,
            })
        }
    }
}

fn not_constant(v: Value, scope: &dyn Scope) -> Result<Value, EvalError> {
    if scope.provisional() && v.provisional {
        Ok(Value {
            value: 0,
            relocs: 0,
            provisional: true,
            foreign: v.foreign,
        })
    } else {
        Err(EvalError::NotConstant)
    }
}

fn arith(op: BinOp, x: i64, y: i64, provisional: bool) -> Result<i64, EvalError> {
    let zero = |y: i64| -> Result<(), EvalError> {
        if y == 0 {
            Err(EvalError::DivideByZero)
        } else {
            Ok(())
        }
    };
    Ok(match op {
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        BinOp::And => x & y,
        BinOp::Shl => {
            if (0..64).contains(&y) {
                x.wrapping_shl(y as u32)
            } else {
                0
            }
        }
        BinOp::Shr => {
            if (0..64).contains(&y) {
                ((x as u64) >> y) as i64
            } else {
                0
            }
        }
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div | BinOp::SDiv | BinOp::Mod | BinOp::SMod if y == 0 && provisional => 0,
        BinOp::Div => {
            zero(y)?;
            ((x as u64) / (y as u64)) as i64
        }
        BinOp::SDiv => {
            zero(y)?;
            x.wrapping_div(y)
        }
        BinOp::Mod => {
            zero(y)?;
            ((x as u64) % (y as u64)) as i64
        }
        BinOp::SMod => {
            zero(y)?;
            x.wrapping_rem(y)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct S {
        syms: HashMap<&'static str, i64>,
        here: i64,
        provisional: bool,
    }

    impl Scope for S {
        fn symbol(&self, name: &str) -> Option<(i64, bool)> {
            self.syms.get(name).map(|v| (*v, true))
        }
        fn here(&self) -> i64 {
            self.here
        }
        fn section_start(&self) -> i64 {
            0x1000
        }
        fn provisional(&self) -> bool {
            self.provisional
        }
    }

    fn scope(provisional: bool) -> S {
        S {
            syms: [("a", 0x1010), ("b", 0x1020)].into_iter().collect(),
            here: 0x1004,
            provisional,
        }
    }

    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    #[test]
    fn differences_of_locations_are_numbers() {
        let s = scope(false);
        let v = eval(
            &bin(BinOp::Sub, Expr::Sym("b".into()), Expr::Sym("a".into())),
            &s,
        )
        .unwrap();
        assert_eq!(v, Value::num(0x10));
        let v = eval(&bin(BinOp::Sub, Expr::Here, Expr::SectionStart), &s).unwrap();
        assert_eq!(v, Value::num(4));
        let v = eval(&bin(BinOp::Add, Expr::Sym("a".into()), Expr::Num(4)), &s).unwrap();
        assert_eq!(v.value, 0x1014);
        assert_eq!(v.relocs, 1);
    }

    #[test]
    fn arithmetic() {
        let s = scope(false);
        let e = bin(
            BinOp::Mul,
            Expr::Num(6),
            bin(BinOp::Shl, Expr::Num(1), Expr::Num(4)),
        );
        assert_eq!(eval(&e, &s).unwrap().value, 96);
        let e = bin(BinOp::Div, Expr::Num(-2), Expr::Num(2));
        assert_eq!(eval(&e, &s).unwrap().value, i64::MAX);
        let e = bin(BinOp::SDiv, Expr::Num(-2), Expr::Num(2));
        assert_eq!(eval(&e, &s).unwrap().value, -1);
        let e = bin(BinOp::Mod, Expr::Num(7), Expr::Num(0));
        assert_eq!(eval(&e, &s), Err(EvalError::DivideByZero));
        let e = Expr::Unary(UnOp::Not, Box::new(Expr::Num(0)));
        assert_eq!(eval(&e, &s).unwrap().value, -1);
    }

    #[test]
    fn undefined_symbols() {
        assert_eq!(
            eval(&Expr::Sym("zz".into()), &scope(false)),
            Err(EvalError::Undefined("zz".into()))
        );
        let v = eval(&Expr::Sym("zz".into()), &scope(true)).unwrap();
        assert!(v.provisional);
        assert_eq!(v.value, 0x1004);
    }

    #[test]
    fn cancelling_terms_do_not_vary() {
        let same = bin(BinOp::Sub, Expr::Sym("a".into()), Expr::Sym("a".into()));
        assert!(!same.varies_with_layout());
        let diff = bin(BinOp::Sub, Expr::Sym("b".into()), Expr::Sym("a".into()));
        assert!(diff.varies_with_layout());
        let here = bin(BinOp::Sub, Expr::Here, Expr::Here);
        assert!(!here.varies_with_layout());
    }

    #[test]
    fn masking_an_address_is_an_error() {
        let e = bin(BinOp::And, Expr::Sym("a".into()), Expr::Num(0xff));
        assert_eq!(eval(&e, &scope(false)), Err(EvalError::NotConstant));
    }
}
