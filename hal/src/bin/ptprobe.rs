//! `ptprobe`: the Intel PT capability table of this machine (or of a recorded
//! CPUID dump) and whether tracing is possible here; if not, why.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use pt_hal::caps::{CpuidDump, CpuidProbe};
use pt_hal::probe::{ProcessLimits, Readiness};
use pt_hal::sysfs::KernelProbe;

#[derive(Parser, Debug)]
#[command(
    name = "ptprobe",
    about = "Intel PT capabilities and whether tracing is possible here"
)]
struct Args {
    /// Read CPUID values from this dump (`cpuid -r` text) instead of the CPU.
    #[arg(long)]
    cpuid: Option<PathBuf>,
    /// Root of the sysfs/procfs tree to probe (for fixture trees).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Print the CPUID leaves the probe uses, in dump format, and exit.
    #[arg(long)]
    dump_cpuid: bool,
}

fn main() -> ExitCode {
    let args: Args = pt_cli::parse();
    let dump = match &args.cpuid {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => match CpuidDump::parse(&text) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("ptprobe: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            },
            Err(e) => {
                eprintln!("ptprobe: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => CpuidDump::from_host(),
    };
    if args.dump_cpuid {
        print!("{}", dump.to_text());
        return ExitCode::SUCCESS;
    }
    let cpu = CpuidProbe::from_dump(&dump);
    let kernel = KernelProbe::read(&args.root);
    let is_x86 = args.cpuid.is_some() || cfg!(any(target_arch = "x86", target_arch = "x86_64"));
    let readiness = Readiness::assess(&cpu, &kernel, &ProcessLimits::current(), is_x86);

    let id = &cpu.identity;
    println!("CPU");
    println!("  vendor                 {}", id.vendor);
    println!(
        "  family/model/stepping  {:#x}/{:#x}/{:#x}",
        id.family, id.model, id.stepping
    );
    println!(
        "  hypervisor             {}",
        match (&id.hypervisor, id.under_hypervisor) {
            (Some(h), _) => h.clone(),
            (None, true) => "yes (unnamed)".to_string(),
            (None, false) => "none".to_string(),
        }
    );
    println!(
        "  intel_pt (07H:EBX[25]) {}",
        if id.pt_supported { "yes" } else { "no" }
    );
    println!();
    match &cpu.caps {
        Some(caps) => {
            println!("CPUID 14H/15H capabilities");
            for (name, value) in caps.table() {
                println!("  {name:<22} {value}");
            }
        }
        None => println!("CPUID 14H/15H capabilities: none (no Intel PT in CPUID)"),
    }
    println!();
    println!("Kernel");
    match &kernel.pmu {
        Ok(pmu) => {
            println!("  intel_pt PMU type      {}", pmu.pmu_type);
            let terms: Vec<&str> = pmu.format.keys().map(String::as_str).collect();
            println!("  format terms           {}", terms.join(" "));
            if let Some(n) = pmu.nr_addr_filters {
                println!("  nr_addr_filters        {n}");
            }
        }
        Err(e) => println!("  intel_pt PMU           {e}"),
    }
    match &kernel.settings {
        Ok(s) => {
            let show = |v: Option<String>| v.unwrap_or_else(|| "absent".to_string());
            println!(
                "  perf_event_paranoid    {}",
                show(s.paranoid.map(|v| v.to_string()))
            );
            println!(
                "  perf_event_mlock_kb    {}",
                show(s.mlock_kb.map(|v| v.to_string()))
            );
        }
        Err(e) => println!("  settings               {e}"),
    }
    println!();
    if readiness.can_trace() {
        println!("{}", readiness.summary());
    } else {
        println!("Intel PT tracing is not possible here:");
    }
    for b in &readiness.blockers {
        println!("  - {b}");
    }
    for n in &readiness.notes {
        println!("  note: {n}");
    }
    if !readiness.can_trace() {
        println!("The simulator (pt-sim) works anyway: it needs no PT hardware.");
    }
    ExitCode::SUCCESS
}
