//! Matrix reports: `report.md` — per configuration the median NOTPM with its range, the ratio to
//! the first row with its range and a "within noise" verdict, p99 New-Order latency, and the
//! per-transaction costs (CPU µs, device bytes and flushes, log/data/doublewrite bytes, syncs,
//! context switches, cores used); then the engine counters, what ran (effective settings), every
//! run with the machine's load, and any busy-machine warnings. The charts are in `charts.rs`.
//!
//! Invariant: every figure in a row is the median over that configuration's repeats (never a mean
//! that one noisy repeat can drag) shown with its min–max, and the first row that ran is the
//! ratio's base.

use crate::driver::{bytes, RunResult};
use crate::load::LoadReport;
use crate::results::WRITERS;
use crate::spread::{Ratio, Spread};

/// One configuration's results across repeats.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConfigResult {
    /// Row name (configuration, with the file system when a `--fs` axis is used).
    pub name: String,
    /// The set knobs and workload overrides.
    pub description: String,
    /// Engine label.
    pub engine: String,
    /// Why the configuration did not run, if it did not.
    pub skipped: Option<String>,
    /// One result per repeat, in run order.
    pub runs: Vec<RunResult>,
    /// Whether every post-run consistency check passed (None: not checked).
    pub checks_passed: Option<bool>,
    /// The load of this configuration's data (when the matrix loads per configuration).
    pub load: Option<LoadReport>,
}

impl ConfigResult {
    /// The spread of `f` over the repeats (`None` when no repeat has the figure).
    pub fn spread(&self, f: impl Fn(&RunResult) -> Option<f64>) -> Option<Spread> {
        Spread::of(self.runs.iter().filter_map(f))
    }
    /// Median NOTPM over repeats (0 when nothing ran).
    pub fn median_notpm(&self) -> f64 {
        self.spread(|r| Some(r.notpm)).map_or(0.0, |s| s.median)
    }
    /// Median p99 New-Order latency, ms.
    pub fn p99_new_order_ms(&self) -> f64 {
        self.spread(|r| Some(r.latency[0].p99_ms))
            .map_or(0.0, |s| s.median)
    }
    fn median_of(&self, f: impl Fn(&RunResult) -> f64) -> f64 {
        self.spread(|r| Some(f(r))).map_or(0.0, |s| s.median)
    }
}

/// Per-transaction figure `v` of run `r` (all five types count).
fn per_txn(v: u64, r: &RunResult) -> Option<f64> {
    let n: u64 = r.done.iter().sum();
    (n > 0).then(|| v as f64 / n as f64)
}

/// A cost column: header, the figure of a run, decimals.
pub type Column = (&'static str, fn(&RunResult) -> Option<f64>, usize);

/// The per-transaction cost columns of report.md; the cost chart draws the first three (CPU µs,
/// device KiB written, device KiB read), so they stay first.
pub fn cost_columns() -> Vec<Column> {
    vec![
        (
            "CPU µs/txn",
            |r| Some(r.costs.cpu_us_per_txn).filter(|_| r.costs.transactions > 0),
            0,
        ),
        (
            "device KiB written/txn",
            |r| {
                r.costs
                    .device
                    .as_ref()
                    .map(|d| d.write_bytes_per_txn / 1024.0)
            },
            1,
        ),
        (
            "device KiB read/txn",
            |r| {
                r.costs
                    .device
                    .as_ref()
                    .map(|d| d.read_bytes_per_txn / 1024.0)
            },
            1,
        ),
        (
            "device flushes/txn",
            |r| r.costs.device.as_ref().map(|d| d.flushes_per_txn),
            2,
        ),
        (
            "log KiB/txn",
            |r| per_txn(r.stats.log_bytes, r).map(|v| v / 1024.0),
            2,
        ),
        (
            "data KiB/txn",
            |r| per_txn(r.stats.other.get("data_bytes_written").copied()?, r).map(|v| v / 1024.0),
            1,
        ),
        (
            "doublewrite KiB/txn",
            |r| per_txn(r.stats.other.get("doublewrite_bytes").copied()?, r).map(|v| v / 1024.0),
            1,
        ),
        (
            "syncs/txn",
            |r| per_txn(r.stats.log_syncs + r.stats.data_syncs, r),
            2,
        ),
        (
            "ctx switches/txn",
            |r| {
                Some(r.costs.voluntary_cs_per_txn + r.costs.involuntary_cs_per_txn)
                    .filter(|_| r.costs.transactions > 0)
            },
            1,
        ),
        (
            "cores used",
            |r| Some(r.costs.cores_used).filter(|_| r.costs.transactions > 0),
            2,
        ),
    ]
}

/// The header information of a report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReportMeta {
    /// Spec name.
    pub name: String,
    /// Spec description.
    pub description: String,
    /// What the published (seed) experiment found, quoted from the spec.
    pub published: String,
    /// Workload line (warehouses, terminals, durations, repeats).
    pub workload: String,
    /// Notes (engine caveats, skipped file systems, ...).
    pub notes: Vec<String>,
}

/// The header of the main table of report.md (the CI test checks every column is there).
pub fn main_table_header() -> String {
    let mut h =
        String::from("| configuration | NOTPM median (min–max) | ratio (range) | p99 New-Order ms");
    for (name, _, _) in cost_columns() {
        h.push_str(&format!(" | {name}"));
    }
    h.push_str(" | check |");
    h
}

fn machine_cell(x: &RunResult) -> String {
    let m = &x.costs.machine;
    let f = |v: Option<f64>, d: usize| v.map_or("?".to_string(), |x| format!("{x:.d$}"));
    format!(
        "{}→{}, {}%, {}{}",
        f(m.load1_start, 2),
        f(m.load1_end, 2),
        f(m.steal_pct, 1),
        f(m.other_cores, 2),
        if m.warnings.is_empty() {
            ""
        } else {
            " **busy**"
        }
    )
}

/// Renders `report.md`.
pub fn render_markdown(meta: &ReportMeta, rows: &[ConfigResult]) -> String {
    let mut s = format!("# keel-tpcc matrix: {}\n\n", meta.name);
    if !meta.description.is_empty() {
        s.push_str(&format!("{}\n\n", meta.description.trim()));
    }
    s.push_str(&format!("{}\n\n", meta.workload));
    for n in &meta.notes {
        s.push_str(&format!("- {n}\n"));
    }
    if !meta.notes.is_empty() {
        s.push('\n');
    }
    let base = rows
        .iter()
        .find(|r| r.skipped.is_none() && !r.runs.is_empty())
        .and_then(|r| r.spread(|x| Some(x.notpm)));
    let cols = cost_columns();
    s.push_str(&main_table_header());
    s.push('\n');
    s.push_str("| --- | ---: | ---: | ---:");
    for _ in &cols {
        s.push_str(" | ---:");
    }
    s.push_str(" | --- |\n");
    for r in rows {
        if let Some(why) = &r.skipped {
            s.push_str(&format!("| {} | skipped |", r.name));
            for _ in 0..cols.len() + 2 {
                s.push_str(" |");
            }
            s.push_str(&format!(" {why} |\n"));
            continue;
        }
        let notpm = r.spread(|x| Some(x.notpm));
        let ratio = match (&base, &notpm) {
            (Some(a), Some(b)) => Ratio::of(a, b).map_or("-".into(), |x| x.show()),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {}",
            r.name,
            notpm.map_or("-".into(), |x| x.show(0)),
            ratio,
            r.spread(|x| Some(x.latency[0].p99_ms))
                .map_or("-".into(), |x| x.show(2)),
        ));
        for (_, f, d) in &cols {
            s.push_str(&format!(
                " | {}",
                r.spread(f).map_or("-".into(), |x| x.show(*d))
            ));
        }
        s.push_str(&format!(
            " | {} |\n",
            match r.checks_passed {
                Some(true) => "1–12 pass",
                Some(false) => "**FAILED**",
                None => "not run",
            }
        ));
    }
    s.push_str(
        "\nEvery figure is the median over the repeats with the range (min–max) in brackets; \
         warm-up excluded. Ratio = median NOTPM / the first row's, with the range \
         [min / first row's max, max / first row's min]; \"within noise\" when it includes 1.0. \
         Per-transaction figures divide by all transactions (five types). Device figures are \
         `/proc/diskstats` deltas of the device holding the store (all its traffic, so other \
         processes' I/O counts too); data, doublewrite and log bytes are the engine's own \
         counters (`-` where an engine has none).\n\n",
    );

    s.push_str("## Engine counters (medians over the measured periods)\n\n");
    s.push_str("| configuration | data writes | doublewrite writes | pages skipped | log bytes | log syncs/commit | retries per 100 New-Order/Payment/Delivery | conflicts |\n");
    s.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for r in rows
        .iter()
        .filter(|r| r.skipped.is_none() && !r.runs.is_empty())
    {
        s.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {} | {:.3} | {} | {:.0} |\n",
            r.name,
            r.median_of(|x| x.stats.data_writes as f64),
            r.median_of(|x| x.stats.doublewrite_writes as f64),
            r.median_of(|x| x.stats.pages_skipped_protection as f64),
            bytes(r.median_of(|x| x.stats.log_bytes as f64) as u64),
            r.median_of(|x| x.stats.syncs_per_commit()),
            WRITERS
                .iter()
                .map(|k| format!("{:.2}", r.median_of(|x| x.rates.retries_per_100[k.index()])))
                .collect::<Vec<_>>()
                .join(" / "),
            r.median_of(|x| x.stats.conflicts as f64),
        ));
    }

    s.push_str(
        "\n## Configurations\n\n| configuration | engine | settings |\n| --- | --- | --- |\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            r.name, r.engine, r.description
        ));
    }

    s.push_str("\n## What ran (effective settings of each configuration's first run)\n\n");
    let mut first_meta = true;
    for r in rows.iter().filter(|r| !r.runs.is_empty()) {
        let m = &r.runs[0].meta;
        if first_meta {
            for l in m.lines().iter().take(3) {
                s.push_str(&format!("- {l}\n"));
            }
            first_meta = false;
        }
        s.push_str(&format!(
            "- **{}**: engine {}; writers: {}\n",
            r.name,
            m.engine,
            m.writers_text()
        ));
        for l in &m.effective.lines {
            s.push_str(&format!("  - {l}\n"));
        }
    }

    s.push_str("\n## Every run (in run order: repeats interleaved A B C A B C …)\n\n");
    s.push_str("| configuration | NOTPM per repeat | CPU µs/txn per repeat | machine per repeat (load average start→end, steal, other processes' cores) |\n| --- | --- | --- | --- |\n");
    for r in rows.iter().filter(|r| r.skipped.is_none()) {
        let v: Vec<String> = r.runs.iter().map(|x| format!("{:.0}", x.notpm)).collect();
        let c: Vec<String> = r
            .runs
            .iter()
            .map(|x| format!("{:.0}", x.costs.cpu_us_per_txn))
            .collect();
        let m: Vec<String> = r.runs.iter().map(machine_cell).collect();
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.name,
            v.join(", "),
            c.join(", "),
            m.join("; ")
        ));
    }
    let mut warnings = Vec::new();
    for r in rows {
        for (i, x) in r.runs.iter().enumerate() {
            for w in &x.costs.machine.warnings {
                warnings.push(format!("{} repeat {}: {w}", r.name, i + 1));
            }
        }
    }
    if !warnings.is_empty() {
        s.push_str("\n**The machine was not quiet during some runs; their figures may not be comparable:**\n\n");
        for w in warnings {
            s.push_str(&format!("- {w}\n"));
        }
    }

    if rows.iter().any(|r| r.load.is_some()) {
        s.push_str("\n## Loads (one per configuration)\n\n");
        s.push_str("| configuration | rows | seconds | data writes | doublewrite writes | pages skipped | log bytes | syncs |\n");
        s.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for r in rows {
            if let Some(l) = &r.load {
                s.push_str(&format!(
                    "| {} | {} | {:.1} | {} | {} | {} | {} | {} |\n",
                    r.name,
                    l.rows,
                    l.seconds,
                    l.stats.data_writes,
                    l.stats.doublewrite_writes,
                    l.stats.pages_skipped_protection,
                    bytes(l.stats.log_bytes),
                    l.stats.log_syncs + l.stats.data_syncs
                ));
            }
        }
    }
    if !meta.published.is_empty() {
        s.push_str(&format!(
            "\n## The published experiment (for comparison)\n\n{}\n",
            meta.published.trim()
        ));
    }
    s.push_str("\nCharts: `notpm.svg` (NOTPM per interval, one line style per repeat), `medians.svg` (median NOTPM with min–max error bars; a memory baseline in its own panel), `latency.svg` (p99 New-Order latency per configuration), `costs.svg` (CPU µs and device KiB per transaction). Raw data: `matrix.json`, `runs/*/r*/run.json` and `intervals.csv`; compare two configurations with `keel-tpcc compare runs/A runs/B`.\n");
    s
}
