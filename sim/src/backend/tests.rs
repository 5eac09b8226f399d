use super::*;
use crate::exec::script::{Directive, Script};
use crate::exec::{collect, ExecMode, ExecutionSource};
use pt_decoder::{Config, Packet, PacketDecoder};

fn user_cfg() -> TraceConfig {
    TraceConfig {
        os: false,
        ..TraceConfig::default()
    }
}

/// `n` indirect jumps to themselves: three bytes of TIP each.
fn items(n: usize) -> (Vec<ExecItem>, CodeMemory) {
    let mut s = Script::new(0x1000, ExecMode::Bit64)
        .code(0x1000, &[0xff, 0xe0])
        .directives(std::iter::repeat_n(Directive::Target(0x1000), n))
        .max_instructions(10_000_000);
    let items = collect(&mut s).unwrap();
    (items, s.memory().clone())
}

fn run(b: &mut SimBackend, n: usize) -> Vec<TraceItem> {
    let (items, mem) = items(n);
    b.start().unwrap();
    for it in &items {
        b.feed(it, &mem);
    }
    b.stop().unwrap();
    let mut out = Vec::new();
    b.read(&mut out).unwrap();
    out
}

fn data(items: &[TraceItem]) -> Vec<u8> {
    items
        .iter()
        .filter_map(|i| match i {
            TraceItem::Data { bytes, .. } => Some(bytes.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn decodes_from_first_psb(bytes: &[u8]) -> usize {
    let mut d = PacketDecoder::new(bytes, &Config::default());
    d.sync_forward().expect("a PSB");
    let mut n = 0;
    for r in d {
        match r {
            Ok(_) => n += 1,
            // Only the last packet may be cut by a wrap or STOP.
            Err(e) => assert!(e.offset + 16 >= bytes.len() as u64, "{e:?}"),
        }
    }
    n
}

#[test]
fn msr_writes_follow_the_sdm() {
    let p = SimParams::default();
    let mut cpu = SimCpu::new(SimCpu::default_caps(&p), p).unwrap();
    // Reserved CTL bit: #GP with the HAL's reason.
    assert!(matches!(
        cpu.wrmsr(IA32_RTIT_CTL, 1 << 18),
        Err(SimError::Gp {
            why: GpReason::Config(ConfigError::ReservedCtlBits { .. }),
            ..
        })
    ));
    // A single range that is not a power of two.
    cpu.wrmsr(IA32_RTIT_OUTPUT_BASE, 0x10000).unwrap();
    cpu.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0x17f).unwrap();
    let mut ctl = user_cfg().to_regs().ctl;
    ctl.set_topa(false);
    // Not a #GP but an operational error: Status.Error, TriggerEn = 0, no output.
    cpu.wrmsr(IA32_RTIT_CTL, ctl.0).unwrap();
    let st = RtitStatus(cpu.rdmsr(IA32_RTIT_STATUS).unwrap());
    assert!(st.error() && !st.trigger_en());
    assert_eq!(cpu.written(), 0);
    cpu.wrmsr(IA32_RTIT_CTL, ctl.0 & !1).unwrap();
    cpu.wrmsr(IA32_RTIT_STATUS, 0).unwrap();
    cpu.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xfff).unwrap();
    cpu.wrmsr(IA32_RTIT_CTL, ctl.0).unwrap();
    assert!(cpu.rdmsr(IA32_RTIT_STATUS).unwrap() & 4 != 0, "TriggerEn");
    // While TraceEn = 1 only clearing TraceEn (or the same value) is allowed.
    assert!(cpu.wrmsr(IA32_RTIT_CTL, ctl.0).is_ok());
    assert!(matches!(
        cpu.wrmsr(IA32_RTIT_CTL, ctl.0 | 1 << 11),
        Err(SimError::Gp {
            why: GpReason::WhileTracing,
            ..
        })
    ));
    assert!(matches!(
        cpu.wrmsr(IA32_RTIT_STATUS, 0),
        Err(SimError::Gp {
            why: GpReason::WhileTracing,
            ..
        })
    ));
    cpu.wrmsr(IA32_RTIT_CTL, ctl.0 & !1).unwrap();
    assert_eq!(cpu.rdmsr(IA32_RTIT_STATUS).unwrap() & 4, 0);
    // The PSB+ written at enable is in memory, and OutputOffset says how much.
    let off = cpu.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap() >> 32;
    assert!(off > 16);
    let mut psb = [0u8; 16];
    cpu.mem.read(0x10000, &mut psb);
    assert!(psb.chunks(2).all(|c| c == [0x02, 0x82]));
    // Unknown MSR, reserved STATUS bits, ADDR2 with two ranges.
    assert!(cpu.wrmsr(0x123, 0).is_err());
    assert!(cpu.wrmsr(IA32_RTIT_STATUS, 1 << 3).is_err());
    assert!(cpu.wrmsr(ia32_rtit_addr_a(2), 0x1000).is_err());
    assert!(cpu.wrmsr(IA32_RTIT_CR3_MATCH, 0x1001).is_err());
    // OS = 1 is modeled (kernel code comes from sources that show it); the
    // processor starts in the kernel, where ContextEn now holds.
    let mut k = TraceConfig::default().to_regs().ctl;
    k.set_topa(false);
    cpu.wrmsr(IA32_RTIT_CTL, k.0 | 1).unwrap();
    assert_ne!(cpu.rdmsr(IA32_RTIT_STATUS).unwrap() & 2, 0);
    cpu.wrmsr(IA32_RTIT_CTL, k.0).unwrap();
}

#[test]
fn topa_ring_wraps_and_raises_pmis() {
    let out = SimOutput {
        regions: 2,
        region_size: 4096,
        int: true,
        stop: false,
    };
    let mut b = SimBackend::new(SimParams::default(), out).unwrap();
    let pmis = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let seen = pmis.clone();
    b.cpu().set_pmi_handler(move |_| seen.set(seen.get() + 1));
    b.configure(&user_cfg()).unwrap();
    let items = run(&mut b, 10_000);
    let written = b.cpu_ref().written();
    assert!(written > 3 * 8192);
    // Two PMIs per lap of the ring.
    assert_eq!(pmis.get(), written / 4096);
    assert_eq!(b.cpu_ref().pmis(), written / 4096);
    // The oldest data was overwritten: a loss, then the newest 8 KiB.
    assert!(matches!(
        items[0],
        TraceItem::Lost {
            offset: 0,
            kind: LossKind::Overwritten,
            ..
        }
    ));
    let bytes = data(&items);
    assert_eq!(bytes.len(), 8192);
    assert!(decodes_from_first_psb(&bytes) > 1000);
}

#[test]
fn topa_stop_region_stops_tracing() {
    let out = SimOutput {
        regions: 2,
        region_size: 4096,
        int: false,
        stop: true,
    };
    let mut b = SimBackend::new(SimParams::default(), out).unwrap();
    b.configure(&user_cfg()).unwrap();
    let items = run(&mut b, 10_000);
    assert_eq!(b.cpu_ref().written(), 8192);
    assert!(b.cpu_ref().logic().stopped());
    assert!(
        b.cpu().rdmsr(IA32_RTIT_STATUS).unwrap() & 1 << 5 != 0,
        "Stopped"
    );
    // MSRs: the STOP entry's index with OutputOffset = region size.
    let mask = RtitOutputMaskPtrs(b.cpu().rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap());
    assert_eq!(
        (mask.mask_or_table_offset(), mask.output_offset()),
        (1, 4096)
    );
    let bytes = data(&items);
    assert_eq!(bytes.len(), 8192);
    assert!(matches!(
        items.last(),
        Some(TraceItem::Lost {
            kind: LossKind::Truncated,
            ..
        })
    ));
    assert!(decodes_from_first_psb(&bytes) > 1000);
}

#[test]
fn single_range_wraps() {
    let out = SimOutput {
        regions: 1,
        region_size: 2048,
        int: false,
        stop: false,
    };
    let mut b = SimBackend::new(SimParams::default(), out).unwrap();
    b.configure(&TraceConfig {
        output: pt_hal::config::OutputKind::SingleRange,
        ..user_cfg()
    })
    .unwrap();
    let items = run(&mut b, 3000);
    let bytes = data(&items);
    assert_eq!(bytes.len(), 2048);
    let total = b.cpu_ref().written();
    let off = b.cpu().rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap() >> 32;
    assert_eq!(off, total % 2048);
    assert!(decodes_from_first_psb(&bytes) > 100);
}

#[test]
fn overflow_traces_still_decode() {
    let params = SimParams {
        fifo: Some(crate::pt::FifoModel {
            capacity: 128,
            drain_per_100_cycles: 60,
        }),
        ..SimParams::default()
    };
    let mut b = SimBackend::new(params, SimOutput::default()).unwrap();
    b.configure(&TraceConfig {
        psb_freq: 0,
        ..user_cfg()
    })
    .unwrap();
    let bytes = data(&run(&mut b, 20_000));
    let mut d = PacketDecoder::new(&bytes, &Config::default());
    d.sync_forward().unwrap();
    let p: Vec<Packet> = d.map(|r| r.unwrap().1).collect();
    let ovf = p.iter().filter(|q| **q == Packet::Ovf).count();
    assert!(ovf > 0);
    assert_eq!(ovf as u64, b.cpu_ref().logic().stats().overflows);
}

#[test]
fn snapshot_keeps_the_newest_data() {
    let out = SimOutput {
        regions: 1,
        region_size: 4096,
        int: false,
        stop: false,
    };
    let mut b = SimBackend::new(SimParams::default(), out).unwrap();
    b.configure(&user_cfg()).unwrap();
    let (items, mem) = items(5000);
    b.start().unwrap();
    for it in &items {
        b.feed(it, &mem);
    }
    let mut snap = Vec::new();
    assert_eq!(b.snapshot(&mut snap).unwrap(), 4096);
    assert!(b.cpu_ref().logic().trigger_en(), "still tracing");
    b.stop().unwrap();
}

#[test]
fn tracing_resumes_after_reprogramming() {
    let mut b = SimBackend::new(SimParams::default(), SimOutput::default()).unwrap();
    b.configure(&user_cfg()).unwrap();
    let (items, mem) = items(100);
    b.start().unwrap();
    for it in &items[..50] {
        b.feed(it, &mem);
    }
    b.stop().unwrap();
    let first = b.cpu_ref().written();
    let mut out = Vec::new();
    b.read(&mut out).unwrap();
    let first_bytes = data(&out);
    assert_eq!(first_bytes.len() as u64, first);
    // A new configuration while TraceEn = 0; output continues where it stopped.
    b.configure(&TraceConfig {
        tsc: false,
        ..user_cfg()
    })
    .unwrap();
    b.start().unwrap();
    for it in &items[50..] {
        b.feed(it, &mem);
    }
    b.stop().unwrap();
    let mut out = Vec::new();
    b.read(&mut out).unwrap();
    let second = data(&out);
    assert!(matches!(out[0], TraceItem::Data { offset, .. } if offset == first));
    let bytes = [first_bytes, second].concat();
    let mut d = PacketDecoder::new(&bytes, &Config::default());
    d.sync_forward().unwrap();
    let p: Vec<(u64, Packet)> = d.map(|r| r.unwrap()).collect();
    let psbs: Vec<usize> = p
        .iter()
        .enumerate()
        .filter(|(_, (_, q))| *q == Packet::Psb)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(psbs.len(), 2);
    assert_eq!(p[psbs[1]].0, first);
    // The first run ends with FUP + TIP.PGD (TraceEn cleared in user mode);
    // the second PSB+ has no TSC and tracing resumes with TIP.PGE.
    assert!(matches!(
        p[psbs[1] - 1].1,
        Packet::Ip(pt_encoder::IpPacketKind::TipPgd, _)
    ));
    assert!(matches!(
        p[psbs[1] - 2].1,
        Packet::Ip(pt_encoder::IpPacketKind::Fup, _)
    ));
    assert!(!p[psbs[1]..]
        .iter()
        .any(|(_, q)| matches!(q, Packet::Tsc { .. })));
    assert!(p[psbs[1]..]
        .iter()
        .any(|(_, q)| matches!(q, Packet::Ip(pt_encoder::IpPacketKind::TipPge, _))));
}
