//! The simulated trace hardware behind the HAL's [`TraceBackend`] trait:
//! an IA32_RTIT_* MSR file, simulated physical memory, and the output unit
//! that writes the PT logic's packets through ToPA tables or a single range.
//!
//! [`SimCpu`] is the register-level model: `wrmsr`/`rdmsr` behave as the SDM
//! says (writes while TraceEn = 1 #GP, except clearing TraceEn; reserved bits
//! and unsupported settings #GP through [`RtitRegs::validate`]; ToPA tables
//! are read from simulated memory when tracing starts). A full INT region
//! calls the PMI callback; a full STOP region sets Status.Stopped; the last
//! entry's END link makes a ring.
//!
//! [`SimBackend`] drives a [`SimCpu`] through the [`TraceBackend`] life cycle
//! (configure → start → feed execution items → stop → read).

use std::collections::{HashMap, VecDeque};

use pt_hal::backend::{LossKind, TraceBackend, TraceItem};
use pt_hal::caps::Capabilities;
use pt_hal::config::{ConfigError, RtitRegs, TraceConfig};
use pt_hal::msr::{
    ia32_rtit_addr_a, RtitCr3Match, RtitCtl, RtitOutputBase, RtitOutputMaskPtrs, RtitStatus,
    IA32_RTIT_CR3_MATCH, IA32_RTIT_CTL, IA32_RTIT_OUTPUT_BASE, IA32_RTIT_OUTPUT_MASK_PTRS,
    IA32_RTIT_STATUS, MAX_ADDR_RANGES,
};
use pt_hal::topa::{
    OutputError, SingleRange, TopaCursor, TopaEntry, TopaEvent, TopaSize, TopaTable,
};

use crate::exec::{BlockRun, BlockTable, CodeMemory, ExecItem, RunView};
use crate::pt::{PtError, PtLogic, SimParams};

/// MAXPHYADDR of the simulated processor.
pub const MAXPHYADDR: u8 = 46;
/// Most entries read from one ToPA table (a 4 KiB table holds 512).
const MAX_TABLE_ENTRIES: usize = 4096;

/// A fault of the simulated processor or an unsupported request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// WRMSR/RDMSR raised #GP.
    #[error("#GP on MSR {msr:#x}: {why}")]
    Gp {
        /// The MSR.
        msr: u32,
        /// Why.
        why: GpReason,
    },
    /// The PT logic cannot model the configuration.
    #[error(transparent)]
    Unsupported(#[from] PtError),
    /// `start` before `configure`.
    #[error("not configured")]
    NotConfigured,
}

/// Why a WRMSR faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpReason {
    /// Not an IA32_RTIT_* MSR of this processor.
    #[error("unknown MSR")]
    UnknownMsr,
    /// A write other than clearing TraceEn while TraceEn = 1.
    #[error("written while TraceEn = 1")]
    WhileTracing,
    /// Reserved bits set.
    #[error("reserved bits {0:#x} set")]
    Reserved(u64),
    /// The control value is invalid for the capabilities.
    #[error("{0}")]
    Config(ConfigError),
    /// The output configuration is invalid.
    #[error("{0}")]
    Output(OutputError),
}

/// Sparse simulated physical memory (zero where never written).
#[derive(Clone, Debug, Default)]
pub struct PhysMemory {
    pages: HashMap<u64, Box<[u8; 4096]>>,
}

impl PhysMemory {
    /// Writes `bytes` at `addr`.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) {
        let mut a = addr;
        let mut rest = bytes;
        while !rest.is_empty() {
            let off = (a & 0xfff) as usize;
            let n = (4096 - off).min(rest.len());
            let page = self
                .pages
                .entry(a & !0xfff)
                .or_insert_with(|| Box::new([0; 4096]));
            page[off..off + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            a = a.wrapping_add(n as u64);
        }
    }

    /// Reads `buf.len()` bytes at `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) {
        let mut a = addr;
        let mut done = 0;
        while done < buf.len() {
            let off = (a & 0xfff) as usize;
            let n = (4096 - off).min(buf.len() - done);
            match self.pages.get(&(a & !0xfff)) {
                Some(p) => buf[done..done + n].copy_from_slice(&p[off..off + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
            a = a.wrapping_add(n as u64);
        }
    }

    /// Reads a little-endian u64.
    pub fn read_u64(&self, addr: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(addr, &mut b);
        u64::from_le_bytes(b)
    }
}

/// Pending PT output moved to memory at once (bytes).
const FLUSH_AT: usize = 256;

/// A PMI raised by a full ToPA region with INT set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pmi {
    /// Physical base of the table.
    pub table: u64,
    /// Index of the entry.
    pub index: usize,
    /// Trace bytes written so far.
    pub offset: u64,
}

/// Where output goes while tracing.
enum Sink {
    Topa {
        tables: HashMap<u64, TopaTable>,
        cursor: TopaCursor,
    },
    Single {
        range: SingleRange,
        offset: u64,
    },
}

/// The trace unit of one simulated logical processor.
pub struct SimCpu {
    caps: Capabilities,
    logic: PtLogic,
    ctl: RtitCtl,
    status: RtitStatus,
    output_base: RtitOutputBase,
    output_mask: RtitOutputMaskPtrs,
    cr3_match: RtitCr3Match,
    addr: [(u64, u64); MAX_ADDR_RANGES as usize],
    /// Simulated physical memory.
    pub mem: PhysMemory,
    sink: Option<Sink>,
    pmi: Option<Box<dyn FnMut(Pmi)>>,
    pmis: u64,
    /// Trace bytes written to memory (stream offset).
    written: u64,
    /// Bytes lost at a full STOP region.
    stop_dropped: u64,
    /// Recent writes (stream offset, physical address, length) for reading back.
    chunks: VecDeque<(u64, u64, u64)>,
    /// The PT logic's output on its way to memory (kept: no allocation per flush).
    moving: Vec<u8>,
}

impl SimCpu {
    /// A processor with these capabilities, simulation parameters and a
    /// power-on register state (everything zero).
    pub fn new(caps: Capabilities, params: SimParams) -> Result<Self, SimError> {
        let cfg = TraceConfig {
            os: false,
            ..TraceConfig::default()
        };
        Ok(SimCpu {
            caps,
            logic: PtLogic::new(cfg, params)?,
            ctl: RtitCtl(0),
            status: RtitStatus(0),
            output_base: RtitOutputBase(0),
            output_mask: RtitOutputMaskPtrs(0),
            cr3_match: RtitCr3Match(0),
            addr: [(0, 0); MAX_ADDR_RANGES as usize],
            mem: PhysMemory::default(),
            sink: None,
            pmi: None,
            pmis: 0,
            written: 0,
            stop_dropped: 0,
            chunks: VecDeque::new(),
            moving: Vec::new(),
        })
    }

    /// Capabilities every feature of which the simulator models (Ice Lake-like,
    /// two address ranges, CPUID 0x15 from `params`).
    pub fn default_caps(params: &SimParams) -> Capabilities {
        Capabilities {
            max_subleaf: 1,
            cr3_filtering: true,
            psb_cyc: true,
            ip_filtering: true,
            mtc: true,
            ptwrite: true,
            power_event_trace: false,
            psb_pmi_preservation: false,
            event_trace: false,
            tnt_disable: true,
            topa_output: true,
            topa_multiple_entries: true,
            single_range_output: true,
            trace_transport: false,
            lip: false,
            num_address_ranges: 2,
            mtc_periods: 0x249,
            cycle_thresholds: 0x3fff,
            psb_periods: 0x3f,
            tsc_ratio: Some(pt_hal::caps::TscRatio {
                numerator: params.clock.cpuid_15_ebx,
                denominator: params.clock.cpuid_15_eax,
                crystal_hz: None,
            }),
        }
    }

    /// Installs the PMI handler (called when an INT region fills).
    pub fn set_pmi_handler(&mut self, f: impl FnMut(Pmi) + 'static) {
        self.pmi = Some(Box::new(f));
    }

    /// PMIs raised so far.
    pub fn pmis(&self) -> u64 {
        self.pmis
    }

    /// The PT logic.
    pub fn logic(&self) -> &PtLogic {
        &self.logic
    }

    /// Trace bytes written to memory so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes dropped at a full STOP region.
    pub fn stop_dropped(&self) -> u64 {
        self.stop_dropped
    }

    fn regs(&self, ctl: RtitCtl) -> RtitRegs {
        RtitRegs {
            ctl,
            cr3_match: self.cr3_match,
            addr: self.addr,
        }
    }

    fn gp(msr: u32, why: GpReason) -> SimError {
        SimError::Gp { msr, why }
    }

    /// WRMSR.
    pub fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), SimError> {
        let tracing = self.ctl.trace_en();
        if msr == IA32_RTIT_CTL {
            let new = RtitCtl(value);
            if tracing {
                let mut cleared = self.ctl;
                cleared.set_trace_en(false);
                if value == self.ctl.0 {
                    return Ok(());
                }
                if value != cleared.0 {
                    return Err(Self::gp(msr, GpReason::WhileTracing));
                }
                self.stop_tracing();
                self.ctl = new;
                return Ok(());
            }
            self.regs(new)
                .validate(&self.caps, 48)
                .map_err(|e| Self::gp(msr, GpReason::Config(e)))?;
            if new.trace_en() {
                self.start_tracing(new)?;
            }
            self.ctl = new;
            return Ok(());
        }
        if tracing {
            return Err(Self::gp(msr, GpReason::WhileTracing));
        }
        match msr {
            IA32_RTIT_STATUS => {
                let s = RtitStatus(value);
                // FilterEn, ContextEn and TriggerEn are read-only; writing them is ignored.
                if s.reserved_bits() != 0 {
                    return Err(Self::gp(msr, GpReason::Reserved(s.reserved_bits())));
                }
                self.status = s;
                self.logic.set_error(s.error());
                if s.stopped() {
                    self.logic.set_stopped();
                } else {
                    self.logic.clear_stopped();
                }
                self.logic
                    .set_packet_byte_cnt(u64::from(s.packet_byte_cnt()));
            }
            IA32_RTIT_OUTPUT_BASE => {
                let r = value & RtitOutputBase::reserved_mask(MAXPHYADDR);
                if r != 0 {
                    return Err(Self::gp(msr, GpReason::Reserved(r)));
                }
                self.output_base = RtitOutputBase(value);
            }
            IA32_RTIT_OUTPUT_MASK_PTRS => self.output_mask = RtitOutputMaskPtrs(value),
            IA32_RTIT_CR3_MATCH => {
                if value & RtitCr3Match::RESERVED != 0 {
                    return Err(Self::gp(
                        msr,
                        GpReason::Reserved(value & RtitCr3Match::RESERVED),
                    ));
                }
                self.cr3_match = RtitCr3Match(value);
            }
            _ => {
                let base = ia32_rtit_addr_a(0);
                let n = msr.wrapping_sub(base);
                if n >= 2 * u32::from(self.caps.num_address_ranges) {
                    return Err(Self::gp(msr, GpReason::UnknownMsr));
                }
                if !pt_hal::msr::is_canonical(value, 48) {
                    return Err(Self::gp(msr, GpReason::Reserved(value)));
                }
                let pair = &mut self.addr[(n / 2) as usize];
                if n % 2 == 0 {
                    pair.0 = value;
                } else {
                    pair.1 = value;
                }
            }
        }
        Ok(())
    }

    /// RDMSR.
    pub fn rdmsr(&self, msr: u32) -> Result<u64, SimError> {
        Ok(match msr {
            IA32_RTIT_CTL => self.ctl.0,
            IA32_RTIT_STATUS => {
                let mut s = self.status;
                let l = &self.logic;
                s.set_trigger_en(l.trigger_en())
                    .set_context_en(l.context_en())
                    .set_filter_en(
                        l.packet_en()
                            || l.config()
                                .ranges
                                .iter()
                                .all(|r| r.cfg != pt_hal::msr::AddrCfg::Filter),
                    )
                    .set_stopped(l.stopped())
                    .set_packet_byte_cnt(l.packet_byte_cnt().min(0x1ffff) as u32);
                s.0
            }
            IA32_RTIT_OUTPUT_BASE => self.output_base.0,
            IA32_RTIT_OUTPUT_MASK_PTRS => self.output_mask.0,
            IA32_RTIT_CR3_MATCH => self.cr3_match.0,
            _ => {
                let n = msr.wrapping_sub(ia32_rtit_addr_a(0));
                if n >= 2 * u32::from(self.caps.num_address_ranges) {
                    return Err(Self::gp(msr, GpReason::UnknownMsr));
                }
                let pair = self.addr[(n / 2) as usize];
                if n % 2 == 0 {
                    pair.0
                } else {
                    pair.1
                }
            }
        })
    }

    fn read_table(&self, base: u64) -> TopaTable {
        let mut entries = Vec::new();
        for i in 0..MAX_TABLE_ENTRIES {
            let e = TopaEntry(self.mem.read_u64(base + 8 * i as u64));
            entries.push(e);
            if e.end_bit() || e.stop() && i + 1 == MAX_TABLE_ENTRIES {
                break;
            }
        }
        TopaTable { base, entries }
    }

    /// The output the registers describe, or the operational error they cause.
    fn output_sink(&self, ctl: RtitCtl) -> Result<Sink, OutputError> {
        if ctl.topa() {
            // Read every table reachable through END links.
            let mut tables = HashMap::new();
            let mut todo = vec![self.output_base.base()];
            while let Some(b) = todo.pop() {
                if tables.contains_key(&b) || tables.len() > 64 {
                    continue;
                }
                let t = self.read_table(b);
                t.validate(&self.caps, MAXPHYADDR)?;
                todo.extend(t.entries.iter().filter(|e| e.end_bit()).map(|e| e.base()));
                tables.insert(b, t);
            }
            Ok(Sink::Topa {
                tables,
                cursor: TopaCursor::from_msrs(self.output_base, self.output_mask),
            })
        } else {
            let range = SingleRange::from_msrs(self.output_base, self.output_mask)?;
            range.validate(&self.caps, MAXPHYADDR)?;
            Ok(Sink::Single {
                range,
                offset: u64::from(self.output_mask.output_offset()),
            })
        }
    }

    fn start_tracing(&mut self, ctl: RtitCtl) -> Result<(), SimError> {
        let msr = IA32_RTIT_CTL;
        let cfg = TraceConfig::from_regs(&self.regs(ctl))
            .map_err(|e| Self::gp(msr, GpReason::Config(e)))?;
        self.logic.set_config(cfg)?;
        match self.output_sink(ctl) {
            Ok(sink) => self.sink = Some(sink),
            Err(_) => {
                // Malformed tables or ranges are not a #GP: Status.Error, no output.
                self.status.set_error(true);
                self.sink = None;
            }
        }
        self.logic.set_error(self.status.error());
        self.logic.enable();
        self.flush();
        Ok(())
    }

    fn stop_tracing(&mut self) {
        self.logic.disable();
        self.flush();
        match &self.sink {
            Some(Sink::Topa { cursor, .. }) => {
                let (b, m) = cursor.to_msrs();
                self.output_base = b;
                self.output_mask = m;
            }
            Some(Sink::Single { offset, .. }) => {
                self.output_mask.set_output_offset(*offset as u32);
            }
            None => {}
        }
        self.status.set_stopped(self.logic.stopped());
        self.sink = None;
    }

    /// Time passed while TraceEn = 0 (other threads ran on this logical
    /// processor): the clock moves on to core cycle `cycles`
    /// ([`PtLogic::catch_up`]).
    pub fn catch_up(&mut self, cycles: u64) {
        if !self.ctl.trace_en() {
            self.logic.catch_up(cycles);
        }
    }

    /// Feeds one execution item to the PT logic and writes its output.
    #[inline]
    pub fn feed(&mut self, item: &ExecItem, mem: &CodeMemory) {
        self.logic.item(item, mem);
        if self.logic.output().len() >= 256 {
            self.flush();
        }
    }

    /// Feeds a block run to the PT logic (as [`Self::feed`] of each of its
    /// instructions would) and writes its output.
    #[inline]
    pub fn feed_block(&mut self, run: RunView<'_>, mem: &CodeMemory) {
        self.logic.retire_block(run, mem);
        if self.logic.output().len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Block runs in order, as [`Self::feed_block`] of each, until the trace
    /// written to memory reaches stream offset `written_limit` (checked
    /// after each run, as after each [`Self::feed_block`]): returns how many
    /// runs were taken (at least one, if there are any) and the
    /// instructions they retired.
    pub fn feed_blocks(
        &mut self,
        runs: &[BlockRun],
        table: &BlockTable,
        mem: &CodeMemory,
        written_limit: u64,
    ) -> (usize, u64) {
        let mut at = 0;
        let mut insns = 0;
        while at < runs.len() {
            // Past the limit already (an output area of no size): one run.
            let end = if self.written >= written_limit {
                at + 1
            } else {
                runs.len()
            };
            let (k, n) = self
                .logic
                .retire_blocks(&runs[at..end], table, mem, FLUSH_AT);
            at += k;
            insns += n;
            if self.logic.output().len() >= FLUSH_AT {
                self.flush();
            }
            if self.written >= written_limit {
                break;
            }
        }
        (at, insns)
    }

    /// Moves the PT logic's pending output to memory.
    pub fn flush(&mut self) {
        if self.logic.output().is_empty() {
            return;
        }
        let mut data = std::mem::take(&mut self.moving);
        data.clear();
        self.logic.drain_into(&mut data);
        self.write_out(&data);
        self.moving = data;
    }

    /// Writes `data` (the PT logic's output) to the output area.
    fn write_out(&mut self, data: &[u8]) {
        let Some(sink) = &mut self.sink else {
            return;
        };
        let mem = &mut self.mem;
        let chunks = &mut self.chunks;
        let mut at = self.written;
        match sink {
            Sink::Topa { tables, cursor } => {
                let lookup = |b: u64| tables.get(&b);
                let res = cursor.write(&lookup, data, &mut |phys, bytes| {
                    mem.write(phys, bytes);
                    chunks.push_back((at, phys, bytes.len() as u64));
                    at += bytes.len() as u64;
                });
                match res {
                    Ok(events) => {
                        for e in events {
                            match e {
                                TopaEvent::Pmi { table, index } => {
                                    self.pmis += 1;
                                    if let Some(f) = &mut self.pmi {
                                        f(Pmi {
                                            table,
                                            index,
                                            offset: at,
                                        });
                                    }
                                }
                                TopaEvent::Stopped { dropped } => {
                                    self.stop_dropped += dropped;
                                    self.logic.set_stopped();
                                    self.status.set_stopped(true);
                                }
                            }
                        }
                    }
                    Err(_) => {
                        // A table the hardware cannot follow: operational error.
                        self.status.set_error(true);
                        self.logic.set_error(true);
                    }
                }
            }
            Sink::Single { range, offset } => {
                let mut rest = data;
                while !rest.is_empty() {
                    let n = ((range.size - *offset) as usize).min(rest.len());
                    mem.write(range.base + *offset, &rest[..n]);
                    chunks.push_back((at, range.base + *offset, n as u64));
                    at += n as u64;
                    *offset = (*offset + n as u64) % range.size;
                    rest = &rest[n..];
                }
            }
        }
        self.written = at;
    }

    /// Capacity of the output area (bytes kept before the oldest are overwritten).
    pub fn output_capacity(&self) -> u64 {
        match &self.sink {
            Some(Sink::Topa { tables, .. }) => tables.values().map(TopaTable::output_bytes).sum(),
            Some(Sink::Single { range, .. }) => range.size,
            None => u64::MAX,
        }
    }

    /// Copies out the trace written since stream offset `from` (what is still
    /// in memory), as [`TraceItem`]s; returns the new read position.
    pub fn read_since(
        &mut self,
        from: u64,
        capacity: u64,
        out: &mut Vec<TraceItem>,
    ) -> (u64, usize) {
        let oldest = self.written.saturating_sub(capacity);
        let start = from.max(oldest);
        if start > from {
            out.push(TraceItem::Lost {
                offset: from,
                size: Some(start - from),
                kind: LossKind::Overwritten,
            });
        }
        let mut bytes = Vec::with_capacity((self.written - start) as usize);
        // The chunks are in stream order: skip those that end before `start`.
        let first = self.chunks.partition_point(|&(s, _, len)| s + len <= start);
        for &(s, phys, len) in self.chunks.range(first..) {
            let skip = start.saturating_sub(s);
            let at = bytes.len();
            bytes.resize(at + (len - skip) as usize, 0);
            self.mem.read(phys + skip, &mut bytes[at..]);
        }
        // The chunks are in stream order: those overwritten by now are the first.
        let oldest = self.written.saturating_sub(capacity);
        while self
            .chunks
            .front()
            .is_some_and(|&(s, _, len)| s + len <= oldest)
        {
            self.chunks.pop_front();
        }
        let n = bytes.len();
        if n > 0 {
            out.push(TraceItem::Data {
                offset: start,
                bytes,
            });
        }
        (self.written, n)
    }
}

/// Output area [`SimBackend`] sets up in simulated memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimOutput {
    /// Output regions (ToPA) or 1 (single range).
    pub regions: usize,
    /// Bytes per region (4 KiB << n for ToPA; a power of two ≥ 128 for single range).
    pub region_size: u64,
    /// INT on every region (a PMI per filled region).
    pub int: bool,
    /// STOP on the last region instead of wrapping (perf's full-trace mode).
    pub stop: bool,
}

impl Default for SimOutput {
    /// A 4 MiB ring of 64 KiB regions, a PMI per region.
    fn default() -> Self {
        SimOutput {
            regions: 64,
            region_size: 64 * 1024,
            int: true,
            stop: false,
        }
    }
}

/// Physical address of the ToPA table [`SimBackend`] builds.
const TABLE_BASE: u64 = 0x10_0000;
/// Physical address of the first output region.
const OUTPUT_BASE: u64 = 0x1000_0000;

/// The simulator as a [`TraceBackend`]: configure programs the MSRs and a
/// ToPA ring (or single range), start sets TraceEn, [`SimBackend::feed`]
/// runs execution items through the logic, read copies out new trace bytes.
pub struct SimBackend {
    cpu: SimCpu,
    caps: Capabilities,
    output: SimOutput,
    ctl: Option<u64>,
    read_pos: u64,
}

impl SimBackend {
    /// A backend with the simulator's default capabilities.
    pub fn new(params: SimParams, output: SimOutput) -> Result<Self, SimError> {
        let caps = SimCpu::default_caps(&params);
        Ok(SimBackend {
            cpu: SimCpu::new(caps, params)?,
            caps,
            output,
            ctl: None,
            read_pos: 0,
        })
    }

    /// The register-level model.
    pub fn cpu(&mut self) -> &mut SimCpu {
        &mut self.cpu
    }

    /// The register-level model, read-only.
    pub fn cpu_ref(&self) -> &SimCpu {
        &self.cpu
    }

    /// Runs one execution item.
    #[inline]
    pub fn feed(&mut self, item: &ExecItem, mem: &CodeMemory) {
        self.cpu.feed(item, mem);
    }

    /// Runs a block run (see [`SimCpu::feed_block`]).
    #[inline]
    pub fn feed_block(&mut self, run: RunView<'_>, mem: &CodeMemory) {
        self.cpu.feed_block(run, mem);
    }

    /// Runs block runs in order (see [`SimCpu::feed_blocks`]) until half
    /// the output area is unread (the owner reads it then): returns how
    /// many runs were taken and the instructions they retired.
    #[inline]
    pub fn feed_blocks(
        &mut self,
        runs: &[BlockRun],
        table: &BlockTable,
        mem: &CodeMemory,
    ) -> (usize, u64) {
        let limit = self.read_pos.saturating_add(self.capacity() / 2);
        self.cpu.feed_blocks(runs, table, mem, limit)
    }

    /// Bytes written but not yet read.
    pub fn unread(&self) -> u64 {
        self.cpu.written() - self.read_pos
    }

    /// Bytes of trace the output area holds before wrapping.
    pub fn capacity(&self) -> u64 {
        match self.output.regions {
            0 => 0,
            n => n as u64 * self.output.region_size,
        }
    }

    fn program_output(&mut self, single: bool) -> Result<(), SimError> {
        let o = self.output;
        if single {
            let r = SingleRange {
                base: OUTPUT_BASE,
                size: o.region_size,
            };
            let (b, m) = r.to_msrs();
            self.cpu.wrmsr(IA32_RTIT_OUTPUT_BASE, b.0)?;
            self.cpu.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, m.0)?;
            return Ok(());
        }
        let size = TopaSize::from_bytes(o.region_size).ok_or(SimError::Gp {
            msr: IA32_RTIT_OUTPUT_BASE,
            why: GpReason::Output(OutputError::RangeSize {
                size: o.region_size,
            }),
        })?;
        let bases: Vec<u64> = (0..o.regions.max(1) as u64)
            .map(|i| OUTPUT_BASE + i * o.region_size)
            .collect();
        let mut t = TopaTable::ring(TABLE_BASE, &bases, size, o.int);
        for e in t.entries.iter_mut().filter(|e| !e.end_bit()) {
            e.set_int(o.int);
        }
        if o.stop {
            let last = bases.len() - 1;
            t.entries[last].set_stop(true);
        }
        for (i, e) in t.entries.iter().enumerate() {
            self.cpu
                .mem
                .write(TABLE_BASE + 8 * i as u64, &e.0.to_le_bytes());
        }
        let (b, m) = t.initial_msrs();
        self.cpu.wrmsr(IA32_RTIT_OUTPUT_BASE, b.0)?;
        self.cpu.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, m.0)?;
        Ok(())
    }
}

impl TraceBackend for SimBackend {
    type Error = SimError;

    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    fn configure(&mut self, config: &TraceConfig) -> Result<(), SimError> {
        config.validate(&self.caps).map_err(|e| SimError::Gp {
            msr: IA32_RTIT_CTL,
            why: GpReason::Config(e),
        })?;
        let regs = config.to_regs();
        let single = config.output == pt_hal::config::OutputKind::SingleRange;
        let same_output = self
            .ctl
            .is_some_and(|c| RtitCtl(c).topa() == regs.ctl.topa());
        if !same_output {
            // Reconfiguring keeps the output area and position, as perf does.
            self.program_output(single)?;
            self.cpu.wrmsr(IA32_RTIT_STATUS, 0)?;
        }
        self.cpu.wrmsr(IA32_RTIT_CR3_MATCH, regs.cr3_match.0)?;
        for n in 0..self.caps.num_address_ranges {
            let (a, b) = regs.addr[usize::from(n)];
            self.cpu.wrmsr(ia32_rtit_addr_a(n), a)?;
            self.cpu.wrmsr(ia32_rtit_addr_a(n) + 1, b)?;
        }
        let mut ctl = regs.ctl;
        ctl.set_trace_en(false);
        self.cpu.wrmsr(IA32_RTIT_CTL, ctl.0)?;
        self.ctl = Some(ctl.0);
        Ok(())
    }

    fn start(&mut self) -> Result<(), SimError> {
        let ctl = self.ctl.ok_or(SimError::NotConfigured)?;
        self.cpu.wrmsr(IA32_RTIT_CTL, ctl | 1)
    }

    fn stop(&mut self) -> Result<(), SimError> {
        let ctl = self.ctl.ok_or(SimError::NotConfigured)?;
        self.cpu.wrmsr(IA32_RTIT_CTL, ctl & !1)
    }

    fn read(&mut self, out: &mut Vec<TraceItem>) -> Result<usize, SimError> {
        self.cpu.flush();
        let cap = self.capacity();
        let (pos, n) = self.cpu.read_since(self.read_pos, cap, out);
        if self.cpu.stop_dropped() > 0 && pos == self.cpu.written() && self.cpu.logic().stopped() {
            out.push(TraceItem::Lost {
                offset: pos,
                size: Some(self.cpu.stop_dropped()),
                kind: LossKind::Truncated,
            });
        }
        self.read_pos = pos;
        Ok(n)
    }

    fn snapshot(&mut self, out: &mut Vec<TraceItem>) -> Result<usize, SimError> {
        self.cpu.flush();
        let cap = self.capacity();
        let from = self.cpu.written().saturating_sub(cap);
        let (_, n) = self.cpu.read_since(from, cap, out);
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
