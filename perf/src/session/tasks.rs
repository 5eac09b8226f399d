//! Who runs where: threads (their process, names and lifetimes) from COMM, FORK and
//! EXIT records, and what runs on each CPU from ITRACE_START and context-switch
//! records, as perf's machine and intel-pt.c keep them.
//!
//! Times are perf times (ns). A query at `None` asks for the latest state (what an
//! untimed recording can answer); records without a time count as the earliest.

use std::collections::HashMap;

/// One name of a thread, from a COMM record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommChange {
    /// When (perf time; 0 if the record had none).
    pub time: u64,
    /// The name.
    pub comm: String,
    /// Set by an exec.
    pub exec: bool,
    /// The file offset of the COMM record (of the FORK, for a name inherited
    /// from the parent): where a reader that goes by file order, as our
    /// simulator's recordings allow, puts the change.
    pub record_offset: u64,
}

/// A thread, as the side-band records describe it: one lifetime of a thread id
/// (a tid that is used again after an exit is another [`Thread`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    /// Thread id.
    pub tid: u32,
    /// Its process, if any record said.
    pub pid: Option<u32>,
    /// The thread that created it (FORK's ptid).
    pub parent_tid: Option<u32>,
    /// When it was created (FORK), if recorded.
    pub start: Option<u64>,
    /// The file offset of its FORK record, if recorded.
    pub fork_offset: Option<u64>,
    /// When it exited (EXIT), if recorded.
    pub exit: Option<u64>,
    /// Its names in time order.
    pub comms: Vec<CommChange>,
}

impl Thread {
    fn new(tid: u32) -> Self {
        Thread {
            tid,
            pid: None,
            parent_tid: None,
            start: None,
            fork_offset: None,
            exit: None,
            comms: Vec::new(),
        }
    }

    /// Its name at `time` (`None`: the last one), as perf's `thread__comm_str`: the
    /// last name set at or before that time, else the first.
    pub fn comm_at(&self, time: Option<u64>) -> Option<&str> {
        let c = match time {
            None => self.comms.last(),
            Some(t) => self
                .comms
                .iter()
                .rev()
                .find(|c| c.time <= t)
                .or(self.comms.first()),
        };
        c.map(|c| c.comm.as_str())
    }
}

/// Which thread runs: on a queue's CPU, or the thread a per-thread queue traces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Context {
    /// Process id (`None`: unknown).
    pub pid: Option<u32>,
    /// Thread id (`None`: unknown).
    pub tid: Option<u32>,
    /// The CPU, when known.
    pub cpu: Option<u32>,
    /// Since when (perf time), when known.
    pub since: Option<u64>,
}

/// A change of what runs on a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Switch {
    pub time: u64,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
}

/// The threads and the per-CPU schedules.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    threads: HashMap<u32, Vec<Thread>>,
    schedules: HashMap<u32, Vec<Switch>>,
}

fn none_if_minus_one(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

impl Tasks {
    /// The live thread `tid`, created if unknown.
    fn live(&mut self, tid: u32) -> &mut Thread {
        let v = self.threads.entry(tid).or_default();
        if v.last().map_or(true, |t| t.exit.is_some()) {
            v.push(Thread::new(tid));
        }
        let n = v.len() - 1;
        &mut v[n]
    }

    /// A COMM record at file offset `at`.
    pub fn comm(&mut self, pid: u32, tid: u32, comm: &str, exec: bool, time: Option<u64>, at: u64) {
        let t = self.live(tid);
        t.pid = Some(pid);
        t.comms.push(CommChange {
            time: time.unwrap_or(0),
            comm: comm.to_string(),
            exec,
            record_offset: at,
        });
    }

    /// A FORK record at file offset `at`.
    pub fn fork(&mut self, pid: u32, tid: u32, ptid: u32, time: Option<u64>, at: u64) {
        // The parent's name as of now is the child's first (perf's thread__fork).
        let parent_comm = self
            .thread(ptid, time)
            .and_then(|p| p.comm_at(time))
            .map(str::to_string);
        let v = self.threads.entry(tid).or_default();
        // A fork always starts a new lifetime, unless the tid was only met in records
        // that came out of order (COMM of the child before its FORK).
        let reuse = v.last().is_some_and(|t| {
            t.exit.is_none() && t.start.is_none() && {
                t.comms.iter().all(|c| Some(c.time) >= time.or(Some(0)))
            }
        });
        if !reuse {
            v.push(Thread::new(tid));
        }
        let n = v.len() - 1;
        let t = &mut v[n];
        t.pid = Some(pid);
        t.parent_tid = Some(ptid);
        t.start = time;
        t.fork_offset = Some(at);
        if t.comms.is_empty() {
            if let Some(c) = parent_comm {
                t.comms.push(CommChange {
                    time: time.unwrap_or(0),
                    comm: c,
                    exec: false,
                    record_offset: at,
                });
            }
        }
    }

    pub fn exit(&mut self, pid: u32, tid: u32, time: Option<u64>) {
        let t = self.live(tid);
        t.pid.get_or_insert(pid);
        t.exit = Some(time.unwrap_or(0));
    }

    /// A record says `tid` belongs to `pid` (ITRACE_START, a sample id).
    pub fn seen(&mut self, pid: u32, tid: u32) {
        if let (Some(pid), Some(tid)) = (none_if_minus_one(pid), none_if_minus_one(tid)) {
            let t = self.live(tid);
            t.pid.get_or_insert(pid);
        }
    }

    /// From `time` on, `tid` of `pid` runs on `cpu`.
    pub fn switch_to(&mut self, cpu: u32, pid: u32, tid: u32, time: Option<u64>) {
        let s = self.schedules.entry(cpu).or_default();
        let sw = Switch {
            time: time.unwrap_or(0),
            pid: none_if_minus_one(pid),
            tid: none_if_minus_one(tid),
        };
        if s.last().is_some_and(|l| (l.pid, l.tid) == (sw.pid, sw.tid)) {
            return;
        }
        s.push(sw);
    }

    /// Sorts what came out of order (records are processed in perf's order; this
    /// only matters for files perf itself would warn about).
    pub fn finish(&mut self) {
        for s in self.schedules.values_mut() {
            s.sort_by_key(|s| s.time);
        }
    }

    /// Thread `tid` at `time` (`None`: the last one).
    pub fn thread(&self, tid: u32, time: Option<u64>) -> Option<&Thread> {
        let v = self.threads.get(&tid)?;
        match time {
            None => v.last(),
            Some(t) => v
                .iter()
                .rev()
                .find(|th| th.start.unwrap_or(0) <= t)
                .or(v.first()),
        }
    }

    /// Every thread lifetime, by tid.
    pub fn threads(&self) -> impl Iterator<Item = &Thread> {
        let mut tids: Vec<&u32> = self.threads.keys().collect();
        tids.sort();
        tids.into_iter().flat_map(move |t| self.threads[t].iter())
    }

    /// What runs on `cpu` at `time` (`None`: the last known).
    pub fn on_cpu(&self, cpu: u32, time: Option<u64>) -> Option<Switch> {
        let s = self.schedules.get(&cpu)?;
        match time {
            None => s.last().copied(),
            Some(t) => {
                let i = s.partition_point(|x| x.time <= t);
                s.get(i.checked_sub(1)?).copied()
            }
        }
    }

    /// The first change on `cpu` after `time`.
    pub fn next_on_cpu(&self, cpu: u32, time: u64) -> Option<u64> {
        let s = self.schedules.get(&cpu)?;
        let i = s.partition_point(|x| x.time <= time);
        s.get(i).map(|x| x.time)
    }

    /// The first switch on `cpu` (for a queue whose trace has no time yet).
    pub fn first_on_cpu(&self, cpu: u32) -> Option<Switch> {
        self.schedules.get(&cpu)?.first().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_names_and_lifetimes() {
        let mut t = Tasks::default();
        t.comm(10, 10, "sh", false, Some(5), 0x100);
        t.fork(11, 11, 10, Some(10), 0x200);
        assert_eq!(
            t.thread(11, Some(12)).unwrap().comm_at(Some(12)),
            Some("sh")
        );
        t.comm(11, 11, "ls", true, Some(20), 0x300);
        let c = t.thread(11, None).unwrap();
        assert_eq!(c.comm_at(Some(15)), Some("sh"));
        assert_eq!(c.comm_at(Some(25)), Some("ls"));
        assert_eq!(c.comm_at(None), Some("ls"));
        assert_eq!(c.pid, Some(11));
        assert_eq!(c.parent_tid, Some(10));
        assert_eq!(c.fork_offset, Some(0x200));
        let offsets: Vec<(u64, bool)> = c.comms.iter().map(|c| (c.record_offset, c.exec)).collect();
        assert_eq!(
            offsets,
            [(0x200, false), (0x300, true)],
            "the inherited name at the FORK"
        );
        t.exit(11, 11, Some(30));
        // The tid used again: a new lifetime.
        t.fork(11, 11, 10, Some(40), 0x400);
        assert_eq!(t.threads.get(&11).unwrap().len(), 2);
        assert_eq!(t.thread(11, Some(25)).unwrap().exit, Some(30));
        assert_eq!(t.thread(11, Some(45)).unwrap().start, Some(40));
    }

    #[test]
    fn cpu_schedules() {
        let mut t = Tasks::default();
        t.switch_to(0, 1, 1, Some(10));
        t.switch_to(0, 1, 1, Some(15));
        t.switch_to(0, 2, 3, Some(20));
        t.finish();
        assert_eq!(t.on_cpu(0, Some(5)), None);
        assert_eq!(t.on_cpu(0, Some(19)).unwrap().tid, Some(1));
        assert_eq!(t.on_cpu(0, Some(20)).unwrap().tid, Some(3));
        assert_eq!(t.next_on_cpu(0, 10), Some(20));
        assert_eq!(t.next_on_cpu(0, 20), None);
        assert_eq!(t.on_cpu(0, None).unwrap().pid, Some(2));
        assert_eq!(t.on_cpu(1, None), None);
    }
}
