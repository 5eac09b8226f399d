//! The SQLite database of an export (perf's export-to-sqlite.py), with SQLite
//! bundled: nothing to install.
//!
//! The database is written into a temporary file beside the target and renamed
//! over it only once it is complete, so a failed export never leaves a half
//! database where a good one (or none) was.

use std::path::{Path, PathBuf};

use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::Connection;

use super::tables::{Flavor, Table, Value};
use super::{views, ExportError, Layout, RowCounts, Sink};

impl ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Value::I64(v) => ValueRef::Integer(v),
            Value::I32(v) => ValueRef::Integer(i64::from(v)),
            Value::Bool(v) => ValueRef::Integer(i64::from(v)),
            Value::Str(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

/// A SQLite database being written.
pub struct SqliteSink {
    conn: Option<Connection>,
    /// The temporary file written; removed unless the export completes.
    tmp: PathBuf,
    path: PathBuf,
    layout: Layout,
    /// `INSERT INTO t VALUES (?, …)` per table (the statement cache's keys).
    inserts: Vec<(Table, String)>,
    done: bool,
}

impl SqliteSink {
    /// Starts the database that will be `path`: perf's tables (those `layout`
    /// says) in a temporary file beside it. An existing `path` is an error (as
    /// in perf) unless `replace`.
    pub fn create(path: &Path, replace: bool, layout: &Layout) -> Result<Self, ExportError> {
        let err = |what: String| ExportError::Sqlite {
            path: path.display().to_string(),
            what,
        };
        if !replace && path.exists() {
            return Err(err("already exists (give --force to replace it)".into()));
        }
        let name = path
            .file_name()
            .ok_or_else(|| err("not a file name".into()))?
            .to_string_lossy()
            .into_owned();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = crate::inject::temp_beside(&dir.join(&name)).unwrap_or_else(|| dir.join(&name));
        // A leftover of a killed export with our pid would be stale: start anew.
        let _ = std::fs::remove_file(&tmp);
        let conn = Connection::open(&tmp).map_err(|e| err(sqlite_what(&e)))?;
        let mut sink = SqliteSink {
            conn: Some(conn),
            tmp,
            path: path.to_path_buf(),
            layout: *layout,
            inserts: Vec::new(),
            done: false,
        };
        sink.start().map_err(|e| err(sqlite_what(&e)))?;
        Ok(sink)
    }

    fn conn(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("the connection lives until finish")
    }

    fn start(&mut self) -> rusqlite::Result<()> {
        let conn = self.conn();
        // perf turns the journal off; a crash loses only the temporary file.
        conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")?;
        conn.set_prepared_statement_cache_capacity(32);
        conn.execute_batch("BEGIN")?;
        let mut inserts = Vec::new();
        for t in self.layout.tables() {
            conn.execute_batch(&t.create_sql(self.layout.all, Flavor::Sqlite))?;
            let n = t.columns(self.layout.all, Flavor::Sqlite).len();
            let marks = vec!["?"; n].join(", ");
            inserts.push((t, format!("INSERT INTO {} VALUES ({marks})", t.name())));
        }
        for (name, sql) in
            views::main_views(Flavor::Sqlite, self.layout.call_paths, self.layout.calls)
        {
            let _ = name;
            conn.execute_batch(&sql)?;
        }
        for (_, _, sql) in views::event_views(Flavor::Sqlite) {
            conn.execute_batch(&sql)?;
        }
        self.inserts = inserts;
        Ok(())
    }

    fn error(&self, e: &rusqlite::Error) -> ExportError {
        ExportError::Sqlite {
            path: self.path.display().to_string(),
            what: sqlite_what(e),
        }
    }

    fn end(&mut self, rows: &RowCounts) -> rusqlite::Result<()> {
        let conn = self.conn();
        conn.execute_batch("COMMIT")?;
        if self.layout.calls {
            conn.execute_batch(
                "CREATE INDEX pcpid_idx ON calls (parent_call_path_id);
                 CREATE INDEX pid_idx ON calls (parent_id);
                 ALTER TABLE comms ADD has_calls boolean;
                 UPDATE comms SET has_calls = 1
                   WHERE comms.id IN (SELECT DISTINCT comm_id FROM calls);",
            )?;
        }
        drop_unused(conn, rows)?;
        Ok(())
    }
}

/// Drops the event tables nobody filled, with their views, as perf does.
fn drop_unused(conn: &Connection, rows: &RowCounts) -> rusqlite::Result<()> {
    let power = [Table::Mwait, Table::Pwre, Table::Exstop, Table::Pwrx];
    if !rows.kept(Table::Mwait) {
        conn.execute_batch("DROP VIEW power_events_view")?;
    }
    for t in [Table::Ptwrite]
        .into_iter()
        .chain(power)
        .chain([Table::Cbr, Table::ContextSwitches])
    {
        if !rows.kept(t) {
            conn.execute_batch(&format!("DROP VIEW {0}_view; DROP TABLE {0};", t.name()))?;
        }
    }
    Ok(())
}

/// rusqlite's message, without its wrapping.
fn sqlite_what(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, Some(m)) => format!("{m} ({f})"),
        e => e.to_string(),
    }
}

impl Sink for SqliteSink {
    fn row(&mut self, table: Table, values: &[Value<'_>]) -> Result<(), ExportError> {
        let Some((_, sql)) = self.inserts.iter().find(|(t, _)| *t == table) else {
            return Ok(());
        };
        let conn = self.conn();
        let r = conn
            .prepare_cached(sql)
            .and_then(|mut st| st.execute(rusqlite::params_from_iter(values.iter())));
        r.map(|_| ()).map_err(|e| self.error(&e))
    }

    fn finish(&mut self, rows: &RowCounts) -> Result<(), ExportError> {
        self.end(rows).map_err(|e| self.error(&e))?;
        if let Some(conn) = self.conn.take() {
            conn.close().map_err(|(_, e)| self.error(&e))?;
        }
        std::fs::rename(&self.tmp, &self.path).map_err(|e| ExportError::Sqlite {
            path: self.path.display().to_string(),
            what: format!("cannot rename {} to it: {e}", self.tmp.display()),
        })?;
        self.done = true;
        Ok(())
    }
}

impl Drop for SqliteSink {
    fn drop(&mut self) {
        if !self.done {
            drop(self.conn.take());
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
