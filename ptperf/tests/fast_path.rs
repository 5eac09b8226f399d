//! The synthesizer's fast path ([`Synth::set_fast_path`]: runs of decoder states
//! taken at once) against perf's step-by-step decode: on real programs recorded
//! on the simulator with several trace configurations, every sample and error,
//! field by field and in order, must be the same either way, for each --itrace
//! selection the fast path serves (and for some it does not, which must be left
//! to the slow path untouched).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use pt_testkit::recording as perf_support;

use std::ops::ControlFlow;
use std::path::Path;

use perf_support::*;
use pt_perf::itrace::SynthOpts;
use pt_perf::session::{Session, SessionOptions};
use pt_perf::synth::{Event, Flow, SampleSink, Synth};

/// Every event of `itrace`'s samples, as text; and the states the fast path took.
fn events(file: &Path, itrace: &str, fast: bool) -> (Vec<String>, u64) {
    let mapped = pt_perf_data::MappedFile::open(file).unwrap();
    let perf = mapped.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(file)).unwrap();
    let mut synth = Synth::new(&session, SynthOpts::parse(itrace).unwrap());
    synth.set_fast_path(fast);
    let mut out = Vec::new();
    let _ = synth.run(&mut |e: Event<'_>| {
        // The code stamp is the session's own numbering: left out.
        let mut text = format!("{e:?}");
        if let Some(at) = text.find(", code: ") {
            let end = text[at..].find(" }").map_or(text.len(), |e| at + e);
            text.replace_range(at..end, "");
        }
        out.push(text);
        ControlFlow::Continue(())
    });
    (out, synth.fast_states())
}

/// A sink that takes instruction samples as counts by place (as report does),
/// each sample kept as what such a sink reads of it: event, IP, period,
/// thread, process, CPU, time and instruction bytes.
struct Counting(Vec<String>);

impl SampleSink for Counting {
    fn event(&mut self, e: Event<'_>) -> Flow {
        self.0.push(match e {
            Event::Sample(s, _) => format!(
                "{:?} ip {:x} period {} tid {} pid {} cpu {} time {:?} insn {:?}",
                s.kind,
                s.ip,
                s.period,
                s.tid,
                s.pid,
                s.cpu,
                s.time,
                &s.insn[..usize::from(s.insn_len)]
            ),
            e => format!("{e:?}"),
        });
        ControlFlow::Continue(())
    }

    fn takes_counts(&self) -> bool {
        true
    }
}

/// `itrace`'s samples as [`Counting`] sees them, taken as counts (`fast`) or
/// state by state.
fn counted(file: &Path, itrace: &str, fast: bool) -> Vec<String> {
    let mapped = pt_perf_data::MappedFile::open(file).unwrap();
    let perf = mapped.parse().unwrap();
    let session = Session::new(&perf, SessionOptions::for_file(file)).unwrap();
    let mut synth = Synth::new(&session, SynthOpts::parse(itrace).unwrap());
    synth.set_fast_path(fast);
    let mut sink = Counting(Vec::new());
    let _ = synth.run_into(&mut sink);
    sink.0
}

/// Fast and slow agree on every selection; the fast path served the ones it
/// is for. Taken as counts, the samples are the same too, in the same order.
fn agree(what: &str, file: &Path, timed: bool) {
    for (itrace, served) in [
        ("i1i", true),
        ("b", true),
        ("i1ib", true),
        ("bc", true),
        ("br", true),
        ("i1ie", true),
        ("i1ipwe", true),
        ("i1ix", true),
        // Neither instructions nor branches: the runs make no samples.
        ("ep", true),
        ("bp", true),
        ("p", true),
        ("i2i", false),
        // Every instruction when timed; untimed, perf counts ticks of 1 ns.
        ("i0ns", timed),
        ("i1ig", false),
        ("bl", false),
        ("i1is5", false),
    ] {
        let (slow, none) = events(file, itrace, false);
        assert_eq!(none, 0, "{what} {itrace}: fast path used while off");
        let (fast, taken) = events(file, itrace, true);
        assert_eq!(taken != 0, served, "{what} {itrace}: {taken} fast states");
        if let Some(i) = (0..slow.len().max(fast.len())).find(|&i| slow.get(i) != fast.get(i)) {
            panic!(
                "{what} --itrace={itrace}: event {i} of {} differs\n slow: {:?}\n fast: {:?}",
                slow.len(),
                slow.get(i),
                fast.get(i)
            );
        }
        assert!(!slow.is_empty(), "{what} {itrace}: no samples");
        if served {
            let (slow, fast) = (counted(file, itrace, false), counted(file, itrace, true));
            if let Some(i) = (0..slow.len().max(fast.len())).find(|&i| slow.get(i) != fast.get(i)) {
                panic!(
                    "{what} --itrace={itrace} as counts: event {i} of {} differs\n slow: {:?}\n fast: {:?}",
                    slow.len(),
                    slow.get(i),
                    fast.get(i)
                );
            }
        }
    }
}

fn demo() -> std::path::PathBuf {
    program("script_demo", &["-O1", "-g", "-static"])
}

fn recorded(name: &str, config: pt_hal::config::TraceConfig, timed: bool) -> std::path::PathBuf {
    let dir = scratch(name);
    let (file, _) = record(
        &dir,
        &demo(),
        &[],
        Layout {
            config,
            timed,
            ..Layout::default()
        },
    );
    file
}

#[test]
fn default_config() {
    let file = recorded(
        "fp_default",
        pt_hal::config::TraceConfig::perf_default(),
        true,
    );
    agree("default", &file, true);
}

#[test]
fn no_return_compression() {
    let config = pt_hal::config::TraceConfig {
        dis_retc: true,
        ..pt_hal::config::TraceConfig::perf_default()
    };
    agree("noretcomp", &recorded("fp_noretcomp", config, true), true);
}

#[test]
fn cycle_accurate() {
    let config = pt_hal::config::TraceConfig {
        mtc: Some(0),
        cyc: Some(0),
        ..pt_hal::config::TraceConfig::perf_default()
    };
    agree("cyc", &recorded("fp_cyc", config, true), true);
}

#[test]
fn frequent_psbs_untimed() {
    let config = pt_hal::config::TraceConfig {
        psb_freq: 0,
        tsc: false,
        mtc: None,
        ..pt_hal::config::TraceConfig::perf_default()
    };
    agree("psb untimed", &recorded("fp_psb", config, false), false);
}

#[test]
fn per_cpu_system_tool() {
    let dir = scratch("fp_ls");
    let (file, _) = record(
        &dir,
        Path::new("/bin/ls"),
        &["-l", "/"],
        Layout {
            per_cpu: true,
            ..Layout::default()
        },
    );
    agree("ls per cpu", &file, true);
}
