//! The packet decoder on arbitrary bytes, with and without errata, synchronized the way
//! ptdump does it: every packet must lie inside the buffer, every error must name an offset
//! inside it, and re-encoding a decoded packet must give back its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_decoder::{Config, Cpu, Errata, PacketDecoder};
use pt_encoder::{encode_to_vec, Packet};

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

fuzz_target!(|data: &[u8]| {
    drain(data, &Config::default());
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
});
