//! Proptest round trips: every record kind (and every typed feature) written by our
//! writers reads back equal through our readers, in file mode and in pipe mode.
use proptest::collection::vec;
use proptest::prelude::*;
use pt_perf_data::*;

fn leak<T>(v: Vec<T>) -> &'static [T] {
    Box::leak(v.into_boxed_slice())
}

fn bytes8(max_words: usize) -> impl Strategy<Value = &'static [u8]> {
    vec(any::<u8>(), 0..=max_words).prop_map(|mut v| {
        v.resize(v.len() / 8 * 8 + if v.len() % 8 == 0 { 0 } else { 8 }, 0x5a);
        leak(v)
    })
}

fn cstr(max: usize) -> impl Strategy<Value = CStr<'static>> {
    vec(1u8..=255, 0..=max).prop_map(|v| CStr(leak(v)))
}

fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[a-zA-Z0-9 /._-]{{0,{max}}}")).unwrap()
}

const IDS: [u64; 2] = [11, 22];

/// An event: IDENTIFIER always (perf needs one id position for all events), the other
/// sample_type and read_format bits at random.
fn attr() -> impl Strategy<Value = EventAttr> {
    (
        any::<u64>(),
        0u64..32,
        any::<bool>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(st, rf, hw, ru, ri)| EventAttr {
            type_: attr_type::SOFTWARE,
            size: ATTR_SIZE,
            sample_type: SampleType((st & 0x1ff_ffff) | SampleType::IDENTIFIER),
            read_format: rf,
            flags: AttrFlags(AttrFlags::SAMPLE_ID_ALL),
            branch_sample_type: if hw { 1 << 17 } else { 0 },
            sample_regs_user: ru & 0xffff,
            sample_regs_intr: ri & 0xffff,
            ..Default::default()
        })
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    on: bool,
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    if on {
        s.prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    }
}

fn sample_id(a: EventAttr, id: u64) -> BoxedStrategy<SampleId> {
    let st = a.sample_type;
    (
        opt(st.has(SampleType::TID), any::<(u32, u32)>()),
        opt(st.has(SampleType::TIME), any::<u64>()),
        opt(st.has(SampleType::STREAM_ID), any::<u64>()),
        opt(st.has(SampleType::CPU), any::<u32>()),
    )
        .prop_map(move |(pt, time, stream_id, cpu)| SampleId {
            pid: pt.map(|p| p.0),
            tid: pt.map(|p| p.1),
            time,
            id: Some(id),
            stream_id,
            cpu,
            identifier: None,
        })
        .boxed()
}

fn read_values(rf: u64) -> impl Strategy<Value = U64s<'static>> {
    let per = 1 + (rf & read_format::ID != 0) as usize + (rf & read_format::LOST != 0) as usize;
    let times = (rf & read_format::TOTAL_TIME_ENABLED != 0) as usize
        + (rf & read_format::TOTAL_TIME_RUNNING != 0) as usize;
    let group = rf & read_format::GROUP != 0;
    (0usize..3, vec(any::<u64>(), 20)).prop_map(move |(nr, vals)| {
        let n = if group {
            1 + times + nr * per
        } else {
            times + per
        };
        let mut words: Vec<u64> = vals[..n].to_vec();
        if group {
            words[0] = nr as u64;
        }
        U64s::new(leak(words.iter().flat_map(|w| w.to_le_bytes()).collect()))
    })
}

fn regs(mask: u64) -> impl Strategy<Value = Regs<'static>> {
    let n = mask.count_ones() as usize;
    (any::<bool>(), vec(any::<u64>(), n)).prop_map(move |(on, v)| {
        if on {
            Regs {
                abi: 2,
                regs: U64s::new(leak(v.iter().flat_map(|w| w.to_le_bytes()).collect())),
            }
        } else {
            Regs::default()
        }
    })
}

fn u64s(max: usize) -> impl Strategy<Value = U64s<'static>> {
    vec(any::<u64>(), 0..=max)
        .prop_map(|v| U64s::new(leak(v.iter().flat_map(|w| w.to_le_bytes()).collect())))
}

fn sample(a: EventAttr, id: u64) -> impl Strategy<Value = Sample<'static>> {
    let st = a.sample_type;
    let has = move |b| st.has(b);
    let hw = a.branch_sample_type != 0;
    let fixed = (
        any::<u16>(),
        opt(has(SampleType::IP), any::<u64>()),
        opt(has(SampleType::TID), any::<(u32, u32)>()),
        opt(has(SampleType::TIME), any::<u64>()),
        opt(has(SampleType::ADDR), any::<u64>()),
        opt(has(SampleType::STREAM_ID), any::<u64>()),
        opt(has(SampleType::CPU), any::<u32>()),
        opt(has(SampleType::PERIOD), any::<u64>()),
    );
    let variable = (
        opt(has(SampleType::READ), read_values(a.read_format)),
        opt(has(SampleType::CALLCHAIN), u64s(8)),
        opt(
            has(SampleType::RAW),
            (0usize..4).prop_map(|k| leak(vec![7u8; 4 + 8 * k])),
        ),
        opt(
            has(SampleType::BRANCH_STACK),
            (any::<u64>(), vec(any::<u8>(), 0..3 * 24)).prop_map(move |(h, e)| BranchStack {
                hw_idx: hw.then_some(h),
                entries: leak(e[..e.len() / 24 * 24].to_vec()),
            }),
        ),
        opt(has(SampleType::REGS_USER), regs(a.sample_regs_user)),
        opt(
            has(SampleType::STACK_USER),
            (bytes8(32), any::<u64>()).prop_map(|(d, dyn_size)| StackUser {
                data: d,
                dyn_size: if d.is_empty() { 0 } else { dyn_size },
            }),
        ),
    );
    let tail = (
        opt(
            st.0 & (SampleType::WEIGHT | SampleType::WEIGHT_STRUCT) != 0,
            any::<u64>(),
        ),
        opt(has(SampleType::DATA_SRC), any::<u64>()),
        opt(has(SampleType::TRANSACTION), any::<u64>()),
        opt(has(SampleType::REGS_INTR), regs(a.sample_regs_intr)),
        opt(has(SampleType::PHYS_ADDR), any::<u64>()),
        opt(has(SampleType::CGROUP), any::<u64>()),
        opt(has(SampleType::DATA_PAGE_SIZE), any::<u64>()),
        opt(has(SampleType::CODE_PAGE_SIZE), any::<u64>()),
        opt(has(SampleType::AUX), bytes8(32)),
    );
    (fixed, variable, tail).prop_map(
        move |(
            (misc, ip, pt, time, addr, stream_id, cpu, period),
            (read, callchain, raw, branch_stack, regs_user, stack_user),
            (weight, data_src, transaction, regs_intr, phys_addr, cgroup, dps, cps, aux),
        )| Sample {
            misc,
            id: Some(id),
            ip,
            pid: pt.map(|p| p.0),
            tid: pt.map(|p| p.1),
            time,
            addr,
            stream_id,
            cpu,
            period,
            read,
            callchain,
            raw,
            branch_stack,
            regs_user,
            stack_user,
            weight,
            data_src,
            transaction,
            regs_intr,
            phys_addr,
            cgroup,
            data_page_size: dps,
            code_page_size: cps,
            aux,
        },
    )
}

fn intel_pt_info() -> impl Strategy<Value = IntelPtInfo> {
    (
        vec(any::<u64>(), 10),
        0usize..5,
        vec(any::<u64>(), 7),
        vec(1u8..=255, 0..20),
    )
        .prop_map(|(w, groups, g, filter)| IntelPtInfo {
            pmu_type: w[0],
            time_shift: w[1],
            time_mult: w[2],
            time_zero: w[3],
            cap_user_time_zero: w[4],
            tsc_bit: w[5],
            noretcomp_bit: w[6],
            have_sched_switch: w[7],
            snapshot_mode: w[8],
            per_cpu_mmaps: w[9],
            mtc: (groups >= 1).then_some(intel_pt::IntelPtMtc {
                mtc_bit: g[0],
                mtc_freq_bits: g[1],
                tsc_ctc_ratio_n: g[2],
                tsc_ctc_ratio_d: g[3],
                cyc_bit: g[4],
            }),
            max_non_turbo_ratio: (groups >= 2).then_some(g[5]),
            filter: (groups >= 3).then_some(filter),
            cap_event_trace: (groups >= 4).then_some(g[6]),
        })
}

/// Any kernel record for event `a` (with id `id`).
fn kernel_record(a: EventAttr, id: u64) -> impl Strategy<Value = Record<'static>> {
    let sid = sample_id(a, id);
    let w = vec(any::<u64>(), 6);
    let m = any::<u16>();
    prop_oneof![
        (sid.clone(), w.clone(), cstr(60), m).prop_map(|(s, w, f, misc)| Record::Mmap(Mmap {
            misc,
            pid: w[0] as u32,
            tid: (w[0] >> 32) as u32,
            start: w[1],
            len: w[2],
            pgoff: w[3],
            filename: f,
            sample_id: s,
        })),
        (
            sid.clone(),
            w.clone(),
            cstr(60),
            m,
            any::<bool>(),
            vec(any::<u8>(), 20)
        )
            .prop_map(|(s, w, f, misc, bid, b)| Record::Mmap2(Mmap2 {
                misc: if bid {
                    misc | misc::MMAP_BUILD_ID
                } else {
                    misc & !misc::MMAP_BUILD_ID
                },
                pid: w[0] as u32,
                tid: (w[0] >> 32) as u32,
                start: w[1],
                len: w[2],
                pgoff: w[3],
                file: if bid {
                    Mmap2File::BuildId(BuildId::new(&b[..(w[5] % 21) as usize]))
                } else {
                    Mmap2File::Inode {
                        maj: w[4] as u32,
                        min: (w[4] >> 32) as u32,
                        ino: w[5],
                        ino_generation: w[1] ^ w[2],
                    }
                },
                prot: w[3] as u32,
                flags: (w[3] >> 32) as u32,
                filename: f,
                sample_id: s,
            })),
        (sid.clone(), w.clone(), cstr(15), m).prop_map(|(s, w, c, misc)| Record::Comm(Comm {
            misc,
            pid: w[0] as u32,
            tid: w[1] as u32,
            comm: c,
            sample_id: s,
        })),
        (sid.clone(), w.clone(), m, any::<bool>()).prop_map(|(s, w, misc, fork)| {
            let t = Task {
                misc,
                pid: w[0] as u32,
                ppid: w[1] as u32,
                tid: w[2] as u32,
                ptid: w[3] as u32,
                time: w[4],
                sample_id: s,
            };
            if fork {
                Record::Fork(t)
            } else {
                Record::Exit(t)
            }
        }),
        (sid.clone(), w.clone(), m).prop_map(|(s, w, misc)| Record::Lost(Lost {
            misc,
            id: w[0],
            lost: w[1],
            sample_id: s,
        })),
        (sid.clone(), w.clone(), m).prop_map(|(s, w, misc)| Record::LostSamples(LostSamples {
            misc,
            lost: w[1],
            sample_id: s,
        })),
        (sid.clone(), w.clone(), m, any::<bool>()).prop_map(|(s, w, misc, on)| {
            let t = Throttle {
                misc,
                time: w[0],
                id: w[1],
                stream_id: w[2],
                sample_id: s,
            };
            if on {
                Record::Throttle(t)
            } else {
                Record::Unthrottle(t)
            }
        }),
        (sid.clone(), w.clone(), m).prop_map(|(s, w, misc)| Record::Aux(Aux {
            misc,
            aux_offset: w[0],
            aux_size: w[1],
            flags: AuxFlags(w[2]),
            sample_id: s,
        })),
        (sid.clone(), w.clone(), m).prop_map(|(s, w, misc)| Record::ItraceStart(ItraceStart {
            misc,
            pid: w[0] as u32,
            tid: w[1] as u32,
            sample_id: s,
        })),
        (sid.clone(), m).prop_map(|(s, misc)| Record::Switch(Switch { misc, sample_id: s })),
        (sid.clone(), w.clone(), m).prop_map(|(s, w, misc)| Record::SwitchCpuWide(SwitchCpuWide {
            misc,
            next_prev_pid: w[0] as u32,
            next_prev_tid: w[1] as u32,
            sample_id: s,
        })),
        (sid, w, m).prop_map(|(s, w, misc)| Record::AuxOutputHwId(AuxOutputHwId {
            misc,
            hw_id: w[0],
            sample_id: s,
        })),
        sample(a, id).prop_map(Record::Sample),
    ]
}

fn user_record() -> impl Strategy<Value = Record<'static>> {
    let w = vec(any::<u64>(), 8);
    prop_oneof![
        (cstr(64), any::<u64>())
            .prop_map(|(name, event_id)| Record::HeaderEventType { event_id, name }),
        bytes8(40).prop_map(|data| Record::HeaderTracingData { data }),
        (
            any::<u16>(),
            any::<i32>(),
            vec(any::<u8>(), 0..=20),
            cstr(80)
        )
            .prop_map(|(misc, pid, b, f)| Record::HeaderBuildId(BuildIdRecord {
                misc: misc | misc::BUILD_ID_SIZE,
                pid,
                build_id: BuildId::new(&b),
                filename: f,
            })),
        (1u64..40, vec(any::<u8>(), 0..40)).prop_map(|(feature, d)| Record::HeaderFeature {
            feature,
            data: leak(d)
        }),
        Just(Record::FinishedRound),
        Just(Record::FinishedInit),
        (
            vec(any::<(u64, u64, u64, u64)>(), 0..4),
            any::<bool>(),
            any::<(u64, u64)>()
        )
            .prop_map(|(v, ext, m)| Record::IdIndex(
                v.into_iter()
                    .map(|(id, idx, cpu, tid)| IdIndexEntry {
                        id,
                        idx,
                        cpu,
                        tid,
                        machine: ext.then_some(m),
                    })
                    .collect()
            )),
        intel_pt_info().prop_map(|pt| Record::AuxtraceInfo(AuxtraceInfo {
            kind: auxtrace_type::INTEL_PT,
            private: AuxtracePrivate::IntelPt(pt),
        })),
        (2u32..7, bytes8(40)).prop_map(|(kind, b)| Record::AuxtraceInfo(AuxtraceInfo {
            kind,
            private: AuxtracePrivate::Raw(U64s::new(b)),
        })),
        (w.clone(), bytes8(100)).prop_map(|(w, data)| Record::Auxtrace(Auxtrace {
            offset: w[0],
            reference: w[1],
            idx: w[2] as u32,
            tid: w[3] as u32,
            cpu: w[4] as u32,
            data,
        })),
        (w.clone(), cstr(64), any::<Option<(u32, u32)>>()).prop_map(|(w, msg, machine)| {
            Record::AuxtraceError(AuxtraceError {
                kind: w[0] as u32,
                code: w[1] as u32,
                cpu: w[2] as u32,
                pid: w[3] as u32,
                tid: w[4] as u32,
                fmt: w[5] as u32,
                ip: w[6],
                time: w[7],
                msg,
                machine,
            })
        }),
        vec((any::<u64>(), cstr(16)), 0..4).prop_map(|v| Record::ThreadMap(
            v.into_iter()
                .map(|(pid, comm)| ThreadMapEntry { pid, comm })
                .collect()
        )),
        prop_oneof![
            vec(any::<u16>(), 0..6).prop_map(CpuMap::Cpus),
            vec(any::<u32>(), 0..4).prop_map(|v| CpuMap::Mask {
                long_size: 4,
                words: v.into_iter().map(u64::from).collect()
            }),
            vec(any::<u64>(), 0..4).prop_map(|words| CpuMap::Mask {
                long_size: 8,
                words
            }),
            any::<(bool, u16, u16)>().prop_map(|(any_cpu, start, end)| CpuMap::Range {
                any_cpu,
                start,
                end
            }),
        ]
        .prop_map(Record::CpuMap),
        (w, any::<Option<(bool, bool)>>()).prop_map(|(w, ext)| Record::TimeConv(TimeConv {
            time_shift: w[0],
            time_mult: w[1],
            time_zero: w[2],
            ext: ext.map(|(z, s)| TimeConvExt {
                time_cycles: w[3],
                time_mask: w[4],
                cap_user_time_zero: z,
                cap_user_time_short: s,
            }),
        })),
        (
            prop_oneof![16u32..21, 86u32..200],
            any::<u16>(),
            vec(any::<u8>(), 0..64)
        )
            .prop_map(|(ty, misc, body)| Record::Raw(RawRecord {
                ty,
                misc,
                body: leak(body)
            })),
    ]
}

fn events(a: EventAttr, b: EventAttr) -> Vec<EventDesc> {
    vec![
        EventDesc {
            attr: a,
            ids: vec![IDS[0]],
            name: Some("a".into()),
        },
        EventDesc {
            attr: b,
            ids: vec![IDS[1]],
            name: Some("b".into()),
        },
    ]
}

fn records() -> impl Strategy<Value = (EventAttr, EventAttr, Vec<Record<'static>>)> {
    (attr(), attr()).prop_flat_map(|(a, b)| {
        let one = prop_oneof![
            kernel_record(a, IDS[0]),
            kernel_record(b, IDS[1]),
            user_record(),
        ];
        (Just(a), Just(b), vec(one, 1..24))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_record_reads_back_equal_in_file_mode((a, b, recs) in records()) {
        let mut w = PerfFileWriter::new(std::io::Cursor::new(Vec::new()), events(a, b)).unwrap();
        for r in &recs {
            w.write(r).unwrap();
        }
        let bytes = w.finish().unwrap().into_inner();
        let f = PerfFile::parse(&bytes).unwrap();
        prop_assert!(f.warnings().is_empty());
        prop_assert_eq!(f.events(), &events(a, b)[..]);
        let back: Vec<Record<'_>> = f.records().map(|r| r.unwrap().1).collect();
        prop_assert_eq!(&back, &recs);
        // Time order keeps every record.
        prop_assert_eq!(f.ordered_records().count(), recs.len());
    }

    #[test]
    fn every_record_reads_back_equal_in_pipe_mode((a, b, recs) in records()) {
        let mut w = PipeWriter::new(Vec::new()).unwrap();
        let mut all = Vec::new();
        for e in events(a, b) {
            let ids = leak(e.ids.iter().flat_map(|i| i.to_le_bytes()).collect());
            all.push(Record::HeaderAttr { attr: e.attr, ids: U64s::new(ids) });
        }
        all.extend(recs.iter().filter(|r| !matches!(r, Record::HeaderAttr { .. })).cloned());
        for r in &all {
            w.write(r).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut p = PipeReader::new(&bytes[..]).unwrap();
        let mut back = Vec::new();
        while let Some((_, r)) = p.next_record().unwrap() {
            back.push(format!("{r:?}"));
        }
        let want: Vec<String> = all.iter().map(|r| format!("{r:?}")).collect();
        prop_assert_eq!(back, want);
        let f = PerfFile::parse(&bytes).unwrap();
        prop_assert_eq!(f.records().count(), all.len());
    }

    #[test]
    fn typed_features_read_back_equal(
        s in text(40),
        strs in vec(text(20), 0..4),
        n in 0u32..4,
        w in vec(any::<u64>(), 4),
        pmus in vec((any::<u32>(), text(12)), 0..4),
        bids in vec((any::<u16>(), any::<i32>(), vec(any::<u8>(), 0..=20), "[a-z/]{1,30}"), 0..3),
    ) {
        let topo = features::CpuTopology {
            package_cpus: strs.clone(),
            core_cpus: strs.clone(),
            cpus: (0..n).map(|i| (i, i / 2)).collect(),
            die_cpus: if n > 0 { strs.clone() } else { vec![] },
            die_ids: (0..if n > 0 { n } else { 0 }).collect(),
        };
        let all = vec![
            Feature::Hostname(s.clone()),
            Feature::OsRelease(s.clone()),
            Feature::Version(s.clone()),
            Feature::Arch(s.clone()),
            Feature::CpuDesc(s.clone()),
            Feature::CpuId(s.clone()),
            Feature::NrCpus { available: n, online: n },
            Feature::TotalMem(w[0]),
            Feature::Cmdline(strs.clone()),
            Feature::CpuTopology(topo),
            Feature::PmuMappings(pmus),
            Feature::GroupDesc(strs.iter().map(|s| (s.clone(), n, n + 1)).collect()),
            Feature::Auxtrace(vec![features::AuxtraceIndexEntry { file_offset: w[1], size: 48 }]),
            Feature::SampleTime { first: w[2], last: w[3] },
            Feature::ClockId(w[0]),
            Feature::ClockData(features::ClockData { version: 1, clockid: n, tod_ns: w[1], clockid_ns: w[2] }),
            Feature::BuildId(bids.into_iter().map(|(m, pid, b, f)| BuildIdEntry {
                misc: m | misc::BUILD_ID_SIZE,
                pid,
                build_id: BuildId::new(&b),
                filename: f.into_bytes(),
            }).collect()),
            Feature::EventDesc(events(EventAttr { size: ATTR_SIZE, ..Default::default() }, EventAttr { size: ATTR_SIZE, type_: 3, ..Default::default() })),
            Feature::Raw { id: 200, data: w.iter().flat_map(|x| x.to_le_bytes()).collect() },
        ];
        let mut wr = PerfFileWriter::new(
            std::io::Cursor::new(Vec::new()),
            events(EventAttr { size: ATTR_SIZE, ..Default::default() }, EventAttr { size: ATTR_SIZE, type_: 3, ..Default::default() }),
        ).unwrap();
        for f in &all {
            wr.set_feature(f.clone());
        }
        // (An empty data section reads as an unfinished recording.)
        wr.write(&Record::FinishedRound).unwrap();
        let bytes = wr.finish().unwrap().into_inner();
        let f = PerfFile::parse(&bytes).unwrap();
        prop_assert!(f.warnings().is_empty());
        for want in &all {
            let got = f.feature(want.id()).unwrap().unwrap();
            prop_assert_eq!(&got, want);
        }
    }
}

/// A trailer whose identifier differs from its id (libipt's side-band tests write
/// such): the writer picks the event a reader finds, by the identifier, so that the
/// record reads back (found by the perf_data_reader fuzz target).
#[test]
fn the_identifier_names_the_event_when_it_differs_from_the_id() {
    let st = SampleType(
        SampleType::TID
            | SampleType::TIME
            | SampleType::ID
            | SampleType::STREAM_ID
            | SampleType::CPU
            | SampleType::IDENTIFIER,
    );
    let first = EventAttr {
        size: ATTR_SIZE,
        sample_type: st,
        flags: AttrFlags(AttrFlags::SAMPLE_ID_ALL),
        ..Default::default()
    };
    let second = EventAttr {
        size: ATTR_SIZE,
        sample_type: SampleType(SampleType::TID),
        ..Default::default()
    };
    let events = EventTable::new(vec![
        EventDesc {
            attr: first,
            ids: vec![1],
            name: None,
        },
        EventDesc {
            attr: second,
            ids: vec![7],
            name: None,
        },
    ]);
    let r = Record::Comm(Comm {
        misc: 0,
        pid: 1,
        tid: 1,
        comm: CStr(b"x"),
        sample_id: SampleId {
            pid: Some(1),
            tid: Some(1),
            time: Some(5),
            id: Some(7),
            stream_id: Some(0),
            cpu: Some(0),
            identifier: Some(1),
        },
    });
    let mut buf = Vec::new();
    records::encode_record(&r, &events, &mut buf).unwrap();
    let size = u16::from_le_bytes([buf[6], buf[7]]) as usize;
    let back = records::parse_record(3, 0, &buf[8..size], &[], 0, &events).unwrap();
    assert_eq!(back, r);
}
