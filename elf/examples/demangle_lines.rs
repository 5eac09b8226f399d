//! Prints perf's name for each symbol read from stdin, one per line (the name
//! itself when it stays as it is): `cargo run -p pt-elf --example demangle_lines < names`.

use std::io::{BufRead, Write};

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let name = pt_elf::demangle::demangle(&line).unwrap_or(line);
        if writeln!(out, "{name}").is_err() {
            return;
        }
    }
}
