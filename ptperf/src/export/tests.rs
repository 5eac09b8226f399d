//! The Exporter's numbering and perf's call/return rules, on rows kept in memory.

use super::calls::{NO_CALL, NO_RETURN};
use super::*;

/// Rows as text, per table.
#[derive(Default)]
struct Memory {
    rows: Vec<(Table, Vec<String>)>,
    finished: bool,
}

impl Sink for &mut Memory {
    fn row(&mut self, table: Table, values: &[Value<'_>]) -> Result<(), ExportError> {
        let v = values
            .iter()
            .map(|v| match v {
                Value::I64(x) => x.to_string(),
                Value::I32(x) => x.to_string(),
                Value::Bool(x) => x.to_string(),
                Value::Str(s) => s.to_string(),
            })
            .collect();
        self.rows.push((table, v));
        Ok(())
    }

    fn finish(&mut self, _rows: &RowCounts) -> Result<(), ExportError> {
        self.finished = true;
        Ok(())
    }
}

impl Memory {
    fn of(&self, t: Table) -> Vec<&[String]> {
        self.rows
            .iter()
            .filter(|(x, _)| *x == t)
            .map(|(_, v)| v.as_slice())
            .collect()
    }
}

const DSO: DsoRef<'static> = DsoRef {
    short_name: "prog",
    long_name: "/bin/prog",
    build_id: "",
};

fn loc(ip: u64, sym: &'static SymRef<'static>) -> Loc<'static> {
    Loc {
        ip,
        file_addr: ip,
        dso: Some(DSO),
        sym: Some(*sym),
    }
}

static MAIN: SymRef<'static> = SymRef {
    start: 0x1000,
    end: 0x1100,
    binding: 1,
    name: "main",
};
static F: SymRef<'static> = SymRef {
    start: 0x2000,
    end: 0x2100,
    binding: 1,
    name: "f",
};

fn branch<'a>(
    thread: ThreadRef<'a>,
    time: u64,
    flags: u32,
    from: Loc<'static>,
    to: Loc<'static>,
) -> ExportSample<'a> {
    ExportSample {
        event: EventRef {
            index: 0,
            name: "branches",
            attr_type: 0,
            config: 0,
        },
        thread,
        main_thread: Some(thread),
        cpu: 0,
        time,
        from,
        to: Some(to),
        addr: to.ip,
        period: 1,
        weight: 0,
        transaction: 0,
        data_src: 0,
        flags,
        insn_len: 5,
        insn_cnt: 3,
        cyc_cnt: 0,
        raw: &[],
        callchain: &[],
    }
}

#[test]
fn a_call_and_its_return() {
    let comms = [CommChange {
        time: 0,
        comm: "prog".into(),
        exec: true,
        record_offset: 0,
    }];
    let t = ThreadRef {
        key: 1,
        pid: 10,
        tid: 10,
        comms: &comms,
    };
    let mut mem = Memory::default();
    let opts = ExportOptions {
        calls: true,
        ..Default::default()
    };
    let mut ex = Exporter::new(&mut mem, opts).unwrap();
    use flags::*;
    ex.sample(&branch(
        t,
        1,
        BRANCH | CALL,
        loc(0x1010, &MAIN),
        loc(0x2000, &F),
    ))
    .unwrap();
    ex.sample(&branch(
        t,
        2,
        BRANCH | RETURN,
        loc(0x2050, &F),
        loc(0x1015, &MAIN),
    ))
    .unwrap();
    let summary = ex.finish().unwrap();
    assert!(mem.finished);
    assert_eq!(summary.samples(), 2);
    // The ids are dense from 1; main and f are symbols 1 and 2.
    let samples = mem.of(Table::Samples);
    assert_eq!(samples.len(), 3);
    assert_eq!(samples[1][0], "1");
    assert_eq!(samples[2][0], "2");
    let syms: Vec<&str> = mem
        .of(Table::Symbols)
        .iter()
        .map(|r| r[5].as_str())
        .collect();
    assert_eq!(syms, ["unknown", "main", "f"]);
    // main was met first (its call was not seen: "no call"), f was called
    // from it and returned.
    let calls = mem.of(Table::Calls);
    // The zero row, f's call, and main's (ended "no return" at the end).
    assert_eq!(calls.len(), 3);
    let f = calls.iter().find(|c| c[3] == "3").expect("f's call");
    assert_eq!(
        (f[4].as_str(), f[5].as_str(), f[8].as_str()),
        ("1", "2", "2")
    );
    assert_eq!(f[10], "0");
    let paths = mem.of(Table::CallPaths);
    // root, main, main->f
    assert_eq!(paths.len(), 1 + 3);
    let main_call = calls.iter().find(|c| c[3] == "2").expect("main's call");
    assert_eq!(main_call[10], (NO_CALL | NO_RETURN).to_string());
    // f's parent is main's call.
    assert_eq!(f[11], main_call[0]);
}

#[test]
fn branch_types_are_perfs() {
    let b = branch_types();
    assert_eq!(b.len(), 16 + 2 * 13);
    assert!(b.contains(&(
        flags::BRANCH | flags::CALL | flags::TRACE_BEGIN,
        "trace begin / call".into()
    )));
    assert!(b.contains(&(
        flags::BRANCH | flags::RETURN | flags::TRACE_END,
        "return / trace end".into()
    )));
}
