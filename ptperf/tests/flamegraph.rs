//! `ptperf report --flamegraph` (and `--icicle`): the SVG inferno draws from
//! report's folded stacks, rendered in headless Chromium, and its widest frames
//! under `main` are the hottest functions of `ptperf report`, as wide as their
//! share of the samples.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;

/// The program working in main alone (hot_big about twice hot_small), recorded once.
fn recording() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let prog = build(
            "timeline",
            "tests/programs/timeline.c",
            &["-O1", "-pthread", "-static"],
        );
        let d = dir("flamegraph-rec");
        record(&d, "alone", &[], &[prog.as_os_str(), "10000".as_ref()])
    })
}

const ITRACE: &str = "--itrace=i100ig";

/// `ptperf report --no-children`'s entries: (percent, symbol), hottest first.
fn report_entries(data: &Path) -> Vec<(f64, String)> {
    let o = ptperf()
        .arg("report")
        .arg("-i")
        .arg(data)
        .args([ITRACE, "--no-children", "-g", "none", "--stdio"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    text.lines()
        .filter(|l| l.contains("%") && l.contains("[.] "))
        .map(|l| {
            let pct: f64 = l.trim().split('%').next().unwrap().parse().unwrap();
            let sym = l.split("[.] ").nth(1).unwrap().trim().to_string();
            (pct, sym)
        })
        .collect()
}

/// A frame of inferno's SVG: name, x and width (percent of the whole), y.
#[derive(Debug, Clone)]
struct Frame {
    name: String,
    x: f64,
    w: f64,
    y: i64,
}

fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let key = format!(" {name}=\"");
    let at = tag
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        + key.len();
    let rest = &tag[at..];
    &rest[..rest.find('"').unwrap()]
}

fn frames(svg: &str) -> Vec<Frame> {
    let mut out = Vec::new();
    for part in svg.split("<g><title>").skip(1) {
        let title = &part[..part.find("</title>").unwrap()];
        let name = title
            .rsplit_once(" (")
            .map_or(title, |(n, _)| n)
            .to_string();
        let rect = &part[part.find("<rect").unwrap()..];
        let rect = &rect[..rect.find("/>").unwrap()];
        out.push(Frame {
            name,
            x: attr(rect, "x").trim_end_matches('%').parse().unwrap(),
            w: attr(rect, "width").trim_end_matches('%').parse().unwrap(),
            y: attr(rect, "y").parse().unwrap(),
        });
    }
    out
}

/// `report --flamegraph FILE [--icicle]`, as frames.
fn flamegraph(data: &Path, out: &Path, icicle: bool) -> (String, Vec<Frame>) {
    let mut c = ptperf();
    c.arg("report")
        .arg("-i")
        .arg(data)
        .arg(ITRACE)
        .arg("--flamegraph")
        .arg(out);
    if icicle {
        c.arg("--icicle");
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "the SVG went to the file only");
    let svg = std::fs::read_to_string(out).unwrap();
    assert!(svg.contains(">ptperf report: "), "untitled");
    let f = frames(&svg);
    (svg, f)
}

/// The frames right above (below, for an icicle) `main`, widest first.
fn under_main(frames: &[Frame], icicle: bool) -> Vec<Frame> {
    let main = frames
        .iter()
        .find(|f| f.name == "main")
        .expect("a main frame");
    let mut v: Vec<Frame> = frames
        .iter()
        .filter(|f| {
            let next = if icicle { f.y > main.y } else { f.y < main.y };
            next && (f.y - main.y).abs() <= 16
                && f.x >= main.x - 1e-6
                && f.x + f.w <= main.x + main.w + 1e-3
        })
        .cloned()
        .collect();
    v.sort_by(|a, b| b.w.total_cmp(&a.w));
    v
}

#[test]
fn widest_frames_under_main_are_the_reports_hottest() {
    let data = recording();
    let entries = report_entries(data);
    assert!(entries.len() >= 2, "{entries:?}");
    // The program's work, as the program says.
    assert_eq!(
        (entries[0].1.as_str(), entries[1].1.as_str()),
        ("hot_big", "hot_small"),
        "{entries:?}"
    );
    let d = dir("flamegraph");
    for icicle in [false, true] {
        let (_, frames) = flamegraph(data, &d.join(format!("f{icicle}.svg")), icicle);
        let under = under_main(&frames, icicle);
        assert!(under.len() >= 2, "{under:?}");
        for (f, (pct, sym)) in under.iter().zip(&entries).take(2) {
            assert_eq!(&f.name, sym, "icicle {icicle}: {under:?}");
            // Widths are shares of all samples, as report's percentages.
            assert!(
                (f.w - pct).abs() < 0.01,
                "{}: {}% wide, report {pct}%",
                f.name,
                f.w
            );
        }
    }
}

/// A PNG's image data, inflated (its filtered rows).
fn png_pixels(png: &[u8]) -> Vec<u8> {
    use std::io::Read;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let mut idat = Vec::new();
    let mut at = 8;
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let kind = &png[at + 4..at + 8];
        if kind == b"IDAT" {
            idat.extend_from_slice(&png[at + 8..at + 8 + len]);
        }
        at += 12 + len;
    }
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(idat.as_slice())
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn the_flame_graph_renders_in_chromium() {
    let chromium = pt_testkit::chromium();
    let data = recording();
    let d = dir("flamegraph-render");
    let svg = d.join("f.svg");
    flamegraph(data, &svg, false);
    let png = d.join("f.png");
    let o = pt_testkit::headless(
        &chromium,
        &[
            "--window-size=1200,400",
            &format!("--screenshot={}", png.display()),
        ],
        &format!("file://{}", svg.display()),
        5_000,
    );
    let bytes = std::fs::read(&png).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let pixels = png_pixels(&bytes);
    // A blank page's rows are a handful of byte values; frames in many colours
    // and their text are far more.
    let mut seen = [false; 256];
    for &b in &pixels {
        seen[b as usize] = true;
    }
    let distinct = seen.iter().filter(|&&s| s).count();
    assert!(
        distinct > 64,
        "the screenshot looks empty ({distinct} byte values)"
    );

    // The same page blank for comparison: the check can fail.
    let blank = d.join("blank.svg");
    std::fs::write(
        &blank,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"400\"></svg>",
    )
    .unwrap();
    let png2 = d.join("blank.png");
    pt_testkit::headless(
        &chromium,
        &[
            "--window-size=1200,400",
            &format!("--screenshot={}", png2.display()),
        ],
        &format!("file://{}", blank.display()),
        5_000,
    );
    let blank_px = png_pixels(&std::fs::read(&png2).unwrap());
    let mut seen = [false; 256];
    for &b in &blank_px {
        seen[b as usize] = true;
    }
    assert!(
        seen.iter().filter(|&&s| s).count() <= 64,
        "a blank page passes the check"
    );
}
