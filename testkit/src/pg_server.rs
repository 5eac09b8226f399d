//! A throwaway PostgreSQL server for the export tests and benchmark.

use std::path::PathBuf;
use std::process::{Command, Output};

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A throwaway PostgreSQL server (Debian's postgresql 15) on a Unix socket in a
/// temporary directory and a free port; stopped and removed when dropped, also
/// when a test fails. PostgreSQL refuses to run as root: as root, the server
/// runs as the `postgres` user, which owns the directory.
pub struct PgServer {
    dir: tempfile::TempDir,
    /// Its TCP port (on 127.0.0.1; the Unix socket has the same number).
    pub port: u16,
    as_postgres: bool,
    bin: PathBuf,
}

impl PgServer {
    /// Initializes a database cluster and starts its server (panics when it cannot).
    pub fn start() -> PgServer {
        // Not there: fail, never skip (.ci/run installs postgresql).
        let bin = crate::postgres_bin();
        let dir = tempfile::Builder::new()
            .prefix("pt-export-pg")
            .tempdir_in("/tmp")
            .unwrap();
        let as_postgres = unsafe { libc::geteuid() } == 0;
        if as_postgres {
            let st = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(st.success());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = PgServer {
            dir,
            port,
            as_postgres,
            bin,
        };
        let data = server.dir.path().join("data");
        let out = run(server
            .cmd("initdb")
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "-D"])
            .arg(&data));
        assert!(out.status.success(), "initdb: {}", stderr(&out));
        let opts = format!(
            "-k {} -p {} -c listen_addresses='' -c fsync=off",
            server.dir.path().display(),
            port
        );
        let out = run(server
            .cmd("pg_ctl")
            .args(["-w", "-D"])
            .arg(&data)
            .args(["-l"])
            .arg(server.dir.path().join("log"))
            .args(["-o", &opts, "start"]));
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}",
            stderr(&out),
            std::fs::read_to_string(server.dir.path().join("log")).unwrap_or_default()
        );
        server
    }

    fn cmd(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// A connection string for database `db`.
    pub fn conninfo(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.dir.path().display(),
            self.port
        )
    }

    /// A client connected to database `db` as `postgres`.
    pub fn client(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.conninfo(db), postgres::NoTls).unwrap()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = self
            .cmd("pg_ctl")
            .args(["-w", "-m", "immediate", "-D"])
            .arg(&data)
            .arg("stop")
            .output();
    }
}
