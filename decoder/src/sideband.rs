//! libipt's side-band image switching (its `pt_sb` library, as ptxed's `--pevent:*`
//! and `--sb:*` use it) over the side-band files of [`crate::pevent`]: the records
//! are printed where the trace's time passes theirs (at each event the decoder
//! reports), and the primary files' records switch the code image between processes: MMAP/MMAP2 map files into the process's image,
//! FORK copies the parent's, COMM.EXEC starts an empty one, ITRACE_START switches at
//! once, SWITCH/SWITCH_CPU_WIDE and exec switch at the next event in (or likely in)
//! the kernel.
//!
//! The decoder borrows its images for its whole life, so the images are built before
//! decoding: [`Plan`] applies every record in the session's order (the order does not
//! depend on the trace) and keeps each version of each process's image; [`Live`]
//! replays the plan while the trace is decoded and says which image to switch to.

use crate::event::{Event, EventKind};
use crate::image::Image;
use crate::pevent::{PeventFile, PeventRecord, SbOptions, SbSession};
use pt_perf_data::records::misc;
use pt_perf_data::{AuxFlags, Record};
use std::collections::HashMap;
use std::io::Read;

/// A process's ABI, for choosing the vdso (libipt's `pt_sb_abi`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Abi {
    Unknown,
    X64,
    X32,
    Ia32,
}

/// The ELF ABI of `path`, if it is an x86 ELF file (libipt reads the identification
/// and, for 32-bit files, the whole header for the machine).
fn elf_abi(path: &str) -> Abi {
    let mut head = Vec::with_capacity(52);
    let read = std::fs::File::open(path).and_then(|f| f.take(52).read_to_end(&mut head));
    if read.is_err() || head.len() < 16 || &head[..4] != b"\x7fELF" || head[6] != 1 {
        return Abi::Unknown;
    }
    match head[4] {
        2 => Abi::X64,
        1 if head.len() == 52 => match u16::from_le_bytes([head[18], head[19]]) {
            3 => Abi::Ia32,
            62 => Abi::X32,
            _ => Abi::Unknown,
        },
        _ => Abi::Unknown,
    }
}

/// A message for a record: an error (always shown) or a warning (`--sb:warn`).
struct Note {
    error: bool,
    text: &'static str,
}

/// What applying one record does.
#[derive(Default)]
struct Step {
    /// Processes' images that change: (context, image version).
    updates: Vec<(usize, usize)>,
    /// A context switch to prepare: (context, at once).
    switch: Option<(usize, bool)>,
    notes: Vec<Note>,
}

/// Every record applied in order: the image versions and what each record does.
pub struct Plan {
    images: Vec<Image>,
    /// Each context's process id.
    pids: Vec<u32>,
    steps: Vec<Step>,
}

/// The state of applying records (libipt's session contexts).
struct Contexts<'o> {
    opts: &'o SbOptions,
    images: Vec<Image>,
    pids: Vec<u32>,
    abi: Vec<Abi>,
    version: Vec<usize>,
    by_pid: HashMap<u32, usize>,
}

impl Contexts<'_> {
    /// The context of `pid`, created with the kernel image if there is none.
    fn get(&mut self, pid: u32, step: &mut Step) -> usize {
        if let Some(&c) = self.by_pid.get(&pid) {
            return c;
        }
        self.create(pid, step)
    }

    /// A new context for `pid`, replacing any it had.
    fn create(&mut self, pid: u32, step: &mut Step) -> usize {
        let c = self.pids.len();
        self.pids.push(pid);
        self.abi.push(Abi::Unknown);
        self.version.push(0);
        self.by_pid.insert(pid, c);
        step.updates.push((c, 0));
        c
    }

    /// A new image version: context `c`'s image with `f` applied.
    fn update(&mut self, c: usize, step: &mut Step, f: impl FnOnce(&mut Image)) {
        let mut image = Image::new();
        for s in self.images[self.version[c]].sections() {
            image.add(s.clone());
        }
        f(&mut image);
        let v = self.images.len();
        self.images.push(image);
        self.version[c] = v;
        step.updates.push((c, v));
    }

    fn map(&mut self, pid: u32, filename: &str, offset: u64, size: u64, vaddr: u64) -> Step {
        let mut step = Step::default();
        let c = self.get(pid, &mut step);
        let lost = Note {
            error: false,
            text: "image section lost",
        };
        let path = if filename.starts_with('[') {
            if filename != "[vdso]" {
                step.notes.push(lost);
                return step;
            }
            let vdso = match self.abi[c] {
                Abi::Unknown => None,
                Abi::X64 => self.opts.vdso[0].clone(),
                Abi::X32 => self.opts.vdso[1].clone(),
                Abi::Ia32 => self.opts.vdso[2].clone(),
            };
            match vdso {
                Some(v) => v,
                None => {
                    step.notes.push(Note {
                        error: true,
                        text: "bad configuration",
                    });
                    return step;
                }
            }
        } else if filename == "//anon" || filename.contains(" (deleted)") {
            step.notes.push(lost);
            return step;
        } else {
            match &self.opts.sysroot {
                Some(root) => format!("{root}{filename}"),
                None => filename.to_string(),
            }
        };
        if self.abi[c] == Abi::Unknown {
            self.abi[c] = elf_abi(&path);
        }
        match crate::image::Section::from_file(path.as_ref(), offset, Some(size), vaddr) {
            Ok(section) => self.update(c, &mut step, |image| {
                image.add(section);
            }),
            Err(e) => step.notes.push(Note {
                error: true,
                text: e.code().message(),
            }),
        }
        step
    }

    /// libipt's `pt_sb_pevent_apply_event_record`.
    fn apply(&mut self, primary: bool, rec: &PeventRecord<'_>) -> Step {
        let mut step = Step::default();
        match &rec.record {
            Record::ItraceStart(r) if primary => {
                let c = self.get(r.pid, &mut step);
                step.switch = Some((c, true));
            }
            Record::Fork(r) if r.ppid != r.pid => {
                if r.pid != r.tid {
                    step.notes.push(Note {
                        error: true,
                        text: "internal error",
                    });
                    return step;
                }
                self.by_pid.remove(&r.pid);
                let c = self.create(r.pid, &mut step);
                if let Some(&parent) = self.by_pid.get(&r.ppid) {
                    let from = self.images[self.version[parent]].sections().to_vec();
                    self.update(c, &mut step, |image| {
                        for s in from {
                            image.add(s);
                        }
                    });
                }
            }
            Record::Comm(r) if r.misc & misc::COMM_EXEC != 0 => {
                self.by_pid.remove(&r.pid);
                let c = self.create(r.pid, &mut step);
                if primary {
                    step.switch = Some((c, false));
                }
            }
            Record::Switch(r) if primary && r.misc & misc::SWITCH_OUT == 0 => {
                match r.sample_id.pid {
                    Some(pid) => {
                        let c = self.get(pid, &mut step);
                        step.switch = Some((c, false));
                    }
                    None => step.notes.push(Note {
                        error: true,
                        text: "bad configuration",
                    }),
                }
            }
            Record::SwitchCpuWide(r) if primary => {
                let pid = if r.misc & misc::SWITCH_OUT == 0 {
                    r.sample_id.pid
                } else {
                    Some(r.next_prev_pid)
                };
                if let Some(pid) = pid {
                    let c = self.get(pid, &mut step);
                    step.switch = Some((c, false));
                }
            }
            Record::Mmap(r) if r.misc & misc::CPUMODE_MASK != misc::KERNEL => {
                let name = r.filename.to_str_lossy();
                return self.map(r.pid, &name, r.pgoff, r.len, r.start);
            }
            Record::Mmap2(r) if r.misc & misc::CPUMODE_MASK != misc::KERNEL => {
                let name = r.filename.to_str_lossy();
                return self.map(r.pid, &name, r.pgoff, r.len, r.start);
            }
            Record::Lost(_) => step.notes.push(Note {
                error: false,
                text: "sideband lost",
            }),
            Record::Aux(r) if primary && r.flags.0 & AuxFlags::TRUNCATED != 0 => {
                step.notes.push(Note {
                    error: false,
                    text: "trace lost",
                })
            }
            _ => {}
        }
        step
    }
}

impl Plan {
    /// Applies every record of `files` in the session's order.
    /// Every process's image starts with `kernel` (`--pevent:kcore`).
    pub fn new(files: &[PeventFile<'_>], opts: &SbOptions, kernel: Image) -> Plan {
        let mut ctx = Contexts {
            opts,
            images: vec![kernel],
            pids: Vec::new(),
            abi: Vec::new(),
            version: Vec::new(),
            by_pid: HashMap::new(),
        };
        let mut session = SbSession::new(files);
        let mut steps = Vec::new();
        while let Some((i, rec)) = session.take_indexed(u64::MAX) {
            steps.push(ctx.apply(files[i].is_primary(), &rec));
        }
        Plan {
            images: ctx.images,
            pids: ctx.pids,
            steps,
        }
    }

    /// Image version `v`.
    pub fn image(&self, v: usize) -> &Image {
        &self.images[v]
    }
}

/// Where the trace is (libipt's `pt_sb_pevent_loc`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loc {
    Unknown,
    User,
    Kernel,
    LikelyUser,
    LikelyKernel,
}

impl Loc {
    fn kernelish(self) -> bool {
        matches!(self, Loc::Unknown | Loc::Kernel | Loc::LikelyKernel)
    }

    fn suppressed(from: Loc) -> Loc {
        match from {
            Loc::Kernel | Loc::LikelyKernel => Loc::LikelyUser,
            Loc::User | Loc::LikelyUser => Loc::LikelyKernel,
            Loc::Unknown => Loc::Unknown,
        }
    }
}

/// One file's switching state (libipt's `pt_sb_pevent_priv`).
#[derive(Clone, Copy)]
struct FileState {
    context: Option<usize>,
    next: Option<usize>,
    loc: Loc,
    removed: bool,
}

/// The side-band while the trace is decoded.
pub struct Live<'f, 'a, 'p> {
    session: SbSession<'f, 'a>,
    plan: &'p Plan,
    opts: &'p SbOptions,
    step: usize,
    version: Vec<usize>,
    files: Vec<FileState>,
    /// The context whose image the decoder uses.
    current: Option<usize>,
    /// Files at their end, the last to end first.
    retired: Vec<usize>,
    kernel_start: u64,
}

impl<'f, 'a, 'p> Live<'f, 'a, 'p> {
    /// Starts the session; the errors met reading the first records go to `out`.
    pub fn new(
        files: &'f [PeventFile<'a>],
        plan: &'p Plan,
        opts: &'p SbOptions,
        out: &mut Vec<u8>,
    ) -> Self {
        let mut session = SbSession::new(files);
        session.dump_errors(out);
        Live {
            session,
            plan,
            opts,
            step: 0,
            version: vec![0; plan.pids.len()],
            files: vec![
                FileState {
                    context: None,
                    next: None,
                    loc: Loc::Unknown,
                    removed: false,
                };
                files.len()
            ],
            current: None,
            retired: Vec::new(),
            kernel_start: opts.kernel_start.unwrap_or(u64::MAX),
        }
    }

    fn loc_of(&self, ip: u64) -> Loc {
        if ip < self.kernel_start {
            Loc::User
        } else {
            Loc::Kernel
        }
    }

    /// libipt's `ploc_from_event`.
    fn loc(&self, ev: &Event, old: Loc) -> Loc {
        use EventKind::*;
        let sup = ev.ip_suppressed;
        match ev.kind {
            Enabled { ip, .. } | Tip { ip } => self.loc_of(ip),
            AsyncBranch { to, .. } => self.loc_of(to),
            Disabled { ip } if !sup => self.loc_of(ip),
            Disabled { .. } => Loc::suppressed(old),
            AsyncDisabled { ip, .. } if !sup => self.loc_of(ip),
            AsyncDisabled { at, .. } => Loc::suppressed(self.loc_of(at)),
            AsyncPaging { ip, .. } if !sup => self.loc_of(ip),
            AsyncPaging { .. } | Paging { .. } => Loc::LikelyKernel,
            Overflow { ip }
            | ExecMode { ip, .. }
            | Tsx { ip, .. }
            | Exstop { ip }
            | Mwait { ip, .. }
            | Ptwrite { ip, .. }
            | Tick { ip }
            | Iflags { ip, .. }
            | Interrupt { ip, .. }
            | Iret { ip }
            | Smi { ip }
            | Rsm { ip }
            | Init { ip }
            | Vmentry { ip }
            | Vmexit { ip, .. }
            | Shutdown { ip }
            | Uintr { ip, .. }
            | Uiret { ip }
                if !sup =>
            {
                self.loc_of(ip)
            }
            _ => Loc::Unknown,
        }
    }

    fn note(&self, file: usize, offset: u64, note: &Note, out: &mut Vec<u8>) {
        if !note.error && !self.opts.warn {
            return;
        }
        let name = self.session.files()[file].name();
        let severity = if note.error { "error" } else { "warning" };
        out.extend_from_slice(
            format!(
                "[{name}:{offset:016x} sideband {severity}: {}]\n",
                note.text
            )
            .as_bytes(),
        );
    }

    /// libipt's `pt_sb_pevent_prepare_context_switch`.
    fn prepare(&mut self, file: usize, c: usize) {
        let f = &mut self.files[file];
        if f.next == Some(c) {
            return;
        }
        f.next = None;
        if f.context != Some(c) {
            f.next = Some(c);
        }
    }

    /// Switches file `file`'s pending context in: the image version to use.
    fn switch(&mut self, file: usize, out: &mut Vec<u8>) -> Option<usize> {
        let c = self.files[file].next.take()?;
        if self.opts.switch {
            out.extend_from_slice(format!("[context: pid-{:x}]\n", self.plan.pids[c]).as_bytes());
        }
        self.files[file].context = Some(c);
        self.current = Some(c);
        Some(self.version[c])
    }

    /// The decoder reported `ev`: prints the records up to its time and applies them
    /// (libipt's `pt_sb_event`). Returns the image version to switch the decoder to.
    pub fn event(&mut self, ev: &Event, out: &mut Vec<u8>) -> Option<usize> {
        let tsc = ev.time.tsc.unwrap_or(0);
        let mut image = None;
        while let Some((i, rec)) = self.session.take_indexed(tsc) {
            if self.opts.flags.0 != 0 {
                rec.print(&self.session.files()[i], self.opts.flags, out);
            }
            if let Some(step) = self.plan.steps.get(self.step) {
                self.step += 1;
                for &(c, v) in &step.updates {
                    self.version[c] = v;
                    if self.current == Some(c) {
                        image = Some(v);
                    }
                }
                for n in &step.notes {
                    self.note(i, rec.offset, n, out);
                }
                if let Some((c, now)) = step.switch {
                    self.prepare(i, c);
                    if now {
                        if let Some(v) = self.switch(i, out) {
                            image = Some(v);
                        }
                    }
                }
            }
            self.session.dump_errors(out);
            if !self.session.has_next(i) {
                if self.session.failed(i) {
                    self.files[i].removed = true;
                } else {
                    self.retired.insert(0, i);
                }
            }
        }
        // Every file sees the event, those with records first (in the order of their
        // next record), then those at their end (the last to end first): postponed
        // switches happen in the kernel.
        let order: Vec<usize> = self.session.pending().chain(self.retired.clone()).collect();
        for i in order {
            if self.files[i].removed {
                continue;
            }
            let old = self.files[i].loc;
            let loc = self.loc(ev, old);
            self.files[i].loc = loc;
            if self.files[i].next.is_none() {
                if !self.session.has_next(i) {
                    // At its end with nothing pending: done.
                    self.files[i].removed = true;
                    self.retired.retain(|&r| r != i);
                }
                continue;
            }
            if old.kernelish() || loc.kernelish() {
                if let Some(v) = self.switch(i, out) {
                    image = Some(v);
                }
            }
        }
        image
    }
}
