//! The Chrome trace event format (JSON), as Perfetto's UI, chrome://tracing and
//! speedscope open it: an object with `traceEvents`, times in microseconds.
//!
//! - each thread: `process_name`/`thread_name` metadata (`ph: M`);
//! - each call: a complete event (`ph: X`, `cat: call`) with the DSO, the
//!   calls left out below it (`dropped_calls`) and whether its call or return
//!   was not seen (`no_call`, `no_return`) as arguments;
//! - trace begin and end, errors and lost data: instant events (`ph: i`) on
//!   their thread (`s: t`), or on the whole trace;
//! - CBR: a counter (`ph: C`) per CPU, in MHz.
//!
//! Times are perf's (ns) divided by 1000: the nearest double keeps them to the
//! nanosecond. Events go out one at a time, calls in the order [`super::Timeline`]
//! holds them (each thread's in time order, callers before callees).

use std::io::{self, Write};

use serde::Serialize;

use super::stacks::{Slice, Track};
use super::Timeline;
use crate::export::calls::{NO_CALL, NO_RETURN};

#[derive(Serialize)]
struct Meta<'a> {
    name: &'static str,
    ph: &'static str,
    pid: i64,
    tid: i64,
    args: NameArg<'a>,
}

#[derive(Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct Complete<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    ts: f64,
    dur: f64,
    pid: i64,
    tid: i64,
    args: CallArgs<'a>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

#[derive(Serialize)]
struct CallArgs<'a> {
    dso: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    dropped_calls: u64,
    #[serde(skip_serializing_if = "is_false")]
    no_call: bool,
    #[serde(skip_serializing_if = "is_false")]
    no_return: bool,
}

#[derive(Serialize)]
struct InstantEv<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    s: &'static str,
    ts: f64,
    pid: i64,
    tid: i64,
}

#[derive(Serialize)]
struct Counter<'a> {
    name: &'a str,
    ph: &'static str,
    ts: f64,
    pid: i64,
    args: CounterArgs,
}

#[derive(Serialize)]
#[allow(non_snake_case)]
struct CounterArgs {
    MHz: u64,
}

#[derive(Serialize)]
struct Other<'a> {
    tool: &'static str,
    input: &'a str,
    min_duration_ns: u64,
    dropped_calls: u64,
}

/// perf's ns as the format's microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn ids(t: &Track) -> (i64, i64) {
    (i64::from(t.pid), i64::from(t.tid))
}

/// Writes `tl` as a Chrome trace (one event a line).
pub fn write(out: &mut dyn Write, tl: &Timeline) -> io::Result<()> {
    let other = Other {
        tool: "ptperf timeline",
        input: &tl.input,
        min_duration_ns: tl.min_duration,
        dropped_calls: tl.dropped,
    };
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(&mut *out, &other)?;
    out.write_all(b",\"traceEvents\":[")?;
    let mut first = true;
    let mut ev = |out: &mut dyn Write, v: &dyn erased::Ser| -> io::Result<()> {
        out.write_all(if first { b"\n" } else { b",\n" })?;
        first = false;
        v.to(out)
    };
    let mut procs = std::collections::BTreeSet::new();
    for t in tl.shown_tracks() {
        let (pid, tid) = ids(t);
        if procs.insert(pid) {
            ev(
                out,
                &Meta {
                    name: "process_name",
                    ph: "M",
                    pid,
                    tid: pid,
                    args: NameArg { name: &t.comm },
                },
            )?;
        }
        ev(
            out,
            &Meta {
                name: "thread_name",
                ph: "M",
                pid,
                tid,
                args: NameArg { name: &t.comm },
            },
        )?;
    }
    for s in &tl.slices {
        let Slice {
            track,
            frame,
            flags,
            begin,
            dropped,
            ..
        } = *s;
        let (Some(t), Some(f)) = (tl.tracks.get(track as usize), tl.frames.get(frame as usize))
        else {
            continue;
        };
        let (pid, tid) = ids(t);
        ev(
            out,
            &Complete {
                name: &f.name,
                cat: "call",
                ph: "X",
                ts: us(begin),
                dur: us(s.duration()),
                pid,
                tid,
                args: CallArgs {
                    dso: &f.dso,
                    dropped_calls: dropped,
                    no_call: flags & NO_CALL != 0,
                    no_return: flags & NO_RETURN != 0,
                },
            },
        )?;
    }
    for i in &tl.instants {
        let t = i.track.and_then(|t| tl.tracks.get(t as usize));
        let (pid, tid) = t.map_or((-1, -1), ids);
        ev(
            out,
            &InstantEv {
                name: &i.name,
                cat: i.cat,
                ph: "i",
                s: if t.is_some() { "t" } else { "g" },
                ts: us(i.time),
                pid,
                tid,
            },
        )?;
    }
    let mut name = String::new();
    for c in &tl.cbr {
        name.clear();
        if c.cpu >= 0 {
            name.push_str(&format!("CBR cpu{}", c.cpu));
        } else {
            name.push_str("CBR");
        }
        ev(
            out,
            &Counter {
                name: &name,
                ph: "C",
                ts: us(c.time),
                pid: -1,
                args: CounterArgs { MHz: c.mhz },
            },
        )?;
    }
    out.write_all(b"\n]}\n")?;
    Ok(())
}

/// Events of different types through one writer.
mod erased {
    use std::io::{self, Write};

    pub trait Ser {
        fn to(&self, out: &mut dyn Write) -> io::Result<()>;
    }

    impl<T: serde::Serialize> Ser for T {
        fn to(&self, out: &mut dyn Write) -> io::Result<()> {
            serde_json::to_writer(out, self).map_err(io::Error::from)
        }
    }
}
