//! Header features: the sections after the data (file mode) or HEADER_FEATURE records
//! (pipe mode) that describe the machine and the recording.

use crate::attr::{EventAttr, EventDesc};
use crate::bytes::CStr;
use crate::bytes::{Cursor, Put};
use crate::error::{Error, ErrorKind, Result};
use crate::records::{encode_build_id, parse_build_id, BuildId, BuildIdRecord};

/// Feature numbers (`HEADER_*` of perf's header.h).
#[allow(missing_docs)]
pub mod feature_id {
    pub const TRACING_DATA: u16 = 1;
    pub const BUILD_ID: u16 = 2;
    pub const HOSTNAME: u16 = 3;
    pub const OSRELEASE: u16 = 4;
    pub const VERSION: u16 = 5;
    pub const ARCH: u16 = 6;
    pub const NRCPUS: u16 = 7;
    pub const CPUDESC: u16 = 8;
    pub const CPUID: u16 = 9;
    pub const TOTAL_MEM: u16 = 10;
    pub const CMDLINE: u16 = 11;
    pub const EVENT_DESC: u16 = 12;
    pub const CPU_TOPOLOGY: u16 = 13;
    pub const NUMA_TOPOLOGY: u16 = 14;
    pub const BRANCH_STACK: u16 = 15;
    pub const PMU_MAPPINGS: u16 = 16;
    pub const GROUP_DESC: u16 = 17;
    pub const AUXTRACE: u16 = 18;
    pub const STAT: u16 = 19;
    pub const CACHE: u16 = 20;
    pub const SAMPLE_TIME: u16 = 21;
    pub const MEM_TOPOLOGY: u16 = 22;
    pub const CLOCKID: u16 = 23;
    pub const DIR_FORMAT: u16 = 24;
    pub const BPF_PROG_INFO: u16 = 25;
    pub const BPF_BTF: u16 = 26;
    pub const COMPRESSED: u16 = 27;
    pub const CPU_PMU_CAPS: u16 = 28;
    pub const CLOCK_DATA: u16 = 29;
    pub const HYBRID_TOPOLOGY: u16 = 30;
    pub const PMU_CAPS: u16 = 31;
    /// One past the last feature perf 6.1 knows.
    pub const LAST: u16 = 32;

    /// perf's name of a feature.
    pub fn name(id: u16) -> &'static str {
        const NAMES: [&str; 32] = [
            "reserved",
            "trace_info",
            "build_id",
            "hostname",
            "osrelease",
            "version",
            "arch",
            "nrcpus",
            "cpudesc",
            "cpuid",
            "total_mem",
            "cmdline",
            "event_desc",
            "cpu_topology",
            "numa_topology",
            "branch_stack",
            "pmu_mappings",
            "group_desc",
            "auxtrace",
            "stat",
            "cache",
            "sample_time",
            "mem_topology",
            "clockid",
            "dir_format",
            "bpf_prog_info",
            "bpf_btf",
            "compressed",
            "cpu_pmu_caps",
            "clock_data",
            "hybrid_topology",
            "pmu_caps",
        ];
        NAMES.get(id as usize).copied().unwrap_or("unknown")
    }
}

/// CPU_TOPOLOGY.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CpuTopology {
    /// CPU lists sharing a package (e.g. `0-3`).
    pub package_cpus: Vec<String>,
    /// CPU lists sharing a core.
    pub core_cpus: Vec<String>,
    /// (core_id, socket_id) per available CPU, when present.
    pub cpus: Vec<(u32, u32)>,
    /// CPU lists sharing a die, when present.
    pub die_cpus: Vec<String>,
    /// die_id per available CPU, when present.
    pub die_ids: Vec<u32>,
}

/// CLOCK_DATA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClockData {
    /// Format version (1).
    pub version: u32,
    /// The clockid.
    pub clockid: u32,
    /// Wall-clock reference time (ns).
    pub tod_ns: u64,
    /// The clock's reference time (ns).
    pub clockid_ns: u64,
}

/// One AUXTRACE index entry: where an AUXTRACE record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AuxtraceIndexEntry {
    /// File offset of the AUXTRACE record.
    pub file_offset: u64,
    /// Its header size (48).
    pub size: u64,
}

/// An owned BUILD_ID entry.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BuildIdEntry {
    /// Header misc (cpumode).
    pub misc: u16,
    /// Process id (-1: kernel).
    pub pid: i32,
    /// The build id.
    pub build_id: BuildId,
    /// The DSO's path.
    pub filename: Vec<u8>,
}

/// A header feature.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Feature {
    TracingData(Vec<u8>),
    BuildId(Vec<BuildIdEntry>),
    Hostname(String),
    OsRelease(String),
    Version(String),
    Arch(String),
    /// (CPUs available (max present + 1), CPUs online).
    NrCpus {
        available: u32,
        online: u32,
    },
    CpuDesc(String),
    /// e.g. `GenuineIntel,6,142,10`: family/model/stepping (perf's intel_pt keys errata on it).
    CpuId(String),
    /// kB.
    TotalMem(u64),
    /// perf's path, then its arguments.
    Cmdline(Vec<String>),
    EventDesc(Vec<EventDesc>),
    CpuTopology(CpuTopology),
    /// (PMU type, name) of every PMU.
    PmuMappings(Vec<(u32, String)>),
    /// (group name, leader index, member count).
    GroupDesc(Vec<(String, u32, u32)>),
    Auxtrace(Vec<AuxtraceIndexEntry>),
    /// (first, last) sample time.
    SampleTime {
        first: u64,
        last: u64,
    },
    /// The clock's resolution in ns.
    ClockId(u64),
    ClockData(ClockData),
    /// A feature kept as bytes (other numbers, or features this layer does not type).
    Raw {
        id: u16,
        data: Vec<u8>,
    },
}

impl Feature {
    /// The feature's number.
    pub fn id(&self) -> u16 {
        use feature_id as f;
        match self {
            Feature::TracingData(_) => f::TRACING_DATA,
            Feature::BuildId(_) => f::BUILD_ID,
            Feature::Hostname(_) => f::HOSTNAME,
            Feature::OsRelease(_) => f::OSRELEASE,
            Feature::Version(_) => f::VERSION,
            Feature::Arch(_) => f::ARCH,
            Feature::NrCpus { .. } => f::NRCPUS,
            Feature::CpuDesc(_) => f::CPUDESC,
            Feature::CpuId(_) => f::CPUID,
            Feature::TotalMem(_) => f::TOTAL_MEM,
            Feature::Cmdline(_) => f::CMDLINE,
            Feature::EventDesc(_) => f::EVENT_DESC,
            Feature::CpuTopology(_) => f::CPU_TOPOLOGY,
            Feature::PmuMappings(_) => f::PMU_MAPPINGS,
            Feature::GroupDesc(_) => f::GROUP_DESC,
            Feature::Auxtrace(_) => f::AUXTRACE,
            Feature::SampleTime { .. } => f::SAMPLE_TIME,
            Feature::ClockId(_) => f::CLOCKID,
            Feature::ClockData(_) => f::CLOCK_DATA,
            Feature::Raw { id, .. } => *id,
        }
    }

    /// Decodes feature `id` from its section `data` (`at`: the section's file offset;
    /// `nr_cpus`: the available CPUs from NRCPUS, which CPU_TOPOLOGY needs).
    pub fn parse(id: u16, data: &[u8], at: u64, nr_cpus: Option<u32>) -> Result<Feature> {
        use feature_id as f;
        let mut c = Cursor::new(data, at, feature_id::name(id));
        let strings = |c: &mut Cursor<'_>| -> Result<Vec<String>> {
            let n = c.u32()?;
            let n = c.count(n as u64, 4, "feature string list")?;
            (0..n).map(|_| c.perf_string()).collect()
        };
        Ok(match id {
            f::TRACING_DATA => Feature::TracingData(data.to_vec()),
            f::BUILD_ID => {
                let mut v = Vec::new();
                while c.remaining() >= 8 {
                    let ty_at = c.offset();
                    let _ty = c.u32()?;
                    let misc = c.u16()?;
                    let size = c.u16()?;
                    if size < 8 {
                        return Err(Error::new(
                            ty_at,
                            ErrorKind::RecordTooSmall { ty: _ty, size },
                        ));
                    }
                    let body = c.bytes(size as usize - 8)?;
                    let mut bc = Cursor::new(body, ty_at + 8, "build_id entry");
                    let b = parse_build_id(misc, &mut bc)?;
                    v.push(BuildIdEntry {
                        misc: b.misc,
                        pid: b.pid,
                        build_id: b.build_id,
                        filename: b.filename.0.to_vec(),
                    });
                }
                Feature::BuildId(v)
            }
            f::HOSTNAME => Feature::Hostname(c.perf_string()?),
            f::OSRELEASE => Feature::OsRelease(c.perf_string()?),
            f::VERSION => Feature::Version(c.perf_string()?),
            f::ARCH => Feature::Arch(c.perf_string()?),
            f::CPUDESC => Feature::CpuDesc(c.perf_string()?),
            f::CPUID => Feature::CpuId(c.perf_string()?),
            f::NRCPUS => Feature::NrCpus {
                available: c.u32()?,
                online: c.u32()?,
            },
            f::TOTAL_MEM => Feature::TotalMem(c.u64()?),
            f::CMDLINE => Feature::Cmdline(strings(&mut c)?),
            f::EVENT_DESC => {
                let nre = c.u32()?;
                let sz = c.u32()?;
                if sz < crate::attr::ATTR_SIZE_VER0 {
                    return Err(Error::new(
                        c.offset(),
                        ErrorKind::AttrSize {
                            size: sz,
                            room: c.remaining() as u64,
                        },
                    ));
                }
                let n = c.count(nre as u64, sz as u64 + 8, "EVENT_DESC events")?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let at = c.offset();
                    let attr_bytes = c.bytes(sz as usize)?;
                    let attr = EventAttr::parse(attr_bytes, at)?;
                    let nri = c.u32()?;
                    let name = c.perf_string()?;
                    let nri = c.count(nri as u64, 8, "EVENT_DESC ids")?;
                    let ids = (0..nri).map(|_| c.u64()).collect::<Result<_>>()?;
                    v.push(EventDesc {
                        attr,
                        ids,
                        name: Some(name),
                    });
                }
                Feature::EventDesc(v)
            }
            f::CPU_TOPOLOGY => {
                let mut t = CpuTopology {
                    package_cpus: strings(&mut c)?,
                    core_cpus: strings(&mut c)?,
                    ..Default::default()
                };
                if let Some(n) = nr_cpus {
                    if c.remaining() as u64 >= n as u64 * 8 {
                        t.cpus = (0..n)
                            .map(|_| Ok((c.u32()?, c.u32()?)))
                            .collect::<Result<_>>()?;
                        if c.remaining() >= 4 {
                            t.die_cpus = strings(&mut c)?;
                            let k = c.count(n as u64, 4, "CPU_TOPOLOGY die ids")?;
                            t.die_ids = (0..k).map(|_| c.u32()).collect::<Result<_>>()?;
                        }
                    }
                }
                Feature::CpuTopology(t)
            }
            f::PMU_MAPPINGS => {
                let n = c.u32()?;
                let n = c.count(n as u64, 8, "PMU_MAPPINGS")?;
                let v = (0..n)
                    .map(|_| Ok((c.u32()?, c.perf_string()?)))
                    .collect::<Result<_>>()?;
                Feature::PmuMappings(v)
            }
            f::GROUP_DESC => {
                let n = c.u32()?;
                let n = c.count(n as u64, 12, "GROUP_DESC")?;
                let v = (0..n)
                    .map(|_| Ok((c.perf_string()?, c.u32()?, c.u32()?)))
                    .collect::<Result<_>>()?;
                Feature::GroupDesc(v)
            }
            f::AUXTRACE => {
                let n = c.u64()?;
                let n = c.count(n, 16, "AUXTRACE index")?;
                let v = (0..n)
                    .map(|_| {
                        Ok(AuxtraceIndexEntry {
                            file_offset: c.u64()?,
                            size: c.u64()?,
                        })
                    })
                    .collect::<Result<_>>()?;
                Feature::Auxtrace(v)
            }
            f::SAMPLE_TIME => Feature::SampleTime {
                first: c.u64()?,
                last: c.u64()?,
            },
            f::CLOCKID => Feature::ClockId(c.u64()?),
            f::CLOCK_DATA => Feature::ClockData(ClockData {
                version: c.u32()?,
                clockid: c.u32()?,
                tod_ns: c.u64()?,
                clockid_ns: c.u64()?,
            }),
            _ => Feature::Raw {
                id,
                data: data.to_vec(),
            },
        })
    }

    /// The feature's section bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let strings = |out: &mut Vec<u8>, v: &[String]| {
            out.put_u32(v.len() as u32);
            for s in v {
                out.put_perf_string(s);
            }
        };
        match self {
            Feature::TracingData(d) => out.extend_from_slice(d),
            Feature::BuildId(v) => {
                for e in v {
                    let start = out.len();
                    out.extend_from_slice(&[0; 8]);
                    let misc = encode_build_id(
                        &BuildIdRecord {
                            misc: e.misc,
                            pid: e.pid,
                            build_id: e.build_id,
                            filename: CStr(&e.filename),
                        },
                        out,
                    );
                    let size = (out.len() - start) as u16;
                    out[start..start + 4].copy_from_slice(
                        &crate::records::record_type::HEADER_BUILD_ID.to_le_bytes(),
                    );
                    out[start + 4..start + 6].copy_from_slice(&misc.to_le_bytes());
                    out[start + 6..start + 8].copy_from_slice(&size.to_le_bytes());
                }
            }
            Feature::Hostname(s)
            | Feature::OsRelease(s)
            | Feature::Version(s)
            | Feature::Arch(s)
            | Feature::CpuDesc(s)
            | Feature::CpuId(s) => out.put_perf_string(s),
            Feature::NrCpus { available, online } => {
                out.put_u32(*available);
                out.put_u32(*online);
            }
            Feature::TotalMem(kb) => out.put_u64(*kb),
            Feature::Cmdline(v) => strings(out, v),
            Feature::EventDesc(v) => {
                // One attr size for all: perf 6.1's, or a larger one an attr has.
                let sz = v
                    .iter()
                    .map(|e| e.attr.stored_size())
                    .max()
                    .unwrap_or(0)
                    .max(crate::attr::ATTR_SIZE as usize);
                out.put_u32(v.len() as u32);
                out.put_u32(sz as u32);
                for e in v {
                    let mut a = e.attr.to_bytes();
                    a.resize(sz, 0);
                    out.extend_from_slice(&a);
                    out.put_u32(e.ids.len() as u32);
                    out.put_perf_string(e.name.as_deref().unwrap_or(""));
                    for &id in &e.ids {
                        out.put_u64(id);
                    }
                }
            }
            Feature::CpuTopology(t) => {
                strings(out, &t.package_cpus);
                strings(out, &t.core_cpus);
                for &(core, socket) in &t.cpus {
                    out.put_u32(core);
                    out.put_u32(socket);
                }
                if !t.die_cpus.is_empty() || !t.die_ids.is_empty() {
                    strings(out, &t.die_cpus);
                    for &d in &t.die_ids {
                        out.put_u32(d);
                    }
                }
            }
            Feature::PmuMappings(v) => {
                out.put_u32(v.len() as u32);
                for (ty, name) in v {
                    out.put_u32(*ty);
                    out.put_perf_string(name);
                }
            }
            Feature::GroupDesc(v) => {
                out.put_u32(v.len() as u32);
                for (name, leader, n) in v {
                    out.put_perf_string(name);
                    out.put_u32(*leader);
                    out.put_u32(*n);
                }
            }
            Feature::Auxtrace(v) => {
                out.put_u64(v.len() as u64);
                for e in v {
                    out.put_u64(e.file_offset);
                    out.put_u64(e.size);
                }
            }
            Feature::SampleTime { first, last } => {
                out.put_u64(*first);
                out.put_u64(*last);
            }
            Feature::ClockId(ns) => out.put_u64(*ns),
            Feature::ClockData(d) => {
                out.put_u32(d.version);
                out.put_u32(d.clockid);
                out.put_u64(d.tod_ns);
                out.put_u64(d.clockid_ns);
            }
            Feature::Raw { data, .. } => out.extend_from_slice(data),
        }
    }
}

/// Features describing this machine, as perf writes them: HOSTNAME, OSRELEASE, VERSION
/// (`version`, the recording tool's), ARCH, NRCPUS, CPUDESC, CPUID, TOTAL_MEM, CMDLINE
/// (`cmdline`). What cannot be read (no /proc) is left out.
pub fn host_features(version: &str, cmdline: &[String]) -> Vec<Feature> {
    let mut v = Vec::new();
    let read = |p: &str| std::fs::read_to_string(p).ok();
    if let Some(h) = read("/proc/sys/kernel/hostname") {
        v.push(Feature::Hostname(h.trim().to_string()));
    }
    if let Some(r) = read("/proc/sys/kernel/osrelease") {
        v.push(Feature::OsRelease(r.trim().to_string()));
    }
    v.push(Feature::Version(version.to_string()));
    v.push(Feature::Arch(std::env::consts::ARCH.to_string()));
    let online = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let available = read("/sys/devices/system/cpu/present")
        .and_then(|s| {
            let last = s.trim().rsplit([',', '-']).next()?.parse::<u32>().ok()?;
            Some(last + 1)
        })
        .unwrap_or(online);
    v.push(Feature::NrCpus { available, online });
    if let Some(info) = read("/proc/cpuinfo") {
        let field = |name: &str| {
            info.lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        if let Some(d) = field("model name") {
            v.push(Feature::CpuDesc(d));
        }
        if let (Some(vendor), Some(fam), Some(model), Some(step)) = (
            field("vendor_id"),
            field("cpu family"),
            field("model"),
            field("stepping"),
        ) {
            v.push(Feature::CpuId(format!("{vendor},{fam},{model},{step}")));
        }
    }
    if let Some(m) = read("/proc/meminfo") {
        if let Some(kb) = m
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        {
            v.push(Feature::TotalMem(kb));
        }
    }
    v.push(Feature::Cmdline(cmdline.to_vec()));
    v
}
