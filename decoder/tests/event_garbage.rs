//! Mutated and garbage traces never panic the event and query decoders, decoding with
//! resynchronization always terminates, and every offset stays inside the trace.

use pt_decoder::event::{EventDecoder, Options};
use pt_decoder::query::QueryDecoder;
use pt_decoder::{Config, Errata, ErrorCode};
use pt_encoder::{
    encode_to_vec, ExecMode, IpCompression, ModeExec, ModeTsx, Packet, PtwSize, Tnt, WakeReason,
};
use pt_testkit::Rng;

/// A packet of any kind the event layer handles, with random payloads.
fn packet(rng: &mut Rng) -> Packet {
    let ip = match rng.below(3) {
        0 => 0x40_1000 + rng.below(0x100),
        1 => 0xffff_ffff_8100_0000 + rng.below(0x1000),
        _ => rng.next(),
    };
    let c = IpCompression::ALL[rng.below(6) as usize];
    let mode = [ExecMode::Bit16, ExecMode::Bit32, ExecMode::Bit64][rng.below(3) as usize];
    match rng.below(30) {
        0 => Packet::Psb,
        1 => Packet::Psbend,
        2..=4 => Packet::Tnt8(Tnt::from_payload(rng.below(126) + 2).unwrap()),
        5 => Packet::Tnt64(Tnt::from_payload(rng.below(1 << 47) + 2).unwrap()),
        6 => Packet::tip(c, ip),
        7 => Packet::tip_pge(c, ip),
        8 => Packet::tip_pgd(c, ip),
        9 | 10 => Packet::fup(c, ip),
        11 => {
            let mut m = ModeExec::from_mode(mode);
            m.iflag = rng.bit();
            Packet::ModeExec(m)
        }
        12 => Packet::ModeTsx(ModeTsx {
            intx: rng.bit(),
            abrt: rng.bit(),
        }),
        13 => Packet::Pip {
            cr3: rng.next() & 0x000f_ffff_ffff_ffe0,
            nr: rng.bit(),
        },
        14 => Packet::Vmcs {
            base: rng.next() & 0x000f_ffff_ffff_f000,
        },
        15 => Packet::Ovf,
        16 => Packet::Tsc {
            tsc: rng.next() & 0x00ff_ffff_ffff_ffff,
        },
        17 => Packet::Mtc {
            ctc: rng.below(256) as u8,
        },
        18 => Packet::Tma {
            ctc: rng.below(1 << 16) as u16,
            fc: rng.below(1 << 9) as u16,
        },
        19 => Packet::Cyc {
            value: rng.below(1 << 20),
        },
        20 => Packet::Cbr {
            ratio: rng.below(256) as u8,
        },
        21 => Packet::Exstop { ip: rng.bit() },
        22 => Packet::Mwait {
            hints: rng.below(256) as u32,
            ext: rng.below(4) as u32,
        },
        23 => Packet::Pwre {
            state: rng.below(16) as u8,
            sub_state: rng.below(16) as u8,
            hw: rng.bit(),
        },
        24 => Packet::Pwrx {
            last: rng.below(16) as u8,
            deepest: rng.below(16) as u8,
            wake: WakeReason {
                interrupt: rng.bit(),
                store: rng.bit(),
                autonomous: rng.bit(),
            },
        },
        25 => Packet::Ptw {
            size: if rng.bit() {
                PtwSize::Four
            } else {
                PtwSize::Eight
            },
            payload: rng.next() & 0xffff_ffff,
            ip: rng.bit(),
        },
        26 => Packet::Cfe {
            ty: rng.below(16) as u8,
            vector: rng.below(256) as u8,
            ip: rng.bit(),
        },
        27 => Packet::Evd {
            ty: rng.below(3) as u8,
            payload: rng.next(),
        },
        28 => Packet::Trig {
            trbv: rng.below(16) as u8,
            ip: rng.bit(),
            mult: rng.bit(),
            icnt: if rng.bit() {
                Some(rng.below(3) as u16)
            } else {
                None
            },
        },
        _ => Packet::Stop,
    }
}

/// A plausible trace: PSB+ blocks with enabled tracing, then random packets.
fn trace(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..rng.below(6) + 1 {
        for p in [
            Packet::Psb,
            Packet::Tsc {
                tsc: rng.below(1 << 40),
            },
            Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
            Packet::fup(IpCompression::Sext48, 0x40_1000),
            Packet::Psbend,
        ] {
            encode_to_vec(&p, &mut v).unwrap();
        }
        for _ in 0..rng.below(40) {
            // Ignore the packets the encoder refuses (random payloads out of range).
            let _ = encode_to_vec(&packet(rng), &mut v);
        }
    }
    v
}

fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    if buf.is_empty() {
        return;
    }
    for _ in 0..rng.below(4) {
        let i = rng.below(buf.len() as u64) as usize;
        match rng.below(4) {
            0 => buf[i] ^= 1 << rng.below(8),
            1 => buf[i] = rng.next() as u8,
            2 => buf.truncate(i),
            _ => {
                let j = rng.below(buf.len() as u64) as usize;
                buf.swap(i, j);
            }
        }
        if buf.is_empty() {
            return;
        }
    }
}

fn configs() -> [Config; 3] {
    let all = Errata {
        bdm70: true,
        bdm64: true,
        skd007: true,
        skd022: true,
        skd010: true,
        skl014: true,
        apl12: true,
        apl11: true,
        skl168: true,
        skz84: true,
    };
    let timing = Config {
        mtc_freq: 3,
        nom_freq: 36,
        cpuid_0x15_eax: 2,
        cpuid_0x15_ebx: 168,
        ..Config::default()
    };
    [
        Config::default(),
        Config {
            errata: all,
            ..timing
        },
        timing,
    ]
}

/// Decode all of `buf` with resync after errors; checks bounds and termination.
fn run_events(buf: &[u8], config: &Config, options: Options) -> usize {
    let len = buf.len() as u64;
    let mut d = EventDecoder::new(buf, config, options);
    let mut events = 0usize;
    let mut syncs = 0usize;
    'sync: loop {
        match d.sync_forward() {
            Ok(at) => assert!(at < len),
            Err(e) if e.code == ErrorCode::Eos => break,
            Err(e) => {
                assert!(e.offset <= len, "{e:?}");
                syncs += 1;
                assert!(syncs <= buf.len() + 1, "resync does not advance");
                continue;
            }
        }
        syncs += 1;
        assert!(syncs <= buf.len() + 1, "resync does not advance");
        loop {
            match d.next() {
                Ok(ev) => {
                    assert!(ev.offset <= len, "{ev:?}");
                    events += 1;
                    // Every event consumes a packet or an entry of a bounded queue.
                    assert!(events <= 64 * buf.len() + 64, "event decoder loops");
                }
                Err(e) => {
                    assert!(e.offset <= len, "{e:?}");
                    if let Ok(off) = d.offset() {
                        assert!(off <= len);
                    }
                    continue 'sync;
                }
            }
        }
    }
    events
}

fn run_queries(buf: &[u8], config: &Config, rng: &mut Rng) {
    let len = buf.len() as u64;
    let mut q = QueryDecoder::new(buf, config, Options::default());
    let mut steps = 0usize;
    loop {
        match q.sync_forward() {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::Eos => return,
            Err(e) => assert!(e.offset <= len),
        }
        loop {
            steps += 1;
            assert!(steps < 64 * buf.len() + 64, "query decoder loops");
            let s = q.status();
            let r = if s.eos {
                break;
            } else if s.event_pending {
                q.event().map(|_| ())
            } else if rng.bit() {
                q.cond_branch().map(|_| ())
            } else {
                q.indirect_branch().map(|_| ())
            };
            match r {
                Ok(()) => {}
                Err(e) if e.code == ErrorCode::BadQuery => {
                    // Try the other kind of branch; then give up on this PSB.
                    if q.cond_branch().is_err() && q.indirect_branch().is_err() {
                        break;
                    }
                }
                Err(e) => {
                    assert!(e.offset <= len, "{e:?}");
                    break;
                }
            }
        }
    }
}

#[test]
fn mutated_traces() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut total = 0;
    for round in 0..8000 {
        let mut buf = trace(&mut rng);
        if round % 4 != 0 {
            mutate(&mut rng, &mut buf);
        }
        for config in &configs() {
            let options = Options {
                tick_events: round % 2 == 0,
                keep_tcal_on_ovf: round % 3 == 0,
                iflags_events: round % 5 == 0,
            };
            total += run_events(&buf, config, options);
        }
        run_queries(&buf, &configs()[round % 3], &mut rng);
    }
    // The generator makes traces with plenty of events: this test is not vacuous.
    assert!(total > 10_000, "only {total} events");
}

#[test]
fn random_bytes() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for _ in 0..2000 {
        let n = rng.below(300) as usize;
        let mut buf: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        // Give some of them a PSB so the decoder gets past synchronization.
        if n > 40 && rng.bit() {
            let at = rng.below(n as u64 - 32) as usize;
            let mut psb = Vec::new();
            encode_to_vec(&Packet::Psb, &mut psb).unwrap();
            buf[at..at + 16].copy_from_slice(&psb);
        }
        for config in &configs() {
            run_events(&buf, config, Options::default());
        }
        run_queries(&buf, &configs()[1], &mut rng);
        // Backward synchronization from the end visits PSBs and stops.
        let mut d = EventDecoder::new(&buf, &configs()[1], Options::default());
        let mut n = 0;
        loop {
            match d.sync_backward() {
                Ok(at) => assert!(at < buf.len() as u64),
                Err(e) if e.code == ErrorCode::Eos => break,
                Err(_) => {}
            }
            n += 1;
            assert!(n <= buf.len() + 1, "backward sync loops");
        }
    }
}
