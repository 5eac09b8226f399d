//! Whether Intel PT tracing through perf is possible here, and if not, why.

use std::fmt;
use std::path::Path;

use crate::caps::{CpuidProbe, Vendor};
use crate::sysfs::{KernelProbe, SysfsError};

/// Buffer sizes the perf backend uses by default, in bytes (data ring + AUX).
pub const DEFAULT_DATA_BYTES: u64 = 64 * 1024;
/// Default AUX area size in bytes (perf's unprivileged default).
pub const DEFAULT_AUX_BYTES: u64 = 128 * 1024;

/// One reason tracing cannot happen here.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blocker {
    /// Not an x86 machine.
    NotX86,
    /// The CPU is not Intel (Intel PT is Intel-only).
    NotIntel {
        /// The vendor found.
        vendor: String,
    },
    /// CPUID.(EAX=07H,ECX=0):EBX\[25\] is clear on bare metal.
    NoPtInCpuid,
    /// CPUID.07H:EBX\[25\] is clear under a hypervisor, which may hide PT.
    HiddenByHypervisor {
        /// The hypervisor signature, when leaf 0x4000_0000 has one.
        hypervisor: Option<String>,
    },
    /// No `intel_pt` PMU in sysfs (kernel without CONFIG_PERF_EVENTS/intel_pt).
    NoPmu {
        /// The directory looked at.
        path: String,
    },
    /// The PMU directory exists but could not be read.
    PmuUnreadable {
        /// The error text.
        error: String,
    },
    /// `perf_event_paranoid` forbids unprivileged perf use (distribution levels above 2).
    Paranoid {
        /// The level.
        level: i32,
    },
    /// The perf mlock allowance plus RLIMIT_MEMLOCK is below the buffers needed.
    MlockLimit {
        /// Bytes the default buffers need.
        needed: u64,
        /// Bytes allowed.
        allowed: u64,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::NotX86 => write!(f, "not an x86 machine: Intel PT does not exist here"),
            Blocker::NotIntel { vendor } => {
                write!(f, "the CPU vendor is {vendor}, not Intel: no Intel PT in CPUID")
            }
            Blocker::NoPtInCpuid => write!(f, "no PT in CPUID: CPUID.(EAX=07H,ECX=0):EBX[25] = 0"),
            Blocker::HiddenByHypervisor { hypervisor } => write!(
                f,
                "no PT in CPUID under a hypervisor ({}): the hypervisor hides or lacks Intel PT",
                hypervisor.as_deref().unwrap_or("unnamed")
            ),
            Blocker::NoPmu { path } => write!(f, "no intel_pt PMU: {path} does not exist"),
            Blocker::PmuUnreadable { error } => write!(f, "intel_pt PMU unreadable: {error}"),
            Blocker::Paranoid { level } => write!(
                f,
                "kernel.perf_event_paranoid = {level} forbids unprivileged perf (need <= 2, CAP_PERFMON or root)"
            ),
            Blocker::MlockLimit { needed, allowed } => write!(
                f,
                "mlock limit: buffers need {} KiB, perf_event_mlock_kb + RLIMIT_MEMLOCK allow {} KiB",
                needed / 1024,
                allowed / 1024
            ),
        }
    }
}

/// Facts about the calling process that gate perf use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessLimits {
    /// Root, CAP_PERFMON or CAP_SYS_ADMIN in the effective set.
    pub perfmon: bool,
    /// CAP_IPC_LOCK in the effective set (mlock limits ignored).
    pub ipc_lock: bool,
    /// RLIMIT_MEMLOCK soft limit in bytes (None = unlimited).
    pub memlock: Option<u64>,
    /// Online CPUs.
    pub online_cpus: u64,
}

impl ProcessLimits {
    /// The limits of this process.
    pub fn current() -> Self {
        let cap_eff = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .unwrap_or(0);
        const CAP_IPC_LOCK: u32 = 14;
        const CAP_SYS_ADMIN: u32 = 21;
        const CAP_PERFMON: u32 = 38;
        let has = |c: u32| cap_eff & (1u64 << c) != 0;
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the valid, owned struct.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
        let memlock = if rc == 0 && rl.rlim_cur != libc::RLIM_INFINITY {
            Some(rl.rlim_cur)
        } else {
            None
        };
        let online_cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        ProcessLimits {
            perfmon: has(CAP_PERFMON) || has(CAP_SYS_ADMIN),
            ipc_lock: has(CAP_IPC_LOCK),
            memlock,
            online_cpus,
        }
    }
}

/// The verdict: blockers (empty when tracing is possible) plus remarks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// Everything that prevents tracing.
    pub blockers: Vec<Blocker>,
    /// Limitations that do not prevent tracing (e.g. user space only).
    pub notes: Vec<String>,
}

impl Readiness {
    /// True when nothing blocks tracing.
    pub fn can_trace(&self) -> bool {
        self.blockers.is_empty()
    }

    /// Judges the CPUID and kernel probes for a process with `limits`.
    pub fn assess(
        cpu: &CpuidProbe,
        kernel: &KernelProbe,
        limits: &ProcessLimits,
        is_x86: bool,
    ) -> Self {
        let mut blockers = Vec::new();
        let mut notes = Vec::new();
        let id = &cpu.identity;
        let virtualised = id.under_hypervisor || id.hypervisor.is_some();
        if !is_x86 {
            blockers.push(Blocker::NotX86);
        } else if id.vendor != Vendor::Intel {
            blockers.push(Blocker::NotIntel {
                vendor: id.vendor.to_string(),
            });
        } else if !id.pt_supported && virtualised {
            blockers.push(Blocker::HiddenByHypervisor {
                hypervisor: id.hypervisor.clone(),
            });
        } else if !id.pt_supported {
            blockers.push(Blocker::NoPtInCpuid);
        }
        if is_x86 && virtualised {
            notes.push(format!(
                "running under a hypervisor ({})",
                id.hypervisor.as_deref().unwrap_or("unnamed")
            ));
        }
        match &kernel.pmu {
            Ok(_) => {}
            Err(SysfsError::NoPmu(p)) => blockers.push(Blocker::NoPmu {
                path: p.display().to_string(),
            }),
            Err(e) => blockers.push(Blocker::PmuUnreadable {
                error: e.to_string(),
            }),
        }
        if let Ok(settings) = &kernel.settings {
            if let Some(level) = settings.paranoid {
                if !limits.perfmon {
                    if level > 2 {
                        blockers.push(Blocker::Paranoid { level });
                    } else if level == 2 {
                        notes.push(
                            "perf_event_paranoid = 2: user space of own processes only".into(),
                        );
                    } else if level >= 0 {
                        notes.push(format!(
                            "perf_event_paranoid = {level}: per-task kernel tracing allowed"
                        ));
                    }
                }
                let unlimited = level == -1 || limits.ipc_lock;
                if let (false, Some(kb)) = (unlimited, settings.mlock_kb) {
                    let needed = DEFAULT_DATA_BYTES + 4096 + DEFAULT_AUX_BYTES;
                    let allowance = kb
                        .saturating_mul(1024)
                        .saturating_mul(limits.online_cpus.max(1));
                    let allowed = match limits.memlock {
                        Some(m) => allowance.saturating_add(m),
                        None => u64::MAX,
                    };
                    if allowed < needed {
                        blockers.push(Blocker::MlockLimit { needed, allowed });
                    }
                }
            }
        }
        Readiness { blockers, notes }
    }

    /// Probes this machine (CPUID, `/sys`, `/proc`, this process).
    pub fn host() -> (CpuidProbe, KernelProbe, Self) {
        let cpu = CpuidProbe::host();
        let kernel = KernelProbe::read(Path::new("/"));
        let r = Self::assess(
            &cpu,
            &kernel,
            &ProcessLimits::current(),
            cfg!(any(target_arch = "x86", target_arch = "x86_64")),
        );
        (cpu, kernel, r)
    }

    /// One line: "tracing possible" or the blockers joined by "; ".
    pub fn summary(&self) -> String {
        if self.can_trace() {
            "Intel PT tracing is possible here".to_string()
        } else {
            let r: Vec<String> = self.blockers.iter().map(|b| b.to_string()).collect();
            format!("Intel PT tracing is not possible here: {}", r.join("; "))
        }
    }
}
