//! From a .ptt source to the generated files: the trace (`.pt`), the expectations
//! (`.exp`), and, with the assembler's output, the image (`.bin`) and listing (`.lst`).
//!
//! Directives are processed in source order until the first `.exp` directive; from
//! there on the file is expected output (see [`crate::exp`]). Nothing is written until
//! everything has been generated, and files are written under temporary names and
//! renamed at the end, so an error never leaves partial output behind.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::asm::{assemble, AsmError};
use crate::cstr::is_c_space;
use crate::directive::{parse_packet, Emit};
use crate::exp;
use crate::labels::Labels;
use crate::ptt::{exp_file_name, file_root, find_directive, split_lines, Cpu, Marker};
use crate::sideband::Sideband;

/// An error with the source position it belongs to; displays as `file:line: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct GenError {
    /// The .ptt file as named on the command line.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What went wrong.
    pub message: String,
}

impl From<AsmError> for GenError {
    fn from(e: AsmError) -> Self {
        Self {
            file: e.file,
            line: e.line,
            message: e.message,
        }
    }
}

/// One packet directive and where its bytes went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// 1-based source line of the directive.
    pub line: usize,
    /// Offset of the first byte in the trace.
    pub offset: u64,
    /// The directive's `name:` label, if any.
    pub label: Option<String>,
    /// What was written.
    pub emit: Emit,
}

/// An expected-output file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpFile {
    /// File name, e.g. `foo-ptxed-cpu_6_158.exp`.
    pub name: String,
    /// Its content.
    pub text: String,
}

/// The trace and expectations of one .ptt file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The packets, in source order.
    pub packets: Vec<Placed>,
    /// The encoded trace.
    pub bytes: Vec<u8>,
    /// The expectation sections, in source order (a tool may appear twice; the later
    /// section then replaces the earlier file, as with pttc).
    pub exps: Vec<ExpFile>,
    /// The side-band streams written by `@sb` directives.
    pub sideband: Sideband,
}

/// Process the directives of `source` (named `file` in messages) against the
/// assembler's `labels`. `root` and `cpu` name the .exp files.
pub fn process(
    source: &str,
    file: &str,
    mut labels: Labels,
    root: &str,
    cpu: Option<Cpu>,
) -> Result<Trace, GenError> {
    let lines = split_lines(source);
    let mut trace = Trace::default();
    for (index, text) in lines.iter().enumerate() {
        let line = index + 1;
        let fail = |message: String| GenError {
            file: file.to_string(),
            line,
            message,
        };
        let directive = match find_directive(text) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => return Err(fail(e.to_string())),
        };
        if directive.name.is_empty() {
            return Err(fail("invalid syntax (missing directive)".into()));
        }
        let offset = trace.bytes.len() as u64;
        if directive.name == ".exp" {
            labels
                .define_packet("eos", offset)
                .map_err(|e| fail(format!("cannot define 'eos' ({e})")))?;
            let sections =
                exp::expand(&lines, index, &directive.payload, &labels).map_err(|e| GenError {
                    file: file.to_string(),
                    line: e.line,
                    message: format!(
                        "error generating {}: {}",
                        exp_file_name(root, &e.tool, cpu),
                        e.reason
                    ),
                })?;
            trace.exps = sections
                .into_iter()
                .map(|s| ExpFile {
                    name: exp_file_name(root, &s.tool, cpu),
                    text: s.text,
                })
                .collect();
            break;
        }
        let (label, name) = match directive.name.split_once(':') {
            Some((label, rest)) => {
                let rest = rest.trim_start_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
                if rest.is_empty() {
                    return Err(fail("invalid syntax (missing directive)".into()));
                }
                let offset = match directive.marker {
                    Marker::Pt => offset,
                    Marker::Sb => trace
                        .sideband
                        .offset()
                        .map_err(|e| fail(format!("sideband label ({e})")))?,
                };
                labels
                    .define_packet(label, offset)
                    .map_err(|e| fail(format!("label '{label}' ({e})")))?;
                (Some(label.to_string()), rest)
            }
            None => (None, directive.name.as_str()),
        };
        if directive.marker == Marker::Sb {
            trace
                .sideband
                .process(name, &directive.payload, root, &labels)
                .map_err(|e| fail(format!("{name}: {e}")))?;
            continue;
        }
        let emit =
            parse_packet(name, &directive.payload, &labels).map_err(|e| fail(e.to_string()))?;
        emit.encode_into(&mut trace.bytes)
            .map_err(|e| fail(format!("encoder error in directive {name} ({e})")))?;
        trace.packets.push(Placed {
            line,
            offset,
            label,
            emit,
        });
    }
    Ok(trace)
}

/// Everything pttestgen writes for one .ptt file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outputs {
    /// The common root of the file names.
    pub root: String,
    /// The assembled image (`<root>.bin`).
    pub bin: Vec<u8>,
    /// The assembler listing (`<root>.lst`).
    pub lst: String,
    /// The trace and expectations.
    pub trace: Trace,
}

/// Assemble a .ptt source read from `path` and generate everything pttestgen writes.
/// `cpu` only affects the names of the .exp files.
pub fn generate(source: &str, path: &Path, cpu: Option<Cpu>) -> Result<Outputs, GenError> {
    generate_for(source, path, &[cpu])
}

/// Like [`generate`], with one set of .exp files per entry of `cpus` (the trace, image
/// and listing do not depend on the processor). `cpus` must not be empty.
pub fn generate_for(source: &str, path: &Path, cpus: &[Option<Cpu>]) -> Result<Outputs, GenError> {
    let file = path.display().to_string();
    let asm = assemble(source, &file)?;
    // pttc takes the image's base address from the listing's `[org ...]` line and
    // refuses files without one; ptxed needs it too.
    if !asm.listing.contains("[org") {
        return Err(GenError {
            file,
            line: 0,
            message: "an 'org' directive is required".into(),
        });
    }
    let mut labels = Labels::from_assembly(
        asm.labels,
        asm.org,
        asm.sections
            .iter()
            .map(|s| (s.name.clone(), s.vstart, s.offset, s.size)),
    );
    let root = file_root(path);
    let mut trace = Trace::default();
    for (i, &cpu) in cpus.iter().enumerate() {
        // A 200k-label file's table is worth not copying for the last run.
        let labels = if i + 1 == cpus.len() {
            std::mem::take(&mut labels)
        } else {
            labels.clone()
        };
        let t = process(source, &file, labels, &root, cpu)?;
        if i == 0 {
            trace = t;
        } else {
            trace.exps.extend(t.exps);
        }
    }
    Ok(Outputs {
        root,
        bin: asm.bytes,
        lst: asm.listing,
        trace,
    })
}

impl Outputs {
    /// The files to write, in order: `.bin`, `.pt`, `.lst`, the `.exp` files (one
    /// per name; a later section of the same name wins), then the `.sb` files.
    pub fn files(&self) -> Vec<(String, &[u8])> {
        let mut files: Vec<(String, &[u8])> = vec![
            (format!("{}.bin", self.root), &self.bin),
            (format!("{}.pt", self.root), &self.trace.bytes),
            (format!("{}.lst", self.root), self.lst.as_bytes()),
        ];
        for e in &self.trace.exps {
            files.retain(|(n, _)| *n != e.name);
            files.push((e.name.clone(), e.text.as_bytes()));
        }
        for sb in self.trace.sideband.printed() {
            files.push((sb.final_name(), &sb.bytes));
        }
        files
    }

    /// The names to print as pttc prints them: one per `.exp` section, then one per
    /// side-band stream (the last opened first).
    pub fn printed(&self) -> Vec<String> {
        let exps = self.trace.exps.iter().map(|e| e.name.clone());
        exps.chain(self.trace.sideband.printed().map(|sb| sb.final_name()))
            .collect()
    }

    /// Write all files into `dir`: each goes to a temporary name first and all are
    /// renamed once every write succeeded. On error no new file is left behind.
    pub fn write(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let files = self.files();
        let pid = std::process::id();
        let mut staged: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(files.len());
        let result = (|| {
            for (name, bytes) in &files {
                let tmp = dir.join(format!(".{name}.{pid}.tmp"));
                staged.push((tmp.clone(), dir.join(name)));
                fs::write(&tmp, bytes)?;
            }
            for (tmp, dest) in &staged {
                fs::rename(tmp, dest)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            for (tmp, _) in &staged {
                let _ = fs::remove_file(tmp);
            }
            return Err(e);
        }
        Ok(staged.into_iter().map(|(_, dest)| dest).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels() -> Labels {
        let mut m = BTreeMap::new();
        m.insert("l1".to_string(), 0x1000);
        m.insert("l2".to_string(), 0x1002);
        Labels::from_assembly(m, 0x1000, [])
    }

    const SRC: &str = "\
org 0x1000
bits 64
; @pt p1: psb()
; @pt p2:fup(3: %l1)
; @pt psbend()
l1: nop ; @pt p3:  tip.pgd(0: 0)
l2: hlt
; @pt .exp(ptdump)
;%0p1  psb
;%0p2  fup 3: %?l1
;%0p3  tip.pgd 0: %?l2.0   # comment
;[%eos, end]
; @pt .exp(ptxed)
;%0l1 # nop
";

    #[test]
    fn trace_and_expectations() {
        let t = process(SRC, "t.ptt", labels(), "t", None).unwrap();
        let mut want = [0x02, 0x82].repeat(8);
        want.extend([0x7d, 0x00, 0x10, 0, 0, 0, 0, 0x02, 0x23, 0x01]);
        assert_eq!(t.bytes, want);
        assert_eq!(t.packets.len(), 4);
        assert_eq!(t.packets[1].line, 4);
        assert_eq!(t.packets[1].offset, 16);
        assert_eq!(t.packets[1].label.as_deref(), Some("p2"));
        assert_eq!(t.packets[3].offset, 25);
        assert_eq!(t.exps.len(), 2);
        assert_eq!(t.exps[0].name, "t-ptdump.exp");
        assert_eq!(
            t.exps[0].text,
            "0000000000000000  psb\n\
             0000000000000010  fup 3: 0000000000001000\n\
             0000000000000019  tip.pgd 0: ????????????????\n\
             [1a, end]\n"
        );
        assert_eq!(t.exps[1].name, "t-ptxed.exp");
        assert_eq!(t.exps[1].text, "0000000000001000\n");
        let t = process(SRC, "t.ptt", labels(), "t", Some("6/158".parse().unwrap())).unwrap();
        assert_eq!(t.exps[1].name, "t-ptxed-cpu_6_158.exp");
    }

    fn error(src: &str) -> GenError {
        process(src, "e.ptt", labels(), "e", None).unwrap_err()
    }

    #[test]
    fn errors_carry_lines() {
        let e = error("nop\n; @pt psb()\n; @pt tip(3: %nowhere)\n");
        assert_eq!(e.line, 3);
        assert_eq!(
            e.to_string(),
            "e.ptt:3: tip: parsing failed (no such label)"
        );
        assert_eq!(error("; @pt psb\n").message, "invalid syntax (missing '(')");
        assert_eq!(
            error("; @pt (1)\n").message,
            "invalid syntax (missing directive)"
        );
        assert_eq!(
            error("; @pt p1: (1)\n").message,
            "invalid syntax (missing directive)"
        );
        assert_eq!(
            error("; @pt l1: psb()\n").message,
            "label 'l1' (label name is not unique)"
        );
        assert_eq!(error("; @pt p: psb()\n; @pt p: pad()\n").line, 2);
        assert_eq!(error("; @pt eos: psb()\n; @pt .exp(x)\n").line, 2);
        assert_eq!(error("; @sb raw-8(1)\n").message, "raw-8: no sideband file");
        assert_eq!(
            error("; @sb s1: raw-8(1)\n").message,
            "sideband label (no sideband file)"
        );
        assert_eq!(error("; @sb primary(pevent)\n; @sb bogus()\n").line, 2);
        let e = error("; @pt .exp(ptdump)\n;\n;%what\n");
        assert_eq!(e.line, 3);
        assert_eq!(
            e.message,
            "error generating e-ptdump.exp: no such label '%what'"
        );
    }

    #[test]
    fn sideband_streams_and_labels() {
        let src = "\
org 0x1000
; @sb primary(raw)
; @sb r1: raw-16(0x1234)
; @pt p1: pad()
; @sb secondary(pevent, cpu1)
; @sb pevent-sample_type(tid)
; @sb e1: pevent-itrace-start(1, 2, 3, 4)
; @sb primary(raw)
; @sb r2: raw-8(0xff)
; @pt .exp(ptdump)
;%0r2 %0e1 %0p1
";
        let t = process(src, "s.ptt", labels(), "s", None).unwrap();
        assert_eq!(t.bytes, [0]);
        let files: Vec<(String, Vec<u8>)> = t
            .sideband
            .printed()
            .map(|f| (f.final_name(), f.bytes.clone()))
            .collect();
        assert_eq!(files.len(), 2);
        assert_eq!(
            files[0].0,
            "s-cpu1-pevent-secondary,sample-type=0x2,time-zero=0x0,time-shift=0x0,\
             time-mult=0x1.sb"
        );
        assert_eq!(files[0].1.len(), 24);
        assert_eq!(
            files[1],
            ("s-raw-primary.sb".to_string(), vec![0x34, 0x12, 0xff])
        );
        // Side-band labels are offsets in their own stream.
        assert_eq!(
            t.exps[0].text,
            "0000000000000002 0000000000000000 0000000000000000\n"
        );
        let o = Outputs {
            root: "s".into(),
            bin: vec![],
            lst: String::new(),
            trace: t,
        };
        assert_eq!(
            o.printed()[1..],
            [files[0].0.clone(), "s-raw-primary.sb".to_string()]
        );
        let names: Vec<String> = o.files().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names[4..], o.printed()[1..]);
    }

    #[test]
    fn directives_after_exp_are_text() {
        let t = process("; @pt .exp()\n; @pt psb()\n", "x.ptt", labels(), "x", None).unwrap();
        assert!(t.bytes.is_empty());
        assert_eq!(t.exps[0].name, "x-.exp");
        assert_eq!(t.exps[0].text, " @pt psb()\n");
    }

    #[test]
    fn write_leaves_nothing_on_error() {
        let base = std::env::temp_dir().join(format!("pttestgen-gen-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).unwrap();
        let o = Outputs {
            root: "w".into(),
            bin: vec![0x90],
            lst: String::new(),
            trace: Trace::default(),
        };
        // A directory where the .pt file should go: the rename fails.
        fs::create_dir(base.join("w.pt")).unwrap();
        assert!(o.write(&base).is_err());
        let mut left: Vec<_> = fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        // w.bin may have been renamed before the failure; no temporary file remains.
        assert!(left.iter().all(|n| !n.ends_with(".tmp")), "{left:?}");
        fs::remove_dir(base.join("w.pt")).unwrap();
        let written = o.write(&base).unwrap();
        assert_eq!(written.len(), 3);
        assert_eq!(fs::read(base.join("w.bin")).unwrap(), [0x90]);
        assert!(o.write(&base.join("missing")).is_err());
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn outputs_files_and_names() {
        let t = process(
            "; @pt pad()\n; @pt .exp(a)\n;1\n; @pt .exp(a)\n;2\n",
            "x.ptt",
            labels(),
            "x",
            None,
        )
        .unwrap();
        let o = Outputs {
            root: "x".into(),
            bin: vec![0x90],
            lst: "listing\n".into(),
            trace: t,
        };
        assert_eq!(o.printed(), ["x-a.exp", "x-a.exp"]);
        let files = o.files();
        let names: Vec<_> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x.bin", "x.pt", "x.lst", "x-a.exp"]);
        assert_eq!(files[3].1, b"2\n");
        assert_eq!(files[1].1, [0x00]);
    }
}
