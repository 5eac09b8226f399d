//! Calls and returns from branch samples, by perf's rules (its thread-stack's
//! call/return processing for database export), and the call path tree they
//! and call chains share.
//!
//! Each thread (each CPU's idle task) has a stack of the calls it is in. A
//! branch sample moves it:
//! - a call pushes the callee's call path (zero-length calls, to the next
//!   instruction, are not calls);
//! - a return pops to the entry whose return address it returns to, ending
//!   the calls above that one as "no return"; a return to nowhere on the stack
//!   is a return without a call: at the bottom of the stack the missing call is
//!   taken to be from before the trace began, elsewhere the return is a jump;
//! - a jump to the start of another function is a call that will never return
//!   by itself (a tail call), popped with the function it came from;
//! - "trace end" after a call parks it, "trace begin" resumes it;
//! - returning from the kernel to user space ends the kernel's calls;
//! - x86 retpolines (calls to `__x86_indirect_thunk_*`) are folded away.
//!
//! Each ended call becomes a [`CallReturn`], with its call path, its times,
//! and the branches, instructions and cycles in between. At the end of the
//! trace, the calls still open end "no return" at the thread's last time.

use std::collections::HashMap;

use pt_perf::sample::flags;

/// The flag bits that say what kind of branch a sample is (perf's
/// `PERF_IP_FLAG_BRANCH_MASK`: `samples.branch_type`).
pub const BRANCH_MASK: u32 = flags::BRANCH
    | flags::CALL
    | flags::RETURN
    | flags::CONDITIONAL
    | flags::SYSCALLRET
    | flags::ASYNC
    | flags::INTERRUPT
    | flags::TX_ABORT
    | flags::TRACE_BEGIN
    | flags::TRACE_END
    | flags::VMENTRY
    | flags::VMEXIT;

/// `calls.flags`: the call was not seen.
pub const NO_CALL: u32 = 1 << 0;
/// `calls.flags`: the return was not seen.
pub const NO_RETURN: u32 = 1 << 1;
/// `calls.flags`: a jump to the start of a function, not a call.
pub const NON_CALL: u32 = 1 << 2;

/// A symbol as the call/return rules see it: its database id (0: no symbol,
/// for code in no file), where it starts (in its file's addresses) and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sym<'a> {
    /// The `symbols.id`.
    pub id: u64,
    /// Its start (file-relative, as the samples' `sym_offset`s count from).
    pub start: u64,
    /// Its name.
    pub name: &'a str,
}

/// A call path: a node of the tree of call stacks. Index 0 is the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Node {
    parent: u32,
    /// The function's symbol id; 0 if none.
    sym: u64,
    /// The address, kept only for code without a symbol.
    ip: u64,
    in_kernel: bool,
    /// The `call_paths.id`, once exported.
    db_id: u64,
}

/// The call path tree, shared by the calls and the call chains of samples.
#[derive(Debug)]
pub struct CallPaths {
    nodes: Vec<Node>,
    children: HashMap<(u32, u64, u64), u32>,
    last_db_id: u64,
}

/// A call path row: (id, parent id, symbol id, ip).
pub type CallPathRow = [u64; 4];

impl Default for CallPaths {
    fn default() -> Self {
        CallPaths {
            nodes: vec![Node {
                parent: 0,
                sym: 0,
                ip: 0,
                in_kernel: false,
                db_id: 0,
            }],
            children: HashMap::new(),
            last_db_id: 0,
        }
    }
}

impl CallPaths {
    /// The root (an empty stack).
    pub const ROOT: u32 = 0;

    /// The child of `parent` for `sym` (or, without a symbol, for `ip`).
    pub fn child(&mut self, parent: u32, sym: Option<Sym<'_>>, ip: u64, kernel_start: u64) -> u32 {
        let in_kernel = ip >= kernel_start;
        let (sym, ip) = match sym {
            Some(s) if s.id != 0 => (s.id, 0),
            _ => (0, ip),
        };
        if let Some(&c) = self.children.get(&(parent, sym, ip)) {
            return c;
        }
        let c = self.nodes.len() as u32;
        self.nodes.push(Node {
            parent,
            sym,
            ip,
            in_kernel,
            db_id: 0,
        });
        self.children.insert((parent, sym, ip), c);
        c
    }

    fn in_kernel(&self, cp: u32) -> bool {
        self.nodes.get(cp as usize).is_some_and(|n| n.in_kernel)
    }

    fn sym(&self, cp: u32) -> u64 {
        self.nodes.get(cp as usize).map_or(0, |n| n.sym)
    }

    fn parent(&self, cp: u32) -> u32 {
        self.nodes.get(cp as usize).map_or(0, |n| n.parent)
    }

    /// The `call_paths.id` of `cp`, exporting it (its parents first) into `out`
    /// if not yet done. The root is exported too (perf's root row, parent 0).
    pub fn export(&mut self, cp: u32, out: &mut Vec<CallPathRow>) -> u64 {
        // Walk up to the first exported ancestor, then number down.
        let mut chain = Vec::new();
        let mut at = cp;
        loop {
            let Some(n) = self.nodes.get(at as usize) else {
                return 0;
            };
            if n.db_id != 0 {
                break;
            }
            chain.push(at);
            if at == Self::ROOT {
                break;
            }
            at = n.parent;
        }
        for &c in chain.iter().rev() {
            self.last_db_id += 1;
            let id = self.last_db_id;
            let n = self.nodes[c as usize];
            let parent_db = if c == Self::ROOT {
                0
            } else {
                self.nodes[n.parent as usize].db_id
            };
            self.nodes[c as usize].db_id = id;
            out.push([id, parent_db, n.sym, n.ip]);
        }
        self.nodes.get(cp as usize).map_or(0, |n| n.db_id)
    }
}

/// A branch sample, as the call/return rules see it.
#[derive(Clone, Copy, Debug)]
pub struct Branch<'a> {
    /// The sample's flags.
    pub flags: u32,
    /// Where the branch is (0: unknown, e.g. tracing began).
    pub ip: u64,
    /// Where it goes (0: unknown, e.g. tracing ended).
    pub addr: u64,
    /// The branch instruction's length.
    pub insn_len: u8,
    /// The sample's time.
    pub time: u64,
    /// Instructions since the last sample.
    pub insn_cnt: u64,
    /// Cycles since the last sample.
    pub cyc_cnt: u64,
    /// The symbol at `ip` (`None`: code in no file).
    pub from_sym: Option<Sym<'a>>,
    /// The symbol at `addr`.
    pub to_sym: Option<Sym<'a>>,
    /// `addr` in its file's addresses (compared with `to_sym.start`).
    pub to_file_addr: u64,
    /// The sample's id (`samples.id`).
    pub sample_id: u64,
}

/// One finished call: a `calls` row but for the ids the exporter adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallReturn {
    /// `calls.id`.
    pub id: u64,
    /// The thread's key (the exporter's).
    pub thread: u64,
    /// `comms.id` of the thread's command when the stack began.
    pub comm_id: u64,
    /// `call_paths.id`.
    pub call_path_id: u64,
    /// `call_paths.id` of the caller's path.
    pub parent_call_path_id: u64,
    /// When it was called.
    pub call_time: u64,
    /// When it returned.
    pub return_time: u64,
    /// Branches in between.
    pub branch_count: u64,
    /// Instructions in between.
    pub insn_count: u64,
    /// Cycles in between.
    pub cyc_count: u64,
    /// The sample of the call (0: none).
    pub call_ref: u64,
    /// The sample of the return (0: none).
    pub return_ref: u64,
    /// [`NO_CALL`], [`NO_RETURN`], [`NON_CALL`].
    pub flags: u32,
    /// `calls.id` of the caller's call (0: none).
    pub parent_id: u64,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    ret_addr: u64,
    timestamp: u64,
    sample_ref: u64,
    branch_count: u64,
    insn_count: u64,
    cyc_count: u64,
    db_id: u64,
    cp: u32,
    no_call: bool,
    trace_end: bool,
    non_call: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retpoline {
    Possible,
    Detected,
}

#[derive(Debug)]
struct Stack {
    thread: u64,
    entries: Vec<Entry>,
    branch_count: u64,
    insn_count: u64,
    cyc_count: u64,
    last_time: u64,
    comm_id: u64,
    rstate: Retpoline,
}

/// Where finished calls and newly exported call paths go.
#[derive(Debug, Default)]
pub struct Output {
    /// Call path rows to write (parents first).
    pub call_paths: Vec<CallPathRow>,
    /// Finished calls to write.
    pub calls: Vec<CallReturn>,
}

/// The call/return processor: one stack per thread (per CPU for the idle task).
#[derive(Debug)]
pub struct CallReturns {
    /// The call path tree.
    pub paths: CallPaths,
    stacks: HashMap<(u64, i32), Stack>,
    /// The order stacks were made in, for the flush at the end.
    order: Vec<(u64, i32)>,
    last_db_id: u64,
    kernel_start: u64,
    /// Symbols that are x86 retpoline thunks.
    thunks: std::collections::HashSet<u64>,
}

fn is_x86_retpoline(name: &str) -> bool {
    name.starts_with("__x86_indirect_thunk_") || name == "__indirect_thunk_start"
}

impl CallReturns {
    /// A processor; addresses at or above `kernel_start` are the kernel's.
    pub fn new(kernel_start: u64) -> Self {
        CallReturns {
            paths: CallPaths::default(),
            stacks: HashMap::new(),
            order: Vec::new(),
            last_db_id: 0,
            kernel_start,
            thunks: Default::default(),
        }
    }

    /// The return addresses on the stack of thread `thread` (`idle`, `cpu` as
    /// for [`CallReturns::process`]), innermost first; `None` before its first
    /// branch. perf's thread stack is this one once call/return processing
    /// has taken it over, so the call chains of later samples come from it.
    pub fn return_addresses(
        &self,
        thread: u64,
        idle: bool,
        cpu: i32,
    ) -> Option<impl Iterator<Item = u64> + '_> {
        let key = (thread, if idle { cpu.max(0) } else { -1 });
        let ts = self.stacks.get(&key)?;
        Some(ts.entries.iter().rev().map(|e| e.ret_addr))
    }

    /// One branch sample of thread `thread` (an exporter key; `idle` for the
    /// idle task, whose stacks are per `cpu`), whose process's command is
    /// `comm_id` (a change of it in a process's main thread is an exec, which
    /// ends the calls on the stack). Finished calls and new call paths go to
    /// `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn process(
        &mut self,
        thread: u64,
        idle: bool,
        main_thread: bool,
        cpu: i32,
        comm_id: u64,
        b: &Branch<'_>,
        out: &mut Output,
    ) {
        let key = (thread, if idle { cpu.max(0) } else { -1 });
        let ks = self.kernel_start;
        if !self.stacks.contains_key(&key) {
            self.order.push(key);
            self.stacks.insert(
                key,
                Stack {
                    thread,
                    entries: Vec::new(),
                    branch_count: 0,
                    insn_count: 0,
                    cyc_count: 0,
                    last_time: 0,
                    comm_id,
                    rstate: Retpoline::Possible,
                },
            );
        }
        let Some(mut ts) = self.stacks.remove(&key) else {
            return;
        };
        let rstate = ts.rstate;
        if rstate == Retpoline::Detected {
            ts.rstate = Retpoline::Possible;
        }
        // An exec: the new program starts with an empty stack.
        if ts.comm_id != comm_id && main_thread {
            self.flush(&mut ts, out);
            ts.comm_id = comm_id;
        }
        if ts.entries.is_empty() {
            self.bottom(&mut ts, b);
        }
        ts.branch_count += 1;
        ts.insn_count += b.insn_cnt;
        ts.cyc_count += b.cyc_cnt;
        ts.last_time = b.time;

        let f = b.flags;
        if f & flags::CALL != 0 {
            if b.ip != 0 && b.addr != 0 {
                let ret_addr = b.ip.wrapping_add(u64::from(b.insn_len));
                if ret_addr != b.addr {
                    let parent = ts.entries.last().map_or(CallPaths::ROOT, |e| e.cp);
                    let cp = self.paths.child(parent, b.to_sym, b.addr, ks);
                    push(
                        &mut ts,
                        ret_addr,
                        b.time,
                        b.sample_id,
                        cp,
                        false,
                        f & flags::TRACE_END != 0,
                    );
                    // A call into the middle of its own function may be a retpoline.
                    if let (Some(from), Some(to)) = (b.from_sym, b.to_sym) {
                        if rstate == Retpoline::Possible
                            && from.id == to.id
                            && b.to_file_addr != to.start
                        {
                            ts.rstate = Retpoline::Detected;
                        }
                    }
                }
            }
        } else if f & flags::RETURN != 0 {
            if b.addr == 0 {
                if f & (flags::SYSCALLRET | flags::INTERRUPT) != 0 {
                    self.pop_kernel(&mut ts, b.time, b.sample_id, out);
                }
            } else if b.ip != 0 {
                let n = ts.entries.len();
                if rstate == Retpoline::Detected && n > 2 && ts.entries[n - 1].ret_addr != b.addr {
                    self.retpoline(&mut ts, b);
                } else if !self.pop(&mut ts, b, out) {
                    self.no_call_return(&mut ts, b, out);
                }
            }
        } else if f & flags::TRACE_BEGIN != 0 {
            if ts.entries.last().is_some_and(|e| e.trace_end) {
                let i = ts.entries.len() - 1;
                self.call_return(&mut ts, i, b.time, b.sample_id, false, out);
            }
        } else if f & flags::TRACE_END != 0 {
            let bottom_of_this = ts.entries.len() == 1 && ts.entries[0].sample_ref == b.sample_id;
            if !ts.entries.is_empty() && !bottom_of_this {
                let top = ts.entries[ts.entries.len() - 1].cp;
                let cp = self.paths.child(top, None, 0, ks);
                let ret_addr = b.ip.wrapping_add(u64::from(b.insn_len));
                push(&mut ts, ret_addr, b.time, b.sample_id, cp, false, true);
            }
        } else if f & flags::BRANCH != 0 {
            // A jump to the start of another function: a tail call.
            if let Some(to) = b.to_sym {
                let other = b.from_sym.map(|s| s.id) != Some(to.id);
                if other && b.to_file_addr == to.start {
                    let parent = ts.entries.last().map_or(CallPaths::ROOT, |e| e.cp);
                    let cp = self.paths.child(parent, Some(to), b.addr, ks);
                    push(&mut ts, 0, b.time, b.sample_id, cp, false, false);
                    if let Some(e) = ts.entries.last_mut() {
                        e.non_call = true;
                    }
                }
            }
        }
        self.stacks.insert(key, ts);
    }

    /// An empty stack gets the current function at its bottom.
    fn bottom(&mut self, ts: &mut Stack, b: &Branch<'_>) {
        let (ip, sym) = if b.ip != 0 {
            (b.ip, b.from_sym)
        } else if b.addr != 0 {
            (b.addr, b.to_sym)
        } else {
            return;
        };
        let cp = self
            .paths
            .child(CallPaths::ROOT, sym, ip, self.kernel_start);
        push(ts, ip, b.time, b.sample_id, cp, true, false);
    }

    /// Ends the call at `idx` (popped by the caller).
    fn call_return(
        &mut self,
        ts: &mut Stack,
        idx: usize,
        time: u64,
        sample_ref: u64,
        no_return: bool,
        out: &mut Output,
    ) {
        ts.entries.truncate(idx + 1);
        let Some(e) = ts.entries.pop() else { return };
        let mut flags = 0;
        if e.no_call {
            flags |= NO_CALL;
        }
        if no_return {
            flags |= NO_RETURN;
        }
        if e.non_call {
            flags |= NON_CALL;
        }
        let call_path_id = self.paths.export(e.cp, &mut out.call_paths);
        let id = if e.db_id != 0 {
            e.db_id
        } else {
            self.last_db_id += 1;
            self.last_db_id
        };
        // The caller gets its id now: its row comes later, when it returns.
        let parent_id = match ts.entries.last_mut() {
            Some(p) => {
                if p.db_id == 0 {
                    self.last_db_id += 1;
                    p.db_id = self.last_db_id;
                }
                p.db_id
            }
            None => 0,
        };
        let parent_cp = self.paths.parent(e.cp);
        let parent_call_path_id = self
            .paths
            .nodes
            .get(parent_cp as usize)
            .map_or(0, |n| n.db_id);
        out.calls.push(CallReturn {
            id,
            thread: ts.thread,
            comm_id: ts.comm_id,
            call_path_id,
            parent_call_path_id,
            call_time: e.timestamp,
            return_time: time,
            branch_count: ts.branch_count - e.branch_count,
            insn_count: ts.insn_count - e.insn_count,
            cyc_count: ts.cyc_count - e.cyc_count,
            call_ref: e.sample_ref,
            return_ref: sample_ref,
            flags,
            parent_id,
        });
    }

    /// Pops the call a return returns from; false if none matches.
    fn pop(&mut self, ts: &mut Stack, b: &Branch<'_>, out: &mut Output) -> bool {
        let n = ts.entries.len();
        if n == 0 {
            return false;
        }
        if n == 1 {
            let from = b.from_sym.map_or(0, |s| s.id);
            if self.paths.sym(ts.entries[0].cp) == from {
                self.call_return(ts, 0, b.time, b.sample_id, false, out);
                return true;
            }
        }
        let top = ts.entries[n - 1];
        if top.ret_addr == b.addr && !top.non_call {
            self.call_return(ts, n - 1, b.time, b.sample_id, false, out);
            return true;
        }
        // Further down: the calls above it never returned.
        let Some(i) = (0..n - 1)
            .rev()
            .find(|&i| ts.entries[i].ret_addr == b.addr && !ts.entries[i].non_call)
        else {
            return false;
        };
        while ts.entries.len() > i + 1 {
            let top = ts.entries.len() - 1;
            self.call_return(ts, top, b.time, b.sample_id, true, out);
        }
        self.call_return(ts, i, b.time, b.sample_id, false, out);
        true
    }

    /// Ends the kernel's calls on top of the stack.
    fn pop_kernel(&mut self, ts: &mut Stack, time: u64, sample_ref: u64, out: &mut Output) {
        while let Some(e) = ts.entries.last() {
            if !self.paths.in_kernel(e.cp) {
                break;
            }
            let i = ts.entries.len() - 1;
            self.call_return(ts, i, time, sample_ref, true, out);
        }
    }

    /// A return that matches no call on the stack.
    fn no_call_return(&mut self, ts: &mut Stack, b: &Branch<'_>, out: &mut Output) {
        let ks = self.kernel_start;
        let in_kernel =
            |s: &Self, ts: &Stack| ts.entries.last().is_some_and(|e| s.paths.in_kernel(e.cp));
        if b.ip >= ks && b.addr < ks {
            // Back to user space: the kernel's calls end.
            self.pop_kernel(ts, b.time, b.sample_id, out);
            if ts.entries.is_empty() {
                let cp = self.paths.child(CallPaths::ROOT, b.to_sym, b.addr, ks);
                push(ts, 0, b.time, b.sample_id, cp, true, false);
                return;
            }
        } else if in_kernel(self, ts) && b.ip < ks {
            self.pop_kernel(ts, b.time, b.sample_id, out);
        }
        let parent = ts.entries.last().map_or(CallPaths::ROOT, |e| e.cp);
        let from = b.from_sym.map_or(0, |s| s.id);
        if self.paths.sym(parent) == from {
            // At the bottom of the stack the call was before the trace began: the
            // function returns and its caller takes its place.
            if ts.entries.len() == 1 {
                self.call_return(ts, 0, b.time, b.sample_id, false, out);
            }
            if ts.entries.is_empty() {
                let cp = self.paths.child(CallPaths::ROOT, b.to_sym, b.addr, ks);
                push(ts, b.addr, b.time, b.sample_id, cp, true, false);
                return;
            }
            // Else the return is used as a jump (a retpoline): push its target.
            let cp = self.paths.child(parent, b.to_sym, b.addr, ks);
            push(ts, 0, b.time, b.sample_id, cp, true, false);
            if let Some(e) = ts.entries.last_mut() {
                e.non_call = true;
            }
            return;
        }
        // The caller has not returned yet: push the target, then the function
        // returned from, and end that one.
        let cp = self.paths.child(parent, b.to_sym, b.addr, ks);
        push(ts, b.addr, b.time, b.sample_id, cp, true, false);
        let cp = self.paths.child(cp, b.from_sym, b.ip, ks);
        push(ts, b.ip, b.time, b.sample_id, cp, true, false);
        let i = ts.entries.len() - 1;
        self.call_return(ts, i, b.time, b.sample_id, false, out);
    }

    /// A return of an x86 retpoline: fold the thunk away.
    fn retpoline(&mut self, ts: &mut Stack, b: &Branch<'_>) {
        let n = ts.entries.len();
        let top_sym = self.paths.sym(ts.entries[n - 1].cp);
        let to_id = b.to_sym.map(|s| s.id);
        if top_sym != 0 && self.thunks.contains(&top_sym) {
            ts.entries.pop();
            let below = self.paths.sym(ts.entries[ts.entries.len() - 2].cp);
            if below != 0
                && Some(below) == to_id
                && b.to_sym.is_some_and(|s| b.to_file_addr != s.start)
            {
                // Back into the middle of the caller: an indirect jump; forget it.
                ts.entries.pop();
                return;
            }
        } else if top_sym != 0 && Some(top_sym) == to_id {
            // Back to the function it came from: an indirect jump; forget it.
            ts.entries.pop();
            return;
        }
        let n = ts.entries.len();
        let parent = ts.entries[n - 2].cp;
        let cp = self
            .paths
            .child(parent, b.to_sym, b.addr, self.kernel_start);
        ts.entries[n - 1].cp = cp;
    }

    /// Symbol `id`, named `name`, was met: retpoline thunks are remembered.
    pub fn symbol(&mut self, id: u64, name: &str) {
        if is_x86_retpoline(name) {
            self.thunks.insert(id);
        }
    }

    /// Ends every call on `ts` ("no return", at its last time).
    fn flush(&mut self, ts: &mut Stack, out: &mut Output) {
        let t = ts.last_time;
        while !ts.entries.is_empty() {
            let i = ts.entries.len() - 1;
            self.call_return(ts, i, t, 0, true, out);
        }
    }

    /// Ends every call still open, thread by thread in the order `order` gives
    /// (perf's: by thread id).
    pub fn flush_all(&mut self, mut order: impl FnMut(u64) -> (u32, u32), out: &mut Output) {
        let mut keys = std::mem::take(&mut self.order);
        keys.sort_by_key(|&(thread, cpu)| (order(thread), cpu));
        for key in keys {
            if let Some(mut ts) = self.stacks.remove(&key) {
                self.flush(&mut ts, out);
            }
        }
    }
}

fn push(
    ts: &mut Stack,
    ret_addr: u64,
    timestamp: u64,
    sample_ref: u64,
    cp: u32,
    no_call: bool,
    trace_end: bool,
) {
    ts.entries.push(Entry {
        ret_addr,
        timestamp,
        sample_ref,
        branch_count: ts.branch_count,
        insn_count: ts.insn_count,
        cyc_count: ts.cyc_count,
        db_id: 0,
        cp,
        no_call,
        trace_end,
        non_call: false,
    });
}
