//! Blocks of straight-line code, decoded once, and their executions: the
//! coarse item a source that sees blocks (QEMU's translation blocks) hands
//! to the recorder, so that the per-instruction work of a recording is what
//! the PT logic needs and no more.
//!
//! A [`CodeBlock`] is decoded from its code bytes once (iced-x86), when the
//! source first sees it, and kept in the source's [`BlockTable`]; a
//! [`BlockRun`] is one execution of it, naming it by [`BlockId`]: every
//! instruction in order, each going to the next, the last one going to
//! [`BlockRun::next_ip`] (or not retiring, for an instruction that faults).
//! [`RunView::retired`] spells a run out as the [`Retired`] items it
//! stands for: the per-instruction path, which the recorder's block path
//! ([`crate::pt::PtLogic::retire_block`], [`crate::exec::log::LogWriter::write_block`])
//! must match byte for byte.

use super::insn::decode_bytes;
use super::{BranchClass, ExecError, ExecItem, ExecMode, Retired};

/// One instruction of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInsn {
    /// Its address.
    pub ip: u64,
    /// Its length.
    pub len: u8,
    /// Its class.
    pub class: BranchClass,
    /// The target of a direct branch (0 for others).
    pub target: u64,
    /// A REP-prefixed string instruction (QEMU runs each iteration as a block of its own).
    pub rep: bool,
    /// An instruction that always faults (UD2, HLT): it never retires.
    pub faults: bool,
}

impl BlockInsn {
    /// The next sequential address.
    #[inline]
    pub fn fall_through(&self) -> u64 {
        self.ip.wrapping_add(u64::from(self.len))
    }

    /// The retired instruction it is when it goes to `next_ip`.
    #[inline]
    pub fn retired(&self, next_ip: u64) -> Retired {
        Retired {
            ip: self.ip,
            next_ip,
            len: self.len,
            class: self.class,
            mode: ExecMode::Bit64,
            kernel: false,
        }
    }
}

/// Where an instruction sends control by its own semantics (not counting
/// an asynchronous transfer, such as a signal, after it): what a source
/// that sees only where blocks start tests each next block's start against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exits {
    /// Anywhere: an indirect branch, a return, a far transfer.
    Any,
    /// One of two addresses: a conditional branch's fall-through and
    /// target; the same one twice for the rest (a non-branch's or kernel
    /// entry's fall-through, where a system call returns; a direct branch's target).
    To(u64, u64),
    /// Nowhere: the instruction never retires (it always faults).
    Never,
}

impl Exits {
    /// Whether control reaching `next` is the instruction's own doing.
    #[inline]
    pub fn allows(self, next: u64) -> bool {
        match self {
            Exits::Any => true,
            Exits::To(a, b) => next == a || next == b,
            Exits::Never => false,
        }
    }
}

/// Where an instruction of class `class` (that always `faults`, falling
/// through to `ft`, with direct target `target`) sends control by itself.
fn exits_of(class: BranchClass, faults: bool, ft: u64, target: u64) -> Exits {
    match class {
        // UD2 and HLT: non-branches that never retire.
        BranchClass::Other if faults => Exits::Never,
        BranchClass::Other | BranchClass::KernelEntry => Exits::To(ft, ft),
        BranchClass::CondBranch => Exits::To(ft, target),
        BranchClass::DirectJump | BranchClass::DirectCall => Exits::To(target, target),
        BranchClass::IndirectJump
        | BranchClass::IndirectCall
        | BranchClass::Return
        | BranchClass::FarBranch => Exits::Any,
    }
}

impl BlockInsn {
    /// Where the instruction sends control by itself.
    pub fn exits(&self) -> Exits {
        exits_of(self.class, self.faults, self.fall_through(), self.target)
    }
}

/// A block of 64-bit user-mode code, decoded once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeBlock {
    /// Its instructions (at least one).
    pub insns: Box<[BlockInsn]>,
    /// Whether every instruction but the last is a non-branch that retires
    /// (class [`BranchClass::Other`], not faulting): the body a run goes
    /// through in a straight line, which the fast paths take in one step.
    pub plain_body: bool,
    /// The first address and a copy of the last instruction, beside the
    /// block's reference counts: what the per-block fast paths read (the
    /// source, the PT logic, the execution log) is in the block's first
    /// cache lines, not behind the instructions' pointer.
    start: u64,
    last: BlockInsn,
    exits: Exits,
}

impl CodeBlock {
    /// Decodes the block at `start` from its code bytes (64-bit mode).
    pub fn decode(start: u64, code: &[u8]) -> Result<CodeBlock, ExecError> {
        let mut insns = Vec::new();
        let mut off = 0usize;
        while off < code.len() {
            let ip = start.wrapping_add(off as u64);
            let bytes = &code[off..];
            let d = match decode_bytes(bytes, ip, ExecMode::Bit64) {
                Ok(d) => d,
                // QEMU 7.2 lists an instruction that crosses into the next
                // page, with the bytes of the first page only, when it ends
                // the block before it (the next block starts there).
                Err(_) if !insns.is_empty() && bytes.len() < 15 => break,
                Err(e) => return Err(e),
            };
            insns.push(BlockInsn {
                ip,
                len: d.len,
                class: d.class,
                target: d.target.unwrap_or(0),
                rep: d.rep_string,
                faults: always_faults(bytes),
            });
            off += usize::from(d.len.max(1));
        }
        if insns.is_empty() {
            return Err(ExecError::NoCode { ip: start });
        }
        Ok(CodeBlock::new(insns.into()))
    }

    /// A block of these instructions (at least one, each following the one before).
    pub fn new(insns: Box<[BlockInsn]>) -> CodeBlock {
        let body = &insns[..insns.len().saturating_sub(1)];
        let plain_body = body
            .iter()
            .all(|i| i.class == BranchClass::Other && !i.faults);
        let last = insns[insns.len() - 1];
        CodeBlock {
            start: insns[0].ip,
            last,
            exits: last.exits(),
            insns,
            plain_body,
        }
    }

    /// The first address.
    #[inline]
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The last instruction.
    #[inline]
    pub fn last(&self) -> &BlockInsn {
        &self.last
    }

    /// Where its last instruction sends control by itself ([`BlockInsn::exits`]).
    #[inline]
    pub fn exits(&self) -> Exits {
        self.exits
    }

    /// The address after its last instruction.
    pub fn end(&self) -> u64 {
        self.last().fall_through()
    }
}

/// UD2, UD1, UD0, HLT (after legacy prefixes): they raise an exception
/// every time and never retire.
pub fn always_faults(bytes: &[u8]) -> bool {
    let b = bytes
        .iter()
        .position(|&b| {
            !matches!(
                b,
                0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3
            ) && !(0x40..=0x4f).contains(&b)
        })
        .map_or(&[][..], |i| &bytes[i..]);
    matches!(b, [0xf4, ..] | [0x0f, 0x0b | 0xb9 | 0xff, ..])
}

/// What the per-block fast paths read of a block (the source's successor
/// test, the PT logic's whole-block step), 32 bytes: two to a cache line
/// in a flat array beside the blocks ([`BlockTable::head`]), where a
/// [`CodeBlock`] is 80 bytes and its instructions behind a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHead {
    /// The first address.
    pub start: u64,
    /// The last instruction's address.
    pub last_ip: u64,
    /// The last instruction's direct target (0 for others).
    pub target: u64,
    /// Instructions in the block.
    pub len: u32,
    /// The last instruction's length.
    pub last_len: u8,
    /// The last instruction's class.
    pub class: BranchClass,
    flags: u8,
}

const HEAD_PLAIN_BODY: u8 = 1;
const HEAD_FAULTS: u8 = 2;
/// The block's exits: anywhere, the fall-through, the target (bits).
const HEAD_TO_ANY: u8 = 4;
const HEAD_TO_FT: u8 = 8;
const HEAD_TO_TARGET: u8 = 16;

impl BlockHead {
    /// The head of `block`.
    pub fn of(block: &CodeBlock) -> BlockHead {
        let last = block.last();
        let mut flags = 0;
        if block.plain_body {
            flags |= HEAD_PLAIN_BODY;
        }
        if last.faults {
            flags |= HEAD_FAULTS;
        }
        let ft = last.fall_through();
        flags |= match last.exits() {
            Exits::Any => HEAD_TO_ANY,
            Exits::Never => 0,
            // Each of a and b is the fall-through or the target.
            Exits::To(a, b) => {
                let mut f = 0;
                if a == ft || b == ft {
                    f |= HEAD_TO_FT;
                }
                if a == last.target || b == last.target {
                    f |= HEAD_TO_TARGET;
                }
                f
            }
        };
        BlockHead {
            start: block.start(),
            last_ip: last.ip,
            target: last.target,
            len: block.insns.len() as u32,
            last_len: last.len,
            class: last.class,
            flags,
        }
    }

    /// [`CodeBlock::plain_body`].
    #[inline]
    pub fn plain_body(&self) -> bool {
        self.flags & HEAD_PLAIN_BODY != 0
    }

    /// The address after the last instruction.
    #[inline]
    pub fn fall_through(&self) -> u64 {
        self.last_ip.wrapping_add(u64::from(self.last_len))
    }

    /// Whether control reaching `next` is the last instruction's own doing
    /// (`self.exits().allows(next)`, without a branch on the class).
    #[inline]
    pub fn allows(&self, next: u64) -> bool {
        let f = self.flags;
        (f & HEAD_TO_ANY != 0)
            | ((next == self.fall_through()) & (f & HEAD_TO_FT != 0))
            | ((next == self.target) & (f & HEAD_TO_TARGET != 0))
    }

    /// Where the last instruction sends control by itself ([`BlockInsn::exits`]).
    #[inline]
    pub fn exits(&self) -> Exits {
        exits_of(
            self.class,
            self.flags & HEAD_FAULTS != 0,
            self.fall_through(),
            self.target,
        )
    }
}

/// A block's index in a [`BlockTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

/// The blocks a source decoded, each once, by [`BlockId`]: append-only, so
/// an id stays valid for the whole recording. Runs name their block by id
/// (no reference count to bump per block executed), and the table is one
/// flat array: a block's first address, last instruction and shape are in
/// its entry, not behind a pointer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockTable {
    blocks: Vec<CodeBlock>,
    heads: Vec<BlockHead>,
}

impl BlockTable {
    /// An empty table.
    pub const fn new() -> Self {
        BlockTable {
            blocks: Vec::new(),
            heads: Vec::new(),
        }
    }

    /// Adds a block; returns its id.
    pub fn push(&mut self, block: CodeBlock) -> BlockId {
        let id = BlockId(self.blocks.len() as u32);
        self.heads.push(BlockHead::of(&block));
        self.blocks.push(block);
        id
    }

    /// The head of block `id`, if there is one.
    #[inline]
    pub fn head(&self, id: BlockId) -> Option<&BlockHead> {
        self.heads.get(id.0 as usize)
    }

    /// The block `id`, if there is one.
    #[inline]
    pub fn get(&self, id: BlockId) -> Option<&CodeBlock> {
        self.blocks.get(id.0 as usize)
    }

    /// Blocks in the table.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The run `run` with its block, if the table has it.
    #[inline]
    pub fn run(&self, run: &BlockRun) -> Option<RunView<'_>> {
        Some(RunView {
            block: self.get(run.block)?,
            next_ip: run.next_ip,
            retire_last: run.retire_last,
        })
    }
}

/// One execution of a [`CodeBlock`] by the current thread: what a batch
/// holds (16 bytes; the block is named by its id in the source's
/// [`BlockTable`], see [`super::ExecutionSource::blocks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRun {
    /// The block.
    pub block: BlockId,
    /// Whether the last instruction retired (not when it faulted).
    pub retire_last: bool,
    /// Where the last instruction sent control (its `next_ip`).
    pub next_ip: u64,
}

/// A [`BlockRun`] with its block at hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunView<'a> {
    /// The block.
    pub block: &'a CodeBlock,
    /// Where the last instruction sent control (its `next_ip`).
    pub next_ip: u64,
    /// Whether the last instruction retired (not when it faulted).
    pub retire_last: bool,
}

impl RunView<'_> {
    /// Instructions the run retires.
    #[inline]
    pub fn count(&self) -> usize {
        self.block.insns.len() - usize::from(!self.retire_last)
    }

    /// The `i`-th retired instruction (`i < count()`).
    #[inline]
    pub fn insn(&self, i: usize) -> Retired {
        let ins = &self.block.insns[i];
        let next = if i + 1 == self.block.insns.len() {
            self.next_ip
        } else {
            ins.fall_through()
        };
        ins.retired(next)
    }

    /// The run spelled out instruction by instruction (the per-instruction path).
    pub fn retired(&self) -> impl Iterator<Item = Retired> + '_ {
        (0..self.count()).map(|i| self.insn(i))
    }
}

/// What a source hands on next: an item, or a block run (which stands for
/// its instructions, see [`RunView::retired`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// One item.
    Item(ExecItem),
    /// A block's instructions, all of the current thread (its block in the
    /// source's [`BlockTable`]).
    Block(BlockRun),
    /// Block runs of the current thread, in order (each as [`Step::Block`]):
    /// a source that sees many blocks between events hands them over in
    /// batches, so that the recorder's per-step work (a call, the thread's
    /// lookup) is not per block.
    Blocks(Vec<BlockRun>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_spells_out_its_instructions() {
        // mov eax, 1; nop; jz +0x10
        let mut table = BlockTable::new();
        let id =
            table.push(CodeBlock::decode(0x1000, &[0xb8, 1, 0, 0, 0, 0x90, 0x74, 0x10]).unwrap());
        let b = table.get(id).unwrap();
        assert!(b.plain_body);
        assert_eq!(b.end(), 0x1008);
        // The copies beside the instructions are the first and last ones'.
        assert_eq!(b.start(), b.insns[0].ip);
        assert_eq!(b.last(), &b.insns[2]);
        let run = BlockRun {
            block: id,
            next_ip: 0x1018,
            retire_last: true,
        };
        let view = table.run(&run).unwrap();
        let got: Vec<(u64, u64)> = view.retired().map(|r| (r.ip, r.next_ip)).collect();
        assert_eq!(got, [(0x1000, 0x1005), (0x1005, 0x1006), (0x1006, 0x1018)]);
        let faulted = BlockRun {
            block: id,
            next_ip: 0x1006,
            retire_last: false,
        };
        assert_eq!(table.run(&faulted).unwrap().retired().count(), 2);
        // A jump in the middle: not a plain body.
        let j = CodeBlock::decode(0x1000, &[0xeb, 0x00, 0x90]).unwrap();
        assert!(!j.plain_body);
    }

    #[test]
    fn a_table_hands_out_what_it_was_given_by_id() {
        let mut table = BlockTable::new();
        assert!(table.is_empty());
        let a = table.push(CodeBlock::decode(0x1000, &[0x90, 0xc3]).unwrap());
        let b = table.push(CodeBlock::decode(0x2000, &[0xeb, 0x00]).unwrap());
        assert_eq!((a, b), (BlockId(0), BlockId(1)));
        assert_eq!(table.len(), 2);
        assert_eq!(table.get(a).unwrap().start(), 0x1000);
        assert_eq!(table.get(b).unwrap().last().class, BranchClass::DirectJump);
        // An id the table never gave: no block, no run.
        let stray = BlockRun {
            block: BlockId(2),
            next_ip: 0,
            retire_last: true,
        };
        assert!(table.get(BlockId(2)).is_none());
        assert!(table.run(&stray).is_none());
        assert!(table.head(BlockId(2)).is_none());
        // A run is small: batches of them stay in the caches; so is a head.
        assert_eq!(std::mem::size_of::<BlockRun>(), 16);
        assert_eq!(std::mem::size_of::<BlockHead>(), 32);
    }

    #[test]
    fn a_head_agrees_with_its_block() {
        // Blocks ending in each kind of instruction, with plain bodies or not.
        let blocks: [(u64, &[u8]); 9] = [
            (0x1000, &[0x90, 0x74, 0x10]),                   // nop; jz
            (0x2000, &[0xb8, 1, 0, 0, 0, 0xe8, 0, 1, 0, 0]), // mov; call rel32
            (0x3000, &[0x90, 0xc3]),                         // nop; ret
            (0x4000, &[0xff, 0xe0]),                         // jmp rax
            (0x5000, &[0x0f, 0x05]),                         // syscall
            (0x6000, &[0x90, 0x0f, 0x0b]),                   // nop; ud2
            (0x7000, &[0xf3, 0xa4]),                         // rep movsb
            (0x8000, &[0xeb, 0x00, 0x90]),                   // jmp; nop: no plain body
            (0x9000, &[0x90, 0x90, 0xeb, 0xfe]),             // nop; nop; jmp
        ];
        let mut table = BlockTable::new();
        for (at, code) in blocks {
            let b = CodeBlock::decode(at, code).unwrap();
            let id = table.push(b.clone());
            let h = *table.head(id).unwrap();
            let last = b.last();
            assert_eq!(h.start, b.start());
            assert_eq!(h.len as usize, b.insns.len());
            assert_eq!(
                (h.last_ip, h.last_len, h.class),
                (last.ip, last.len, last.class)
            );
            assert_eq!(h.target, last.target);
            assert_eq!(h.fall_through(), b.end());
            assert_eq!(h.plain_body(), b.plain_body);
            assert_eq!(h.exits(), b.exits(), "{at:#x}");
            let elsewhere = [at, b.end(), last.target, 0, 0x1_0000, last.ip];
            for next in elsewhere {
                assert_eq!(
                    h.allows(next),
                    b.exits().allows(next),
                    "{at:#x} to {next:#x}"
                );
            }
        }
        assert!(!table.head(BlockId(7)).unwrap().plain_body());
        assert_eq!(table.head(BlockId(5)).unwrap().exits(), Exits::Never);
    }
}
