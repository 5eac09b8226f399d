//! Replays names with what libiberty's `cplus_demangle(name, 0)` printed for
//! them (tests/data/demangle_libiberty.tsv, made with the harness of
//! tests/libiberty_demangle.rs): perf 6.1's C++ names without any tool.

use pt_elf::demangle::demangle;

#[test]
fn names_print_as_libiberty_printed_them() {
    let data = include_str!("data/demangle_libiberty.tsv");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in data
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (mangled, want) = line.split_once('\t').expect("mangled TAB libiberty");
        let ours = demangle(mangled).unwrap_or_else(|| mangled.to_string());
        if ours != want {
            wrong.push(format!(
                "{mangled}\n  libiberty: {want}\n  ours:      {ours}"
            ));
        }
        checked += 1;
    }
    assert!(checked >= 400, "the fixture lost its names ({checked})");
    assert!(
        wrong.is_empty(),
        "{} of {checked} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
