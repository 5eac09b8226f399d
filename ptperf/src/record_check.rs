//! `ptperf record --decode`: every thread's trace in the new perf.data
//! decoded and compared with its recorded execution, and the profile of all
//! of them. Reports go to stderr.

use std::path::Path;

use pt_sim::record::RecordSummary;

use crate::verify::{verify_profile, FlowSummary, TraceCheck};

/// Checks `perf_data` against the execution log `log`; `false` when a
/// decoded flow differs from the recording.
pub fn decode(
    perf_data: &Path,
    log: &Path,
    s: &RecordSummary,
    top: usize,
    tty: bool,
) -> Result<bool, crate::Error> {
    // A counter on the terminal (indicatif, through pt-cli), none in a pipe.
    let bar = if tty {
        pt_cli::progress::counter("ptperf record: decoding: {msg}, {elapsed}")
    } else {
        None
    };
    let checked = verify_profile(perf_data, log, &mut |n| {
        if let Some(b) = &bar {
            b.set_message(format!("{:.2} M instructions", n as f64 / 1e6));
        }
    });
    pt_cli::progress::finish(bar);
    let (checks, profile) = checked?;
    if checks.is_empty() {
        eprintln!("ptperf record: nothing was traced");
        return Ok(s.traced == 0 && s.source_error.is_none());
    }
    let several = checks.len() > 1;
    let mut total = FlowSummary::default();
    let mut all_identical = true;
    for c in &checks {
        let v = &c.flow;
        if several {
            eprintln!(
                "thread {} ({}, program {}): {} instructions decoded, {} recorded{}",
                c.thread,
                c.comm,
                c.execs,
                v.decoded,
                v.expected,
                if v.identical() {
                    ", identical"
                } else {
                    ", DIFFERENT"
                }
            );
        }
        if !v.identical() {
            all_identical = false;
            report_difference(c);
        }
        total.decoded += v.decoded;
        total.expected += v.expected;
        total.sections = total.sections.max(v.sections);
        total.enables += v.enables;
        total.disables += v.disables;
        total.async_disables += v.async_disables;
        total.overflows += v.overflows;
        total.errors += v.errors;
    }
    eprintln!(
        "decoded flow: {} instructions ({} recorded in the traced range){} from {} image sections",
        total.decoded,
        total.expected,
        if several {
            format!(" in {} traces of {} threads", checks.len(), s.threads.len())
        } else {
            String::new()
        },
        total.sections
    );
    eprintln!(
        "  tracing enabled {} times, disabled {} times ({} asynchronously: interrupts, faults, thread switches), {} overflows",
        total.enables, total.disables, total.async_disables, total.overflows
    );
    if all_identical {
        eprintln!(
            "  identical to the recorded execution, instruction by instruction{}",
            if several { ", in every thread" } else { "" }
        );
    } else {
        eprintln!("ptperf record: the decoded flow differs from the recorded execution");
    }
    eprint!("{}", profile.report(top));
    Ok(all_identical)
}

fn report_difference(c: &TraceCheck) {
    let (thread, v) = (&c.thread, &c.flow);
    if let Some((i, got, want)) = v.first_difference {
        eprintln!(
            "  thread {thread}: DIFFERS at instruction {i}: decoded {got:#x}, recorded {want:#x}"
        );
    }
    if let Some(e) = &v.first_error {
        eprintln!(
            "  thread {thread}: {} decode errors, the first: {e}",
            v.errors
        );
    }
    if v.decoded != v.expected {
        eprintln!(
            "  thread {thread}: {} instructions decoded, {} recorded",
            v.decoded, v.expected
        );
    }
    if let Some(e) = &v.log_error {
        eprintln!("  thread {thread}: {e}");
    }
}
