//! Output schemes: ToPA tables (Table of Physical Addresses) and single-range output.

use crate::caps::Capabilities;
use crate::msr::{RtitOutputBase, RtitOutputMaskPtrs};

/// Size of a ToPA output region: 4 KiB << n, n = 0..15 (4 KiB … 128 MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopaSize(u8);

impl TopaSize {
    /// 4 KiB.
    pub const SIZE_4K: TopaSize = TopaSize(0);

    /// From the 4-bit Size encoding; None above 15.
    pub const fn from_encoding(n: u8) -> Option<Self> {
        if n <= 15 {
            Some(TopaSize(n))
        } else {
            None
        }
    }

    /// From a byte count; None unless it is 4 KiB << n with n ≤ 15.
    pub const fn from_bytes(bytes: u64) -> Option<Self> {
        if bytes < 4096 || !bytes.is_power_of_two() {
            return None;
        }
        let n = bytes.trailing_zeros() - 12;
        if n <= 15 {
            Some(TopaSize(n as u8))
        } else {
            None
        }
    }

    /// The 4-bit encoding.
    pub const fn encoding(self) -> u8 {
        self.0
    }

    /// The region size in bytes.
    pub const fn bytes(self) -> u64 {
        4096u64 << self.0
    }
}

/// One 64-bit ToPA entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TopaEntry(pub u64);

impl TopaEntry {
    /// Reserved bits below 12: 1, 3, 5, 11:10.
    pub const RESERVED_LOW: u64 = (1 << 1) | (1 << 3) | (1 << 5) | (0b11 << 10);

    /// An output entry: region at `base` of `size`, with INT/STOP.
    pub fn output(base: u64, size: TopaSize, int: bool, stop: bool) -> Self {
        let mut e = TopaEntry(0);
        e.set_base(base).set_size(size).set_int(int).set_stop(stop);
        e
    }

    /// An END entry linking to the table at `next_table`.
    pub fn end(next_table: u64) -> Self {
        let mut e = TopaEntry(0);
        e.set_base(next_table).set_end(true);
        e
    }

    /// Bit 0 END: this entry links to the next table.
    pub const fn end_bit(self) -> bool {
        self.0 & 1 != 0
    }
    /// Sets END.
    pub fn set_end(&mut self, v: bool) -> &mut Self {
        self.0 = (self.0 & !1) | v as u64;
        self
    }
    /// Bit 2 INT: PMI when the region fills.
    pub const fn int(self) -> bool {
        self.0 >> 2 & 1 != 0
    }
    /// Sets INT.
    pub fn set_int(&mut self, v: bool) -> &mut Self {
        self.0 = (self.0 & !(1 << 2)) | (v as u64) << 2;
        self
    }
    /// Bit 4 STOP: stop tracing when the region fills.
    pub const fn stop(self) -> bool {
        self.0 >> 4 & 1 != 0
    }
    /// Sets STOP.
    pub fn set_stop(&mut self, v: bool) -> &mut Self {
        self.0 = (self.0 & !(1 << 4)) | (v as u64) << 4;
        self
    }
    /// Bits 9:6 Size.
    pub const fn size(self) -> TopaSize {
        TopaSize((self.0 >> 6 & 0xf) as u8)
    }
    /// Sets Size.
    pub fn set_size(&mut self, s: TopaSize) -> &mut Self {
        self.0 = (self.0 & !(0xf << 6)) | u64::from(s.encoding()) << 6;
        self
    }
    /// Bits MAXPHYADDR−1:12 Base, as an address.
    pub const fn base(self) -> u64 {
        self.0 & !0xfff
    }
    /// Sets Base (bits 11:0 of `addr` are dropped).
    pub fn set_base(&mut self, addr: u64) -> &mut Self {
        self.0 = (self.0 & 0xfff) | (addr & !0xfff);
        self
    }
    /// Reserved bits for a MAXPHYADDR that are set.
    pub const fn reserved_bits(self, maxphyaddr: u8) -> u64 {
        let high = if maxphyaddr >= 64 {
            0
        } else {
            !((1u64 << maxphyaddr) - 1)
        };
        self.0 & (Self::RESERVED_LOW | high)
    }
}

/// A malformed ToPA table or single-range setup (hardware: Status.Error, or #GP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// ToPA=1 without CPUID 14H ECX\[0\].
    #[error("ToPA output is not supported (CPUID 14H ECX[0] = 0)")]
    TopaNotSupported,
    /// ToPA=0 without CPUID 14H ECX\[2\].
    #[error("single-range output is not supported (CPUID 14H ECX[2] = 0)")]
    SingleRangeNotSupported,
    /// The table has no entries.
    #[error("empty ToPA table")]
    EmptyTable,
    /// The table base is not 4 KiB aligned.
    #[error("ToPA table base {base:#x} is not 4 KiB aligned")]
    TableMisaligned {
        /// The base.
        base: u64,
    },
    /// An entry sets reserved bits.
    #[error("ToPA entry {index}: reserved bits {bits:#x} set")]
    ReservedBits {
        /// Entry index.
        index: usize,
        /// The offending bits.
        bits: u64,
    },
    /// An output region base is not aligned to its size.
    #[error("ToPA entry {index}: region base {base:#x} not aligned to its size {size:#x}")]
    RegionMisaligned {
        /// Entry index.
        index: usize,
        /// Region base.
        base: u64,
        /// Region size.
        size: u64,
    },
    /// The last entry is neither END nor STOP, so output would run past the table.
    #[error("ToPA table ends at entry {index} without END or STOP")]
    RunsOffTable {
        /// Index of the last entry.
        index: usize,
    },
    /// Without CPUID 14H ECX\[1\] a table holds one output entry then an END to itself.
    #[error("ToPA tables with multiple output entries are not supported (CPUID 14H ECX[1] = 0)")]
    MultipleEntriesNotSupported,
    /// Single range: the size is not a power of two in 128 B … 4 GiB.
    #[error("single-range size {size:#x} is not a power of two in 128 B..4 GiB")]
    RangeSize {
        /// The size.
        size: u64,
    },
    /// Single range: the base is not aligned to the size.
    #[error("single-range base {base:#x} not aligned to size {size:#x}")]
    RangeMisaligned {
        /// The base.
        base: u64,
        /// The size.
        size: u64,
    },
    /// The output pointer names an entry past the end of its table.
    #[error("output pointer at entry {index} is past the end of table {table:#x}")]
    EntryOutOfRange {
        /// Table base.
        table: u64,
        /// Entry index.
        index: usize,
    },
    /// An END entry points at a table that is not known.
    #[error("END entry points at unknown table {table:#x}")]
    UnknownTable {
        /// The table base.
        table: u64,
    },
    /// END entries form a loop with no output region in it.
    #[error("END entries loop without any output region")]
    EndLoop,
    /// An address is above MAXPHYADDR.
    #[error("physical address {addr:#x} is above MAXPHYADDR")]
    AddressTooHigh {
        /// The address.
        addr: u64,
    },
}

/// One ToPA table at a physical address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopaTable {
    /// Physical address of the table (4 KiB aligned).
    pub base: u64,
    /// The entries, in order.
    pub entries: Vec<TopaEntry>,
}

impl TopaTable {
    /// A ring: output regions of `region` size at `regions` bases, INT on the
    /// last one, then END back to this table.
    pub fn ring(base: u64, regions: &[u64], region: TopaSize, int_on_last: bool) -> Self {
        let mut entries: Vec<TopaEntry> = regions
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                TopaEntry::output(r, region, int_on_last && i + 1 == regions.len(), false)
            })
            .collect();
        entries.push(TopaEntry::end(base));
        TopaTable { base, entries }
    }

    /// Checks the table against the capabilities and MAXPHYADDR.
    pub fn validate(&self, caps: &Capabilities, maxphyaddr: u8) -> Result<(), OutputError> {
        if !caps.topa_output {
            return Err(OutputError::TopaNotSupported);
        }
        if self.base & 0xfff != 0 {
            return Err(OutputError::TableMisaligned { base: self.base });
        }
        if maxphyaddr < 64 && self.base >> maxphyaddr != 0 {
            return Err(OutputError::AddressTooHigh { addr: self.base });
        }
        let Some(last) = self.entries.last() else {
            return Err(OutputError::EmptyTable);
        };
        for (index, e) in self.entries.iter().enumerate() {
            let bits = e.reserved_bits(maxphyaddr);
            if bits != 0 {
                return Err(OutputError::ReservedBits { index, bits });
            }
            if !e.end_bit() {
                let size = e.size().bytes();
                if e.base() & (size - 1) != 0 {
                    return Err(OutputError::RegionMisaligned {
                        index,
                        base: e.base(),
                        size,
                    });
                }
            }
        }
        if !last.end_bit() && !last.stop() {
            return Err(OutputError::RunsOffTable {
                index: self.entries.len() - 1,
            });
        }
        if !caps.topa_multiple_entries {
            let single = self.entries.len() == 2
                && !self.entries[0].end_bit()
                && self.entries[1].end_bit()
                && self.entries[1].base() == self.base;
            if !single {
                return Err(OutputError::MultipleEntriesNotSupported);
            }
        }
        Ok(())
    }

    /// Total bytes of the output regions.
    pub fn output_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| !e.end_bit())
            .map(|e| e.size().bytes())
            .sum()
    }

    /// OUTPUT_BASE/OUTPUT_MASK_PTRS pointing at entry 0, offset 0.
    pub fn initial_msrs(&self) -> (RtitOutputBase, RtitOutputMaskPtrs) {
        let mut base = RtitOutputBase(0);
        base.set_base(self.base);
        let mut mask = RtitOutputMaskPtrs(0);
        mask.set_lower_mask(0x7f);
        (base, mask)
    }
}

/// Single-range output: one physically contiguous power-of-two region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SingleRange {
    /// Physical base, aligned to `size`.
    pub base: u64,
    /// Size in bytes: a power of two, at least 128.
    pub size: u64,
}

impl SingleRange {
    /// Checks the range against the capabilities and MAXPHYADDR.
    pub fn validate(&self, caps: &Capabilities, maxphyaddr: u8) -> Result<(), OutputError> {
        if !caps.single_range_output {
            return Err(OutputError::SingleRangeNotSupported);
        }
        if self.size < 128 || !self.size.is_power_of_two() || self.size > 1 << 32 {
            return Err(OutputError::RangeSize { size: self.size });
        }
        if self.base & (self.size - 1) != 0 {
            return Err(OutputError::RangeMisaligned {
                base: self.base,
                size: self.size,
            });
        }
        if maxphyaddr < 64 && (self.base + self.size - 1) >> maxphyaddr != 0 {
            return Err(OutputError::AddressTooHigh { addr: self.base });
        }
        Ok(())
    }

    /// OUTPUT_BASE and OUTPUT_MASK_PTRS (MASK\[31:0\] = size − 1, offset 0).
    pub fn to_msrs(&self) -> (RtitOutputBase, RtitOutputMaskPtrs) {
        let mut base = RtitOutputBase(0);
        base.set_base(self.base);
        let mask = RtitOutputMaskPtrs((self.size - 1) & 0xffff_ffff | 0x7f);
        (base, mask)
    }

    /// The range described by the MSRs (offset ignored).
    pub fn from_msrs(base: RtitOutputBase, mask: RtitOutputMaskPtrs) -> Result<Self, OutputError> {
        let size = u64::from(mask.size_mask()) + 1;
        if mask.lower_mask() != 0x7f || !size.is_power_of_two() {
            return Err(OutputError::RangeSize { size });
        }
        Ok(SingleRange {
            base: base.base(),
            size,
        })
    }
}

/// The ToPA output pointer: IA32_RTIT_OUTPUT_BASE (table) and
/// IA32_RTIT_OUTPUT_MASK_PTRS (entry index, offset in the region).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopaCursor {
    /// Physical base of the current table.
    pub table: u64,
    /// Index of the current entry.
    pub index: usize,
    /// Offset within the current output region.
    pub offset: u64,
}

/// What happened while writing output through ToPA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopaEvent {
    /// A region with INT filled: a PMI is raised (tracing continues).
    Pmi {
        /// Table of the entry.
        table: u64,
        /// The entry.
        index: usize,
    },
    /// A region with STOP filled: Status.Stopped is set; `dropped` bytes were lost.
    Stopped {
        /// Bytes that did not fit.
        dropped: u64,
    },
}

impl TopaCursor {
    /// The cursor the MSRs describe.
    pub fn from_msrs(base: RtitOutputBase, mask: RtitOutputMaskPtrs) -> Self {
        TopaCursor {
            table: base.base(),
            index: mask.mask_or_table_offset() as usize,
            offset: u64::from(mask.output_offset()),
        }
    }

    /// The MSR values for this cursor.
    pub fn to_msrs(&self) -> (RtitOutputBase, RtitOutputMaskPtrs) {
        let mut base = RtitOutputBase(0);
        base.set_base(self.table);
        let mut mask = RtitOutputMaskPtrs(0);
        mask.set_lower_mask(0x7f)
            .set_mask_or_table_offset(self.index as u32)
            .set_output_offset(self.offset as u32);
        (base, mask)
    }

    /// Writes `len` bytes of output: `write(phys, bytes)` is called for each
    /// piece in order. Full regions move to the next entry, END entries switch
    /// tables (`tables` maps a table base to its table), INT regions raise a
    /// PMI and a full STOP region stops output; the cursor then stays at the
    /// end of that region, as the hardware leaves it.
    pub fn write<'t>(
        &mut self,
        tables: &dyn Fn(u64) -> Option<&'t TopaTable>,
        data: &[u8],
        write: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<Vec<TopaEvent>, OutputError> {
        let mut events = Vec::new();
        let mut rest = data;
        let mut ends_in_a_row = 0usize;
        while !rest.is_empty() {
            let table =
                tables(self.table).ok_or(OutputError::UnknownTable { table: self.table })?;
            let entry = *table
                .entries
                .get(self.index)
                .ok_or(OutputError::EntryOutOfRange {
                    table: self.table,
                    index: self.index,
                })?;
            if entry.end_bit() {
                ends_in_a_row += 1;
                // A chain of 64 END entries with no output region between is taken as a loop.
                if ends_in_a_row > 64 {
                    return Err(OutputError::EndLoop);
                }
                self.table = entry.base();
                self.index = 0;
                self.offset = 0;
                continue;
            }
            ends_in_a_row = 0;
            let size = entry.size().bytes();
            if self.offset >= size {
                if entry.stop() {
                    events.push(TopaEvent::Stopped {
                        dropped: rest.len() as u64,
                    });
                    return Ok(events);
                }
                self.index += 1;
                self.offset = 0;
                continue;
            }
            let take = (size - self.offset).min(rest.len() as u64) as usize;
            let (now, later) = rest.split_at(take);
            write(entry.base() + self.offset, now);
            self.offset += take as u64;
            rest = later;
            if self.offset == size {
                if entry.int() {
                    events.push(TopaEvent::Pmi {
                        table: self.table,
                        index: self.index,
                    });
                }
                if entry.stop() {
                    events.push(TopaEvent::Stopped {
                        dropped: rest.len() as u64,
                    });
                    return Ok(events);
                }
                self.index += 1;
                self.offset = 0;
            }
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Capabilities {
        Capabilities {
            topa_output: true,
            topa_multiple_entries: true,
            single_range_output: true,
            ..Capabilities::default()
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(TopaSize::from_bytes(4096).unwrap().encoding(), 0);
        assert_eq!(TopaSize::from_bytes(128 << 20).unwrap().encoding(), 15);
        assert_eq!(TopaSize::from_bytes(256 << 20), None);
        assert_eq!(TopaSize::from_bytes(8191), None);
        assert_eq!(TopaSize::from_encoding(3).unwrap().bytes(), 32 * 1024);
        assert_eq!(TopaSize::from_encoding(16), None);
    }

    #[test]
    fn entry_layout() {
        let e = TopaEntry::output(0x20_0000, TopaSize::from_encoding(9).unwrap(), true, true);
        assert_eq!(e.0, 0x20_0000 | 9 << 6 | 1 << 4 | 1 << 2);
        assert_eq!(TopaEntry::end(0x5000).0, 0x5001);
        assert_eq!(TopaEntry(1 << 3).reserved_bits(46), 1 << 3);
        assert_eq!(TopaEntry(1 << 50).reserved_bits(46), 1 << 50);
    }

    #[test]
    fn table_validation() {
        let c = caps();
        let sz = TopaSize::SIZE_4K;
        let t = TopaTable::ring(0x1000, &[0x10000, 0x11000], sz, true);
        assert_eq!(t.validate(&c, 46), Ok(()));
        assert_eq!(t.output_bytes(), 8192);
        let mut bad = t.clone();
        bad.base = 0x1080;
        assert_eq!(
            bad.validate(&c, 46),
            Err(OutputError::TableMisaligned { base: 0x1080 })
        );
        let mut bad = t.clone();
        bad.entries[0] =
            TopaEntry::output(0x10000, TopaSize::from_encoding(5).unwrap(), false, false);
        assert!(matches!(
            bad.validate(&c, 46),
            Err(OutputError::RegionMisaligned { index: 0, .. })
        ));
        let mut bad = t.clone();
        bad.entries.pop();
        assert_eq!(
            bad.validate(&c, 46),
            Err(OutputError::RunsOffTable { index: 1 })
        );
        bad.entries[1].set_stop(true);
        assert_eq!(bad.validate(&c, 46), Ok(()));
        let one = Capabilities {
            topa_multiple_entries: false,
            ..c
        };
        assert_eq!(
            t.validate(&one, 46),
            Err(OutputError::MultipleEntriesNotSupported)
        );
        assert_eq!(
            TopaTable::ring(0x1000, &[0x10000], sz, true).validate(&one, 46),
            Ok(())
        );
        assert_eq!(
            TopaTable::default().validate(&c, 46),
            Err(OutputError::EmptyTable)
        );
        let none = Capabilities::default();
        assert_eq!(t.validate(&none, 46), Err(OutputError::TopaNotSupported));
    }

    #[test]
    fn single_range() {
        let c = caps();
        let r = SingleRange {
            base: 0x10000,
            size: 0x10000,
        };
        assert_eq!(r.validate(&c, 46), Ok(()));
        let (b, m) = r.to_msrs();
        assert_eq!((b.0, m.0), (0x10000, 0xffff));
        assert_eq!(SingleRange::from_msrs(b, m), Ok(r));
        assert!(matches!(
            SingleRange { base: 0, size: 64 }.validate(&c, 46),
            Err(OutputError::RangeSize { .. })
        ));
        assert!(matches!(
            SingleRange {
                base: 0x8000,
                size: 0x10000
            }
            .validate(&c, 46),
            Err(OutputError::RangeMisaligned { .. })
        ));
        let no = Capabilities {
            single_range_output: false,
            ..c
        };
        assert_eq!(
            r.validate(&no, 46),
            Err(OutputError::SingleRangeNotSupported)
        );
    }

    #[test]
    fn cursor_walks_regions_tables_int_and_stop() {
        let sz = TopaSize::SIZE_4K;
        // Table A: two regions, the second with INT, then END → table B.
        let a = TopaTable {
            base: 0x1000,
            entries: vec![
                TopaEntry::output(0x10000, sz, false, false),
                TopaEntry::output(0x11000, sz, true, false),
                TopaEntry::end(0x2000),
            ],
        };
        // Table B: one region with STOP.
        let b = TopaTable {
            base: 0x2000,
            entries: vec![
                TopaEntry::output(0x20000, sz, false, true),
                TopaEntry::end(0x1000),
            ],
        };
        let tables = |base: u64| [&a, &b].into_iter().find(|t| t.base == base);
        let mut cur = TopaCursor {
            table: 0x1000,
            index: 0,
            offset: 4000,
        };
        let mut pieces = Vec::new();
        let data = vec![0xaa; 96 + 4096 + 4096 + 10];
        let ev = cur
            .write(&tables, &data, &mut |addr, b| pieces.push((addr, b.len())))
            .unwrap();
        assert_eq!(
            pieces,
            vec![(0x10000 + 4000, 96), (0x11000, 4096), (0x20000, 4096)]
        );
        assert_eq!(
            ev,
            vec![
                TopaEvent::Pmi {
                    table: 0x1000,
                    index: 1
                },
                TopaEvent::Stopped { dropped: 10 }
            ]
        );
        assert_eq!(
            cur,
            TopaCursor {
                table: 0x2000,
                index: 0,
                offset: 4096
            }
        );
        let (base, mask) = cur.to_msrs();
        assert_eq!(TopaCursor::from_msrs(base, mask), cur);
        // Writing again at a full STOP region drops everything.
        let ev = cur
            .write(&tables, &[1, 2, 3], &mut |_, _| panic!("no output"))
            .unwrap();
        assert_eq!(ev, vec![TopaEvent::Stopped { dropped: 3 }]);
        // END loops and dangling pointers are errors, not hangs.
        let looped = TopaTable {
            base: 0x3000,
            entries: vec![TopaEntry::end(0x3000)],
        };
        let only = |base: u64| (base == 0x3000).then_some(&looped);
        let mut c = TopaCursor {
            table: 0x3000,
            ..TopaCursor::default()
        };
        assert_eq!(
            c.write(&only, &[0], &mut |_, _| {}),
            Err(OutputError::EndLoop)
        );
        let mut c = TopaCursor {
            table: 0x9000,
            ..TopaCursor::default()
        };
        assert_eq!(
            c.write(&only, &[0], &mut |_, _| {}),
            Err(OutputError::UnknownTable { table: 0x9000 })
        );
        let mut c = TopaCursor {
            table: 0x3000,
            index: 5,
            offset: 0,
        };
        assert_eq!(
            c.write(&only, &[0], &mut |_, _| {}),
            Err(OutputError::EntryOutOfRange {
                table: 0x3000,
                index: 5
            })
        );
    }
}
