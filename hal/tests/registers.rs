//! Property tests: every register field round-trips; random configurations
//! validate exactly when every feature they use is supported.

use proptest::prelude::*;
use pt_hal::caps::{Capabilities, CpuidRegs};
use pt_hal::config::{ConfigError, RtitRegs, TraceConfig};
use pt_hal::msr::{AddrCfg, RtitCtl, RtitOutputMaskPtrs, RtitStatus};
use pt_hal::topa::{TopaEntry, TopaSize};

fn caps_strategy() -> impl Strategy<Value = Capabilities> {
    (
        any::<u16>(),
        any::<u32>(),
        0u32..8,
        any::<u16>(),
        any::<u32>(),
    )
        .prop_map(|(ebx, ecx, ranges, mtc, ebx1)| {
            Capabilities::from_registers(
                CpuidRegs::new(1, u32::from(ebx) & 0x1ff, ecx & 0x8000_000f, 0),
                Some(CpuidRegs::new(u32::from(mtc) << 16 | ranges, ebx1, 0, 0)),
                None,
            )
        })
}

proptest! {
    #[test]
    fn ctl_fields_round_trip(raw in any::<u64>(), v in any::<u8>(), b in any::<bool>(), n in 0u8..4) {
        let mut c = RtitCtl(raw);
        macro_rules! check_flag { ($get:ident, $set:ident, $bit:expr) => {{
            let mut d = c; d.$set(b);
            prop_assert_eq!(d.$get(), b);
            prop_assert_eq!(d.0 & !(1u64 << $bit), c.0 & !(1u64 << $bit));
        }}}
        check_flag!(trace_en, set_trace_en, 0);
        check_flag!(cyc_en, set_cyc_en, 1);
        check_flag!(os, set_os, 2);
        check_flag!(user, set_user, 3);
        check_flag!(pwr_evt_en, set_pwr_evt_en, 4);
        check_flag!(fup_on_ptw, set_fup_on_ptw, 5);
        check_flag!(fabric_en, set_fabric_en, 6);
        check_flag!(cr3_filter, set_cr3_filter, 7);
        check_flag!(topa, set_topa, 8);
        check_flag!(mtc_en, set_mtc_en, 9);
        check_flag!(tsc_en, set_tsc_en, 10);
        check_flag!(dis_retc, set_dis_retc, 11);
        check_flag!(ptw_en, set_ptw_en, 12);
        check_flag!(branch_en, set_branch_en, 13);
        check_flag!(event_en, set_event_en, 31);
        check_flag!(dis_tnt, set_dis_tnt, 55);
        check_flag!(inject_psb_pmi_on_enable, set_inject_psb_pmi_on_enable, 56);
        macro_rules! check_field { ($get:ident, $set:ident, $lo:expr) => {{
            let mut d = c; d.$set(v);
            prop_assert_eq!(d.$get(), v & 0xf);
            prop_assert_eq!(d.0 & !(0xfu64 << $lo), c.0 & !(0xfu64 << $lo));
        }}}
        check_field!(mtc_freq, set_mtc_freq, 14);
        check_field!(cyc_thresh, set_cyc_thresh, 19);
        check_field!(psb_freq, set_psb_freq, 24);
        let cfg = AddrCfg::from_encoding(v);
        let before = c;
        c.set_addr_cfg(n, cfg);
        prop_assert_eq!(c.addr_cfg(n), Some(cfg));
        let lo = 32 + 4 * u32::from(n);
        prop_assert_eq!(c.0 & !(0xfu64 << lo), before.0 & !(0xfu64 << lo));
        prop_assert_eq!(AddrCfg::from_encoding(cfg.encoding()), cfg);
    }

    #[test]
    fn status_and_output_fields_round_trip(raw in any::<u64>(), cnt in any::<u32>(), off in any::<u32>(), m in any::<u32>()) {
        let mut s = RtitStatus(raw);
        s.set_packet_byte_cnt(cnt);
        prop_assert_eq!(s.packet_byte_cnt(), cnt & 0x1_ffff);
        s.set_stopped(true).set_error(false);
        prop_assert!(s.stopped() && !s.error());
        let mut o = RtitOutputMaskPtrs(raw);
        o.set_output_offset(off).set_mask_or_table_offset(m).set_lower_mask(0x7f);
        prop_assert_eq!(o.output_offset(), off);
        prop_assert_eq!(o.mask_or_table_offset(), m & 0x1ff_ffff);
        prop_assert_eq!(o.lower_mask(), 0x7f);
    }

    #[test]
    fn topa_entry_fields_round_trip(base in any::<u64>(), size in 0u8..16, int in any::<bool>(), stop in any::<bool>(), end in any::<bool>()) {
        let mut e = TopaEntry(0);
        let sz = TopaSize::from_encoding(size).unwrap();
        e.set_base(base).set_size(sz).set_int(int).set_stop(stop).set_end(end);
        prop_assert_eq!(e.base(), base & !0xfff);
        prop_assert_eq!(e.size(), sz);
        prop_assert_eq!((e.int(), e.stop(), e.end_bit()), (int, stop, end));
        prop_assert_eq!(e.reserved_bits(64), 0);
        prop_assert_eq!(TopaSize::from_bytes(sz.bytes()), Some(sz));
    }

    /// A random register image validates iff each used feature is supported;
    /// valid images survive a trip through TraceConfig unchanged.
    #[test]
    fn random_configs(caps in caps_strategy(), r1 in any::<u64>(), r2 in any::<u64>(), r3 in any::<u64>(), r4 in any::<u64>(), cr3 in any::<u64>(), a in any::<u64>(), b in any::<u64>(), n in 0usize..4) {
        // Sparse bits (density 1/16) so valid images are common.
        let raw = r1 & r2 & r3 & r4;
        let mut regs = RtitRegs { ctl: RtitCtl(raw & !RtitCtl::RESERVED), ..RtitRegs::default() };
        if regs.ctl.cr3_filter() { regs.cr3_match.0 = cr3 & !0x1f; }
        regs.addr[n] = (a & r1 & r2, b & r3 & r4);
        let r = regs.validate(&caps, 48);
        let c = regs.ctl;
        let needs_ok =
            (!(c.cyc_en() || c.cyc_thresh() != 0) || caps.psb_cyc)
            && (c.cyc_thresh() == 0 || caps.cyc_thresh_ok(c.cyc_thresh()))
            && (c.psb_freq() == 0 || (caps.psb_cyc && caps.psb_period_ok(c.psb_freq())))
            && (!(c.mtc_en() || c.mtc_freq() != 0) || caps.mtc)
            && (!c.mtc_en() || caps.mtc_period_ok(c.mtc_freq()))
            && (c.branch_en() || caps.mtc)
            && (!c.pwr_evt_en() || caps.power_event_trace)
            && (!(c.ptw_en() || c.fup_on_ptw()) || caps.ptwrite)
            && (!c.fabric_en() || caps.trace_transport)
            && (!c.cr3_filter() || caps.cr3_filtering)
            && (if c.topa() { caps.topa_output } else { c.fabric_en() || caps.single_range_output })
            && (!c.event_en() || caps.event_trace)
            && (!c.dis_tnt() || caps.tnt_disable)
            && (!c.inject_psb_pmi_on_enable() || caps.psb_pmi_preservation)
            && (0..4u8).all(|i| {
                let cfg = c.addr_cfg(i).unwrap();
                let (x, y) = regs.addr[usize::from(i)];
                let used = cfg != AddrCfg::Unused || x != 0 || y != 0;
                (!used || i < caps.num_address_ranges)
                    && !matches!(cfg, AddrCfg::Reserved(_))
                    && pt_hal::msr::is_canonical(x, 48) && pt_hal::msr::is_canonical(y, 48)
            });
        prop_assert_eq!(r.is_ok(), needs_ok, "{:?} {:?}", r, regs);
        if r.is_ok() {
            let cfg = TraceConfig::from_regs(&regs).unwrap();
            let mut back = cfg.to_regs();
            back.ctl.set_trace_en(c.trace_en());
            // from_regs drops thresholds whose enable bit is clear.
            let mut want = regs;
            if !c.cyc_en() { want.ctl.set_cyc_thresh(0); }
            if !c.mtc_en() { want.ctl.set_mtc_freq(0); }
            prop_assert_eq!(back, want);
            prop_assert_eq!(cfg.validate(&caps), Ok(()));
        } else if let Err(ConfigError::ReservedCtlBits { .. }) = r {
            prop_assert!(false, "reserved bits were masked off");
        }
    }
}
