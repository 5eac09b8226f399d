//! Writes a parsed name as libiberty's `cplus_demangle` does without
//! options: types in prefix notation with the declarator around the name
//! (`int (*)(char)`, `int const (&) [3]`), `> >` for nested templates,
//! template parameters replaced by their arguments, `8u` for an `unsigned`
//! literal.
//!
//! The printer keeps libiberty's two stacks: the modifiers (pointers,
//! qualifiers, a function's name) still to be written around a function or
//! array type, and the templates whose arguments `T_` stands for. It also
//! keeps the character last appended, which is what libiberty consults
//! before a `<` or `>` even after an empty pack took back its `, `.

use super::ast::{Id, LiteralStyle, Modifier, Node};

/// Deepest nesting the printer follows (libiberty's limit: it fails deeper).
const MAX_PRINT_DEPTH: u32 = 1024;

struct ModEntry {
    node: Id,
    printed: bool,
    templates: Option<usize>,
    next: Option<usize>,
}

struct TemplateEntry {
    decl: Id,
    next: Option<usize>,
}

struct Printer<'p, 'a> {
    nodes: &'p [Node<'a>],
    out: String,
    last: u8,
    err: bool,
    /// Work left (steps and output bytes): a name whose substitutions nest
    /// exponentially is given up rather than printed for ever.
    budget: usize,
    depth: u32,
    printing: Vec<u8>,
    mods: Vec<ModEntry>,
    modifiers: Option<usize>,
    tpls: Vec<TemplateEntry>,
    templates: Option<usize>,
    current_template: Option<Id>,
    pack_index: usize,
    is_lambda_arg: u32,
    /// The nodes being printed, innermost last.
    stack: Vec<Id>,
    /// The templates in scope where a template parameter under a reference
    /// was first printed: a substitution that repeats it elsewhere still
    /// means that template's argument.
    saved_scopes: std::collections::HashMap<Id, Option<usize>>,
}

/// The text of `root`, or `None` where libiberty's printer fails (a
/// template parameter outside any template, a pack outside a template).
pub(super) fn print(nodes: &[Node<'_>], root: Id, budget: usize) -> Option<String> {
    let mut p = Printer {
        nodes,
        out: String::new(),
        last: 0,
        err: false,
        budget,
        depth: 0,
        printing: vec![0; nodes.len()],
        mods: Vec::new(),
        modifiers: None,
        tpls: Vec::new(),
        templates: None,
        current_template: None,
        pack_index: 0,
        is_lambda_arg: 0,
        stack: Vec::new(),
        saved_scopes: std::collections::HashMap::new(),
    };
    p.comp(root);
    (!p.err).then_some(p.out)
}

impl<'a> Printer<'_, 'a> {
    fn node(&self, id: Id) -> &Node<'a> {
        &self.nodes[id as usize]
    }

    fn append(&mut self, s: &str) {
        if let Some(&b) = s.as_bytes().last() {
            if s.len() >= self.budget {
                self.err = true;
                return;
            }
            self.budget -= s.len();
            self.out.push_str(s);
            self.last = b;
        }
    }

    fn append_num(&mut self, n: u64) {
        self.append(&n.to_string());
    }

    fn step(&mut self) -> bool {
        if self.err || self.budget == 0 {
            self.err = true;
            return false;
        }
        self.budget -= 1;
        true
    }

    fn comp(&mut self, id: Id) {
        if !self.step() {
            return;
        }
        let slot = id as usize;
        if self.printing[slot] > 1 || self.depth >= MAX_PRINT_DEPTH {
            self.err = true;
            return;
        }
        self.printing[slot] += 1;
        self.depth += 1;
        self.stack.push(id);
        self.comp_inner(id);
        self.stack.pop();
        self.depth -= 1;
        self.printing[slot] -= 1;
    }

    fn push_mod(&mut self, node: Id) -> usize {
        self.mods.push(ModEntry {
            node,
            printed: false,
            templates: self.templates,
            next: self.modifiers,
        });
        let e = self.mods.len() - 1;
        self.modifiers = Some(e);
        e
    }

    fn push_template(&mut self, decl: Id) {
        self.tpls.push(TemplateEntry {
            decl,
            next: self.templates,
        });
        self.templates = Some(self.tpls.len() - 1);
    }

    /// The argument `T_<n>` stands for in the innermost template printed.
    fn lookup(&mut self, n: u32) -> Option<Id> {
        let Some(t) = self.templates else {
            self.err = true;
            return None;
        };
        let decl = self.tpls[t].decl;
        let Node::Template(_, args) = *self.node(decl) else {
            return None;
        };
        match self.node(args) {
            Node::List(l) => l.get(n as usize).copied(),
            _ => None,
        }
    }

    /// The element of the pack being expanded, when `a` is a pack.
    fn pack_element(&self, a: Id) -> Option<Id> {
        match self.node(a) {
            Node::List(l) => l.get(self.pack_index).copied(),
            _ => Some(a),
        }
    }

    fn comp_inner(&mut self, id: Id) {
        match *self.node(id) {
            Node::Name(s) | Node::StdSub(s) => self.append(s),
            Node::Module {
                parent,
                name,
                partition,
            } => {
                if let Some(p) = parent {
                    self.comp(p);
                    self.append(if partition { ":" } else { "." });
                } else if partition {
                    self.append(":");
                }
                self.comp(name);
            }
            Node::ModuleEntity(entity, module) => {
                self.comp(entity);
                self.append("@");
                self.comp(module);
            }
            Node::Qual(a, b) => {
                self.comp(a);
                self.append("::");
                self.comp(b);
            }
            Node::Local(f, e) => {
                // The function's declarator does not take the modifiers of
                // the local entity (`f(int)::A*`).
                let hold = self.modifiers.take();
                self.comp(f);
                self.modifiers = hold;
                self.append("::");
                let e = self.default_arg_prefix(e);
                self.comp(e);
            }
            Node::Tagged(n, t) => {
                self.comp(n);
                self.append("[abi:");
                self.comp(t);
                self.append("]");
            }
            Node::Typed(name, ft) => self.typed_name(name, ft),
            Node::Template(name, args) => {
                let hold_cur = self.current_template.replace(id);
                let hold_mods = self.modifiers.take();
                self.template_args(name, args);
                self.modifiers = hold_mods;
                self.current_template = hold_cur;
            }
            Node::List(_) => self.list(id),
            Node::TemplateParam(n) => {
                if self.is_lambda_arg > 0 {
                    self.append("auto:");
                    self.append_num(u64::from(n) + 1);
                    return;
                }
                let Some(a) = self.lookup(n).and_then(|a| self.pack_element(a)) else {
                    self.err = true;
                    return;
                };
                let hold = self.templates;
                self.templates = hold.and_then(|t| self.tpls[t].next);
                self.comp(a);
                self.templates = hold;
            }
            Node::Builtin(b) => self.append(b.name),
            Node::ExtendedBuiltin(name) => self.append(name),
            Node::Vendor(n) => self.comp(n),
            Node::Ctor(n) => self.comp(n),
            Node::Dtor(n) => {
                self.append("~");
                self.comp(n);
            }
            Node::Operator(op) => {
                self.append("operator");
                if op.name.as_bytes()[0].is_ascii_lowercase() {
                    self.append(" ");
                }
                self.append(op.name.strip_suffix(' ').unwrap_or(op.name));
            }
            Node::VendorOperator(n) => {
                self.append("operator ");
                self.comp(n);
            }
            Node::Conversion(ty) => {
                self.append("operator ");
                self.conversion(ty);
            }
            Node::Cast(ty) => {
                self.append("operator ");
                self.comp(ty);
            }
            Node::Modifier(m, inner) => match m {
                Modifier::Const | Modifier::Volatile | Modifier::Restrict => {
                    // A qualifier already pending (moved after an array's
                    // element type, or repeated: `KK`) is printed once.
                    let mut p = self.modifiers;
                    while let Some(e) = p {
                        if !self.mods[e].printed {
                            if !self.is_plain_cv(self.mods[e].node) {
                                break;
                            }
                            if matches!(*self.node(self.mods[e].node), Node::Modifier(k, _) if k == m)
                            {
                                self.comp(inner);
                                return;
                            }
                        }
                        p = self.mods[e].next;
                    }
                    self.modifier(id, inner);
                }
                Modifier::Reference | Modifier::RvalueReference => self.reference(id, m, inner),
                _ => self.modifier(id, inner),
            },
            Node::VendorQualifier(inner, _) | Node::Noexcept(inner, _) | Node::Throw(inner, _) => {
                self.modifier(id, inner)
            }
            Node::PtrMem(_, member) => self.modifier(id, member),
            Node::Vector(_, elem) => self.modifier(id, elem),
            Node::Function(ret, _) => {
                if let Some(r) = ret {
                    let e = self.push_mod(id);
                    self.comp(r);
                    self.modifiers = self.mods[e].next;
                    if self.mods[e].printed {
                        return;
                    }
                    self.append(" ");
                }
                let mods = self.modifiers;
                self.function_type(id, mods);
            }
            Node::Array(_, elem) => self.array(id, elem),
            Node::FunctionParam(n) => {
                if n == 0 {
                    self.append("this");
                } else {
                    self.append("{parm#");
                    self.append_num(u64::from(n));
                    self.append("}");
                }
            }
            Node::PackExpansion(pattern) => {
                let Some(pack) = self.find_pack(pattern) else {
                    if self.err {
                        return;
                    }
                    self.subexpr(pattern);
                    self.append("...");
                    return;
                };
                let len = match self.node(pack) {
                    Node::List(l) => l.len(),
                    _ => 0,
                };
                for i in 0..len {
                    self.pack_index = i;
                    self.comp(pattern);
                    if i + 1 < len {
                        self.append(", ");
                    }
                }
            }
            Node::Decltype(e) => {
                self.append("decltype (");
                self.comp(e);
                self.append(")");
            }
            Node::Lambda(params, num) => {
                self.append("{lambda(");
                self.is_lambda_arg += 1;
                self.comp(params);
                self.is_lambda_arg -= 1;
                self.append(")#");
                self.append_num(u64::from(num) + 1);
                self.append("}");
            }
            Node::UnnamedType(num) => {
                self.append("{unnamed type#");
                self.append_num(u64::from(num) + 1);
                self.append("}");
            }
            Node::DefaultArg(..) => {
                let e = self.default_arg_prefix(id);
                self.comp(e);
            }
            Node::Special(text, x) | Node::Global(text, x) => {
                self.append(text);
                self.comp(x);
            }
            Node::ConstructionVtable(a, b) => {
                self.append("construction vtable for ");
                self.comp(a);
                self.append("-in-");
                self.comp(b);
            }
            Node::RefTemp(name, num) => {
                self.append("reference temporary #");
                self.comp(num);
                self.append(" for ");
                self.comp(name);
            }
            Node::Literal {
                ty,
                value,
                negative,
            } => self.literal(ty, value, negative),
            Node::Nullary(op) => self.expr_op(op),
            Node::Unary(op, operand) => self.unary(op, operand),
            Node::Postfix(op, operand) => {
                self.subexpr(operand);
                self.expr_op(op);
            }
            Node::Binary(op, l, r) => self.binary(op, l, r),
            Node::Trinary(op, a, b, c) => {
                self.subexpr(a);
                self.expr_op(op);
                self.subexpr(b);
                self.append(" : ");
                self.subexpr(c);
            }
            Node::InitializerList(ty, list) => {
                if let Some(t) = ty {
                    self.comp(t);
                }
                self.append("{");
                self.comp(list);
                self.append("}");
            }
        }
    }

    /// Writes `{default arg#N}::` for a default-argument scope and returns
    /// the entity inside it.
    fn default_arg_prefix(&mut self, e: Id) -> Id {
        if let Node::DefaultArg(n, sub) = *self.node(e) {
            self.append("{default arg#");
            self.append_num(u64::from(n) + 1);
            self.append("}::");
            return sub;
        }
        e
    }

    fn is_plain_cv(&self, id: Id) -> bool {
        matches!(
            self.node(id),
            Node::Modifier(Modifier::Const | Modifier::Volatile | Modifier::Restrict, _)
        )
    }

    fn template_args(&mut self, name: Id, args: Id) {
        self.comp(name);
        self.angle_args(args);
    }

    /// `<args>` after a name: `< <` and `> >`, never `<<` or `>>`.
    fn angle_args(&mut self, args: Id) {
        if self.last == b'<' {
            self.append(" ");
        }
        self.append("<");
        self.comp(args);
        if self.last == b'>' {
            self.append(" ");
        }
        self.append(">");
    }

    /// A list: `, ` between items, taken back after items that print
    /// nothing (empty packs) at its end.
    fn list(&mut self, id: Id) {
        let Node::List(items) = self.node(id) else {
            return;
        };
        let n = items.len();
        let mut end_of_last_printed = None;
        for i in 0..n {
            let Node::List(items) = self.node(id) else {
                return;
            };
            let item = items[i];
            if i > 0 {
                self.append(", ");
            }
            let before = self.out.len();
            self.comp(item);
            if self.err {
                return;
            }
            if i == 0 || self.out.len() > before {
                end_of_last_printed = Some(self.out.len());
            }
        }
        if let Some(end) = end_of_last_printed {
            self.out.truncate(end);
        }
    }

    /// A modifier written after what it modifies, unless a function or
    /// array type inside takes it into its declarator.
    fn modifier(&mut self, id: Id, inner: Id) {
        let e = self.push_mod(id);
        self.comp(inner);
        if !self.mods[e].printed {
            self.print_mod(id);
        }
        self.modifiers = self.mods[e].next;
    }

    /// `&` and `&&` collapse with a reference a template argument brings.
    fn reference(&mut self, id: Id, m: Modifier, inner: Id) {
        let mut sub = inner;
        let mut restore = None;
        if self.is_lambda_arg == 0 {
            if let Node::TemplateParam(n) = *self.node(inner) {
                match self.saved_scopes.get(&inner).copied() {
                    None => {
                        self.saved_scopes.insert(inner, self.templates);
                    }
                    Some(scope) => {
                        // Re-entered as a substitution from outside itself.
                        let top = self.stack.len().saturating_sub(1);
                        let inside = self
                            .stack
                            .iter()
                            .enumerate()
                            .any(|(i, &c)| c == inner || (c == id && i != top));
                        if !inside {
                            restore = Some(self.templates);
                            self.templates = scope;
                        }
                    }
                }
                let Some(a) = self.lookup(n).and_then(|a| self.pack_element(a)) else {
                    if let Some(t) = restore {
                        self.templates = t;
                    }
                    self.err = true;
                    return;
                };
                sub = a;
            }
        }
        let (mut dc, mut mod_inner) = (id, inner);
        match *self.node(sub) {
            Node::Modifier(Modifier::Reference, i) => {
                dc = sub;
                mod_inner = i;
            }
            Node::Modifier(k, i) if k == m => {
                dc = sub;
                mod_inner = i;
            }
            Node::Modifier(Modifier::RvalueReference, i) => mod_inner = i,
            _ => {}
        }
        self.modifier(dc, mod_inner);
        if let Some(t) = restore {
            self.templates = t;
        }
    }

    fn print_mod(&mut self, id: Id) {
        match *self.node(id) {
            Node::Modifier(m, _) => self.append(m.text()),
            Node::VendorQualifier(_, q) => {
                self.append(" ");
                self.comp(q);
            }
            Node::Noexcept(_, e) => {
                self.append(" noexcept");
                if let Some(e) = e {
                    self.append("(");
                    self.comp(e);
                    self.append(")");
                }
            }
            Node::Throw(_, l) => {
                self.append(" throw(");
                self.comp(l);
                self.append(")");
            }
            Node::PtrMem(class, _) => {
                if self.last != b'(' {
                    self.append(" ");
                }
                self.comp(class);
                self.append("::*");
            }
            Node::Typed(name, _) => self.comp(name),
            Node::Vector(dim, _) => {
                self.append(" __vector(");
                self.comp(dim);
                self.append(")");
            }
            _ => self.comp(id),
        }
    }

    /// The modifiers from `mods` on that are not yet written; the
    /// qualifiers of a member function only when `suffix`.
    fn mod_list(&mut self, mut mods: Option<usize>, suffix: bool) {
        while let Some(e) = mods {
            if self.err {
                return;
            }
            let node = self.mods[e].node;
            let next = self.mods[e].next;
            if self.mods[e].printed || (!suffix && self.node(node).is_fn_qualifier()) {
                mods = next;
                continue;
            }
            self.mods[e].printed = true;
            let hold = self.templates;
            self.templates = self.mods[e].templates;
            match *self.node(node) {
                Node::Function(..) => {
                    self.function_type(node, next);
                    self.templates = hold;
                    return;
                }
                Node::Array(..) => {
                    self.array_type(node, next);
                    self.templates = hold;
                    return;
                }
                Node::Local(f, r) => {
                    let hold_mods = self.modifiers.take();
                    self.comp(f);
                    self.modifiers = hold_mods;
                    self.append("::");
                    let mut dc = self.default_arg_prefix(r);
                    while self.node(dc).is_fn_qualifier() {
                        match self.node(dc).inner() {
                            Some(i) => dc = i,
                            None => break,
                        }
                    }
                    self.comp(dc);
                    self.templates = hold;
                    return;
                }
                _ => {}
            }
            self.print_mod(node);
            self.templates = hold;
            mods = next;
        }
    }

    /// `ret (mods)(params) quals`, `mods` being the declarator around it.
    fn function_type(&mut self, id: Id, mods: Option<usize>) {
        let Node::Function(_, params) = *self.node(id) else {
            self.err = true;
            return;
        };
        let (mut need_paren, mut need_space) = (false, false);
        let mut p = mods;
        while let Some(e) = p {
            if self.mods[e].printed {
                break;
            }
            match self.node(self.mods[e].node) {
                Node::Modifier(
                    Modifier::Pointer | Modifier::Reference | Modifier::RvalueReference,
                    _,
                ) => need_paren = true,
                Node::Modifier(
                    Modifier::Restrict
                    | Modifier::Volatile
                    | Modifier::Const
                    | Modifier::Complex
                    | Modifier::Imaginary,
                    _,
                )
                | Node::VendorQualifier(..)
                | Node::PtrMem(..) => {
                    need_space = true;
                    need_paren = true;
                }
                _ => {}
            }
            if need_paren {
                break;
            }
            p = self.mods[e].next;
        }
        if need_paren {
            if !need_space && self.last != b'(' && self.last != b'*' {
                need_space = true;
            }
            if need_space && self.last != b' ' {
                self.append(" ");
            }
            self.append("(");
        }
        let hold = self.modifiers.take();
        self.mod_list(mods, false);
        if need_paren {
            self.append(")");
        }
        self.append("(");
        self.comp(params);
        self.append(")");
        self.mod_list(mods, true);
        self.modifiers = hold;
    }

    fn array(&mut self, id: Id, elem: Id) {
        let hold = self.modifiers;
        let first = self.push_mod(id);
        let mut moved = Vec::new();
        let mut p = hold;
        while let Some(e) = p {
            if !self.is_plain_cv(self.mods[e].node) {
                break;
            }
            if !self.mods[e].printed {
                if moved.len() >= 3 {
                    self.err = true;
                    return;
                }
                let node = self.mods[e].node;
                let templates = self.mods[e].templates;
                self.mods.push(ModEntry {
                    node,
                    printed: false,
                    templates,
                    next: self.modifiers,
                });
                self.modifiers = Some(self.mods.len() - 1);
                self.mods[e].printed = true;
                moved.push(node);
            }
            p = self.mods[e].next;
        }
        self.comp(elem);
        self.modifiers = hold;
        if self.mods[first].printed {
            return;
        }
        for &m in moved.iter().rev() {
            self.print_mod(m);
        }
        self.array_type(id, self.modifiers);
    }

    fn array_type(&mut self, id: Id, mods: Option<usize>) {
        let Node::Array(dim, _) = *self.node(id) else {
            self.err = true;
            return;
        };
        let mut need_space = true;
        if mods.is_some() {
            let mut need_paren = false;
            let mut p = mods;
            while let Some(e) = p {
                if !self.mods[e].printed {
                    if matches!(self.node(self.mods[e].node), Node::Array(..)) {
                        need_space = false;
                    } else {
                        need_paren = true;
                        need_space = true;
                    }
                    break;
                }
                p = self.mods[e].next;
            }
            if need_paren {
                self.append(" (");
            }
            self.mod_list(mods, false);
            if need_paren {
                self.append(")");
            }
        }
        if need_space {
            self.append(" ");
        }
        self.append("[");
        if let Some(d) = dim {
            self.comp(d);
        }
        self.append("]");
    }

    /// A function's name with its type: the name (and the qualifiers of a
    /// member function) go into the type's declarator.
    fn typed_name(&mut self, name: Id, ft: Id) {
        // A function named in an expression (`L_Z…E`) keeps the modifiers
        // around it out of its declarator: `decltype (f())*`.
        let hold = self.modifiers.take();
        let mut entries: Vec<usize> = Vec::new();
        let mut typed = name;
        loop {
            if entries.len() >= 4 {
                self.err = true;
                return;
            }
            entries.push(self.push_mod(typed));
            if !self.node(typed).is_fn_qualifier() {
                break;
            }
            match self.node(typed).inner() {
                Some(i) => typed = i,
                None => break,
            }
        }
        if let Node::Local(_, r) = *self.node(typed) {
            typed = r;
            if let Node::DefaultArg(_, sub) = *self.node(typed) {
                typed = sub;
            }
            while self.node(typed).is_fn_qualifier() {
                if entries.len() >= 4 {
                    self.err = true;
                    return;
                }
                // The local entity's qualifiers go before the local name.
                let prev = entries[entries.len() - 1];
                self.mods.push(ModEntry {
                    node: self.mods[prev].node,
                    printed: self.mods[prev].printed,
                    templates: self.mods[prev].templates,
                    next: Some(prev),
                });
                let new = self.mods.len() - 1;
                self.modifiers = Some(new);
                self.mods[prev].node = typed;
                self.mods[prev].printed = false;
                self.mods[prev].templates = self.templates;
                entries.push(new);
                match self.node(typed).inner() {
                    Some(i) => typed = i,
                    None => break,
                }
            }
        }
        let is_template = matches!(self.node(typed), Node::Template(..));
        let hold_t = self.templates;
        if is_template {
            self.push_template(typed);
        }
        self.comp(ft);
        if is_template {
            self.templates = hold_t;
        }
        for &e in entries.iter().rev() {
            if !self.mods[e].printed {
                self.append(" ");
                let node = self.mods[e].node;
                self.print_mod(node);
            }
        }
        self.modifiers = hold;
    }

    /// A conversion operator's type sees the enclosing template's
    /// parameters; a template conversion's own arguments do not.
    fn conversion(&mut self, ty: Id) {
        let hold = self.templates;
        if let Some(ct) = self.current_template {
            self.push_template(ct);
        }
        if let Node::Template(n, args) = *self.node(ty) {
            self.comp(n);
            self.templates = hold;
            self.angle_args(args);
        } else {
            self.comp(ty);
            self.templates = hold;
        }
    }

    fn literal(&mut self, ty: Id, value: &str, negative: bool) {
        let style = match self.node(ty) {
            Node::Builtin(b) => b.literal,
            _ => LiteralStyle::Cast,
        };
        let suffix = match style {
            LiteralStyle::Int => Some(""),
            LiteralStyle::Unsigned => Some("u"),
            LiteralStyle::Long => Some("l"),
            LiteralStyle::UnsignedLong => Some("ul"),
            LiteralStyle::LongLong => Some("ll"),
            LiteralStyle::UnsignedLongLong => Some("ull"),
            _ => None,
        };
        if let Some(suffix) = suffix {
            if negative {
                self.append("-");
            }
            self.append(value);
            self.append(suffix);
            return;
        }
        if style == LiteralStyle::Bool && !negative {
            match value {
                "0" => return self.append("false"),
                "1" => return self.append("true"),
                _ => {}
            }
        }
        self.append("(");
        self.comp(ty);
        self.append(")");
        if negative {
            self.append("-");
        }
        let float = style == LiteralStyle::Float;
        if float {
            self.append("[");
        }
        self.append(value);
        if float {
            self.append("]");
        }
    }

    fn expr_op(&mut self, op: Id) {
        match *self.node(op) {
            Node::Operator(o) => self.append(o.name),
            _ => self.comp(op),
        }
    }

    /// An operand, in parentheses unless it is a name.
    fn subexpr(&mut self, id: Id) {
        let simple = matches!(
            self.node(id),
            Node::Name(_) | Node::Qual(..) | Node::InitializerList(..) | Node::FunctionParam(_)
        );
        if !simple {
            self.append("(");
        }
        self.comp(id);
        if !simple {
            self.append(")");
        }
    }

    fn op_code(&self, op: Id) -> Option<&'static str> {
        match *self.node(op) {
            Node::Operator(o) => Some(o.code),
            _ => None,
        }
    }

    fn unary(&mut self, op: Id, mut operand: Id) {
        let code = self.op_code(op);
        if code == Some("ad") {
            // The address of a function: no parameter list.
            if let Node::Typed(n, f) = *self.node(operand) {
                if matches!(self.node(n), Node::Qual(..))
                    && matches!(self.node(f), Node::Function(..))
                {
                    operand = n;
                }
            }
        }
        if code == Some("sZ") {
            let len = match self.find_pack(operand) {
                Some(a) => match self.node(a) {
                    Node::List(l) => l.len(),
                    _ => 0,
                },
                None => 0,
            };
            return self.append_num(len as u64);
        }
        if code == Some("sP") {
            let len = match self.node(operand) {
                Node::List(l) => l.len(),
                _ => 0,
            };
            return self.append_num(len as u64);
        }
        if let Node::Cast(ty) = *self.node(op) {
            self.append("(");
            self.comp(ty);
            self.append(")");
        } else {
            self.expr_op(op);
        }
        match code {
            Some("gs") => self.comp(operand),
            Some("st" | "nx") => {
                self.append("(");
                self.comp(operand);
                self.append(")");
            }
            _ => self.subexpr(operand),
        }
    }

    fn binary(&mut self, op: Id, l: Id, r: Id) {
        let Some(code) = self.op_code(op) else {
            self.err = true;
            return;
        };
        if matches!(code, "dc" | "sc" | "cc" | "rc") {
            self.expr_op(op);
            self.append("<");
            self.comp(l);
            self.append(">(");
            self.comp(r);
            self.append(")");
            return;
        }
        // `(a>b)`: a `>` would end the template argument list.
        let gt = code == "gt";
        if gt {
            self.append("(");
        }
        match *self.node(l) {
            Node::Typed(n, f) if code == "cl" => {
                if !matches!(self.node(f), Node::Function(..)) {
                    self.err = true;
                }
                self.subexpr(n);
            }
            _ => self.subexpr(l),
        }
        if code == "ix" {
            self.append("[");
            self.comp(r);
            self.append("]");
        } else {
            if code != "cl" {
                self.expr_op(op);
            }
            self.subexpr(r);
        }
        if gt {
            self.append(")");
        }
    }

    /// The first template parameter in `id` that stands for a pack.
    fn find_pack(&mut self, id: Id) -> Option<Id> {
        if !self.step() {
            return None;
        }
        let children: [Option<Id>; 4] = match *self.node(id) {
            // A generic lambda's `auto` parameter is no pack of a template.
            Node::TemplateParam(_) if self.is_lambda_arg > 0 => return None,
            Node::TemplateParam(n) => {
                let a = self.lookup(n)?;
                return matches!(self.node(a), Node::List(_)).then_some(a);
            }
            Node::PackExpansion(_)
            | Node::Lambda(..)
            | Node::Name(_)
            | Node::Tagged(..)
            | Node::Operator(_)
            | Node::Builtin(_)
            | Node::ExtendedBuiltin(_)
            | Node::StdSub(_)
            | Node::FunctionParam(_)
            | Node::UnnamedType(_)
            | Node::DefaultArg(..) => return None,
            Node::List(ref l) => {
                let l = l.clone();
                for x in l {
                    if let Some(a) = self.find_pack(x) {
                        return Some(a);
                    }
                    if self.err {
                        return None;
                    }
                }
                return None;
            }
            Node::VendorOperator(n) | Node::Ctor(n) | Node::Dtor(n) => [Some(n), None, None, None],
            Node::Module {
                parent: Some(a),
                name: b,
                ..
            } => [Some(a), Some(b), None, None],
            Node::Module { name, .. } => [Some(name), None, None, None],
            Node::Qual(a, b)
            | Node::ModuleEntity(a, b)
            | Node::Local(a, b)
            | Node::Typed(a, b)
            | Node::Template(a, b)
            | Node::PtrMem(a, b)
            | Node::Vector(a, b)
            | Node::VendorQualifier(a, b)
            | Node::Throw(a, b)
            | Node::ConstructionVtable(a, b)
            | Node::RefTemp(a, b)
            | Node::Unary(a, b)
            | Node::Postfix(a, b) => [Some(a), Some(b), None, None],
            Node::Vendor(a)
            | Node::Conversion(a)
            | Node::Cast(a)
            | Node::Modifier(_, a)
            | Node::Decltype(a)
            | Node::Special(_, a)
            | Node::Global(_, a)
            | Node::Nullary(a) => [Some(a), None, None, None],
            Node::Noexcept(a, b) => [Some(a), b, None, None],
            Node::Function(a, b) => [a, Some(b), None, None],
            Node::Array(a, b) => [a, Some(b), None, None],
            Node::InitializerList(a, b) => [a, Some(b), None, None],
            Node::Literal { ty, .. } => [Some(ty), None, None, None],
            Node::Binary(a, b, c) => [Some(a), Some(b), Some(c), None],
            Node::Trinary(a, b, c, d) => [Some(a), Some(b), Some(c), Some(d)],
        };
        for c in children.into_iter().flatten() {
            if let Some(a) = self.find_pack(c) {
                return Some(a);
            }
            if self.err {
                return None;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::ast::{builtin, Node};
    use super::print;

    /// `f<int, >` loses its `, ` and `>` then follows without a space: the
    /// last character appended was the space of the `, ` taken back.
    #[test]
    fn empty_pack_at_the_end() {
        let int = Node::Builtin(builtin(b'i').unwrap());
        let nodes = vec![
            Node::Name("f"),
            int,
            Node::List(vec![]),
            Node::List(vec![1, 2]),
            Node::Template(0, 3),
            Node::List(vec![4, 2]),
            Node::Template(0, 5),
        ];
        assert_eq!(print(&nodes, 4, 1000).as_deref(), Some("f<int>"));
        assert_eq!(print(&nodes, 6, 1000).as_deref(), Some("f<f<int>>"));
    }

    #[test]
    fn budget_and_template_parameters() {
        let nodes = vec![Node::Name("abcdef"), Node::TemplateParam(0)];
        assert_eq!(print(&nodes, 0, 100).as_deref(), Some("abcdef"));
        assert_eq!(print(&nodes, 0, 4), None, "past the budget");
        assert_eq!(print(&nodes, 1, 100), None, "T_ outside a template");
    }
}
