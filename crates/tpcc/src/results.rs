//! What a run measured and how it is shown: per-type latency percentiles, rates, interval
//! records, the run result, the end-of-run summary, `run.json` and `intervals.csv`.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::costs::Costs;
use crate::engine::EngineStats;
use crate::error::{TpccError, TpccResult};
use crate::run_meta::RunMeta;
use crate::txn::{Outcome, TxKind};

/// Latency percentiles of one transaction type, milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Transactions measured.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    #[serde(default)]
    pub p999_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

/// Counters the terminals accumulate.
#[derive(Debug, Clone)]
pub struct Acc {
    hist: [Histogram<u64>; 5],
    /// Completed transactions per type (rolled-back New-Orders included).
    pub done: [u64; 5],
    /// Rolled-back New-Orders.
    pub rollbacks: u64,
    /// New-Order lines (committed and rolled back).
    pub lines: u64,
    /// Remote New-Order lines.
    pub remote_lines: u64,
    /// Remote Payments.
    pub remote_payments: u64,
    /// Payments by last name.
    pub payments_by_name: u64,
    /// Order-Status by last name.
    pub order_status_by_name: u64,
    /// Delivery districts skipped (no undelivered order).
    pub delivery_skipped: u64,
    /// Orders delivered.
    pub delivered: u64,
    /// Retries after conflicts per type (concurrent writers), in [`TxKind::ALL`] order.
    pub retries: [u64; 5],
    /// The most retries one transaction of each type needed.
    pub max_retries: [u64; 5],
}

fn new_hist() -> Histogram<u64> {
    // 1 µs .. 1 h, 3 significant digits: constant, valid bounds.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

impl Default for Acc {
    fn default() -> Self {
        Acc {
            hist: std::array::from_fn(|_| new_hist()),
            done: [0; 5],
            rollbacks: 0,
            lines: 0,
            remote_lines: 0,
            remote_payments: 0,
            payments_by_name: 0,
            order_status_by_name: 0,
            delivery_skipped: 0,
            delivered: 0,
            retries: [0; 5],
            max_retries: [0; 5],
        }
    }
}

impl Acc {
    pub(crate) fn record(&mut self, kind: TxKind, o: &Outcome, micros: u64) {
        let i = kind.index();
        let _ = self.hist[i].record(micros.max(1));
        self.done[i] += 1;
        self.retries[i] += o.retries as u64;
        self.max_retries[i] = self.max_retries[i].max(o.retries as u64);
        match kind {
            TxKind::NewOrder => {
                self.lines += o.lines as u64;
                self.remote_lines += o.remote_lines as u64;
                if o.rolled_back {
                    self.rollbacks += 1;
                }
            }
            TxKind::Payment => {
                self.remote_payments += o.remote_payment as u64;
                self.payments_by_name += o.by_name as u64;
            }
            TxKind::OrderStatus => self.order_status_by_name += o.by_name as u64,
            TxKind::Delivery => {
                self.delivery_skipped += o.skipped_districts as u64;
                self.delivered += o.delivered as u64;
            }
            TxKind::StockLevel => {}
        }
    }

    pub(crate) fn merge(&mut self, o: &Acc) {
        for i in 0..5 {
            let _ = self.hist[i].add(&o.hist[i]);
            self.done[i] += o.done[i];
            self.retries[i] += o.retries[i];
            self.max_retries[i] = self.max_retries[i].max(o.max_retries[i]);
        }
        self.rollbacks += o.rollbacks;
        self.lines += o.lines;
        self.remote_lines += o.remote_lines;
        self.remote_payments += o.remote_payments;
        self.payments_by_name += o.payments_by_name;
        self.order_status_by_name += o.order_status_by_name;
        self.delivery_skipped += o.delivery_skipped;
        self.delivered += o.delivered;
    }

    /// Committed New-Orders.
    pub fn new_orders_committed(&self) -> u64 {
        self.done[0] - self.rollbacks
    }

    /// Latency of `kind`.
    pub fn latency(&self, kind: TxKind) -> Latency {
        let h = &self.hist[kind.index()];
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |v: u64| v as f64 / 1000.0;
        Latency {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }

    /// The measured workload characteristics beside their targets.
    pub fn rates(&self) -> Rates {
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let total: u64 = self.done.iter().sum();
        Rates {
            mix_pct: std::array::from_fn(|i| pct(self.done[i], total)),
            rollback_pct: pct(self.rollbacks, self.done[0]),
            avg_lines: if self.done[0] == 0 {
                0.0
            } else {
                self.lines as f64 / self.done[0] as f64
            },
            remote_lines_pct: pct(self.remote_lines, self.lines),
            remote_payments_pct: pct(self.remote_payments, self.done[1]),
            payment_by_name_pct: pct(self.payments_by_name, self.done[1]),
            order_status_by_name_pct: pct(self.order_status_by_name, self.done[2]),
            delivery_skipped_pct: pct(self.delivery_skipped, self.done[3] * 10),
            retries_per_100: std::array::from_fn(|i| pct(self.retries[i], self.done[i])),
        }
    }
}

/// Workload characteristics of a run (percentages).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rates {
    /// Share of each type in [`TxKind::ALL`] order (target 45/43/4/4/4).
    pub mix_pct: [f64; 5],
    /// Rolled-back New-Orders (target 1%).
    pub rollback_pct: f64,
    /// Lines per New-Order (target 10).
    pub avg_lines: f64,
    /// Remote order lines (target 1% with more than one warehouse).
    pub remote_lines_pct: f64,
    /// Remote Payments (target 15% with more than one warehouse).
    pub remote_payments_pct: f64,
    /// Payments by last name (target 60%).
    pub payment_by_name_pct: f64,
    /// Order-Status by last name (target 60%).
    pub order_status_by_name_pct: f64,
    /// Delivery districts skipped (target ≤ 1%).
    pub delivery_skipped_pct: f64,
    /// Retries after conflicts per 100 transactions of each type, in [`TxKind::ALL`] order
    /// (concurrent writers; 0 for the exclusive writer and the read-only types).
    #[serde(default)]
    pub retries_per_100: [f64; 5],
}

/// One reported interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntervalRecord {
    /// Seconds since the measured period began, at the interval's end (negative in warm-up).
    pub t_end_s: f64,
    /// A warm-up interval (not counted).
    pub warmup: bool,
    /// Length, seconds.
    pub seconds: f64,
    /// Committed New-Orders per minute.
    pub notpm: f64,
    /// All transactions per minute.
    pub tpm: f64,
    /// Completed transactions per type.
    pub done: [u64; 5],
    /// Rolled-back New-Orders.
    pub rollbacks: u64,
    /// Retries after conflicts per type (concurrent writers).
    #[serde(default)]
    pub retries: [u64; 5],
    /// Latency per type.
    pub latency: [Latency; 5],
    /// Engine counters of the interval.
    pub stats: EngineStats,
    /// CPU, device and machine costs of the interval.
    #[serde(default)]
    pub costs: Costs,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// Engine label.
    pub engine: String,
    /// Terminals.
    pub terminals: usize,
    /// Warehouses in the database.
    pub warehouses: u16,
    /// Measured seconds.
    pub seconds: f64,
    /// Committed New-Orders per minute over the measured period.
    pub notpm: f64,
    /// All transactions per minute.
    pub tpm: f64,
    /// Completed transactions per type.
    pub done: [u64; 5],
    /// Committed New-Orders.
    pub new_orders_committed: u64,
    /// Rolled-back New-Orders.
    pub rollbacks: u64,
    /// Retries after conflicts per type over the measured period (concurrent writers; a
    /// retried transaction counts once in `done`, its latency includes its retries).
    #[serde(default)]
    pub retries: [u64; 5],
    /// The most retries one transaction of each type needed (the bound is
    /// [`crate::txn::MAX_RETRIES`]).
    #[serde(default)]
    pub max_retries: [u64; 5],
    /// Latency per type over the measured period.
    pub latency: [Latency; 5],
    /// Workload characteristics.
    pub rates: Rates,
    /// Engine counters over the measured period.
    pub stats: EngineStats,
    /// CPU, device and machine costs over the measured period, per transaction.
    #[serde(default)]
    pub costs: Costs,
    /// Every interval, warm-up included.
    pub intervals: Vec<IntervalRecord>,
    /// The run number (HISTORY ids).
    pub run_no: u32,
    /// What ran, where, when and how (version, commit, machine, effective configuration).
    #[serde(default)]
    pub meta: RunMeta,
    /// The run was cut short by Ctrl-C (its figures cover the measured time until then).
    #[serde(default)]
    pub interrupted: bool,
}

impl RunResult {
    /// Median of the measured intervals' NOTPM (the run's NOTPM when there are none).
    pub fn median_interval_notpm(&self) -> f64 {
        let mut v: Vec<f64> = self
            .intervals
            .iter()
            .filter(|i| !i.warmup)
            .map(|i| i.notpm)
            .collect();
        if v.is_empty() {
            return self.notpm;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }
}

/// Human-readable bytes.
pub fn bytes(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < U.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[u])
    }
}

/// The transaction types that write (and may be retried after conflicts).
pub const WRITERS: [TxKind; 3] = [TxKind::NewOrder, TxKind::Payment, TxKind::Delivery];

/// Interval lines are at most this wide (a terminal's 120 columns).
pub const LINE_WIDTH: usize = 120;

/// What the columns of [`interval_line`] mean, printed once before the first line.
pub fn interval_legend() -> String {
    "legend: [t] seconds since warm-up ended (w: warm-up); NOTPM New-Orders/min; tpm all \
     transactions/min; NO New-Order p50/p99/p99.9 ms; P Payment, OS Order-Status, D Delivery, \
     SL Stock-Level p99 ms; per transaction: cpu process CPU µs, w/r store device KiB \
     written/read; rt retries after conflicts per 100 New-Order/Payment/Delivery (concurrent \
     writers; shown when there were any and the line has room) (k = thousands, M = millions)"
        .to_string()
}

/// A count in at most 5 characters (`12345`, `123k`, `12.3M`, `123M`, `12G`).
fn num(v: f64) -> String {
    if v < 99_999.5 {
        format!("{v:.0}")
    } else if v < 999_500.0 {
        format!("{:.0}k", v / 1e3)
    } else if v < 99_950_000.0 {
        format!("{:.1}M", v / 1e6)
    } else if v < 999_500_000.0 {
        format!("{:.0}M", v / 1e6)
    } else {
        format!("{:.0}G", (v / 1e9).min(9_999.0))
    }
}

/// Milliseconds in at most 5 characters (`0.42`, `12.3`, `1234`, `123k`).
fn ms(v: f64) -> String {
    if v < 9.995 {
        format!("{v:.2}")
    } else if v < 99.95 {
        format!("{v:.1}")
    } else {
        num(v)
    }
}

/// KiB in at most 5 characters (`0.50`, `18.1`, `123.4`, `12345`, `123k`).
fn kib(v: f64) -> String {
    if v < 9.995 {
        format!("{v:.2}")
    } else if v < 999.95 {
        format!("{v:.1}")
    } else {
        num(v)
    }
}

/// One interval line: at most [`LINE_WIDTH`] characters (the label is shortened to fit); see
/// [`interval_legend`].
pub fn interval_line(label: &str, rec: &IntervalRecord) -> String {
    let l = |k: TxKind| rec.latency[k.index()];
    let no = l(TxKind::NewOrder);
    let mut body = format!(
        "[{:>5}s{}] NOTPM {:>5} tpm {:>5} | NO {}/{}/{} P {} OS {} D {} SL {} | cpu {}",
        num(rec.t_end_s.abs().round()),
        if rec.warmup { "w" } else { "" },
        num(rec.notpm),
        num(rec.tpm),
        ms(no.p50_ms),
        ms(no.p99_ms),
        ms(no.p999_ms),
        ms(l(TxKind::Payment).p99_ms),
        ms(l(TxKind::OrderStatus).p99_ms),
        ms(l(TxKind::Delivery).p99_ms),
        ms(l(TxKind::StockLevel).p99_ms),
        num(rec.costs.cpu_us_per_txn),
    );
    match &rec.costs.device {
        Some(d) => body.push_str(&format!(
            " w {} r {}",
            kib(d.write_bytes_per_txn / 1024.0),
            kib(d.read_bytes_per_txn / 1024.0),
        )),
        None => body.push_str(" w - r -"),
    }
    let writes: u64 = WRITERS.iter().map(|k| rec.done[k.index()]).sum();
    let retries: u64 = WRITERS.iter().map(|k| rec.retries[k.index()]).sum();
    if retries > 0 && writes > 0 {
        let rt = format!(" rt {}", kib(100.0 * retries as f64 / writes as f64));
        if body.chars().count() + rt.chars().count() <= LINE_WIDTH {
            body.push_str(&rt);
        }
    }
    if label.is_empty() {
        return body;
    }
    let room = LINE_WIDTH.saturating_sub(body.chars().count() + 1);
    if room < 2 {
        return body;
    }
    let short: String = if label.chars().count() > room {
        let mut t: String = label.chars().take(room - 1).collect();
        t.push('…');
        t
    } else {
        label.to_string()
    };
    format!("{short} {body}")
}

/// The end-of-run summary.
pub fn summary(r: &RunResult) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "summary: {} terminals, {} warehouses, {:.0} s measured on {}\n",
        r.terminals, r.warehouses, r.seconds, r.engine
    ));
    s.push_str(&format!(
        "  NOTPM {:.0}  (tpm all types {:.0}; median interval NOTPM {:.0})\n",
        r.notpm,
        r.tpm,
        r.median_interval_notpm()
    ));
    s.push_str(
        "  type          count   p50 ms   p95 ms   p99 ms p99.9 ms   max ms  retries /100 txns\n",
    );
    for k in TxKind::ALL {
        let i = k.index();
        let l = r.latency[i];
        let retries = if WRITERS.contains(&k) {
            format!("{:>8} {:>9.2}", r.retries[i], r.rates.retries_per_100[i])
        } else {
            format!("{:>8} {:>9}", "-", "-")
        };
        s.push_str(&format!(
            "  {:<12} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {retries}\n",
            k.name(),
            r.done[i],
            l.p50_ms,
            l.p95_ms,
            l.p99_ms,
            l.p999_ms,
            l.max_ms
        ));
    }
    s.push_str(&format!("  {}\n", writers_summary(r)));
    let q = &r.rates;
    s.push_str(&format!(
        "  mix % {:.1}/{:.1}/{:.1}/{:.1}/{:.1} (target 45/43/4/4/4)\n",
        q.mix_pct[0], q.mix_pct[1], q.mix_pct[2], q.mix_pct[3], q.mix_pct[4]
    ));
    s.push_str(&format!(
        "  New-Order rolled back {} ({:.2}%, target 1%; counted apart from NOTPM), lines/order {:.2} (target 10), remote lines {:.2}% (target 1%)\n",
        r.rollbacks, q.rollback_pct, q.avg_lines, q.remote_lines_pct
    ));
    s.push_str(&format!(
        "  Payment remote {:.1}% (target 15%), by last name {:.1}% (target 60%); Order-Status by last name {:.1}% (target 60%); Delivery districts skipped {:.2}%\n",
        q.remote_payments_pct, q.payment_by_name_pct, q.order_status_by_name_pct, q.delivery_skipped_pct
    ));
    if r.warehouses == 1 {
        s.push_str("  (one warehouse: remote lines and remote Payments are impossible, so 0%)\n");
    }
    let st = &r.stats;
    s.push_str(&format!(
        "  engine: commits {}, conflicts {}, data writes {}, doublewrite writes {}, pages skipped {}, log {}, log syncs {} ({:.3}/commit), data syncs {}\n",
        st.commits,
        st.conflicts,
        st.data_writes,
        st.doublewrite_writes,
        st.pages_skipped_protection,
        bytes(st.log_bytes),
        st.log_syncs,
        st.syncs_per_commit(),
        st.data_syncs
    ));
    if let (Some(&hold), Some(&wait)) = (
        st.other.get("concurrent_commit_hold_us"),
        st.other.get("writer_lock_wait_us"),
    ) {
        // The serial part of concurrent writers: how busy their commits kept the writer lock.
        let commits = st.commits.max(1) as f64;
        let busy = if r.seconds > 0.0 {
            hold as f64 / 1e6 / r.seconds * 100.0
        } else {
            0.0
        };
        s.push_str(&format!(
            "  writer lock: concurrent commits held it {:.0} µs per commit ({busy:.0}% of the time); waits for it {:.0} µs per commit\n",
            hold as f64 / commits,
            wait as f64 / commits
        ));
    }
    if let (Some(&narrowed), Some(&full), Some(&reread), Some(&skipped)) = (
        st.other.get("validations_narrowed"),
        st.other.get("validations_full"),
        st.other.get("validation_reads_reread"),
        st.other.get("validation_reads_skipped"),
    ) {
        // How much of validation the recent commits' writes spared (keel recent_writes.rs).
        s.push_str(&format!(
            "  validation: {narrowed} narrowed by recent writes, {full} full; reads re-read {reread}, skipped {skipped}\n"
        ));
    }
    if let (Some(&copied), Some(&used), Some(&stale)) = (
        st.other.get("versions_copied"),
        st.other.get("copies_used"),
        st.other.get("copies_stale"),
    ) {
        // Page images copied for snapshots, and how many were copied before the writer lock
        // (keel optimistic.rs copy_leaves, buffer-pool txn/precopy.rs).
        let commits = st.commits.max(1) as f64;
        s.push_str(&format!(
            "  page copies: {:.1} per commit; {used} made before the writer lock and used, {stale} stale (copied again)\n",
            copied as f64 / commits
        ));
    }
    if let (Some(&splits), Some(&waits)) = (
        st.other.get("split_page_copies"),
        st.other.get("copy_waits"),
    ) {
        // Split right halves logged as page-copy records (buffer-pool copy_deps.rs).
        s.push_str(&format!(
            "  splits as page copies: {splits}; page writes deferred until their copy was durable: {waits}\n"
        ));
    }
    s.push_str(&costs_lines(&r.costs, &r.stats));
    if r.interrupted {
        s.push_str("  INTERRUPTED (Ctrl-C): the figures cover the measured time until then\n");
    }
    s
}

/// The summary's line on the writers: the mode in force, and the retries after conflicts over
/// New-Order, Payment and Delivery.
pub fn writers_summary(r: &RunResult) -> String {
    let writes: u64 = WRITERS.iter().map(|k| r.done[k.index()]).sum();
    let retries: u64 = WRITERS.iter().map(|k| r.retries[k.index()]).sum();
    let per100 = if writes == 0 {
        0.0
    } else {
        100.0 * retries as f64 / writes as f64
    };
    let most: Vec<String> = WRITERS
        .iter()
        .map(|k| format!("{} {}", k.short(), r.max_retries[k.index()]))
        .collect();
    format!(
        "writers: {}; {retries} retries after conflicts over {writes} New-Order/Payment/Delivery ({per100:.2} per 100; most for one transaction: {}); the engine refused {} commits as conflicts",
        r.meta.writers_text(),
        most.join(", "),
        r.stats.conflicts
    )
}

/// The per-transaction cost lines of a summary.
pub fn costs_lines(c: &Costs, st: &EngineStats) -> String {
    let n = c.transactions.max(1) as f64;
    let mut s = format!(
        "  per transaction ({} transactions): CPU {:.0} µs ({:.2} cores used), context switches {:.1} voluntary + {:.1} involuntary, syncs {:.2}\n",
        c.transactions,
        c.cpu_us_per_txn,
        c.cores_used,
        c.voluntary_cs_per_txn,
        c.involuntary_cs_per_txn,
        (st.log_syncs + st.data_syncs) as f64 / n
    );
    let other = |k: &str| st.other.get(k).copied().unwrap_or(0) as f64 / n / 1024.0;
    s.push_str(&format!(
        "  engine bytes per transaction: log {:.1} KiB, data {:.1} KiB, doublewrite {:.1} KiB, data read {:.1} KiB\n",
        st.log_bytes as f64 / n / 1024.0,
        other("data_bytes_written"),
        other("doublewrite_bytes"),
        other("data_read_bytes"),
    ));
    match (&c.device, &c.device_missing) {
        (Some(d), _) => s.push_str(&format!(
            "  device {} per transaction: written {:.1} KiB in {:.2} writes, read {:.1} KiB in {:.2} reads, {:.2} cache flushes (whole device: other processes' I/O counts too)\n",
            d.name,
            d.write_bytes_per_txn / 1024.0,
            d.writes_per_txn,
            d.read_bytes_per_txn / 1024.0,
            d.reads_per_txn,
            d.flushes_per_txn
        )),
        (None, Some(why)) => s.push_str(&format!("  device: not measured: {why}\n")),
        (None, None) => {}
    }
    let m = &c.machine;
    let f = |v: Option<f64>, d: usize| v.map_or("?".to_string(), |x| format!("{x:.d$}"));
    s.push_str(&format!(
        "  machine: load average {} → {}, steal {}%, other processes {} cores\n",
        f(m.load1_start, 2),
        f(m.load1_end, 2),
        f(m.steal_pct, 1),
        f(m.other_cores, 2)
    ));
    for w in &m.warnings {
        s.push_str(&format!(
            "  WARNING: {w}: the figures may not be comparable\n"
        ));
    }
    s
}

/// Writes `run.json` and `intervals.csv` into `out`.
pub fn write_run_files(
    out: &std::path::Path,
    r: &RunResult,
    extra: serde_json::Value,
) -> TpccResult<()> {
    std::fs::create_dir_all(out).map_err(|e| TpccError::io(out, e))?;
    let mut v = serde_json::to_value(r).map_err(|e| TpccError::Usage(e.to_string()))?;
    if let (serde_json::Value::Object(m), serde_json::Value::Object(x)) = (&mut v, extra) {
        m.extend(x);
    }
    let json = serde_json::to_string_pretty(&v).map_err(|e| TpccError::Usage(e.to_string()))?;
    let p = out.join("run.json");
    std::fs::write(&p, json).map_err(|e| TpccError::io(&p, e))?;
    let p = out.join("intervals.csv");
    std::fs::write(&p, intervals_csv(&r.intervals)).map_err(|e| TpccError::io(&p, e))?;
    Ok(())
}

/// The intervals as CSV.
pub fn intervals_csv(intervals: &[IntervalRecord]) -> String {
    let mut s = String::from("t_end_s,warmup,seconds,notpm,tpm");
    for k in TxKind::ALL {
        s.push_str(&format!(",{0}_count", k.short().to_lowercase()));
    }
    s.push_str(",rollbacks");
    for k in TxKind::ALL {
        let n = k.short().to_lowercase();
        s.push_str(&format!(",{n}_p50_ms,{n}_p95_ms,{n}_p99_ms"));
    }
    s.push_str(",no_p999_ms");
    s.push_str(
        ",commits,data_writes,doublewrite_writes,pages_skipped,log_bytes,log_syncs,data_syncs",
    );
    s.push_str(",cpu_us_per_txn,vcs_per_txn,dev_write_bytes_per_txn,dev_read_bytes_per_txn,dev_flushes_per_txn");
    for k in WRITERS {
        s.push_str(&format!(",{}_retries", k.short().to_lowercase()));
    }
    s.push_str(",conflicts\n");
    for r in intervals {
        s.push_str(&format!(
            "{:.3},{},{:.3},{:.1},{:.1}",
            r.t_end_s, r.warmup, r.seconds, r.notpm, r.tpm
        ));
        for d in r.done {
            s.push_str(&format!(",{d}"));
        }
        s.push_str(&format!(",{}", r.rollbacks));
        for l in r.latency {
            s.push_str(&format!(",{:.3},{:.3},{:.3}", l.p50_ms, l.p95_ms, l.p99_ms));
        }
        s.push_str(&format!(",{:.3}", r.latency[0].p999_ms));
        let st = &r.stats;
        s.push_str(&format!(
            ",{},{},{},{},{},{},{}",
            st.commits,
            st.data_writes,
            st.doublewrite_writes,
            st.pages_skipped_protection,
            st.log_bytes,
            st.log_syncs,
            st.data_syncs
        ));
        let c = &r.costs;
        let d = |f: fn(&crate::costs::DeviceCosts) -> f64| {
            c.device
                .as_ref()
                .map_or(String::new(), |x| format!("{:.1}", f(x)))
        };
        s.push_str(&format!(
            ",{:.1},{:.2},{},{},{}",
            c.cpu_us_per_txn,
            c.voluntary_cs_per_txn,
            d(|x| x.write_bytes_per_txn),
            d(|x| x.read_bytes_per_txn),
            d(|x| x.flushes_per_txn)
        ));
        for k in WRITERS {
            s.push_str(&format!(",{}", r.retries[k.index()]));
        }
        s.push_str(&format!(",{}\n", st.conflicts));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_numbers_never_exceed_five_characters() {
        let mut v = 0.0001f64;
        while v < 1e16 {
            for f in [num(v), ms(v), kib(v)] {
                assert!(f.chars().count() <= 5, "{v}: {f:?}");
            }
            v *= 1.37;
        }
        assert_eq!(num(49258.0), "49258");
        assert_eq!(num(123_456.0), "123k");
        assert_eq!(num(12_345_678.0), "12.3M");
        assert_eq!(ms(0.4213), "0.42");
        assert_eq!(ms(12.34), "12.3");
        assert_eq!(kib(18.12), "18.1");
    }
}
