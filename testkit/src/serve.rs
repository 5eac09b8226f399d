//! A file server on the loopback interface for the pages a test opens in a browser
//! (a web app's folder and the test's own files): GET only, one request per
//! connection, stopped when dropped and after a time limit.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running server; stops when dropped.
pub struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Serves `mounts` (URL path prefix → folder; the longest prefix wins) on
    /// 127.0.0.1 at a free port, for at most `limit`.
    pub fn start(mounts: Vec<(String, PathBuf)>, limit: Duration) -> std::io::Result<Server> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            while !flag.load(Ordering::Relaxed) && start.elapsed() < limit {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let _ = answer(conn, &mounts);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Server {
            port,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript",
        "css" => "text/css",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// The file `url_path` names under the mounts (no `..`).
fn resolve(url_path: &str, mounts: &[(String, PathBuf)]) -> Option<PathBuf> {
    let path = url_path.split(['?', '#']).next().unwrap_or("");
    let (prefix, dir) = mounts
        .iter()
        .filter(|(p, _)| path.starts_with(p.as_str()))
        .max_by_key(|(p, _)| p.len())?;
    let rest = path[prefix.len()..].trim_start_matches('/');
    let rel = Path::new(rest);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(dir.join(rel))
}

fn answer(mut conn: TcpStream, mounts: &[(String, PathBuf)]) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 1 << 16 {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&req);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or("/"));
    let file = (method == "GET")
        .then(|| resolve(path, mounts))
        .flatten()
        .filter(|f| f.is_file());
    match file.and_then(|f| std::fs::read(&f).ok().map(|b| (f, b))) {
        Some((f, body)) => {
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                content_type(&f),
                body.len()
            )?;
            conn.write_all(&body)
        }
        None => conn
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_files_and_nothing_outside() {
        let dir = std::env::temp_dir().join(format!("pt-testkit-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.json"), b"{\"x\":1}").unwrap();
        let s = Server::start(vec![("/d".into(), dir.clone())], Duration::from_secs(30)).unwrap();
        let get = |path: &str| {
            let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
            write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut v = String::new();
            c.read_to_string(&mut v).unwrap();
            v
        };
        let ok = get("/d/a.json?t=1");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("application/json") && ok.ends_with("{\"x\":1}"),
            "{ok}"
        );
        assert!(get("/d/../etc/passwd").starts_with("HTTP/1.1 404"));
        assert!(get("/d/none.json").starts_with("HTTP/1.1 404"));
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
