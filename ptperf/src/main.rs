//! `ptperf COMMAND [ARGS]`: perf's Intel PT commands. Each command lives in
//! its own module of the library; this only dispatches.

use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "\
 usage: ptperf COMMAND [ARGS]

 The commands are:
   export          Export an Intel PT perf.data into SQLite or PostgreSQL with perf's schema

 See 'ptperf COMMAND -h' for the options of a command.
";

fn main() -> ExitCode {
    pt_cli::init();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let Some(cmd) = args.first().and_then(|a| a.to_str()) else {
        eprint!("{USAGE}");
        return ExitCode::from(1);
    };
    match cmd {
        "export" => ptperf::export::cli::main(&args[1..]),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("ptperf: '{cmd}' is not a ptperf command. See 'ptperf --help'.");
            ExitCode::from(1)
        }
    }
}
