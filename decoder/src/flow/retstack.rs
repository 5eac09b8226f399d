//! The return stack for return compression (libipt's `pt_retstack` semantics).

use crate::error::ErrorCode;

/// Entries the stack holds; a push onto a full stack drops the oldest entry.
pub const RETSTACK_SIZE: usize = 64;

/// A ring of return addresses: near calls push, compressed returns pop.
#[derive(Clone, Debug)]
pub struct RetStack {
    /// One slot more than the capacity so that `top == bottom` means empty.
    stack: [u64; RETSTACK_SIZE + 1],
    top: u8,
    bottom: u8,
}

impl Default for RetStack {
    fn default() -> Self {
        Self::new()
    }
}

const LAST: u8 = RETSTACK_SIZE as u8;

impl RetStack {
    /// An empty stack.
    pub const fn new() -> Self {
        Self {
            stack: [0; RETSTACK_SIZE + 1],
            top: 0,
            bottom: 0,
        }
    }

    /// Drops all entries.
    pub fn clear(&mut self) {
        self.top = 0;
        self.bottom = 0;
    }

    /// Whether there is nothing to pop.
    pub fn is_empty(&self) -> bool {
        self.top == self.bottom
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        (usize::from(self.top) + RETSTACK_SIZE + 1 - usize::from(self.bottom)) % (RETSTACK_SIZE + 1)
    }

    /// Pushes a return address, dropping the oldest one when full.
    #[inline]
    pub fn push(&mut self, ip: u64) {
        self.stack[usize::from(self.top)] = ip;
        self.top = if self.top == LAST { 0 } else { self.top + 1 };
        if self.top == self.bottom {
            self.bottom = if self.bottom == LAST {
                0
            } else {
                self.bottom + 1
            };
        }
    }

    /// What pushing an address and popping it right away leaves behind: on a full
    /// stack the push dropped the oldest entry, so that one is gone; otherwise
    /// nothing changes. (A call whose return is the next branch.)
    #[inline]
    pub fn push_pop(&mut self) {
        // Full: the slot after the top is the bottom.
        let next = if self.top == LAST { 0 } else { self.top + 1 };
        if next == self.bottom {
            self.bottom = if self.bottom == LAST {
                0
            } else {
                self.bottom + 1
            };
        }
    }

    /// Pops the youngest return address; [`ErrorCode::RetstackEmpty`] if there is none.
    #[inline]
    pub fn pop(&mut self) -> Result<u64, ErrorCode> {
        if self.top == self.bottom {
            return Err(ErrorCode::RetstackEmpty);
        }
        self.top = if self.top == 0 { LAST } else { self.top - 1 };
        Ok(self.stack[usize::from(self.top)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifo_order() {
        let mut s = RetStack::new();
        assert!(s.is_empty());
        assert_eq!(s.pop(), Err(ErrorCode::RetstackEmpty));
        s.push(1);
        s.push(2);
        assert_eq!(s.len(), 2);
        assert_eq!(s.pop(), Ok(2));
        assert_eq!(s.pop(), Ok(1));
        assert_eq!(s.pop(), Err(ErrorCode::RetstackEmpty));
    }

    #[test]
    fn full_stack_drops_oldest() {
        let mut s = RetStack::new();
        for i in 0..(RETSTACK_SIZE as u64 + 10) {
            s.push(i);
            assert!(s.len() <= RETSTACK_SIZE);
        }
        assert_eq!(s.len(), RETSTACK_SIZE);
        for i in (10..RETSTACK_SIZE as u64 + 10).rev() {
            assert_eq!(s.pop(), Ok(i));
        }
        assert_eq!(s.pop(), Err(ErrorCode::RetstackEmpty));
    }

    #[test]
    fn push_pop_is_push_then_pop() {
        // At every fill level (empty to full, and wrapped around the ring).
        for start in 0..3 * RETSTACK_SIZE as u64 {
            let mut a = RetStack::new();
            for i in 0..start {
                a.push(i);
                if i % 3 == 0 {
                    let _ = a.pop();
                }
            }
            let mut b = a.clone();
            a.push(u64::MAX);
            assert_eq!(a.pop(), Ok(u64::MAX));
            b.push_pop();
            assert_eq!(a.len(), b.len(), "after {start}");
            while !a.is_empty() {
                assert_eq!(a.pop(), b.pop());
            }
            assert!(b.is_empty());
        }
    }

    #[test]
    fn wraps_around_many_times() {
        let mut s = RetStack::new();
        for round in 0..500u64 {
            s.push(round);
            s.push(round + 1000);
            assert_eq!(s.pop(), Ok(round + 1000));
        }
        // Full after each pair of pushes; one popped again.
        assert_eq!(s.len(), RETSTACK_SIZE - 1);
        assert_eq!(s.pop(), Ok(499));
        s.clear();
        assert!(s.is_empty());
    }
}
