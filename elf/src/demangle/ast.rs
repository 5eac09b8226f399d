//! The tree a mangled C++ name is read into, and the fixed tables of the
//! Itanium ABI (builtin types, operators, standard abbreviations).
//!
//! Nodes live in one `Vec` and name each other by index ([`Id`]): a
//! substitution (`S_`, `T_`) is a second edge to a node read earlier, so the
//! tree is a DAG, and the printer walks it as libiberty walks its components.

/// A node's index in the parser's arena.
pub(super) type Id = u32;

/// How libiberty prints a literal of a builtin type (`Li8E` is `8`,
/// `Lj8E` is `8u`, `Lb1E` is `true`, `Lc97E` stays `(char)97`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum LiteralStyle {
    /// `(type)value`.
    Cast,
    Int,
    Unsigned,
    Long,
    UnsignedLong,
    LongLong,
    UnsignedLongLong,
    Bool,
    /// `(type)[value]`.
    Float,
    /// `void`: a parameter list of only `void` is empty.
    Void,
}

/// A builtin type: its printed name and literal style.
#[derive(Debug)]
pub(super) struct Builtin {
    pub name: &'static str,
    pub literal: LiteralStyle,
}

macro_rules! builtin {
    ($name:expr, $lit:ident) => {
        Builtin {
            name: $name,
            literal: LiteralStyle::$lit,
        }
    };
}

/// The one-letter builtin type `c` (`u` is a vendor type, read elsewhere).
pub(super) fn builtin(c: u8) -> Option<&'static Builtin> {
    static T: [Builtin; 20] = [
        builtin!("signed char", Cast),                    // a
        builtin!("bool", Bool),                           // b
        builtin!("char", Cast),                           // c
        builtin!("double", Float),                        // d
        builtin!("long double", Float),                   // e
        builtin!("float", Float),                         // f
        builtin!("__float128", Float),                    // g
        builtin!("unsigned char", Cast),                  // h
        builtin!("int", Int),                             // i
        builtin!("unsigned int", Unsigned),               // j
        builtin!("long", Long),                           // l
        builtin!("unsigned long", UnsignedLong),          // m
        builtin!("__int128", Cast),                       // n
        builtin!("unsigned __int128", Cast),              // o
        builtin!("short", Cast),                          // s
        builtin!("unsigned short", Cast),                 // t
        builtin!("void", Void),                           // v
        builtin!("wchar_t", Cast),                        // w
        builtin!("long long", LongLong),                  // x
        builtin!("unsigned long long", UnsignedLongLong), // y
    ];
    static ELLIPSIS: Builtin = builtin!("...", Cast);
    let i = match c {
        b'a'..=b'j' => c - b'a',
        b'l'..=b'o' => c - b'l' + 10,
        b's' | b't' => c - b's' + 14,
        b'v' | b'w' => c - b'v' + 16,
        b'x' | b'y' => c - b'x' + 18,
        b'z' => return Some(&ELLIPSIS),
        _ => return None,
    };
    T.get(usize::from(i))
}

/// The builtin type `D<c>` (`Dn` is `decltype(nullptr)`; `Da` and `Dc` are
/// names to libiberty, see the parser).
pub(super) fn builtin_d(c: u8) -> Option<&'static Builtin> {
    static D: [(u8, Builtin); 8] = [
        (b'd', builtin!("decimal64", Cast)),
        (b'e', builtin!("decimal128", Cast)),
        (b'f', builtin!("decimal32", Cast)),
        (b'h', builtin!("half", Float)),
        (b'i', builtin!("char32_t", Cast)),
        (b's', builtin!("char16_t", Cast)),
        (b'u', builtin!("char8_t", Cast)),
        (b'n', builtin!("decltype(nullptr)", Cast)),
    ];
    D.iter().find(|(k, _)| *k == c).map(|(_, b)| b)
}

/// An operator of the ABI's `<operator-name>`: its code, its C++ spelling and
/// how many operands it takes in an expression.
#[derive(Debug)]
pub(super) struct Operator {
    pub code: &'static str,
    pub name: &'static str,
    pub args: u8,
}

macro_rules! op {
    ($code:expr, $name:expr, $args:expr) => {
        Operator {
            code: $code,
            name: $name,
            args: $args,
        }
    };
}

/// The operators, sorted by code (the ABI's table; a trailing space in a
/// name separates it from its operand in an expression).
static OPERATORS: &[Operator] = &[
    op!("aN", "&=", 2),
    op!("aS", "=", 2),
    op!("aa", "&&", 2),
    op!("ad", "&", 1),
    op!("an", "&", 2),
    op!("at", "alignof ", 1),
    op!("aw", "co_await ", 1),
    op!("az", "alignof ", 1),
    op!("cc", "const_cast", 2),
    op!("cl", "()", 2),
    op!("cm", ",", 2),
    op!("co", "~", 1),
    op!("dV", "/=", 2),
    op!("dX", "[...]=", 3),
    op!("da", "delete[] ", 1),
    op!("dc", "dynamic_cast", 2),
    op!("de", "*", 1),
    op!("di", "=", 2),
    op!("dl", "delete ", 1),
    op!("ds", ".*", 2),
    op!("dt", ".", 2),
    op!("dv", "/", 2),
    op!("dx", "]=", 2),
    op!("eO", "^=", 2),
    op!("eo", "^", 2),
    op!("eq", "==", 2),
    op!("fL", "...", 3),
    op!("fR", "...", 3),
    op!("fl", "...", 2),
    op!("fr", "...", 2),
    op!("ge", ">=", 2),
    op!("gs", "::", 1),
    op!("gt", ">", 2),
    op!("ix", "[]", 2),
    op!("lS", "<<=", 2),
    op!("le", "<=", 2),
    op!("li", "operator\"\" ", 1),
    op!("ls", "<<", 2),
    op!("lt", "<", 2),
    op!("mI", "-=", 2),
    op!("mL", "*=", 2),
    op!("mi", "-", 2),
    op!("ml", "*", 2),
    op!("mm", "--", 1),
    op!("na", "new[]", 3),
    op!("ne", "!=", 2),
    op!("ng", "-", 1),
    op!("nt", "!", 1),
    op!("nw", "new", 3),
    op!("nx", "noexcept", 1),
    op!("oR", "|=", 2),
    op!("oo", "||", 2),
    op!("or", "|", 2),
    op!("pL", "+=", 2),
    op!("pl", "+", 2),
    op!("pm", "->*", 2),
    op!("pp", "++", 1),
    op!("ps", "+", 1),
    op!("pt", "->", 2),
    op!("qu", "?", 3),
    op!("rM", "%=", 2),
    op!("rS", ">>=", 2),
    op!("rc", "reinterpret_cast", 2),
    op!("rm", "%", 2),
    op!("rs", ">>", 2),
    op!("sP", "sizeof...", 1),
    op!("sZ", "sizeof...", 1),
    op!("sc", "static_cast", 2),
    op!("ss", "<=>", 2),
    op!("st", "sizeof ", 1),
    op!("sz", "sizeof ", 1),
    op!("tr", "throw", 0),
    op!("tw", "throw ", 1),
];

/// The operator with the two-letter `code`.
pub(super) fn operator(code: &[u8]) -> Option<&'static Operator> {
    OPERATORS
        .binary_search_by(|o| o.code.as_bytes().cmp(code))
        .ok()
        .and_then(|i| OPERATORS.get(i))
}

/// A standard abbreviation (`Sa`, `Ss`, …): its short text, its full text
/// (libiberty writes it out before a constructor or destructor name) and the
/// name a following constructor takes.
pub(super) struct StdSub {
    pub code: u8,
    pub simple: &'static str,
    pub full: &'static str,
    pub last_name: Option<&'static str>,
}

pub(super) static STD_SUBS: [StdSub; 7] = [
    StdSub {
        code: b't',
        simple: "std",
        full: "std",
        last_name: None,
    },
    StdSub {
        code: b'a',
        simple: "std::allocator",
        full: "std::allocator",
        last_name: Some("allocator"),
    },
    StdSub {
        code: b'b',
        simple: "std::basic_string",
        full: "std::basic_string",
        last_name: Some("basic_string"),
    },
    StdSub {
        code: b's',
        simple: "std::string",
        full: "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        last_name: Some("basic_string"),
    },
    StdSub {
        code: b'i',
        simple: "std::istream",
        full: "std::basic_istream<char, std::char_traits<char> >",
        last_name: Some("basic_istream"),
    },
    StdSub {
        code: b'o',
        simple: "std::ostream",
        full: "std::basic_ostream<char, std::char_traits<char> >",
        last_name: Some("basic_ostream"),
    },
    StdSub {
        code: b'd',
        simple: "std::iostream",
        full: "std::basic_iostream<char, std::char_traits<char> >",
        last_name: Some("basic_iostream"),
    },
];

/// A type modifier or qualifier wrapping one inner node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Modifier {
    Pointer,
    Reference,
    RvalueReference,
    Complex,
    Imaginary,
    Const,
    Volatile,
    Restrict,
    /// The qualifiers of a member function (`NK…E`, `KF…E`): they follow
    /// the parameter list.
    ConstThis,
    VolatileThis,
    RestrictThis,
    ReferenceThis,
    RvalueReferenceThis,
    TransactionSafe,
}

impl Modifier {
    /// The member-function form of a cv-qualifier.
    pub(super) fn this(self) -> Modifier {
        match self {
            Modifier::Const => Modifier::ConstThis,
            Modifier::Volatile => Modifier::VolatileThis,
            Modifier::Restrict => Modifier::RestrictThis,
            m => m,
        }
    }

    /// What the modifier appends after its type.
    pub(super) fn text(self) -> &'static str {
        match self {
            Modifier::Pointer => "*",
            Modifier::Reference => "&",
            Modifier::RvalueReference => "&&",
            Modifier::Complex => " _Complex",
            Modifier::Imaginary => " _Imaginary",
            Modifier::Const | Modifier::ConstThis => " const",
            Modifier::Volatile | Modifier::VolatileThis => " volatile",
            Modifier::Restrict | Modifier::RestrictThis => " restrict",
            Modifier::ReferenceThis => " &",
            Modifier::RvalueReferenceThis => " &&",
            Modifier::TransactionSafe => " transaction_safe",
        }
    }
}

/// One node of a demangled name.
#[derive(Clone, Debug)]
pub(super) enum Node<'a> {
    /// An identifier, a number or a fixed text.
    Name(&'a str),
    /// A standard abbreviation, as it is printed here.
    StdSub(&'static str),
    /// `scope::name`.
    Qual(Id, Id),
    /// `function::entity` (`Z … E`).
    Local(Id, Id),
    /// A name with its function type (parameters printed).
    Typed(Id, Id),
    /// `name<args>`; the second is a [`Node::List`].
    Template(Id, Id),
    /// Template arguments, parameters or a pack; empty for `()` and `JE`.
    List(Vec<Id>),
    Builtin(&'static Builtin),
    /// `_FloatN` (`DF16_`), a builtin libiberty prints as a name.
    ExtendedBuiltin(&'static str),
    /// A vendor extended type (`u`), printed as its name.
    Vendor(Id),
    Ctor(Id),
    Dtor(Id),
    Operator(&'static Operator),
    /// `operator type` (a conversion function's name).
    Conversion(Id),
    /// A cast operator inside an expression.
    Cast(Id),
    /// `operator name` (a vendor operator, `v <digit> <source-name>`).
    VendorOperator(Id),
    Modifier(Modifier, Id),
    /// `type vendor-qualifier` (`U`).
    VendorQualifier(Id, Id),
    /// `noexcept` or `noexcept(expr)` on a function type.
    Noexcept(Id, Option<Id>),
    /// `throw(types)` on a function type.
    Throw(Id, Id),
    /// `class::* member`.
    PtrMem(Id, Id),
    /// Return type (absent for constructors, conversions and plain names)
    /// and parameters.
    Function(Option<Id>, Id),
    /// Dimension and element.
    Array(Option<Id>, Id),
    /// `element __vector(dim)`.
    Vector(Id, Id),
    /// `T_` is 0.
    TemplateParam(u32),
    /// `fpT` is 0 (`this`), `fp_` is 1.
    FunctionParam(u32),
    PackExpansion(Id),
    Decltype(Id),
    /// Parameters and number (`#1` is 0).
    Lambda(Id, u32),
    UnnamedType(u32),
    DefaultArg(u32, Id),
    /// `name[abi:tag]`.
    Tagged(Id, Id),
    /// A special name: its text and what it names.
    Special(&'static str, Id),
    /// `construction vtable for first-in-second`.
    ConstructionVtable(Id, Id),
    /// `reference temporary #number for name`.
    RefTemp(Id, Id),
    Literal {
        ty: Id,
        value: &'a str,
        negative: bool,
    },
    Nullary(Id),
    Unary(Id, Id),
    /// A suffix `++`/`--`.
    Postfix(Id, Id),
    Binary(Id, Id, Id),
    Trinary(Id, Id, Id, Id),
    InitializerList(Option<Id>, Id),
    /// A C++20 module name: `parent.name`, or `parent:name` for a
    /// partition.
    Module {
        parent: Option<Id>,
        name: Id,
        partition: bool,
    },
    /// `entity@module`.
    ModuleEntity(Id, Id),
    /// `global constructors keyed to …` and its destructor twin.
    Global(&'static str, Id),
}

impl Node<'_> {
    /// A function-type qualifier that prints after the parameters.
    pub(super) fn is_fn_qualifier(&self) -> bool {
        matches!(
            self,
            Node::Modifier(
                Modifier::ConstThis
                    | Modifier::VolatileThis
                    | Modifier::RestrictThis
                    | Modifier::ReferenceThis
                    | Modifier::RvalueReferenceThis
                    | Modifier::TransactionSafe,
                _
            ) | Node::Noexcept(..)
                | Node::Throw(..)
        )
    }

    /// The node a modifier or qualifier wraps.
    pub(super) fn inner(&self) -> Option<Id> {
        match *self {
            Node::Modifier(_, i)
            | Node::VendorQualifier(i, _)
            | Node::Noexcept(i, _)
            | Node::Throw(i, _) => Some(i),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables() {
        assert_eq!(builtin(b'j').map(|b| b.name), Some("unsigned int"));
        assert_eq!(builtin(b'y').map(|b| b.name), Some("unsigned long long"));
        assert_eq!(builtin(b's').map(|b| b.name), Some("short"));
        assert_eq!(builtin(b'v').map(|b| b.name), Some("void"));
        assert!(builtin(b'k').is_none() && builtin(b'u').is_none());
        assert_eq!(builtin_d(b'n').map(|b| b.name), Some("decltype(nullptr)"));
        assert!(OPERATORS.windows(2).all(|w| w[0].code < w[1].code));
        assert_eq!(operator(b"ls").map(|o| o.name), Some("<<"));
        assert_eq!(operator(b"tw").map(|o| o.name), Some("throw "));
        assert!(operator(b"xx").is_none());
    }
}
