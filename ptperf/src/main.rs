//! `ptperf COMMAND [ARGS]`: perf's Intel PT commands. Each command lives in
//! its own module of the library; this only dispatches.

use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "\
 usage: ptperf COMMAND [ARGS]

 The commands are:
   record          Record a program's Intel PT trace into perf.data (perf where PT works, else the simulated PT CPU)
   script          Read perf.data and display the trace's samples as perf script does
   report          Read perf.data and display its profile as perf report --stdio does
   inject          Write a perf.data with the trace's samples, as perf inject --itrace does
   export          Export an Intel PT perf.data into SQLite or PostgreSQL with perf's schema
   profile         Write the LLVM sample profile (AutoFDO) of an Intel PT perf.data (--llvm)
   timeline        Write every thread's calls over time for trace viewers (Chrome JSON, Perfetto)
   coverage        Show the code a recording covers per DSO; write lcov, drcov or an AFL edge bitmap

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
        "record" => ptperf::record::main(&args[1..]),
        "script" => ptperf::script::main(&args[1..]),
        "report" => ptperf::report::main(&args[1..]),
        "inject" => ptperf::inject::main(&args[1..]),
        "export" => ptperf::export::cli::main(&args[1..]),
        "profile" => ptperf::profile_llvm::cli::main(&args[1..]),
        "timeline" => ptperf::timeline::main(&args[1..]),
        "coverage" => ptperf::coverage::main(&args[1..]),
        "--version" | "-v" | "version" => {
            ptperf::print_version();
            ExitCode::SUCCESS
        }
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
