//! The views perf's export scripts create over the tables, with the same
//! names, columns and meanings, so that queries written for perf's databases
//! and perf's exported-sql-viewer.py work on ours. Written for each database
//! where their SQL differs (hex formatting, numeric casts).

use super::tables::Flavor;

/// `x` in hex, as text.
fn hex(flavor: Flavor, x: &str) -> String {
    match flavor {
        Flavor::Sqlite => format!("printf('%x', {x})"),
        Flavor::Postgres => format!("to_hex({x})"),
    }
}

/// Instructions per cycle, rounded to 2 places (0 without cycles).
fn ipc(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Sqlite => {
            "CASE WHEN cyc_count = 0 THEN CAST(0 AS FLOAT) \
             ELSE ROUND(CAST(insn_count AS FLOAT) / cyc_count, 2) END AS IPC"
        }
        Flavor::Postgres => {
            "CASE WHEN cyc_count = 0 THEN CAST(0 AS NUMERIC(20, 2)) \
             ELSE CAST((CAST(insn_count AS FLOAT) / cyc_count) AS NUMERIC(20, 2)) END AS IPC"
        }
    }
}

/// A number column shown as text where a CASE maps some values to words.
fn as_text(flavor: Flavor, x: &str, width: u32) -> String {
    match flavor {
        Flavor::Sqlite => x.to_string(),
        Flavor::Postgres => format!("CAST({x} AS VARCHAR({width}))"),
    }
}

/// A boolean column as `'True'` / `'False'`.
fn true_false(flavor: Flavor, x: &str) -> String {
    match flavor {
        Flavor::Sqlite => format!("CASE WHEN {x} = 0 THEN 'False' ELSE 'True' END"),
        Flavor::Postgres => format!("CASE WHEN {x} = FALSE THEN 'False' ELSE 'True' END"),
    }
}

fn wake_reason(flavor: Flavor, x: &str) -> String {
    format!(
        "CASE WHEN {x} = 1 THEN 'Interrupt' WHEN {x} = 2 THEN 'Timer Deadline' \
         WHEN {x} = 4 THEN 'Monitored Address' WHEN {x} = 8 THEN 'HW' ELSE {} END",
        as_text(flavor, x, 2)
    )
}

/// The views of the main tables, in perf's order: (name, `CREATE VIEW`).
/// `call_paths` (with `calls` or `callchains`) and `calls` (with `calls`) get
/// theirs only where the tables exist.
pub fn main_views(flavor: Flavor, call_paths: bool, calls: bool) -> Vec<(&'static str, String)> {
    let mut v = vec![
        (
            "machines_view",
            "CREATE VIEW machines_view AS SELECT id, pid, root_dir, \
             CASE WHEN id = 0 THEN 'unknown' WHEN pid = -1 THEN 'host' ELSE 'guest' END \
             AS host_or_guest FROM machines"
                .to_string(),
        ),
        (
            "dsos_view",
            "CREATE VIEW dsos_view AS SELECT id, machine_id, \
             (SELECT host_or_guest FROM machines_view WHERE id = machine_id) AS host_or_guest, \
             short_name, long_name, build_id FROM dsos"
                .to_string(),
        ),
        (
            "symbols_view",
            "CREATE VIEW symbols_view AS SELECT id, name, \
             (SELECT short_name FROM dsos WHERE id = dso_id) AS dso, dso_id, sym_start, sym_end, \
             CASE WHEN binding = 0 THEN 'local' WHEN binding = 1 THEN 'global' ELSE 'weak' END \
             AS binding FROM symbols"
                .to_string(),
        ),
        (
            "threads_view",
            "CREATE VIEW threads_view AS SELECT id, machine_id, \
             (SELECT host_or_guest FROM machines_view WHERE id = machine_id) AS host_or_guest, \
             process_id, pid, tid FROM threads"
                .to_string(),
        ),
        (
            "comm_threads_view",
            "CREATE VIEW comm_threads_view AS SELECT comm_id, \
             (SELECT comm FROM comms WHERE id = comm_id) AS command, thread_id, \
             (SELECT pid FROM threads WHERE id = thread_id) AS pid, \
             (SELECT tid FROM threads WHERE id = thread_id) AS tid FROM comm_threads"
                .to_string(),
        ),
    ];
    if call_paths {
        v.push((
            "call_paths_view",
            format!(
                "CREATE VIEW call_paths_view AS SELECT c.id, {} AS ip, c.symbol_id, \
                 (SELECT name FROM symbols WHERE id = c.symbol_id) AS symbol, \
                 (SELECT dso_id FROM symbols WHERE id = c.symbol_id) AS dso_id, \
                 (SELECT dso FROM symbols_view WHERE id = c.symbol_id) AS dso_short_name, \
                 c.parent_id, {} AS parent_ip, p.symbol_id AS parent_symbol_id, \
                 (SELECT name FROM symbols WHERE id = p.symbol_id) AS parent_symbol, \
                 (SELECT dso_id FROM symbols WHERE id = p.symbol_id) AS parent_dso_id, \
                 (SELECT dso FROM symbols_view WHERE id = p.symbol_id) AS parent_dso_short_name \
                 FROM call_paths c INNER JOIN call_paths p ON p.id = c.parent_id",
                hex(flavor, "c.ip"),
                hex(flavor, "p.ip")
            ),
        ));
    }
    if calls {
        v.push((
            "calls_view",
            format!(
                "CREATE VIEW calls_view AS SELECT calls.id, thread_id, \
                 (SELECT pid FROM threads WHERE id = thread_id) AS pid, \
                 (SELECT tid FROM threads WHERE id = thread_id) AS tid, \
                 (SELECT comm FROM comms WHERE id = comm_id) AS command, \
                 call_path_id, {} AS ip, symbol_id, \
                 (SELECT name FROM symbols WHERE id = symbol_id) AS symbol, \
                 call_time, return_time, return_time - call_time AS elapsed_time, \
                 branch_count, insn_count, cyc_count, {}, call_id, return_id, \
                 CASE WHEN flags = 0 THEN '' WHEN flags = 1 THEN 'no call' \
                 WHEN flags = 2 THEN 'no return' WHEN flags = 3 THEN 'no call/return' \
                 WHEN flags = 6 THEN 'jump' ELSE {} END AS flags, \
                 parent_call_path_id, calls.parent_id \
                 FROM calls INNER JOIN call_paths ON call_paths.id = call_path_id",
                hex(flavor, "ip"),
                ipc(flavor),
                as_text(flavor, "flags", 6)
            ),
        ));
    }
    v.push((
        "samples_view",
        format!(
            "CREATE VIEW samples_view AS SELECT id, time, cpu, \
             (SELECT pid FROM threads WHERE id = thread_id) AS pid, \
             (SELECT tid FROM threads WHERE id = thread_id) AS tid, \
             (SELECT comm FROM comms WHERE id = comm_id) AS command, \
             (SELECT name FROM selected_events WHERE id = evsel_id) AS event, \
             {} AS ip_hex, (SELECT name FROM symbols WHERE id = symbol_id) AS symbol, \
             sym_offset, (SELECT short_name FROM dsos WHERE id = dso_id) AS dso_short_name, \
             {} AS to_ip_hex, (SELECT name FROM symbols WHERE id = to_symbol_id) AS to_symbol, \
             to_sym_offset, (SELECT short_name FROM dsos WHERE id = to_dso_id) AS to_dso_short_name, \
             (SELECT name FROM branch_types WHERE id = branch_type) AS branch_type_name, \
             in_tx, insn_count, cyc_count, {}, flags FROM samples",
            hex(flavor, "ip"),
            hex(flavor, "to_ip"),
            ipc(flavor)
        ),
    ));
    v
}

/// The views of the event tables (ptwrite, power events) and of
/// context_switches: (name, the tables it needs, `CREATE VIEW`). perf drops
/// the tables nobody filled, with their views.
pub fn event_views(flavor: Flavor) -> Vec<(&'static str, &'static [&'static str], String)> {
    let joined = |table: &str, cols: String| {
        format!(
            "CREATE VIEW {table}_view AS SELECT {table}.id, time, cpu, {cols} FROM {table} \
             INNER JOIN samples ON samples.id = {table}.id"
        )
    };
    vec![
        (
            "ptwrite_view",
            &["ptwrite"][..],
            joined(
                "ptwrite",
                format!(
                    "{} AS payload_hex, {} AS exact_ip",
                    hex(flavor, "payload"),
                    true_false(flavor, "exact_ip")
                ),
            ),
        ),
        (
            "cbr_view",
            &["cbr"][..],
            joined("cbr", "cbr, mhz, percent".to_string()),
        ),
        (
            "mwait_view",
            &["mwait"][..],
            joined(
                "mwait",
                format!(
                    "{} AS hints_hex, {} AS extensions_hex",
                    hex(flavor, "hints"),
                    hex(flavor, "extensions")
                ),
            ),
        ),
        (
            "pwre_view",
            &["pwre"][..],
            joined(
                "pwre",
                format!("cstate, subcstate, {} AS hw", true_false(flavor, "hw")),
            ),
        ),
        (
            "exstop_view",
            &["exstop"][..],
            joined(
                "exstop",
                format!("{} AS exact_ip", true_false(flavor, "exact_ip")),
            ),
        ),
        (
            "pwrx_view",
            &["pwrx"][..],
            joined(
                "pwrx",
                format!(
                    "deepest_cstate, last_cstate, {} AS wake_reason",
                    wake_reason(flavor, "wake_reason")
                ),
            ),
        ),
        (
            "power_events_view",
            &["cbr", "mwait", "pwre", "exstop", "pwrx"][..],
            match flavor {
                // perf's SQLite view: each column a lookup in the event's
                // table, '' for the other events (so its columns carry no
                // declared type).
                Flavor::Sqlite => {
                    let col = |event: &str, expr: &str, name: &str| {
                        format!(
                            "CASE WHEN selected_events.name = '{event}' THEN \
                             (SELECT {expr} FROM {event} WHERE {event}.id = samples.id) \
                             ELSE '' END AS {name}"
                        )
                    };
                    let cols = [
                        col("cbr", "cbr", "cbr"),
                        col("cbr", "mhz", "mhz"),
                        col("cbr", "percent", "percent"),
                        col("mwait", &hex(flavor, "hints"), "hints_hex"),
                        col("mwait", &hex(flavor, "extensions"), "extensions_hex"),
                        col("pwre", "cstate", "cstate"),
                        col("pwre", "subcstate", "subcstate"),
                        col("pwre", "hw", "hw"),
                        col("exstop", "exact_ip", "exact_ip"),
                        col("pwrx", "deepest_cstate", "deepest_cstate"),
                        col("pwrx", "last_cstate", "last_cstate"),
                        col("pwrx", &wake_reason(flavor, "wake_reason"), "wake_reason"),
                    ];
                    format!(
                        "CREATE VIEW power_events_view AS SELECT samples.id, time, cpu, \
                         selected_events.name AS event, {} FROM samples \
                         INNER JOIN selected_events ON selected_events.id = evsel_id \
                         WHERE selected_events.name IN ('cbr', 'mwait', 'exstop', 'pwre', 'pwrx')",
                        cols.join(", ")
                    )
                }
                Flavor::Postgres => format!(
                "CREATE VIEW power_events_view AS SELECT samples.id, samples.time, samples.cpu, \
                 selected_events.name AS event, cbr.cbr, cbr.mhz, cbr.percent, \
                 {} AS hints_hex, {} AS extensions_hex, pwre.cstate, pwre.subcstate, \
                 CASE WHEN pwre.id IS NULL THEN NULL ELSE {} END AS hw, \
                 CASE WHEN exstop.id IS NULL THEN NULL ELSE {} END AS exact_ip, \
                 pwrx.deepest_cstate, pwrx.last_cstate, \
                 CASE WHEN pwrx.id IS NULL THEN NULL ELSE {} END AS wake_reason \
                 FROM samples \
                 INNER JOIN selected_events ON selected_events.id = samples.evsel_id \
                 LEFT JOIN cbr ON cbr.id = samples.id \
                 LEFT JOIN mwait ON mwait.id = samples.id \
                 LEFT JOIN pwre ON pwre.id = samples.id \
                 LEFT JOIN exstop ON exstop.id = samples.id \
                 LEFT JOIN pwrx ON pwrx.id = samples.id \
                 WHERE selected_events.name IN ('cbr', 'mwait', 'exstop', 'pwre', 'pwrx') \
                 ORDER BY samples.id",
                hex(flavor, "mwait.hints"),
                hex(flavor, "mwait.extensions"),
                true_false(flavor, "pwre.hw"),
                true_false(flavor, "exstop.exact_ip"),
                wake_reason(flavor, "pwrx.wake_reason")
            ),
            },
        ),
        (
            "context_switches_view",
            &["context_switches"][..],
            format!(
                "CREATE VIEW context_switches_view AS SELECT context_switches.id, \
                 context_switches.machine_id, context_switches.time, context_switches.cpu, \
                 th_out.pid AS pid_out, th_out.tid AS tid_out, comm_out.comm AS comm_out, \
                 th_in.pid AS pid_in, th_in.tid AS tid_in, comm_in.comm AS comm_in, \
                 CASE WHEN context_switches.flags = 0 THEN 'in' \
                 WHEN context_switches.flags = 1 THEN 'out' \
                 WHEN context_switches.flags = 3 THEN 'out preempt' ELSE {} END AS flags \
                 FROM context_switches \
                 INNER JOIN threads AS th_out ON th_out.id = context_switches.thread_out_id \
                 INNER JOIN threads AS th_in ON th_in.id = context_switches.thread_in_id \
                 INNER JOIN comms AS comm_out ON comm_out.id = context_switches.comm_out_id \
                 INNER JOIN comms AS comm_in ON comm_in.id = context_switches.comm_in_id",
                as_text(flavor, "context_switches.flags", 11)
            ),
        ),
    ]
}
