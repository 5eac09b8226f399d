//! Output comparison with the semantics of GNU `diff -ub`.
//!
//! `-b` ("ignore changes in the amount of white space") makes any non-empty
//! run of blanks equal to any other, ignores blanks at the end of a line and
//! does not care whether the last line ends in a newline. Blanks here are the
//! C `isspace` characters other than newline: space, tab, `\v`, `\f`, `\r`.
//! Blanks never match the absence of blanks inside a line (`a b` ≠ `ab`).

use similar::{capture_diff_slices, group_diff_ops, Algorithm, DiffOp};

/// Lines of context around each hunk, as `diff -u` prints by default.
const CONTEXT: usize = 3;

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0b' | '\x0c' | '\r')
}

/// The comparison key of one line under `-b`: trailing blanks dropped, every
/// other run of blanks shrunk to one space.
pub fn normalize_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_blank = false;
    for c in line.trim_end_matches(is_blank).chars() {
        if is_blank(c) {
            if !in_blank {
                out.push(' ');
            }
            in_blank = true;
        } else {
            out.push(c);
            in_blank = false;
        }
    }
    out
}

/// Splits text into lines; a final newline does not start another line.
fn split_lines(text: &str) -> Vec<&str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        Vec::new()
    } else {
        body.split('\n').collect()
    }
}

/// Compares `expected` with `actual` like `diff -ub expected actual`.
///
/// Returns `None` when they are equal under `-b`, else a unified diff whose
/// `---`/`+++` headers name `expected_name` and `actual_name` and whose lines
/// are the original (unnormalized) text.
pub fn diff_ub(
    expected: &str,
    actual: &str,
    expected_name: &str,
    actual_name: &str,
) -> Option<String> {
    let old = split_lines(expected);
    let new = split_lines(actual);
    let old_keys: Vec<String> = old.iter().map(|l| normalize_line(l)).collect();
    let new_keys: Vec<String> = new.iter().map(|l| normalize_line(l)).collect();
    if old_keys == new_keys {
        return None;
    }

    let ops = capture_diff_slices(Algorithm::Myers, &old_keys, &new_keys);
    let mut out = format!("--- {expected_name}\n+++ {actual_name}\n");
    for group in group_diff_ops(ops, CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_start = first.old_range().start;
        let old_end = last.old_range().end;
        let new_start = first.new_range().start;
        let new_end = last.new_range().end;
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            hunk_range(old_start, old_end - old_start),
            hunk_range(new_start, new_end - new_start)
        ));
        for op in &group {
            push_op(&mut out, op, &old, &new);
        }
    }
    Some(out)
}

/// A hunk range as `diff -u` writes it: `start,len`, `start` when the length
/// is one, and the line before the hunk with length 0 when it is empty.
fn hunk_range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

fn push_lines(out: &mut String, sign: char, lines: &[&str], range: std::ops::Range<usize>) {
    for line in lines.get(range).unwrap_or(&[]) {
        out.push(sign);
        out.push_str(line);
        out.push('\n');
    }
}

fn push_op(out: &mut String, op: &DiffOp, old: &[&str], new: &[&str]) {
    match *op {
        DiffOp::Equal { old_index, len, .. } => {
            // Like diff, show the expected side of lines that compare equal.
            push_lines(out, ' ', old, old_index..old_index + len);
        }
        DiffOp::Delete {
            old_index, old_len, ..
        } => push_lines(out, '-', old, old_index..old_index + old_len),
        DiffOp::Insert {
            new_index, new_len, ..
        } => push_lines(out, '+', new, new_index..new_index + new_len),
        DiffOp::Replace {
            old_index,
            old_len,
            new_index,
            new_len,
        } => {
            push_lines(out, '-', old, old_index..old_index + old_len);
            push_lines(out, '+', new, new_index..new_index + new_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &str, b: &str) -> bool {
        diff_ub(a, b, "a", "b").is_none()
    }

    // Each case was checked against GNU diffutils 3.8 `diff -ub`.
    #[test]
    fn whitespace_rules_match_gnu_diff_b() {
        assert!(same("a b\n", "a  b\n"));
        assert!(!same("a b\n", "ab\n"));
        assert!(same("a\n", "a  \n"));
        assert!(!same(" a\n", "a\n"));
        assert!(same("  a\n", "\ta\n"));
        assert!(same("a\n", "a"));
        assert!(same("a\n", "a\r\n"));
        assert!(!same("a\nb\n", "a\nb\n\n"));
        assert!(!same("a\n", "a\n \n"));
        assert!(same("a\x0bb\n", "a b\n"));
        assert!(!same("a\n\n", "a\n"));
        assert!(!same("", "\n"));
        assert!(same("a", "a "));
        assert!(same("", ""));
    }

    #[test]
    fn unified_diff_shape() {
        let exp = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let out = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        let diff = diff_ub(exp, out, "t.exp", "t.out").expect("differs");
        assert_eq!(
            diff,
            "--- t.exp\n+++ t.out\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn diff_of_empty_side() {
        let diff = diff_ub("", "x\n", "e", "o").expect("differs");
        assert_eq!(diff, "--- e\n+++ o\n@@ -0,0 +1 @@\n+x\n");
        let diff = diff_ub("x\ny\n", "", "e", "o").expect("differs");
        assert_eq!(diff, "--- e\n+++ o\n@@ -1,2 +0,0 @@\n-x\n-y\n");
    }

    #[test]
    fn normalization() {
        assert_eq!(normalize_line("  a \t b\r"), " a b");
        assert_eq!(normalize_line("\t"), "");
    }
}
