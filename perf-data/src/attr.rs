//! `perf_event_attr` (every size perf writes, VER0 = 64 to VER7 = 128 bytes), its
//! sample_type, read_format and flag bits, and the events of a file (attr + ids + name).

use crate::bytes::{Cursor, Put};
use crate::error::{Error, ErrorKind, Result};

/// `PERF_ATTR_SIZE_VER0`: the smallest attr.
pub const ATTR_SIZE_VER0: u32 = 64;
/// The size of the attr perf 6.1 writes (`PERF_ATTR_SIZE_VER7`, with sig_data).
pub const ATTR_SIZE: u32 = 128;
/// `PERF_ATTR_SIZE_VER8` (config3, perf 6.3 on): the largest attr whose fields this
/// layer knows; larger attrs are read with the rest ignored.
pub const ATTR_SIZE_VER8: u32 = 136;

/// `perf_event_attr.type` values.
pub mod attr_type {
    /// PERF_TYPE_HARDWARE.
    pub const HARDWARE: u32 = 0;
    /// PERF_TYPE_SOFTWARE.
    pub const SOFTWARE: u32 = 1;
    /// PERF_TYPE_TRACEPOINT.
    pub const TRACEPOINT: u32 = 2;
    /// PERF_TYPE_HW_CACHE.
    pub const HW_CACHE: u32 = 3;
    /// PERF_TYPE_RAW.
    pub const RAW: u32 = 4;
    /// PERF_TYPE_BREAKPOINT.
    pub const BREAKPOINT: u32 = 5;
}

/// Software event configs (`perf_event_attr.config` with type SOFTWARE).
pub mod sw_config {
    /// PERF_COUNT_SW_CPU_CLOCK.
    pub const CPU_CLOCK: u64 = 0;
    /// PERF_COUNT_SW_TASK_CLOCK.
    pub const TASK_CLOCK: u64 = 1;
    /// PERF_COUNT_SW_DUMMY: the event perf adds to track side-band records.
    pub const DUMMY: u64 = 9;
}

/// `PERF_SAMPLE_*` bits of `sample_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SampleType(pub u64);

#[allow(missing_docs)]
impl SampleType {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const READ: u64 = 1 << 4;
    pub const CALLCHAIN: u64 = 1 << 5;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const RAW: u64 = 1 << 10;
    pub const BRANCH_STACK: u64 = 1 << 11;
    pub const REGS_USER: u64 = 1 << 12;
    pub const STACK_USER: u64 = 1 << 13;
    pub const WEIGHT: u64 = 1 << 14;
    pub const DATA_SRC: u64 = 1 << 15;
    pub const IDENTIFIER: u64 = 1 << 16;
    pub const TRANSACTION: u64 = 1 << 17;
    pub const REGS_INTR: u64 = 1 << 18;
    pub const PHYS_ADDR: u64 = 1 << 19;
    pub const AUX: u64 = 1 << 20;
    pub const CGROUP: u64 = 1 << 21;
    pub const DATA_PAGE_SIZE: u64 = 1 << 22;
    pub const CODE_PAGE_SIZE: u64 = 1 << 23;
    pub const WEIGHT_STRUCT: u64 = 1 << 24;

    /// The bits that make up the sample_id trailer of non-sample records.
    pub const ID_ALL_BITS: u64 =
        Self::TID | Self::TIME | Self::ID | Self::STREAM_ID | Self::CPU | Self::IDENTIFIER;

    /// Whether every bit of `bits` is set.
    pub fn has(self, bits: u64) -> bool {
        self.0 & bits == bits
    }

    /// Bytes of the sample_id trailer this sample_type gives non-sample records.
    pub fn id_trailer_size(self) -> usize {
        (self.0 & Self::ID_ALL_BITS).count_ones() as usize * 8
    }

    /// Index (in u64s after the record header) of the id in a SAMPLE record (perf's id_pos).
    pub fn id_pos(self) -> Option<usize> {
        if self.has(Self::IDENTIFIER) {
            return Some(0);
        }
        if !self.has(Self::ID) {
            return None;
        }
        Some(
            [Self::IP, Self::TID, Self::TIME, Self::ADDR]
                .iter()
                .filter(|&&b| self.has(b))
                .count(),
        )
    }

    /// Position (in u64s from the record's end) of the id in other records' trailer
    /// (perf's is_pos).
    pub fn is_pos(self) -> Option<usize> {
        if self.has(Self::IDENTIFIER) {
            return Some(1);
        }
        if !self.has(Self::ID) {
            return None;
        }
        Some(1 + self.has(Self::CPU) as usize + self.has(Self::STREAM_ID) as usize)
    }
}

/// `PERF_FORMAT_*` bits of `read_format`.
#[allow(missing_docs)]
pub mod read_format {
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    pub const ID: u64 = 1 << 2;
    pub const GROUP: u64 = 1 << 3;
    pub const LOST: u64 = 1 << 4;
}

/// The flag bits of `perf_event_attr` (the bitfield after read_format).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AttrFlags(pub u64);

#[allow(missing_docs)]
impl AttrFlags {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const PINNED: u64 = 1 << 2;
    pub const EXCLUSIVE: u64 = 1 << 3;
    pub const EXCLUDE_USER: u64 = 1 << 4;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const EXCLUDE_IDLE: u64 = 1 << 7;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const INHERIT_STAT: u64 = 1 << 11;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    /// Two bits: use [`AttrFlags::precise_ip`].
    pub const PRECISE_IP_MASK: u64 = 3 << 15;
    pub const MMAP_DATA: u64 = 1 << 17;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const EXCLUDE_HOST: u64 = 1 << 19;
    pub const EXCLUDE_GUEST: u64 = 1 << 20;
    pub const EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
    pub const EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
    pub const WRITE_BACKWARD: u64 = 1 << 27;
    pub const NAMESPACES: u64 = 1 << 28;
    pub const KSYMBOL: u64 = 1 << 29;
    pub const BPF_EVENT: u64 = 1 << 30;
    pub const AUX_OUTPUT: u64 = 1 << 31;
    pub const CGROUP: u64 = 1 << 32;
    pub const TEXT_POKE: u64 = 1 << 33;
    pub const BUILD_ID: u64 = 1 << 34;
    pub const INHERIT_THREAD: u64 = 1 << 35;
    pub const REMOVE_ON_EXEC: u64 = 1 << 36;
    pub const SIGTRAP: u64 = 1 << 37;

    /// Whether every bit of `bits` is set.
    pub fn has(self, bits: u64) -> bool {
        self.0 & bits == bits
    }

    /// The precise_ip skid constraint (0-3).
    pub fn precise_ip(self) -> u8 {
        ((self.0 & Self::PRECISE_IP_MASK) >> 15) as u8
    }
}

/// `PERF_SAMPLE_BRANCH_HW_INDEX` of branch_sample_type: branch stacks carry hw_idx.
pub const BRANCH_HW_INDEX: u64 = 1 << 17;

/// `struct perf_event_attr`, every field of perf 6.1's (fields past a smaller `size`
/// read as zero, as the kernel treats them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct EventAttr {
    /// PMU type (`attr_type`, or a dynamic PMU's type such as intel_pt's).
    pub type_: u32,
    /// The attr's size field as stored (64..=128 for the sizes perf writes).
    pub size: u32,
    /// Event config.
    pub config: u64,
    /// sample_period, or sample_freq with [`AttrFlags::FREQ`].
    pub sample_period: u64,
    /// What SAMPLE records carry (and the sample_id trailer of the others).
    pub sample_type: SampleType,
    /// What READ values carry.
    pub read_format: u64,
    /// The flag bits.
    pub flags: AttrFlags,
    /// wakeup_events / wakeup_watermark.
    pub wakeup: u32,
    /// bp_type.
    pub bp_type: u32,
    /// config1 (bp_addr, kprobe_func, uprobe_path).
    pub config1: u64,
    /// config2 (bp_len, kprobe_addr, probe_offset).
    pub config2: u64,
    /// branch_sample_type.
    pub branch_sample_type: u64,
    /// sample_regs_user.
    pub sample_regs_user: u64,
    /// sample_stack_user.
    pub sample_stack_user: u32,
    /// clockid.
    pub clockid: i32,
    /// sample_regs_intr.
    pub sample_regs_intr: u64,
    /// aux_watermark.
    pub aux_watermark: u32,
    /// sample_max_stack.
    pub sample_max_stack: u16,
    /// aux_sample_size.
    pub aux_sample_size: u32,
    /// sig_data.
    pub sig_data: u64,
    /// config3 (VER8; perf 6.1 neither writes nor reads it).
    pub config3: u64,
}

impl EventAttr {
    /// Parses an attr from `bytes` (at least its `size` field's worth; `at` is the file
    /// offset, for errors). Sizes from 64 up are accepted; bytes past the fields known
    /// here (136) are ignored.
    pub fn parse(bytes: &[u8], at: u64) -> Result<EventAttr> {
        let mut c = Cursor::new(bytes, at, "perf_event_attr");
        let type_ = c.u32()?;
        let size = c.u32()?;
        let stored = if size == 0 { ATTR_SIZE_VER0 } else { size };
        if stored < ATTR_SIZE_VER0 || stored as usize > bytes.len() {
            return Err(Error::new(
                at,
                ErrorKind::AttrSize {
                    size,
                    room: bytes.len() as u64,
                },
            ));
        }
        // Fields past the stored size read as zero.
        let mut full = [0u8; ATTR_SIZE_VER8 as usize];
        let n = (stored as usize).min(full.len());
        full[..n].copy_from_slice(&bytes[..n]);
        let mut c = Cursor::new(&full[8..], at + 8, "perf_event_attr");
        (|| -> Result<EventAttr> {
            let config = c.u64()?;
            let sample_period = c.u64()?;
            let sample_type = SampleType(c.u64()?);
            let read_format = c.u64()?;
            let flags = AttrFlags(c.u64()?);
            let wakeup = c.u32()?;
            let bp_type = c.u32()?;
            let config1 = c.u64()?;
            let config2 = c.u64()?;
            let branch_sample_type = c.u64()?;
            let sample_regs_user = c.u64()?;
            let sample_stack_user = c.u32()?;
            let clockid = c.u32()? as i32;
            let sample_regs_intr = c.u64()?;
            let aux_watermark = c.u32()?;
            let sample_max_stack = c.u16()?;
            let _reserved2 = c.u16()?;
            let aux_sample_size = c.u32()?;
            let _reserved3 = c.u32()?;
            let sig_data = c.u64()?;
            let config3 = c.u64()?;
            Ok(EventAttr {
                type_,
                size,
                config,
                sample_period,
                sample_type,
                read_format,
                flags,
                wakeup,
                bp_type,
                config1,
                config2,
                branch_sample_type,
                sample_regs_user,
                sample_stack_user,
                clockid,
                sample_regs_intr,
                aux_watermark,
                sample_max_stack,
                aux_sample_size,
                sig_data,
                config3,
            })
        })()
    }

    /// The attr's bytes as stored: `size` bytes (64 for size 0).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ATTR_SIZE as usize);
        v.put_u32(self.type_);
        v.put_u32(self.size);
        v.put_u64(self.config);
        v.put_u64(self.sample_period);
        v.put_u64(self.sample_type.0);
        v.put_u64(self.read_format);
        v.put_u64(self.flags.0);
        v.put_u32(self.wakeup);
        v.put_u32(self.bp_type);
        v.put_u64(self.config1);
        v.put_u64(self.config2);
        v.put_u64(self.branch_sample_type);
        v.put_u64(self.sample_regs_user);
        v.put_u32(self.sample_stack_user);
        v.put_u32(self.clockid as u32);
        v.put_u64(self.sample_regs_intr);
        v.put_u32(self.aux_watermark);
        v.put_u16(self.sample_max_stack);
        v.put_u16(0);
        v.put_u32(self.aux_sample_size);
        v.put_u32(0);
        v.put_u64(self.sig_data);
        v.put_u64(self.config3);
        // Bytes past the fields known here are written as zeros.
        v.resize(self.stored_size(), 0);
        v
    }

    /// Bytes the attr occupies when written: its size (64 for the ABI0 size 0).
    pub fn stored_size(&self) -> usize {
        (self.size as usize).max(ATTR_SIZE_VER0 as usize)
    }

    /// Whether non-sample records carry the sample_id trailer.
    pub fn sample_id_all(&self) -> bool {
        self.flags.has(AttrFlags::SAMPLE_ID_ALL)
    }
}

/// One event of a file: its attr, the ids of its instances (one per cpu/thread it was
/// opened on) and its name (from EVENT_DESC or an EVENT_UPDATE, when known).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct EventDesc {
    /// The attr.
    pub attr: EventAttr,
    /// The instances' ids.
    pub ids: Vec<u64>,
    /// The event's name as perf shows it (e.g. `intel_pt//u`).
    pub name: Option<String>,
}

/// The events of a file, with the lookup perf does from a record to its event.
#[derive(Clone, Debug, Default)]
pub struct EventTable {
    events: Vec<EventDesc>,
    by_id: std::collections::HashMap<u64, usize>,
}

impl EventTable {
    /// A table of `events`.
    pub fn new(events: Vec<EventDesc>) -> Self {
        let mut t = EventTable::default();
        for e in events {
            t.push(e);
        }
        t
    }

    /// Adds an event (pipe mode's HEADER_ATTR).
    pub fn push(&mut self, e: EventDesc) {
        let i = self.events.len();
        for &id in &e.ids {
            self.by_id.entry(id).or_insert(i);
        }
        self.events.push(e);
    }

    /// The events in file order.
    pub fn events(&self) -> &[EventDesc] {
        &self.events
    }

    pub(crate) fn events_mut(&mut self) -> &mut [EventDesc] {
        &mut self.events
    }

    /// The index of the event whose instance has `id`.
    pub fn index_of_id(&self, id: u64) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The index of the event a record (`ty`, its body after the 8-byte header) belongs
    /// to, as perf's evlist__event2evsel finds it: the only event; the first one for
    /// records without a trailer and for synthesized ones (id 0); else by id.
    pub fn event_for(&self, ty: u32, body: &[u8], offset: u64) -> Result<usize> {
        let first = self
            .events
            .first()
            .ok_or(Error::new(offset, ErrorKind::NoAttr))?;
        if self.events.len() == 1 {
            return Ok(0);
        }
        let st = first.attr.sample_type;
        let n = body.len() / 8;
        let word = |i: usize| -> u64 {
            let b = &body[i * 8..i * 8 + 8];
            u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
        };
        let id = if ty == crate::records::record_type::SAMPLE {
            match st.id_pos() {
                Some(p) if p < n => word(p),
                _ => return Ok(0),
            }
        } else {
            if !first.attr.sample_id_all() {
                return Ok(0);
            }
            match st.is_pos() {
                Some(p) if p <= n => word(n - p),
                _ => return Ok(0),
            }
        };
        if id == 0 {
            return Ok(0);
        }
        let i = self
            .index_of_id(id)
            .ok_or(Error::new(offset, ErrorKind::UnknownId { id }))?;
        // perf refuses files whose events put the id in different places ("non matching
        // sample_type"): the id read with the first event's layout would not be this
        // event's.
        let other = self.events[i].attr.sample_type;
        let same = if ty == crate::records::record_type::SAMPLE {
            other.id_pos() == st.id_pos()
        } else {
            other.is_pos() == st.is_pos()
                && self.events[i].attr.sample_id_all() == first.attr.sample_id_all()
        };
        if !same {
            return Err(Error::new(
                offset,
                ErrorKind::Invalid(
                    "the events disagree on where records carry their id (non matching sample_type)",
                ),
            ));
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attr_size_perf_writes_parses() {
        let full = EventAttr {
            type_: 8,
            size: ATTR_SIZE,
            config: 0x300e601,
            sample_period: 1,
            sample_type: SampleType(0x10087),
            sig_data: 9,
            aux_sample_size: 7,
            clockid: -1,
            ..Default::default()
        };
        for size in [64u32, 72, 80, 96, 104, 112, 120, 128] {
            let mut a = full;
            a.size = size;
            let b = a.to_bytes();
            assert_eq!(b.len(), size as usize);
            let back = EventAttr::parse(&b, 0).unwrap();
            assert_eq!(back.size, size);
            assert_eq!(
                (back.config, back.sample_type),
                (full.config, full.sample_type)
            );
            // Fields past the size read as zero.
            assert_eq!(back.sig_data, if size >= 128 { 9 } else { 0 });
            assert_eq!(back.clockid, if size >= 96 { -1 } else { 0 });
        }
        // Newer perf's VER8 (config3), and a size past what is known (read, rest ignored).
        let v8 = EventAttr {
            size: ATTR_SIZE_VER8,
            config3: 3,
            ..full
        };
        assert_eq!(EventAttr::parse(&v8.to_bytes(), 0).unwrap(), v8);
        let big = EventAttr { size: 160, ..v8 };
        let b = big.to_bytes();
        assert_eq!(b.len(), 160);
        assert_eq!(EventAttr::parse(&b, 0).unwrap(), big);
        let e = EventAttr::parse(&full.to_bytes()[..100], 40).unwrap_err();
        assert!(matches!(
            e.kind,
            ErrorKind::AttrSize {
                size: 128,
                room: 100
            }
        ));
        // Size 0: the ABI0 attr.
        let mut a = full;
        a.size = 0;
        let b = a.to_bytes();
        assert_eq!(EventAttr::parse(&b[..64], 0).unwrap().config, full.config);
    }

    #[test]
    fn id_positions_are_perfs() {
        let st = SampleType(SampleType::IP | SampleType::TID | SampleType::TIME | SampleType::ID);
        assert_eq!((st.id_pos(), st.is_pos()), (Some(3), Some(1)));
        let st = SampleType(SampleType::ID | SampleType::CPU | SampleType::STREAM_ID);
        assert_eq!((st.id_pos(), st.is_pos()), (Some(0), Some(3)));
        let st = SampleType(SampleType::IP | SampleType::IDENTIFIER | SampleType::ID);
        assert_eq!((st.id_pos(), st.is_pos()), (Some(0), Some(1)));
        assert_eq!(SampleType(SampleType::IP).id_pos(), None);
        assert_eq!(SampleType(0x1ff_ffff).id_trailer_size(), 6 * 8);
    }
}
