//! A fixed-size queue of pending events, each waiting for the packet it binds to.
//!
//! Events that are not complete when their packet is decoded (their IP comes with a
//! later FUP or TIP, a CFE waits for its EVD data, a PWRE for its PWRX …) wait here.
//! The queue keeps insertion order; taking an event out of the middle keeps the order of
//! the others. It never allocates.

use super::{Event, EventKind};

/// What packet a queued event waits for (a bit set: an event may bind to either).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Binding(pub(crate) u8);

impl Binding {
    /// The end of PSB+ (status updates).
    pub(crate) const PSBEND: Binding = Binding(1 << 0);
    /// The next TIP, TIP.PGE or TIP.PGD.
    pub(crate) const TIP: Binding = Binding(1 << 1);
    /// The next FUP, which still acts as the source of an asynchronous branch.
    pub(crate) const FUP: Binding = Binding(1 << 2);
    /// The next FUP, which then is used up by this event (no asynchronous branch).
    pub(crate) const FUP_BOUND: Binding = Binding(1 << 3);
    /// The next EXSTOP (MWAIT waits for it).
    pub(crate) const EXSTOP: Binding = Binding(1 << 4);
    /// The next CFE (EVD data waits for it).
    pub(crate) const CFE: Binding = Binding(1 << 5);
    /// The next PWRX (PWRE waits for it).
    pub(crate) const PWRX: Binding = Binding(1 << 6);
    /// Any binding.
    pub(crate) const ANY: Binding = Binding(0x7f);

    pub(crate) const fn or(self, other: Binding) -> Binding {
        Binding(self.0 | other.0)
    }

    const fn meets(self, other: Binding) -> bool {
        self.0 & other.0 != 0
    }
}

/// A queued event. `ignore` marks a placeholder that only takes up a FUP or TIP
/// (a MODE.Exec that changed nothing, a CFE of an unknown type with an IP …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) event: Event,
    pub(crate) ignore: bool,
    binding: Binding,
}

/// Most events pending at once (libipt's queue of 16 keeps two slots free).
pub(crate) const CAPACITY: usize = 14;

const EMPTY: Entry = Entry {
    event: Event {
        kind: EventKind::Stop,
        ip_suppressed: false,
        status_update: false,
        time: super::Timestamp {
            tsc: None,
            lost_mtc: 0,
            lost_cyc: 0,
        },
        offset: 0,
    },
    ignore: false,
    binding: Binding(0),
};

/// The queue: `entries[..len]` in order of arrival.
#[derive(Clone, Debug)]
pub(crate) struct EventQueue {
    entries: [Entry; CAPACITY],
    len: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl EventQueue {
    pub(crate) const fn new() -> Self {
        Self {
            entries: [EMPTY; CAPACITY],
            len: 0,
        }
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// Append an event; `false` if the queue is full.
    #[must_use]
    pub(crate) fn push(&mut self, event: Event, binding: Binding, ignore: bool) -> bool {
        let Some(slot) = self.entries.get_mut(self.len) else {
            return false;
        };
        *slot = Entry {
            event,
            ignore,
            binding,
        };
        self.len += 1;
        true
    }

    fn position(&self, binding: Binding) -> Option<usize> {
        self.entries[..self.len]
            .iter()
            .position(|e| e.binding.meets(binding))
    }

    /// Remove entry `i`, keeping the order of the rest.
    fn remove(&mut self, i: usize) -> Entry {
        let e = self.entries[i];
        self.entries.copy_within(i + 1..self.len, i);
        self.len -= 1;
        e
    }

    /// Take the oldest event with any of `binding`'s bits.
    pub(crate) fn pop(&mut self, binding: Binding) -> Option<Entry> {
        let i = self.position(binding)?;
        Some(self.remove(i))
    }

    /// Whether no event waits at all.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether any event waits for any of `binding`'s bits.
    pub(crate) fn pending(&self, binding: Binding) -> bool {
        self.position(binding).is_some()
    }

    /// Index of the oldest non-placeholder event with `binding` whose kind satisfies `f`.
    pub(crate) fn find(&self, binding: Binding, f: impl Fn(&EventKind) -> bool) -> Option<usize> {
        self.entries[..self.len]
            .iter()
            .position(|e| e.binding.meets(binding) && !e.ignore && f(&e.event.kind))
    }

    /// Entry `i` (from [`find`](Self::find)).
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut Entry> {
        self.entries[..self.len].get_mut(i)
    }

    /// Take the oldest event with `binding`, but hand out the event at `want` (found
    /// with the same binding, at or after it) in its place: the taken slot's event moves
    /// to `want`'s position. This is how an asynchronous branch goes out before other
    /// events that wait for the same TIP, as libipt orders them.
    pub(crate) fn pop_swapped(&mut self, binding: Binding, want: usize) -> Option<Entry> {
        let first = self.position(binding)?;
        if want >= self.len || want < first {
            return None;
        }
        if want != first {
            let (a, b) = (self.entries[first], self.entries[want]);
            self.entries[first].event = b.event;
            self.entries[first].ignore = b.ignore;
            self.entries[want].event = a.event;
            self.entries[want].ignore = a.ignore;
        }
        Some(self.remove(first))
    }

    /// Number of pending events.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Comparing queues of two decoders (see `BlockDecoder::checkpoint`).
impl EventQueue {
    /// Whether both queues hold the same events in the same order, with the same
    /// bindings, whatever their timestamps.
    pub(crate) fn same_events(&self, other: &Self) -> bool {
        self.len == other.len
            && self.entries[..self.len]
                .iter()
                .zip(&other.entries[..other.len])
                .all(|(a, b)| {
                    a.ignore == b.ignore
                        && a.binding == b.binding
                        && a.event.untimed() == b.event.untimed()
                })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind) -> Event {
        Event {
            kind,
            ..EMPTY.event
        }
    }

    #[test]
    fn pops_by_binding_in_order() {
        let mut q = EventQueue::new();
        assert!(q.push(ev(EventKind::Stop), Binding::PSBEND, false));
        assert!(q.push(ev(EventKind::Cbr { ratio: 1 }), Binding::TIP, false));
        assert!(q.push(ev(EventKind::Cbr { ratio: 2 }), Binding::TIP, false));
        assert!(q.pending(Binding::TIP));
        assert!(!q.pending(Binding::FUP));
        assert_eq!(
            q.pop(Binding::TIP).unwrap().event.kind,
            EventKind::Cbr { ratio: 1 }
        );
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(Binding::ANY).unwrap().event.kind, EventKind::Stop);
        assert_eq!(
            q.pop(Binding::TIP).unwrap().event.kind,
            EventKind::Cbr { ratio: 2 }
        );
        assert!(q.pop(Binding::ANY).is_none());
    }

    #[test]
    fn full_queue_refuses() {
        let mut q = EventQueue::new();
        for _ in 0..CAPACITY {
            assert!(q.push(ev(EventKind::Stop), Binding::TIP, false));
        }
        assert!(!q.push(ev(EventKind::Stop), Binding::TIP, false));
    }

    #[test]
    fn swapped_pop_moves_the_first_into_the_gap() {
        let mut q = EventQueue::new();
        let a = ev(EventKind::Cbr { ratio: 1 });
        let b = ev(EventKind::Cbr { ratio: 2 });
        let c = ev(EventKind::Cbr { ratio: 3 });
        assert!(q.push(a, Binding::TIP, false));
        assert!(q.push(b, Binding::TIP, false));
        assert!(q.push(c, Binding::TIP, false));
        let i = q
            .find(Binding::TIP, |k| *k == EventKind::Cbr { ratio: 3 })
            .unwrap();
        assert_eq!(q.pop_swapped(Binding::TIP, i).unwrap().event, c);
        assert_eq!(q.pop(Binding::TIP).unwrap().event, b);
        assert_eq!(q.pop(Binding::TIP).unwrap().event, a);
    }
}
