//! Samples into databases with perf's schema: `ptperf export sqlite|postgres`.
//!
//! perf exports a decoded trace with its export-to-sqlite.py and
//! export-to-postgresql.py scripts (`perf script -s … DB branches calls`);
//! this module writes the same tables, column for column, the same rows with
//! the same ids, and the views those scripts create, without Python or Qt:
//!
//! - [`Exporter`] is perf's database export: it numbers the events, machines,
//!   threads, command names, files, symbols, samples, call paths and calls in
//!   the order perf's db-export does, and hands rows to a [`Sink`];
//! - [`calls`] builds the `calls` and `call_paths` tables from the branch
//!   samples with perf's call/return rules;
//! - [`tables`] and [`views`] describe perf's schema once for both databases;
//! - [`sqlite`] writes a SQLite file (bundled SQLite: nothing to install),
//!   complete or not at all: into a temporary file renamed at the end;
//! - [`postgres`] loads a new PostgreSQL database with binary COPY in one
//!   transaction, dropped again if the load fails;
//! - [`feed`] is where samples come from: the branch samples `ptperf script`
//!   synthesizes from a perf.data, as perf's intel-pt.c does;
//! - [`cli`] is `ptperf export`.
//!
//! From a perf.data to a SQLite file with perf's `calls` tables:
//!
//! ```no_run
//! use pt_perf::session::{Session, SessionOptions};
//! use pt_perf_data::MappedFile;
//! use ptperf::export::{feed, sqlite::SqliteSink, ExportOptions, Exporter};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = MappedFile::open("perf.data")?;
//! let perf = file.parse()?;
//! let session = Session::new(&perf, SessionOptions::for_file("perf.data"))?;
//! let opts = ExportOptions { calls: true, ..Default::default() };
//! let sink = SqliteSink::create("pt.db".as_ref(), false, &opts.layout())?;
//! let mut ex = Exporter::new(sink, opts)?;
//! let stats = feed::export_session(&perf, &session, &mut ex)?;
//! let summary = ex.finish()?;
//! println!("{} samples of {} instructions", summary.samples(), stats.insns);
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;

pub mod calls;
pub mod cli;
pub mod feed;
pub mod postgres;
pub mod sqlite;
pub mod tables;
pub mod views;

use calls::{Branch, CallPaths, CallReturns, Output, Sym, BRANCH_MASK};
use pt_perf::sample::flags;
use pt_perf::session::CommChange;
use tables::{Table, Value, TABLES};

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The SQLite file.
    #[error("{path}: {what}")]
    Sqlite {
        /// The database file.
        path: String,
        /// What went wrong.
        what: String,
    },
    /// The PostgreSQL server.
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    /// A file the export writes on the way.
    #[error("{0}")]
    Io(String),
}

/// perf's attr type of synthesized events (ptwrite, power events).
pub const PERF_TYPE_SYNTH: u32 = 4_000_000_000;

/// What to export, as perf's script arguments say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// The `all` samples columns (period, weight, transaction, data_src), else
    /// `branches`.
    pub all: bool,
    /// `calls`: the calls and call_paths tables.
    pub calls: bool,
    /// `callchains`: the call_paths table from the samples' call chains.
    pub callchains: bool,
    /// Addresses at or above this are the kernel's (perf's default on x86-64
    /// without a kernel map: 2^63).
    pub kernel_start: u64,
    /// The recording marks exec command names (`attr.comm_exec`): a process is
    /// named by its last exec's name.
    pub comm_exec: bool,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            all: true,
            calls: false,
            callchains: false,
            kernel_start: 1 << 63,
            comm_exec: true,
        }
    }
}

/// Which tables exist and how the samples table looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The samples table has the `all` columns.
    pub all: bool,
    /// call_paths exists.
    pub call_paths: bool,
    /// calls exists.
    pub calls: bool,
}

impl Layout {
    /// The tables created, in perf's order.
    pub fn tables(&self) -> Vec<Table> {
        TABLES
            .into_iter()
            .filter(|t| match t {
                Table::CallPaths => self.call_paths,
                Table::Calls => self.calls,
                _ => true,
            })
            .collect()
    }
}

impl ExportOptions {
    /// The tables these options make.
    pub fn layout(&self) -> Layout {
        Layout {
            all: self.all,
            call_paths: self.calls || self.callchains,
            calls: self.calls,
        }
    }
}

/// Where the rows go: a database.
pub trait Sink {
    /// One row of `table` (its values in column order).
    fn row(&mut self, table: Table, values: &[Value<'_>]) -> Result<(), ExportError>;
    /// The load is complete: `rows` says how many rows each table got. Adds
    /// what perf adds at the end (keys, indexes, `comms.has_calls`), drops the
    /// tables perf drops when empty, creates the views, and commits.
    fn finish(&mut self, rows: &RowCounts) -> Result<(), ExportError>;
}

/// Rows written per table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowCounts(HashMap<Table, u64>);

impl RowCounts {
    /// Rows of `table` (perf's "unknown" rows with id 0 included).
    pub fn rows(&self, table: Table) -> u64 {
        self.0.get(&table).copied().unwrap_or(0)
    }

    fn add(&mut self, table: Table) {
        *self.0.entry(table).or_default() += 1;
    }

    /// Which of the event tables perf keeps: ptwrite if it has rows; the power
    /// tables if any but cbr has rows, cbr also if it has; context_switches if
    /// it has rows.
    pub fn kept(&self, table: Table) -> bool {
        let has = |t| self.rows(t) > 0;
        let power = [Table::Mwait, Table::Pwre, Table::Exstop, Table::Pwrx]
            .into_iter()
            .any(has);
        match table {
            Table::Ptwrite => has(Table::Ptwrite),
            Table::Mwait | Table::Pwre | Table::Exstop | Table::Pwrx => power,
            Table::Cbr => power || has(Table::Cbr),
            Table::ContextSwitches => has(Table::ContextSwitches),
            _ => true,
        }
    }
}

/// A thread as the export sees it.
#[derive(Clone, Copy, Debug)]
pub struct ThreadRef<'a> {
    /// Unique per thread lifetime (a thread id used again is another thread).
    pub key: u64,
    /// Process id (-1: unknown).
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Its command names, in time order.
    pub comms: &'a [CommChange],
}

/// A file of code.
#[derive(Clone, Copy, Debug)]
pub struct DsoRef<'a> {
    /// perf's short name (the file name; `[kernel.kallsyms]`, `[vdso]`).
    pub short_name: &'a str,
    /// perf's long name (the path); identifies the file.
    pub long_name: &'a str,
    /// Build id in hex, or empty.
    pub build_id: &'a str,
}

/// A symbol of a file.
#[derive(Clone, Copy, Debug)]
pub struct SymRef<'a> {
    /// Start, in the file's addresses.
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// ELF binding: 0 local, 1 global, 2 weak.
    pub binding: u8,
    /// Name.
    pub name: &'a str,
}

/// An address resolved as perf's `addr_location`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Loc<'a> {
    /// The address.
    pub ip: u64,
    /// The address in its file's addresses (perf's `al->addr`); `ip` if no file.
    pub file_addr: u64,
    /// The file mapped there (`None`: nothing mapped).
    pub dso: Option<DsoRef<'a>>,
    /// The symbol covering it in that file (`None`: no symbol; perf then makes
    /// an "unknown" one at the address).
    pub sym: Option<SymRef<'a>>,
}

/// An event samples belong to.
#[derive(Clone, Copy, Debug)]
pub struct EventRef<'a> {
    /// Its index among the recording's events (identifies it).
    pub index: usize,
    /// Its name (`instructions`, `branches`, `ptwrite`, …).
    pub name: &'a str,
    /// `attr.type` ([`PERF_TYPE_SYNTH`] for ptwrite and the power events).
    pub attr_type: u32,
    /// `attr.config` (which synthesized event).
    pub config: u64,
}

/// A sample, with what perf resolves for it.
#[derive(Clone, Copy, Debug)]
pub struct ExportSample<'a> {
    /// Its event.
    pub event: EventRef<'a>,
    /// Its thread.
    pub thread: ThreadRef<'a>,
    /// The thread's process's main thread (pid == tid), if known.
    pub main_thread: Option<ThreadRef<'a>>,
    /// CPU (-1: unknown).
    pub cpu: i32,
    /// perf time.
    pub time: u64,
    /// Where it is.
    pub from: Loc<'a>,
    /// Where a branch goes (`sample.addr`), resolved for branch samples (perf
    /// resolves it for its branches event only).
    pub to: Option<Loc<'a>>,
    /// `sample.addr` (0 if none).
    pub addr: u64,
    /// Period.
    pub period: u64,
    /// Weight.
    pub weight: u64,
    /// Transaction.
    pub transaction: u64,
    /// Data source.
    pub data_src: u64,
    /// perf's flags ([`pt_perf::sample::flags`]).
    pub flags: u32,
    /// Length of the instruction at `from.ip`.
    pub insn_len: u8,
    /// Instructions since the last sample.
    pub insn_cnt: u64,
    /// Cycles since the last sample.
    pub cyc_cnt: u64,
    /// The raw data of a synthesized event.
    pub raw: &'a [u8],
    /// The call chain, innermost first (perf's sample order).
    pub callchain: &'a [Loc<'a>],
}

/// A context switch (PERF_RECORD_SWITCH or SWITCH_CPU_WIDE).
#[derive(Clone, Copy, Debug)]
pub struct ContextSwitch<'a> {
    /// perf time.
    pub time: u64,
    /// CPU.
    pub cpu: i32,
    /// Switch out (else in).
    pub out: bool,
    /// Switched out preempted.
    pub preempt: bool,
    /// The thread the record is about, and its main thread.
    pub thread: Option<(ThreadRef<'a>, Option<ThreadRef<'a>>)>,
    /// For SWITCH_CPU_WIDE: the thread switched to or from, and its main thread.
    pub other: Option<(ThreadRef<'a>, Option<ThreadRef<'a>>)>,
}

/// perf's rows of `branch_types`: (flags, name).
pub fn branch_types() -> Vec<(u32, String)> {
    use flags::*;
    let base: [(u32, &str); 16] = [
        (0, "no branch"),
        (BRANCH | CALL, "call"),
        (BRANCH | RETURN, "return"),
        (BRANCH | CONDITIONAL, "conditional jump"),
        (BRANCH, "unconditional jump"),
        (BRANCH | CALL | INTERRUPT, "software interrupt"),
        (BRANCH | RETURN | INTERRUPT, "return from interrupt"),
        (BRANCH | CALL | SYSCALLRET, "system call"),
        (BRANCH | RETURN | SYSCALLRET, "return from system call"),
        (BRANCH | ASYNC, "asynchronous branch"),
        (BRANCH | CALL | ASYNC | INTERRUPT, "hardware interrupt"),
        (BRANCH | TX_ABORT, "transaction abort"),
        (BRANCH | TRACE_BEGIN, "trace begin"),
        (BRANCH | TRACE_END, "trace end"),
        (BRANCH | CALL | VMENTRY, "vm entry"),
        (BRANCH | CALL | VMEXIT, "vm exit"),
    ];
    let mut v: Vec<(u32, String)> = base.iter().map(|&(f, n)| (f, n.to_string())).collect();
    for &(f, n) in &base {
        if f == BRANCH || f & (TRACE_BEGIN | TRACE_END) != 0 {
            continue;
        }
        v.push((f | TRACE_BEGIN, format!("trace begin / {n}")));
        v.push((f | TRACE_END, format!("{n} / trace end")));
    }
    v
}

/// A thread's exported state.
#[derive(Clone, Copy, Debug)]
struct ThreadIds {
    db_id: u64,
    tid: i32,
}

/// What the export wrote.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    rows: RowCounts,
}

impl Summary {
    /// Rows of `table` ("unknown" rows with id 0 included).
    pub fn rows(&self, table: Table) -> u64 {
        self.rows.rows(table)
    }

    /// Samples exported (without perf's "unknown" sample 0).
    pub fn samples(&self) -> u64 {
        self.rows(Table::Samples).saturating_sub(1)
    }
}

/// perf's database export over a [`Sink`].
pub struct Exporter<S: Sink> {
    sink: S,
    opts: ExportOptions,
    rows: RowCounts,
    evsels: HashMap<usize, u64>,
    machine: u64,
    threads: HashMap<u64, ThreadIds>,
    /// (thread key, comm index) → comms.id.
    comms: HashMap<(u64, usize), u64>,
    dsos: HashMap<String, u64>,
    /// (dso id, start) → symbols.id.
    symbols: HashMap<(u64, u64), u64>,
    last: Ids,
    /// Calls and call paths (`calls`), or call paths only (`callchains`).
    calls: Option<CallReturns>,
    paths: Option<CallPaths>,
    out: Output,
}

#[derive(Clone, Copy, Debug, Default)]
struct Ids {
    evsel: u64,
    thread: u64,
    comm: u64,
    comm_thread: u64,
    dso: u64,
    symbol: u64,
    sample: u64,
    context_switch: u64,
}

/// The comm perf gives a thread without a name: `:TID`.
fn default_comm(tid: i32) -> String {
    format!(":{tid}")
}

/// The index of `thread`'s command name at `time` (perf's `thread__comm`: the
/// last set at or before then, else the first); `usize::MAX` for a thread
/// without any.
fn current_comm(t: &ThreadRef<'_>, time: u64) -> usize {
    if t.comms.is_empty() {
        return usize::MAX;
    }
    let n = t.comms.partition_point(|c| c.time <= time);
    n.saturating_sub(1)
}

/// The index of `main`'s exec command name at `time` (perf's
/// `thread__exec_comm`): the last exec's name; without one, the first name,
/// unless that one has no time and another follows.
fn exec_comm(t: &ThreadRef<'_>, time: u64) -> usize {
    if t.comms.is_empty() {
        return usize::MAX;
    }
    let n = t.comms.partition_point(|c| c.time <= time).max(1);
    if let Some(i) = (0..n).rev().find(|&i| t.comms[i].exec) {
        return i;
    }
    if n >= 2 && t.comms[0].time == 0 && t.pid == t.tid {
        return 1;
    }
    0
}

impl<S: Sink> Exporter<S> {
    /// An export into `sink`: writes perf's `branch_types` rows and its
    /// "unknown" rows (id 0 in every table).
    pub fn new(sink: S, opts: ExportOptions) -> Result<Self, ExportError> {
        let mut ex = Exporter {
            sink,
            opts,
            rows: RowCounts::default(),
            evsels: HashMap::new(),
            machine: 0,
            threads: HashMap::new(),
            comms: HashMap::new(),
            dsos: HashMap::new(),
            symbols: HashMap::new(),
            last: Ids::default(),
            calls: opts.calls.then(|| CallReturns::new(opts.kernel_start)),
            paths: (opts.callchains && !opts.calls).then(CallPaths::default),
            out: Output::default(),
        };
        for (id, name) in branch_types() {
            ex.row(
                Table::BranchTypes,
                &[Value::I32(id as i32), Value::Str(&name)],
            )?;
        }
        use Value::*;
        ex.row(Table::SelectedEvents, &[I64(0), Str("unknown")])?;
        ex.row(Table::Machines, &[I64(0), I32(0), Str("unknown")])?;
        ex.row(Table::Threads, &[I64(0), I64(0), I64(0), I32(-1), I32(-1)])?;
        ex.row(
            Table::Comms,
            &[I64(0), Str("unknown"), I64(0), I64(0), Bool(false)],
        )?;
        ex.row(
            Table::Dsos,
            &[I64(0), I64(0), Str("unknown"), Str("unknown"), Str("")],
        )?;
        ex.row(
            Table::Symbols,
            &[I64(0), I64(0), I64(0), I64(0), I32(0), Str("unknown")],
        )?;
        let mut zero = vec![I64(0); 25];
        ex.sample_row(&mut zero, 0, 0, false)?;
        let layout = opts.layout();
        if layout.call_paths {
            ex.row(Table::CallPaths, &[I64(0); 4])?;
        }
        if layout.calls {
            let mut z = [I64(0); 14];
            z[10] = I32(0);
            ex.row(Table::Calls, &z)?;
        }
        Ok(ex)
    }

    fn row(&mut self, table: Table, values: &[Value<'_>]) -> Result<(), ExportError> {
        self.rows.add(table);
        self.sink.row(table, values)
    }

    /// The samples row: the 25 values of perf's `all` layout, cut to
    /// `branches`' 21 where that layout is chosen.
    fn sample_row(
        &mut self,
        v: &mut [Value<'_>],
        branch_type: u32,
        flags: u32,
        in_tx: bool,
    ) -> Result<(), ExportError> {
        v[10] = Value::I32(match v[10] {
            Value::I64(c) => c as i32,
            Value::I32(c) => c,
            _ => 0,
        });
        v[19] = Value::I32(branch_type as i32);
        v[20] = Value::Bool(in_tx);
        v[24] = Value::I32(flags as i32);
        if self.opts.all {
            self.row(Table::Samples, v)
        } else {
            let mut b: [Value<'_>; 21] = [Value::I64(0); 21];
            b[..15].copy_from_slice(&v[..15]);
            b[15..].copy_from_slice(&v[19..25]);
            self.row(Table::Samples, &b)
        }
    }

    fn evsel(&mut self, e: &EventRef<'_>) -> Result<u64, ExportError> {
        if let Some(&id) = self.evsels.get(&e.index) {
            return Ok(id);
        }
        self.last.evsel += 1;
        let id = self.last.evsel;
        self.evsels.insert(e.index, id);
        self.row(
            Table::SelectedEvents,
            &[Value::I64(id as i64), Value::Str(e.name)],
        )?;
        Ok(id)
    }

    fn machine(&mut self) -> Result<u64, ExportError> {
        if self.machine == 0 {
            self.machine = 1;
            // The host: pid -1, no root directory.
            self.row(
                Table::Machines,
                &[Value::I64(1), Value::I32(-1), Value::Str("")],
            )?;
        }
        Ok(self.machine)
    }

    /// Exports `t` if new (process id: `main`'s); its id, and whether it was new.
    fn thread(
        &mut self,
        t: &ThreadRef<'_>,
        main_id: Option<u64>,
    ) -> Result<(u64, bool), ExportError> {
        if let Some(ids) = self.threads.get(&t.key) {
            return Ok((ids.db_id, false));
        }
        self.last.thread += 1;
        let id = self.last.thread;
        self.threads.insert(
            t.key,
            ThreadIds {
                db_id: id,
                tid: t.tid,
            },
        );
        let process = main_id.unwrap_or(id);
        let machine = self.machine;
        self.row(
            Table::Threads,
            &[
                Value::I64(id as i64),
                Value::I64(machine as i64),
                Value::I64(process as i64),
                Value::I32(t.pid),
                Value::I32(t.tid),
            ],
        )?;
        Ok((id, true))
    }

    /// Exports comm `idx` of thread `t` (whose id is `thread_id`) if new.
    fn comm(
        &mut self,
        t: &ThreadRef<'_>,
        idx: usize,
        thread_id: u64,
    ) -> Result<(u64, bool), ExportError> {
        if let Some(&id) = self.comms.get(&(t.key, idx)) {
            return Ok((id, false));
        }
        self.last.comm += 1;
        let id = self.last.comm;
        self.comms.insert((t.key, idx), id);
        let (name, time, exec) = match t.comms.get(idx) {
            Some(c) => (c.comm.clone(), c.time, c.exec),
            None => (default_comm(t.tid), 0, false),
        };
        self.row(
            Table::Comms,
            &[
                Value::I64(id as i64),
                Value::Str(tables::fit(&name, 16)),
                Value::I64(thread_id as i64),
                Value::I64(time as i64),
                Value::Bool(exec),
            ],
        )?;
        Ok((id, true))
    }

    fn comm_thread(&mut self, comm_id: u64, thread_id: u64) -> Result<(), ExportError> {
        self.last.comm_thread += 1;
        let id = self.last.comm_thread;
        self.row(
            Table::CommThreads,
            &[
                Value::I64(id as i64),
                Value::I64(comm_id as i64),
                Value::I64(thread_id as i64),
            ],
        )
    }

    /// perf's db_export__threads: the main thread and its exec comm, the
    /// thread, its current comm. Returns (thread id, the exec comm's id).
    fn threads_of(
        &mut self,
        t: &ThreadRef<'_>,
        main: Option<&ThreadRef<'_>>,
        time: u64,
    ) -> Result<(u64, Option<u64>), ExportError> {
        let mut comm = None;
        let mut main_id = None;
        if let Some(m) = main {
            let (mid, _) = self.thread(m, None)?;
            main_id = Some(mid);
            let idx = if self.opts.comm_exec {
                exec_comm(m, time)
            } else {
                current_comm(m, time)
            };
            let (cid, new) = self.comm(m, idx, mid)?;
            if new {
                self.comm_thread(cid, mid)?;
            }
            comm = Some(cid);
        }
        let same = main.is_some_and(|m| m.key == t.key);
        let tid = if same {
            main_id.unwrap_or(0)
        } else {
            let (tid, new) = self.thread(t, main_id)?;
            if let (Some(c), true) = (comm, new) {
                self.comm_thread(c, tid)?;
            }
            tid
        };
        let idx = current_comm(t, time);
        self.comm(t, idx, tid)?;
        Ok((tid, comm))
    }

    fn dso(&mut self, d: &DsoRef<'_>) -> Result<u64, ExportError> {
        if let Some(&id) = self.dsos.get(d.long_name) {
            return Ok(id);
        }
        self.last.dso += 1;
        let id = self.last.dso;
        self.dsos.insert(d.long_name.to_string(), id);
        let machine = self.machine;
        self.row(
            Table::Dsos,
            &[
                Value::I64(id as i64),
                Value::I64(machine as i64),
                Value::Str(tables::fit(d.short_name, 256)),
                Value::Str(tables::fit(d.long_name, 4096)),
                Value::Str(tables::fit(d.build_id, 64)),
            ],
        )?;
        Ok(id)
    }

    /// perf's db_ids_from_al: (dso id, symbol, offset), exporting what is new;
    /// a mapped address without a symbol gets perf's "unknown" symbol at it.
    fn ids_of<'l>(&mut self, l: &Loc<'l>) -> Result<(u64, Option<Sym<'l>>, u64), ExportError> {
        let Some(d) = &l.dso else {
            return Ok((0, None, 0));
        };
        let dso = self.dso(d)?;
        let (start, end, binding, name) = match &l.sym {
            Some(s) => (s.start, s.end, s.binding, s.name),
            None => (l.file_addr, l.file_addr, 0, "unknown"),
        };
        let id = match self.symbols.get(&(dso, start)) {
            Some(&id) => id,
            None => {
                self.last.symbol += 1;
                let id = self.last.symbol;
                self.symbols.insert((dso, start), id);
                if let Some(c) = &mut self.calls {
                    c.symbol(id, name);
                }
                self.row(
                    Table::Symbols,
                    &[
                        Value::I64(id as i64),
                        Value::I64(dso as i64),
                        Value::I64(start as i64),
                        Value::I64(end as i64),
                        Value::I32(i32::from(binding)),
                        Value::Str(tables::fit(name, 2048)),
                    ],
                )?;
                id
            }
        };
        Ok((
            dso,
            Some(Sym { id, start, name }),
            l.file_addr.wrapping_sub(start),
        ))
    }

    /// Writes the call paths and calls the call/return rules produced.
    fn drain(&mut self) -> Result<(), ExportError> {
        let out = std::mem::take(&mut self.out);
        for [id, parent, sym, ip] in &out.call_paths {
            self.row(
                Table::CallPaths,
                &[
                    Value::I64(*id as i64),
                    Value::I64(*parent as i64),
                    Value::I64(*sym as i64),
                    Value::I64(*ip as i64),
                ],
            )?;
        }
        for c in &out.calls {
            let thread = self.threads.get(&c.thread).map_or(0, |t| t.db_id);
            self.row(
                Table::Calls,
                &[
                    Value::I64(c.id as i64),
                    Value::I64(thread as i64),
                    Value::I64(c.comm_id as i64),
                    Value::I64(c.call_path_id as i64),
                    Value::I64(c.call_time as i64),
                    Value::I64(c.return_time as i64),
                    Value::I64(c.branch_count as i64),
                    Value::I64(c.call_ref as i64),
                    Value::I64(c.return_ref as i64),
                    Value::I64(c.parent_call_path_id as i64),
                    Value::I32(c.flags as i32),
                    Value::I64(c.parent_id as i64),
                    Value::I64(c.insn_count as i64),
                    Value::I64(c.cyc_count as i64),
                ],
            )?;
        }
        // Keep the buffers' room.
        self.out = out;
        self.out.call_paths.clear();
        self.out.calls.clear();
        Ok(())
    }

    /// Exports one sample (perf's db_export__sample); returns its id.
    pub fn sample(&mut self, s: &ExportSample<'_>) -> Result<u64, ExportError> {
        let evsel = self.evsel(&s.event)?;
        let machine = self.machine()?;
        let (thread_id, comm) = self.threads_of(&s.thread, s.main_thread.as_ref(), s.time)?;
        self.last.sample += 1;
        let id = self.last.sample;
        let (dso, sym, offset) = self.ids_of(&s.from)?;
        let mut call_path_id = 0;
        if self.opts.callchains && !s.callchain.is_empty() {
            let mut cp = CallPaths::ROOT;
            let ks = self.opts.kernel_start;
            for l in s.callchain.iter().rev() {
                let (_, lsym, _) = self.ids_of(l)?;
                let paths = match (&mut self.calls, &mut self.paths) {
                    (Some(c), _) => &mut c.paths,
                    (None, Some(p)) => p,
                    (None, None) => unreachable!("callchains without a call path tree"),
                };
                cp = paths.child(cp, lsym, l.ip, ks);
            }
            if cp != CallPaths::ROOT {
                let paths = match (&mut self.calls, &mut self.paths) {
                    (Some(c), _) => &mut c.paths,
                    (None, Some(p)) => p,
                    (None, None) => unreachable!("callchains without a call path tree"),
                };
                call_path_id = paths.export(cp, &mut self.out.call_paths);
            }
        }
        let (mut to_dso, mut to_sym_id, mut to_offset) = (0, 0, 0);
        if let Some(to) = &s.to {
            let (d, tsym, off) = self.ids_of(to)?;
            to_dso = d;
            to_sym_id = tsym.map_or(0, |t| t.id);
            to_offset = off;
            if let Some(calls) = &mut self.calls {
                let b = Branch {
                    flags: s.flags,
                    ip: s.from.ip,
                    addr: s.addr,
                    insn_len: s.insn_len,
                    time: s.time,
                    insn_cnt: s.insn_cnt,
                    cyc_cnt: s.cyc_cnt,
                    from_sym: sym,
                    to_sym: tsym,
                    to_file_addr: to.file_addr,
                    sample_id: id,
                };
                let idle = s.thread.pid == 0 && s.thread.tid == 0;
                let main = s.thread.pid == s.thread.tid;
                calls.process(
                    s.thread.key,
                    idle,
                    main,
                    s.cpu,
                    comm.unwrap_or(0),
                    &b,
                    &mut self.out,
                );
            }
        }
        self.drain()?;
        use Value::I64;
        let mut v = [
            I64(id as i64),
            I64(evsel as i64),
            I64(machine as i64),
            I64(thread_id as i64),
            I64(comm.unwrap_or(0) as i64),
            I64(dso as i64),
            I64(sym.map_or(0, |s| s.id) as i64),
            I64(offset as i64),
            I64(s.from.ip as i64),
            I64(s.time as i64),
            I64(i64::from(s.cpu)),
            I64(to_dso as i64),
            I64(to_sym_id as i64),
            I64(to_offset as i64),
            I64(s.addr as i64),
            I64(s.period as i64),
            I64(s.weight as i64),
            I64(s.transaction as i64),
            I64(s.data_src as i64),
            I64(0),
            I64(0),
            I64(call_path_id as i64),
            I64(s.insn_cnt as i64),
            I64(s.cyc_cnt as i64),
            I64(0),
        ];
        self.sample_row(
            &mut v,
            s.flags & BRANCH_MASK,
            s.flags,
            s.flags & flags::IN_TX != 0,
        )?;
        if s.event.attr_type == PERF_TYPE_SYNTH {
            self.synth(id, s.event.config, s.raw)?;
        }
        Ok(id)
    }

    /// The row of a synthesized event's own table, from its raw data (perf's
    /// `perf_synth_intel_*` layouts).
    fn synth(&mut self, id: u64, config: u64, raw: &[u8]) -> Result<(), ExportError> {
        let u32_at = |o: usize| -> u32 {
            raw.get(o..o + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
        };
        let flags = u32_at(0);
        let payload = raw
            .get(4..12)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        let id = Value::I64(id as i64);
        let int = |v: u64| Value::I32(v as i32);
        match config {
            0 => self.row(
                Table::Ptwrite,
                &[id, Value::I64(payload as i64), Value::Bool(flags & 1 != 0)],
            ),
            1 => self.row(
                Table::Mwait,
                &[id, int(payload & 0xff), int((payload >> 32) & 3)],
            ),
            2 => self.row(
                Table::Pwre,
                &[
                    id,
                    int((payload >> 12) & 0xf),
                    int((payload >> 8) & 0xf),
                    Value::Bool((payload >> 7) & 1 != 0),
                ],
            ),
            3 => self.row(Table::Exstop, &[id, Value::Bool(flags & 1 != 0)]),
            4 => self.row(
                Table::Pwrx,
                &[
                    id,
                    int(payload & 0xf),
                    int((payload >> 4) & 0xf),
                    int((payload >> 8) & 0xf),
                ],
            ),
            5 => {
                let cbr = u64::from(raw.first().copied().unwrap_or(0));
                let max_nonturbo = u64::from(raw.get(2).copied().unwrap_or(0));
                let freq = u64::from(u32_at(4));
                let mhz = (freq + 500) / 1000;
                let percent = if max_nonturbo == 0 {
                    0
                } else {
                    (cbr * 1000 + 5 * max_nonturbo) / (10 * max_nonturbo)
                };
                self.row(Table::Cbr, &[id, int(cbr), int(mhz), int(percent)])
            }
            _ => Ok(()),
        }
    }

    /// Exports a context switch (perf's db_export__switch): skipped when
    /// neither side is a traced thread other than the idle task.
    pub fn context_switch(&mut self, sw: &ContextSwitch<'_>) -> Result<(), ExportError> {
        let machine = self.machine()?;
        let side = |ex: &mut Self,
                    t: &Option<(ThreadRef<'_>, Option<ThreadRef<'_>>)>|
         -> Result<(u64, Option<u64>, bool), ExportError> {
            match t {
                Some((t, main)) if !t.comms.is_empty() => {
                    let idle = t.pid == 0 && t.tid == 0;
                    let (id, comm) = ex.threads_of(t, main.as_ref(), sw.time)?;
                    Ok((id, comm, idle))
                }
                _ => Ok((0, None, false)),
            }
        };
        let (a, comm_a, idle_a) = side(self, &sw.thread)?;
        let (b, comm_b, idle_b) = side(self, &sw.other)?;
        if (a == 0 || idle_a) && (b == 0 || idle_b) {
            return Ok(());
        }
        self.last.context_switch += 1;
        let id = self.last.context_switch;
        let flags = i32::from(sw.out) | (i32::from(sw.out && sw.preempt) << 1);
        let (t_out, c_out, t_in, c_in) = if sw.out {
            (a, comm_a, b, comm_b)
        } else {
            (b, comm_b, a, comm_a)
        };
        self.row(
            Table::ContextSwitches,
            &[
                Value::I64(id as i64),
                Value::I64(machine as i64),
                Value::I64(sw.time as i64),
                Value::I32(sw.cpu),
                Value::I64(t_out as i64),
                Value::I64(c_out.unwrap_or(0) as i64),
                Value::I64(t_in as i64),
                Value::I64(c_in.unwrap_or(0) as i64),
                Value::I32(flags),
            ],
        )
    }

    /// The call chain perf gives a sample at `ip` of `thread` on `cpu` once
    /// its call/return processing (`calls`) owns the thread's stack: `ip`,
    /// then the stack's return addresses, innermost first, `depth` entries at
    /// most in all. `false` (and `out` untouched) where it does not.
    pub fn calls_chain(
        &self,
        thread: &ThreadRef<'_>,
        cpu: i32,
        ip: u64,
        depth: usize,
        out: &mut Vec<u64>,
    ) -> bool {
        let Some(calls) = &self.calls else {
            return false;
        };
        let idle = thread.pid == 0 && thread.tid == 0;
        let Some(rets) = calls.return_addresses(thread.key, idle, cpu) else {
            return false;
        };
        out.clear();
        if depth >= 1 {
            out.push(ip);
            out.extend(rets.take(depth - 1));
        }
        true
    }

    /// What it exports.
    pub fn options(&self) -> ExportOptions {
        self.opts
    }

    /// Ends the export: the calls still open end ("no return"), thread by
    /// thread as perf flushes them, and the sink finishes the database.
    pub fn finish(mut self) -> Result<Summary, ExportError> {
        if let Some(calls) = &mut self.calls {
            let threads = &self.threads;
            // perf's order: its thread table's 256 buckets by tid, each by tid.
            calls.flush_all(
                |key| {
                    threads.get(&key).map_or((u32::MAX, u32::MAX), |t| {
                        ((t.tid as u32) % 256, t.tid as u32)
                    })
                },
                &mut self.out,
            );
        }
        self.drain()?;
        self.sink.finish(&self.rows)?;
        Ok(Summary { rows: self.rows })
    }

    /// Rows written so far.
    pub fn rows(&self) -> &RowCounts {
        &self.rows
    }
}

#[cfg(test)]
mod tests;
