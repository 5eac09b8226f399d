//! Lexer and line parser for the nasm dialect that yasm accepts.
//!
//! One source line becomes one [`Line`]: an optional label and one statement
//! (a directive, an instruction, data, or nothing). Comments are dropped.

use super::expr::{BinOp, Expr, Symbol, UnOp};
use super::insn;
use iced_x86::Register;
use std::sync::OnceLock;

/// A parse error: the message only; the caller adds file and line.
pub type ParseError = String;

/// A token of one source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// A name: label, mnemonic, register, directive or keyword.
    Ident(String),
    /// A number literal.
    Num(i64),
    /// A quoted string.
    Str(Vec<u8>),
    /// `$`.
    Here,
    /// `$$`.
    SectionStart,
    /// Punctuation or an operator.
    Punct(&'static str),
}

const PUNCTS: [&str; 20] = [
    "<<", ">>", "//", "%%", ",", ":", "[", "]", "(", ")", "+", "-", "*", "/", "%", "&", "|", "^",
    "~", "=",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || matches!(c, '_' | '.' | '?' | '@')
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '#' | '@' | '~' | '.' | '?')
}

/// Removes a `;` comment, honouring quotes.
pub fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' || c == '`' => quote = Some(c),
            None if c == ';' => return line.get(..i).unwrap_or(line),
            None => {}
        }
    }
    line
}

/// Splits a line (without comment) into tokens.
pub fn tokenize(line: &str) -> Result<Vec<Tok>, ParseError> {
    let chars: Vec<char> = line.chars().collect();
    let mut toks = Vec::with_capacity(8);
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '$' {
            if chars.get(i + 1) == Some(&'$') {
                toks.push(Tok::SectionStart);
                i += 2;
                continue;
            }
            if chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                // `$0ff`: nasm's other hex prefix.
                let start = i + 1;
                i += 1;
                while chars
                    .get(i)
                    .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '_')
                {
                    i += 1;
                }
                let text: String = chars.get(start..i).unwrap_or_default().iter().collect();
                toks.push(Tok::Num(parse_radix(&text.replace('_', ""), 16, &text)?));
                continue;
            }
            if chars.get(i + 1).is_some_and(|d| is_ident_start(*d)) {
                // `$name`: an identifier that would otherwise be a keyword.
                let start = i + 1;
                i += 1;
                while chars.get(i).is_some_and(|d| is_ident_char(*d)) {
                    i += 1;
                }
                toks.push(Tok::Ident(
                    chars.get(start..i).unwrap_or_default().iter().collect(),
                ));
                continue;
            }
            toks.push(Tok::Here);
            i += 1;
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while chars
                .get(i)
                .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '_')
            {
                i += 1;
            }
            let text: String = chars.get(start..i).unwrap_or_default().iter().collect();
            toks.push(Tok::Num(parse_number(&text)?));
            continue;
        }
        if is_ident_start(c) {
            let start = i;
            while chars.get(i).is_some_and(|d| is_ident_char(*d)) {
                i += 1;
            }
            toks.push(Tok::Ident(
                chars.get(start..i).unwrap_or_default().iter().collect(),
            ));
            continue;
        }
        if c == '\'' || c == '"' || c == '`' {
            let mut bytes = Vec::new();
            let mut j = i + 1;
            loop {
                match chars.get(j) {
                    None => return Err("unterminated string".into()),
                    Some(&d) if d == c => break,
                    Some('\\') if c == '`' => {
                        let (b, used) = backquote_escape(chars.get(j + 1..).unwrap_or_default())?;
                        bytes.extend_from_slice(&b);
                        j += 1 + used;
                    }
                    Some(&d) => {
                        let mut buf = [0u8; 4];
                        bytes.extend_from_slice(d.encode_utf8(&mut buf).as_bytes());
                        j += 1;
                    }
                }
            }
            toks.push(Tok::Str(bytes));
            i = j + 1;
            continue;
        }
        // Punctuation is ASCII: compare the next two characters in place.
        let next = chars.get(i + 1).copied();
        if let Some(p) = PUNCTS.iter().find(|p| {
            let mut pc = p.chars();
            pc.next() == Some(c) && pc.next().is_none_or(|d| Some(d) == next)
        }) {
            toks.push(Tok::Punct(p));
            i += p.len();
            continue;
        }
        if c == '!' {
            toks.push(Tok::Punct("!"));
            i += 1;
            continue;
        }
        return Err(format!("unexpected character `{c}'"));
    }
    Ok(toks)
}

fn backquote_escape(rest: &[char]) -> Result<(Vec<u8>, usize), ParseError> {
    let c = *rest.first().ok_or("unterminated escape")?;
    let simple = match c {
        'n' => Some(b'\n'),
        't' => Some(b'\t'),
        'r' => Some(b'\r'),
        '0' => Some(0),
        '\\' => Some(b'\\'),
        '\'' => Some(b'\''),
        '"' => Some(b'"'),
        '`' => Some(b'`'),
        'a' => Some(7),
        'b' => Some(8),
        'e' => Some(27),
        'f' => Some(12),
        'v' => Some(11),
        _ => None,
    };
    if let Some(b) = simple {
        return Ok((vec![b], 2));
    }
    if c == 'x' {
        let hex: String = rest
            .iter()
            .skip(1)
            .take(2)
            .take_while(|d| d.is_ascii_hexdigit())
            .collect();
        let v = u8::from_str_radix(&hex, 16).map_err(|_| "bad \\x escape".to_string())?;
        return Ok((vec![v], 2 + hex.len()));
    }
    Err(format!("unknown escape `\\{c}'"))
}

fn parse_radix(digits: &str, radix: u32, text: &str) -> Result<i64, ParseError> {
    if digits.is_empty() {
        return Err(format!("invalid number `{text}'"));
    }
    u64::from_str_radix(digits, radix)
        .map(|v| v as i64)
        .map_err(|_| format!("invalid number `{text}'"))
}

/// Parses a nasm number literal: `0x1f`, `1fh`, `0b101`, `101b`, `17q`, `42`.
pub fn parse_number(text: &str) -> Result<i64, ParseError> {
    let t = text.replace('_', "").to_ascii_lowercase();
    let n = t.len();
    let (body, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0h")) {
        (h, 16)
    } else if t.ends_with('h') && n > 1 {
        (&t[..n - 1], 16)
    } else if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0y")) {
        (b, 2)
    } else if (t.ends_with('b') || t.ends_with('y')) && n > 1 {
        (&t[..n - 1], 2)
    } else if let Some(o) = t.strip_prefix("0o").or_else(|| t.strip_prefix("0q")) {
        (o, 8)
    } else if (t.ends_with('q') || t.ends_with('o')) && n > 1 {
        (&t[..n - 1], 8)
    } else if let Some(d) = t.strip_prefix("0d").or_else(|| t.strip_prefix("0t")) {
        (d, 10)
    } else if (t.ends_with('d') || t.ends_with('t')) && n > 1 {
        (&t[..n - 1], 10)
    } else {
        (t.as_str(), 10)
    };
    parse_radix(body, radix, text)
}

fn registers() -> &'static super::NameMap<Register> {
    static MAP: OnceLock<super::NameMap<Register>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut m = super::NameMap::default();
        for r in Register::values() {
            if r == Register::None || r == Register::RIP || r == Register::EIP {
                continue;
            }
            let name = format!("{r:?}").to_ascii_lowercase();
            if name.starts_with("dontuse") {
                continue;
            }
            // iced calls the low byte of r8..r15 `r8l`; nasm says `r8b`.
            if let Some(stem) = name.strip_suffix('l') {
                if stem.starts_with('r') && stem[1..].parse::<u8>().is_ok() {
                    m.insert(format!("{stem}b"), r);
                }
            }
            m.insert(name, r);
        }
        m
    })
}

/// Looks up a register by its (case-insensitive) name.
pub fn register(name: &str) -> Option<Register> {
    registers().get(&name.to_ascii_lowercase()).copied()
}

/// A `short`, `near` or `far` keyword on a branch target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JumpKind {
    /// `short`: rel8.
    Short,
    /// `near`: rel16/rel32.
    Near,
    /// `far`: segment and offset.
    Far,
}

/// An immediate or branch-target operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Imm {
    /// The value.
    pub expr: Expr,
    /// An explicit size keyword, in bits.
    pub size: Option<u32>,
    /// An explicit branch distance.
    pub jump: Option<JumpKind>,
    /// `strict`: keep the written size, no imm8 optimisation.
    pub strict: bool,
}

/// A memory operand `[seg:base+index*scale+disp]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mem {
    /// An explicit size keyword, in bits.
    pub size: Option<u32>,
    /// `far`: a far pointer in memory.
    pub far: bool,
    /// A segment override.
    pub seg: Option<Register>,
    /// The base register.
    pub base: Option<Register>,
    /// The index register.
    pub index: Option<Register>,
    /// The index scale (1, 2, 4 or 8).
    pub scale: u32,
    /// The displacement.
    pub disp: Option<Expr>,
    /// `rel` (Some(true)) or `abs` (Some(false)); None follows `default`.
    pub rel: Option<bool>,
}

/// An instruction operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Operand {
    /// A register.
    Reg(Register),
    /// A memory reference.
    Mem(Mem),
    /// An immediate or branch target.
    Imm(Imm),
    /// A direct far pointer `seg:offset`.
    Far {
        /// The segment selector.
        seg: Expr,
        /// The offset.
        off: Expr,
    },
}

/// An instruction prefix written before the mnemonic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefix {
    /// `lock`.
    Lock,
    /// `rep`.
    Rep,
    /// `repe`/`repz`.
    Repe,
    /// `repne`/`repnz`.
    Repne,
    /// `o16`/`o32`/`o64`: operand size.
    OpSize(u32),
    /// `a16`/`a32`/`a64`: address size.
    AddrSize(u32),
}

/// An instruction as the assembler parsed it (mnemonic and operands, not yet encoded).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AsmInsn {
    /// Prefixes before the mnemonic.
    pub prefixes: Vec<Prefix>,
    /// The mnemonic, lower case (the encoder's own name for it: a source
    /// line does not keep a copy).
    pub mnemonic: &'static str,
    /// The operands.
    pub operands: Vec<Operand>,
}

/// One item of a `db`/`dw`/`dd`/`dq` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataItem {
    /// A value.
    Expr(Expr),
    /// A string, padded to the unit size.
    Bytes(Vec<u8>),
}

/// Something that emits bytes; `times` may repeat it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// An instruction.
    Insn(AsmInsn),
    /// `db`/`dw`/`dd`/`dq` with its unit size in bytes.
    Data {
        /// Unit size in bytes.
        unit: u8,
        /// The items.
        items: Vec<DataItem>,
    },
    /// `resb`/`resw`/`resd`/`resq`: zeroed space.
    Reserve {
        /// Unit size in bytes.
        unit: u8,
        /// Number of units.
        count: Expr,
    },
}

/// A `section` directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionDecl {
    /// The section name, e.g. `.text`.
    pub name: String,
    /// `start=`: load address.
    pub start: Option<Expr>,
    /// `vstart=`: virtual address.
    pub vstart: Option<Expr>,
    /// `follows=`: placed after this section.
    pub follows: Option<String>,
    /// `align=`.
    pub align: Option<Expr>,
    /// `nobits` (Some(true)) or `progbits` (Some(false)).
    pub nobits: Option<bool>,
}

/// The statement of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    /// Nothing (blank, comment or label only).
    Empty,
    /// `org`.
    Org(Expr),
    /// `bits 16/32/64`.
    Bits(u32),
    /// `section`/`segment` (boxed: the largest statement and a rare one, it
    /// would make every line's statement as large).
    Section(Box<SectionDecl>),
    /// `align N[, db X]`.
    Align {
        /// The boundary.
        boundary: Expr,
        /// A fill byte; None means NOPs in code, zeros elsewhere.
        fill: Option<Expr>,
    },
    /// `name equ value`.
    Equ(Expr),
    /// `default rel`/`default abs`.
    DefaultRel(bool),
    /// A directive yasm accepts that has no effect on a flat binary.
    Ignored,
    /// Bytes, repeated `times` times.
    Emit {
        /// The repeat count (boxed: most lines have none, and every line's
        /// statement is as large as the largest).
        times: Option<Box<Expr>>,
        /// What is emitted.
        body: Body,
    },
}

/// One parsed source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based line number.
    pub number: usize,
    /// The line as yasm's listing shows it: no comment, collapsed blanks,
    /// directives in brackets.
    pub listing_text: String,
    /// A label defined on this line (fully qualified).
    pub label: Option<String>,
    /// The label as written (`.loop` for the local label `main.loop`).
    pub label_written: Option<String>,
    /// True if the label was written with a colon.
    pub label_colon: bool,
    /// The statement.
    pub stmt: Stmt,
}

/// Line parser state: the last non-local label, for `.local` names, and the
/// numbers given to the names expressions refer to ([`Symbol::number`]).
#[derive(Debug, Default)]
pub struct Parser {
    parent: String,
    numbers: std::cell::RefCell<super::NameMap<u32>>,
}

fn size_keyword(s: &str) -> Option<u32> {
    Some(match s {
        "byte" => 8,
        "word" => 16,
        "dword" => 32,
        "fword" => 48,
        "qword" => 64,
        "tword" => 80,
        "oword" => 128,
        "yword" => 256,
        "zword" => 512,
        _ => return None,
    })
}

fn data_unit(s: &str) -> Option<u8> {
    Some(match s {
        "db" => 1,
        "dw" => 2,
        "dd" => 4,
        "dq" => 8,
        _ => return None,
    })
}

fn reserve_unit(s: &str) -> Option<u8> {
    Some(match s {
        "resb" => 1,
        "resw" => 2,
        "resd" => 4,
        "resq" => 8,
        _ => return None,
    })
}

fn prefix_keyword(s: &str) -> Option<Prefix> {
    Some(match s {
        "lock" => Prefix::Lock,
        "rep" => Prefix::Rep,
        "repe" | "repz" => Prefix::Repe,
        "repne" | "repnz" => Prefix::Repne,
        "o16" => Prefix::OpSize(16),
        "o32" => Prefix::OpSize(32),
        "o64" => Prefix::OpSize(64),
        "a16" => Prefix::AddrSize(16),
        "a32" => Prefix::AddrSize(32),
        "a64" => Prefix::AddrSize(64),
        _ => return None,
    })
}

const DIRECTIVES: [&str; 14] = [
    "org", "bits", "use16", "use32", "use64", "section", "segment", "align", "alignb", "default",
    "cpu", "global", "extern", "common",
];

/// True if `name` starts a statement rather than being a label.
fn is_keyword(lower: &str) -> bool {
    DIRECTIVES.contains(&lower)
        || lower == "times"
        || data_unit(lower).is_some()
        || reserve_unit(lower).is_some()
        || prefix_keyword(lower).is_some()
        || insn::is_mnemonic(lower)
}

/// yasm's listing stops at the radix suffix of the first number written
/// with one (`db 1, 10h, 3` is listed as `db 1, 10`).
fn cut_at_radix_suffix(text: &str) -> &str {
    let bytes = text.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        if c == b'\'' || c == b'"' || c == b'`' {
            quote = Some(c);
            i += 1;
            continue;
        }
        let starts_word = i == 0
            || !bytes.get(i - 1).is_some_and(|p| {
                p.is_ascii_alphanumeric() || *p == b'_' || *p == b'.' || *p == b'$'
            });
        if c.is_ascii_digit() && starts_word {
            let start = i;
            while bytes
                .get(i)
                .is_some_and(|d| d.is_ascii_alphanumeric() || *d == b'_')
            {
                i += 1;
            }
            let word = text.get(start..i).unwrap_or("");
            let last = word.as_bytes().last().map(u8::to_ascii_lowercase);
            if matches!(last, Some(b'h' | b'b' | b'q' | b'o'))
                && !word.to_ascii_lowercase().starts_with("0x")
                && parse_number(word).is_ok()
            {
                return text.get(..i - 1).unwrap_or(text);
            }
            continue;
        }
        i += 1;
    }
    text
}

/// Collapses blank runs to one space and drops trailing blanks, outside quotes.
fn collapse_blanks(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut quote: Option<char> = None;
    let mut pending_space = false;
    for c in s.chars() {
        if quote.is_none() && c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        match quote {
            Some(q) if q == c => quote = None,
            None if c == '\'' || c == '"' || c == '`' => quote = Some(c),
            _ => {}
        }
        out.push(c);
    }
    out
}

impl Parser {
    /// A new parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// `name` as an expression refers to it: qualified and numbered.
    fn symbol(&self, name: &str) -> Symbol {
        let name = self.qualify(name);
        let mut numbers = self.numbers.borrow_mut();
        let number = match numbers.get(&name) {
            Some(&n) => n,
            None => {
                let n = u32::try_from(numbers.len()).unwrap_or(Symbol::UNNUMBERED);
                numbers.insert(name.clone(), n);
                n
            }
        };
        Symbol { name, number }
    }

    fn qualify(&self, name: &str) -> String {
        if name.starts_with('.') && !name.starts_with("..") {
            format!("{}{}", self.parent, name)
        } else {
            name.to_string()
        }
    }

    /// Parses one source line.
    pub fn parse_line(&mut self, number: usize, text: &str) -> Result<Line, ParseError> {
        let code = strip_comment(text);
        let collapsed = collapse_blanks(code);
        let mut toks = tokenize(code)?;
        let mut label = None;
        let mut label_written = None;
        let mut label_colon = false;

        // A whole line in brackets is a raw directive: `[bits 64]`.
        let bracketed = matches!(toks.first(), Some(Tok::Punct("[")))
            && matches!(toks.last(), Some(Tok::Punct("]")))
            && matches!(toks.get(1), Some(Tok::Ident(d)) if DIRECTIVES.contains(&d.to_ascii_lowercase().as_str()));
        if bracketed {
            toks = toks.get(1..toks.len() - 1).unwrap_or_default().to_vec();
        }

        let mut pos = 0;
        if let Some(Tok::Ident(first)) = toks.first() {
            let lower = first.to_ascii_lowercase();
            let colon = matches!(toks.get(1), Some(Tok::Punct(":")));
            let equ = matches!(toks.get(1), Some(Tok::Ident(e)) if e.eq_ignore_ascii_case("equ"));
            if !bracketed && (colon || equ || (!is_keyword(&lower) && register(&lower).is_none())) {
                let name = self.qualify(first);
                if !first.starts_with('.') {
                    self.parent = first.clone();
                }
                label = Some(name);
                label_written = Some(first.clone());
                label_colon = colon;
                pos = if colon { 2 } else { 1 };
                if equ {
                    let mut p = ExprParser::new(&toks, 2, &*self);
                    let e = p.expr()?;
                    p.end()?;
                    return Ok(Line {
                        number,
                        listing_text: collapsed,
                        label_written: label.as_ref().map(|_| first.clone()),
                        label,
                        label_colon: false,
                        stmt: Stmt::Equ(e),
                    });
                }
            }
        }
        let rest = toks.get(pos..).unwrap_or_default();
        // `foo rax`: a name without colon followed by something that is not
        // an instruction was most likely meant as one.
        if let (Some(w), Some(Tok::Ident(next))) = (&label_written, rest.first()) {
            if pos == 1 && !is_keyword(&next.to_ascii_lowercase()) {
                return Err(format!("unknown instruction `{w}'"));
            }
        }
        if let (Some(w), Some(tok)) = (&label_written, rest.first()) {
            if pos == 1 && !matches!(tok, Tok::Ident(_)) {
                return Err(format!("unknown instruction `{w}'"));
            }
        }
        let Some(first) = rest.first() else {
            return Ok(Line {
                number,
                listing_text: collapsed,
                label,
                label_written,
                label_colon,
                stmt: Stmt::Empty,
            });
        };
        let Tok::Ident(word) = first else {
            return Err("label or instruction expected at start of line".into());
        };
        let lower = word.to_ascii_lowercase();
        if DIRECTIVES.contains(&lower.as_str()) {
            let stmt = self.directive(&lower, rest.get(1..).unwrap_or_default())?;
            let mut listing_text = collapsed.clone();
            if !bracketed {
                // yasm's listing shows directives the way its macros expand
                // them; a label on the line is listed separately.
                let after_label = label_written
                    .as_ref()
                    .and_then(|w| collapsed.find(w.as_str()).map(|i| i + w.len()))
                    .unwrap_or(0);
                let tail = collapsed.get(after_label..).unwrap_or("");
                let tail = tail.trim_start().trim_start_matches(':').trim_start();
                let args = tail.get(word.len()..).unwrap_or("").trim();
                listing_text = match &stmt {
                    Stmt::Align { fill: Some(_), .. } => {
                        let (n, x) = args.split_once(',').unwrap_or((args, ""));
                        let x = x.trim();
                        let x = x.get(2..).unwrap_or("").trim();
                        format!("times ($$-$) & (({})-1) db {x}", n.trim())
                    }
                    _ if args.is_empty() => format!("[{lower}]"),
                    _ => format!("[{lower} {args}]"),
                };
            }
            return Ok(Line {
                number,
                listing_text,
                label,
                label_written,
                label_colon,
                stmt,
            });
        }
        let stmt = self.emit(rest)?;
        let mut listing_text = collapsed;
        listing_text.truncate(cut_at_radix_suffix(&listing_text).len());
        Ok(Line {
            number,
            listing_text,
            label,
            label_written,
            label_colon,
            stmt,
        })
    }

    fn directive(&self, name: &str, args: &[Tok]) -> Result<Stmt, ParseError> {
        match name {
            "org" => {
                let mut p = ExprParser::new(args, 0, self);
                let e = p.expr()?;
                p.end()?;
                Ok(Stmt::Org(e))
            }
            "bits" => match args {
                [Tok::Num(n)] if matches!(n, 16 | 32 | 64) => Ok(Stmt::Bits(*n as u32)),
                _ => Err("invalid argument to [bits]: expected 16, 32 or 64".into()),
            },
            "use16" => Ok(Stmt::Bits(16)),
            "use32" => Ok(Stmt::Bits(32)),
            "use64" => Ok(Stmt::Bits(64)),
            "section" | "segment" => self.section(args),
            "align" | "alignb" => {
                let comma = args.iter().position(|t| *t == Tok::Punct(","));
                let mut p = ExprParser::new(
                    args.get(..comma.unwrap_or(args.len())).unwrap_or_default(),
                    0,
                    self,
                );
                let boundary = p.expr()?;
                p.end()?;
                let fill = match comma {
                    None => None,
                    Some(c) => {
                        let f = args.get(c + 1..).unwrap_or_default();
                        match f.first() {
                            Some(Tok::Ident(d)) if d.eq_ignore_ascii_case("db") => {
                                let mut p = ExprParser::new(f, 1, self);
                                let e = p.expr()?;
                                p.end()?;
                                Some(e)
                            }
                            _ => return Err("align fill must be `db value'".into()),
                        }
                    }
                };
                Ok(Stmt::Align { boundary, fill })
            }
            "default" => match args {
                [Tok::Ident(r)] if r.eq_ignore_ascii_case("rel") => Ok(Stmt::DefaultRel(true)),
                [Tok::Ident(r)] if r.eq_ignore_ascii_case("abs") => Ok(Stmt::DefaultRel(false)),
                _ => Err("default expects `rel' or `abs'".into()),
            },
            _ => Ok(Stmt::Ignored),
        }
    }

    fn section(&self, args: &[Tok]) -> Result<Stmt, ParseError> {
        let Some(Tok::Ident(name)) = args.first() else {
            return Err("section name expected".into());
        };
        let mut decl = SectionDecl {
            name: name.clone(),
            start: None,
            vstart: None,
            follows: None,
            align: None,
            nobits: None,
        };
        let mut i = 1;
        while let Some(tok) = args.get(i) {
            let Tok::Ident(attr) = tok else {
                return Err("section attribute expected".into());
            };
            let attr = attr.to_ascii_lowercase();
            if attr == "nobits" || attr == "progbits" {
                decl.nobits = Some(attr == "nobits");
                i += 1;
                continue;
            }
            if !matches!(args.get(i + 1), Some(Tok::Punct(p)) if *p == "=")
                && args.get(i + 1).is_some()
            {
                // Bare attributes we do not need (`code`, `data`, `exec`, ...).
                i += 1;
                continue;
            }
            if args.get(i + 1).is_none() {
                i += 1;
                continue;
            }
            i += 2;
            if attr == "follows" || attr == "vfollows" {
                match args.get(i) {
                    Some(Tok::Ident(s)) => decl.follows = Some(s.clone()),
                    _ => return Err("section name expected after follows=".into()),
                }
                i += 1;
                continue;
            }
            let end = args
                .iter()
                .enumerate()
                .skip(i)
                .find(|(k, t)| {
                    matches!(t, Tok::Ident(_)) && matches!(args.get(k + 1), Some(Tok::Punct("=")))
                })
                .map_or(args.len(), |(k, _)| k);
            let mut p = ExprParser::new(args.get(..end).unwrap_or_default(), i, self);
            let e = p.expr()?;
            p.end()?;
            i = end;
            match attr.as_str() {
                "start" => decl.start = Some(e),
                "vstart" => decl.vstart = Some(e),
                "align" => decl.align = Some(e),
                _ => return Err(format!("unknown section attribute `{attr}'")),
            }
        }
        Ok(Stmt::Section(Box::new(decl)))
    }

    fn emit(&self, toks: &[Tok]) -> Result<Stmt, ParseError> {
        let mut times = None;
        let mut pos = 0;
        if matches!(toks.first(), Some(Tok::Ident(t)) if t.eq_ignore_ascii_case("times")) {
            let mut p = ExprParser::new(toks, 1, self);
            times = Some(Box::new(p.expr()?));
            pos = p.pos;
        }
        let rest = toks.get(pos..).unwrap_or_default();
        let body = self.body(rest)?;
        Ok(Stmt::Emit { times, body })
    }

    fn body(&self, toks: &[Tok]) -> Result<Body, ParseError> {
        let mut prefixes = Vec::new();
        let mut pos = 0;
        loop {
            match toks.get(pos) {
                Some(Tok::Ident(w)) => {
                    let lower = w.to_ascii_lowercase();
                    if let Some(p) = prefix_keyword(&lower) {
                        prefixes.push(p);
                        pos += 1;
                        continue;
                    }
                    if let Some(unit) = data_unit(&lower) {
                        if !prefixes.is_empty() {
                            return Err("prefix before data".into());
                        }
                        return self.data(unit, toks.get(pos + 1..).unwrap_or_default());
                    }
                    if let Some(unit) = reserve_unit(&lower) {
                        let mut p = ExprParser::new(toks, pos + 1, self);
                        let count = p.expr()?;
                        p.end()?;
                        return Ok(Body::Reserve { unit, count });
                    }
                    let Some(mnemonic) = insn::mnemonic(&lower) else {
                        return Err(format!("unknown instruction `{w}'"));
                    };
                    let operands = self.operands(toks.get(pos + 1..).unwrap_or_default())?;
                    return Ok(Body::Insn(AsmInsn {
                        prefixes,
                        mnemonic,
                        operands,
                    }));
                }
                None if !prefixes.is_empty() => {
                    // A prefix alone (`lock`) is emitted as a bare byte by
                    // yasm; we do not support that form.
                    return Err("instruction expected after prefix".into());
                }
                _ => return Err("instruction expected".into()),
            }
        }
    }

    fn data(&self, unit: u8, toks: &[Tok]) -> Result<Body, ParseError> {
        let mut items = Vec::new();
        for part in split_commas(toks) {
            if part.is_empty() {
                return Err("expression expected in data list".into());
            }
            if let [Tok::Str(s)] = part {
                items.push(DataItem::Bytes(s.clone()));
                continue;
            }
            let mut p = ExprParser::new(part, 0, self);
            let e = p.expr()?;
            p.end()?;
            items.push(DataItem::Expr(e));
        }
        if items.is_empty() {
            return Err("data list expected".into());
        }
        Ok(Body::Data { unit, items })
    }

    fn operands(&self, toks: &[Tok]) -> Result<Vec<Operand>, ParseError> {
        if toks.is_empty() {
            return Ok(Vec::new());
        }
        split_commas(toks)
            .into_iter()
            .map(|part| self.operand(part))
            .collect()
    }

    fn operand(&self, toks: &[Tok]) -> Result<Operand, ParseError> {
        let mut size = None;
        let mut jump = None;
        let mut strict = false;
        let mut pos = 0;
        while let Some(Tok::Ident(w)) = toks.get(pos) {
            let lower = w.to_ascii_lowercase();
            if let Some(s) = size_keyword(&lower) {
                size = Some(s);
            } else if lower == "short" {
                jump = Some(JumpKind::Short);
            } else if lower == "near" {
                jump = Some(JumpKind::Near);
            } else if lower == "far" {
                jump = Some(JumpKind::Far);
            } else if lower == "strict" {
                strict = true;
            } else {
                break;
            }
            pos += 1;
        }
        let rest = toks.get(pos..).unwrap_or_default();
        if rest.is_empty() {
            return Err("operand expected".into());
        }
        // `fs:[rax]` is accepted as `[fs:rax]`.
        let mut seg = None;
        let mut mem_toks = rest;
        if let [Tok::Ident(s), Tok::Punct(":"), Tok::Punct("["), ..] = rest {
            if let Some(r) = register(s).filter(|r| r.is_segment_register()) {
                seg = Some(r);
                mem_toks = rest.get(2..).unwrap_or_default();
            }
        }
        if let Some(Tok::Punct("[")) = mem_toks.first() {
            if !matches!(mem_toks.last(), Some(Tok::Punct("]"))) {
                return Err("missing `]' in memory operand".into());
            }
            let inner = mem_toks.get(1..mem_toks.len() - 1).unwrap_or_default();
            let mut mem = self.memory(inner)?;
            if mem.seg.is_none() {
                mem.seg = seg;
            }
            mem.size = size;
            mem.far = jump == Some(JumpKind::Far);
            return Ok(Operand::Mem(mem));
        }
        if let [Tok::Ident(r)] = rest {
            if let Some(reg) = register(r) {
                if jump.is_some() {
                    return Err("branch distance keyword on a register".into());
                }
                return Ok(Operand::Reg(reg));
            }
        }
        // `seg:offset` far pointer.
        let mut depth = 0i32;
        let colon = rest.iter().position(|t| {
            match t {
                Tok::Punct("(") | Tok::Punct("[") => depth += 1,
                Tok::Punct(")") | Tok::Punct("]") => depth -= 1,
                _ => {}
            }
            depth == 0 && *t == Tok::Punct(":")
        });
        if let Some(c) = colon {
            let mut p = ExprParser::new(rest.get(..c).unwrap_or_default(), 0, self);
            let seg = p.expr()?;
            p.end()?;
            let mut p = ExprParser::new(rest, c + 1, self);
            let off = p.expr()?;
            p.end()?;
            return Ok(Operand::Far { seg, off });
        }
        let mut p = ExprParser::new(rest, 0, self);
        let expr = p.expr()?;
        p.end()?;
        if expr.has_register() {
            return Err("register in an immediate expression".into());
        }
        Ok(Operand::Imm(Imm {
            expr,
            size,
            jump,
            strict,
        }))
    }

    fn memory(&self, toks: &[Tok]) -> Result<Mem, ParseError> {
        let mut pos = 0;
        let mut rel = None;
        let mut seg = None;
        loop {
            match (toks.get(pos), toks.get(pos + 1)) {
                (Some(Tok::Ident(w)), _) if w.eq_ignore_ascii_case("rel") => {
                    rel = Some(true);
                    pos += 1;
                }
                (Some(Tok::Ident(w)), _) if w.eq_ignore_ascii_case("abs") => {
                    rel = Some(false);
                    pos += 1;
                }
                (Some(Tok::Ident(w)), Some(Tok::Punct(":"))) => {
                    let r = register(w)
                        .filter(|r| r.is_segment_register())
                        .ok_or_else(|| format!("`{w}' is not a segment register"))?;
                    seg = Some(r);
                    pos += 2;
                }
                _ => break,
            }
        }
        let mut p = ExprParser::new(toks, pos, self);
        p.allow_registers = true;
        let e = p.expr()?;
        p.end()?;
        let mut regs: Vec<(Register, i64)> = Vec::new();
        let disp = split_registers(&e, 1, &mut regs)?;
        // Merge repeated registers: [rax+rax] is [rax*2].
        let mut merged: Vec<(Register, i64)> = Vec::new();
        for (r, c) in regs {
            match merged.iter_mut().find(|(m, _)| *m == r) {
                Some(m) => m.1 += c,
                None => merged.push((r, c)),
            }
        }
        merged.retain(|(_, c)| *c != 0);
        if merged.iter().any(|(_, c)| *c < 0) {
            return Err("negative register in memory operand".into());
        }
        let (mut base, mut index, mut scale) = (None, None, 1u32);
        match merged.as_slice() {
            [] => {}
            [(r, 1)] => base = Some(*r),
            // yasm turns [r*2] into [r+r], and so on, to avoid a disp32.
            [(r, c @ (2 | 3 | 5 | 9))] => {
                base = Some(*r);
                index = Some(*r);
                scale = (*c - 1) as u32;
            }
            [(r, c @ (4 | 8))] => {
                index = Some(*r);
                scale = *c as u32;
            }
            [(a, 1), (b, 1)] => {
                // The stack pointer cannot be an index.
                if matches!(*b, Register::ESP | Register::RSP) {
                    base = Some(*b);
                    index = Some(*a);
                } else {
                    base = Some(*a);
                    index = Some(*b);
                }
            }
            [(a, 1), (b, c @ (2 | 4 | 8))] | [(b, c @ (2 | 4 | 8)), (a, 1)] => {
                base = Some(*a);
                index = Some(*b);
                scale = *c as u32;
            }
            _ => return Err("invalid effective address".into()),
        }
        // 16-bit addressing pairs BX/BP with SI/DI, in either order.
        if let (Some(b), Some(i)) = (base, index) {
            if matches!(b, Register::SI | Register::DI) && matches!(i, Register::BX | Register::BP)
            {
                base = Some(i);
                index = Some(b);
            }
        }
        Ok(Mem {
            size: None,
            far: false,
            seg,
            base,
            index,
            scale,
            disp,
            rel,
        })
    }
}

/// Splits a memory expression into register terms and the displacement.
fn split_registers(
    e: &Expr,
    sign: i64,
    regs: &mut Vec<(Register, i64)>,
) -> Result<Option<Expr>, ParseError> {
    if !e.has_register() {
        return Ok(Some(if sign < 0 {
            Expr::Unary(UnOp::Neg, Box::new(e.clone()))
        } else {
            e.clone()
        }));
    }
    match e {
        Expr::Reg(r) => {
            regs.push((*r, sign));
            Ok(None)
        }
        Expr::Unary(UnOp::Neg, inner) => split_registers(inner, -sign, regs),
        Expr::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let x = split_registers(a, sign, regs)?;
            let bsign = if *op == BinOp::Sub { -sign } else { sign };
            let y = split_registers(b, bsign, regs)?;
            Ok(match (x, y) {
                (None, y) => y,
                (x, None) => x,
                (Some(x), Some(y)) => Some(Expr::Binary(BinOp::Add, Box::new(x), Box::new(y))),
            })
        }
        Expr::Binary(BinOp::Mul, a, b) => {
            let (r, k) = match (a.as_ref(), b.as_ref()) {
                (Expr::Reg(r), k) | (k, Expr::Reg(r)) if !k.has_register() => (*r, k),
                _ => return Err("invalid effective address".into()),
            };
            let k = constant(k).ok_or("scale must be a constant")?;
            regs.push((r, sign * k));
            Ok(None)
        }
        _ => Err("invalid effective address".into()),
    }
}

/// Folds an expression made of numbers only.
fn constant(e: &Expr) -> Option<i64> {
    match e {
        Expr::Num(n) => Some(*n),
        Expr::Unary(UnOp::Neg, x) => constant(x).map(i64::wrapping_neg),
        Expr::Binary(BinOp::Add, a, b) => Some(constant(a)?.wrapping_add(constant(b)?)),
        Expr::Binary(BinOp::Sub, a, b) => Some(constant(a)?.wrapping_sub(constant(b)?)),
        Expr::Binary(BinOp::Mul, a, b) => Some(constant(a)?.wrapping_mul(constant(b)?)),
        _ => None,
    }
}

/// Splits tokens at top-level commas.
fn split_commas(toks: &[Tok]) -> Vec<&[Tok]> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Punct("(") | Tok::Punct("[") => depth += 1,
            Tok::Punct(")") | Tok::Punct("]") => depth -= 1,
            Tok::Punct(",") if depth == 0 => {
                parts.push(toks.get(start..i).unwrap_or_default());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(toks.get(start..).unwrap_or_default());
    parts
}

/// Recursive-descent expression parser with nasm precedence.
struct ExprParser<'a> {
    toks: &'a [Tok],
    pos: usize,
    parser: &'a Parser,
    allow_registers: bool,
    /// Terms parsed so far: bounds recursion here and in evaluation.
    terms: usize,
}

/// Most terms one expression may have.
const MAX_EXPR_TERMS: usize = 512;

impl<'a> ExprParser<'a> {
    fn new(toks: &'a [Tok], pos: usize, parser: &'a Parser) -> Self {
        ExprParser {
            toks,
            pos,
            parser,
            allow_registers: false,
            terms: 0,
        }
    }

    fn peek(&self) -> Option<&'a Tok> {
        self.toks.get(self.pos)
    }

    fn end(&self) -> Result<(), ParseError> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(format!("unexpected {} in expression", describe(t))),
        }
    }

    fn binary(&mut self, level: usize) -> Result<Expr, ParseError> {
        const LEVELS: [&[(&str, BinOp)]; 6] = [
            &[("|", BinOp::Or)],
            &[("^", BinOp::Xor)],
            &[("&", BinOp::And)],
            &[("<<", BinOp::Shl), (">>", BinOp::Shr)],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[
                ("*", BinOp::Mul),
                ("/", BinOp::Div),
                ("//", BinOp::SDiv),
                ("%", BinOp::Mod),
                ("%%", BinOp::SMod),
            ],
        ];
        let Some(ops) = LEVELS.get(level) else {
            return self.unary();
        };
        let mut lhs = self.binary(level + 1)?;
        loop {
            let op = match self.peek() {
                Some(Tok::Punct(p)) => ops.iter().find(|(s, _)| s == p).map(|(_, op)| *op),
                _ => None,
            };
            let Some(op) = op else { return Ok(lhs) };
            self.pos += 1;
            let rhs = self.binary(level + 1)?;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        self.binary(0)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        self.terms += 1;
        if self.terms > MAX_EXPR_TERMS {
            return Err("expression too complex".into());
        }
        let tok = self.peek().ok_or("expression expected")?;
        self.pos += 1;
        Ok(match tok {
            Tok::Punct("-") => Expr::Unary(UnOp::Neg, Box::new(self.unary()?)),
            Tok::Punct("+") => self.unary()?,
            Tok::Punct("~") => Expr::Unary(UnOp::Not, Box::new(self.unary()?)),
            Tok::Punct("!") => Expr::Unary(UnOp::LogicalNot, Box::new(self.unary()?)),
            Tok::Punct("(") => {
                let e = self.expr()?;
                match self.peek() {
                    Some(Tok::Punct(")")) => self.pos += 1,
                    _ => return Err("missing `)'".into()),
                }
                e
            }
            Tok::Num(n) => Expr::Num(*n),
            Tok::Str(s) => {
                if s.len() > 8 {
                    return Err("character constant too long".into());
                }
                let mut v = 0u64;
                for (i, b) in s.iter().enumerate() {
                    v |= u64::from(*b) << (8 * i);
                }
                Expr::Num(v as i64)
            }
            Tok::Here => Expr::Here,
            Tok::SectionStart => Expr::SectionStart,
            Tok::Ident(name) => {
                if let Some(r) = register(name) {
                    if !self.allow_registers {
                        return Err(format!("register `{name}' not allowed here"));
                    }
                    Expr::Reg(r)
                } else if is_keyword(&name.to_ascii_lowercase()) && !name.starts_with('.') {
                    return Err(format!("unexpected keyword `{name}' in expression"));
                } else {
                    Expr::Sym(self.parser.symbol(name))
                }
            }
            Tok::Punct(p) => return Err(format!("unexpected `{p}' in expression")),
        })
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}'"),
        Tok::Num(n) => format!("number {n}"),
        Tok::Str(_) => "string".into(),
        Tok::Here => "`$'".into(),
        Tok::SectionStart => "`$$'".into(),
        Tok::Punct(p) => format!("`{p}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Line {
        Parser::new().parse_line(1, text).unwrap()
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number("0x1f").unwrap(), 31);
        assert_eq!(parse_number("1fh").unwrap(), 31);
        assert_eq!(parse_number("0FFh").unwrap(), 255);
        assert_eq!(parse_number("101b").unwrap(), 5);
        assert_eq!(parse_number("0b101").unwrap(), 5);
        assert_eq!(parse_number("17q").unwrap(), 15);
        assert_eq!(parse_number("1_000").unwrap(), 1000);
        assert_eq!(parse_number("0xffffffffffffffff").unwrap(), -1);
        assert!(parse_number("0x").is_err());
        assert!(parse_number("12z").is_err());
    }

    #[test]
    fn listing_text_stops_at_a_radix_suffix() {
        assert_eq!(cut_at_radix_suffix("db 1, 10h, 3"), "db 1, 10");
        assert_eq!(cut_at_radix_suffix("mov eax, 0ffh"), "mov eax, 0ff");
        assert_eq!(cut_at_radix_suffix("db 0x1b, 'h1h'"), "db 0x1b, 'h1h'");
        assert_eq!(cut_at_radix_suffix("jmp l1h"), "jmp l1h");
    }

    #[test]
    fn comments_and_labels() {
        let l = line("l1:   nop   ; @pt p1: fup(3: %l1)");
        assert_eq!(l.label.as_deref(), Some("l1"));
        assert_eq!(l.listing_text, "l1: nop");
        assert!(
            matches!(l.stmt, Stmt::Emit { body: Body::Insn(ref i), .. } if i.mnemonic == "nop")
        );
        // A label without a colon, as yasm allows.
        let l = line("here jmp here");
        assert_eq!(l.label.as_deref(), Some("here"));
        let l = line("; just a comment");
        assert_eq!(l.stmt, Stmt::Empty);
        assert_eq!(l.listing_text, "");
    }

    #[test]
    fn local_labels_take_their_parent() {
        let mut p = Parser::new();
        p.parse_line(1, "top:").unwrap();
        let l = p.parse_line(2, ".loop: jmp .loop").unwrap();
        assert_eq!(l.label.as_deref(), Some("top.loop"));
        let Stmt::Emit {
            body: Body::Insn(i),
            ..
        } = l.stmt
        else {
            panic!()
        };
        assert_eq!(
            i.operands,
            vec![Operand::Imm(Imm {
                expr: Expr::Sym("top.loop".into()),
                size: None,
                jump: None,
                strict: false
            })]
        );
    }

    #[test]
    fn symbols_are_numbered_once_per_name() {
        let mut p = Parser::new();
        let number = |l: Line| match l.stmt {
            Stmt::Emit {
                body: Body::Insn(i),
                ..
            } => match i.operands.first() {
                Some(Operand::Imm(Imm {
                    expr: Expr::Sym(s), ..
                })) => s.number,
                _ => panic!("no symbol operand"),
            },
            _ => panic!("not an instruction"),
        };
        let a = number(p.parse_line(1, "jmp far_away").unwrap());
        let b = number(p.parse_line(2, "jmp other").unwrap());
        let c = number(p.parse_line(3, "call far_away").unwrap());
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_ne!(a, Symbol::UNNUMBERED);
    }

    #[test]
    fn directives_are_bracketed_in_the_listing() {
        let l = line("org 0x100000");
        assert_eq!(l.stmt, Stmt::Org(Expr::Num(0x100000)));
        assert_eq!(l.listing_text, "[org 0x100000]");
        let l = line("ALIGN 0x100");
        assert_eq!(l.listing_text, "[align 0x100]");
        assert_eq!(line("[bits 32]").stmt, Stmt::Bits(32));
        assert_eq!(line("[bits 32]").listing_text, "[bits 32]");
        let l = line("section .text vstart=0x1000 start=0x200");
        let Stmt::Section(s) = l.stmt else { panic!() };
        assert_eq!(s.name, ".text");
        assert_eq!(s.vstart, Some(Expr::Num(0x1000)));
        assert_eq!(s.start, Some(Expr::Num(0x200)));
    }

    #[test]
    fn memory_operands() {
        let p = Parser::new();
        let toks = tokenize("qword [fs:rbx + rcx*4 - 8]").unwrap();
        let Operand::Mem(m) = p.operand(&toks).unwrap() else {
            panic!()
        };
        assert_eq!(m.size, Some(64));
        assert_eq!(m.seg, Some(Register::FS));
        assert_eq!(m.base, Some(Register::RBX));
        assert_eq!(m.index, Some(Register::RCX));
        assert_eq!(m.scale, 4);
        let toks = tokenize("[rax*2]").unwrap();
        let Operand::Mem(m) = p.operand(&toks).unwrap() else {
            panic!()
        };
        assert_eq!(
            (m.base, m.index, m.scale),
            (Some(Register::RAX), Some(Register::RAX), 1)
        );
        let toks = tokenize("[rsp+rax]").unwrap();
        let Operand::Mem(m) = p.operand(&toks).unwrap() else {
            panic!()
        };
        assert_eq!(
            (m.base, m.index),
            (Some(Register::RSP), Some(Register::RAX))
        );
        assert!(p.operand(&tokenize("[rax*3+rbx*2]").unwrap()).is_err());
        assert!(p.operand(&tokenize("[rax").unwrap()).is_err());
    }

    #[test]
    fn times_and_data() {
        let l = line("times 510-($-$$) db 0");
        let Stmt::Emit {
            times: Some(_),
            body: Body::Data { unit: 1, items },
        } = l.stmt
        else {
            panic!()
        };
        assert_eq!(items, vec![DataItem::Expr(Expr::Num(0))]);
        let l = line("db 'ab', 0x0f, \"c\"");
        let Stmt::Emit {
            body: Body::Data { items, .. },
            ..
        } = l.stmt
        else {
            panic!()
        };
        assert_eq!(items.len(), 3);
        assert_eq!(items[0], DataItem::Bytes(b"ab".to_vec()));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut p = Parser::new();
        for text in [
            "nop nop",
            "db",
            "jmp [",
            "mov rax,",
            "l1: ::",
            "times",
            "bits 17",
            "section",
            "\"open",
            "mov rax, [rax*3+rbx*4]",
            ")(",
            "dd 1,,2",
            "align",
            "align 4, dw 1",
            "$",
            "%%%",
            "@@@ ]]",
            "mov eax, ebx +",
            "jmp short",
            "far",
            "db 'abcdefghij' + 1",
        ] {
            let _ = p.parse_line(1, text);
        }
        assert!(p.parse_line(1, "nop nop").is_err());
        assert!(p.parse_line(1, "bits 17").is_err());
    }
}
