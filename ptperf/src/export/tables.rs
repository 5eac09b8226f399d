//! perf's export schema: its tables, column for column and type for type, as
//! its export-to-sqlite.py and export-to-postgresql.py scripts create them.
//! One description serves both databases: the SQL of the tables and the
//! encoding of the rows are derived from it.

/// A column's type, as perf declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `bigint` (the ids, addresses, times, counts).
    BigInt,
    /// `integer`.
    Int,
    /// `boolean` (SQLite: `boolean`, stored as 0/1; PostgreSQL: `boolean`).
    Bool,
    /// A boolean column perf declares `integer` in SQLite (ptwrite's and
    /// exstop's `exact_ip`, pwre's `hw`) and `boolean` in PostgreSQL.
    IntOrBool,
    /// `varchar(N)`.
    Text(u32),
}

/// A table perf exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// The events samples belong to.
    SelectedEvents,
    /// Machines (the host; guests).
    Machines,
    /// Threads.
    Threads,
    /// Command names.
    Comms,
    /// Which threads had which command name.
    CommThreads,
    /// Files of code (and the kernel).
    Dsos,
    /// Functions (those samples or call paths met).
    Symbols,
    /// Names of the branch kinds (`samples.branch_type`).
    BranchTypes,
    /// The samples.
    Samples,
    /// The call stacks (a tree).
    CallPaths,
    /// Calls and returns.
    Calls,
    /// PTWRITE payloads.
    Ptwrite,
    /// Core-to-bus ratio changes.
    Cbr,
    /// MWAIT.
    Mwait,
    /// Power entry.
    Pwre,
    /// Execution stops.
    Exstop,
    /// Power exit.
    Pwrx,
    /// Context switches.
    ContextSwitches,
}

/// Every table, in the order perf creates (and loads) them.
pub const TABLES: [Table; 18] = [
    Table::SelectedEvents,
    Table::Machines,
    Table::Threads,
    Table::Comms,
    Table::CommThreads,
    Table::Dsos,
    Table::Symbols,
    Table::BranchTypes,
    Table::Samples,
    Table::CallPaths,
    Table::Calls,
    Table::Ptwrite,
    Table::Cbr,
    Table::Mwait,
    Table::Pwre,
    Table::Exstop,
    Table::Pwrx,
    Table::ContextSwitches,
];

use Ty::*;

const SAMPLES_HEAD: [(&str, Ty); 15] = [
    ("id", BigInt),
    ("evsel_id", BigInt),
    ("machine_id", BigInt),
    ("thread_id", BigInt),
    ("comm_id", BigInt),
    ("dso_id", BigInt),
    ("symbol_id", BigInt),
    ("sym_offset", BigInt),
    ("ip", BigInt),
    ("time", BigInt),
    ("cpu", Int),
    ("to_dso_id", BigInt),
    ("to_symbol_id", BigInt),
    ("to_sym_offset", BigInt),
    ("to_ip", BigInt),
];

const SAMPLES_TAIL: [(&str, Ty); 6] = [
    ("branch_type", Int),
    ("in_tx", Bool),
    ("call_path_id", BigInt),
    ("insn_count", BigInt),
    ("cyc_count", BigInt),
    ("flags", Int),
];

/// Which database a schema is for (names and types differ a little).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// SQLite (export-to-sqlite.py).
    Sqlite,
    /// PostgreSQL (export-to-postgresql.py).
    Postgres,
}

impl Table {
    /// The table's name.
    pub fn name(self) -> &'static str {
        match self {
            Table::SelectedEvents => "selected_events",
            Table::Machines => "machines",
            Table::Threads => "threads",
            Table::Comms => "comms",
            Table::CommThreads => "comm_threads",
            Table::Dsos => "dsos",
            Table::Symbols => "symbols",
            Table::BranchTypes => "branch_types",
            Table::Samples => "samples",
            Table::CallPaths => "call_paths",
            Table::Calls => "calls",
            Table::Ptwrite => "ptwrite",
            Table::Cbr => "cbr",
            Table::Mwait => "mwait",
            Table::Pwre => "pwre",
            Table::Exstop => "exstop",
            Table::Pwrx => "pwrx",
            Table::ContextSwitches => "context_switches",
        }
    }

    /// The columns (name, type) of the table; `all` selects the samples table
    /// with the period, weight, transaction and data_src columns (perf's `all`,
    /// else `branches`).
    pub fn columns(self, all: bool, flavor: Flavor) -> Vec<(&'static str, Ty)> {
        let fixed: &[(&str, Ty)] = match self {
            Table::SelectedEvents => &[("id", BigInt), ("name", Text(80))],
            Table::Machines => &[("id", BigInt), ("pid", Int), ("root_dir", Text(4096))],
            Table::Threads => &[
                ("id", BigInt),
                ("machine_id", BigInt),
                ("process_id", BigInt),
                ("pid", Int),
                ("tid", Int),
            ],
            Table::Comms => &[
                ("id", BigInt),
                ("comm", Text(16)),
                ("c_thread_id", BigInt),
                ("c_time", BigInt),
                ("exec_flag", Bool),
            ],
            Table::CommThreads => &[("id", BigInt), ("comm_id", BigInt), ("thread_id", BigInt)],
            Table::Dsos => &[
                ("id", BigInt),
                ("machine_id", BigInt),
                ("short_name", Text(256)),
                ("long_name", Text(4096)),
                ("build_id", Text(64)),
            ],
            Table::Symbols => &[
                ("id", BigInt),
                ("dso_id", BigInt),
                ("sym_start", BigInt),
                ("sym_end", BigInt),
                ("binding", Int),
                ("name", Text(2048)),
            ],
            Table::BranchTypes => &[("id", Int), ("name", Text(80))],
            Table::Samples => {
                let mut v: Vec<(&str, Ty)> = SAMPLES_HEAD.to_vec();
                if all {
                    let transaction = match flavor {
                        Flavor::Sqlite => "transaction_",
                        Flavor::Postgres => "transaction",
                    };
                    v.extend([
                        ("period", BigInt),
                        ("weight", BigInt),
                        (transaction, BigInt),
                        ("data_src", BigInt),
                    ]);
                }
                v.extend(SAMPLES_TAIL);
                return v;
            }
            Table::CallPaths => &[
                ("id", BigInt),
                ("parent_id", BigInt),
                ("symbol_id", BigInt),
                ("ip", BigInt),
            ],
            Table::Calls => &[
                ("id", BigInt),
                ("thread_id", BigInt),
                ("comm_id", BigInt),
                ("call_path_id", BigInt),
                ("call_time", BigInt),
                ("return_time", BigInt),
                ("branch_count", BigInt),
                ("call_id", BigInt),
                ("return_id", BigInt),
                ("parent_call_path_id", BigInt),
                ("flags", Int),
                ("parent_id", BigInt),
                ("insn_count", BigInt),
                ("cyc_count", BigInt),
            ],
            Table::Ptwrite => &[("id", BigInt), ("payload", BigInt), ("exact_ip", IntOrBool)],
            Table::Cbr => &[("id", BigInt), ("cbr", Int), ("mhz", Int), ("percent", Int)],
            Table::Mwait => &[("id", BigInt), ("hints", Int), ("extensions", Int)],
            Table::Pwre => &[
                ("id", BigInt),
                ("cstate", Int),
                ("subcstate", Int),
                ("hw", IntOrBool),
            ],
            Table::Exstop => &[("id", BigInt), ("exact_ip", IntOrBool)],
            Table::Pwrx => &[
                ("id", BigInt),
                ("deepest_cstate", Int),
                ("last_cstate", Int),
                ("wake_reason", Int),
            ],
            Table::ContextSwitches => &[
                ("id", BigInt),
                ("machine_id", BigInt),
                ("time", BigInt),
                ("cpu", Int),
                ("thread_out_id", BigInt),
                ("comm_out_id", BigInt),
                ("thread_in_id", BigInt),
                ("comm_in_id", BigInt),
                ("flags", Int),
            ],
        };
        fixed.to_vec()
    }

    /// `CREATE TABLE` for `flavor`, with perf's types. SQLite tables get their
    /// primary key at once (perf's script declares it); PostgreSQL's get it after
    /// the load ([`Table::primary_key`]), as perf's script adds them.
    pub fn create_sql(self, all: bool, flavor: Flavor) -> String {
        let cols = self.columns(all, flavor);
        let mut sql = format!("CREATE TABLE {} (", self.name());
        for (i, (name, ty)) in cols.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            let ty = match (ty, flavor) {
                (BigInt, Flavor::Sqlite) if i == 0 => "integer".to_string(),
                (BigInt, _) => "bigint".to_string(),
                (Int, _) => "integer".to_string(),
                (Bool, _) | (IntOrBool, Flavor::Postgres) => "boolean".to_string(),
                (IntOrBool, Flavor::Sqlite) => "integer".to_string(),
                (Text(n), _) => format!("varchar({n})"),
            };
            sql.push_str(name);
            sql.push(' ');
            sql.push_str(&ty);
            if i == 0 {
                sql.push_str(" NOT NULL");
                if flavor == Flavor::Sqlite {
                    sql.push_str(" PRIMARY KEY");
                }
            }
        }
        sql.push(')');
        sql
    }

    /// `ALTER TABLE … ADD PRIMARY KEY (id)` (PostgreSQL, after the load).
    pub fn primary_key(self) -> String {
        format!("ALTER TABLE {} ADD PRIMARY KEY (id)", self.name())
    }
}

/// perf's foreign keys (PostgreSQL, after the load): (table, constraint,
/// column, referenced table). Those of `calls` and `call_paths` only where
/// the tables exist; the power tables' where they are kept.
pub const FOREIGN_KEYS: &[(Table, &str, &str, Table)] = &[
    (Table::Threads, "machinefk", "machine_id", Table::Machines),
    (Table::Threads, "processfk", "process_id", Table::Threads),
    (Table::Comms, "threadfk", "c_thread_id", Table::Threads),
    (Table::CommThreads, "commfk", "comm_id", Table::Comms),
    (Table::CommThreads, "threadfk", "thread_id", Table::Threads),
    (Table::Dsos, "machinefk", "machine_id", Table::Machines),
    (Table::Symbols, "dsofk", "dso_id", Table::Dsos),
    (Table::Samples, "evselfk", "evsel_id", Table::SelectedEvents),
    (Table::Samples, "machinefk", "machine_id", Table::Machines),
    (Table::Samples, "threadfk", "thread_id", Table::Threads),
    (Table::Samples, "commfk", "comm_id", Table::Comms),
    (Table::Samples, "dsofk", "dso_id", Table::Dsos),
    (Table::Samples, "symbolfk", "symbol_id", Table::Symbols),
    (Table::Samples, "todsofk", "to_dso_id", Table::Dsos),
    (Table::Samples, "tosymbolfk", "to_symbol_id", Table::Symbols),
    (Table::CallPaths, "parentfk", "parent_id", Table::CallPaths),
    (Table::CallPaths, "symbolfk", "symbol_id", Table::Symbols),
    (Table::Calls, "threadfk", "thread_id", Table::Threads),
    (Table::Calls, "commfk", "comm_id", Table::Comms),
    (
        Table::Calls,
        "call_pathfk",
        "call_path_id",
        Table::CallPaths,
    ),
    (Table::Calls, "callfk", "call_id", Table::Samples),
    (Table::Calls, "returnfk", "return_id", Table::Samples),
    (
        Table::Calls,
        "parent_call_pathfk",
        "parent_call_path_id",
        Table::CallPaths,
    ),
    (Table::Ptwrite, "idfk", "id", Table::Samples),
    (Table::Cbr, "idfk", "id", Table::Samples),
    (Table::Mwait, "idfk", "id", Table::Samples),
    (Table::Pwre, "idfk", "id", Table::Samples),
    (Table::Exstop, "idfk", "id", Table::Samples),
    (Table::Pwrx, "idfk", "id", Table::Samples),
    (
        Table::ContextSwitches,
        "machinefk",
        "machine_id",
        Table::Machines,
    ),
    (
        Table::ContextSwitches,
        "toutfk",
        "thread_out_id",
        Table::Threads,
    ),
    (
        Table::ContextSwitches,
        "tinfk",
        "thread_in_id",
        Table::Threads,
    ),
    (
        Table::ContextSwitches,
        "coutfk",
        "comm_out_id",
        Table::Comms,
    ),
    (Table::ContextSwitches, "cinfk", "comm_in_id", Table::Comms),
];

/// One value of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// A 64-bit integer (perf exports unsigned values as signed: databases have
    /// no unsigned 64-bit type).
    I64(i64),
    /// A 32-bit integer.
    I32(i32),
    /// A boolean.
    Bool(bool),
    /// Text.
    Str(&'a str),
}

/// `s` cut to at most `n` characters (a `varchar(n)`).
pub fn fit(s: &str, n: u32) -> &str {
    match s.char_indices().nth(n as usize) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_columns_of_both_variants() {
        let b = Table::Samples.columns(false, Flavor::Sqlite);
        assert_eq!(b.len(), 21);
        let a = Table::Samples.columns(true, Flavor::Sqlite);
        assert_eq!(a.len(), 25);
        assert_eq!(a[17].0, "transaction_");
        assert_eq!(
            Table::Samples.columns(true, Flavor::Postgres)[17].0,
            "transaction"
        );
        assert_eq!(
            Table::Comms.create_sql(false, Flavor::Sqlite),
            "CREATE TABLE comms (id integer NOT NULL PRIMARY KEY, comm varchar(16), \
             c_thread_id bigint, c_time bigint, exec_flag boolean)"
        );
        assert_eq!(
            Table::BranchTypes.create_sql(false, Flavor::Postgres),
            "CREATE TABLE branch_types (id integer NOT NULL, name varchar(80))"
        );
    }

    #[test]
    fn fit_cuts_at_characters() {
        assert_eq!(fit("abcdef", 3), "abc");
        assert_eq!(fit("ab", 3), "ab");
        assert_eq!(fit("äöüß", 2), "äö");
    }
}
