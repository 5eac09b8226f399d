//! perf's auxtrace heap: the min-heap of queues by timestamp that decides which
//! queue's decoder runs next (`auxtrace_heap__add`, `auxtrace_heap__pop` in
//! perf's auxtrace.c).
//!
//! A standard binary heap gives the same order wherever timestamps differ. Where
//! two queues wait with the same timestamp, perf's order is whatever its heap's
//! mechanics leave on top, and perf script prints their samples in that order;
//! so this heap moves its items exactly as perf's does: an added item rises
//! while its parent is strictly later (an equal parent stays above it), and a pop
//! walks the hole down through the earlier child (the right one where both are
//! equal), then lifts the last item into the hole.

/// One waiting queue: its index and the timestamp it waits with (perf's
/// `auxtrace_heap_item`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapItem {
    /// perf's `ordinal`: the TSC the queue has reached.
    pub ordinal: u64,
    /// The queue's index.
    pub queue: usize,
}

/// perf's `struct auxtrace_heap`.
#[derive(Clone, Debug, Default)]
pub struct AuxtraceHeap {
    items: Vec<HeapItem>,
}

impl AuxtraceHeap {
    /// An empty heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// The queue that runs next, if any.
    pub fn top(&self) -> Option<HeapItem> {
        self.items.first().copied()
    }

    /// How many queues wait.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when no queue waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// `auxtrace_heap__add`.
    pub fn add(&mut self, queue: usize, ordinal: u64) {
        let pos = self.items.len();
        self.items.push(HeapItem { ordinal, queue });
        self.lift(pos, HeapItem { ordinal, queue });
    }

    /// `auxtrace_heap__pop`: removes the top.
    pub fn pop(&mut self) {
        let n = self.items.len();
        if n == 0 {
            return;
        }
        let mut pos = 0;
        loop {
            let left = 2 * pos + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            if right >= n {
                // The left child is the last item: it fills the hole.
                self.items[pos] = self.items[left];
                self.items.truncate(n - 1);
                return;
            }
            let child = if self.items[left].ordinal < self.items[right].ordinal {
                left
            } else {
                right
            };
            self.items[pos] = self.items[child];
            pos = child;
        }
        let last = self.items[n - 1];
        self.lift(pos, last);
        self.items.truncate(n - 1);
    }

    /// perf's `auxtrace_heapify`: places `item` at `pos` or above it, past every
    /// parent later than it.
    fn lift(&mut self, mut pos: usize, item: HeapItem) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if self.items[parent].ordinal <= item.ordinal {
                break;
            }
            self.items[pos] = self.items[parent];
            pos = parent;
        }
        self.items[pos] = item;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(h: &mut AuxtraceHeap) -> Vec<(u64, usize)> {
        let mut v = Vec::new();
        while let Some(t) = h.top() {
            v.push((t.ordinal, t.queue));
            h.pop();
        }
        v
    }

    /// Distinct timestamps come out in order, whatever the order they went in.
    #[test]
    fn orders_by_timestamp() {
        let mut h = AuxtraceHeap::new();
        for (q, t) in [50, 10, 40, 30, 20, 60, 5].into_iter().enumerate() {
            h.add(q, t);
        }
        let out: Vec<u64> = drain(&mut h).into_iter().map(|(t, _)| t).collect();
        assert_eq!(out, [5, 10, 20, 30, 40, 50, 60]);
        assert!(h.is_empty());
    }

    /// Equal timestamps: an item added later stays below an equal one already
    /// there.
    #[test]
    fn an_equal_newcomer_waits() {
        let mut h = AuxtraceHeap::new();
        h.add(1, 7);
        h.add(0, 7);
        assert_eq!(h.top().map(|t| t.queue), Some(1));
        h.pop();
        assert_eq!(h.top().map(|t| t.queue), Some(0));
    }

    /// Equal timestamps: a pop walks down through the right child, so the order
    /// among equals is not the order they were added in (as in perf).
    #[test]
    fn a_pop_prefers_the_right_child_among_equals() {
        let mut h = AuxtraceHeap::new();
        for q in 0..4 {
            h.add(q, 1);
        }
        // [0, 1, 2, 3] as a tree: 0 on top, 1 and 2 below it, 3 below 1.
        // Popping 0: 1 and 2 are equal, so 2 rises; its slot is a leaf, and the
        // last item (3) is lifted into it.
        let order: Vec<usize> = drain(&mut h).into_iter().map(|(_, q)| q).collect();
        assert_eq!(order, [0, 2, 3, 1]);
    }

    /// The heap property holds after any mix of adds and pops.
    #[test]
    fn stays_a_heap() {
        let mut h = AuxtraceHeap::new();
        let mut x: u64 = 12345;
        for i in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 == 0 && !h.is_empty() {
                let top = h.top().unwrap().ordinal;
                assert!(h.items.iter().all(|it| it.ordinal >= top));
                h.pop();
            } else {
                h.add(i, x % 16);
            }
            for (p, it) in h.items.iter().enumerate().skip(1) {
                assert!(h.items[(p - 1) / 2].ordinal <= it.ordinal);
            }
        }
    }
}
