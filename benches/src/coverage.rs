//! Workloads for the coverage decoders side by side (`examples/coverage_compare.rs`,
//! `libxdc/harness.c`): a fuzzing workload of many short traces and a long trace of
//! one program, with its code and the filter ranges libxdc needs.
//!
//! A workload is kept in a folder, the format the libxdc harness reads:
//!
//! * `image.txt`: `ADDR SIZE OFFSET` (hex) per section of code, its bytes at `OFFSET`
//!   in `image.bin`;
//! * `filter.txt`: up to four `FROM TO` (hex, inclusive) ranges;
//! * `fuzz.bin` and `fuzz.idx`: the short traces one after the other, and
//!   `OFFSET LEN` (decimal) per trace;
//! * `long.bin`: the long trace.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use pt_decoder::{Config, Image};

use crate::flow::{self, CallsMix, FlowTrace};
use crate::Rng;

/// The same program's short and long traces, its code and filter ranges.
pub struct Workload {
    /// The code.
    pub image: Image,
    /// The traces' configuration.
    pub config: Config,
    /// Up to four inclusive address ranges covering the code (libxdc's filter).
    pub filter: Vec<(u64, u64)>,
    /// The fuzzing workload: short traces, each decoded on its own.
    pub fuzz: Vec<Vec<u8>>,
    /// The long trace.
    pub long: Vec<u8>,
}

/// Up to four ranges covering the image's sections (libxdc takes four): sections
/// closer than 16 MiB share one, then the closest neighbours merge.
pub fn filter_ranges(image: &Image) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for s in image.sections() {
        match spans.last_mut() {
            Some(last) if s.vaddr() <= last.1.saturating_add(1 << 24) => {
                last.1 = last.1.max(s.last())
            }
            _ => spans.push((s.vaddr(), s.last())),
        }
    }
    while spans.len() > 4 {
        if let Some(i) = (0..spans.len() - 1).min_by_key(|&i| spans[i + 1].0 - spans[i].1) {
            spans[i].1 = spans[i + 1].1;
            spans.remove(i + 1);
        }
    }
    spans
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn hex(x: &str) -> io::Result<u64> {
    u64::from_str_radix(x, 16).map_err(|_| bad(format!("not a hex number: {x:?}")))
}

impl Workload {
    /// Generated runs of [`flow::calls_mixed`]'s program, as a fuzzer sees them:
    /// `runs` traces of [`flow::calls_mixed_run`], each from TIP.PGE at the start to
    /// TIP.PGD at the exit, with a seed of its own (another input: other functions
    /// called, other loop counts and branches), sized 1 to 50 KB; and one long run
    /// of about `long_bytes` (sizes without return compression and timing: the
    /// same runs with them are smaller). `mix` decides return compression and timing packets
    /// ([`CallsMix::NORETCOMP_UNTIMED`] for what libxdc and the others accept).
    pub fn generated(mix: CallsMix, runs: usize, long_bytes: usize) -> Workload {
        // Bytes of trace per instruction without return compression and timing,
        // measured on a first run: the runs' lengths (and so their paths) are the
        // same whatever `mix` says of the encoding.
        let plain = CallsMix {
            ret_compression: false,
            timing: false,
            ..mix
        };
        let probe = flow::calls_mixed_run(200_000, plain, 1);
        let per_insn = probe.trace.len() as f64 / probe.insns as f64;
        let mut rng = Rng::new(25);
        let fuzz = (0..runs as u64)
            .map(|seed| {
                let want = 1024 + rng.below(49 * 1024);
                let insns = (want as f64 / per_insn) as u64;
                flow::calls_mixed_run(insns, mix, 1000 + seed).trace
            })
            .collect();
        let long = flow::calls_mixed_run((long_bytes as f64 / per_insn) as u64, mix, 25);
        let image = long.image();
        Workload {
            filter: filter_ranges(&image),
            image,
            config: Config::default(),
            fuzz,
            long: long.trace,
        }
    }

    /// A workload of one generated trace (no fuzzing traces), e.g. for a test.
    pub fn of_trace(t: &FlowTrace) -> Workload {
        let image = t.image();
        Workload {
            filter: filter_ranges(&image),
            image,
            config: Config::default(),
            fuzz: Vec::new(),
            long: t.trace.clone(),
        }
    }

    /// Bytes in the fuzzing workload.
    pub fn fuzz_bytes(&self) -> usize {
        self.fuzz.iter().map(Vec::len).sum()
    }

    /// Writes the workload into `dir` (made if missing; see the [module docs](self)).
    pub fn export(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut txt = String::new();
        let mut bin = Vec::new();
        for s in self.image.sections() {
            let _ = writeln!(txt, "{:x} {:x} {:x}", s.vaddr(), s.len(), bin.len());
            bin.extend_from_slice(s.bytes());
        }
        std::fs::write(dir.join("image.txt"), txt)?;
        std::fs::write(dir.join("image.bin"), bin)?;
        let mut filter = String::new();
        for (a, b) in &self.filter {
            let _ = writeln!(filter, "{a:x} {b:x}");
        }
        std::fs::write(dir.join("filter.txt"), filter)?;
        let mut idx = String::new();
        let mut all = Vec::new();
        for t in &self.fuzz {
            let _ = writeln!(idx, "{} {}", all.len(), t.len());
            all.extend_from_slice(t);
        }
        std::fs::write(dir.join("fuzz.bin"), all)?;
        std::fs::write(dir.join("fuzz.idx"), idx)?;
        std::fs::write(dir.join("long.bin"), &self.long)
    }

    /// The image of a workload folder (`image.txt`, `image.bin`).
    pub fn load_image(dir: &Path) -> io::Result<Image> {
        let bin = std::fs::read(dir.join("image.bin"))?;
        let mut image = Image::new();
        for line in std::fs::read_to_string(dir.join("image.txt"))?.lines() {
            let v = line.split(' ').map(hex).collect::<io::Result<Vec<u64>>>()?;
            let [a, s, o] = v[..] else {
                return Err(bad(format!("image.txt: not ADDR SIZE OFFSET: {line:?}")));
            };
            let bytes = bin
                .get(o as usize..)
                .and_then(|b| b.get(..s as usize))
                .ok_or_else(|| bad(format!("image.txt: {line:?} is past image.bin")))?;
            image
                .add_bytes(a, bytes.to_vec(), "code")
                .map_err(|e| bad(format!("image.txt: {line:?}: {e}")))?;
        }
        Ok(image)
    }

    /// Reads a workload folder written by [`export`](Self::export).
    pub fn load(dir: &Path) -> io::Result<Workload> {
        let mut filter = Vec::new();
        for l in std::fs::read_to_string(dir.join("filter.txt"))?.lines() {
            let (a, b) = l
                .split_once(' ')
                .ok_or_else(|| bad(format!("filter.txt: not FROM TO: {l:?}")))?;
            filter.push((hex(a)?, hex(b)?));
        }
        let all = std::fs::read(dir.join("fuzz.bin"))?;
        let mut fuzz = Vec::new();
        for l in std::fs::read_to_string(dir.join("fuzz.idx"))?.lines() {
            let span = l.split_once(' ').and_then(|(o, n)| {
                let (o, n): (usize, usize) = (o.parse().ok()?, n.parse().ok()?);
                all.get(o..o.checked_add(n)?)
            });
            fuzz.push(
                span.ok_or_else(|| bad(format!("fuzz.idx: not OFFSET LEN in fuzz.bin: {l:?}")))?
                    .to_vec(),
            );
        }
        Ok(Workload {
            image: Self::load_image(dir)?,
            config: Config::default(),
            filter,
            fuzz,
            long: std::fs::read(dir.join("long.bin"))?,
        })
    }
}
