//! The compact execution log: record an execution once, replay it fast.
//!
//! # Format (version 3)
//! A 16-byte header: the magic `PTSIMEXL`, the version (u32 LE) and flags
//! (u32 LE): bit 0 set when the log holds kernel-mode instructions
//! ([`FLAG_KERNEL`]), the other bits zero. Then records, each a tag byte and a
//! payload; numbers are unsigned LEB128 (`v`) or zigzag LEB128 (`z`). The
//! last record is the end record (0x1f), written when the recording is
//! complete: a log without it was cut short (a recorder killed mid-way), and
//! a reader replays it up to the last complete record and then reports
//! [`ExecError::TruncatedLog`] with the offset where it ends.
//!
//! | tag  | record      | payload |
//! |------|-------------|---------|
//! | 0x01 | code page   | `v` page number (address / 4096), 4096 bytes |
//! | 0x02 | mode        | u8: 0 = 16-bit, 1 = 32-bit, 2 = 64-bit, 3 = unknown |
//! | 0x03 | set IP      | `v` address of the next instruction |
//! | 0x04 | predicted   | `v` n: n instructions, each going where predicted |
//! | 0x05 | run         | `v` n, `z` d: n predicted, then one going to its fall-through + d |
//! | 0x06 | taken       | `v` n: n predicted, then a conditional branch that was taken |
//! | 0x07 | privilege   | u8: 0 = user mode, 1 = CPL 0 (kernel); user mode at the start |
//! | 0x10 | exec        | `v` pid, `v` length, path bytes |
//! | 0x11 | mappings    | `v` count, then per mapping `v` start, `v` size, `v` offset, u8 perms, `v` length, path |
//! | 0x12 | syscall in  | `v` nr, 6 × `v` args |
//! | 0x13 | syscall out | `v` nr, `z` ret |
//! | 0x14 | signal      | `v` signo, `v` from, u8 has-handler, [`v` handler] |
//! | 0x15 | exit        | u8 kind (0 exited, 1 killed), `z` value |
//! | 0x16 | stopped     | u8 reason (0 step limit, 1 interrupted) |
//! | 0x17 | MOV CR3     | `v` new CR3 |
//! | 0x18 | interrupt   | u8 vector, u8 1 if from CPL 0 else 0, `v` from, `v` handler |
//! | 0x19 | switch      | `v` pid, `v` tid: the records that follow are this thread's |
//! | 0x1a | clone       | `v` pid, `v` tid of the new thread, u8 kind (0 thread, 1 fork, 2 vfork) |
//! | 0x1b | untraced    | `v` pid, `v` tid, `v` length, reason text |
//! | 0x1f | end         | `v` instructions in the log |
//!
//! Version 2 is version 3 without records 0x19 to 0x1f (one thread, no end
//! record, and code pages are not logged again after an exec); version 1 is
//! version 2 without the flags and records 0x07, 0x17 and 0x18. The reader
//! takes all three.
//!
//! # Threads
//! Instruction records belong to the current thread (see the thread rules
//! of [`crate::exec`]); writer and reader keep the IP, mode, privilege and
//! return-prediction stack per thread, and the code pages per process. A new
//! process (clone record of a fork) and an exec start with no code pages:
//! pages are logged again before their first instruction there.
//!
//! Instruction lengths and classes are not stored: the reader decodes them from
//! the code pages, which the writer logs before the first instruction on them
//! (and again whenever their contents change).
//!
//! Where an instruction goes is predicted the same way by writer and reader:
//! the fall-through for non-branches, not-taken conditional branches and
//! kernel entries; the target for direct jumps and calls; for near returns the
//! top of a 64-entry stack of return addresses pushed by calls (every RET pops
//! it). Indirect jumps and calls and far branches are never predicted. Only
//! instructions that go elsewhere cost a record.

use std::collections::HashMap;

use pt_encoder::hash::IntMap;
use std::io::Write;

use super::insn::{decode_at, DecodedInsn};
use super::memory::page_base;
use super::{
    BlockInsn, BranchClass, CloneKind, CodeMemory, Event, ExecError, ExecItem, ExecMode,
    ExecutionSource, ExitKind, Mapping, Perms, Retired, RunView, StopReason, ThreadCursor,
    ThreadId, PAGE_SIZE,
};

/// File magic.
pub const MAGIC: [u8; 8] = *b"PTSIMEXL";
/// Current format version.
pub const VERSION: u32 = 3;
/// Header flag: the log holds kernel-mode instructions.
pub const FLAG_KERNEL: u32 = 1;
const HEADER_LEN: usize = 16;

const TAG_CODE_PAGE: u8 = 0x01;
const TAG_MODE: u8 = 0x02;
const TAG_SET_IP: u8 = 0x03;
const TAG_SEQ: u8 = 0x04;
const TAG_RUN: u8 = 0x05;
const TAG_TAKEN: u8 = 0x06;
const TAG_PRIVILEGE: u8 = 0x07;
const TAG_EXEC: u8 = 0x10;
const TAG_MAPPINGS: u8 = 0x11;
const TAG_SYSCALL_ENTER: u8 = 0x12;
const TAG_SYSCALL_EXIT: u8 = 0x13;
const TAG_SIGNAL: u8 = 0x14;
const TAG_EXIT: u8 = 0x15;
const TAG_STOPPED: u8 = 0x16;
const TAG_MOV_CR3: u8 = 0x17;
const TAG_INTERRUPT: u8 = 0x18;
const TAG_SWITCH: u8 = 0x19;
const TAG_CLONE: u8 = 0x1a;
const TAG_UNTRACED: u8 = 0x1b;
const TAG_END: u8 = 0x1f;

/// Depth of the return-address stack used for predicting returns.
const RETURN_STACK: usize = 64;

/// The successor prediction shared by writer and reader.
#[derive(Clone, Debug, Default)]
struct Predictor {
    returns: Vec<u64>,
}

impl Predictor {
    fn predict(&self, d: &DecodedInsn, ip: u64) -> Option<u64> {
        let ft = ip.wrapping_add(u64::from(d.len));
        match d.class {
            BranchClass::Other | BranchClass::CondBranch | BranchClass::KernelEntry => Some(ft),
            BranchClass::DirectJump | BranchClass::DirectCall => d.target,
            BranchClass::Return => self.returns.last().copied(),
            BranchClass::IndirectJump | BranchClass::IndirectCall | BranchClass::FarBranch => None,
        }
    }

    fn retire(&mut self, d: &DecodedInsn, ip: u64) {
        match d.class {
            BranchClass::DirectCall | BranchClass::IndirectCall => {
                if self.returns.len() == RETURN_STACK {
                    self.returns.remove(0);
                }
                self.returns.push(ip.wrapping_add(u64::from(d.len)));
            }
            BranchClass::Return => {
                self.returns.pop();
            }
            _ => {}
        }
    }
}

/// What writer and reader keep per thread.
#[derive(Clone, Debug, Default)]
struct ThreadState {
    /// Where the thread's next instruction is (expected).
    ip: Option<u64>,
    /// Its mode (`None`: none logged yet).
    mode: Option<ExecMode>,
    /// CPL 0.
    kernel: bool,
    predictor: Predictor,
}

/// Per-thread and per-process state of writer and reader, with the current
/// thread's and process's held apart for speed.
#[derive(Debug)]
struct Threads<P> {
    cursor: ThreadCursor,
    thread: ThreadId,
    state: ThreadState,
    process: P,
    others: HashMap<ThreadId, ThreadState>,
    processes: HashMap<u32, P>,
}

impl<P: Default> Threads<P> {
    fn new() -> Self {
        Threads {
            cursor: ThreadCursor::new(),
            thread: ThreadId::default(),
            state: ThreadState::default(),
            process: P::default(),
            others: HashMap::new(),
            processes: HashMap::new(),
        }
    }

    /// Follows an item (before its effects): switches the current thread
    /// (and process) when the item belongs to another.
    fn follow(&mut self, item: &ExecItem) {
        let t = self.cursor.follow(item);
        if t == self.thread {
            return;
        }
        let state = self.others.remove(&t).unwrap_or_default();
        self.others
            .insert(self.thread, std::mem::replace(&mut self.state, state));
        if t.pid != self.thread.pid {
            let process = self.processes.remove(&t.pid).unwrap_or_default();
            self.processes.insert(
                self.thread.pid,
                std::mem::replace(&mut self.process, process),
            );
        }
        self.thread = t;
    }

    /// Applies an event's effect on the state (after the event): a new
    /// process and an exec start without code; a new thread without state.
    fn apply(&mut self, e: &Event, version: u32) {
        match e {
            Event::Exec { .. } if version >= 3 => self.process = P::default(),
            Event::Clone { child, kind } => {
                self.others.remove(child);
                if *kind != CloneKind::Thread {
                    self.processes.remove(&child.pid);
                }
            }
            _ => {}
        }
    }
}

fn mode_code(m: ExecMode) -> u8 {
    match m {
        ExecMode::Bit16 => 0,
        ExecMode::Bit32 => 1,
        ExecMode::Bit64 => 2,
        ExecMode::Unknown => 3,
    }
}

fn mode_from_code(c: u8) -> Option<ExecMode> {
    Some(match c {
        0 => ExecMode::Bit16,
        1 => ExecMode::Bit32,
        2 => ExecMode::Bit64,
        3 => ExecMode::Unknown,
        _ => return None,
    })
}

fn clone_code(k: CloneKind) -> u8 {
    match k {
        CloneKind::Thread => 0,
        CloneKind::Fork => 1,
        CloneKind::Vfork => 2,
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_v(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_v(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Writes an execution log. Records go through an internal buffer to `W`;
/// call [`LogWriter::flush`] now and then so a killed recording keeps most of
/// what it saw, and [`LogWriter::finish`] at the end (which writes the end
/// record: a log without it reads as cut short).
pub struct LogWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    /// Thread states; per process: page base → generation already logged.
    threads: Threads<IntMap<u64, u64>>,
    /// Whether the header allows kernel-mode items.
    shows_kernel: bool,
    /// Predicted instructions of the current thread not yet written.
    pending_seq: u64,
    insns: u64,
    /// Pages found logged as the memory (address, version) in
    /// `checked_in` holds them, by page number modulo [`CHECKED`] (an
    /// interpreter's hot code spans tens of pages): the common case costs
    /// no lookup.
    checked: Box<[u64; CHECKED]>,
    checked_in: (usize, u64),
}

/// Entries of the cache of pages found logged.
const CHECKED: usize = 256;

/// The entry of page `base` in the cache of pages found logged.
#[inline]
fn checked_slot(base: u64) -> usize {
    (base / PAGE_SIZE) as usize % CHECKED
}

/// Buffered bytes beyond which records are written out.
const WRITE_CHUNK: usize = 64 * 1024;

impl<W: Write> LogWriter<W> {
    /// Starts a log of a user-mode execution: writes the header.
    pub fn new(out: W) -> std::io::Result<Self> {
        Self::with_kernel(out, false)
    }

    /// Starts a log; `shows_kernel`: kernel-mode items may follow (see
    /// [`ExecutionSource::shows_kernel`]), else they are refused.
    pub fn with_kernel(mut out: W, shows_kernel: bool) -> std::io::Result<Self> {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        let flags = if shows_kernel { FLAG_KERNEL } else { 0 };
        h[12..16].copy_from_slice(&flags.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self {
            out,
            buf: Vec::with_capacity(WRITE_CHUNK + PAGE_SIZE as usize * 2),
            threads: Threads::new(),
            shows_kernel,
            pending_seq: 0,
            insns: 0,
            checked: Box::new([u64::MAX; CHECKED]),
            checked_in: (0, 0),
        })
    }

    /// Instructions written so far.
    pub fn instructions(&self) -> u64 {
        self.insns
    }

    /// Appends one item. `mem` must hold the code of every instruction (the
    /// source's [`ExecutionSource::memory`] right after yielding it). The
    /// instruction is decoded from `mem` and must match what the item says,
    /// so a replay reproduces it exactly.
    pub fn write_item(&mut self, item: &ExecItem, mem: &CodeMemory) -> Result<(), ExecError> {
        let kernel_item = matches!(
            item,
            ExecItem::Insn(Retired { kernel: true, .. })
                | ExecItem::Event(Event::MovCr3 { .. } | Event::Interrupt { .. })
        );
        if kernel_item && !self.shows_kernel {
            return Err(ExecError::Unsupported(
                "kernel-mode item in a log of user mode (see LogWriter::with_kernel)",
            ));
        }
        match item {
            ExecItem::Insn(r) => {
                self.threads.cursor.saw_insn();
                self.write_insn(r, mem)?
            }
            ExecItem::Event(e) => {
                // The run so far is the current thread's, whatever the event.
                self.put_pending();
                // The process (and what of it is logged) may change.
                self.checked_in = (0, 0);
                self.threads.follow(item);
                self.put_event(e);
                self.threads.apply(e, VERSION);
            }
        }
        if self.buf.len() >= WRITE_CHUNK {
            self.write_out()?;
        }
        Ok(())
    }

    /// Appends a block run: the same log as [`Self::write_item`] of each of
    /// [`RunView::retired`] gives. The block's instructions were decoded
    /// from `mem` when the source first saw it; its straight-line body is
    /// one count of predicted instructions.
    pub fn write_block(&mut self, run: RunView<'_>, mem: &CodeMemory) -> Result<(), ExecError> {
        let n = run.count();
        if n == 0 {
            return Ok(());
        }
        self.threads.cursor.saw_insn();
        let insns = &run.block.insns;
        let decoded = |b: &BlockInsn| DecodedInsn {
            len: b.len,
            class: b.class,
            target: matches!(
                b.class,
                BranchClass::CondBranch | BranchClass::DirectJump | BranchClass::DirectCall
            )
            .then_some(b.target),
            kernel_entry: None,
            mov_cr3: false,
            rep_string: b.rep,
        };
        let st = &self.threads.state;
        let block = run.block;
        if block.plain_body
            && n == insns.len()
            && st.ip == Some(block.start())
            && st.mode == Some(ExecMode::Bit64)
            && !st.kernel
        {
            // The whole block where its pages are logged: every instruction
            // but the last predicted (a count), the last as it goes.
            let first = page_base(block.start());
            let end = run.block.end().wrapping_sub(1);
            let pages = (page_base(end).wrapping_sub(first) / PAGE_SIZE) as usize + 1;
            if (0..pages).all(|k| self.page_logged(first.wrapping_add(k as u64 * PAGE_SIZE), mem)) {
                self.pending_seq += n as u64 - 1;
                self.insns += n as u64 - 1;
                let last = block.last();
                self.threads.state.ip = Some(last.ip);
                self.write_flow(&last.retired(run.next_ip), &decoded(last));
                if self.buf.len() >= WRITE_CHUNK {
                    self.write_out()?;
                }
                return Ok(());
            }
        }
        self.write_decoded(&run.insn(0), &decoded(&insns[0]), mem)?;
        let mut i = 1;
        if run.block.plain_body && n > 2 {
            // Instructions 1..n-1: non-branches, each predicted (its
            // fall-through), in the mode and privilege of the first: one
            // count, where their pages are logged already (else each
            // goes the general way, which logs them).
            let body = &insns[1..n - 1];
            let first = page_base(body[0].ip);
            let end = body[body.len() - 1].fall_through().wrapping_sub(1);
            let pages = (page_base(end).wrapping_sub(first) / PAGE_SIZE) as usize + 1;
            if (0..pages).all(|k| self.page_logged(first.wrapping_add(k as u64 * PAGE_SIZE), mem)) {
                self.pending_seq += body.len() as u64;
                self.insns += body.len() as u64;
                self.threads.state.ip = Some(insns[n - 1].ip);
                i = n - 1;
            }
        }
        for j in i..n {
            self.write_decoded(&run.insn(j), &decoded(&insns[j]), mem)?;
        }
        if self.buf.len() >= WRITE_CHUNK {
            self.write_out()?;
        }
        Ok(())
    }

    /// Whether the page at `base` is logged as `mem` holds it now.
    #[inline]
    fn page_logged(&mut self, base: u64, mem: &CodeMemory) -> bool {
        let key = (mem as *const CodeMemory as usize, mem.version());
        if key != self.checked_in {
            self.checked_in = key;
            self.checked.fill(u64::MAX);
        }
        if self.checked[checked_slot(base)] == base {
            return true;
        }
        let logged = mem
            .generation(base)
            .is_some_and(|g| self.threads.process.get(&base) == Some(&g));
        if logged {
            self.checked[checked_slot(base)] = base;
        }
        logged
    }

    fn write_insn(&mut self, r: &Retired, mem: &CodeMemory) -> Result<(), ExecError> {
        let d = decode_at(mem, r.ip, r.mode)?;
        if d.len != r.len || d.class != r.class {
            return Err(ExecError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("instruction at {:#x} does not match the code bytes", r.ip),
            )));
        }
        self.write_decoded(r, &d, mem)
    }

    /// Appends instruction `r`, decoded as `d`.
    fn write_decoded(
        &mut self,
        r: &Retired,
        d: &DecodedInsn,
        mem: &CodeMemory,
    ) -> Result<(), ExecError> {
        // Log the pages the instruction occupies, before it.
        let last = r.ip.wrapping_add(u64::from(r.len) - 1);
        for base in [page_base(r.ip), page_base(last)] {
            if self.page_logged(base, mem) {
                continue;
            }
            let gen = mem.generation(base).ok_or(ExecError::NoCode { ip: base })?;
            if self.threads.process.get(&base) != Some(&gen) {
                self.put_pending();
                let Some(bytes) = mem.page(base) else {
                    return Err(ExecError::NoCode { ip: base });
                };
                self.buf.push(TAG_CODE_PAGE);
                put_v(&mut self.buf, base / PAGE_SIZE);
                self.buf.extend_from_slice(bytes);
                self.threads.process.insert(base, gen);
            }
            self.checked[checked_slot(base)] = base;
        }
        self.write_flow(r, d);
        Ok(())
    }

    /// The part of [`Self::write_decoded`] after the pages: the thread's
    /// mode, privilege and IP where they change, then where it went.
    #[inline]
    fn write_flow(&mut self, r: &Retired, d: &DecodedInsn) {
        let st = &mut self.threads.state;
        if st.mode != Some(r.mode) {
            if self.pending_seq > 0 {
                put_seq(&mut self.buf, &mut self.pending_seq);
            }
            self.buf.push(TAG_MODE);
            self.buf.push(mode_code(r.mode));
            st.mode = Some(r.mode);
        }
        if st.kernel != r.kernel {
            if self.pending_seq > 0 {
                put_seq(&mut self.buf, &mut self.pending_seq);
            }
            self.buf.push(TAG_PRIVILEGE);
            self.buf.push(u8::from(r.kernel));
            st.kernel = r.kernel;
        }
        if st.ip != Some(r.ip) {
            if self.pending_seq > 0 {
                put_seq(&mut self.buf, &mut self.pending_seq);
            }
            self.buf.push(TAG_SET_IP);
            put_v(&mut self.buf, r.ip);
        }
        let ft = r.fall_through();
        if st.predictor.predict(d, r.ip) == Some(r.next_ip) {
            self.pending_seq += 1;
        } else if d.class == BranchClass::CondBranch && d.target == Some(r.next_ip) {
            self.buf.push(TAG_TAKEN);
            put_v(&mut self.buf, self.pending_seq);
            self.pending_seq = 0;
        } else {
            self.buf.push(TAG_RUN);
            put_v(&mut self.buf, self.pending_seq);
            put_v(&mut self.buf, zigzag(r.next_ip.wrapping_sub(ft) as i64));
            self.pending_seq = 0;
        }
        st.predictor.retire(d, r.ip);
        st.ip = Some(r.next_ip);
        self.insns += 1;
    }

    fn put_pending(&mut self) {
        if self.pending_seq > 0 {
            put_seq(&mut self.buf, &mut self.pending_seq);
        }
    }

    fn put_event(&mut self, e: &Event) {
        let b = &mut self.buf;
        match e {
            Event::Exec { pid, path } => {
                b.push(TAG_EXEC);
                put_v(b, u64::from(*pid));
                put_str(b, path);
            }
            Event::Mappings(maps) => {
                b.push(TAG_MAPPINGS);
                put_v(b, maps.len() as u64);
                for m in maps {
                    put_v(b, m.start);
                    put_v(b, m.end.wrapping_sub(m.start));
                    put_v(b, m.offset);
                    b.push(m.perms.bits());
                    put_str(b, &m.path);
                }
            }
            Event::SyscallEnter { nr, args } => {
                b.push(TAG_SYSCALL_ENTER);
                put_v(b, *nr);
                for a in args {
                    put_v(b, *a);
                }
            }
            Event::SyscallExit { nr, ret } => {
                b.push(TAG_SYSCALL_EXIT);
                put_v(b, *nr);
                put_v(b, zigzag(*ret));
            }
            Event::Signal {
                signo,
                from_ip,
                handler,
            } => {
                b.push(TAG_SIGNAL);
                put_v(b, zigzag(i64::from(*signo)));
                put_v(b, *from_ip);
                match handler {
                    Some(h) => {
                        b.push(1);
                        put_v(b, *h);
                    }
                    None => b.push(0),
                }
            }
            Event::Exit(kind) => {
                b.push(TAG_EXIT);
                let (k, v) = match kind {
                    ExitKind::Exited(c) => (0, *c),
                    ExitKind::Killed(s) => (1, *s),
                };
                b.push(k);
                put_v(b, zigzag(i64::from(v)));
            }
            Event::Stopped(reason) => {
                b.push(TAG_STOPPED);
                b.push(match reason {
                    StopReason::StepLimit => 0,
                    StopReason::Interrupted => 1,
                });
            }
            Event::MovCr3 { cr3 } => {
                b.push(TAG_MOV_CR3);
                put_v(b, *cr3);
            }
            Event::Interrupt {
                vector,
                from_ip,
                from_kernel,
                handler,
            } => {
                b.push(TAG_INTERRUPT);
                b.push(*vector);
                b.push(u8::from(*from_kernel));
                put_v(b, *from_ip);
                put_v(b, *handler);
            }
            Event::Switch(t) => {
                b.push(TAG_SWITCH);
                put_v(b, u64::from(t.pid));
                put_v(b, u64::from(t.tid));
            }
            Event::Clone { child, kind } => {
                b.push(TAG_CLONE);
                put_v(b, u64::from(child.pid));
                put_v(b, u64::from(child.tid));
                b.push(clone_code(*kind));
            }
            Event::Untraced { thread, why } => {
                b.push(TAG_UNTRACED);
                put_v(b, u64::from(thread.pid));
                put_v(b, u64::from(thread.tid));
                put_str(b, why);
            }
        }
    }

    fn write_out(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes everything recorded so far (including the current run of
    /// sequential instructions) through to `W` and flushes it.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.put_pending();
        self.write_out()?;
        self.out.flush()
    }

    /// Writes the end record, flushes and returns the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.put_pending();
        self.buf.push(TAG_END);
        put_v(&mut self.buf, self.insns);
        self.flush()?;
        Ok(self.out)
    }
}

fn put_seq(buf: &mut Vec<u8>, pending: &mut u64) {
    buf.push(TAG_SEQ);
    put_v(buf, *pending);
    *pending = 0;
}

/// Counts from copying a source into a log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Retired instructions.
    pub instructions: u64,
    /// Events.
    pub events: u64,
}

/// Drains `source` into `writer` (flushing it at the end).
pub fn write_source<W: Write>(
    source: &mut dyn ExecutionSource,
    writer: &mut LogWriter<W>,
) -> Result<CopyStats, ExecError> {
    let mut stats = CopyStats::default();
    while let Some(item) = source.next_item()? {
        match &item {
            ExecItem::Insn(_) => stats.instructions += 1,
            ExecItem::Event(_) => stats.events += 1,
        }
        writer.write_item(&item, source.memory())?;
    }
    writer.flush()?;
    Ok(stats)
}

/// Replays an execution log as an [`ExecutionSource`].
pub struct LogReader<B: AsRef<[u8]>> {
    data: B,
    pos: usize,
    /// Thread states; per process: its code.
    threads: Threads<CodeMemory>,
    version: u32,
    flags: u32,
    /// Sequential instructions still to yield from the current record.
    seq_left: u64,
    /// After `seq_left` reaches zero: one more instruction going elsewhere.
    jump: Option<Tail>,
    /// Instructions yielded.
    insns: u64,
    /// The end record was read.
    ended: bool,
    truncated: bool,
    done: bool,
    /// Decoded instructions by process and IP (direct-mapped); cleared when code changes.
    cache: Vec<Option<(u32, u64, ExecMode, DecodedInsn)>>,
}

const CACHE_SLOTS: usize = 1 << 13;

/// How the last instruction of a run leaves it.
#[derive(Clone, Copy, Debug)]
enum Tail {
    /// To its fall-through plus this displacement.
    Delta(i64),
    /// A conditional branch, taken.
    Taken,
}

/// Short read: the record at this offset is incomplete.
struct Short;

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn u8(&mut self) -> Result<u8, Short> {
        let b = *self.data.get(self.pos).ok_or(Short)?;
        self.pos += 1;
        Ok(b)
    }

    fn v(&mut self) -> Result<Option<u64>, Short> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return Ok(None);
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    fn bytes(&mut self, n: u64) -> Result<&[u8], Short> {
        let n = usize::try_from(n).map_err(|_| Short)?;
        let end = self.pos.checked_add(n).ok_or(Short)?;
        let s = self.data.get(self.pos..end).ok_or(Short)?;
        self.pos = end;
        Ok(s)
    }
}

/// Outcome of parsing one record.
enum Parsed {
    Item(ExecItem),
    /// A state record (page, mode, IP, run): nothing to yield yet.
    State,
    /// The end record, with its instruction count and offset.
    End(u64, usize),
}

impl<B: AsRef<[u8]>> LogReader<B> {
    /// Opens a log held in `data` (a `Vec<u8>`, a slice, an mmap...).
    pub fn new(data: B) -> Result<Self, ExecError> {
        let d = data.as_ref();
        let header = d.get(..HEADER_LEN).ok_or(ExecError::CorruptLog {
            offset: 0,
            what: "shorter than the header",
        })?;
        if header[..8] != MAGIC {
            return Err(ExecError::CorruptLog {
                offset: 0,
                what: "bad magic",
            });
        }
        let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if !(1..=VERSION).contains(&version) {
            return Err(ExecError::UnsupportedVersion(version));
        }
        let flags = match version {
            1 => 0,
            _ => u32::from_le_bytes([header[12], header[13], header[14], header[15]]),
        };
        if flags & !FLAG_KERNEL != 0 {
            return Err(ExecError::CorruptLog {
                offset: 12,
                what: "unknown header flags",
            });
        }
        Ok(Self {
            data,
            pos: HEADER_LEN,
            threads: Threads::new(),
            version,
            flags,
            seq_left: 0,
            jump: None,
            insns: 0,
            ended: false,
            truncated: false,
            done: false,
            cache: Vec::new(),
        })
    }

    /// The format version of the log.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether the log ended inside a record or (version 3) without its end
    /// record: a recording that was killed. Everything before was replayed.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn corrupt(&self, at: usize, what: &'static str) -> ExecError {
        ExecError::CorruptLog {
            offset: at as u64,
            what,
        }
    }

    /// The log ends here (at `at`, of `len` bytes) without its end record.
    fn cut_short(&mut self, at: usize) -> ExecError {
        let len = self.data.as_ref().len();
        self.truncated = true;
        self.pos = len;
        ExecError::TruncatedLog {
            offset: at as u64,
            len: len as u64,
        }
    }

    /// Parses the record at `self.pos`; `Ok(None)` at the end of the data.
    fn parse_record(&mut self) -> Result<Option<Parsed>, ExecError> {
        let start = self.pos;
        let data = self.data.as_ref();
        if start >= data.len() {
            return Ok(None);
        }
        if self.ended {
            return Err(self.corrupt(start, "data after the end record"));
        }
        let mut c = Cursor { data, pos: start };
        let st = &mut self.threads.state;
        let mut rs = State {
            mem: &mut self.threads.process,
            mode: &mut st.mode,
            kernel: &mut st.kernel,
            ip: &mut st.ip,
            seq_left: &mut self.seq_left,
            jump: &mut self.jump,
            version: self.version,
        };
        let r = parse_one(&mut c, &mut rs);
        match r {
            Ok(Ok(p)) => {
                let tag = data[start];
                self.pos = c.pos;
                if tag == TAG_CODE_PAGE {
                    self.cache.iter_mut().for_each(|e| *e = None);
                }
                if let Parsed::Item(item @ ExecItem::Event(e)) = &p {
                    self.threads.follow(item);
                    self.threads.apply(e, self.version);
                    if matches!(e, Event::Exec { .. } | Event::Clone { .. }) {
                        self.cache.iter_mut().for_each(|e| *e = None);
                    }
                }
                Ok(Some(p))
            }
            Ok(Err(what)) => Err(self.corrupt(start, what)),
            Err(Short) => Err(self.cut_short(start)),
        }
    }

    fn next_insn(&mut self, tail: Option<Tail>) -> Result<Retired, ExecError> {
        self.threads.cursor.saw_insn();
        let pid = self.threads.thread.pid;
        let st = &self.threads.state;
        let ip = st
            .ip
            .ok_or_else(|| self.corrupt(self.pos, "instruction before any IP"))?;
        let mode = st.mode.unwrap_or(ExecMode::Bit64);
        if self.cache.is_empty() {
            self.cache = vec![None; CACHE_SLOTS];
        }
        let slot = (ip ^ (ip >> 13)) as usize % CACHE_SLOTS;
        let d = match self.cache[slot] {
            Some((p, at, m, d)) if at == ip && m == mode && p == pid => d,
            _ => {
                let d = decode_at(&self.threads.process, ip, mode)?;
                self.cache[slot] = Some((pid, ip, mode, d));
                d
            }
        };
        let ft = ip.wrapping_add(u64::from(d.len));
        let st = &mut self.threads.state;
        let next_ip = match tail {
            Some(Tail::Delta(delta)) => ft.wrapping_add(delta as u64),
            Some(Tail::Taken) => match (d.class, d.target) {
                (BranchClass::CondBranch, Some(t)) => t,
                _ => return Err(self.corrupt(self.pos, "taken record on a non-conditional branch")),
            },
            None => match st.predictor.predict(&d, ip) {
                Some(n) => n,
                None => {
                    return Err(
                        self.corrupt(self.pos, "unpredictable instruction in a predicted run")
                    )
                }
            },
        };
        st.predictor.retire(&d, ip);
        st.ip = Some(next_ip);
        self.insns += 1;
        Ok(Retired {
            ip,
            next_ip,
            len: d.len,
            class: d.class,
            mode,
            kernel: st.kernel,
        })
    }
}

/// The reader state a record updates.
struct State<'a> {
    mem: &'a mut CodeMemory,
    mode: &'a mut Option<ExecMode>,
    kernel: &'a mut bool,
    ip: &'a mut Option<u64>,
    seq_left: &'a mut u64,
    jump: &'a mut Option<Tail>,
    version: u32,
}

/// Parses one record. Outer error: the data ends inside it. Inner error: it is malformed.
fn parse_one(
    c: &mut Cursor<'_>,
    st: &mut State<'_>,
) -> Result<Result<Parsed, &'static str>, Short> {
    macro_rules! v {
        () => {
            match c.v()? {
                Some(v) => v,
                None => return Ok(Err("varint overflows 64 bits")),
            }
        };
    }
    macro_rules! id {
        () => {
            match u32::try_from(v!()) {
                Ok(v) => v,
                Err(_) => return Ok(Err("process or thread id out of range")),
            }
        };
    }
    macro_rules! s {
        () => {{
            let n = v!();
            match String::from_utf8(c.bytes(n)?.to_vec()) {
                Ok(s) => s,
                Err(_) => return Ok(Err("string is not UTF-8")),
            }
        }};
    }
    let start = c.pos;
    let tag = c.u8()?;
    let item = match tag {
        TAG_CODE_PAGE => {
            let page = v!();
            let bytes = c.bytes(PAGE_SIZE)?;
            let Some(base) = page.checked_mul(PAGE_SIZE) else {
                return Ok(Err("page number out of range"));
            };
            st.mem.set_page(base, bytes);
            return Ok(Ok(Parsed::State));
        }
        TAG_MODE => {
            let Some(m) = mode_from_code(c.u8()?) else {
                return Ok(Err("unknown mode"));
            };
            *st.mode = Some(m);
            return Ok(Ok(Parsed::State));
        }
        TAG_SET_IP => {
            *st.ip = Some(v!());
            return Ok(Ok(Parsed::State));
        }
        TAG_SEQ => {
            *st.seq_left = v!();
            *st.jump = None;
            return Ok(Ok(Parsed::State));
        }
        TAG_RUN => {
            *st.seq_left = v!();
            *st.jump = Some(Tail::Delta(unzigzag(v!())));
            return Ok(Ok(Parsed::State));
        }
        TAG_TAKEN => {
            *st.seq_left = v!();
            *st.jump = Some(Tail::Taken);
            return Ok(Ok(Parsed::State));
        }
        TAG_PRIVILEGE | TAG_MOV_CR3 | TAG_INTERRUPT if st.version < 2 => {
            return Ok(Err("record not in version 1"))
        }
        TAG_SWITCH | TAG_CLONE | TAG_UNTRACED | TAG_END if st.version < 3 => {
            return Ok(Err("record not in versions 1 and 2"))
        }
        TAG_PRIVILEGE => {
            *st.kernel = match c.u8()? {
                0 => false,
                1 => true,
                _ => return Ok(Err("unknown privilege level")),
            };
            return Ok(Ok(Parsed::State));
        }
        TAG_END => return Ok(Ok(Parsed::End(v!(), start))),
        TAG_MOV_CR3 => Event::MovCr3 { cr3: v!() },
        TAG_INTERRUPT => {
            let vector = c.u8()?;
            let from_kernel = match c.u8()? {
                0 => false,
                1 => true,
                _ => return Ok(Err("bad privilege flag")),
            };
            let from_ip = v!();
            Event::Interrupt {
                vector,
                from_ip,
                from_kernel,
                handler: v!(),
            }
        }
        TAG_SWITCH => {
            let pid = id!();
            Event::Switch(ThreadId { pid, tid: id!() })
        }
        TAG_CLONE => {
            let pid = id!();
            let child = ThreadId { pid, tid: id!() };
            let kind = match c.u8()? {
                0 => CloneKind::Thread,
                1 => CloneKind::Fork,
                2 => CloneKind::Vfork,
                _ => return Ok(Err("unknown clone kind")),
            };
            Event::Clone { child, kind }
        }
        TAG_UNTRACED => {
            let pid = id!();
            let thread = ThreadId { pid, tid: id!() };
            Event::Untraced { thread, why: s!() }
        }
        TAG_EXEC => {
            let pid = id!();
            Event::Exec { pid, path: s!() }
        }
        TAG_MAPPINGS => {
            let n = v!();
            let mut maps = Vec::new();
            for _ in 0..n {
                let start = v!();
                let size = v!();
                let offset = v!();
                let Some(perms) = Perms::from_bits(c.u8()?) else {
                    return Ok(Err("bad permission bits"));
                };
                let path = s!();
                maps.push(Mapping {
                    start,
                    end: start.wrapping_add(size),
                    offset,
                    perms,
                    path,
                });
            }
            Event::Mappings(maps)
        }
        TAG_SYSCALL_ENTER => {
            let nr = v!();
            let mut args = [0u64; 6];
            for a in &mut args {
                *a = v!();
            }
            Event::SyscallEnter { nr, args }
        }
        TAG_SYSCALL_EXIT => {
            let nr = v!();
            Event::SyscallExit {
                nr,
                ret: unzigzag(v!()),
            }
        }
        TAG_SIGNAL => {
            let Ok(signo) = i32::try_from(unzigzag(v!())) else {
                return Ok(Err("signal number out of range"));
            };
            let from_ip = v!();
            let handler = match c.u8()? {
                0 => None,
                1 => Some(v!()),
                _ => return Ok(Err("bad handler flag")),
            };
            Event::Signal {
                signo,
                from_ip,
                handler,
            }
        }
        TAG_EXIT => {
            let k = c.u8()?;
            let Ok(v) = i32::try_from(unzigzag(v!())) else {
                return Ok(Err("exit value out of range"));
            };
            Event::Exit(match k {
                0 => ExitKind::Exited(v),
                1 => ExitKind::Killed(v),
                _ => return Ok(Err("unknown exit kind")),
            })
        }
        TAG_STOPPED => Event::Stopped(match c.u8()? {
            0 => StopReason::StepLimit,
            1 => StopReason::Interrupted,
            _ => return Ok(Err("unknown stop reason")),
        }),
        _ => return Ok(Err("unknown record tag")),
    };
    Ok(Ok(Parsed::Item(ExecItem::Event(item))))
}

impl<B: AsRef<[u8]>> ExecutionSource for LogReader<B> {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        loop {
            if self.done {
                return Ok(None);
            }
            if self.seq_left > 0 {
                self.seq_left -= 1;
                return self.next_insn(None).map(|r| Some(ExecItem::Insn(r)));
            }
            if let Some(tail) = self.jump.take() {
                return self.next_insn(Some(tail)).map(|r| Some(ExecItem::Insn(r)));
            }
            match self.parse_record() {
                Ok(Some(Parsed::Item(item))) => return Ok(Some(item)),
                Ok(Some(Parsed::State)) => {}
                Ok(Some(Parsed::End(n, at))) => {
                    if n != self.insns {
                        self.done = true;
                        return Err(self.corrupt(
                            at,
                            "the end record counts other instructions than the log holds",
                        ));
                    }
                    self.ended = true;
                }
                Ok(None) => {
                    self.done = true;
                    if self.version >= 3 && !self.ended {
                        return Err(self.cut_short(self.pos));
                    }
                    return Ok(None);
                }
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
    }

    fn memory(&self) -> &CodeMemory {
        &self.threads.process
    }

    fn shows_kernel(&self) -> bool {
        self.flags & FLAG_KERNEL != 0
    }

    fn process_memory(&self, pid: u32) -> Option<&CodeMemory> {
        if pid == self.threads.thread.pid {
            Some(&self.threads.process)
        } else {
            self.threads.processes.get(&pid)
        }
    }
}

impl LogReader<Vec<u8>> {
    /// Reads a whole log file.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self, ExecError> {
        Self::new(std::fs::read(path)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{check_continuity, collect, thread_items};

    fn mem_with(code: &[(u64, &[u8])]) -> CodeMemory {
        let mut pages: HashMap<u64, Vec<u8>> = HashMap::new();
        for (addr, bytes) in code {
            for (i, b) in bytes.iter().enumerate() {
                let a = addr + i as u64;
                pages
                    .entry(page_base(a))
                    .or_insert_with(|| vec![0xcc; PAGE_SIZE as usize])
                    [(a - page_base(a)) as usize] = *b;
            }
        }
        let mut m = CodeMemory::new();
        for (b, p) in pages {
            m.set_page(b, &p);
        }
        m
    }

    fn insn(ip: u64, len: u8, class: BranchClass, next_ip: u64) -> ExecItem {
        ExecItem::Insn(Retired {
            ip,
            next_ip,
            len,
            class,
            mode: ExecMode::Bit64,
            kernel: false,
        })
    }

    /// A loop: 0x1000 nop; 0x1001 dec ecx; 0x1003 jnz 0x1000; 0x1005 syscall,
    /// with every event kind, an instruction crossing a page and a signal.
    fn sample() -> (CodeMemory, Vec<ExecItem>) {
        let mem = mem_with(&[
            (0x1000, &[0x90, 0xff, 0xc9, 0x75, 0xfb, 0x0f, 0x05]),
            (0x1ffe, &[0xe8, 0xfd, 0xef, 0xff, 0xff]), // call 0x1000 across the page end
            (0x7000, &[0xc3]),
        ]);
        let mut items = vec![
            ExecItem::Event(Event::Exec {
                pid: 42,
                path: "/bin/x".into(),
            }),
            ExecItem::Event(Event::Mappings(vec![Mapping {
                start: 0x1000,
                end: 0x3000,
                offset: 0x2000,
                perms: Perms {
                    read: true,
                    exec: true,
                    ..Perms::default()
                },
                path: "/bin/x".into(),
            }])),
        ];
        for i in 0..3 {
            items.push(insn(0x1000, 1, BranchClass::Other, 0x1001));
            items.push(insn(0x1001, 2, BranchClass::Other, 0x1003));
            items.push(insn(
                0x1003,
                2,
                BranchClass::CondBranch,
                if i < 2 { 0x1000 } else { 0x1005 },
            ));
        }
        items.push(insn(0x1005, 2, BranchClass::KernelEntry, 0x1007));
        items.push(ExecItem::Event(Event::SyscallEnter {
            nr: 9,
            args: [1, 2, 3, 4, 5, u64::MAX],
        }));
        items.push(ExecItem::Event(Event::SyscallExit { nr: 9, ret: -12 }));
        items.push(ExecItem::Event(Event::Signal {
            signo: 14,
            from_ip: 0x1ffe,
            handler: Some(0x7000),
        }));
        items.push(insn(0x7000, 1, BranchClass::Return, 0x1ffe));
        items.push(insn(0x1ffe, 5, BranchClass::DirectCall, 0x1000));
        items.push(insn(0x1000, 1, BranchClass::Other, 0x1001));
        items.push(ExecItem::Event(Event::Signal {
            signo: 11,
            from_ip: 0x1001,
            handler: None,
        }));
        items.push(ExecItem::Event(Event::Exit(ExitKind::Killed(11))));
        items.push(ExecItem::Event(Event::Stopped(StopReason::Interrupted)));
        (mem, items)
    }

    fn write(mem: &CodeMemory, items: &[ExecItem]) -> Vec<u8> {
        let mut w = LogWriter::new(Vec::new()).unwrap();
        for it in items {
            w.write_item(it, mem).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn round_trip() {
        let (mem, items) = sample();
        let bytes = write(&mem, &items);
        let mut r = LogReader::new(&bytes[..]).unwrap();
        let back = collect(&mut r).unwrap();
        assert_eq!(back, items);
        assert!(!r.is_truncated());
        assert_eq!(r.memory().page(0x1000), mem.page(0x1000));
        assert_eq!(r.memory().page(0x7000), mem.page(0x7000));
    }

    /// SYSCALL into kernel code that writes CR3 and returns with SYSRETQ,
    /// then an interrupt whose handler returns with IRETQ.
    fn kernel_sample() -> (CodeMemory, Vec<ExecItem>) {
        const K: u64 = 0xffff_ffff_8100_0000;
        let mem = mem_with(&[
            (0x1000, &[0x90, 0x0f, 0x05, 0x90]),
            (K, &[0x0f, 0x22, 0xd8, 0x48, 0x0f, 0x07]),
            (K + 0x10, &[0x48, 0xcf]),
        ]);
        let k = |ip, len, class, next_ip| match insn(ip, len, class, next_ip) {
            ExecItem::Insn(r) => ExecItem::Insn(Retired { kernel: true, ..r }),
            e => e,
        };
        let items = vec![
            insn(0x1000, 1, BranchClass::Other, 0x1001),
            insn(0x1001, 2, BranchClass::KernelEntry, K),
            k(K, 3, BranchClass::Other, K + 3),
            ExecItem::Event(Event::MovCr3 { cr3: 0x2000 }),
            k(K + 3, 3, BranchClass::FarBranch, 0x1003),
            ExecItem::Event(Event::Interrupt {
                vector: 32,
                from_ip: 0x1003,
                from_kernel: false,
                handler: K + 0x10,
            }),
            k(K + 0x10, 2, BranchClass::FarBranch, 0x1003),
            insn(0x1003, 1, BranchClass::Other, 0x1004),
        ];
        (mem, items)
    }

    #[test]
    fn kernel_items_round_trip_in_version_2() {
        let (mem, items) = kernel_sample();
        crate::exec::check_continuity(&items).unwrap();
        let mut w = LogWriter::with_kernel(Vec::new(), true).unwrap();
        for it in &items {
            w.write_item(it, &mem).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = LogReader::new(&bytes[..]).unwrap();
        assert!(r.shows_kernel());
        assert_eq!(collect(&mut r).unwrap(), items);
        // A log opened for user mode refuses kernel items.
        let mut w = LogWriter::new(Vec::new()).unwrap();
        w.write_item(&items[1], &mem).unwrap();
        assert!(matches!(
            w.write_item(&items[2], &mem),
            Err(ExecError::Unsupported(_))
        ));
        assert!(matches!(
            w.write_item(&items[3], &mem),
            Err(ExecError::Unsupported(_))
        ));
        // Version 1 has no privilege record.
        let mut v1 = bytes.clone();
        v1[8..16].copy_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        let r = collect(&mut LogReader::new(&v1[..]).unwrap());
        assert!(matches!(r, Err(ExecError::CorruptLog { .. })), "{r:?}");
    }

    #[test]
    fn older_versions_still_replay() {
        let (mem, items) = sample();
        let v3 = write(&mem, &items);
        assert_eq!(v3[8..16], [3, 0, 0, 0, 0, 0, 0, 0]);
        // Versions 1 and 2 had no end record: a log of one thread without
        // kernel code reads the same without it.
        let mut bytes = without_end(&v3, &items);
        for version in [1, 2] {
            bytes[8] = version;
            let mut r = LogReader::new(&bytes[..]).unwrap();
            assert!(!r.shows_kernel());
            assert_eq!(collect(&mut r).unwrap(), items, "version {version}");
            assert!(!r.is_truncated());
        }
        // Version 3 without its end record was cut short.
        bytes[8] = 3;
        let mut r = LogReader::new(&bytes[..]).unwrap();
        let (back, err) = collect_until_error(&mut r);
        assert_eq!(back, items);
        assert!(
            matches!(err, Some(ExecError::TruncatedLog { offset, len }) if offset == len && len == bytes.len() as u64),
            "{err:?}"
        );
        assert!(r.is_truncated());
        // Unknown flags are an error.
        bytes[8] = 2;
        bytes[12] = 2;
        assert!(matches!(
            LogReader::new(&bytes[..]),
            Err(ExecError::CorruptLog { offset: 12, .. })
        ));
    }

    #[test]
    fn every_prefix_replays_a_prefix_and_says_where_it_ends() {
        let (mem, items) = sample();
        let bytes = write(&mem, &items);
        for cut in HEADER_LEN..bytes.len() {
            let mut r = LogReader::new(&bytes[..cut]).unwrap();
            let (back, err) = collect_until_error(&mut r);
            assert!(back.len() <= items.len());
            assert_eq!(&items[..back.len()], &back[..], "cut at {cut}");
            assert!(
                matches!(err, Some(ExecError::TruncatedLog { offset, len }) if offset <= len && len == cut as u64),
                "cut at {cut}: {err:?}"
            );
            let msg = err.unwrap().to_string();
            assert!(msg.contains(&format!("of {cut}")), "{msg}");
        }
        let (back, err) = collect_until_error(&mut LogReader::new(&bytes[..]).unwrap());
        assert_eq!((back, err.is_none()), (items, true));
    }

    #[test]
    fn end_record_must_count_the_instructions() {
        let (mem, items) = sample();
        let mut bytes = write(&mem, &items);
        let n = bytes.len();
        assert_eq!(bytes[n - 2], TAG_END);
        bytes[n - 1] += 1;
        let (_, err) = collect_until_error(&mut LogReader::new(&bytes[..]).unwrap());
        assert!(
            matches!(err, Some(ExecError::CorruptLog { offset, .. }) if offset == n as u64 - 2),
            "{err:?}"
        );
        // Nothing may follow it.
        bytes[n - 1] -= 1;
        bytes.push(TAG_STOPPED);
        bytes.push(0);
        let (_, err) = collect_until_error(&mut LogReader::new(&bytes[..]).unwrap());
        assert!(
            matches!(err, Some(ExecError::CorruptLog { offset, .. }) if offset == n as u64),
            "{err:?}"
        );
    }

    /// The items up to the first error, and the error.
    fn collect_until_error(r: &mut dyn ExecutionSource) -> (Vec<ExecItem>, Option<ExecError>) {
        let mut out = Vec::new();
        loop {
            match r.next_item() {
                Ok(Some(i)) => out.push(i),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    /// A log without its end record.
    fn without_end(bytes: &[u8], items: &[ExecItem]) -> Vec<u8> {
        let n = items
            .iter()
            .filter(|i| matches!(i, ExecItem::Insn(_)))
            .count();
        let mut end = vec![TAG_END];
        put_v(&mut end, n as u64);
        assert!(bytes.ends_with(&end));
        bytes[..bytes.len() - end.len()].to_vec()
    }

    /// Two processes, three threads: a thread and a fork child created by
    /// clone records, switches between them mid-run, an exec in the child
    /// that replaces its code at the same address, and the exits.
    #[test]
    fn threads_and_processes_round_trip() {
        let parent = ThreadId::main_of(10);
        let worker = ThreadId { pid: 10, tid: 11 };
        let child = ThreadId::main_of(12);
        // Parent's code: a loop with a call; the child's program after exec
        // has other bytes at the same page.
        let mem_a = mem_with(&[(0x1000, &[0x90, 0xff, 0xc9, 0x75, 0xfb, 0x0f, 0x05])]);
        let mem_b = mem_with(&[(0x1000, &[0x48, 0x90, 0x0f, 0x05])]);
        let ins = |ip, len, class, next| insn(ip, len, class, next);
        let loop_body = |v: &mut Vec<(ExecItem, bool)>, n: usize| {
            for i in 0..n {
                v.push((ins(0x1000, 1, BranchClass::Other, 0x1001), false));
                v.push((ins(0x1001, 2, BranchClass::Other, 0x1003), false));
                let next = if i + 1 < n { 0x1000 } else { 0x1005 };
                v.push((ins(0x1003, 2, BranchClass::CondBranch, next), false));
            }
        };
        // (item, runs in the exec'd image)
        let mut v: Vec<(ExecItem, bool)> = vec![(
            ExecItem::Event(Event::Exec {
                pid: 10,
                path: "/bin/a".into(),
            }),
            false,
        )];
        loop_body(&mut v, 2);
        v.push((ins(0x1005, 2, BranchClass::KernelEntry, 0x1000), false));
        v.push((
            ExecItem::Event(Event::SyscallEnter {
                nr: 56,
                args: [0x3d0f00, 0, 0, 0, 0, 0],
            }),
            false,
        ));
        v.push((
            ExecItem::Event(Event::Clone {
                child: worker,
                kind: CloneKind::Thread,
            }),
            false,
        ));
        v.push((
            ExecItem::Event(Event::SyscallExit { nr: 56, ret: 11 }),
            false,
        ));
        v.push((ExecItem::Event(Event::Switch(worker)), false));
        // The worker starts mid-loop; the parent's run state must not leak into it.
        v.push((ins(0x1001, 2, BranchClass::Other, 0x1003), false));
        v.push((ins(0x1003, 2, BranchClass::CondBranch, 0x1000), false));
        v.push((ExecItem::Event(Event::Switch(parent)), false));
        v.push((ins(0x1000, 1, BranchClass::Other, 0x1001), false));
        v.push((
            ExecItem::Event(Event::Clone {
                child,
                kind: CloneKind::Fork,
            }),
            false,
        ));
        v.push((ExecItem::Event(Event::Switch(child)), false));
        v.push((ExecItem::Event(Event::Mappings(Vec::new())), false));
        v.push((ins(0x1001, 2, BranchClass::Other, 0x1003), false));
        v.push((ins(0x1003, 2, BranchClass::CondBranch, 0x1005), false));
        v.push((ins(0x1005, 2, BranchClass::KernelEntry, 0x1000), false));
        v.push((
            ExecItem::Event(Event::SyscallEnter {
                nr: 59,
                args: [0; 6],
            }),
            false,
        ));
        v.push((
            ExecItem::Event(Event::Exec {
                pid: 12,
                path: "/bin/b".into(),
            }),
            true,
        ));
        v.push((ExecItem::Event(Event::SyscallExit { nr: 59, ret: 0 }), true));
        v.push((ins(0x1000, 2, BranchClass::Other, 0x1002), true));
        v.push((ExecItem::Event(Event::Switch(worker)), false));
        v.push((ins(0x1000, 1, BranchClass::Other, 0x1001), false));
        v.push((ExecItem::Event(Event::Exit(ExitKind::Exited(0))), false));
        v.push((ExecItem::Event(Event::Switch(child)), true));
        v.push((ins(0x1002, 2, BranchClass::KernelEntry, 0x1004), true));
        v.push((ExecItem::Event(Event::Exit(ExitKind::Exited(3))), true));
        v.push((
            ExecItem::Event(Event::Untraced {
                thread: ThreadId::main_of(13),
                why: "a test".into(),
            }),
            true,
        ));
        v.push((ExecItem::Event(Event::Switch(parent)), false));
        v.push((ins(0x1001, 2, BranchClass::Other, 0x1003), false));
        v.push((ExecItem::Event(Event::Exit(ExitKind::Exited(0))), false));
        let items: Vec<ExecItem> = v.iter().map(|(i, _)| i.clone()).collect();
        check_continuity(&items).unwrap();
        let mut w = LogWriter::new(Vec::new()).unwrap();
        for (item, exec_d) in &v {
            w.write_item(item, if *exec_d { &mem_b } else { &mem_a })
                .unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = LogReader::new(&bytes[..]).unwrap();
        let mut back = Vec::new();
        while let Some(item) = r.next_item().unwrap() {
            // The reader holds each process's code as it was.
            if let ExecItem::Insn(i) = &item {
                let want = if v[back.len()].1 { &mem_b } else { &mem_a };
                assert_eq!(r.memory().page(i.ip), want.page(i.ip), "{i:?}");
            }
            back.push(item);
        }
        assert_eq!(back, items);
        assert_eq!(
            r.process_memory(10).and_then(|m| m.page(0x1000)),
            mem_a.page(0x1000)
        );
        assert_eq!(
            r.process_memory(12).and_then(|m| m.page(0x1000)),
            mem_b.page(0x1000)
        );
        assert_eq!(
            thread_items(&back, worker).len(),
            thread_items(&items, worker).len()
        );
    }

    #[test]
    fn header_errors() {
        assert!(matches!(
            LogReader::new(&b"PTSIM"[..]),
            Err(ExecError::CorruptLog { offset: 0, .. })
        ));
        assert!(matches!(
            LogReader::new(&b"XXXXXXXX\x01\0\0\0\0\0\0\0"[..]),
            Err(ExecError::CorruptLog { .. })
        ));
        assert!(matches!(
            LogReader::new(&b"PTSIMEXL\x07\0\0\0\0\0\0\0"[..]),
            Err(ExecError::UnsupportedVersion(7))
        ));
    }

    #[test]
    fn corrupt_record_reports_offset() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&[TAG_STOPPED, 1, 0x7e]);
        let mut r = LogReader::new(&bytes[..]).unwrap();
        assert_eq!(
            r.next_item().unwrap(),
            Some(ExecItem::Event(Event::Stopped(StopReason::Interrupted)))
        );
        assert!(matches!(
            r.next_item(),
            Err(ExecError::CorruptLog { offset: 18, .. })
        ));
        assert_eq!(r.next_item().unwrap(), None);
    }

    #[test]
    fn writer_rejects_items_that_do_not_match_the_code() {
        let (mem, _) = sample();
        let mut w = LogWriter::new(Vec::new()).unwrap();
        assert!(w
            .write_item(&insn(0x1000, 2, BranchClass::Other, 0x1002), &mem)
            .is_err());
        assert!(matches!(
            w.write_item(&insn(0x9000, 1, BranchClass::Other, 0x9001), &mem),
            Err(ExecError::NoCode { .. })
        ));
    }

    #[test]
    fn sequential_code_is_compact() {
        let mem = mem_with(&[(0x1000, &[0x90; 2000])]);
        let items: Vec<_> = (0..2000)
            .map(|i| insn(0x1000 + i, 1, BranchClass::Other, 0x1001 + i))
            .collect();
        let bytes = write(&mem, &items);
        // Header, one page, a mode, an IP and one run.
        assert!(
            bytes.len() < HEADER_LEN + PAGE_SIZE as usize + 16,
            "{}",
            bytes.len()
        );
    }

    #[test]
    fn deep_recursion_overflows_the_return_stack_and_still_round_trips() {
        use crate::exec::script::{Directive, Script};
        // 0x1000: dec ecx; jz 0x1009; call 0x1000; 0x1009: ret  (entered by a call)
        let code = [0xff, 0xc9, 0x74, 0x05, 0xe8, 0xf7, 0xff, 0xff, 0xff, 0xc3];
        let mut dirs = vec![Directive::NotTaken; 99];
        dirs.push(Directive::Taken);
        let script = Script::new(0x800, ExecMode::Bit64)
            .code(0x800, &[0xe8, 0xfb, 0x07, 0, 0, 0x90]) // call 0x1000; nop
            .code(0x1000, &code)
            .directives(dirs);
        let items = collect(&mut script.clone()).unwrap();
        // call, 100 x (dec, jz) + 99 calls + 100 rets, nop
        assert_eq!(items.len(), 1 + 200 + 99 + 100 + 1);
        let mut w = LogWriter::new(Vec::new()).unwrap();
        write_source(&mut script.clone(), &mut w).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(
            collect(&mut LogReader::new(&bytes[..]).unwrap()).unwrap(),
            items
        );
        // Direct calls and the innermost 64 returns cost nothing; the other
        // 36 returns and the taken jz cost a few bytes each.
        assert!(
            bytes.len() < HEADER_LEN + 2 * (PAGE_SIZE as usize + 4) + 40 * 4,
            "{}",
            bytes.len()
        );
    }

    #[test]
    fn varints() {
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            let mut b = Vec::new();
            put_v(&mut b, v);
            let mut c = Cursor { data: &b, pos: 0 };
            assert_eq!(c.v().ok().flatten(), Some(v));
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        let mut c = Cursor {
            data: &[0xff; 11],
            pos: 0,
        };
        assert!(matches!(c.v(), Ok(None)));
    }
}
