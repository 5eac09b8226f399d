//! The query decoder: libipt's classic `pt_qry` API on top of the [event
//! decoder](crate::event::EventDecoder).
//!
//! A flow decoder walking the program asks the trace, at each conditional branch,
//! whether it was taken ([`QueryDecoder::cond_branch`]), and at each indirect branch,
//! where it went ([`QueryDecoder::indirect_branch`]). Whenever [`Status::event_pending`]
//! says so, it first takes the pending events ([`QueryDecoder::event`]).

use crate::config::Config;
pub use crate::error::Status;
use crate::error::{DecodeError, ErrorCode};
use crate::event::{Event, EventDecoder, EventKind, Options, Timestamp};
use crate::time::Time;

/// Conditional-branch results not yet asked for, at most 64.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TntCache {
    bits: u64,
    /// The bit to answer next; zero when empty.
    index: u64,
}

impl TntCache {
    fn is_empty(&self) -> bool {
        self.index == 0
    }

    fn query(&mut self) -> Option<bool> {
        if self.index == 0 {
            return None;
        }
        let taken = self.bits & self.index != 0;
        self.index >>= 1;
        Some(taken)
    }

    /// Append `size` results (oldest in bit `size - 1`).
    fn add(&mut self, bits: u64, size: u8) -> Result<(), ErrorCode> {
        if size == 0 {
            return Ok(());
        }
        if size > 64 {
            return Err(ErrorCode::Overflow);
        }
        let index = if self.index != 0 {
            // The oldest pending result must stay inside 64 bits.
            if self.index.leading_zeros() < size as u32 {
                return Err(ErrorCode::Overflow);
            }
            self.index << size
        } else {
            1u64 << (size - 1)
        };
        let mask = if size == 64 {
            u64::MAX
        } else {
            (1u64 << size) - 1
        };
        self.index = index;
        self.bits = self.bits.checked_shl(size as u32).unwrap_or(0) | (bits & mask);
        Ok(())
    }
}

/// The query decoder.
#[derive(Clone, Debug)]
pub struct QueryDecoder<'a> {
    evdec: EventDecoder<'a>,
    tnt: TntCache,
    /// The time at the last query (before reading ahead to the next event).
    last_time: Time,
    /// The next event, or the error the event decoder reported instead.
    event: Result<Event, DecodeError>,
}

const NOSYNC: DecodeError = DecodeError {
    code: ErrorCode::NoSync,
    offset: 0,
};

fn is_pending(ev: &Event) -> bool {
    !matches!(ev.kind, EventKind::Tnt { .. } | EventKind::Tip { .. })
}

impl<'a> QueryDecoder<'a> {
    /// A query decoder for `trace`; synchronize before querying.
    pub fn new(trace: &'a [u8], config: &Config, options: Options) -> Self {
        Self {
            evdec: EventDecoder::new(trace, config, options),
            tnt: TntCache::default(),
            last_time: Time::new(),
            event: Err(NOSYNC),
        }
    }

    fn reset(&mut self) {
        self.tnt = TntCache::default();
        self.last_time = Time::new();
        self.event = Err(NOSYNC);
    }

    /// Synchronize at the next PSB. Returns the status and, if tracing is enabled
    /// there, the IP where it starts (otherwise `ip_suppressed` is set).
    pub fn sync_forward(&mut self) -> Result<(Status, Option<u64>), DecodeError> {
        self.reset();
        self.evdec.sync_forward()?;
        self.start()
    }

    /// Synchronize at the last PSB before the current position (the end of the trace
    /// at first). Returns as [`sync_forward`](Self::sync_forward).
    pub fn sync_backward(&mut self) -> Result<(Status, Option<u64>), DecodeError> {
        let len = self.evdec.buffer().len() as u64;
        let start = self.evdec.pos().unwrap_or(len);
        let mut sync = start;
        loop {
            self.reset();
            loop {
                self.evdec.sync_backward()?;
                if self.evdec.pos().unwrap_or(len) < sync {
                    break;
                }
            }
            sync = self.evdec.pos().unwrap_or(len);
            match self.start() {
                Ok(r) => {
                    if self.evdec.pos().unwrap_or(len) < start {
                        return Ok(r);
                    }
                }
                Err(e) if e.code == ErrorCode::Eos => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Synchronize at `offset`, which must hold a PSB.
    pub fn sync_set(&mut self, offset: u64) -> Result<(Status, Option<u64>), DecodeError> {
        self.reset();
        self.evdec.sync_set(offset)?;
        self.start()
    }

    /// Look at the PSB+ status updates (without consuming them) for the start IP.
    fn start(&mut self) -> Result<(Status, Option<u64>), DecodeError> {
        let mut peek = self.evdec.clone();
        let mut status = Status {
            ip_suppressed: true,
            ..Status::default()
        };
        let mut ip = None;
        let pos = self.evdec.pos();
        loop {
            if peek.pos() != pos {
                break;
            }
            let ev = match peek.next() {
                Ok(ev) => ev,
                Err(e) if e.code == ErrorCode::Eos => break,
                Err(e) => return Err(e),
            };
            if !ev.status_update {
                break;
            }
            if let EventKind::Enabled { ip: start, .. } = ev.kind {
                status.ip_suppressed = false;
                ip = Some(start);
                break;
            }
        }
        self.fetch_event();
        let flags = self.status();
        status.event_pending = flags.event_pending;
        status.eos = flags.eos;
        Ok((status, ip))
    }

    fn fetch_event(&mut self) {
        self.event = self.evdec.next();
    }

    /// The status flags at this point.
    pub fn status(&self) -> Status {
        let mut s = Status::default();
        if self.tnt.is_empty() {
            match &self.event {
                Err(e) if e.code == ErrorCode::Eos => s.eos = true,
                // An error is pending, too: the next `event()` reports it (libipt's way).
                Err(_) => s.event_pending = true,
                Ok(ev) if is_pending(ev) => s.event_pending = true,
                Ok(_) => {}
            }
        }
        s
    }

    /// Move a TNT event into the cache.
    fn cache_tnt(&mut self) -> Result<(), DecodeError> {
        let ev = self.event?;
        if let EventKind::Tnt { bits, size } = ev.kind {
            self.tnt.add(bits, size).map_err(|code| DecodeError {
                code,
                offset: ev.offset,
            })?;
            self.fetch_event();
        }
        Ok(())
    }

    /// Whether the next conditional branch was taken.
    ///
    /// `BadQuery` if the trace has no conditional branch result next (take the pending
    /// events first, or the trace expects an indirect branch).
    pub fn cond_branch(&mut self) -> Result<(bool, Status), DecodeError> {
        let taken = match self.tnt.query() {
            Some(t) => t,
            None => {
                self.last_time = *self.evdec.time();
                self.cache_tnt()?;
                match self.tnt.query() {
                    Some(t) => t,
                    None => {
                        self.event?;
                        return Err(self.bad_query());
                    }
                }
            }
        };
        Ok((taken, self.status()))
    }

    fn bad_query(&self) -> DecodeError {
        let offset = match &self.event {
            Ok(ev) => ev.offset,
            Err(e) => e.offset,
        };
        DecodeError {
            code: ErrorCode::BadQuery,
            offset,
        }
    }

    /// Where the next indirect branch went; `None` if its IP is suppressed (also
    /// flagged in the status).
    pub fn indirect_branch(&mut self) -> Result<(Option<u64>, Status), DecodeError> {
        let mut ev = self.event?;
        if !matches!(ev.kind, EventKind::Tip { .. }) {
            self.cache_tnt()?;
            ev = self.event?;
            if !matches!(ev.kind, EventKind::Tip { .. }) {
                return Err(self.bad_query());
            }
        }
        let EventKind::Tip { ip } = ev.kind else {
            return Err(self.bad_query());
        };
        let target = (!ev.ip_suppressed).then_some(ip);
        self.last_time = *self.evdec.time();
        self.fetch_event();
        let mut status = self.status();
        status.ip_suppressed = ev.ip_suppressed;
        Ok((target, status))
    }

    /// The pending event. `BadQuery` if there is none (branch results come first).
    pub fn event(&mut self) -> Result<(Event, Status), DecodeError> {
        if !self.tnt.is_empty() {
            return Err(self.bad_query());
        }
        let ev = self.event?;
        if !is_pending(&ev) {
            return Err(self.bad_query());
        }
        self.last_time = *self.evdec.time();
        self.fetch_event();
        Ok((ev, self.status()))
    }

    /// The time at the last query (before the decoder read ahead to the next event):
    /// the TSC estimate, `None` before the first TSC, and the MTC/CYC packets that could
    /// not be used.
    pub fn time(&self) -> Timestamp {
        let (lost_mtc, lost_cyc) = self.last_time.lost();
        Timestamp {
            tsc: self.last_time.query_tsc().ok(),
            lost_mtc,
            lost_cyc,
        }
    }

    /// The core:bus ratio at the last query; `NoCbr` before the first CBR.
    pub fn core_bus_ratio(&self) -> Result<u8, ErrorCode> {
        self.last_time.query_cbr()
    }

    /// Offset of the next packet the event decoder looks at.
    pub fn offset(&self) -> Result<u64, DecodeError> {
        self.evdec.offset()
    }

    /// Offset of the last PSB synchronized at.
    pub fn sync_offset(&self) -> Option<u64> {
        self.evdec.sync_offset()
    }

    /// The event decoder underneath.
    pub fn event_decoder(&self) -> &EventDecoder<'a> {
        &self.evdec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tnt_cache_answers_oldest_first() {
        let mut c = TntCache::default();
        // Three results: taken, not taken, taken (oldest in bit 2).
        c.add(0b101, 3).unwrap();
        c.add(0b0, 1).unwrap();
        let got: Vec<_> = core::iter::from_fn(|| c.query()).collect();
        assert_eq!(got, [true, false, true, false]);
        assert!(c.is_empty());
    }

    #[test]
    fn tnt_cache_refuses_more_than_64() {
        let mut c = TntCache::default();
        c.add(0, 47).unwrap();
        c.add(0, 17).unwrap();
        assert_eq!(c.add(0, 1), Err(ErrorCode::Overflow));
    }

    #[test]
    fn status_bits_match_libipt() {
        let s = Status {
            event_pending: true,
            ip_suppressed: true,
            eos: true,
        };
        assert_eq!(s.bits(), 7);
        assert_eq!(
            Status {
                ip_suppressed: true,
                ..Status::default()
            }
            .bits(),
            2
        );
    }
}
