//! The instruction listing of recorded programs, as libipt's ptxed prints it.
//!
//! Programs run on the simulated PT CPU (valgrind execution source): a C program built
//! here (`cc -O2`, with the C library), md5sum, gzip, sort and python3 (the first
//! 32 KiB of its trace: the interpreter's start), and a scripted execution that shows
//! its kernel (system call entry and exit, CR3, MSR and SMAP instructions, an
//! interrupt). Their binaries are the machine's, so the test keys what it knows by
//! instruction bytes, not addresses: `data/listing.golden` holds, for every encoding
//! these programs executed here, the Intel and AT&T text libipt's ptxed printed for it.
//! Every listed instruction whose bytes are there must read the same; elsewhere the C
//! library differs and fewer are known. Branches whose text names their target are
//! left out (their text depends on the address): they must read as the listing's
//! formatter gives them, which the table test checks against XED.
//!
//! With libipt's ptxed (`PT_REFERENCE_PTXED`), the ignored test compares the whole
//! listings line for line (Intel, AT&T, raw bytes, both decoders), and with
//! `PT_BLESS_LISTING=1` writes the golden file from libipt's output.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use pt_decoder::listing::{Formatter, Syntax};
use pt_encoder::ExecMode;
use pt_hal::config::TraceConfig;
use pt_sim::exec::script::{Directive, Script};
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::exec::{Event, ExecMode as SimMode, ExecutionSource, Mapping, Perms};
use pt_sim::pt::cr3_of_pid;
use pt_sim::record::{record_perf_data, PerfDataOptions, SimRecording};

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("listing-recorded")
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/listing.golden")
}

/// A PSB packet's bytes.
const PSB: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];

/// One recorded program.
struct Recording {
    name: &'static str,
    /// Its one thread's trace, taken from the perf.data.
    trace: PathBuf,
    /// The decoder's options and the image (`--raw` files) from the perf.data.
    image: Vec<String>,
    /// The part of the trace to list (`--pt` range), if not all.
    range: Option<String>,
}

impl Recording {
    /// `NAME`'s recording `data`, listed up to the first PSB at or after
    /// `cut` bytes if given (a cut elsewhere could end inside a packet: the
    /// trace differs from run to run).
    fn new(name: &'static str, data: PathBuf, cut: Option<usize>) -> Self {
        let (trace, image) = trace_and_image(&data);
        let bytes = std::fs::read(&trace).unwrap();
        let range = cut.and_then(|at| {
            let end = at + bytes.get(at..)?.windows(16).position(|w| w == PSB)?;
            Some(format!("0-{end:#x}"))
        });
        Recording {
            name,
            trace,
            image,
            range,
        }
    }

    /// `--pt` and its argument.
    fn pt(&self) -> [String; 2] {
        let file = self.trace.display().to_string();
        let arg = match &self.range {
            Some(r) => format!("{file}:{r}"),
            None => file,
        };
        ["--pt".into(), arg]
    }
}

/// Records `source` into `NAME.data` (a perf.data).
fn record(name: &str, source: &mut dyn ExecutionSource, config: TraceConfig) -> PathBuf {
    let data = tmp().join(format!("{name}.data"));
    let rec = SimRecording::new(config);
    let s = record_perf_data(source, &rec, &PerfDataOptions::new(&data), |_| {})
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(s.source_error.is_none(), "{name}: {:?}", s.source_error);
    assert!(s.traced > 0, "{name}: nothing traced");
    data
}

/// The trace of a one-thread perf.data (written beside it as `NAME.pt`), and
/// ptxed's options for it: the decoder's parameters from AUXTRACE_INFO and
/// a `--raw` file for every executable MMAP2 (the vDSO from the build-id
/// cache beside the file).
fn trace_and_image(data: &Path) -> (PathBuf, Vec<String>) {
    use pt_perf_data::{Feature, MappedFile, Record};
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let info = perf.intel_pt_info().unwrap().unwrap();
    let mut args = vec!["--cpu".to_string(), "none".to_string()];
    let mtc = info.mtc.unwrap_or_default();
    let mtc_freq = (perf.events()[0].attr.config >> 14) & 0xf;
    for (opt, v) in [
        ("--mtc-freq", mtc_freq),
        ("--nom-freq", info.max_non_turbo_ratio.unwrap_or(0)),
        ("--cpuid-0x15.eax", mtc.tsc_ctc_ratio_d),
        ("--cpuid-0x15.ebx", mtc.tsc_ctc_ratio_n),
    ] {
        args.extend([opt.to_string(), v.to_string()]);
    }
    let mut vdso = None;
    if let Some(Ok(Feature::BuildId(v))) = perf.feature(pt_perf_data::feature_id::BUILD_ID) {
        for b in v.iter().filter(|b| &b.filename[..] == b"[vdso]") {
            vdso = pt_elf::BuildIdCache::new(pt_sim::record::debug_dir(data))
                .linked(b.build_id.as_bytes(), pt_elf::EntryKind::Vdso);
        }
    }
    let mut trace = Vec::new();
    let mut maps: Vec<(u64, u64, u64, PathBuf)> = Vec::new();
    for r in perf.records() {
        match r.unwrap().1 {
            Record::Auxtrace(a) => trace.extend_from_slice(a.data),
            Record::Mmap2(m) if m.prot & 4 != 0 => {
                let name = m.filename.to_str_lossy();
                let path = match (&*name, &vdso) {
                    ("[vdso]", Some(v)) => v.clone(),
                    _ => PathBuf::from(&*name),
                };
                maps.retain(|o| o.1 <= m.start || o.0 >= m.start + m.len);
                maps.push((m.start, m.start + m.len, m.pgoff, path));
            }
            _ => {}
        }
    }
    for (start, end, off, path) in maps {
        let size = std::fs::metadata(&path).map(|md| md.len()).unwrap_or(0);
        let to = (off + (end - start)).min(size);
        if to > off {
            args.push("--raw".into());
            args.push(format!("{}:{off:#x}-{to:#x}:{start:#x}", path.display()));
        }
    }
    let pt = data.with_extension("pt");
    std::fs::write(&pt, trace).unwrap();
    (pt, args)
}

fn valgrind(name: &str, program: &str, args: &[&str]) -> PathBuf {
    let mut source = ValgrindSource::record(program, args, ValgrindOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    record(name, &mut source, TraceConfig::perf_default())
}

/// 300 lowercase words, one per line (the same every time).
fn word_list() -> String {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut text = String::new();
    for _ in 0..300 {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        for k in 0..3 + r % 10 {
            text.push(char::from(b'a' + ((r >> (5 * k)) % 26) as u8));
        }
        text.push('\n');
    }
    text
}

const USER: u64 = 0x40_1000;
const KERNEL: u64 = 0xffff_ffff_8100_0000;

/// A process making three system calls into a kernel that shows itself: `swapgs`,
/// GS-relative stack switch, MSR, CR3, SMAP and fence instructions, `sysretq`; a timer
/// interrupt in the second system call's user return path, handled with `iretq`.
fn kernel_script() -> Script {
    let user = [
        0xb9, 0x03, 0, 0, 0, // USER+0x00: mov ecx, 3
        0x0f, 0x05, // USER+0x05: syscall
        0x90, // USER+0x07: nop
        0xff, 0xc9, // USER+0x08: dec ecx
        0x75, 0xf9, // USER+0x0a: jnz USER+0x05
        0xcc, // USER+0x0c: int3 (the end)
    ];
    let entry: &[u8] = &[
        0x0f, 0x01, 0xf8, // swapgs
        0x65, 0x48, 0x89, 0x24, 0x25, 0x10, 0, 0, 0, // mov qword ptr gs:[0x10], rsp
        0x65, 0x48, 0x8b, 0x24, 0x25, 0x18, 0, 0, 0,    // mov rsp, qword ptr gs:[0x18]
        0x51, // push rcx
        0x41, 0x53, // push r11
        0x0f, 0x20, 0xd8, // mov rax, cr3
        0x0f, 0x22, 0xd8, // mov cr3, rax
        0x0f, 0x01, 0xcb, // stac
        0x0f, 0x01, 0xca, // clac
        0x0f, 0xae, 0xe8, // lfence
        0xb9, 0x80, 0, 0, 0xc0, // mov ecx, 0xc0000080
        0x0f, 0x32, // rdmsr
        0x0f, 0x30, // wrmsr
        0x0f, 0x31, // rdtsc
        0x0f, 0x01, 0x38, // invlpg byte ptr [rax]
        0x48, 0x0f, 0xc7, 0x6c, 0x24, 0x40, // xsaves64 ptr [rsp+0x40]
        0xfa, // cli
        0xfb, // sti
        0x41, 0x5b, // pop r11
        0x59, // pop rcx
        0x65, 0x48, 0x8b, 0x24, 0x25, 0x10, 0, 0, 0, // mov rsp, qword ptr gs:[0x10]
        0x0f, 0x01, 0xf8, // swapgs
        0x48, 0x0f, 0x07, // sysretq
    ];
    let handler: &[u8] = &[
        0x0f, 0x01, 0xf8, // swapgs
        0x48, 0x83, 0xec, 0x08, // sub rsp, 0x8
        0xe6, 0x20, // out 0x20, al
        0x0f, 0x00, 0xd8, // ltr ax
        0x0f, 0x01, 0xf8, // swapgs
        0x48, 0xcf, // iretq
    ];
    let perms = Perms {
        read: true,
        exec: true,
        ..Perms::default()
    };
    let mapping = |start: u64, path: &str| Mapping {
        start,
        end: start + 0x1000,
        offset: 0,
        perms,
        path: path.into(),
    };
    let mut d = vec![
        Directive::Event(Event::Exec {
            pid: 1,
            path: "/a".into(),
        }),
        Directive::Event(Event::Mappings(vec![
            mapping(USER, "[user]"),
            mapping(KERNEL, "[kernel]"),
        ])),
    ];
    for i in 0..3 {
        d.extend([
            Directive::Target(KERNEL),
            Directive::Cr3(cr3_of_pid(1)),
            Directive::Target(USER + 7),
        ]);
        if i == 1 {
            d.push(Directive::IntoKernel {
                at: USER + 8,
                vector: 32,
                handler: KERNEL + 0x100,
            });
            d.push(Directive::Target(USER + 8));
        }
        d.push(if i < 2 {
            Directive::Taken
        } else {
            Directive::NotTaken
        });
    }
    Script::new(USER, SimMode::Bit64)
        .code(USER, &user)
        .code(KERNEL, entry)
        .code(KERNEL + 0x100, handler)
        .kernel_from(KERNEL)
        .directives(d)
}

/// The programs, recorded once per test run.
fn recordings() -> &'static [Recording] {
    static R: OnceLock<Vec<Recording>> = OnceLock::new();
    R.get_or_init(|| {
        let dir = tmp();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        pt_testkit::tool("valgrind", "valgrind");
        // The system's interpreter, not a wrapper script on PATH (pyenv's execs it).
        let python = pt_testkit::tool("/usr/bin/python3", "python3-minimal");
        let python = python.display().to_string();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/listing.c");
        let bin = pt_testkit::compile_c(&src, dir.join("listing"), &["-O2"], &["-lm"]);
        let words = dir.join("words.txt");
        std::fs::write(&words, word_list()).unwrap();
        let text = dir.join("text.txt");
        std::fs::copy(&src, &text).unwrap();
        let (words, text, src) = (
            words.display().to_string(),
            text.display().to_string(),
            src.display().to_string(),
        );
        vec![
            Recording::new(
                "listing",
                valgrind("listing", &bin.display().to_string(), &[]),
                None,
            ),
            Recording::new("md5sum", valgrind("md5sum", "md5sum", &[&src]), None),
            Recording::new("gzip", valgrind("gzip", "gzip", &["-k", "-f", &text]), None),
            Recording::new(
                "sort",
                valgrind("sort", "sort", &["-o", &format!("{words}.sorted"), &words]),
                None,
            ),
            Recording::new(
                "python3",
                valgrind(
                    "python3",
                    &python,
                    &[
                        "-I",
                        "-S",
                        "-c",
                        "import json; json.dumps(list(range(100)))",
                    ],
                ),
                Some(0x8000),
            ),
            Recording::new(
                "kernel",
                record("kernel", &mut kernel_script(), TraceConfig::default()),
                None,
            ),
        ]
    })
}

/// Our ptxed's output for `rec` with `args`.
fn ptxed(rec: &Recording, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_ptxed"))
        .args(&rec.image)
        .args(args)
        .args(rec.pt())
        .output()
        .expect("run ptxed");
    assert!(
        o.status.success(),
        "{}: {}",
        rec.name,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 listing")
}

/// libipt's ptxed's output for `rec` with `args`, the image given as `--raw` files
/// from the perf.data's mappings.
fn reference(ptxed: &Path, rec: &Recording, args: &[&str]) -> String {
    let o = Command::new(ptxed)
        .args(&rec.image)
        .args(args)
        .args(rec.pt())
        .output()
        .expect("run libipt's ptxed");
    String::from_utf8(o.stdout).expect("utf-8 listing")
}

/// One instruction line of `--raw-insn` output: address, bytes, text.
fn parse_line(line: &str) -> Option<(u64, Vec<u8>, &str)> {
    let ip = u64::from_str_radix(line.get(..16)?, 16).ok()?;
    let raw = line.get(16..16 + 45)?;
    let bytes = raw
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<Vec<u8>, _>>()
        .ok()?;
    let text = line.get(16 + 45 + 2..)?;
    Some((ip, bytes, text))
}

/// The instructions of a `--raw-insn` listing; no line may report an error.
fn instructions<'a>(name: &str, listing: &'a str) -> Vec<(u64, Vec<u8>, &'a str)> {
    let mut out = Vec::new();
    for line in listing.lines() {
        if line.starts_with('[') {
            assert!(!line.contains("error"), "{name}: {line}");
            continue;
        }
        let parsed = parse_line(line);
        let Some(insn) = parsed else {
            panic!("{name}: not an instruction line: {line:?}");
        };
        out.push(insn);
    }
    out
}

/// What the golden file knows of one encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Known {
    intel: String,
    att: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `"text"` fields of a golden line.
fn quoted(mut rest: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(start) = rest.find('"') {
        let Some(len) = rest[start + 1..].find('"') else {
            break;
        };
        out.push(rest[start + 1..start + 1 + len].to_string());
        rest = &rest[start + 2 + len..];
    }
    out
}

fn read_golden() -> HashMap<Vec<u8>, Known> {
    let text = std::fs::read_to_string(golden_path()).expect("read the golden listing");
    let mut known = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let h = line.split(' ').next().unwrap_or_default();
        let bytes: Vec<u8> = (0..h.len() / 2)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let texts = quoted(line);
        assert_eq!(texts.len(), 2, "bad golden line {line:?}");
        known.insert(
            bytes,
            Known {
                intel: texts[0].clone(),
                att: texts[1].clone(),
            },
        );
    }
    known
}

/// Whether the text of `bytes` depends on its address (a branch naming its target).
fn names_its_target(f: &mut Formatter, bytes: &[u8]) -> bool {
    let (mut a, mut b) = (String::new(), String::new());
    let _ = f.format(bytes, 0x1000, ExecMode::Bit64, &mut a);
    let _ = f.format(bytes, 0x7_0000, ExecMode::Bit64, &mut b);
    a != b
}

fn format(f: &mut Formatter, bytes: &[u8], ip: u64) -> String {
    let mut s = String::new();
    f.format(bytes, ip, ExecMode::Bit64, &mut s)
        .unwrap_or_else(|e| panic!("{}: {e}", hex(bytes)));
    s
}

#[test]
fn listings_read_as_libipt_prints_them() {
    let known = read_golden();
    let mut intel = Formatter::new(Syntax::Intel);
    let mut att = Formatter::new(Syntax::Att);
    let mut report = Vec::new();
    let (mut all_unique, mut all_known) = (0usize, 0usize);
    for rec in recordings() {
        let listing_intel = ptxed(rec, &["--raw-insn"]);
        let listing_att = ptxed(rec, &["--raw-insn", "--att"]);
        let a = instructions(rec.name, &listing_intel);
        let b = instructions(rec.name, &listing_att);
        assert_eq!(
            a.len(),
            b.len(),
            "{}: AT&T lists other instructions",
            rec.name
        );
        assert!(!a.is_empty(), "{}: nothing listed", rec.name);
        let mut unique: HashMap<&[u8], bool> = HashMap::new();
        let mut targets: HashMap<&[u8], bool> = HashMap::new();
        let mut checked = 0usize;
        for ((ip, bytes, text), (ip2, bytes2, text_att)) in a.iter().zip(&b) {
            assert_eq!((ip, bytes), (ip2, bytes2), "{}", rec.name);
            let branch = *targets
                .entry(bytes)
                .or_insert_with(|| names_its_target(&mut intel, bytes));
            if branch {
                // ptxed prints what the formatter gives for the address.
                assert_eq!(
                    (*text, *text_att),
                    (
                        format(&mut intel, bytes, *ip).as_str(),
                        format(&mut att, bytes, *ip).as_str()
                    ),
                    "{} at {ip:x}: {}",
                    rec.name,
                    hex(bytes)
                );
                continue;
            }
            let Some(k) = known.get(bytes) else {
                unique.entry(bytes).or_insert(false);
                continue;
            };
            unique.insert(bytes, true);
            assert_eq!(
                (*text, *text_att),
                (k.intel.as_str(), k.att.as_str()),
                "{} at {ip:x}: {}",
                rec.name,
                hex(bytes)
            );
            checked += 1;
        }
        let n_known = unique.values().filter(|&&k| k).count();
        all_unique += unique.len();
        all_known += n_known;
        report.push(format!(
            "{}: {} lines, {checked} checked against the golden file; {} unique \
             encodings (not branches naming their target), {n_known} known",
            rec.name,
            a.len(),
            unique.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
    // Other machines have other binaries; most of what runs is still the same code.
    assert!(
        all_known * 2 >= all_unique,
        "only {all_known} of {all_unique} encodings are in {}:\n{}",
        golden_path().display(),
        report.join("\n")
    );
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn listings_equal_libipt_ptxed() {
    let reference_ptxed = pt_testkit::env_path(
        "PT_REFERENCE_PTXED",
        "libipt's ptxed built with XED, to compare listings with",
    );
    let bless = std::env::var_os("PT_BLESS_LISTING").is_some_and(|v| v == "1");
    let mut golden: BTreeMap<Vec<u8>, Known> = BTreeMap::new();
    let mut classify = Formatter::new(Syntax::Intel);
    let mut report = Vec::new();
    for rec in recordings() {
        for args in [
            &[][..],
            &["--att"],
            &["--raw-insn"],
            &["--raw-insn", "--att"],
            &["--insn-decoder", "--offset", "--time", "--event:ip"],
            // Not --block:show-blocks nor block statistics: where libipt ends a block
            // depends on the history of its block cache (trampolines, fills), which
            // the flow decoder follows in most but not all places.
            &["--stat:insn", "--no-inst", "--check"],
        ] {
            let ours = ptxed(rec, args);
            let theirs = reference(&reference_ptxed, rec, args);
            let lines = theirs.lines().count();
            let differ = ours
                .lines()
                .zip(theirs.lines())
                .filter(|(a, b)| a != b)
                .count()
                + ours.lines().count().abs_diff(lines);
            let first = ours
                .lines()
                .zip(theirs.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b);
            assert!(
                differ == 0,
                "{} {args:?}: {differ} of {lines} lines differ, first at line {}: ours {:?}, libipt's {:?}",
                rec.name,
                first.map_or(0, |(i, _)| i + 1),
                first.map(|(_, (a, _))| a),
                first.map(|(_, (_, b))| b),
            );
            report.push(format!("{} {args:?}: {lines} lines, identical", rec.name));
        }
        if bless {
            let a = reference(&reference_ptxed, rec, &["--raw-insn"]);
            let b = reference(&reference_ptxed, rec, &["--raw-insn", "--att"]);
            let a = instructions(rec.name, &a);
            let b = instructions(rec.name, &b);
            for ((_, bytes, intel), (_, _, att)) in a.into_iter().zip(b) {
                if golden.contains_key(&bytes) || names_its_target(&mut classify, &bytes) {
                    continue;
                }
                golden.insert(
                    bytes,
                    Known {
                        intel: intel.to_string(),
                        att: att.to_string(),
                    },
                );
            }
        }
    }
    eprintln!("{}", report.join("\n"));
    if bless {
        let mut text = String::from(
            "# The instruction texts libipt's ptxed (with XED) printed for the encodings the\n\
             # programs of listing_recorded.rs executed (64-bit code; not the branches whose\n\
             # text names their target), written by its ignored test with PT_BLESS_LISTING=1.\n\
             # Fields: bytes, Intel text, AT&T text.\n",
        );
        for (bytes, k) in &golden {
            text.push_str(&format!("{} \"{}\" \"{}\"\n", hex(bytes), k.intel, k.att));
        }
        std::fs::write(golden_path(), text).expect("write the golden listing");
        eprintln!(
            "wrote {} encodings to {}",
            golden.len(),
            golden_path().display()
        );
    }
}
