//! Every thread's calls as slices: the call/return samples `--call-ret-trace`
//! synthesizes, through perf's call/return rules ([`crate::export::calls`], the
//! one owner of them: calls begun before the trace begin at its first sample,
//! calls never returned from end at the thread's last, "trace end" parks a call
//! that "trace begin" resumes), named as `ptperf script` names them.
//!
//! Calls end innermost first, so [`Slice`]s come out children before their
//! caller; each knows its caller's id, which is what the size budget needs to
//! count dropped calls per caller ([`super::budget`]).

use std::collections::HashMap;
use std::rc::Rc;

use crate::export::calls::{Branch, CallReturns, Output, Sym};
use crate::script::Printer;
use pt_perf::sample::{flags, Kind, Sample, TraceError};

/// A function as the timeline names it: script's name and its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The symbol's name (the address in hex where there is none), as
    /// `ptperf script --call-ret-trace` prints it.
    pub name: Rc<str>,
    /// The dso's name as recorded (`[unknown]` outside any mapping).
    pub dso: Rc<str>,
}

/// A thread: one track of slices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Track {
    /// Process id (-1: unknown).
    pub pid: i32,
    /// Thread id (-1: unknown).
    pub tid: i32,
    /// Its command, as script prints it.
    pub comm: String,
}

/// One call: the time its thread spent in a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// The thread (index into the tracks).
    pub track: u32,
    /// Its call depth on the thread (0: the bottom of the stack).
    pub depth: u32,
    /// The function (index into the frames).
    pub frame: u32,
    /// [`crate::export::calls::NO_CALL`], `NO_RETURN`, `NON_CALL`.
    pub flags: u32,
    /// When it was called (perf time, ns).
    pub begin: u64,
    /// When it returned.
    pub end: u64,
    /// Its id, unique in the trace.
    pub id: u64,
    /// Its caller's id (0: none).
    pub parent: u64,
    /// Calls below it left out for being too short (see [`super::budget`]).
    pub dropped: u64,
    /// The number of the sample it began at: a thread's calls in this order
    /// (then by depth) are in the order they began, also where times are equal.
    pub seq: u64,
}

impl Slice {
    /// How long the call took (ns).
    pub fn duration(&self) -> u64 {
        self.end.saturating_sub(self.begin)
    }
}

/// A point event of one thread (or of the trace, without one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instant {
    /// The thread's track, if the event has a thread.
    pub track: Option<u32>,
    /// perf time (ns).
    pub time: u64,
    /// What happened: "trace begin", "trace end", or a decoder error's message.
    pub name: String,
    /// "trace" or "error".
    pub cat: &'static str,
}

/// A core-to-bus ratio change (a CBR packet), on its CPU's counter track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cbr {
    /// CPU (-1: unknown).
    pub cpu: i32,
    /// perf time (ns).
    pub time: u64,
    /// The ratio.
    pub ratio: u64,
    /// The core frequency it stands for (MHz; 0 where the recording does not say).
    pub mhz: u64,
}

/// What the builder hands out as it goes.
pub trait SliceSink {
    /// A finished call (children before their callers).
    fn slice(&mut self, s: Slice);
}

impl<F: FnMut(Slice)> SliceSink for F {
    fn slice(&mut self, s: Slice) {
        self(s)
    }
}

/// Builds the slices, instants and counters of a trace from its samples.
pub struct Builder<'s, 'a> {
    printer: Printer<'s, 'a>,
    calls: CallReturns,
    out: Output,
    /// The functions met, and their ids by (name, dso).
    pub frames: Vec<Frame>,
    frame_ids: HashMap<(Rc<str>, Rc<str>), u32>,
    /// An address's function and offset in it, by (code image, pid, address).
    resolved: HashMap<(u64, i32, u64), (Option<u32>, u64)>,
    /// The dsos of addresses with no symbol.
    unknown_dso: HashMap<u64, Rc<str>>,
    unknown: Rc<str>,
    /// A call path's depth and function, by its id in the call/return rules.
    paths: HashMap<u64, (u32, u32)>,
    /// The threads met, and their tracks by (pid, tid).
    pub tracks: Vec<Track>,
    track_ids: HashMap<(i32, i32), u32>,
    comm_ids: HashMap<&'s str, u64>,
    /// Trace begin and end, errors and lost data.
    pub instants: Vec<Instant>,
    /// CBR changes.
    pub cbr: Vec<Cbr>,
    /// kHz per CBR unit (0: not known).
    pub cbr2khz: u64,
    samples: u64,
    /// Calls ended.
    pub calls_seen: u64,
}

impl<'s, 'a> Builder<'s, 'a> {
    /// A builder naming addresses with `printer` (script's names).
    pub fn new(printer: Printer<'s, 'a>, cbr2khz: u64) -> Self {
        Builder {
            printer,
            // As the export: user space below, the kernel above.
            calls: CallReturns::new(1 << 63),
            out: Output::default(),
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            resolved: HashMap::new(),
            unknown_dso: HashMap::new(),
            unknown: "[unknown]".into(),
            paths: HashMap::new(),
            tracks: Vec::new(),
            track_ids: HashMap::new(),
            comm_ids: HashMap::new(),
            instants: Vec::new(),
            cbr: Vec::new(),
            cbr2khz,
            samples: 0,
            calls_seen: 0,
        }
    }

    fn frame(&mut self, name: Rc<str>, dso: Rc<str>) -> u32 {
        if let Some(&f) = self.frame_ids.get(&(name.clone(), dso.clone())) {
            return f;
        }
        let f = self.frames.len() as u32;
        // Retpoline thunks are folded away by name.
        self.calls.symbol(u64::from(f) + 1, &name);
        self.frames.push(Frame {
            name: name.clone(),
            dso: dso.clone(),
        });
        self.frame_ids.insert((name, dso), f);
        f
    }

    /// The function at `ip` (`None`: no symbol) and the offset into it.
    fn resolve(&mut self, s: &Sample, ip: u64) -> (Option<u32>, u64) {
        let key = (s.code, s.pid, ip);
        if let Some(&r) = self.resolved.get(&key) {
            return r;
        }
        let r = self.printer.resolve(s.code, s.pid, ip, s.time);
        let out = match r.sym {
            Some((name, off)) => (Some(self.frame(name, r.dso)), off),
            None => {
                self.unknown_dso.insert(ip, r.dso);
                (None, 0)
            }
        };
        self.resolved.insert(key, out);
        out
    }

    /// The call/return rules' symbol of a function: ids are frame ids plus one
    /// (0 is "no symbol"), and addresses count from the symbol's start (only
    /// whether a branch goes to a function's start matters to the rules).
    fn sym(frames: &[Frame], f: Option<u32>) -> Option<Sym<'_>> {
        let f = f?;
        Some(Sym {
            id: u64::from(f) + 1,
            start: 0,
            name: &frames.get(f as usize)?.name,
        })
    }

    fn track(&mut self, pid: i32, tid: i32, time: Option<u64>) -> u32 {
        if let Some(&t) = self.track_ids.get(&(pid, tid)) {
            return t;
        }
        let comm = self.printer.comm(tid, time).unwrap_or(":-1").to_string();
        let t = self.tracks.len() as u32;
        self.tracks.push(Track { pid, tid, comm });
        self.track_ids.insert((pid, tid), t);
        t
    }

    /// The track of a sample's thread (made at its first sample).
    pub fn track_of(&mut self, s: &Sample) -> u32 {
        self.track(s.pid, s.tid, s.time)
    }

    /// One synthesized sample.
    pub fn sample(&mut self, s: &Sample, sink: &mut dyn SliceSink) {
        match s.kind {
            Kind::Branches => self.branch(s, sink),
            Kind::Cbr => {
                let ratio = s.payload & 0xff;
                self.cbr.push(Cbr {
                    cpu: s.cpu,
                    time: s.time.unwrap_or(0),
                    ratio,
                    // script's frequency, rounded as it rounds it.
                    mhz: ((ratio * self.cbr2khz) as u32 as u64 + 500) / 1000,
                });
            }
            _ => {}
        }
    }

    fn branch(&mut self, s: &Sample, sink: &mut dyn SliceSink) {
        let track = self.track(s.pid, s.tid, s.time);
        let time = s.time.unwrap_or(0);
        for (bit, name) in [
            (flags::TRACE_BEGIN, "trace begin"),
            (flags::TRACE_END, "trace end"),
        ] {
            if s.flags & bit != 0 {
                self.instants.push(Instant {
                    track: Some(track),
                    time,
                    name: name.into(),
                    cat: "trace",
                });
            }
        }
        let (from, _) = if s.ip != 0 {
            self.resolve(s, s.ip)
        } else {
            (None, 0)
        };
        let (to, to_off) = if s.addr != 0 {
            self.resolve(s, s.addr)
        } else {
            (None, 0)
        };
        let comm = self.printer.comm(s.tid, s.time).unwrap_or("");
        let next = self.comm_ids.len() as u64 + 1;
        let comm_id = *self.comm_ids.entry(comm).or_insert(next);
        if let Some(t) = self.tracks.get_mut(track as usize) {
            if t.comm != comm && !comm.is_empty() {
                t.comm = comm.to_string();
            }
        }
        self.samples += 1;
        let b = Branch {
            flags: s.flags,
            ip: s.ip,
            addr: s.addr,
            insn_len: s.insn_len,
            time,
            insn_cnt: s.insn_cnt,
            cyc_cnt: s.cyc_cnt,
            from_sym: Self::sym(&self.frames, from),
            to_sym: Self::sym(&self.frames, to),
            to_file_addr: to_off,
            sample_id: self.samples,
        };
        let idle = s.pid == 0 && s.tid == 0;
        let main = s.pid == s.tid;
        let thread = u64::from(track);
        let mut out = std::mem::take(&mut self.out);
        self.calls
            .process(thread, idle, main, s.cpu, comm_id, &b, &mut out);
        self.drain(&mut out, sink);
        self.out = out;
    }

    /// An error or lost data: an instant on its thread.
    pub fn error(&mut self, e: &TraceError) {
        let track = (e.tid >= 0).then(|| {
            let time = (e.time != 0).then_some(e.time);
            self.track(e.pid, e.tid, time)
        });
        self.instants.push(Instant {
            track,
            time: e.time,
            name: e.msg.to_string(),
            cat: "error",
        });
    }

    /// Ends the calls still open (at their threads' last times).
    pub fn finish(&mut self, sink: &mut dyn SliceSink) {
        let mut out = std::mem::take(&mut self.out);
        let tracks = &self.tracks;
        self.calls.flush_all(
            |t| {
                tracks
                    .get(t as usize)
                    .map_or((u32::MAX, u32::MAX), |k| (k.pid as u32, k.tid as u32))
            },
            &mut out,
        );
        self.drain(&mut out, sink);
    }

    fn drain(&mut self, out: &mut Output, sink: &mut dyn SliceSink) {
        for &[id, parent, sym, ip] in &out.call_paths {
            if parent == 0 {
                // The root: an empty stack.
                self.paths.insert(id, (0, u32::MAX));
                continue;
            }
            let depth = self.paths.get(&parent).map_or(0, |&(d, _)| d + 1);
            let frame = match (sym, ip) {
                // Where the trace stopped ("trace end") until it went on.
                (0, 0) => {
                    let u = self.unknown.clone();
                    self.frame("[not traced]".into(), u)
                }
                (0, _) => {
                    let dso = self
                        .unknown_dso
                        .get(&ip)
                        .cloned()
                        .unwrap_or_else(|| self.unknown.clone());
                    self.frame(format!("{ip:x}").into(), dso)
                }
                (s, _) => (s - 1) as u32,
            };
            self.paths.insert(id, (depth, frame));
        }
        for c in &out.calls {
            // The root path has depth 0: its children, the bottom calls, 1.
            let (depth, frame) = self.paths.get(&c.call_path_id).copied().unwrap_or((1, 0));
            self.calls_seen += 1;
            sink.slice(Slice {
                track: c.thread as u32,
                depth: depth.saturating_sub(1),
                frame,
                flags: c.flags,
                begin: c.call_time,
                end: c.return_time,
                id: c.id,
                parent: c.parent_id,
                dropped: 0,
                seq: c.call_ref,
            });
        }
        out.call_paths.clear();
        out.calls.clear();
    }
}
