//! Edges and basic blocks: what a coverage decoder reports.

/// How control went from one block to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    /// A conditional branch (Jcc, JrCXZ, LOOPcc), taken or not: the edge's `to` is
    /// the target or the fall-through address.
    Cond,
    /// A direct near jump (its target is in the code, no trace needed).
    Jump,
    /// A direct near call.
    Call,
    /// An indirect near jump (its target came in a TIP).
    IndirectJump,
    /// An indirect near call.
    IndirectCall,
    /// A near return (compressed, a TNT bit, or with a TIP).
    Return,
    /// A far transfer (far call/jump/return, SYSCALL, INT, IRET …) with a TIP.
    Far,
    /// An asynchronous transfer (interrupt, exception, transaction abort: FUP+TIP):
    /// `from` is the interrupted IP, whose instruction did not complete.
    Async,
}

impl EdgeKind {
    /// Whether the trace decides the edge (a TNT bit or a TIP): the edges an edge
    /// bitmap counts. Direct jumps and calls follow from the blocks before them.
    pub fn is_decided(self) -> bool {
        !matches!(self, EdgeKind::Jump | EdgeKind::Call)
    }

    /// A short name, as the tools print it.
    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Cond => "cond",
            EdgeKind::Jump => "jump",
            EdgeKind::Call => "call",
            EdgeKind::IndirectJump => "ind-jump",
            EdgeKind::IndirectCall => "ind-call",
            EdgeKind::Return => "return",
            EdgeKind::Far => "far",
            EdgeKind::Async => "async",
        }
    }
}

/// A control-flow edge: from the branch instruction at `from` (for [`EdgeKind::Async`],
/// the interrupted IP) to the first instruction executed after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    /// The branch instruction's address.
    pub from: u64,
    /// Where execution went.
    pub to: u64,
    /// What kind of transfer it was.
    pub kind: EdgeKind,
}

/// An executed basic block: the straight-line run of instructions `[start, end)`
/// entered at `start` (after a branch, at an enable, an overflow's resume point or an
/// asynchronous transfer's target) and left after its last instruction (a branch,
/// or the point where tracing stopped or was interrupted). Straight-line code that
/// runs across sections is one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BasicBlock {
    /// The first instruction's address.
    pub start: u64,
    /// The address after the last instruction.
    pub end: u64,
}
