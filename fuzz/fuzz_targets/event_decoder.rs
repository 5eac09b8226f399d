//! The event decoder on arbitrary bytes, synchronized and resynchronized the way ptxed
//! does it: it never panics, every offset it reports lies inside the trace, and decoding
//! ends (every event consumes a packet or an entry of a bounded queue).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pt_decoder::event::{EventDecoder, Options};
use pt_decoder::{Config, Cpu, ErrorCode, Errata};

fn drain(data: &[u8], config: &Config, options: Options) {
    let len = data.len() as u64;
    let mut d = EventDecoder::new(data, config, options);
    let mut events = 0usize;
    let mut syncs = 0usize;
    'sync: loop {
        syncs += 1;
        assert!(syncs <= data.len() + 2, "resync does not advance");
        match d.sync_forward() {
            Ok(at) => assert!(at < len),
            Err(e) if e.code == ErrorCode::Eos => return,
            Err(e) => {
                assert!(e.offset <= len, "{e:?}");
                continue;
            }
        }
        loop {
            match d.next() {
                Ok(ev) => {
                    assert!(ev.offset <= len, "{ev:?}");
                    events += 1;
                    assert!(events <= 64 * data.len() + 64, "the event decoder loops");
                }
                Err(e) => {
                    assert!(e.offset <= len, "{e:?}");
                    continue 'sync;
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the errata and options; the rest is the trace.
    let Some((&pick, trace)) = data.split_first() else {
        return;
    };
    let mut config = Config::default();
    if pick & 1 != 0 {
        let skl = Cpu {
            family: 6,
            model: 0x5e,
            stepping: 0,
        };
        config.errata = Errata::for_cpu(skl).unwrap_or_default();
    }
    if pick & 2 != 0 {
        // Timing parameters make MTC/CYC/TMA arithmetic run.
        config.mtc_freq = 3;
        config.nom_freq = 4;
        config.cpuid_0x15_eax = 2;
        config.cpuid_0x15_ebx = 7;
    }
    let options = Options {
        keep_tcal_on_ovf: pick & 4 != 0,
        tick_events: pick & 8 != 0,
        iflags_events: pick & 16 != 0,
    };
    drain(trace, &config, options);
});
