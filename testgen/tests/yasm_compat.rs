//! Differential tests against real yasm: every .ptt file of the conformance
//! corpus, and a set of our own sources, must assemble to the same bytes and
//! the same label addresses. yasm (which `.ci/run` installs) and the corpus
//! ([`pt_testkit::corpus`]) are required: without them the tests fail.

use pt_testgen::asm::{assemble, Assembly};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The corpus's .ptt files (never none).
fn corpus_files() -> Vec<PathBuf> {
    let dir = pt_testkit::corpus();
    let rd = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{} cannot be listed: {e}", dir.display()));
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "ptt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .ptt files in {}", dir.display());
    files
}

/// yasm, which these tests cannot do without.
fn need_yasm() {
    pt_testkit::tool("yasm", "yasm");
}

/// yasm's output for a source file: the binary and its listing.
struct Yasm {
    bin: Vec<u8>,
    listing: String,
}

fn run_yasm(source: &str, name: &str) -> Result<Yasm, String> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pt-testgen-yasm-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let src = dir.join(name);
    std::fs::write(&src, source).map_err(|e| e.to_string())?;
    let out = Command::new("yasm")
        .args(["-f", "bin", "-L", "nasm", "-o"])
        .arg(dir.join("out.bin"))
        .arg("-l")
        .arg(dir.join("out.lst"))
        .arg(&src)
        .output()
        .map_err(|e| e.to_string())?;
    let result = if out.status.success() {
        Ok(Yasm {
            bin: std::fs::read(dir.join("out.bin")).unwrap_or_default(),
            listing: std::fs::read_to_string(dir.join("out.lst")).unwrap_or_default(),
        })
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Label addresses from a yasm listing, the way pttc reads them: a token
/// ending in `:` after the bytes (or alone after the line number) names the
/// address of that line (or of the next line with an address), plus the org.
fn listing_labels(listing: &str) -> BTreeMap<String, u64> {
    let mut base = 0u64;
    for line in listing.lines() {
        if let Some(rest) = line.split("[org ").nth(1) {
            let v = rest.trim_end_matches(']').trim();
            base = v
                .strip_prefix("0x")
                .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
                .unwrap_or(0);
        }
    }
    let org = base;
    // None while in a section whose address the listing does not say.
    let mut base = Some(base);
    let mut labels = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut duplicates = std::collections::BTreeSet::new();
    let mut pending: Vec<String> = Vec::new();
    for line in listing.lines() {
        // pttc: a section switch rebases to that section's vstart.
        if let Some(rest) = line.split("[section ").nth(1) {
            let vstart = rest
                .split_whitespace()
                .find_map(|a| a.trim_end_matches(']').strip_prefix("vstart="))
                .and_then(|v| {
                    v.strip_prefix("0x")
                        .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
                });
            let text = rest.trim_end_matches(']').trim() == ".text";
            base = vstart.or(text.then_some(org));
            continue;
        }
        let Some(base) = base else {
            continue;
        };
        // A label alone before an alignment names the address before the
        // padding for yasm but the one after it for a listing reader; leave
        // those out.
        if line.contains("[align") {
            pending.clear();
            continue;
        }
        let toks: Vec<&str> = line.split_whitespace().collect();
        let addr = toks
            .get(1)
            .filter(|t| t.len() == 8)
            .and_then(|t| u64::from_str_radix(t, 16).ok());
        match addr {
            Some(a) => {
                for p in pending.drain(..) {
                    if !seen.insert(p.clone()) {
                        duplicates.insert(p.clone());
                    }
                    labels.insert(p, a + base);
                }
                if let Some(l) = toks.get(3).and_then(|t| t.strip_suffix(':')) {
                    if !seen.insert(l.to_string()) {
                        duplicates.insert(l.to_string());
                    }
                    labels.insert(l.to_string(), a + base);
                }
            }
            None => {
                if let Some(l) = toks.get(1).and_then(|t| t.strip_suffix(':')) {
                    pending.push(l.to_string());
                }
            }
        }
    }
    // pttc rejects a name defined twice (e.g. the same local label under two
    // parents); there is nothing to compare for those.
    labels.retain(|k, _| !duplicates.contains(k));
    labels
}

fn compare(source: &str, name: &str, yasm: &Yasm) -> Result<Assembly, String> {
    let ours = assemble(source, name).map_err(|e| format!("our assembler failed: {e}"))?;
    if ours.bytes != yasm.bin {
        let at = ours
            .bytes
            .iter()
            .zip(&yasm.bin)
            .position(|(a, b)| a != b)
            .unwrap_or(ours.bytes.len().min(yasm.bin.len()));
        return Err(format!(
            "bytes differ at offset {at:#x} (ours {} bytes, yasm {} bytes): ours {:02x?} yasm {:02x?}",
            ours.bytes.len(),
            yasm.bin.len(),
            ours.bytes.get(at..(at + 8).min(ours.bytes.len())).unwrap_or_default(),
            yasm.bin.get(at..(at + 8).min(yasm.bin.len())).unwrap_or_default(),
        ));
    }
    // What pttc reads from yasm's listing is what .ptt files mean by a label.
    if let Ok(read) = pt_testgen::asm::pttc::labels(&yasm.listing) {
        for (label, addr) in read {
            if ours.labels.get(&label) != Some(&addr) {
                return Err(format!(
                    "pttc label {label}: yasm listing {addr:#x}, ours {:x?}",
                    ours.labels.get(&label)
                ));
            }
        }
    }
    for (label, addr) in listing_labels(&yasm.listing) {
        match ours.labels.get(&label) {
            Some(a) if *a == addr => {}
            other => return Err(format!("label {label}: yasm {addr:#x}, ours {other:x?}")),
        }
    }
    Ok(ours)
}

#[test]
fn corpus_assembles_without_error() {
    let files = corpus_files();
    let mut failures = Vec::new();
    for f in &files {
        let source = std::fs::read_to_string(f).unwrap_or_default();
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        match assemble(&source, name) {
            Ok(a) => assert_eq!(
                a.lines.len(),
                source.lines().count(),
                "{name}: one LineInfo per line"
            ),
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn corpus_matches_yasm() {
    let files = corpus_files();
    need_yasm();
    let mut failures = Vec::new();
    for f in &files {
        let source = std::fs::read_to_string(f).unwrap_or_default();
        let name = f
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let result = run_yasm(&source, &name).and_then(|y| compare(&source, &name, &y));
        if let Err(e) = result {
            failures.push(format!("{name}: {e}"));
        }
    }
    eprintln!(
        "{} of {} corpus files identical to yasm",
        files.len() - failures.len(),
        files.len()
    );
    assert!(
        failures.is_empty(),
        "{} files differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Our own sources, one feature each, compared with yasm.
const OWN_SOURCES: &[(&str, &str)] = &[
    (
        "branches64.asm",
        "org 0x100000\nbits 64\nstart: jmp fwd\n jz start\n call start\n jmp near start\n times 120 nop\nfwd: jnz start\n jmp short fwd\n jecxz fwd\n jrcxz fwd\n loop fwd\n call 0x100100\n jmp far [rax]\n call far [rbx+8]\n jmp rax\n call qword [rsp]\n ret\n ret 8\n retf\n iretq\n",
    ),
    (
        "relax_chain.asm",
        "bits 64\na: jmp b\n jmp c\n times 60 nop\n jmp a\n times 60 nop\nb: jmp a\n times 3 nop\nc: nop\n",
    ),
    (
        "alu64.asm",
        "bits 64\nadd rax, rbx\n sub ecx, 5\n and al, 0x7f\n or rdx, 0x1000\n xor r8d, r9d\n cmp qword [rax], 1\n test rbx, rax\n test ecx, 0x80\n adc ax, 2\n sbb r10, -1\n inc r11\n dec byte [rdi]\n neg rax\n not dword [rsi+rcx*4+8]\n imul rax, rbx, 10\n imul rcx, [rdx], 300\n shl rax, 1\n sar ecx, cl\n shr r9w, 4\n rol byte [rax], 1\n",
    ),
    (
        "mov64.asm",
        "bits 64\nmov rax, 0\n mov rax, -1\n mov rax, 0x80000000\n mov rax, 0x123456789\n mov eax, 5\n mov ax, 7\n mov al, 9\n mov r12, r13\n mov [rbp], rax\n mov [r12], ebx\n mov rax, [rsp+0x80]\n mov rax, [0x1000]\n mov eax, [rbx+rsi*8-4]\n mov cr3, rax\n mov rax, cr0\n mov ds, ax\n movzx eax, byte [rbx]\n movsx rax, word [rbx]\n movsxd rax, ecx\n lea rax, [rbx+rcx*2+1]\n lea rsp, [rsp+8]\n xchg rax, rbx\n xchg rcx, rdx\n xchg eax, eax\n push rbx\n pop r15\n push 1\n push 0x1000\n pushfq\n popfq\n",
    ),
    (
        "system64.asm",
        "bits 64\nsyscall\n sysret\n cpuid\n rdtsc\n rdtscp\n hlt\n cli\n sti\n int 3\n int3\n int 0x80\n iret\n iretq\n leave\n nop\n pause\n mwait\n monitor\n vmlaunch\n vmresume\n vmcall\n vmxoff\n xend\n xabort 0x12\n swapgs\n wrmsr\n rdmsr\n invlpg [rax]\n lfence\n mfence\n sfence\n clc\n std\n cld\n ud2\n",
    ),
    (
        "data.asm",
        "org 0x1000\nbits 32\nl0: db 0x0f, 0x34, 'ab', \"c\"\n dw 1, 0x1234, l0\n dd 0xec010ff3, l1 - l0\n dq 0x1122334455667788\n times 3 db 0xcc\n times 2 dw $ - l0\nl1: db 0x10, 0xff, 5, 15\n align 16\n db 1\n ALIGN 8\n nop\n",
    ),
    (
        "modes.asm",
        "bits 16\nmov ax, 1\n mov eax, 1\n mov ax, [bx+si]\n mov ax, [bp]\n mov eax, [ebx]\n jmp l16\n call l16\n ret\n retf\n iret\n push ax\n push 5\nl16: nop\nbits 32\n mov ax, 1\n mov eax, [0x100]\n mov eax, [ebp]\n push eax\n push word 1\n push dword 2\n push strict dword 3\n add eax, strict dword 4\n add eax, dword 5\n mov ds, ax\n mov ax, ds\n jmp l32\n jmp 0x8:0x1000\n call 0x10:l32\n iret\n iretd\n retf\n sysenter\n sysexit\nl32: align 4\n nop\n",
    ),
    (
        "sections.asm",
        "org 0x1000\nbits 64\nsection .text\nl0: jmp l1\n nop\nsection .data vstart=0x2000 align=16\nd0: dd l0\n dq d0\nsection .foo start=0x3000 vstart=0x5000\nf0: jmp l0\nl1: call f0\nsection .bar follows=.foo vstart=0x6000\ng0: jmp d0\n times 3 db 1\n",
    ),
    (
        "bss_and_padding.asm",
        "org 0x1000\nbits 32\nsection .data\ndb 1\nalign 4\nsection .foo\ndb 1\nalign 8\nsection .text\ndb 1\nalign 4\nsection .bss\nb0: resb 16\nsection .data\ndd b0\n",
    ),
    (
        "placement.asm",
        "org 0x1000\nbits 64\nsection .a start=0x3000 vstart=0x3000\na0: jmp b0\nsection .b start=0x2000 vstart=0x2000\nb0: jmp a0\n",
    ),
    (
        "labels.asm",
        "bits 64\norg 0x400\nalone\n nop\nmain: nop\n.loop: dec ecx\n jnz .loop\n jmp main.loop\nsecond:\n.loop: jmp .loop\nfoo equ 5\n mov eax, foo\n times foo nop\n times 0x40-($-$$) db 0\nend: dd end\n",
    ),
];

#[test]
fn own_sources_match_yasm() {
    need_yasm();
    let mut failures = Vec::new();
    for (name, source) in OWN_SOURCES {
        match run_yasm(source, name) {
            Ok(y) => match compare(source, name, &y) {
                Ok(ours) => {
                    if let Err(e) = same_listing(name, &y.listing, &ours.listing) {
                        failures.push(e);
                    }
                }
                Err(e) => failures.push(format!("{name}: {e}")),
            },
            Err(e) => failures.push(format!("{name}: yasm rejected our test source: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn listing_labels_follow_pttc() {
    let listing = "     1                                 %line 1+1 x.asm\n     2                                 [org 0x1000]\n     3 00000000 90                     l0: nop\n     4                                 l1:\n     5 00000001 F4                     hlt\n";
    let labels = listing_labels(listing);
    assert_eq!(labels.get("l0"), Some(&0x1000));
    assert_eq!(labels.get("l1"), Some(&0x1001));
}

/// Compares two listings line by line, except the first (`%line 1+1 path`,
/// where yasm prints the path it was given).
fn same_listing(name: &str, yasm: &str, ours: &str) -> Result<(), String> {
    // `%line N+M path`: yasm names the file as it was given on its command
    // line; keep only the file name.
    let norm = |l: &str| -> String {
        match l.find("%line ") {
            Some(i) => {
                let (head, tail) = l.split_at(i);
                let mut parts: Vec<&str> = tail.split(' ').collect();
                if let Some(last) = parts.last_mut() {
                    *last = last.rsplit('/').next().unwrap_or(last);
                }
                format!("{head}{}", parts.join(" "))
            }
            None => l.to_string(),
        }
    };
    let theirs: Vec<String> = yasm.lines().skip(1).map(norm).collect();
    let mine: Vec<String> = ours.lines().skip(1).map(norm).collect();
    if let Some((a, b)) = theirs.iter().zip(&mine).find(|(a, b)| a != b) {
        return Err(format!(
            "{name}: listing differs:\n  yasm: {a:?}\n  ours: {b:?}"
        ));
    }
    if theirs.len() != mine.len() {
        return Err(format!(
            "{name}: yasm {} listing lines, ours {}",
            theirs.len(),
            mine.len()
        ));
    }
    Ok(())
}

#[test]
fn corpus_listing_matches_yasm() {
    let files = corpus_files();
    need_yasm();
    let mut failures = Vec::new();
    for f in &files {
        let source = std::fs::read_to_string(f).unwrap_or_default();
        let name = f
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let (Ok(y), Ok(ours)) = (run_yasm(&source, &name), assemble(&source, &name)) else {
            failures.push(format!("{name}: assembly failed"));
            continue;
        };
        if let Err(e) = same_listing(&name, &y.listing, &ours.listing) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} listings differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A small deterministic generator of branch-heavy programs.
fn random_program(seed: u64) -> String {
    let mut rng = pt_testkit::Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut next = move |n: u64| rng.below(n);
    let bits = [16, 32, 64][next(3) as usize];
    let (a, b) = if bits == 16 {
        ("ax", "bx")
    } else {
        ("eax", "ebx")
    };
    let org = [0x100u64, 0x1000, 0x10_0000][next(3) as usize];
    let mut body: Vec<String> = Vec::new();
    for _ in 0..(20 + next(50)) {
        let pick = next(100);
        let lbl = format!("L{}", next(8));
        let lbl2 = format!("L{}", next(8));
        body.push(match pick {
            0..=24 => format!("jmp {lbl}"),
            25..=39 => format!("j{} {lbl}", ["z", "nz", "le", "g", "c"][next(5) as usize]),
            40..=49 => format!("call {lbl}"),
            50..=59 => format!("times {} nop", 1 + next(60)),
            60..=67 => format!("align {}", [2, 4, 8, 16][next(4) as usize]),
            68..=73 => format!("add {a}, {lbl}-{lbl2}"),
            74..=79 => format!("mov {a}, [{b}+{lbl}-{lbl2}]"),
            80..=84 => format!("dd {lbl}"),
            _ => "hlt".to_string(),
        });
    }
    for i in 0..8 {
        let at = next(body.len() as u64 + 1) as usize;
        body.insert(at, format!("L{i}:"));
    }
    format!("org {org:#x}\nbits {bits}\n{}\n", body.join("\n"))
}

#[test]
fn random_programs_match_yasm() {
    need_yasm();
    let mut failures = Vec::new();
    let mut compared = 0;
    for seed in 1..=60u64 {
        let source = random_program(seed);
        let name = format!("random{seed}.asm");
        // Some programs have a branch yasm cannot reach either; skip those.
        let Ok(y) = run_yasm(&source, &name) else {
            continue;
        };
        compared += 1;
        match compare(&source, &name, &y) {
            Ok(ours) => {
                if let Err(e) = same_listing(&name, &y.listing, &ours.listing) {
                    failures.push(e);
                }
            }
            Err(e) => failures.push(format!("{name}: {e}\n{source}")),
        }
    }
    assert!(
        compared > 40,
        "only {compared} programs assembled with yasm"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
