//! The coverage decoder's control-flow graph: chains of code that need one TNT bit or
//! one TIP each, built once over the shared block cache and linked by index.
//!
//! A [`Node`] is the code from an address through direct jumps and calls up to the
//! first instruction whose outcome only the trace knows (a conditional branch, a
//! return, an indirect or far branch), as libxdc's nodes are. The decoder's
//! [`BlockCache`] blocks end at every direct jump and call, and hold neither the edge
//! indices of a bitmap nor the return addresses a chain's calls push: walking them per
//! TNT bit would cost a link and a look at the last instruction per direct branch. A
//! node holds all of that, so that a TNT bit costs one bitmap increment and one array
//! index ([`Node::next`]).

use pt_decoder::block_cache::BlockCache;
use pt_decoder::flow::AddrFilter;
use pt_decoder::image::{CodeError, Image};
use pt_decoder::insn::InsnClass;
use pt_encoder::hash::IpMap;
use pt_encoder::ExecMode;

use crate::bitmap::EdgeHash;
use crate::edge::EdgeKind;
use crate::error::ErrorKind;

/// No node linked yet.
pub(crate) const NONE: u32 = u32::MAX;

/// Cache blocks in one node at most: a longer walk without trace (`jmp .`, or code
/// that is really data) ends in a [`NodeKind::Continue`].
const MAX_CHAIN_BLOCKS: usize = 1024;

/// What the instruction that ends a node needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// A conditional branch: a TNT bit.
    Cond,
    /// A near return: a TNT bit (compressed) or a TIP.
    Ret,
    /// An indirect near jump: a TIP.
    IndirectJump,
    /// An indirect near call: a TIP.
    IndirectCall,
    /// A far transfer: a TIP.
    Far,
    /// The walk was cut at [`MAX_CHAIN_BLOCKS`]: go on at `fall` without trace.
    Continue,
    /// The walk cannot go on at `fall` (nothing mapped, an invalid instruction, a
    /// direct branch out of the filter ranges): only an event that ends the flow
    /// (a disable, an overflow, a PSB) may follow.
    Stuck(ErrorKind),
}

/// A straight-line run inside a node, ended by a direct jump or call, or by the
/// node's last instruction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    pub start: u64,
    /// After the last instruction.
    pub end: u64,
    /// The direct jump or call that ends the run (its address), if one does.
    pub branch: u64,
    /// Its target.
    pub to: u64,
    /// [`EdgeKind::Jump`] or [`EdgeKind::Call`] if a direct branch ends the run,
    /// [`EdgeKind::Cond`] for the node's last run.
    pub kind: EdgeKind,
    /// The call's return address goes on the return stack (every call but one to
    /// the next instruction, the position-independent-code idiom libipt ignores).
    pub push: bool,
    /// After the run's first MOV CR3, if it has one (0 if not): a TIP.PGD with a
    /// suppressed IP binds there.
    pub cr3_end: u64,
}

/// See the [module docs](self).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    /// Successor nodes once known: a conditional's `[not taken, taken]`;
    /// `[next, -]` for [`NodeKind::Continue`].
    pub next: [u32; 2],
    /// Bitmap indices of a conditional's `[not taken, taken]` edges (masked).
    pub idx: [u32; 2],
    pub kind: NodeKind,
    pub mode: ExecMode,
    pub start: u64,
    /// The instruction that needs trace (where the walk stopped, for `Continue` and
    /// `Stuck`).
    pub cofi: u64,
    /// The address after it (`cofi` for `Continue` and `Stuck`).
    pub fall: u64,
    /// A conditional's target.
    pub target: u64,
    /// `segs[seg..seg + nseg]`.
    pub seg: u32,
    pub nseg: u32,
    /// Return addresses pushed by the node's direct calls, in order:
    /// `pushes[push..push + npush]`.
    pub push: u32,
    pub npush: u32,
}

/// What the TNT loop reads of a node, 28 bytes apart: its successors and edge
/// indices, with `next` linked only for a conditional node (so that the loop needs
/// no test of the node's kind), and the return addresses its direct calls push.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hot {
    pub next: [u32; 2],
    pub idx: [u32; 2],
    /// `pushes[push..push + npush]`.
    pub push: u32,
    pub npush: u32,
    /// A near return ends the node (its TNT bit pops the return stack).
    pub ret: bool,
}

impl Hot {
    fn of(node: &Node) -> Hot {
        Hot {
            next: [NONE; 2],
            idx: node.idx,
            push: node.push,
            npush: node.npush,
            ret: node.kind == NodeKind::Ret,
        }
    }
}

/// The nodes, looked up by (IP, mode).
#[derive(Default)]
pub(crate) struct Graph {
    pub nodes: Vec<Node>,
    /// [`Hot`] per node, by the same index.
    pub hot: Vec<Hot>,
    pub segs: Vec<Seg>,
    pub pushes: Vec<u64>,
    index: [IpMap<u32>; 3],
}

pub(crate) fn slot(mode: ExecMode) -> Option<usize> {
    match mode {
        ExecMode::Bit16 => Some(0),
        ExecMode::Bit32 => Some(1),
        ExecMode::Bit64 => Some(2),
        ExecMode::Unknown => None,
    }
}

/// Code for the graph: an image, and a way to add to it on demand (libxdc's
/// page-fetch callback).
pub(crate) trait Code {
    fn image(&self) -> &Image;
    /// Adds the code at `ip` if it can; whether it did.
    fn fetch(&mut self, ip: u64) -> bool;
}

/// What a node build needs besides the graph.
pub(crate) struct BuildCtx<'c> {
    pub cache: &'c mut BlockCache,
    pub code: &'c mut dyn Code,
    pub filter: &'c AddrFilter,
    pub hash: EdgeHash,
    pub mask: u32,
}

impl BuildCtx<'_> {
    fn lookup(
        &mut self,
        ip: u64,
        mode: ExecMode,
    ) -> Result<pt_decoder::block_cache::BlockId, CodeError> {
        match self.cache.lookup(self.code.image(), ip, mode) {
            Err(e) if e.code == pt_decoder::ErrorCode::NoMap && self.code.fetch(ip) => {
                self.cache.lookup(self.code.image(), ip, mode)
            }
            r => r,
        }
    }
}

impl Graph {
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.hot.clear();
        self.segs.clear();
        self.pushes.clear();
        for m in &mut self.index {
            m.clear();
        }
    }

    /// The node at (`ip`, `mode`), built now if it is new.
    #[inline]
    pub fn node(&mut self, ctx: &mut BuildCtx<'_>, ip: u64, mode: ExecMode) -> u32 {
        let Some(s) = slot(mode) else {
            return self.push_stuck(ip, mode, ErrorKind::BadInsn);
        };
        if let Some(&id) = self.index[s].get(&ip) {
            return id;
        }
        let id = self.nodes.len() as u32;
        let node = self.build(ctx, ip, mode);
        self.push(node);
        self.index[s].insert(ip, id);
        id
    }

    fn push(&mut self, node: Node) {
        self.nodes.push(node);
        self.hot.push(Hot::of(&node));
    }

    /// Links node `id`'s successor `t` (a conditional's taken or not, a `Continue`'s
    /// next).
    #[inline]
    pub fn link(&mut self, id: u32, t: usize, next: u32) {
        let node = &mut self.nodes[id as usize];
        node.next[t] = next;
        if node.kind == NodeKind::Cond {
            self.hot[id as usize].next[t] = next;
        }
    }

    /// Builds the node at `id` again (after its code was fetched); links to it stay.
    pub fn rebuild(&mut self, ctx: &mut BuildCtx<'_>, id: u32) {
        let Some(old) = self.nodes.get(id as usize).copied() else {
            return;
        };
        let node = self.build(ctx, old.start, old.mode);
        self.nodes[id as usize] = node;
        self.hot[id as usize] = Hot::of(&node);
    }

    fn push_stuck(&mut self, ip: u64, mode: ExecMode, kind: ErrorKind) -> u32 {
        let id = self.nodes.len() as u32;
        self.push(Node {
            next: [NONE; 2],
            idx: [0; 2],
            kind: NodeKind::Stuck(kind),
            mode,
            start: ip,
            cofi: ip,
            fall: ip,
            target: 0,
            seg: self.segs.len() as u32,
            nseg: 0,
            push: self.pushes.len() as u32,
            npush: 0,
        });
        id
    }

    fn build(&mut self, ctx: &mut BuildCtx<'_>, ip: u64, mode: ExecMode) -> Node {
        let seg0 = self.segs.len();
        let push0 = self.pushes.len();
        let mut node = Node {
            next: [NONE; 2],
            idx: [0; 2],
            kind: NodeKind::Continue,
            mode,
            start: ip,
            cofi: ip,
            fall: ip,
            target: 0,
            seg: seg0 as u32,
            nseg: 0,
            push: push0 as u32,
            npush: 0,
        };
        let mut seg_start = ip;
        let mut cr3_end = 0;
        let stuck = |node: &mut Node, at: u64, kind: ErrorKind| {
            node.kind = NodeKind::Stuck(kind);
            node.cofi = at;
            node.fall = at;
        };
        let mut id = match ctx.lookup(ip, mode) {
            Ok(id) => id,
            Err(e) => {
                stuck(&mut node, ip, e.code.into());
                return self.finish(node, seg_start, cr3_end);
            }
        };
        for _ in 0..MAX_CHAIN_BLOCKS {
            let b = *ctx.cache.block(id);
            let last = b.last;
            let direct = |kind| (last.target, kind);
            let (target, kind) = match last.class {
                InsnClass::Other | InsnClass::Ptwrite => {
                    let at = b.fall_through();
                    if cr3_end == 0 && last.changes_cr3() {
                        cr3_end = at;
                    }
                    match ctx.cache.fall_through(ctx.code.image(), id) {
                        Ok(next) => id = next,
                        Err(e) if e.code == pt_decoder::ErrorCode::NoMap && ctx.code.fetch(at) => {
                            match ctx.lookup(at, mode) {
                                Ok(next) => id = next,
                                Err(e) => {
                                    stuck(&mut node, at, e.code.into());
                                    return self.finish(node, seg_start, cr3_end);
                                }
                            }
                        }
                        Err(e) => {
                            stuck(&mut node, at, e.code.into());
                            return self.finish(node, seg_start, cr3_end);
                        }
                    }
                    continue;
                }
                InsnClass::Jump => direct(EdgeKind::Jump),
                InsnClass::Call => direct(EdgeKind::Call),
                InsnClass::CondJump => {
                    node.kind = NodeKind::Cond;
                    node.cofi = last.ip;
                    node.fall = last.next_ip();
                    node.target = last.target.unwrap_or(node.fall);
                    node.idx = [
                        ctx.hash.index(node.cofi, node.fall) & ctx.mask,
                        ctx.hash.index(node.cofi, node.target) & ctx.mask,
                    ];
                    return self.finish(node, seg_start, cr3_end);
                }
                InsnClass::Return => (None, EdgeKind::Return),
                InsnClass::FarCall | InsnClass::FarJump | InsnClass::FarReturn => {
                    (None, EdgeKind::Far)
                }
            };
            let Some(to) = target.filter(|_| matches!(kind, EdgeKind::Jump | EdgeKind::Call))
            else {
                node.kind = match (last.class, kind) {
                    (_, EdgeKind::Return) => NodeKind::Ret,
                    (_, EdgeKind::Far) => NodeKind::Far,
                    (InsnClass::Call, _) => NodeKind::IndirectCall,
                    _ => NodeKind::IndirectJump,
                };
                node.cofi = last.ip;
                node.fall = last.next_ip();
                return self.finish(node, seg_start, cr3_end);
            };
            // A direct jump or call: the run ends, the node goes on at its target.
            self.segs.push(Seg {
                start: seg_start,
                end: last.next_ip(),
                branch: last.ip,
                to,
                kind,
                push: last.pushes_return(),
                cr3_end,
            });
            cr3_end = 0;
            if last.pushes_return() {
                self.pushes.push(last.next_ip());
            }
            seg_start = to;
            if ctx.filter.is_configured() && !ctx.filter.allows(to) {
                stuck(&mut node, to, ErrorKind::NoMap);
                return self.finish(node, seg_start, cr3_end);
            }
            let linked = match ctx.cache.taken(ctx.code.image(), id) {
                Err(e) if e.code == pt_decoder::ErrorCode::NoMap && ctx.code.fetch(to) => {
                    ctx.lookup(to, mode)
                }
                r => r,
            };
            match linked {
                Ok(next) => id = next,
                Err(e) => {
                    stuck(&mut node, to, e.code.into());
                    return self.finish(node, seg_start, cr3_end);
                }
            }
        }
        // Cut: go on at the start of the block not taken.
        let at = ctx.cache.block(id).ip;
        node.kind = NodeKind::Continue;
        node.cofi = at;
        node.fall = at;
        self.finish(node, seg_start, cr3_end)
    }

    /// Closes the node's last run (from `seg_start` to after `cofi`, or to where the
    /// walk stopped).
    fn finish(&mut self, mut node: Node, seg_start: u64, cr3_end: u64) -> Node {
        let end = node.fall;
        if end != seg_start {
            self.segs.push(Seg {
                start: seg_start,
                end,
                branch: 0,
                to: 0,
                kind: EdgeKind::Cond,
                push: false,
                cr3_end,
            });
        }
        node.nseg = self.segs.len() as u32 - node.seg;
        node.npush = self.pushes.len() as u32 - node.push;
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Image);

    impl Code for Fixed {
        fn image(&self) -> &Image {
            &self.0
        }
        fn fetch(&mut self, _: u64) -> bool {
            false
        }
    }

    #[test]
    fn a_node_runs_through_direct_calls_and_jumps_to_a_conditional() {
        // 1000: call 1010 / 1005: ret / 1010: nop / 1011: jmp 1020 / 1020: jnz 1000
        let mut code = vec![0x90u8; 0x30];
        code[..5].copy_from_slice(&[0xe8, 0x0b, 0, 0, 0]);
        code[5] = 0xc3;
        code[0x11..0x13].copy_from_slice(&[0xeb, 0x0d]);
        code[0x20..0x22].copy_from_slice(&[0x75, 0xde]);
        let mut image = Image::new();
        image.add_bytes(0x1000, code, "code").unwrap();
        let mut code = Fixed(image);
        let mut cache = BlockCache::new();
        let filter = AddrFilter::default();
        let mut ctx = BuildCtx {
            cache: &mut cache,
            code: &mut code,
            filter: &filter,
            hash: EdgeHash::Afl,
            mask: 0xffff,
        };
        let mut g = Graph::default();
        let id = g.node(&mut ctx, 0x1000, ExecMode::Bit64);
        let n = g.nodes[id as usize];
        assert_eq!(n.kind, NodeKind::Cond);
        assert_eq!((n.cofi, n.fall, n.target), (0x1020, 0x1022, 0x1000));
        assert_eq!(
            n.idx,
            [
                EdgeHash::Afl.index(0x1020, 0x1022) & 0xffff,
                EdgeHash::Afl.index(0x1020, 0x1000) & 0xffff
            ]
        );
        let segs: Vec<_> = g.segs[n.seg as usize..][..n.nseg as usize]
            .iter()
            .map(|s| (s.start, s.end, s.kind, s.to))
            .collect();
        assert_eq!(
            segs,
            [
                (0x1000, 0x1005, EdgeKind::Call, 0x1010),
                (0x1010, 0x1013, EdgeKind::Jump, 0x1020),
                (0x1020, 0x1022, EdgeKind::Cond, 0),
            ]
        );
        assert_eq!(&g.pushes[n.push as usize..][..n.npush as usize], &[0x1005]);
        // Looked up again: the same node.
        assert_eq!(g.node(&mut ctx, 0x1000, ExecMode::Bit64), id);
        // The return at 1005 needs trace; unmapped code is stuck.
        let ret = g.node(&mut ctx, 0x1005, ExecMode::Bit64);
        assert_eq!(g.nodes[ret as usize].kind, NodeKind::Ret);
        let none = g.node(&mut ctx, 0x9000, ExecMode::Bit64);
        assert_eq!(
            g.nodes[none as usize].kind,
            NodeKind::Stuck(ErrorKind::NoMap)
        );
    }
}
