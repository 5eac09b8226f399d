//! Perfetto's own trace format (protobuf `perfetto.protos.Trace`), compact:
//! track events on one packet sequence, function names, DSOs and argument
//! names interned (written once, then referred to by number).
//!
//! - a track per process, and below it one per thread (`TrackDescriptor` with a
//!   `ProcessDescriptor` / `ThreadDescriptor`);
//! - each call: a slice begin and end (`TYPE_SLICE_BEGIN`/`END`) on its
//!   thread, with its DSO and the calls left out below it as debug
//!   annotations; each thread's events in time order, callers' ends after
//!   their callees';
//! - trace begin and end, errors and lost data: instants; CBR: a counter track
//!   per CPU (MHz).
//!
//! The messages are the few fields of Perfetto's protos this needs, declared
//! with prost's derive (field numbers from perfetto/protos/perfetto/trace):
//! prost's code generator needs `protoc` at build time and Perfetto's whole
//! proto tree, for a handful of fields. Packets are encoded one at a time as
//! `Trace.packet` (field 1) entries, so the output streams.

use std::collections::HashMap;
use std::io::{self, Write};

use prost::Message;

use super::stacks::Slice;
use super::Timeline;
use crate::export::calls::{NO_CALL, NO_RETURN};

/// `TracePacket.sequence_flags`: `SEQ_INCREMENTAL_STATE_CLEARED`.
const SEQ_CLEARED: u32 = 1;
/// `SEQ_NEEDS_INCREMENTAL_STATE`.
const SEQ_NEEDS: u32 = 2;
/// `TrackEvent.Type`.
const SLICE_BEGIN: i32 = 1;
const SLICE_END: i32 = 2;
const INSTANT: i32 = 3;
const COUNTER: i32 = 4;
/// Our one packet sequence.
const SEQUENCE: u32 = 1;

/// `perfetto.protos.Trace` (only read back by the tests).
#[derive(Clone, PartialEq, Message)]
pub struct Trace {
    /// The packets.
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// `perfetto.protos.TracePacket`.
#[derive(Clone, PartialEq, Message)]
pub struct TracePacket {
    /// Time (ns).
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// The writer's sequence.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// A track event.
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    /// Names interned from here on.
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    /// `SEQ_*`.
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// A track.
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `perfetto.protos.TrackEvent`.
#[derive(Clone, PartialEq, Message)]
pub struct TrackEvent {
    /// Arguments.
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// `TYPE_*`.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    /// Interned name.
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    /// The track.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// Categories.
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    /// Name.
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// A counter's value.
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
}

/// `perfetto.protos.DebugAnnotation`.
#[derive(Clone, PartialEq, Message)]
pub struct DebugAnnotation {
    /// Interned name.
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    /// A flag.
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    /// A count.
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    /// An interned string.
    #[prost(uint64, optional, tag = "17")]
    pub string_value_iid: Option<u64>,
}

/// `perfetto.protos.InternedData`.
#[derive(Clone, PartialEq, Message)]
pub struct InternedData {
    /// Event names.
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<Interned>,
    /// Debug annotation names.
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<Interned>,
    /// Debug annotation string values (`InternedString`: bytes).
    #[prost(message, repeated, tag = "29")]
    pub debug_annotation_string_values: Vec<InternedBytes>,
}

/// `EventName` / `DebugAnnotationName`: an iid and a name.
#[derive(Clone, PartialEq, Message)]
pub struct Interned {
    /// Its number.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Its text.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

/// `InternedString`.
#[derive(Clone, PartialEq, Message)]
pub struct InternedBytes {
    /// Its number.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Its bytes.
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

/// `perfetto.protos.TrackDescriptor`.
#[derive(Clone, PartialEq, Message)]
pub struct TrackDescriptor {
    /// Its id.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// Its name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// A process's track.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// A thread's track.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    /// Its parent track.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// A counter track.
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// `perfetto.protos.ProcessDescriptor`.
#[derive(Clone, PartialEq, Message)]
pub struct ProcessDescriptor {
    /// pid.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// Its command.
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// `perfetto.protos.ThreadDescriptor`.
#[derive(Clone, PartialEq, Message)]
pub struct ThreadDescriptor {
    /// pid.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// tid.
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    /// Its command.
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `perfetto.protos.CounterDescriptor` (no field set: a plain counter).
#[derive(Clone, PartialEq, Message)]
pub struct CounterDescriptor {}

/// Track uuids: threads small (they are on every event, as varints), then
/// processes, counters and the trace's own.
fn thread_uuid(track: u32) -> u64 {
    u64::from(track) + 1
}
fn process_uuid(pid: i32) -> u64 {
    (1 << 33) | u64::from(pid as u32)
}
fn counter_uuid(cpu: i32) -> u64 {
    (2 << 33) | u64::from(cpu as u32)
}
const TRACE_UUID: u64 = 3 << 33;

/// Argument names (interned as these iids).
const ARG_DSO: u64 = 1;
const ARG_DROPPED: u64 = 2;
const ARG_NO_CALL: u64 = 3;
const ARG_NO_RETURN: u64 = 4;

struct Writer<'w> {
    out: &'w mut dyn Write,
    buf: Vec<u8>,
    first: bool,
}

impl Writer<'_> {
    /// Writes `p` as one `Trace.packet`. The first clears the interning
    /// state; those that refer to interned names say that they need it.
    fn packet(&mut self, mut p: TracePacket) -> io::Result<()> {
        p.trusted_packet_sequence_id = Some(SEQUENCE);
        if self.first {
            p.sequence_flags = Some(SEQ_CLEARED);
        } else if p.track_event.as_ref().is_some_and(|e| e.name_iid.is_some()) {
            p.sequence_flags = Some(SEQ_NEEDS);
        }
        self.first = false;
        self.buf.clear();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut self.buf);
        prost::encoding::encode_varint(p.encoded_len() as u64, &mut self.buf);
        p.encode(&mut self.buf).map_err(io::Error::other)?;
        self.out.write_all(&self.buf)
    }
}

/// Writes `tl` as a Perfetto trace.
pub fn write(out: &mut dyn Write, tl: &Timeline) -> io::Result<()> {
    let mut w = Writer {
        out,
        buf: Vec::new(),
        first: true,
    };
    // The first packet clears the interning state and names the arguments.
    w.packet(TracePacket {
        interned_data: Some(InternedData {
            debug_annotation_names: [
                (ARG_DSO, "dso"),
                (ARG_DROPPED, "dropped_calls"),
                (ARG_NO_CALL, "no_call"),
                (ARG_NO_RETURN, "no_return"),
            ]
            .iter()
            .map(|&(iid, n)| Interned {
                iid: Some(iid),
                name: Some(n.into()),
            })
            .collect(),
            ..Default::default()
        }),
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(TRACE_UUID),
            name: Some("trace".into()),
            ..Default::default()
        }),
        ..Default::default()
    })?;
    let mut procs = std::collections::BTreeSet::new();
    for (i, t) in tl.tracks.iter().enumerate() {
        if !tl.shows_track(i as u32) {
            continue;
        }
        if procs.insert(t.pid) {
            w.packet(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(process_uuid(t.pid)),
                    process: Some(ProcessDescriptor {
                        pid: Some(t.pid),
                        process_name: Some(t.comm.clone()),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })?;
        }
        w.packet(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(thread_uuid(i as u32)),
                parent_uuid: Some(process_uuid(t.pid)),
                thread: Some(ThreadDescriptor {
                    pid: Some(t.pid),
                    tid: Some(t.tid),
                    thread_name: Some(t.comm.clone()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })?;
    }
    let mut cpus = std::collections::BTreeSet::new();
    for c in &tl.cbr {
        if cpus.insert(c.cpu) {
            let name = if c.cpu >= 0 {
                format!("CBR cpu{} (MHz)", c.cpu)
            } else {
                "CBR (MHz)".into()
            };
            w.packet(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(counter_uuid(c.cpu)),
                    name: Some(name),
                    counter: Some(CounterDescriptor {}),
                    ..Default::default()
                }),
                ..Default::default()
            })?;
        }
    }

    // Names and DSOs by frame, interned at first use.
    let mut names: HashMap<u32, u64> = HashMap::new();
    let mut dsos: HashMap<&str, u64> = HashMap::new();
    // Open calls of the current thread: (end, depth).
    let mut open: Vec<(u64, u32)> = Vec::new();
    let mut track = u32::MAX;
    let end = |w: &mut Writer<'_>, t: u32, at: u64| {
        w.packet(TracePacket {
            timestamp: Some(at),
            track_event: Some(TrackEvent {
                r#type: Some(SLICE_END),
                track_uuid: Some(thread_uuid(t)),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    for s in &tl.slices {
        let Slice {
            track: st,
            depth,
            frame,
            flags,
            begin,
            end: s_end,
            dropped,
            ..
        } = *s;
        if st != track {
            while let Some((e, _)) = open.pop() {
                end(&mut w, track, e)?;
            }
            track = st;
        }
        // Calls at this depth or deeper have ended (the slices come callers
        // first, each thread in time order).
        while open.last().is_some_and(|&(_, d)| d >= depth) {
            if let Some((e, _)) = open.pop() {
                end(&mut w, track, e)?;
            }
        }
        let Some(f) = tl.frames.get(frame as usize) else {
            continue;
        };
        let mut interned = InternedData::default();
        let next = names.len() as u64 + 1;
        let name_iid = *names.entry(frame).or_insert_with(|| {
            interned.event_names.push(Interned {
                iid: Some(next),
                name: Some(f.name.to_string()),
            });
            next
        });
        let next = dsos.len() as u64 + 1;
        let dso_iid = *dsos.entry(&f.dso).or_insert_with(|| {
            interned.debug_annotation_string_values.push(InternedBytes {
                iid: Some(next),
                str: Some(f.dso.as_bytes().to_vec()),
            });
            next
        });
        let mut args = vec![DebugAnnotation {
            name_iid: Some(ARG_DSO),
            string_value_iid: Some(dso_iid),
            ..Default::default()
        }];
        if dropped != 0 {
            args.push(DebugAnnotation {
                name_iid: Some(ARG_DROPPED),
                uint_value: Some(dropped),
                ..Default::default()
            });
        }
        for (bit, iid) in [(NO_CALL, ARG_NO_CALL), (NO_RETURN, ARG_NO_RETURN)] {
            if flags & bit != 0 {
                args.push(DebugAnnotation {
                    name_iid: Some(iid),
                    bool_value: Some(true),
                    ..Default::default()
                });
            }
        }
        let fresh =
            !interned.event_names.is_empty() || !interned.debug_annotation_string_values.is_empty();
        w.packet(TracePacket {
            timestamp: Some(begin),
            interned_data: fresh.then_some(interned),
            track_event: Some(TrackEvent {
                r#type: Some(SLICE_BEGIN),
                track_uuid: Some(thread_uuid(st)),
                name_iid: Some(name_iid),
                debug_annotations: args,
                ..Default::default()
            }),
            ..Default::default()
        })?;
        open.push((s_end, depth));
    }
    while let Some((e, _)) = open.pop() {
        end(&mut w, track, e)?;
    }
    for i in &tl.instants {
        w.packet(TracePacket {
            timestamp: Some(i.time),
            track_event: Some(TrackEvent {
                r#type: Some(INSTANT),
                track_uuid: Some(i.track.map_or(TRACE_UUID, thread_uuid)),
                name: Some(i.name.clone()),
                categories: vec![i.cat.into()],
                ..Default::default()
            }),
            ..Default::default()
        })?;
    }
    for c in &tl.cbr {
        w.packet(TracePacket {
            timestamp: Some(c.time),
            track_event: Some(TrackEvent {
                r#type: Some(COUNTER),
                track_uuid: Some(counter_uuid(c.cpu)),
                counter_value: Some(c.mhz as i64),
                ..Default::default()
            }),
            ..Default::default()
        })?;
    }
    Ok(())
}
