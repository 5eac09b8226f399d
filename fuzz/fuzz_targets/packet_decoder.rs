//! The packet decoder on arbitrary bytes, with and without errata, synchronized the way
//! ptdump does it: every packet must lie inside the buffer, every error must name an offset
//! inside it, and re-encoding a decoded packet must give back its bytes. The record
//! decoder must see exactly what the typed decoder sees.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_decoder::{Config, Cpu, Errata, ErrorCode, PacketDecoder};
use pt_encoder::{encode_to_vec, Packet};
use std::ops::ControlFlow;

fn drain(data: &[u8], config: &Config) {
    let mut d = PacketDecoder::new(data, config);
    if d.sync_forward().is_err() {
        let _ = d.sync_set(0);
    }
    loop {
        for r in d.by_ref() {
            match r {
                Ok((off, p)) => {
                    let end = off as usize + p.size();
                    assert!(end <= data.len());
                    // Decoding is exact for everything but the padding/reserved bits that
                    // decoders ignore (PWRX, CBR, TRIG, MODE) and errata artifacts.
                    if matches!(
                        p,
                        Packet::Tsc { .. } | Packet::Mtc { .. } | Packet::Psb | Packet::Ip(..)
                    ) {
                        let mut v = Vec::new();
                        encode_to_vec(&p, &mut v).unwrap();
                        assert_eq!(&v[..], &data[off as usize..end]);
                    }
                }
                Err(e) => assert!(e.offset as usize <= data.len()),
            }
        }
        if d.sync_forward().is_err() {
            break;
        }
    }
}

/// Everything the typed (`records == false`) or the record decoder hands out, with resyncs.
fn walk(data: &[u8], config: &Config, records: bool) -> Vec<(u64, Result<Packet, ErrorCode>)> {
    let mut d = PacketDecoder::new(data, config);
    let mut seen = Vec::new();
    if d.sync_forward().is_err() && d.sync_set(0).is_err() {
        return seen;
    }
    loop {
        let r = if records {
            d.decode_records_with(|off, r| {
                assert!(off as usize + r.size() <= data.len());
                seen.push((off, Ok(r.packet())));
                ControlFlow::Continue(())
            })
        } else {
            d.decode_with(|off, p| {
                seen.push((off, Ok(p)));
                ControlFlow::Continue(())
            })
        };
        match r {
            Ok(_) => return seen,
            Err(e) => {
                seen.push((e.offset, Err(e.code)));
                if d.sync_forward().is_err() {
                    return seen;
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    drain(data, &Config::default());
    assert_eq!(
        walk(data, &Config::default(), true),
        walk(data, &Config::default(), false)
    );
    let skl = Config {
        errata: Errata::for_cpu(Cpu {
            family: 6,
            model: 0x5e,
            stepping: 0,
        })
        .unwrap(),
        ..Default::default()
    };
    drain(data, &skl);
    assert_eq!(walk(data, &skl, true), walk(data, &skl, false));
});
