//! The reader of the Itanium C++ ABI's `<mangled-name>` grammar
//! (itanium-cxx-abi.github.io, "External Names"), building the tree of
//! [`ast`](super::ast) with libiberty's substitution table: the same
//! candidates in the same order, so that `S_` and `T_` mean what they mean to
//! `cplus_demangle`.
//!
//! Every step is bounded: nesting deeper than [`MAX_DEPTH`] and more
//! substitution candidates than the name has bytes fail the name, and the
//! reader never goes back more than one template-argument list.

use super::ast::{self, Id, LiteralStyle, Modifier, Node};
use super::special;

/// Deepest nesting of types, names and expressions read: a name of at most
/// 1024 bytes (all libiberty reads) nests at most this deep, so no name
/// libiberty reads is refused, and none exhausts the stack.
pub(super) const MAX_DEPTH: u32 = 1024;

pub(super) struct Parser<'a> {
    s: &'a str,
    pos: usize,
    pub(super) nodes: Vec<Node<'a>>,
    subs: Vec<Id>,
    /// The last source name read: what `C1` and `D1` name.
    last_name: Option<Id>,
    depth: u32,
    /// Reading the type of a conversion operator (`cv`).
    is_conversion: bool,
    /// Reading an expression (`cv` is a cast there).
    is_expression: bool,
    /// How `sr` is read: 1 tries the current `sr <prefix> E <name>` first
    /// (and becomes -1 once it did), 0 reads the old `sr <type> <name>`.
    pub(super) unresolved_name_state: i8,
}

type R = Option<Id>;

impl<'a> Parser<'a> {
    pub(super) fn new(s: &'a str) -> Self {
        Parser {
            s,
            pos: 0,
            nodes: Vec::with_capacity(s.len()),
            subs: Vec::new(),
            last_name: None,
            depth: 0,
            is_conversion: false,
            is_expression: false,
            unresolved_name_state: 1,
        }
    }

    // ---- input ----

    pub(super) fn peek(&self) -> u8 {
        self.s.as_bytes().get(self.pos).copied().unwrap_or(0)
    }

    pub(super) fn peek_next(&self) -> u8 {
        if self.peek() == 0 {
            return 0;
        }
        self.s.as_bytes().get(self.pos + 1).copied().unwrap_or(0)
    }

    pub(super) fn advance(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.s.len());
    }

    pub(super) fn next_char(&mut self) -> u8 {
        let c = self.peek();
        if c != 0 {
            self.pos += 1;
        }
        c
    }

    pub(super) fn check(&mut self, c: u8) -> bool {
        if self.peek() == c {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn rest(&self) -> &'a str {
        self.s.get(self.pos..).unwrap_or("")
    }

    pub(super) fn add(&mut self, n: Node<'a>) -> Id {
        self.nodes.push(n);
        (self.nodes.len() - 1) as Id
    }

    pub(super) fn node(&self, id: Id) -> &Node<'a> {
        &self.nodes[id as usize]
    }

    fn add_sub(&mut self, id: Id) -> Option<()> {
        // libiberty sizes its table by the name's length.
        if self.subs.len() >= self.s.len() {
            return None;
        }
        self.subs.push(id);
        Some(())
    }

    /// Runs `f` one level deeper, failing past [`MAX_DEPTH`].
    pub(super) fn nest<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    // ---- numbers ----

    /// The run of decimal digits here, as written (a dimension).
    fn digits(&mut self) -> Option<&'a str> {
        let start = self.pos;
        while self.peek().is_ascii_digit() {
            self.advance(1);
        }
        self.s.get(start..self.pos)
    }

    /// `[n] <digits>`; no digit reads 0, overflow fails (-1).
    pub(super) fn number(&mut self) -> i64 {
        let negative = self.check(b'n');
        let mut n: i64 = 0;
        while self.peek().is_ascii_digit() {
            let d = i64::from(self.peek() - b'0');
            if n > (i64::from(i32::MAX) - d) / 10 {
                return -1;
            }
            n = n * 10 + d;
            self.advance(1);
        }
        if negative {
            -n
        } else {
            n
        }
    }

    /// `_` is 0, `<n>_` is n + 1.
    pub(super) fn compact_number(&mut self) -> Option<u32> {
        let n = match self.peek() {
            b'_' => 0,
            b'n' => return None,
            _ => self.number() + 1,
        };
        if n < 0 || !self.check(b'_') {
            return None;
        }
        u32::try_from(n).ok()
    }

    /// An optional `_<digit>` or `__<number>_` after a local entity.
    fn discriminator(&mut self) -> Option<()> {
        if !self.check(b'_') {
            return Some(());
        }
        let two = self.check(b'_');
        let n = self.number();
        if n < 0 {
            return None;
        }
        if two && n >= 10 && !self.check(b'_') {
            return None;
        }
        Some(())
    }

    // ---- names ----

    /// `_Z <encoding>` (the `_` may be missing below the top).
    pub(super) fn mangled_name(&mut self, top: bool) -> R {
        if !self.check(b'_') && top {
            return None;
        }
        if !self.check(b'Z') {
            return None;
        }
        self.encoding(top)
    }

    /// `<encoding>`. At the top, as libiberty without `DMGL_PARAMS`, only
    /// the name is read, without the qualifiers of a member function.
    pub(super) fn encoding(&mut self, top: bool) -> R {
        self.nest(|p| {
            if matches!(p.peek(), b'G' | b'T') {
                return special::special_name(p);
            }
            let mut dc = p.name(false)?;
            if top {
                while p.node(dc).is_fn_qualifier() {
                    dc = p.node(dc).inner()?;
                }
                if let Node::Local(f, mut r) = *p.node(dc) {
                    while p.node(r).is_fn_qualifier() {
                        r = p.node(r).inner()?;
                    }
                    p.nodes[dc as usize] = Node::Local(f, r);
                }
                return Some(dc);
            }
            if matches!(p.peek(), 0 | b'E') {
                return Some(dc);
            }
            let ret = p.has_return_type(dc);
            let mut ft = p.bare_function_type(ret)?;
            if matches!(p.node(dc), Node::Local(..)) {
                if let Node::Function(_, params) = *p.node(ft) {
                    ft = p.add(Node::Function(None, params));
                }
            }
            Some(p.add(Node::Typed(dc, ft)))
        })
    }

    fn has_return_type(&self, dc: Id) -> bool {
        match *self.node(dc) {
            Node::Local(_, r) => self.has_return_type(r),
            Node::Template(n, _) => !self.is_ctor_dtor_or_conversion(n),
            ref n if n.is_fn_qualifier() => n.inner().is_some_and(|i| self.has_return_type(i)),
            _ => false,
        }
    }

    fn is_ctor_dtor_or_conversion(&self, dc: Id) -> bool {
        match *self.node(dc) {
            Node::Qual(_, r) | Node::Local(_, r) => self.is_ctor_dtor_or_conversion(r),
            Node::Ctor(_) | Node::Dtor(_) | Node::Conversion(_) => true,
            _ => false,
        }
    }

    /// `<name>`; `substable`: a class or enum type, itself a substitution
    /// candidate.
    pub(super) fn name(&mut self, substable: bool) -> R {
        self.nest(|p| {
            let mut subst = false;
            let dc = match p.peek() {
                b'N' => p.nested_name()?,
                b'Z' => p.local_name()?,
                b'U' => p.unqualified_name(None)?,
                c => {
                    let (mut scope, mut module) = (None, None);
                    if c == b'S' {
                        if p.peek_next() == b't' {
                            p.advance(2);
                            scope = Some(p.add(Node::Name("std")));
                        }
                        if p.peek() == b'S' {
                            let sub = p.substitution(false)?;
                            if matches!(p.node(sub), Node::Module { .. }) {
                                module = Some(sub);
                            } else {
                                if scope.is_some() {
                                    return None;
                                }
                                scope = Some(sub);
                                subst = true;
                            }
                        }
                    }
                    let mut dc = if subst {
                        scope?
                    } else {
                        p.unqualified_name_in(scope, module)?
                    };
                    if p.peek() == b'I' {
                        // <unscoped-template-name> <template-args>
                        if !subst {
                            p.add_sub(dc)?;
                        }
                        let args = p.template_args()?;
                        dc = p.add(Node::Template(dc, args));
                        subst = false;
                    }
                    dc
                }
            };
            if substable && !subst {
                p.add_sub(dc)?;
            }
            Some(dc)
        })
    }

    /// `N [<CV-qualifiers>] [<ref-qualifier>] <prefix> E`.
    fn nested_name(&mut self) -> R {
        if !self.check(b'N') {
            return None;
        }
        let quals = self.cv_qualifiers(true)?;
        let rqual = self.ref_qualifier();
        let prefix = self.prefix(true)?;
        let mut ret = self.wrap_qualifiers(&quals, prefix);
        if let Some(m) = rqual {
            ret = self.add(Node::Modifier(m, ret));
        }
        if !self.check(b'E') {
            return None;
        }
        Some(ret)
    }

    /// `<prefix>`: every component but the last is a substitution candidate
    /// (when `substable`).
    fn prefix(&mut self, substable: bool) -> R {
        let mut ret: Option<Id> = None;
        loop {
            let peek = self.peek();
            if peek == b'D' && matches!(self.peek_next(), b'T' | b't') {
                if ret.is_some() {
                    return None;
                }
                ret = Some(self.type_()?);
            } else if peek == b'I' {
                let r = ret?;
                let args = self.template_args()?;
                ret = Some(self.add(Node::Template(r, args)));
            } else if peek == b'T' {
                if ret.is_some() {
                    return None;
                }
                ret = Some(self.template_param()?);
            } else if peek == b'M' {
                // The initializer scope of a lambda: not printed.
                self.advance(1);
                continue;
            } else if peek == b'S' {
                let sub = self.substitution(true)?;
                if matches!(self.node(sub), Node::Module { .. }) {
                    ret = Some(self.unqualified_name_in(ret, Some(sub))?);
                } else {
                    if ret.is_some() {
                        return None;
                    }
                    ret = Some(sub);
                    continue;
                }
            } else {
                ret = Some(self.unqualified_name(ret)?);
            }
            if self.peek() == b'E' {
                break;
            }
            if substable {
                self.add_sub(ret?)?;
            }
        }
        ret
    }

    /// `<unqualified-name>`, joined to `scope` when there is one.
    fn unqualified_name(&mut self, scope: Option<Id>) -> R {
        self.unqualified_name_in(scope, None)
    }

    /// `<unqualified-name>` of the module `module` (C++20 modules: `W`
    /// names, each a substitution candidate, printed `name@module`).
    fn unqualified_name_in(&mut self, scope: Option<Id>, mut module: Option<Id>) -> R {
        while self.check(b'W') {
            let partition = self.check(b'P');
            let name = self.source_name()?;
            let m = self.add(Node::Module {
                parent: module,
                name,
                partition,
            });
            self.add_sub(m)?;
            module = Some(m);
        }
        let peek = self.peek();
        let mut ret = if peek.is_ascii_digit() {
            self.source_name()?
        } else if peek.is_ascii_lowercase() {
            let was = self.is_expression;
            if peek == b'o' && self.peek_next() == b'n' {
                self.advance(2);
                self.is_expression = false;
            }
            let r = self.operator_name();
            self.is_expression = was;
            let r = r?;
            if let Node::Operator(op) = self.node(r) {
                if op.code == "li" {
                    let n = self.source_name()?;
                    self.add(Node::Unary(r, n))
                } else {
                    r
                }
            } else {
                r
            }
        } else if peek == b'C' || peek == b'D' {
            self.ctor_dtor_name()?
        } else if peek == b'L' {
            self.advance(1);
            let n = self.source_name()?;
            self.discriminator()?;
            n
        } else if peek == b'U' {
            match self.peek_next() {
                b'l' => self.lambda()?,
                b't' => self.unnamed_type()?,
                _ => return None,
            }
        } else {
            return None;
        };
        if let Some(m) = module {
            ret = self.add(Node::ModuleEntity(ret, m));
        }
        if self.peek() == b'B' {
            ret = self.abi_tags(ret)?;
        }
        if let Some(scope) = scope {
            ret = self.add(Node::Qual(scope, ret));
        }
        Some(ret)
    }

    /// `<source-name> ::= <length> <identifier>`.
    fn source_name(&mut self) -> R {
        let len = self.number();
        if len <= 0 {
            return None;
        }
        let len = len as usize;
        let rest = self.rest();
        let ident = rest.get(..len)?;
        self.advance(len);
        // g++'s name of an anonymous namespace: _GLOBAL_ [._$] N …
        let b = ident.as_bytes();
        let id = if len >= 10
            && ident.starts_with("_GLOBAL_")
            && matches!(b[8], b'.' | b'_' | b'$')
            && b[9] == b'N'
        {
            self.add(Node::Name("(anonymous namespace)"))
        } else {
            self.add(Node::Name(ident))
        };
        self.last_name = Some(id);
        Some(id)
    }

    fn abi_tags(&mut self, mut dc: Id) -> R {
        let hold = self.last_name;
        while self.check(b'B') {
            let tag = self.source_name()?;
            dc = self.add(Node::Tagged(dc, tag));
        }
        self.last_name = hold;
        Some(dc)
    }

    fn operator_name(&mut self) -> R {
        let c1 = self.next_char();
        let c2 = self.next_char();
        if c1 == b'v' && c2.is_ascii_digit() {
            let n = self.source_name()?;
            return Some(self.add(Node::VendorOperator(n)));
        }
        if c1 == b'c' && c2 == b'v' {
            let was = self.is_conversion;
            self.is_conversion = !self.is_expression;
            let ty = self.type_();
            let conversion = self.is_conversion;
            self.is_conversion = was;
            let ty = ty?;
            return Some(self.add(if conversion {
                Node::Conversion(ty)
            } else {
                Node::Cast(ty)
            }));
        }
        let op = ast::operator(&[c1, c2])?;
        Some(self.add(Node::Operator(op)))
    }

    fn ctor_dtor_name(&mut self) -> R {
        match self.peek() {
            b'C' => {
                let inheriting = self.peek_next() == b'I';
                if inheriting {
                    self.advance(1);
                }
                if !matches!(self.peek_next(), b'1'..=b'5') {
                    return None;
                }
                self.advance(2);
                if inheriting {
                    // The base class is not printed, nor is a misread one
                    // an error to libiberty.
                    let _ = self.type_();
                }
                let name = self.last_name?;
                Some(self.add(Node::Ctor(name)))
            }
            b'D' => {
                if !matches!(self.peek_next(), b'0' | b'1' | b'2' | b'4' | b'5') {
                    return None;
                }
                self.advance(2);
                let name = self.last_name?;
                Some(self.add(Node::Dtor(name)))
            }
            _ => None,
        }
    }

    /// `Ul <lambda-sig> E [<number>] _`; libiberty makes the closure type a
    /// substitution candidate of its own.
    fn lambda(&mut self) -> R {
        self.advance(2);
        let params = self.parmlist()?;
        if !self.check(b'E') {
            return None;
        }
        let num = self.compact_number()?;
        Some(self.add(Node::Lambda(params, num)))
    }

    /// `Ut [<number>] _`.
    fn unnamed_type(&mut self) -> R {
        self.advance(2);
        let num = self.compact_number()?;
        let u = self.add(Node::UnnamedType(num));
        self.add_sub(u)?;
        Some(u)
    }

    /// `Z <encoding> E <entity> [<discriminator>]`.
    fn local_name(&mut self) -> R {
        if !self.check(b'Z') {
            return None;
        }
        let mut function = self.encoding(false)?;
        if !self.check(b'E') {
            return None;
        }
        let name = if self.check(b's') {
            self.discriminator()?;
            self.add(Node::Name("string literal"))
        } else {
            let mut num = None;
            if self.check(b'd') {
                num = Some(self.compact_number()?);
            }
            let name = self.name(false)?;
            if !matches!(self.node(name), Node::Lambda(..) | Node::UnnamedType(_)) {
                self.discriminator()?;
            }
            match num {
                Some(n) => self.add(Node::DefaultArg(n, name)),
                None => name,
            }
        };
        // The containing function's return type is not printed.
        if let Node::Typed(n, ft) = *self.node(function) {
            if let Node::Function(Some(_), params) = *self.node(ft) {
                let ft = self.add(Node::Function(None, params));
                function = self.add(Node::Typed(n, ft));
            }
        }
        Some(self.add(Node::Local(function, name)))
    }

    /// `S_`, `S<seq-id>_` or a standard abbreviation. `prefix`: a name
    /// follows in the same nested name (then `Ss` before a constructor is
    /// written out in full).
    pub(super) fn substitution(&mut self, prefix: bool) -> R {
        if !self.check(b'S') {
            return None;
        }
        let mut c = self.next_char();
        if c == b'_' || c.is_ascii_digit() || c.is_ascii_uppercase() {
            let mut id: u32 = 0;
            if c != b'_' {
                loop {
                    let d = match c {
                        b'0'..=b'9' => c - b'0',
                        b'A'..=b'Z' => c - b'A' + 10,
                        _ => return None,
                    };
                    id = id.checked_mul(36)?.checked_add(u32::from(d))?;
                    c = self.next_char();
                    if c == b'_' {
                        break;
                    }
                }
                id = id.checked_add(1)?;
            }
            return self.subs.get(id as usize).copied();
        }
        let verbose = prefix && matches!(self.peek(), b'C' | b'D');
        let sub = ast::STD_SUBS.iter().find(|s| s.code == c)?;
        if let Some(last) = sub.last_name {
            self.last_name = Some(self.add(Node::StdSub(last)));
        }
        let mut dc = self.add(Node::StdSub(if verbose { sub.full } else { sub.simple }));
        if self.peek() == b'B' {
            dc = self.abi_tags(dc)?;
            self.add_sub(dc)?;
        }
        Some(dc)
    }

    // ---- types ----

    /// The qualifiers `r`, `V`, `K`, `Dx`, `Do`, `DO…E`, `Dw…E`, outermost
    /// first, as (kind, noexcept expression or throw list).
    fn cv_qualifiers(&mut self, member_fn: bool) -> Option<Vec<Qualifier>> {
        let mut quals = Vec::new();
        loop {
            let q = match (self.peek(), self.peek_next()) {
                (b'r', _) => Qualifier::Mod(Modifier::Restrict),
                (b'V', _) => Qualifier::Mod(Modifier::Volatile),
                (b'K', _) => Qualifier::Mod(Modifier::Const),
                (b'D', b'x') => Qualifier::Mod(Modifier::TransactionSafe),
                (b'D', b'o') => Qualifier::Noexcept(None),
                (b'D', b'O') => Qualifier::Noexcept(Some(0)),
                (b'D', b'w') => Qualifier::Throw(0),
                _ => break,
            };
            let q = match q {
                Qualifier::Mod(m) => {
                    self.advance(if m == Modifier::TransactionSafe { 2 } else { 1 });
                    Qualifier::Mod(if member_fn { m.this() } else { m })
                }
                Qualifier::Noexcept(None) => {
                    self.advance(2);
                    q
                }
                Qualifier::Noexcept(Some(_)) => {
                    self.advance(2);
                    let e = self.expression()?;
                    if !self.check(b'E') {
                        return None;
                    }
                    Qualifier::Noexcept(Some(e))
                }
                Qualifier::Throw(_) => {
                    self.advance(2);
                    let l = self.parmlist()?;
                    if !self.check(b'E') {
                        return None;
                    }
                    Qualifier::Throw(l)
                }
            };
            quals.push(q);
            if quals.len() > MAX_DEPTH as usize {
                return None;
            }
        }
        if !member_fn && self.peek() == b'F' {
            for q in &mut quals {
                if let Qualifier::Mod(m) = q {
                    *m = m.this();
                }
            }
        }
        Some(quals)
    }

    /// Wraps `inner` in `quals` (the first read is the outermost).
    fn wrap_qualifiers(&mut self, quals: &[Qualifier], mut inner: Id) -> Id {
        for q in quals.iter().rev() {
            inner = self.add(match *q {
                Qualifier::Mod(m) => Node::Modifier(m, inner),
                Qualifier::Noexcept(e) => Node::Noexcept(inner, e),
                Qualifier::Throw(l) => Node::Throw(inner, l),
            });
        }
        inner
    }

    fn ref_qualifier(&mut self) -> Option<Modifier> {
        match self.peek() {
            b'R' => {
                self.advance(1);
                Some(Modifier::ReferenceThis)
            }
            b'O' => {
                self.advance(1);
                Some(Modifier::RvalueReferenceThis)
            }
            _ => None,
        }
    }

    /// `<type>`.
    pub(super) fn type_(&mut self) -> R {
        self.nest(|p| p.type_inner())
    }

    fn type_inner(&mut self) -> R {
        let peek = self.peek();
        if matches!(peek, b'r' | b'V' | b'K')
            || (peek == b'D' && matches!(self.peek_next(), b'x' | b'o' | b'O' | b'w'))
        {
            let quals = self.cv_qualifiers(false)?;
            let inner = if self.peek() == b'F' {
                self.function_type()?
            } else {
                self.type_()?
            };
            // A ref-qualifier of the function goes outside its cv-qualifiers.
            let ret = match *self.node(inner) {
                Node::Modifier(
                    m @ (Modifier::ReferenceThis | Modifier::RvalueReferenceThis),
                    f,
                ) if !quals.is_empty() => {
                    let q = self.wrap_qualifiers(&quals, f);
                    self.add(Node::Modifier(m, q))
                }
                _ => self.wrap_qualifiers(&quals, inner),
            };
            self.add_sub(ret)?;
            return Some(ret);
        }
        let mut can_subst = true;
        let ret = match peek {
            b'a'..=b'j' | b'l'..=b'o' | b's'..=b't' | b'v'..=b'z' => {
                self.advance(1);
                can_subst = false;
                self.add(Node::Builtin(ast::builtin(peek)?))
            }
            b'u' => {
                self.advance(1);
                let n = self.source_name()?;
                self.add(Node::Vendor(n))
            }
            b'F' => self.function_type()?,

            b'A' => self.array_type()?,
            b'M' => self.ptrmem_type()?,
            b'T' => {
                let mut ret = self.template_param()?;
                if self.peek() == b'I' {
                    if !self.is_conversion {
                        self.add_sub(ret)?;
                        let args = self.template_args()?;
                        ret = self.add(Node::Template(ret, args));
                    } else {
                        // In a conversion operator's type, `T_ I…E` is a
                        // template-template parameter only if more
                        // arguments follow.
                        let (pos, nodes, subs, last) =
                            (self.pos, self.nodes.len(), self.subs.len(), self.last_name);
                        let args = self.template_args()?;
                        if self.peek() == b'I' {
                            self.add_sub(ret)?;
                            ret = self.add(Node::Template(ret, args));
                        } else {
                            self.pos = pos;
                            self.nodes.truncate(nodes);
                            self.subs.truncate(subs);
                            self.last_name = last;
                        }
                    }
                }
                ret
            }
            b'S' => {
                let next = self.peek_next();
                if next.is_ascii_digit() || next == b'_' || next.is_ascii_uppercase() {
                    let mut ret = self.substitution(false)?;
                    if self.peek() == b'I' {
                        let args = self.template_args()?;
                        ret = self.add(Node::Template(ret, args));
                    } else {
                        can_subst = false;
                    }
                    ret
                } else {
                    can_subst = false;
                    self.name(true)?
                }
            }
            b'O' | b'P' | b'R' | b'C' | b'G' => {
                self.advance(1);
                let m = match peek {
                    b'O' => Modifier::RvalueReference,
                    b'P' => Modifier::Pointer,
                    b'R' => Modifier::Reference,
                    b'C' => Modifier::Complex,
                    _ => Modifier::Imaginary,
                };
                let inner = self.type_()?;
                self.add(Node::Modifier(m, inner))
            }
            b'U' => {
                self.advance(1);
                let mut q = self.source_name()?;
                if self.peek() == b'I' {
                    let args = self.template_args()?;
                    q = self.add(Node::Template(q, args));
                }
                let inner = self.type_()?;
                self.add(Node::VendorQualifier(inner, q))
            }
            b'D' => {
                self.advance(1);
                match self.next_char() {
                    b'T' | b't' => {
                        let e = self.expression()?;
                        if self.next_char() != b'E' {
                            return None;
                        }
                        self.add(Node::Decltype(e))
                    }
                    b'p' => {
                        let t = self.type_()?;
                        self.add(Node::PackExpansion(t))
                    }
                    b'F' => {
                        can_subst = false;
                        self.float_n()?
                    }
                    b'v' => self.vector_type()?,
                    // Names, not builtins, to libiberty (no parentheses
                    // around them in an expression).
                    b'a' => {
                        can_subst = false;
                        self.add(Node::Name("auto"))
                    }
                    b'c' => {
                        can_subst = false;
                        self.add(Node::Name("decltype(auto)"))
                    }
                    c => {
                        can_subst = false;
                        self.add(Node::Builtin(ast::builtin_d(c)?))
                    }
                }
            }
            // A class or enum name; libiberty reads any other start so too
            // (an operator `ps`, an internal name `L1x`, a module `W…`).
            _ => {
                can_subst = false;
                self.name(true)?
            }
        };
        if can_subst {
            self.add_sub(ret)?;
        }
        Some(ret)
    }

    /// `DF <number> _` (`_FloatN`) and `DF <number> x` (`_FloatNx`).
    fn float_n(&mut self) -> R {
        let start = self.pos;
        let n = self.number();
        if n <= 0 {
            return None;
        }
        let digits = self.s.get(start..self.pos)?;
        let x = match self.next_char() {
            b'_' => false,
            b'x' => true,
            _ => return None,
        };
        let _ = digits;
        // Only the widths g++ emits have a builtin name.
        let name = match (n, x) {
            (16, false) => "_Float16",
            (32, false) => "_Float32",
            (64, false) => "_Float64",
            (128, false) => "_Float128",
            (32, true) => "_Float32x",
            (64, true) => "_Float64x",
            (128, true) => "_Float128x",
            _ => return None,
        };
        Some(self.add(Node::ExtendedBuiltin(name)))
    }

    /// `Dv <number> _ <type>` or `Dv _ <expression> _ <type>`.
    fn vector_type(&mut self) -> R {
        let dim = if self.check(b'_') {
            self.expression()?
        } else {
            let d = self.digits()?;
            if d.is_empty() {
                return None;
            }
            self.add(Node::Name(d))
        };
        if !self.check(b'_') {
            return None;
        }
        let elem = self.type_()?;
        Some(self.add(Node::Vector(dim, elem)))
    }

    /// `F [Y] <bare-function-type> [<ref-qualifier>] E`.
    fn function_type(&mut self) -> R {
        if !self.check(b'F') {
            return None;
        }
        self.check(b'Y');
        // A failed function type still ends past its `E`, as libiberty's
        // does (an untyped initializer list reads on from there).
        let ret = self.bare_function_type(true);
        let rqual = self.ref_qualifier();
        if !self.check(b'E') {
            return None;
        }
        let mut ret = ret?;
        if let Some(m) = rqual {
            ret = self.add(Node::Modifier(m, ret));
        }
        Some(ret)
    }

    /// Parameter types, the return type first when `has_return_type`.
    fn bare_function_type(&mut self, mut has_return_type: bool) -> R {
        if self.check(b'J') {
            has_return_type = true;
        }
        let ret = if has_return_type {
            Some(self.type_()?)
        } else {
            None
        };
        let params = self.parmlist()?;
        Some(self.add(Node::Function(ret, params)))
    }

    /// At least one type up to `E` or `.`; a lone `void` is no parameter.
    fn parmlist(&mut self) -> R {
        let mut list = Vec::new();
        loop {
            let peek = self.peek();
            if matches!(peek, 0 | b'E' | b'.') {
                break;
            }
            if matches!(peek, b'R' | b'O') && self.peek_next() == b'E' {
                break;
            }
            list.push(self.type_()?);
        }
        if list.is_empty() {
            return None;
        }
        if list.len() == 1 {
            if let Node::Builtin(b) = self.node(list[0]) {
                if b.literal == LiteralStyle::Void {
                    list.clear();
                }
            }
        }
        Some(self.add(Node::List(list)))
    }

    /// `A [<dimension>] _ <type>`.
    fn array_type(&mut self) -> R {
        if !self.check(b'A') {
            return None;
        }
        let dim = match self.peek() {
            b'_' => None,
            c if c.is_ascii_digit() => {
                let d = self.digits()?;
                Some(self.add(Node::Name(d)))
            }
            _ => Some(self.expression()?),
        };
        if !self.check(b'_') {
            return None;
        }
        let elem = self.type_()?;
        Some(self.add(Node::Array(dim, elem)))
    }

    /// `M <class type> <member type>`.
    fn ptrmem_type(&mut self) -> R {
        if !self.check(b'M') {
            return None;
        }
        let class = self.type_()?;
        let member = self.type_()?;
        Some(self.add(Node::PtrMem(class, member)))
    }

    /// `T_` or `T <number> _`.
    pub(super) fn template_param(&mut self) -> R {
        if !self.check(b'T') {
            return None;
        }
        let n = self.compact_number()?;
        Some(self.add(Node::TemplateParam(n)))
    }

    /// `I <template-arg>+ E` (or `J … E`, a pack, which may be empty).
    pub(super) fn template_args(&mut self) -> R {
        if !matches!(self.peek(), b'I' | b'J') {
            return None;
        }
        self.advance(1);
        self.template_args_1()
    }

    fn template_args_1(&mut self) -> R {
        self.nest(|p| {
            let hold = p.last_name;
            if p.check(b'E') {
                return Some(p.add(Node::List(Vec::new())));
            }
            let mut list = Vec::new();
            loop {
                list.push(p.template_arg()?);
                if p.check(b'E') {
                    break;
                }
            }
            p.last_name = hold;
            Some(p.add(Node::List(list)))
        })
    }

    pub(super) fn template_arg(&mut self) -> R {
        match self.peek() {
            b'X' => {
                self.advance(1);
                let e = self.expression()?;
                if !self.check(b'E') {
                    return None;
                }
                Some(e)
            }
            b'L' => self.expr_primary(),
            b'I' | b'J' => self.template_args(),
            _ => self.type_(),
        }
    }

    // ---- expressions ----

    /// `L <type> <value> E`, `L <mangled-name> E`, `LDnE`.
    fn expr_primary(&mut self) -> R {
        if !self.check(b'L') {
            return None;
        }
        let ret = if matches!(self.peek(), b'_' | b'Z') {
            self.mangled_name(false)?
        } else {
            let ty = self.type_()?;
            if let Node::Builtin(b) = self.node(ty) {
                if b.name == "decltype(nullptr)" && self.check(b'E') {
                    return Some(ty);
                }
            }
            let negative = self.check(b'n');
            let start = self.pos;
            while self.peek() != b'E' {
                if self.peek() == 0 {
                    return None;
                }
                self.advance(1);
            }
            let value = self.s.get(start..self.pos)?;
            if value.is_empty() {
                // Fails, past its `E` (what a caller reading on sees).
                self.advance(1);
                return None;
            }
            self.add(Node::Literal {
                ty,
                value,
                negative,
            })
        };
        if !self.check(b'E') {
            return None;
        }
        Some(ret)
    }

    pub(super) fn expression(&mut self) -> R {
        let was = self.is_expression;
        self.is_expression = true;
        let r = self.expression_1();
        self.is_expression = was;
        r
    }

    fn expression_1(&mut self) -> R {
        self.nest(|p| p.expression_inner())
    }

    fn expression_inner(&mut self) -> R {
        let peek = self.peek();
        let next = self.peek_next();
        match (peek, next) {
            (b'L', _) => return self.expr_primary(),
            (b'T', _) => return self.template_param(),
            (b's', b'r') => return self.unresolved_name(),
            (b's', b'p') => {
                self.advance(2);
                let e = self.expression_1()?;
                return Some(self.add(Node::PackExpansion(e)));
            }
            (b'f', b'p') => {
                self.advance(2);
                let index = if self.check(b'T') {
                    0
                } else {
                    // cv-qualifiers of the parameter are not printed.
                    self.cv_qualifiers(false)?;
                    self.compact_number()?.checked_add(1)?
                };
                return Some(self.add(Node::FunctionParam(index)));
            }
            (b'0'..=b'9', _) | (b'o', b'n') => {
                if peek == b'o' {
                    self.advance(2);
                }
                let name = self.unqualified_name(None)?;
                if self.peek() == b'I' {
                    let args = self.template_args()?;
                    return Some(self.add(Node::Template(name, args)));
                }
                return Some(name);
            }
            (b'i' | b't', b'l') => {
                self.advance(2);
                // A type that cannot be read makes the list untyped.
                let ty = if peek == b't' { self.type_() } else { None };
                let list = self.exprlist(b'E')?;
                return Some(self.add(Node::InitializerList(ty, list)));
            }
            _ => {}
        }
        let op = self.operator_name()?;
        let (code, args) = match *self.node(op) {
            Node::Operator(o) => (o.code, o.args),
            Node::Cast(_) => ("", 1),
            _ => return None,
        };
        if code == "st" {
            let t = self.type_()?;
            return Some(self.add(Node::Unary(op, t)));
        }
        match args {
            0 => Some(self.add(Node::Nullary(op))),
            1 => {
                let b = code.as_bytes();
                let suffix = b.len() == 2
                    && (b[0] == b'p' || b[0] == b'm')
                    && b[1] == b[0]
                    && !self.check(b'_');
                let operand = if matches!(self.node(op), Node::Cast(_)) && self.check(b'_') {
                    self.exprlist(b'E')?
                } else if code == "sP" {
                    self.template_args_1()?
                } else {
                    self.expression_1()?
                };
                Some(self.add(if suffix {
                    Node::Postfix(op, operand)
                } else {
                    Node::Unary(op, operand)
                }))
            }
            2 => {
                let left = if matches!(code, "dc" | "sc" | "cc" | "rc") {
                    self.type_()?
                } else if code.starts_with('f') {
                    // fold expressions are not read
                    return None;
                } else if code == "di" {
                    self.unqualified_name(None)?
                } else {
                    self.expression_1()?
                };
                let right = if code == "cl" {
                    self.exprlist(b'E')?
                } else if code == "dt" || code == "pt" {
                    let (a, b) = (self.peek(), self.peek_next());
                    if (a == b'g' && b == b's') || (a == b's' && b == b'r') {
                        self.expression_1()?
                    } else {
                        let mut r = self.unqualified_name(None)?;
                        if self.peek() == b'I' {
                            let args = self.template_args()?;
                            r = self.add(Node::Template(r, args));
                        }
                        r
                    }
                } else {
                    self.expression_1()?
                };
                Some(self.add(Node::Binary(op, left, right)))
            }
            3 if code == "qu" => {
                let a = self.expression_1()?;
                let b = self.expression_1()?;
                let c = self.expression_1()?;
                Some(self.add(Node::Trinary(op, a, b, c)))
            }
            _ => None,
        }
    }

    /// `sr …`: a qualified name in an expression. The current mangling
    /// (`sr 1A E 1x`) and the old one (`sr 1A 1x`) read alike up to the
    /// `E`: the first try takes the current one, and a name it fails is read
    /// again the old way. A scope that cannot be read is left out.
    fn unresolved_name(&mut self) -> R {
        self.advance(2);
        let peek = self.peek();
        let scope = if self.unresolved_name_state != 0
            && (peek.is_ascii_digit()
                || peek.is_ascii_lowercase()
                || matches!(peek, b'C' | b'U' | b'L'))
        {
            self.unresolved_name_state = -1;
            let scope = self.prefix(false);
            self.check(b'E');
            scope
        } else {
            self.type_()
        };
        let mut name = self.unqualified_name(scope)?;
        if self.peek() == b'I' {
            let args = self.template_args()?;
            name = self.add(Node::Template(name, args));
        }
        Some(name)
    }

    fn exprlist(&mut self, end: u8) -> R {
        let mut list = Vec::new();
        if self.check(end) {
            return Some(self.add(Node::List(list)));
        }
        loop {
            list.push(self.expression_1()?);
            if self.check(end) {
                break;
            }
        }
        Some(self.add(Node::List(list)))
    }
}

/// A qualifier read by `cv_qualifiers`, before it wraps its type.
#[derive(Clone, Copy)]
enum Qualifier {
    Mod(Modifier),
    Noexcept(Option<Id>),
    Throw(Id),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs_of(name: &str) -> Vec<String> {
        let mut p = Parser::new(name);
        p.mangled_name(true).expect(name);
        let subs = p.subs.clone();
        subs.iter()
            .map(|&id| super::super::print::print(&p.nodes, id, 1 << 16).unwrap_or_default())
            .collect()
    }

    /// The substitution candidates, in libiberty's order: prefixes but
    /// not the whole nested name; a template name, then its template; a
    /// qualified type but not its parts with fewer qualifiers.
    #[test]
    fn substitution_candidates() {
        assert_eq!(subs_of("_ZN1a1b1cE"), ["a", "a::b"]);
        assert_eq!(
            subs_of("_ZN1aIiE1bEv"),
            ["a", "a<int>"],
            "the template name and the template"
        );
        assert_eq!(subs_of("_Z1fIPKiE"), ["f", "int const", "int const*"]);
        assert_eq!(subs_of("_ZSt3fooIiE"), ["std::foo"]);
        // A closure type is no candidate of its own; its scope is.
        assert_eq!(subs_of("_ZN1AUlvE_1fE"), ["A", "A::{lambda()#1}"]);
    }

    #[test]
    fn numbers() {
        let mut p = Parser::new("12n3_x");
        assert_eq!(p.number(), 12);
        assert_eq!(p.compact_number(), None, "no negative index");
        let mut p = Parser::new("_3_");
        assert_eq!(p.compact_number(), Some(0));
        assert_eq!(p.compact_number(), Some(4));
        let mut p = Parser::new("99999999999");
        assert_eq!(p.number(), -1, "overflow");
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("_Z1fI{}iE", "P".repeat(MAX_DEPTH as usize + 10));
        let mut p = Parser::new(&deep);
        assert_eq!(p.mangled_name(true), None);
        let ok = format!("_Z1fI{}iE", "P".repeat(MAX_DEPTH as usize - 10));
        let mut p = Parser::new(&ok);
        assert!(p.mangled_name(true).is_some());
    }
}
