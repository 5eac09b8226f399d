//! ptdump: print the packets of an Intel PT trace, compatible with libipt's ptdump.

use std::io::Write;

mod cli;
mod perf;

fn main() {
    let mut argv = std::env::args();
    let prog = argv.next().unwrap_or_else(|| "ptdump".to_string());
    let args: Vec<String> = argv.collect();
    let stderr = std::io::stderr();
    let code = cli::run(&prog, &args, pt_cli::stdout(), stderr.lock());
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
