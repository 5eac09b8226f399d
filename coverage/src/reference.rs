//! Edges and blocks derived from pt-decoder's instruction flow: slow, simple, and the
//! spec [`crate::CoverageDecoder`] is held to.
//!
//! Walking [`pt_decoder::Decoder`]'s instructions and events in order:
//! * after a branch instruction (any class but `Other` and PTWRITE), the next
//!   instruction's address — or the IP of an asynchronous branch or disable met
//!   first — is the edge's `to`;
//! * an asynchronous branch (`AsyncBranch { from, to }`) is an edge `from → to`;
//! * a basic block starts at the first instruction after a branch or an event that
//!   moves the flow, and ends after a branch or where the flow stops (disable,
//!   overflow, error, end of trace, an asynchronous branch).

use pt_decoder::insn::{decode_at, InsnClass};
use pt_decoder::{
    Config, Decoder, EventKind, FlowError, FlowOptions, Granularity, Image, Item, Resync,
};
use pt_encoder::hash::IntMap;

use crate::bitmap::{count_edge, EdgeHash};
use crate::edge::{BasicBlock, Edge, EdgeKind};

/// What [`flow_coverage`] derived.
#[derive(Clone, Debug, Default)]
pub struct FlowCoverage {
    /// The edges in the order they were taken.
    pub edges: Vec<Edge>,
    /// Each edge with how often it was taken.
    pub edge_counts: IntMap<(u64, u64), (EdgeKind, u64)>,
    /// Each basic block with how often it ran.
    pub blocks: IntMap<(u64, u64), u64>,
    /// The errors the flow decoder reported.
    pub errors: Vec<FlowError>,
}

impl FlowCoverage {
    /// The bitmap `hash` gives for the edges it counts ([`EdgeHash::counts`]), in a
    /// map of `size` bytes.
    pub fn bitmap(&self, hash: EdgeHash, size: usize) -> Vec<u8> {
        let mut map = vec![0; size];
        for e in self.edges.iter().filter(|e| hash.counts(e.kind)) {
            count_edge(&mut map, hash, e.from, e.to);
        }
        map
    }

    /// The basic blocks with their counts.
    pub fn block_list(&self) -> Vec<(BasicBlock, u64)> {
        let mut v: Vec<_> = self
            .blocks
            .iter()
            .map(|(&(start, end), &n)| (BasicBlock { start, end }, n))
            .collect();
        v.sort();
        v
    }
}

struct State {
    out: FlowCoverage,
    /// The branch whose target comes next.
    pending: Option<(u64, EdgeKind)>,
    block: Option<u64>,
    last_end: u64,
}

impl State {
    fn edge(&mut self, to: u64) {
        if let Some((from, kind)) = self.pending.take() {
            self.out.edges.push(Edge { from, to, kind });
            self.out
                .edge_counts
                .entry((from, to))
                .or_insert((kind, 0))
                .1 += 1;
        }
    }

    fn close(&mut self, end: u64) {
        if let Some(start) = self.block.take() {
            if start != end {
                *self.out.blocks.entry((start, end)).or_insert(0) += 1;
            }
        }
    }

    /// The flow stops (or jumps without an edge).
    fn cut(&mut self) {
        self.close(self.last_end);
        self.pending = None;
    }
}

/// Decodes `trace` over `image` with the flow decoder (resynchronizing at the next
/// PSB after an error, as [`crate::CoverageDecoder`] does) and derives its edges and
/// blocks.
pub fn flow_coverage(trace: &[u8], image: &Image, config: &Config) -> FlowCoverage {
    let decoder = Decoder::builder(trace, image)
        .config(config)
        .flow(FlowOptions::default())
        .granularity(Granularity::Instructions)
        .resync(Resync::NextPsb)
        .build();
    let mut st = State {
        out: FlowCoverage::default(),
        pending: None,
        block: None,
        last_end: 0,
    };
    for item in decoder {
        match item {
            Item::Insn(i) => {
                let insn = i.insn;
                st.edge(insn.ip);
                st.block.get_or_insert(insn.ip);
                st.last_end = insn.ip.wrapping_add(u64::from(insn.size));
                let kind = match insn.class {
                    None | Some(InsnClass::Other) | Some(InsnClass::Ptwrite) => continue,
                    Some(InsnClass::CondJump) => EdgeKind::Cond,
                    Some(InsnClass::Return) => EdgeKind::Return,
                    Some(InsnClass::FarCall | InsnClass::FarJump | InsnClass::FarReturn) => {
                        EdgeKind::Far
                    }
                    Some(class @ (InsnClass::Jump | InsnClass::Call)) => {
                        let direct = decode_at(image, insn.ip, insn.mode)
                            .map(|d| d.target.is_some())
                            .unwrap_or(false);
                        match (class, direct) {
                            (InsnClass::Jump, true) => EdgeKind::Jump,
                            (InsnClass::Jump, false) => EdgeKind::IndirectJump,
                            (_, true) => EdgeKind::Call,
                            (_, false) => EdgeKind::IndirectCall,
                        }
                    }
                };
                st.close(st.last_end);
                st.pending = Some((insn.ip, kind));
            }
            Item::Event(e) => match e.event.kind {
                EventKind::AsyncBranch { from, .. } => {
                    st.close(from);
                    st.edge(from);
                    st.pending = (!e.event.ip_suppressed).then_some((from, EdgeKind::Async));
                }
                EventKind::AsyncDisabled { at, .. } => {
                    st.close(at);
                    st.edge(at);
                }
                EventKind::Enabled { .. } if e.event.status_update => {}
                EventKind::Disabled { .. } if e.event.status_update => {}
                EventKind::Enabled { .. }
                | EventKind::Disabled { .. }
                | EventKind::Overflow { .. } => st.cut(),
                _ => {}
            },
            Item::Error(err) => {
                st.cut();
                st.out.errors.push(err);
            }
            Item::EndOfTrace | Item::Disabled | Item::Skipped(_) => st.cut(),
            _ => {}
        }
    }
    st.cut();
    st.out
}
