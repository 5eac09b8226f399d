//! The code each process ran: its mappings over time (MMAP/MMAP2 records, inherited at
//! FORK, dropped at exec), where their bytes are found (the build-id cache, a sysroot,
//! the file itself), and the [`Image`] of a process at a time.
//!
//! A process's mappings form *epochs*: an exec starts an empty one, a fork one with
//! the parent's mappings, and a mapping that overlaps one already there starts one
//! with the old mappings and the new one on top (perf's maps fixup). Mappings that
//! overlap nothing join the current epoch, so an epoch's image may hold code mapped
//! a little later than some of the trace decoded with it: code cannot run before it
//! is mapped, so this never changes what a valid trace decodes to, and it keeps the
//! number of images (and cold decoder caches) small.
//!
//! Code that is in no file (anonymous memory, JIT code, the vdso when no copy of it
//! was kept) is a hole in the image: the decoder reports `NoMap` there, and
//! [`MissingCode`] says why.

use pt_decoder::image::{Image, Section};
use pt_elf::{BuildIdCache, EntryKind};
use pt_perf_data::BuildId;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

/// What a mapping maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MappingKind {
    /// A file.
    File,
    /// The vdso (`[vdso]`, `[vdso32]`, `[vdsox32]`).
    Vdso,
    /// Anonymous memory (`//anon`, `[heap]`, `[stack]`, `/memfd:…`, deleted files of
    /// `/dev/zero`): JIT compilers write code there.
    Anonymous,
    /// Code a JIT wrote out for perf (`jitted-<pid>-<n>.so`, `perf inject --jit`).
    Jit,
    /// The kernel or a kernel module.
    Kernel,
    /// Another special mapping (`[vsyscall]`, `[uprobes]`, …).
    Special,
}

impl MappingKind {
    /// The kind of a mapping of `filename` (`kernel`: a kernel-mode record).
    pub fn of(filename: &str, kernel: bool) -> Self {
        if kernel
            || filename.starts_with("[kernel.kallsyms]")
            || filename.starts_with("[guest.kernel")
        {
            return MappingKind::Kernel;
        }
        match filename {
            "[vdso]" | "[vdso32]" | "[vdsox32]" => MappingKind::Vdso,
            "//anon" | "[heap]" | "[stack]" | "/anon_hugepage" | "/SYSV00000000" => {
                MappingKind::Anonymous
            }
            f if f.starts_with("/memfd:")
                || f.starts_with("/dev/zero")
                || f.starts_with("[anon:")
                || f.starts_with("//anon")
                || f.starts_with("[stack:") =>
            {
                MappingKind::Anonymous
            }
            f if file_name(f).starts_with("jitted-") && f.ends_with(".so") => MappingKind::Jit,
            f if f.starts_with('[') => MappingKind::Special,
            _ => MappingKind::File,
        }
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// One mapping from an MMAP or MMAP2 record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The process (`None`: the kernel's, pid -1).
    pub pid: Option<u32>,
    /// First address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file as the record names it.
    pub filename: String,
    /// Its build id: from the MMAP2 record, or the BUILD_ID feature's entry for the
    /// file.
    pub build_id: Option<BuildId>,
    /// Protection (MMAP2 only).
    pub prot: Option<u32>,
    /// When (perf time), if the record had one.
    pub time: Option<u64>,
    /// The record's file offset.
    pub record_offset: u64,
    /// What it maps.
    pub kind: MappingKind,
}

/// perf's short name of a dso: its file name; `[vdso]`, `[kernel.kallsyms]` and
/// the like as they are.
pub fn short_name(dso: &str) -> &str {
    if dso.starts_with('[') {
        return dso;
    }
    dso.rsplit('/').next().unwrap_or(dso)
}

impl Mapping {
    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
    }

    /// The name perf gives its dso: the kernel's map is recorded as
    /// `[kernel.kallsyms]_text` (the symbol its address is taken from) and named
    /// `[kernel.kallsyms]`; other names as recorded.
    pub fn dso_name(&self) -> &str {
        match (self.kind, self.filename.find(']')) {
            (MappingKind::Kernel, Some(i)) if self.filename.starts_with('[') => {
                self.filename.get(..=i).unwrap_or(&self.filename)
            }
            _ => &self.filename,
        }
    }

    /// Whether `ip` lies in it.
    pub fn contains(&self, ip: u64) -> bool {
        self.start <= ip && ip < self.end()
    }

    /// The file offset of `ip` (perf's `map__map_ip`).
    pub fn file_offset(&self, ip: u64) -> u64 {
        ip.wrapping_sub(self.start).wrapping_add(self.pgoff)
    }
}

/// Why a mapping's code is not in the image.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingCode {
    /// Nothing is mapped at the address in the process.
    NotMapped,
    /// Anonymous memory: its contents were not recorded (JIT code, a trampoline).
    Anonymous,
    /// The vdso: no copy of it was found in the build-id cache (perf record keeps one
    /// there) and none was given.
    Vdso,
    /// Kernel code: not decoded from perf.data (no kcore/vmlinux support).
    Kernel,
    /// A special mapping without a file.
    Special,
    /// The file was not found at any of these paths.
    NotFound(Vec<PathBuf>),
    /// The file was found but could not be mapped.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: String,
    },
}

impl fmt::Display for MissingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissingCode::NotMapped => f.write_str("no mapping of the process holds it"),
            MissingCode::Anonymous => {
                f.write_str("anonymous memory (JIT code?): its contents were not recorded")
            }
            MissingCode::Vdso => {
                f.write_str("the vdso: no copy of it in any build-id cache, and none given")
            }
            MissingCode::Kernel => f.write_str("kernel code is not decoded"),
            MissingCode::Special => f.write_str("a special mapping without a file"),
            MissingCode::NotFound(tried) => {
                f.write_str("file not found (tried ")?;
                for (i, p) in tried.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", p.display())?;
                }
                f.write_str(")")
            }
            MissingCode::Unreadable { path, error } => {
                write!(f, "cannot map {}: {error}", path.display())
            }
        }
    }
}

/// Where the code of a mapping was found.
#[derive(Clone, Debug)]
pub struct CodeFile {
    /// The file read.
    pub path: PathBuf,
    /// Found through the build-id cache (else by its path).
    pub from_build_id_cache: bool,
    /// The file's own build id differs from the recording's (the file changed since).
    pub build_id_mismatch: Option<BuildId>,
    /// The mapped bytes as an image section.
    section: Section,
}

/// Where code files are looked for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Finder {
    pub sysroot: Option<PathBuf>,
    pub buildid_dirs: Vec<PathBuf>,
    /// Copies of the vdso: (name as MMAP records it, file).
    pub vdso: Vec<(String, PathBuf)>,
}

impl Finder {
    /// The kallsyms list perf names the kernel's addresses of `m` with: the
    /// build-id cache's copy of the recorded kernel's, else the running kernel's
    /// when it is the recorded one (or the recording names none).
    pub fn kallsyms(&self, m: &Mapping) -> Option<PathBuf> {
        let recorded = m.build_id.filter(|b| b.len > 0);
        if let Some(id) = recorded {
            for dir in &self.buildid_dirs {
                let cache = BuildIdCache::new(dir);
                if let Some(p) = cache
                    .lookup("[kernel.kallsyms]", id.as_bytes(), EntryKind::Kallsyms)
                    .into_iter()
                    .find(|p| p.is_file())
                {
                    return Some(p);
                }
            }
        }
        let running = match recorded {
            Some(id) => pt_elf::kallsyms::running_build_id().is_some_and(|r| r == id.as_bytes()),
            None => true,
        };
        running.then(|| PathBuf::from("/proc/kallsyms"))
    }

    /// The candidate files of a mapping, in perf's order: the build-id cache, then
    /// the path (under the sysroot).
    fn candidates(&self, m: &Mapping) -> Vec<(PathBuf, bool)> {
        let mut v = Vec::new();
        if let Some(id) = m.build_id.filter(|b| b.len > 0) {
            let kind = match m.kind {
                MappingKind::Vdso => EntryKind::Vdso,
                MappingKind::Kernel => EntryKind::Kallsyms,
                _ => EntryKind::Elf,
            };
            for dir in &self.buildid_dirs {
                // The link, then the cache's own tree (for a cache whose
                // .build-id links were lost).
                let cache = BuildIdCache::new(dir);
                v.extend(
                    cache
                        .lookup(&m.filename, id.as_bytes(), kind)
                        .into_iter()
                        .map(|p| (p, true)),
                );
            }
        }
        match m.kind {
            MappingKind::Vdso => {
                for (name, path) in &self.vdso {
                    if *name == m.filename || (name == "[vdso]" && self.vdso.len() == 1) {
                        v.push((path.clone(), false));
                    }
                }
            }
            MappingKind::File | MappingKind::Jit => {
                let path = match &self.sysroot {
                    Some(root) => root.join(m.filename.trim_start_matches('/')),
                    None => PathBuf::from(&m.filename),
                };
                v.push((path, false));
            }
            _ => {}
        }
        v
    }

    /// Finds and maps the code of `m`.
    fn find(&self, m: &Mapping) -> Result<CodeFile, MissingCode> {
        let candidates = self.candidates(m);
        let mut tried = Vec::new();
        for (path, cached) in candidates {
            if !path.is_file() {
                tried.push(path);
                continue;
            }
            let section =
                Section::from_file(&path, m.pgoff, Some(m.len), m.start).map_err(|e| {
                    MissingCode::Unreadable {
                        path: path.clone(),
                        error: e.to_string(),
                    }
                })?;
            let build_id_mismatch = match m.build_id.filter(|b| b.len > 0) {
                Some(want) if !cached => {
                    file_build_id(section.file_bytes()).filter(|have| *have != want)
                }
                _ => None,
            };
            return Ok(CodeFile {
                path,
                from_build_id_cache: cached,
                build_id_mismatch,
                section,
            });
        }
        Err(match m.kind {
            MappingKind::Vdso => MissingCode::Vdso,
            MappingKind::Anonymous => MissingCode::Anonymous,
            MappingKind::Kernel => MissingCode::Kernel,
            MappingKind::Special => MissingCode::Special,
            MappingKind::File | MappingKind::Jit => MissingCode::NotFound(tried),
        })
    }
}

/// The build id in an ELF file's notes (of the file as its section maps it:
/// only its headers and notes are looked at).
fn file_build_id(data: &[u8]) -> Option<BuildId> {
    pt_elf::build_id::build_id(data).map(BuildId::new)
}

/// A process's mappings from one point in time on.
#[derive(Debug)]
pub(crate) struct Epoch {
    /// When it starts (perf time; 0 if unknown).
    pub start: u64,
    /// The mappings, oldest first (later ones hide what they overlap).
    pub maps: Vec<u32>,
    image: OnceLock<Image>,
}

impl Epoch {
    fn new(start: u64, maps: Vec<u32>) -> Self {
        Epoch {
            start,
            maps,
            image: OnceLock::new(),
        }
    }
}

/// A process: its epochs in time order.
#[derive(Debug, Default)]
pub(crate) struct Process {
    pub epochs: Vec<Epoch>,
    /// Every mapping of every epoch, in order: the image of an untimed recording.
    all: OnceLock<Image>,
}

/// All processes and mappings, and where their code is.
#[derive(Debug, Default)]
pub(crate) struct Maps {
    pub mappings: Vec<Mapping>,
    files: Vec<OnceLock<Result<CodeFile, MissingCode>>>,
    procs: HashMap<u32, Process>,
    /// The kernel's mappings (pid -1).
    pub kernel: Vec<u32>,
    pub finder: Finder,
    empty: Image,
}

impl Maps {
    pub fn new(finder: Finder) -> Self {
        Maps {
            finder,
            ..Default::default()
        }
    }

    fn current(&mut self, pid: u32, time: u64) -> &mut Epoch {
        let p = self.procs.entry(pid).or_default();
        if p.epochs.is_empty() {
            p.epochs.push(Epoch::new(time, Vec::new()));
        }
        let n = p.epochs.len() - 1;
        &mut p.epochs[n]
    }

    /// A new mapping.
    pub fn map(&mut self, m: Mapping) {
        let time = m.time.unwrap_or(0);
        let pid = m.pid;
        let id = self.mappings.len() as u32;
        let Some(pid) = pid else {
            self.mappings.push(m);
            self.files.push(OnceLock::new());
            self.kernel.push(id);
            return;
        };
        // The same mapping again (perf record's synthesized maps and the kernel's
        // records can both name one): nothing changes.
        let dup = {
            let maps = &self.mappings;
            self.procs
                .get(&pid)
                .and_then(|p| p.epochs.last())
                .is_some_and(|e| {
                    e.maps.iter().any(|&i| {
                        let o = &maps[i as usize];
                        (o.start, o.len, o.pgoff, &o.filename)
                            == (m.start, m.len, m.pgoff, &m.filename)
                    })
                })
        };
        if dup {
            return;
        }
        let overlaps = {
            let maps = &self.mappings;
            self.procs
                .get(&pid)
                .and_then(|p| p.epochs.last())
                .is_some_and(|e| {
                    e.maps.iter().any(|&i| {
                        let o = &maps[i as usize];
                        o.start < m.end() && m.start < o.end()
                    })
                })
        };
        self.mappings.push(m);
        self.files.push(OnceLock::new());
        let e = self.current(pid, time);
        if overlaps {
            let mut maps = e.maps.clone();
            maps.push(id);
            self.procs
                .entry(pid)
                .or_default()
                .epochs
                .push(Epoch::new(time, maps));
        } else {
            e.maps.push(id);
        }
    }

    /// `pid` executed a new program at `time`. The kernel drops the old program's
    /// mappings, but perf does not (a COMM with the exec flag flushes none of a
    /// thread's maps): the new program's mappings hide what they overlap, and the
    /// rest still names addresses, such as the pre-exec frames of a call chain.
    /// As perf is the judge of what a recording says, its view is kept.
    pub fn exec(&mut self, pid: u32, time: Option<u64>) {
        let t = time.unwrap_or(0);
        let p = self.procs.entry(pid).or_default();
        let kept = p.epochs.last().map(|e| e.maps.clone()).unwrap_or_default();
        p.epochs.push(Epoch::new(t, kept));
    }

    /// `pid` was forked from `ppid` at `time`: it starts with the parent's mappings.
    pub fn fork(&mut self, pid: u32, ppid: u32, time: Option<u64>) {
        if pid == ppid {
            return;
        }
        let t = time.unwrap_or(0);
        let inherited = self
            .procs
            .get(&ppid)
            .and_then(|p| epoch_at(&p.epochs, Some(t)))
            .map(|e| e.maps.clone())
            .unwrap_or_default();
        self.procs
            .entry(pid)
            .or_default()
            .epochs
            .push(Epoch::new(t, inherited));
    }

    /// Whether `pid` has records.
    pub fn has(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The epoch of `pid` at `time` (`None`: the last).
    #[cfg(test)]
    pub fn epoch(&self, pid: u32, time: Option<u64>) -> Option<(usize, &Epoch)> {
        let p = self.procs.get(&pid)?;
        let e = epoch_at(&p.epochs, time)?;
        let i = p.epochs.iter().position(|x| core::ptr::eq(x, e))?;
        Some((i, e))
    }

    /// When the next epoch of `pid` after `time` starts.
    pub fn next_epoch(&self, pid: u32, time: u64) -> Option<u64> {
        let p = self.procs.get(&pid)?;
        p.epochs.iter().map(|e| e.start).find(|&s| s > time)
    }

    /// The mapping that holds `ip` in `pid` at `time` (`None`: at the end; for an
    /// untimed recording every mapping the process ever had, the latest first).
    pub fn mapping(&self, pid: Option<u32>, ip: u64, time: Option<u64>) -> Option<u32> {
        let find = |ids: &mut dyn Iterator<Item = &u32>| {
            ids.copied()
                .find(|&i| self.mappings[i as usize].contains(ip))
        };
        if let Some(pid) = pid {
            if let Some(p) = self.procs.get(&pid) {
                let hit = match time {
                    Some(_) => {
                        epoch_at(&p.epochs, time).and_then(|e| find(&mut e.maps.iter().rev()))
                    }
                    None => find(&mut p.epochs.iter().rev().flat_map(|e| e.maps.iter().rev())),
                };
                if hit.is_some() {
                    return hit;
                }
            }
        }
        find(&mut self.kernel.iter().rev())
    }

    /// Where the code of mapping `id` is (found once, then remembered).
    pub fn file(&self, id: u32) -> &Result<CodeFile, MissingCode> {
        self.files[id as usize].get_or_init(|| self.finder.find(&self.mappings[id as usize]))
    }

    fn build(&self, ids: &mut dyn Iterator<Item = u32>) -> Image {
        let mut image = Image::new();
        for id in ids {
            if let Ok(f) = self.file(id) {
                image.add(f.section.clone());
            }
        }
        image
    }

    /// The image of `pid` at `time`; `None` for the time: every mapping the process
    /// ever had, later ones on top (what perf decodes an untimed recording with).
    pub fn image(&self, pid: Option<u32>, time: Option<u64>) -> &Image {
        let Some(p) = pid.and_then(|pid| self.procs.get(&pid)) else {
            return &self.empty;
        };
        match time {
            Some(_) => match epoch_at(&p.epochs, time) {
                Some(e) => e
                    .image
                    .get_or_init(|| self.build(&mut e.maps.iter().copied())),
                None => &self.empty,
            },
            None => p.all.get_or_init(|| {
                self.build(&mut p.epochs.iter().flat_map(|e| e.maps.iter().copied()))
            }),
        }
    }
}

/// The epoch in effect at `time` (`None`: the last); before the first, the first.
fn epoch_at(epochs: &[Epoch], time: Option<u64>) -> Option<&Epoch> {
    match time {
        None => epochs.last(),
        Some(t) => {
            let i = epochs.partition_point(|e| e.start <= t);
            epochs.get(i.saturating_sub(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pid: u32, start: u64, len: u64, name: &str, time: u64) -> Mapping {
        Mapping {
            pid: Some(pid),
            start,
            len,
            pgoff: 0,
            filename: name.into(),
            build_id: None,
            prot: None,
            time: Some(time),
            record_offset: 0,
            kind: MappingKind::of(name, false),
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(MappingKind::of("[vdso]", false), MappingKind::Vdso);
        assert_eq!(MappingKind::of("//anon", false), MappingKind::Anonymous);
        assert_eq!(
            MappingKind::of("/memfd:x (deleted)", false),
            MappingKind::Anonymous
        );
        assert_eq!(
            MappingKind::of("/tmp/jitted-12-3.so", false),
            MappingKind::Jit
        );
        assert_eq!(MappingKind::of("[vsyscall]", false), MappingKind::Special);
        assert_eq!(MappingKind::of("/usr/bin/ls", false), MappingKind::File);
        assert_eq!(MappingKind::of("/usr/bin/ls", true), MappingKind::Kernel);
    }

    #[test]
    fn dso_names_as_perf_names_them() {
        let k = |name: &str| Mapping {
            pid: None,
            kind: MappingKind::of(name, true),
            ..m(1, 0, 1, name, 0)
        };
        assert_eq!(k("[kernel.kallsyms]_text").dso_name(), "[kernel.kallsyms]");
        assert_eq!(k("[kernel.kallsyms]").dso_name(), "[kernel.kallsyms]");
        assert_eq!(
            k("/lib/modules/6.1.0/kernel/fs/ext4.ko").dso_name(),
            "/lib/modules/6.1.0/kernel/fs/ext4.ko"
        );
        assert_eq!(m(1, 0, 1, "/usr/bin/ls", 0).dso_name(), "/usr/bin/ls");
        assert_eq!(m(1, 0, 1, "[vdso]", 0).dso_name(), "[vdso]");
    }

    #[test]
    fn epochs_follow_fork_exec_and_overlaps() {
        let mut maps = Maps::default();
        maps.map(m(1, 0x1000, 0x1000, "/a", 1));
        maps.map(m(1, 0x5000, 0x1000, "/liba", 2));
        // The same again: no change.
        maps.map(m(1, 0x5000, 0x1000, "/liba", 3));
        assert_eq!(maps.procs[&1].epochs.len(), 1);
        assert_eq!(maps.mappings.len(), 2);
        maps.fork(2, 1, Some(10));
        maps.exec(2, Some(20));
        maps.map(m(2, 0x1000, 0x2000, "/b", 21));
        // Overlapping: a new epoch on top of the old mappings.
        maps.map(m(1, 0x1800, 0x100, "/c", 30));
        assert_eq!(maps.procs[&1].epochs.len(), 2);
        let name = |i: Option<u32>| i.map(|i| maps.mappings[i as usize].filename.clone());
        assert_eq!(
            name(maps.mapping(Some(2), 0x1100, Some(15))).as_deref(),
            Some("/a")
        );
        assert_eq!(
            name(maps.mapping(Some(2), 0x5100, Some(15))).as_deref(),
            Some("/liba")
        );
        assert_eq!(
            name(maps.mapping(Some(2), 0x1100, Some(25))).as_deref(),
            Some("/b")
        );
        // After the exec, what /b does not overlap stays (perf's view).
        assert_eq!(
            name(maps.mapping(Some(2), 0x5100, Some(25))).as_deref(),
            Some("/liba")
        );
        assert_eq!(
            name(maps.mapping(Some(1), 0x1810, Some(31))).as_deref(),
            Some("/c")
        );
        assert_eq!(
            name(maps.mapping(Some(1), 0x1810, Some(29))).as_deref(),
            Some("/a")
        );
        // Untimed: the latest mapping of any epoch.
        assert_eq!(
            name(maps.mapping(Some(2), 0x5100, None)).as_deref(),
            Some("/liba")
        );
        assert_eq!(maps.next_epoch(2, 10), Some(20));
        // /b over the kept /a starts one more.
        assert_eq!(maps.next_epoch(2, 20), Some(21));
        assert_eq!(maps.next_epoch(2, 21), None);
        assert_eq!(maps.epoch(1, Some(30)).unwrap().0, 1);
    }
}
