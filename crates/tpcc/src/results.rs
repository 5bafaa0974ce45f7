//! What a run measured and how it is shown: per-type latency percentiles, rates, interval
//! records, the run result, the end-of-run summary, `run.json` and `intervals.csv`.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::engine::EngineStats;
use crate::error::{TpccError, TpccResult};
use crate::txn::{Outcome, TxKind};

/// Latency percentiles of one transaction type, milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Latency {
    /// Transactions measured.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
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
        }
    }
}

impl Acc {
    pub(crate) fn record(&mut self, kind: TxKind, o: &Outcome, micros: u64) {
        let i = kind.index();
        let _ = self.hist[i].record(micros.max(1));
        self.done[i] += 1;
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
        }
    }
}

/// Workload characteristics of a run (percentages).
#[derive(Debug, Clone, Serialize)]
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
}

/// One reported interval.
#[derive(Debug, Clone, Serialize)]
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
    /// Latency per type.
    pub latency: [Latency; 5],
    /// Engine counters of the interval.
    pub stats: EngineStats,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
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
    /// Latency per type over the measured period.
    pub latency: [Latency; 5],
    /// Workload characteristics.
    pub rates: Rates,
    /// Engine counters over the measured period.
    pub stats: EngineStats,
    /// Every interval, warm-up included.
    pub intervals: Vec<IntervalRecord>,
    /// The run number (HISTORY ids).
    pub run_no: u32,
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

/// The interval line (tpcc-mysql style).
pub fn interval_line(label: &str, rec: &IntervalRecord) -> String {
    let mut s = String::new();
    if !label.is_empty() {
        s.push_str(&format!("{label} "));
    }
    s.push_str(&format!(
        "[{:>5.0}s{}] NOTPM {:>8.0} tpm {:>8.0} | p50/p95/p99 ms",
        rec.t_end_s,
        if rec.warmup { " warmup" } else { "" },
        rec.notpm,
        rec.tpm
    ));
    for k in TxKind::ALL {
        let l = rec.latency[k.index()];
        s.push_str(&format!(
            " {} {:.1}/{:.1}/{:.1}",
            k.short(),
            l.p50_ms,
            l.p95_ms,
            l.p99_ms
        ));
    }
    let st = &rec.stats;
    s.push_str(&format!(
        " | data w {} dblw {} log {} syncs {}",
        st.data_writes,
        st.doublewrite_writes,
        bytes(st.log_bytes),
        st.log_syncs + st.data_syncs
    ));
    s
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
    s.push_str("  type          count   p50 ms   p95 ms   p99 ms   max ms\n");
    for k in TxKind::ALL {
        let l = r.latency[k.index()];
        s.push_str(&format!(
            "  {:<12} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2}\n",
            k.name(),
            r.done[k.index()],
            l.p50_ms,
            l.p95_ms,
            l.p99_ms,
            l.max_ms
        ));
    }
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
        "  engine: commits {}, data writes {}, doublewrite writes {}, pages skipped {}, log {}, log syncs {} ({:.3}/commit), data syncs {}\n",
        st.commits,
        st.data_writes,
        st.doublewrite_writes,
        st.pages_skipped_protection,
        bytes(st.log_bytes),
        st.log_syncs,
        st.syncs_per_commit(),
        st.data_syncs
    ));
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
    s.push_str(
        ",commits,data_writes,doublewrite_writes,pages_skipped,log_bytes,log_syncs,data_syncs\n",
    );
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
        let st = &r.stats;
        s.push_str(&format!(
            ",{},{},{},{},{},{},{}\n",
            st.commits,
            st.data_writes,
            st.doublewrite_writes,
            st.pages_skipped_protection,
            st.log_bytes,
            st.log_syncs,
            st.data_syncs
        ));
    }
    s
}
