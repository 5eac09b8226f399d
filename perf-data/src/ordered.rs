//! Time-ordered delivery the way perf does it (ordered_events with FINISHED_ROUND).
//!
//! perf writes records in the order it reads its per-CPU ring buffers, so timestamps
//! interleave. After every pass over the buffers it writes FINISHED_ROUND: every record
//! with a time at or below the highest time seen *before the previous* FINISHED_ROUND can
//! then be delivered, since no later buffer can hold an earlier one. Records without a
//! time (and perf's own user records) are delivered at once; a FINISHED_ROUND itself comes
//! before the records it releases (the order `perf script -D` prints). [`RoundQueue`] is
//! that queue, for any item type (a pipe-mode consumer queues its own copies);
//! [`crate::PerfFile::ordered_records`] applies it to a file. The queue holds at most two
//! rounds of records.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

struct Queued<T> {
    time: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Queued<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl<T> Eq for Queued<T> {}
impl<T> PartialOrd for Queued<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Queued<T> {
    // Reversed: BinaryHeap is a max-heap and we pop the earliest (time, arrival).
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// perf's ordered-events queue: push items with their time, mark rounds, pop them in
/// time order (ties in arrival order).
pub struct RoundQueue<T> {
    heap: BinaryHeap<Queued<T>>,
    ready: VecDeque<T>,
    seq: u64,
    max_time: u64,
    next_flush: u64,
    last_flush: u64,
    out_of_order: u64,
}

impl<T> Default for RoundQueue<T> {
    fn default() -> Self {
        RoundQueue {
            heap: BinaryHeap::new(),
            ready: VecDeque::new(),
            seq: 0,
            max_time: 0,
            next_flush: 0,
            last_flush: 0,
            out_of_order: 0,
        }
    }
}

impl<T> RoundQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an item: queued by `time`, or ready at once when it has none (`None`, 0 and
    /// `u64::MAX` count as none, as in perf).
    pub fn push(&mut self, time: Option<u64>, item: T) {
        match time {
            Some(t) if t != 0 && t != u64::MAX => {
                if t < self.last_flush {
                    self.out_of_order += 1;
                }
                self.max_time = self.max_time.max(t);
                self.seq += 1;
                self.heap.push(Queued {
                    time: t,
                    seq: self.seq,
                    item,
                });
            }
            _ => self.ready.push_back(item),
        }
    }

    /// A FINISHED_ROUND: releases what the previous round made safe.
    pub fn finished_round(&mut self) {
        self.flush_to(self.next_flush);
        self.next_flush = self.max_time;
    }

    /// The end of the input: releases everything.
    pub fn finish(&mut self) {
        self.flush_to(u64::MAX);
    }

    fn flush_to(&mut self, limit: u64) {
        if limit == 0 {
            return;
        }
        while self.heap.peek().is_some_and(|q| q.time <= limit) {
            if let Some(q) = self.heap.pop() {
                self.last_flush = q.time;
                self.ready.push_back(q.item);
            }
        }
    }

    /// The next item ready for delivery.
    pub fn pop(&mut self) -> Option<T> {
        self.ready.pop_front()
    }

    /// Items still waiting for a round to end.
    pub fn queued(&self) -> usize {
        self.heap.len()
    }

    /// Items that arrived with a time below one already delivered (perf counts these as
    /// "out of order events" and warns).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_release_what_the_previous_round_made_safe() {
        let mut q = RoundQueue::new();
        q.push(Some(30), "c30");
        q.push(Some(10), "a10");
        q.push(None, "untimed");
        assert_eq!(q.pop(), Some("untimed"));
        q.finished_round(); // nothing safe yet: next_flush was 0
        assert_eq!(q.pop(), None);
        q.push(Some(20), "b20");
        q.push(Some(40), "d40");
        q.finished_round(); // releases up to 30
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, ["a10", "b20", "c30"]);
        q.push(Some(35), "e35");
        q.finish();
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, ["e35", "d40"]);
        assert_eq!(q.out_of_order(), 0);
    }

    #[test]
    fn ties_keep_arrival_order_and_late_items_are_counted() {
        let mut q = RoundQueue::new();
        q.push(Some(5), 1);
        q.push(Some(5), 2);
        q.finished_round();
        q.finished_round();
        assert_eq!((q.pop(), q.pop()), (Some(1), Some(2)));
        q.push(Some(4), 3);
        assert_eq!(q.out_of_order(), 1);
    }
}
