//! Differential test against libiberty, the demangler perf 6.1 calls: every
//! `_Z` symbol of the installed C++ libraries (libLLVM-14 and libstdc++,
//! which `.ci/run` installs, and the other large C++ libraries found) must
//! read as `cplus_demangle(name, 0)` prints it. A small C harness is built
//! with `cc … -liberty` (Debian's libiberty-dev) into a scratch folder.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::{Object, ObjectSymbol};
use pt_elf::demangle::demangle;

/// Prints `cplus_demangle(line, 0)` for each line of stdin, or the line
/// itself where libiberty returns NULL (what perf then prints).
const HARNESS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libiberty/demangle.h>
int main(void) {
  static char line[1 << 16];
  while (fgets(line, sizeof line, stdin)) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[--n] = 0;
    char *d = cplus_demangle(line, DMGL_NO_OPTS);
    printf("%s\n", d ? d : line);
    free(d);
  }
  return 0;
}
"#;

/// Names where we knowingly print something else than libiberty, with why.
/// Empty: every name of the libraries reads the same.
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

/// The libraries every run compares (installed by `.ci/run`).
const REQUIRED: &[&str] = &["libLLVM-14.so.1", "libstdc++.so.6"];

/// Other large C++ libraries, compared when installed.
const OPTIONAL: &[&str] = &[
    "libLLVM-15.so.1",
    "libclang-cpp.so.14",
    "libz3.so.4",
    "libQt5Core.so.5",
    "libQt5Gui.so.5",
    "libQt5Widgets.so.5",
    "libQt5Qml.so.5",
    "libicuuc.so.72",
    "libicui18n.so.72",
    "libasan.so.8",
    "libtsan.so.2",
    "libubsan.so.1",
];

fn harness() -> PathBuf {
    let header = Path::new("/usr/include/libiberty/demangle.h");
    assert!(
        header.exists(),
        "this test needs libiberty's header and library (Debian package `libiberty-dev`; .ci/run installs it)"
    );
    let dir = pt_testkit::target_tmp().join("libiberty_demangle");
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let src = dir.join("cplus_demangle.c");
    std::fs::write(&src, HARNESS).expect("write the harness");
    pt_testkit::compile_c(&src, dir.join("cplus_demangle"), &["-O2"], &["-liberty"])
}

/// libiberty's text for each name, in order.
fn libiberty(names: &[String]) -> Vec<String> {
    let mut child = Command::new(harness())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the harness");
    let mut stdin = child.stdin.take().expect("stdin");
    let input: String = names.iter().map(|n| format!("{n}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out: Vec<String> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map(|l| l.expect("harness output"))
        .collect();
    writer.join().expect("writer").expect("write names");
    assert!(child.wait().expect("harness").success());
    assert_eq!(out.len(), names.len(), "one line per name");
    out
}

/// The `_Z` names of the symbol table and the dynamic symbol table of `path`,
/// without their `@version`.
fn cxx_names(path: &Path, into: &mut BTreeSet<String>) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        let Ok(name) = sym.name() else { continue };
        let name = name.split('@').next().unwrap_or(name);
        if name.starts_with("_Z") && !name.contains('\n') {
            into.insert(name.to_string());
        }
    }
}

#[test]
fn every_cxx_symbol_reads_as_libiberty_reads_it() {
    let mut names = BTreeSet::new();
    for lib in REQUIRED {
        let path = Path::new(LIBDIR).join(lib);
        assert!(
            path.exists(),
            "{} is missing (Debian packages llvm-14 and libstdc++6; .ci/run installs them)",
            path.display()
        );
        cxx_names(&path, &mut names);
    }
    let required = names.len();
    let mut libs: Vec<&str> = REQUIRED.to_vec();
    for lib in OPTIONAL {
        let path = Path::new(LIBDIR).join(lib);
        if path.exists() {
            cxx_names(&path, &mut names);
            libs.push(lib);
        }
    }
    // Names libiberty cannot read either, and names at its length limit.
    let made_up = [
        "_Z",
        "_Zjunk",
        "_ZN1A",
        "_Z1fIi",
        "_Z1fIXszT_EEvv",
        "_ZTIDpT_",
        "_ZN1Av15fooEv",
        &format!("_Z1f{}i", "P".repeat(1019)),
        &format!("_Z1f{}i", "P".repeat(1020)),
        &format!("_Z1fI{}iE", "P".repeat(1015)),
    ];
    names.extend(made_up.iter().map(|s| s.to_string()));
    let names: Vec<String> = names.into_iter().collect();
    assert!(
        required > 40_000,
        "only {required} C++ names in {REQUIRED:?}"
    );

    let theirs = libiberty(&names);
    let mut equal = 0;
    let mut differ = Vec::new();
    let mut excepted = 0;
    for (name, want) in names.iter().zip(&theirs) {
        let ours = demangle(name).unwrap_or_else(|| name.clone());
        if &ours == want {
            equal += 1;
            assert!(
                !KNOWN_EXCEPTIONS.iter().any(|(n, _)| n == name),
                "{name} is listed as an exception but now reads the same: drop it"
            );
        } else if KNOWN_EXCEPTIONS.iter().any(|(n, _)| n == name) {
            excepted += 1;
        } else {
            differ.push(format!("{name}\n  libiberty: {want}\n  ours:      {ours}"));
        }
    }
    eprintln!(
        "{} names from {libs:?}: {equal} equal, {excepted} known exceptions, {} differ",
        names.len(),
        differ.len()
    );
    assert!(
        differ.is_empty(),
        "{} of {} names differ from libiberty:\n{}",
        differ.len(),
        names.len(),
        differ
            .iter()
            .take(50)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
