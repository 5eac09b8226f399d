//! Kernel tracing end to end: a scripted execution that shows its kernel
//! (two processes, system calls, a CR3 switch, an interrupt) recorded with
//! `record_perf_data` in several configurations; each perf.data and its
//! execution log must verify (pt-decoder's flow equals the recording,
//! restricted to what the configuration traces), PIP must appear exactly
//! when OS = 1, and a source that sees user mode only must be refused with
//! OS = 1. When libipt's ptxed is named by PT_REFERENCE_PTXED, it must print
//! exactly the traced instructions too.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use pt_decoder::{Config, Packet, PacketDecoder};
use pt_hal::config::TraceConfig;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::script::{Directive, Script};
use pt_sim::exec::{collect, Event, ExecMode, ExecutionSource, Mapping, Perms};
use pt_sim::pt::cr3_of_pid;
use pt_sim::record::{record_perf_data, FilterSpec, PerfDataOptions, SimRecording};
use ptperf::verify::{verify_config, FlowSummary, Recording, TracedFilter};

const K: u64 = 0xffff_ffff_8100_0000;
const A: u64 = 0x40_1000;
const B: u64 = 0x50_1000;

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kernel-trace-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn mapping(start: u64, path: &str) -> Mapping {
    Mapping {
        start,
        end: start + 0x1000,
        offset: 0,
        perms: Perms {
            read: true,
            exec: true,
            ..Perms::default()
        },
        path: path.into(),
    }
}

/// A loops through a call and a system call three times; the kernel's
/// system call path calls a helper, switches to B on the second call
/// (MOV CR3) and returns with SYSRETQ; a timer interrupt in B's loop
/// switches back to A (IRETQ).
fn os(kernel_shown: bool) -> Script {
    let a = [
        0xb9, 0x03, 0, 0, 0, // A+0x00: mov ecx, 3
        0xe8, 0x1b, 0, 0, 0, // A+0x05: call A+0x25
        0x0f, 0x05, // A+0x0a: syscall
        0xff, 0xc9, // A+0x0c: dec ecx
        0x75, 0xf5, // A+0x0e: jnz A+0x05
        0x90, // A+0x10: nop
        0xcc, // A+0x11: int3 (the end)
    ];
    let kernel = [
        0xe8, 0x3b, 0, 0, 0, // K+0x00: call K+0x40
        0x85, 0xc0, // K+0x05: test eax, eax
        0x74, 0x07, // K+0x07: jz K+0x10
        0x0f, 0x22, 0xd8, // K+0x09: mov cr3, rax
        0x85, 0xc0, // K+0x0c: test eax, eax
        0x75, 0x00, // K+0x0e: jnz K+0x10
        0x48, 0x0f, 0x07, // K+0x10: sysretq
    ];
    let mut s = Script::new(A, ExecMode::Bit64)
        .code(A, &a)
        .code(A + 0x25, &[0xc3])
        .code(B, &[0x90, 0x90, 0xeb, 0xfc]) // nop; nop; jmp B
        .code(K, &kernel)
        .code(K + 0x40, &[0x48, 0x83, 0xc0, 0x01, 0xc3]) // add rax, 1; ret
        .code(
            K + 0x80,
            &[0x0f, 0x22, 0xd8, 0x85, 0xc0, 0x75, 0x00, 0x48, 0xcf],
        ); // mov cr3, rax; test eax, eax; jnz +0; iretq
    let mut maps = vec![mapping(A, "[a]"), mapping(B, "[b]")];
    if kernel_shown {
        s = s.kernel_from(K);
        maps.push(mapping(K, "[kernel]"));
    }
    let mut d = vec![
        Directive::Event(Event::Exec {
            pid: 1,
            path: "/a".into(),
        }),
        Directive::Event(Event::Mappings(maps)),
    ];
    if !kernel_shown {
        // The same program with the kernel unseen: system calls return at once.
        for i in 0..3 {
            d.push(Directive::Syscall {
                nr: 0,
                ret: 0,
                resume: None,
            });
            d.push(if i < 2 {
                Directive::Taken
            } else {
                Directive::NotTaken
            });
        }
        return s.directives(d);
    }
    // First call: no switch.
    d.extend([
        Directive::Target(K),
        Directive::Taken,
        Directive::Target(A + 0xc),
        Directive::Taken,
    ]);
    // Second call: to B, interrupted there, back to A.
    d.extend([
        Directive::Target(K),
        Directive::NotTaken,
        Directive::Cr3(cr3_of_pid(2)),
        Directive::NotTaken,
        Directive::Target(B),
        Directive::IntoKernel {
            at: B + 1,
            vector: 32,
            handler: K + 0x80,
        },
        Directive::Cr3(cr3_of_pid(1)),
        Directive::NotTaken,
        Directive::Target(A + 0xc),
        Directive::Taken,
    ]);
    // Third call: no switch; the loop ends.
    d.extend([
        Directive::Target(K),
        Directive::Taken,
        Directive::Target(A + 0xc),
        Directive::NotTaken,
    ]);
    s.directives(d)
}

fn record(name: &str, source: &mut dyn ExecutionSource, cfg: TraceConfig, filter: &str) -> PathBuf {
    let dir = tmp(name);
    let data = dir.join("t.data");
    let mut rec = SimRecording::new(cfg);
    rec.filters = FilterSpec::parse_list(filter).unwrap();
    rec.log = Some(log_of(&data));
    let s = record_perf_data(source, &rec, &PerfDataOptions::new(&data), |_| {}).expect("record");
    assert!(s.source_error.is_none(), "{:?}", s.source_error);
    data
}

fn log_of(data: &Path) -> PathBuf {
    data.with_extension("log")
}

/// Verifies `data` (recorded with `cfg`) against its log: one thread, the
/// summary of its flow.
fn verify(data: &Path, cfg: TraceConfig) -> FlowSummary {
    let checks = verify_config(data, &log_of(data), cfg).unwrap();
    assert_eq!(checks.len(), 1, "{checks:?}");
    checks[0].flow.clone()
}

/// The one thread's trace.
fn trace_of(data: &Path) -> Vec<u8> {
    let rec = Recording::read(data).unwrap();
    assert_eq!(rec.pieces.len(), 1);
    rec.pieces[0].data.clone()
}

fn packets(data: &Path) -> Vec<Packet> {
    let bytes = trace_of(data);
    let mut d = PacketDecoder::new(&bytes, &Config::default());
    d.sync_forward().unwrap();
    d.map(|r| r.unwrap().1).collect()
}

/// libipt's ptxed prints `want`.
fn reference_ptxed(ptxed: &Path, data: &Path, want: &[u64]) {
    let rec = Recording::read(data).unwrap();
    let trace = data.with_extension("pt");
    let out = Command::new(ptxed)
        .args(common::ptxed_args(&rec, &rec.pieces[0], &trace))
        .arg("--no-inst")
        .output()
        .expect("run ptxed");
    let text = String::from_utf8_lossy(&out.stdout);
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("error")).collect();
    assert!(errors.is_empty(), "ptxed: {errors:?}");
    let got: Vec<u64> = text
        .lines()
        .filter(|l| l.len() == 16 && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|l| u64::from_str_radix(l, 16).unwrap())
        .collect();
    assert_eq!(got, want, "ptxed vs recorded");
}

#[test]
fn kernel_configurations_verify() {
    kernel_configurations(None);
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn kernel_configurations_verify_with_libipt_ptxed() {
    let ptxed = pt_testkit::env_path("PT_REFERENCE_PTXED", "libipt's ptxed, built with XED");
    kernel_configurations(Some(&ptxed));
}

/// Each configuration verifies; libipt's ptxed agrees when `reference` names it.
fn kernel_configurations(reference: Option<&Path>) {
    let user = TraceConfig {
        os: false,
        ..TraceConfig::default()
    };
    let kernel = TraceConfig {
        user: false,
        ..TraceConfig::default()
    };
    let both = TraceConfig::default();
    let process_a = TraceConfig {
        cr3_filter: Some(cr3_of_pid(1)),
        ..both
    };
    let cases = [
        ("user", user, "", false),
        ("kernel", kernel, "", true),
        ("both", both, "", true),
        ("cr3-a", process_a, "", true),
        ("kernel-range", both, "filter 0xffffffff81000000/0x41", true),
    ];
    for (name, cfg, filter, pip) in cases {
        let trace = record(name, &mut os(true), cfg, filter);
        let log = log_of(&trace);
        let s = verify(&trace, cfg);
        assert!(s.identical(), "{name}: {s:?}");
        assert!(s.decoded > 0, "{name}");
        let p = packets(&trace);
        let pips = p.iter().filter(|q| matches!(q, Packet::Pip { .. })).count();
        assert_eq!(pips > 0, pip, "{name}: {pips} PIPs");
        // The ground truth of verify, recomputed here from the log.
        let mut r = LogReader::open(&log).unwrap();
        assert!(r.shows_kernel());
        let items = collect(&mut r).unwrap();
        let mut full = cfg;
        for (slot, f) in full
            .ranges
            .iter_mut()
            .zip(FilterSpec::parse_list(filter).unwrap())
        {
            slot.cfg = f.cfg;
            slot.start = f.start;
            slot.end = f.start + f.size - 1;
        }
        let mut f = TracedFilter::new(&full);
        let want: Vec<u64> = items
            .iter()
            .filter_map(|i| f.shown(i, r.memory()))
            .collect();
        assert_eq!(want.len() as u64, s.expected, "{name}");
        if let Some(ptxed) = reference {
            reference_ptxed(ptxed, &trace, &want);
        }
    }
}

#[test]
fn record_replays_a_log_that_shows_the_kernel() {
    let trace = record("replay-src", &mut os(true), TraceConfig::default(), "");
    let log = log_of(&trace);
    let dir = tmp("replay");
    for term in ["k", "uk", "u"] {
        let out = dir.join(format!("{term}.data"));
        let o = Command::new(env!("CARGO_BIN_EXE_ptperf"))
            .args(["record", "--source", "log", "-e"])
            .arg(format!("intel_pt//{term}"))
            .arg("--decode")
            .arg("-o")
            .arg(&out)
            .arg(&log)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "{term}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            report.contains("identical to the recorded execution"),
            "{term}: {report}"
        );
        let pips = packets(&out)
            .iter()
            .filter(|q| matches!(q, Packet::Pip { .. }))
            .count();
        assert_eq!(pips > 0, term != "u", "{term}");
    }
}

#[test]
fn user_mode_sources_are_refused_with_os() {
    // The kernel unseen: OS = 0 records, OS = 1 is refused with a clear message.
    let user = TraceConfig {
        os: false,
        ..TraceConfig::default()
    };
    let trace = record("unseen", &mut os(false), user, "");
    let s = verify(&trace, user);
    assert!(s.identical() && s.decoded > 0, "{s:?}");
    let rec = SimRecording::new(TraceConfig::default());
    let opts = PerfDataOptions::new(tmp("unseen-os").join("t.data"));
    let e = record_perf_data(&mut os(false), &rec, &opts, |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kernel tracing (OS=1) cannot be simulated"),
        "{e}"
    );
}
