//! Block-stepping (`PTRACE_SINGLEBLOCK`, DEBUGCTL.BTF): the CPU traps only on
//! taken branches, so one stop covers a run of straight-line code. The
//! instructions in between are not observed; they are reconstructed here from
//! the code, which is sound only when the stop address identifies the branch
//! that was taken. [`plan`] decides before the step whether that holds;
//! [`resolve`] turns the stop into the retired instructions.

use super::{BranchClass, DecodedInsn};

/// Most instructions a plan covers.
pub const MAX_BLOCK: usize = 256;

/// The straight-line stretch one block step can cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPlan {
    /// The instructions in order, each with its address. All but the last are
    /// conditional branches or non-branches; the last is the first
    /// unconditional branch (always taken).
    pub insns: Vec<(u64, DecodedInsn)>,
}

/// Plans a block step from `ip`, or `None` when single-stepping is needed:
/// a kernel entry, far branch or REP string instruction before the first
/// unconditional branch, undecodable code, a stretch longer than
/// [`MAX_BLOCK`], or two branches that could reach the same address (the stop
/// would not tell which one was taken).
///
/// `fetch` decodes the instruction at an address (`None`: unreadable).
pub fn plan(mut fetch: impl FnMut(u64) -> Option<DecodedInsn>, mut ip: u64) -> Option<BlockPlan> {
    let mut insns = Vec::new();
    let mut jcc_targets = Vec::new();
    while insns.len() < MAX_BLOCK {
        let d = fetch(ip)?;
        if d.rep_string {
            return None;
        }
        let ft = ip.wrapping_add(u64::from(d.len));
        match d.class {
            BranchClass::Other => {}
            BranchClass::CondBranch => {
                let t = d.target?;
                if t == ft || jcc_targets.contains(&t) {
                    return None;
                }
                jcc_targets.push(t);
            }
            BranchClass::DirectJump | BranchClass::DirectCall => {
                let t = d.target?;
                if jcc_targets.contains(&t) {
                    return None;
                }
                insns.push((ip, d));
                return Some(BlockPlan { insns });
            }
            BranchClass::IndirectJump | BranchClass::IndirectCall | BranchClass::Return => {
                // The target is unknown, so it could be any branch's target.
                if !jcc_targets.is_empty() {
                    return None;
                }
                insns.push((ip, d));
                return Some(BlockPlan { insns });
            }
            BranchClass::FarBranch | BranchClass::KernelEntry => return None,
        }
        insns.push((ip, d));
        ip = ft;
    }
    None
}

/// How a block step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockStop {
    /// The debug trap after a taken branch, at this IP.
    Branch(u64),
    /// A signal stop at this IP: the instruction there did not execute.
    Signal(u64),
}

/// The retired instructions of a block step: `(ip, decoded, next_ip)` in order.
/// `None` if the stop does not fit the plan.
pub fn resolve(plan: &BlockPlan, stop: BlockStop) -> Option<Vec<(u64, DecodedInsn, u64)>> {
    let seq = |(ip, d): &(u64, DecodedInsn)| (*ip, *d, ip.wrapping_add(u64::from(d.len)));
    match stop {
        BlockStop::Signal(at) => {
            let n = plan.insns.iter().position(|(ip, _)| *ip == at)?;
            Some(plan.insns[..n].iter().map(seq).collect())
        }
        BlockStop::Branch(to) => {
            let (last, body) = plan.insns.split_last()?;
            let taken = body
                .iter()
                .position(|(_, d)| d.class == BranchClass::CondBranch && d.target == Some(to));
            let n = match taken {
                Some(i) => i,
                None => {
                    let lands = match last.1.target {
                        Some(t) => t == to,
                        None => true,
                    };
                    if !lands {
                        return None;
                    }
                    body.len()
                }
            };
            let mut out: Vec<_> = plan.insns[..n].iter().map(seq).collect();
            let (ip, d) = plan.insns[n];
            out.push((ip, d, to));
            Some(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::insn::decode_at;
    use crate::exec::{CodeMemory, ExecMode, PAGE_SIZE};

    fn plan_in(m: &CodeMemory, ip: u64) -> Option<BlockPlan> {
        plan(|a| decode_at(m, a, ExecMode::Bit64).ok(), ip)
    }

    fn mem(code: &[u8]) -> CodeMemory {
        let mut page = vec![0xcc; PAGE_SIZE as usize];
        page[..code.len()].copy_from_slice(code);
        let mut m = CodeMemory::new();
        m.set_page(0x1000, &page);
        m
    }

    // 0x1000 nop; 0x1001 jz 0x1010; 0x1003 nop; 0x1004 jnz 0x1020; 0x1006 jmp 0x1030
    const CODE: [u8; 8] = [0x90, 0x74, 0x0d, 0x90, 0x75, 0x1a, 0xeb, 0x28];

    #[test]
    fn plans_up_to_the_first_unconditional_branch() {
        let p = plan_in(&mem(&CODE), 0x1000).unwrap();
        let ips: Vec<u64> = p.insns.iter().map(|(ip, _)| *ip).collect();
        assert_eq!(ips, [0x1000, 0x1001, 0x1003, 0x1004, 0x1006]);
    }

    #[test]
    fn resolves_by_the_stop_address() {
        let p = plan_in(&mem(&CODE), 0x1000).unwrap();
        let r = resolve(&p, BlockStop::Branch(0x1010)).unwrap();
        assert_eq!(
            r.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(),
            [(0x1000, 0x1001), (0x1001, 0x1010)]
        );
        let r = resolve(&p, BlockStop::Branch(0x1020)).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r[1].2, 0x1003); // jz not taken
        assert_eq!(r[3].2, 0x1020);
        let r = resolve(&p, BlockStop::Branch(0x1030)).unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(resolve(&p, BlockStop::Branch(0x1234)), None);
        let r = resolve(&p, BlockStop::Signal(0x1003)).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].2, 0x1003);
        assert_eq!(resolve(&p, BlockStop::Signal(0x1000)), Some(vec![]));
        assert_eq!(resolve(&p, BlockStop::Signal(0x1002)), None);
    }

    #[test]
    fn refuses_ambiguous_or_unsafe_stretches() {
        // Two jccs to the same target.
        assert_eq!(plan_in(&mem(&[0x74, 0x02, 0x75, 0x00, 0xc3]), 0x1000), None);
        // A jcc and a return: the return could land on the jcc's target.
        assert_eq!(plan_in(&mem(&[0x74, 0x10, 0xc3]), 0x1000), None);
        // A jcc to its own fall-through.
        assert_eq!(plan_in(&mem(&[0x74, 0x00, 0xc3]), 0x1000), None);
        // A direct jump to a jcc's target.
        assert_eq!(plan_in(&mem(&[0x74, 0x02, 0xeb, 0x00, 0xc3]), 0x1000), None);
        // System call, REP string, far return.
        assert_eq!(plan_in(&mem(&[0x90, 0x0f, 0x05, 0xc3]), 0x1000), None);
        assert_eq!(plan_in(&mem(&[0xf3, 0xa4, 0xc3]), 0x1000), None);
        assert_eq!(plan_in(&mem(&[0xcb]), 0x1000), None);
        // Runs off the captured code, or too long.
        assert_eq!(plan_in(&mem(&[0x90; 16]), 0x1ff0), None);
        assert_eq!(plan_in(&mem(&[0x90; 300]), 0x1000), None);
        // A lone return is fine.
        assert!(plan_in(&mem(&[0xc3]), 0x1000).is_some());
    }
}
