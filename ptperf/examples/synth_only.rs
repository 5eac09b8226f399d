//! The synthesizer alone on a perf.data (no output): the decode and sample
//! synthesis floor under `ptperf script`/`report` for an --itrace selection,
//! with and without the fast path, as CPU time of this process.
//!
//! ```text
//! cargo run --release -p ptperf --example synth_only -- perf.data [ITRACE] [slow]
//! ```

use std::ops::ControlFlow;
use std::time::Instant;

use pt_perf::decode::PlainInsn;
use pt_perf::itrace::SynthOpts;
use pt_perf::sample::Sample;
use pt_perf::session::{Session, SessionOptions};
use pt_perf::synth::{Event, SampleSink, Stacks, Synth};

/// Counts samples, taking runs of instruction samples at once.
#[derive(Default)]
struct Count(u64);

impl SampleSink for Count {
    fn event(&mut self, e: Event<'_>) -> ControlFlow<()> {
        if let Event::Sample(..) = e {
            self.0 += 1;
        }
        ControlFlow::Continue(())
    }

    fn insns(&mut self, _: &Sample, _: &Stacks, more: &[PlainInsn]) -> ControlFlow<()> {
        self.0 += 1 + more.len() as u64;
        ControlFlow::Continue(())
    }
}

fn cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let file = args
        .next()
        .ok_or("usage: synth_only FILE [ITRACE] [slow]")?;
    let itrace = args.next().unwrap_or_else(|| "i1i".into());
    let fast = args.next().as_deref() != Some("slow");
    let (c0, t0) = (cpu(), Instant::now());
    let mapped = pt_perf_data::MappedFile::open(&file)?;
    let perf = mapped.parse()?;
    let session = Session::new(&perf, SessionOptions::for_file(&file))?;
    let mut synth = Synth::new(&session, SynthOpts::parse(&itrace)?);
    synth.set_fast_path(fast);
    let mut count = Count::default();
    let _ = synth.run_into(&mut count);
    println!(
        "--itrace={itrace} {}: {} samples, {} instructions, {} fast states; {:.3} s CPU, {:.3} s wall",
        if fast { "fast" } else { "state by state" },
        count.0,
        synth.walked(),
        synth.fast_states(),
        cpu() - c0,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
