//! The PostgreSQL database of an export (perf's export-to-postgresql.py).
//!
//! As perf's script does, the export creates a new database, writes each table's
//! rows in PostgreSQL's binary COPY format into a temporary file while the trace
//! is decoded, and at the end loads them with `COPY … FROM STDIN (FORMAT
//! binary)`, adds perf's keys and indexes and creates its views. The tables, the
//! load and the keys are one transaction; a database whose load failed is
//! dropped again, so an export leaves a complete database or none.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};

use postgres::{Client, Config, NoTls};

use super::tables::{Flavor, Table, Value, FOREIGN_KEYS};
use super::{views, ExportError, Layout, RowCounts, Sink};

/// The start of a binary COPY stream: signature, flags, header extension length.
const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The end of a binary COPY stream: a field count of -1.
const COPY_TRAILER: &[u8] = &[0xff, 0xff];

/// `conninfo` as a client configuration and the database it names. A bare
/// name (perf's argument) is the database on the default server; otherwise a
/// libpq connection string (`host=… dbname=…`) or URI (`postgresql://…/db`).
pub fn parse_conninfo(conninfo: &str) -> Result<(Config, String), ExportError> {
    let bare = !conninfo.contains('=') && !conninfo.contains("://");
    let text = if bare {
        format!("dbname={conninfo}")
    } else {
        conninfo.to_string()
    };
    let mut config: Config = text
        .parse()
        .map_err(|e| ExportError::Postgres(format!("bad connection string '{conninfo}': {e}")))?;
    let Some(db) = config.get_dbname().map(str::to_string) else {
        return Err(ExportError::Postgres(format!(
            "'{conninfo}' names no database (dbname=…) to create"
        )));
    };
    if config.get_user().is_none() {
        // libpq's default: the login name.
        if let Ok(user) = std::env::var("PGUSER").or_else(|_| std::env::var("USER")) {
            config.user(&user);
        }
    }
    if config.get_hosts().is_empty() {
        match std::env::var("PGHOST") {
            Ok(h) => {
                config.host(&h);
            }
            Err(_) => {
                config.host_path("/var/run/postgresql");
                config.host("localhost");
            }
        }
    }
    if config.get_ports().is_empty() {
        if let Some(p) = std::env::var("PGPORT").ok().and_then(|p| p.parse().ok()) {
            config.port(p);
        }
    }
    Ok((config, db))
}

/// `name` as an SQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn pg_what(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            // The client's own errors say "error connecting to server: …"; keep
            // the cause, which names what failed.
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(c) = src {
                let t = c.to_string();
                if !s.contains(&t) {
                    s = format!("{s}: {t}");
                }
                src = c.source();
            }
            s
        }
    }
}

/// Where `config` connects to, for messages: `host:port` (a socket directory
/// for a host).
fn server(config: &Config) -> String {
    use postgres::config::Host;
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(h) => format!("{h}:{port}"),
            Host::Unix(p) => format!("{}/.s.PGSQL.{port}", p.display()),
        })
        .collect();
    hosts.join(", ")
}

/// A table's rows, in binary COPY format, in a temporary file.
struct CopyFile {
    table: Table,
    out: BufWriter<File>,
}

/// A PostgreSQL database being loaded.
pub struct PostgresSink {
    config: Config,
    db: String,
    client: Option<Client>,
    layout: Layout,
    files: Vec<CopyFile>,
    /// The database was created by us and not yet completed: dropped on failure.
    created: bool,
    done: bool,
}

impl PostgresSink {
    /// Creates the database `conninfo` names (an error if it exists, as in
    /// perf) and the temporary files of its tables.
    pub fn create(conninfo: &str, layout: &Layout) -> Result<Self, ExportError> {
        let (config, db) = parse_conninfo(conninfo)?;
        let mut admin_cfg = config.clone();
        admin_cfg.dbname("postgres");
        let mut admin = admin_cfg.connect(NoTls).map_err(|e| {
            ExportError::Postgres(format!(
                "cannot connect to {}: {}",
                server(&admin_cfg),
                pg_what(&e)
            ))
        })?;
        admin
            .batch_execute(&format!("CREATE DATABASE {}", ident(&db)))
            .map_err(|e| {
                ExportError::Postgres(format!("cannot create database {db}: {}", pg_what(&e)))
            })?;
        drop(admin);
        let mut sink = PostgresSink {
            config,
            db,
            client: None,
            layout: *layout,
            files: Vec::new(),
            created: true,
            done: false,
        };
        let client = sink.config.connect(NoTls).map_err(|e| {
            ExportError::Postgres(format!("cannot connect to {}: {}", sink.db, pg_what(&e)))
        })?;
        sink.client = Some(client);
        for t in layout.tables() {
            let file = tempfile::tempfile().map_err(|e| {
                ExportError::Io(format!("temporary file for table {}: {e}", t.name()))
            })?;
            let mut out = BufWriter::with_capacity(1 << 16, file);
            out.write_all(COPY_HEADER).map_err(|e| {
                ExportError::Io(format!("temporary file for table {}: {e}", t.name()))
            })?;
            sink.files.push(CopyFile { table: t, out });
        }
        Ok(sink)
    }

    /// The database's name.
    pub fn database(&self) -> &str {
        &self.db
    }

    fn load(&mut self, rows: &RowCounts) -> Result<(), ExportError> {
        let pg = |what: &str, e: postgres::Error| {
            ExportError::Postgres(format!("{what}: {}", pg_what(&e)))
        };
        let layout = self.layout;
        let mut files = std::mem::take(&mut self.files);
        let client = self.client.as_mut().expect("connected until the end");
        let mut tx = client.transaction().map_err(|e| pg("BEGIN", e))?;
        tx.batch_execute("SET client_min_messages TO WARNING")
            .map_err(|e| pg("SET", e))?;
        for t in layout.tables() {
            tx.batch_execute(&t.create_sql(layout.all, Flavor::Postgres))
                .map_err(|e| pg(&format!("creating table {}", t.name()), e))?;
        }
        for f in &mut files {
            let io = |e: std::io::Error| {
                ExportError::Io(format!("temporary file of table {}: {e}", f.table.name()))
            };
            f.out.write_all(COPY_TRAILER).map_err(io)?;
            f.out.flush().map_err(io)?;
            let file = f.out.get_mut();
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            let name = f.table.name();
            let mut w = tx
                .copy_in(&format!("COPY {name} FROM STDIN (FORMAT binary)"))
                .map_err(|e| pg(&format!("COPY {name}"), e))?;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = file.read(&mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                w.write_all(&buf[..n])
                    .map_err(|e| ExportError::Postgres(format!("COPY {name}: {e}")))?;
            }
            w.finish().map_err(|e| pg(&format!("COPY {name}"), e))?;
        }
        drop(files);
        let mut sql = String::new();
        for t in layout.tables() {
            sql.push_str(&t.primary_key());
            sql.push_str(";\n");
        }
        let tables = layout.tables();
        for t in &tables {
            let fks: Vec<String> = FOREIGN_KEYS
                .iter()
                .filter(|(from, _, _, to)| from == t && tables.contains(to))
                .map(|(_, name, col, to)| {
                    format!(
                        "ADD CONSTRAINT {name} FOREIGN KEY ({col}) REFERENCES {} (id)",
                        to.name()
                    )
                })
                .collect();
            if !fks.is_empty() {
                sql.push_str(&format!("ALTER TABLE {} {};\n", t.name(), fks.join(", ")));
            }
        }
        if layout.calls {
            sql.push_str(
                "CREATE INDEX pcpid_idx ON calls (parent_call_path_id);
                 CREATE INDEX pid_idx ON calls (parent_id);
                 ALTER TABLE comms ADD has_calls boolean;
                 UPDATE comms SET has_calls = TRUE WHERE comms.id IN (SELECT DISTINCT comm_id FROM calls);\n",
            );
        }
        tx.batch_execute(&sql).map_err(|e| pg("adding keys", e))?;
        for (name, sql) in views::main_views(Flavor::Postgres, layout.call_paths, layout.calls) {
            tx.batch_execute(&sql)
                .map_err(|e| pg(&format!("creating view {name}"), e))?;
        }
        let kept = |name: &str| {
            layout
                .tables()
                .into_iter()
                .find(|t| t.name() == name)
                .is_some_and(|t| rows.kept(t))
        };
        for (name, needs, sql) in views::event_views(Flavor::Postgres) {
            if needs.iter().all(|t| kept(t)) {
                tx.batch_execute(&sql)
                    .map_err(|e| pg(&format!("creating view {name}"), e))?;
            }
        }
        for t in layout.tables() {
            if !rows.kept(t) {
                tx.batch_execute(&format!("DROP TABLE {}", t.name()))
                    .map_err(|e| pg(&format!("dropping table {}", t.name()), e))?;
            }
        }
        tx.commit().map_err(|e| pg("COMMIT", e))?;
        Ok(())
    }

    /// Drops the database this export created (its load failed).
    fn drop_database(&mut self) {
        drop(self.client.take());
        let mut cfg = self.config.clone();
        cfg.dbname("postgres");
        if let Ok(mut admin) = cfg.connect(NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {}", ident(&self.db)));
        }
    }
}

impl Sink for PostgresSink {
    fn row(&mut self, table: Table, values: &[Value<'_>]) -> Result<(), ExportError> {
        let Some(f) = self.files.iter_mut().find(|f| f.table == table) else {
            return Ok(());
        };
        encode_row(&mut f.out, values)
            .map_err(|e| ExportError::Io(format!("temporary file of table {}: {e}", table.name())))
    }

    fn finish(&mut self, rows: &RowCounts) -> Result<(), ExportError> {
        self.load(rows)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for PostgresSink {
    fn drop(&mut self) {
        if self.created && !self.done {
            self.drop_database();
        }
    }
}

/// One row in binary COPY format: the field count, then each field's length
/// and big-endian bytes.
fn encode_row(w: &mut impl Write, values: &[Value<'_>]) -> std::io::Result<()> {
    w.write_all(&(values.len() as i16).to_be_bytes())?;
    for v in values {
        match *v {
            Value::I64(x) => {
                w.write_all(&8i32.to_be_bytes())?;
                w.write_all(&x.to_be_bytes())?;
            }
            Value::I32(x) => {
                w.write_all(&4i32.to_be_bytes())?;
                w.write_all(&x.to_be_bytes())?;
            }
            Value::Bool(x) => {
                w.write_all(&1i32.to_be_bytes())?;
                w.write_all(&[u8::from(x)])?;
            }
            Value::Str(s) => {
                w.write_all(&(s.len() as i32).to_be_bytes())?;
                w.write_all(s.as_bytes())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_in_binary_copy_format() {
        let mut out = Vec::new();
        encode_row(
            &mut out,
            &[
                Value::I64(-2),
                Value::I32(7),
                Value::Bool(true),
                Value::Str("ab"),
            ],
        )
        .unwrap();
        assert_eq!(
            out,
            [
                &[0, 4][..],
                &[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe],
                &[0, 0, 0, 4, 0, 0, 0, 7],
                &[0, 0, 0, 1, 1],
                &[0, 0, 0, 2, b'a', b'b'],
            ]
            .concat()
        );
        assert_eq!(COPY_HEADER.len(), 19);
    }

    #[test]
    fn conninfo_forms() {
        let (c, db) = parse_conninfo("pt_example").unwrap();
        assert_eq!(db, "pt_example");
        assert!(!c.get_hosts().is_empty());
        let (c, db) = parse_conninfo("host=/tmp/x port=5444 dbname=pt user=u").unwrap();
        assert_eq!((db.as_str(), c.get_ports()), ("pt", &[5444][..]));
        let (_, db) = parse_conninfo("postgresql://u@localhost:5444/pt2").unwrap();
        assert_eq!(db, "pt2");
        assert!(parse_conninfo("host=/tmp").is_err());
    }
}
