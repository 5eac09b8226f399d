//! `ptperf coverage`: the code an Intel PT perf.data covers, per DSO, and as files
//! for coverage viewers: line coverage from DWARF (`--lcov`, for genhtml), basic
//! blocks in drcov format (`--drcov`, for Lighthouse, bncov …), and the AFL edge
//! bitmap (`--afl-map`).
//!
//! Each queue's trace is decoded by pt-coverage's [`CoverageDecoder`] over the code
//! its thread's process mapped (all of it, as perf's timeless decoding sees it).
//! Blocks and edges are then attributed to the DSOs that hold them; the line of an
//! instruction is the one addr2line gives (pt-elf's [`SrcLines`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use pt_coverage::{CoverageDecoder, EdgeHash, Options};
use pt_decoder::insn::decode_at;
use pt_decoder::Image;
use pt_elf::srcline::{Answer, SrcLines};
use pt_elf::{SymbolOptions, Symbols};
use pt_encoder::ExecMode;
use pt_perf::session::{Context, Mapping};
use pt_perf::{Session, SessionOptions};

use crate::input;

const CMD: &str = "ptperf coverage";

/// `ptperf coverage`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "ptperf coverage",
    about = "Show the code an Intel PT perf.data covers per DSO; write line coverage (lcov), drcov or an AFL edge bitmap",
    after_help = input::EXIT_STATUS
)]
pub struct Args {
    /// input file name
    #[arg(short = 'i', long = "input", default_value = "perf.data")]
    pub input: String,
    /// list the covered functions of each DSO
    #[arg(short = 'F', long = "functions")]
    pub functions: bool,
    /// write line coverage in lcov's tracefile format ('-': stdout)
    #[arg(long = "lcov", value_name = "FILE")]
    pub lcov: Option<String>,
    /// write the covered basic blocks in drcov format (version 2)
    #[arg(long = "drcov", value_name = "FILE")]
    pub drcov: Option<String>,
    /// write the AFL edge bitmap (raw hit counts) of the whole recording
    #[arg(long = "afl-map", value_name = "FILE")]
    pub afl_map: Option<String>,
    /// bytes in the edge bitmap (a power of two)
    #[arg(long = "map-size", default_value_t = 65536)]
    pub map_size: usize,
    /// the edge hash: afl (documented in pt-coverage) or libxdc (libxdc's own)
    #[arg(long = "edge-hash", default_value = "afl", value_parser = ["afl", "libxdc"])]
    pub edge_hash: String,
    /// turn the bitmap's hit counts into AFL++'s classes before writing it
    #[arg(long = "classify")]
    pub classify: bool,
    /// only the code these comma separated process ids ran
    #[arg(long = "pid")]
    pub pid: Option<String>,
    /// only the code these comma separated thread ids ran
    #[arg(long = "tid")]
    pub tid: Option<String>,
    /// look for files under this directory
    #[arg(long = "symfs")]
    pub symfs: Option<String>,
    /// Disable symbol demangling
    #[arg(long = "no-demangle")]
    pub no_demangle: bool,
}

/// Runs `ptperf coverage ARGS`.
pub fn main(args: &[OsString]) -> ExitCode {
    crate::reading::<Args>(CMD, args, run)
}

/// What ran in one DSO.
#[derive(Default)]
struct Dso {
    /// Its file as found (for symbols and lines).
    path: Option<PathBuf>,
    build_id: Option<Vec<u8>>,
    /// Where file offset 0 would be mapped (drcov's module base) and the end of its
    /// highest mapping.
    base: u64,
    end: u64,
    /// Its executable mappings: (start, end, pgoff), for the functions that did
    /// not run.
    maps: Vec<(u64, u64, u64)>,
    /// Blocks by start address, with their end and count.
    blocks: BTreeMap<u64, (u64, u64)>,
    edges: u64,
    /// The process whose image holds the code.
    pid: Option<u32>,
}

impl Dso {
    /// The file offset of `ip` through the mapping that holds it (perf's
    /// `map__map_ip`).
    fn file_offset(&self, ip: u64) -> u64 {
        self.maps
            .iter()
            .find(|&&(start, end, _)| start <= ip && ip < end)
            .map_or(ip.wrapping_sub(self.base), |&(start, _, pgoff)| {
                ip - start + pgoff
            })
    }
}

fn run(a: Args) -> Result<input::Outcome, String> {
    if !a.map_size.is_power_of_two() {
        return Err(format!("{CMD}: --map-size must be a power of two"));
    }
    let file = input::open(CMD, &a.input)?;
    let perf = input::parse(CMD, &a.input, &file)?;
    let mut so = SessionOptions::for_file(&a.input);
    so.sysroot = a.symfs.as_ref().map(PathBuf::from);
    let vdso = pt_elf::vdso::OwnVdso::new();
    if let Some(v) = &vdso {
        so.vdso.push(("[vdso]".into(), v.path().to_path_buf()));
    }
    let session = input::session(CMD, &a.input, &perf, so)?;
    let hash = if a.edge_hash == "libxdc" {
        EdgeHash::Libxdc
    } else {
        EdgeHash::Afl
    };
    let mut cov = CoverageDecoder::new(Options {
        map_size: a.map_size,
        hash,
        collect: true,
        config: *session.config(),
        ..Options::default()
    });
    let pids = a
        .pid
        .as_deref()
        .map(|s| crate::script::parse_list(s, "pid"))
        .transpose()
        .map_err(|e| format!("{CMD}: {e}"))?;
    let tids = a
        .tid
        .as_deref()
        .map(|s| crate::script::parse_list(s, "tid"))
        .transpose()
        .map_err(|e| format!("{CMD}: {e}"))?;
    let wanted = |ctx: &Context| {
        let has = |list: &Option<Vec<u32>>, id: Option<u32>| match list {
            None => true,
            Some(l) => id.is_some_and(|id| l.contains(&id)),
        };
        has(&pids, ctx.pid) && has(&tids, ctx.tid)
    };
    let mut map = vec![0u8; a.map_size];
    let mut dsos: BTreeMap<String, Dso> = BTreeMap::new();
    let mut errors = 0u64;
    for (q, queue) in session.queues().iter().enumerate() {
        for s in 0..queue.segments.len() {
            let trace = queue.segment_bytes(s);
            // A per-CPU queue runs one thread after another: each piece (from a
            // PSB on) over the image of the thread running at its PSB's time.
            let pieces = if session.per_cpu() && session.is_timed() {
                psb_pieces(trace, session.config())
            } else {
                vec![(0, None)]
            };
            // Consecutive pieces of one thread over one image decode as one (an
            // exec between two PSBs of a thread changes its image).
            let mut runs: Vec<(usize, usize, Context, &Image)> = Vec::new();
            for (i, &(start, tsc)) in pieces.iter().enumerate() {
                let end = pieces.get(i + 1).map_or(trace.len(), |p| p.0);
                let time = tsc.map(|t| session.tsc_to_time(t));
                let ctx = session.running(q, time);
                let image = session.image(ctx.pid, time);
                match runs.last_mut() {
                    Some(r)
                        if (r.2.pid, r.2.tid) == (ctx.pid, ctx.tid) && std::ptr::eq(r.3, image) =>
                    {
                        r.1 = end
                    }
                    _ if start == end => {}
                    _ => runs.push((start, end, ctx, image)),
                }
            }
            for (start, end, ctx, image) in runs {
                if !wanted(&ctx) {
                    continue;
                }
                cov.reset();
                errors += cov.decode(&trace[start..end], image).errors;
                for e in cov.errors() {
                    // Offsets in the queue's trace, not in the piece.
                    let e = pt_coverage::CoverageError {
                        offset: e.offset + start as u64,
                        ..*e
                    };
                    eprintln!("{CMD}: {}: warning: queue {}: {e}", a.input, queue.idx);
                }
                for (m, b) in map.iter_mut().zip(cov.map()) {
                    *m = m.wrapping_add(*b);
                }
                for (block, n) in cov.blocks() {
                    if let Some(d) = dso_of(&session, &mut dsos, ctx.pid, block.start) {
                        let e = d.blocks.entry(block.start).or_insert((block.end, 0));
                        e.0 = e.0.max(block.end);
                        e.1 += n;
                    }
                }
                for (edge, n) in cov.edges() {
                    if let Some(d) = dso_of(&session, &mut dsos, ctx.pid, edge.from) {
                        d.edges += n;
                    }
                }
            }
        }
    }
    if errors > 0 {
        let s = if errors == 1 { "" } else { "s" };
        eprintln!(
            "{CMD}: {}: warning: {errors} trace decode error{s}; the edges before each are kept",
            a.input
        );
    }
    let mut symbols = Symbols::new(SymbolOptions {
        demangle: !a.no_demangle,
        ..Default::default()
    });
    print_summary(&a, &session, &dsos, &mut symbols)?;
    if let Some(out) = &a.afl_map {
        if a.classify {
            pt_coverage::classify_counts(&mut map);
        }
        write_out(out, |w| w.write_all(&map))?;
    }
    if let Some(out) = &a.drcov {
        write_out(out, |w| write_drcov(w, &dsos))?;
    }
    if let Some(out) = &a.lcov {
        let text = lcov(&session, &dsos, &mut symbols);
        write_out(out, |w| w.write_all(text.as_bytes()))?;
    }
    Ok(input::finish(CMD, &a.input, &session))
}

/// Where `trace` splits at its PSBs, with the TSC of each PSB+ (if it has one):
/// `(offset, tsc)`, the first piece from 0 (up to the first PSB, which nothing
/// decodes). Threads switched between two PSBs are taken for the one running at
/// the first: a per-CPU recording's finer switches would need each packet's time.
fn psb_pieces(trace: &[u8], config: &pt_decoder::Config) -> Vec<(usize, Option<u64>)> {
    let mut pieces = vec![(0, None)];
    let mut pkt = pt_decoder::PacketDecoder::new(trace, config);
    let mut in_psb = false;
    while pkt.sync_forward().is_ok() {
        for r in &mut pkt {
            let Ok((off, p)) = r else { break };
            match p {
                pt_decoder::Packet::Psb => {
                    pieces.push((off as usize, None));
                    in_psb = true;
                }
                pt_decoder::Packet::Psbend => in_psb = false,
                pt_decoder::Packet::Tsc { tsc } if in_psb => {
                    if let Some(last) = pieces.last_mut() {
                        last.1 = Some(tsc);
                    }
                }
                _ => {}
            }
        }
    }
    pieces
}

/// The DSO that holds `ip` in process `pid`, added on first use.
fn dso_of<'d>(
    session: &Session<'_>,
    dsos: &'d mut BTreeMap<String, Dso>,
    pid: Option<u32>,
    ip: u64,
) -> Option<&'d mut Dso> {
    let m: &Mapping = session.mapping(pid, ip, None)?;
    let d = dsos.entry(m.filename.clone()).or_insert_with(|| Dso {
        path: session.code_file(m).ok().map(|c| c.path.clone()),
        build_id: m
            .build_id
            .map(|b| b.bytes[..usize::from(b.len).min(20)].to_vec()),
        base: m.start.wrapping_sub(m.pgoff),
        end: m.end(),
        pid,
        ..Dso::default()
    });
    let span = (m.start, m.end(), m.pgoff);
    if !d.maps.contains(&span) {
        d.maps.push(span);
        d.base = d.base.min(m.start.wrapping_sub(m.pgoff));
        d.end = d.end.max(m.end());
    }
    Some(d)
}

fn write_out(
    path: &str,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), String> {
    let r = if path == "-" {
        let stdout = std::io::stdout();
        let mut w = std::io::BufWriter::new(stdout.lock());
        write(&mut w).and_then(|()| w.flush())
    } else {
        std::fs::File::create(path).and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            write(&mut w).and_then(|()| w.flush())
        })
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("{CMD}: {path}: {e}")),
    }
}

/// The symbol table of `d` (named `name`), if its file was found.
fn table<'s>(symbols: &'s mut Symbols, name: &str, d: &Dso) -> Option<&'s pt_elf::SymbolTable> {
    let path = d.path.as_ref()?;
    let id = symbols.dso_table(path, name, d.build_id.as_deref());
    Some(symbols.table(id))
}

fn print_summary(
    a: &Args,
    _session: &Session<'_>,
    dsos: &BTreeMap<String, Dso>,
    symbols: &mut Symbols,
) -> Result<(), String> {
    let mut out = String::new();
    out.push_str(&format!(
        "# {:<50} {:>9} {:>9} {:>9} {:>11}\n",
        "DSO", "functions", "blocks", "edges", "bytes"
    ));
    let mut detail = String::new();
    for (name, d) in dsos {
        let mut funcs: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        let bytes: u64 = d.blocks.iter().map(|(s, (e, _))| e - s).sum();
        if let Some(t) = table(symbols, name, d) {
            for (&start, &(_, n)) in &d.blocks {
                let name = t
                    .find(d.file_offset(start))
                    .map_or_else(|| "[unknown]".to_string(), |s| s.name().to_string());
                let f = funcs.entry(name).or_insert((u64::MAX, 0, 0));
                f.0 = f.0.min(start);
                f.1 += 1;
                f.2 += n;
            }
        }
        out.push_str(&format!(
            "  {:<50} {:>9} {:>9} {:>9} {:>11}\n",
            name,
            funcs.len(),
            d.blocks.len(),
            d.edges,
            bytes
        ));
        if a.functions {
            detail.push_str(&format!(
                "\n{name}:\n  {:>8} {:>12}  function\n",
                "blocks", "runs"
            ));
            let mut by_addr: Vec<_> = funcs.into_iter().collect();
            by_addr.sort_by_key(|(_, f)| f.0);
            for (fname, (_, nblocks, runs)) in by_addr {
                detail.push_str(&format!("  {nblocks:>8} {runs:>12}  {fname}\n"));
            }
        }
    }
    out.push_str(&detail);
    write_out("-", |w| w.write_all(out.as_bytes()))
}

/// drcov version 2: a module table (one module per DSO, based where its file
/// offset 0 would be mapped), then the blocks as (offset, size, module) records.
fn write_drcov(w: &mut dyn Write, dsos: &BTreeMap<String, Dso>) -> std::io::Result<()> {
    writeln!(w, "DRCOV VERSION: 2")?;
    writeln!(w, "DRCOV FLAVOR: ptperf")?;
    writeln!(w, "Module Table: version 2, count {}", dsos.len())?;
    writeln!(
        w,
        "Columns: id, base, end, entry, checksum, timestamp, path"
    )?;
    for (i, (name, d)) in dsos.iter().enumerate() {
        writeln!(
            w,
            "{i:3}, {:#018x}, {:#018x}, {:#018x}, {:#010x}, {:#010x}, {name}",
            d.base, d.end, 0, 0, 0
        )?;
    }
    let mut records = Vec::new();
    for (i, d) in dsos.values().enumerate() {
        for (&start, &(end, _)) in &d.blocks {
            // drcov's sizes are 16 bits: longer blocks are split.
            let mut at = start;
            while at < end {
                let size = (end - at).min(0xffff);
                records.extend_from_slice(&(d.file_offset(at) as u32).to_le_bytes());
                records.extend_from_slice(&(size as u16).to_le_bytes());
                records.extend_from_slice(&(i as u16).to_le_bytes());
                at += size;
            }
        }
    }
    writeln!(w, "BB Table: {} bbs", records.len() / 8)?;
    w.write_all(&records)
}

/// Per source file: line → hits; function name → (first line, runs).
#[derive(Default)]
struct SourceFile {
    lines: BTreeMap<u32, u64>,
    functions: BTreeMap<String, (u32, u64)>,
}

/// Instruction addresses of `[start, end)` in `image`.
fn insns(image: &Image, start: u64, end: u64, mut each: impl FnMut(u64)) {
    let mut ip = start;
    while ip < end {
        let size = decode_at(image, ip, ExecMode::Bit64).map_or(1, |i| u64::from(i.size));
        each(ip);
        ip += size;
    }
}

/// lcov's tracefile: for each source file, every line with code in the functions
/// of the DSOs that ran (all functions for executables, the functions that ran for
/// shared objects), with its hits (the most runs of a block holding one of its
/// instructions); FN/FNDA for the functions.
fn lcov(session: &Session<'_>, dsos: &BTreeMap<String, Dso>, symbols: &mut Symbols) -> String {
    let mut lines = SrcLines::new(true);
    let mut files: BTreeMap<String, SourceFile> = BTreeMap::new();
    for (name, d) in dsos {
        let Some(path) = d.path.clone() else {
            continue;
        };
        let image = session.image(d.pid, None);
        // Hits per instruction.
        let mut hits: HashMap<u64, u64> = HashMap::new();
        for (&start, &(end, n)) in &d.blocks {
            insns(image, start, end, |ip| {
                let h = hits.entry(ip).or_insert(0);
                *h = (*h).max(n);
            });
        }
        let shared = name.contains(".so");
        let Some(t) = table(symbols, name, d) else {
            continue;
        };
        // The functions to list: (start ip, end ip, name).
        let mut funcs = Vec::new();
        let ran: BTreeSet<u64> = d
            .blocks
            .keys()
            .filter_map(|&s| t.find(d.file_offset(s)).map(|f| f.start))
            .collect();
        for sym in t.iter() {
            if sym.end <= sym.start || (shared && !ran.contains(&sym.start)) {
                continue;
            }
            let Some(&(ms, me, pg)) = d
                .maps
                .iter()
                .find(|&&(ms, me, pg)| pg <= sym.start && sym.start < pg + (me - ms))
            else {
                continue;
            };
            let start = sym.start - pg + ms;
            let end = (sym.end - pg + ms).min(me);
            funcs.push((start, end, sym.name().to_string()));
        }
        for (start, end, fname) in funcs {
            let mut first: Option<(String, u32)> = None;
            let mut entry_runs = 0;
            insns(image, start, end, |ip| {
                let Answer::Line { file, line } =
                    lines.answer(name, Some(&path), d.build_id.as_deref(), d.file_offset(ip))
                else {
                    return;
                };
                if line == 0 || file.starts_with("??") {
                    return;
                }
                let h = hits.get(&ip).copied().unwrap_or(0);
                if ip == start {
                    entry_runs = h;
                }
                let f = files.entry(file.to_string()).or_default();
                let l = f.lines.entry(line).or_insert(0);
                *l = (*l).max(h);
                if first.is_none() {
                    first = Some((file.to_string(), line));
                }
            });
            if let Some((file, line)) = first {
                let f = files.entry(file).or_default();
                let e = f.functions.entry(fname).or_insert((line, 0));
                e.1 = e.1.max(entry_runs);
            }
        }
    }
    // genhtml reads every source file a tracefile names: leave out those not on
    // this machine (e.g. libc's, without its source package), and say so.
    let before = files.len();
    files.retain(|file, _| std::path::Path::new(file).is_file());
    let missing = before - files.len();
    if missing > 0 {
        eprintln!("{CMD}: lcov: {missing} source files not found here are left out");
    }
    let mut out = String::from("TN:\n");
    for (file, f) in files {
        out.push_str(&format!("SF:{file}\n"));
        for (fname, (line, _)) in &f.functions {
            out.push_str(&format!("FN:{line},{fname}\n"));
        }
        for (fname, (_, runs)) in &f.functions {
            out.push_str(&format!("FNDA:{runs},{fname}\n"));
        }
        let fnh = f.functions.values().filter(|v| v.1 > 0).count();
        out.push_str(&format!("FNF:{}\nFNH:{fnh}\n", f.functions.len()));
        for (line, hits) in &f.lines {
            out.push_str(&format!("DA:{line},{hits}\n"));
        }
        let lh = f.lines.values().filter(|&&h| h > 0).count();
        out.push_str(&format!("LF:{}\nLH:{lh}\nend_of_record\n", f.lines.len()));
    }
    out
}
