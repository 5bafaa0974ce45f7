//! The driver: one thread per terminal, each with a home warehouse, no keying or think time
//! (as tpcc-mysql); an interval line every `interval` seconds with NOTPM, p50/p95/p99 latency per
//! transaction type (timed until `commit` returns) and the engine's counters; a summary at the end.
//!
//! Invariants:
//! - a New-Order id is appended to the acknowledged side file only after its `commit` returned
//!   `Ok` (so after a crash every id in the file must be in the store: the SIGKILL test);
//! - warm-up transactions are never counted in the measured totals;
//! - transactions completing after the measured period ended are not counted.

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineStats, ReadTx, WriteTx};
use crate::error::{TpccError, TpccResult};
use crate::load::read_marker;
use crate::rng::NuRandC;
use crate::schema::{self, table};
use crate::txn::{Outcome, Terminal, TxKind};

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Terminal threads.
    pub terminals: usize,
    /// Measured duration.
    pub duration: Duration,
    /// Warm-up before measuring.
    pub warmup: Duration,
    /// Report interval.
    pub interval: Duration,
    /// Stop each terminal after this many transactions (tests); the duration is then ignored.
    pub max_transactions: Option<u64>,
    /// Seed of the terminals' generators.
    pub seed: u64,
    /// Append each acknowledged New-Order's "W D O" to this file after its commit returns.
    pub acked_log: Option<PathBuf>,
    /// Prefix of interval lines (matrix: the configuration's name).
    pub label: String,
    /// Print interval lines.
    pub print: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            terminals: 4,
            duration: Duration::from_secs(60),
            warmup: Duration::from_secs(10),
            interval: Duration::from_secs(10),
            max_transactions: None,
            seed: 7,
            acked_log: None,
            label: String::new(),
            print: true,
        }
    }
}

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
    fn record(&mut self, kind: TxKind, o: &Outcome, micros: u64) {
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

    fn merge(&mut self, o: &Acc) {
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

fn bump_run_counter<E: Engine>(engine: &E) -> TpccResult<u32> {
    let mut tx = engine.write()?;
    let n = match tx.get(table::META, schema::META_RUNS)? {
        Some(v) => schema::decode_runs(&v)?,
        None => 0,
    } + 1;
    tx.insert(table::META, schema::META_RUNS, &n.to_le_bytes())?;
    tx.commit()?;
    Ok(n)
}

/// Runs the workload against a loaded store, then checkpoints it.
pub fn run_workload<E: Engine>(engine: &E, opts: &RunOptions) -> TpccResult<RunResult> {
    let marker = read_marker(engine)?;
    if !NuRandC::valid_run_delta(marker.c_load.c_last, NuRandC::RUN.c_last) {
        return Err(TpccError::Usage(format!(
            "run-time C_LAST {} is not 65..119 away from the load's {} (clause 2.1.6.1)",
            NuRandC::RUN.c_last,
            marker.c_load.c_last
        )));
    }
    if opts.terminals == 0 {
        return Err(TpccError::Usage("--terminals must be at least 1".into()));
    }
    if opts.interval < Duration::from_millis(100) {
        return Err(TpccError::Usage(
            "the report interval must be at least 0.1 s".into(),
        ));
    }
    let run_no = bump_run_counter(engine)?;
    let acked = match &opts.acked_log {
        Some(p) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| TpccError::io(p, e))?,
        )),
        None => None,
    };

    let accs: Vec<Mutex<Acc>> = (0..opts.terminals)
        .map(|_| Mutex::new(Acc::default()))
        .collect();
    let stop = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    let errors: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
    let start = Instant::now();
    let warm_end = start + opts.warmup;
    let bounded = opts.max_transactions.is_some();
    let end = warm_end + opts.duration;

    let mut intervals = Vec::new();
    let mut total = Acc::default();
    let mut measured_start = if opts.warmup.is_zero() {
        Some(start)
    } else {
        None
    };
    let stats_at_start = engine.stats();
    let mut stats_measure_start = stats_at_start.clone();
    let mut last_stats = stats_at_start;
    let mut measured_end = start;

    std::thread::scope(|s| {
        for id in 0..opts.terminals {
            let accs = &accs;
            let stop = &stop;
            let finished = &finished;
            let errors = &errors;
            let acked = &acked;
            let mut term = Terminal::new(id, marker.warehouses, marker.items, opts.seed, run_no);
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(max) = opts.max_transactions {
                        if n >= max {
                            break;
                        }
                    }
                    let kind = term.next_kind();
                    let t0 = Instant::now();
                    let res = term.execute(engine, kind);
                    let micros = t0.elapsed().as_micros() as u64;
                    match res {
                        Ok(outcome) => {
                            if let (Some(f), Some((w, d, o))) = (acked, outcome.new_order) {
                                let line = format!("{w} {d} {o}\n");
                                if let Err(e) = f.lock().write_all(line.as_bytes()) {
                                    errors.lock().push((id, format!("acked log: {e}")));
                                    stop.store(true, Ordering::Relaxed);
                                    break;
                                }
                            }
                            accs[id].lock().record(kind, &outcome, micros);
                        }
                        Err(e) => {
                            errors
                                .lock()
                                .push((id, format!("{} failed: {e}", kind.name())));
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                    n += 1;
                }
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }

        // Reporter (this thread).
        let mut last_tick = start;
        loop {
            let now = Instant::now();
            let in_warmup = now < warm_end;
            let next = if in_warmup {
                (last_tick + opts.interval).min(warm_end)
            } else {
                let base = measured_start.unwrap_or(warm_end);
                let k = ((last_tick.saturating_duration_since(base)).as_secs_f64()
                    / opts.interval.as_secs_f64())
                .floor() as u32
                    + 1;
                let t = base + opts.interval * k;
                if bounded {
                    t
                } else {
                    t.min(end)
                }
            };
            // Sleep in small steps so an early stop (error, bounded run) is noticed.
            let mut all_done = false;
            while Instant::now() < next {
                if stop.load(Ordering::Relaxed)
                    || finished.load(Ordering::Relaxed) == opts.terminals
                {
                    all_done = true;
                    break;
                }
                std::thread::sleep((next - Instant::now()).min(Duration::from_millis(20)));
            }
            let tick = Instant::now();
            let mut acc = Acc::default();
            for a in &accs {
                let taken = std::mem::take(&mut *a.lock());
                acc.merge(&taken);
            }
            let st = engine.stats();
            let secs = tick.duration_since(last_tick).as_secs_f64().max(1e-9);
            let warm = measured_start.is_none();
            let base = measured_start.unwrap_or(warm_end);
            let rec = IntervalRecord {
                t_end_s: if tick >= base {
                    tick.duration_since(base).as_secs_f64()
                } else {
                    -(base.duration_since(tick).as_secs_f64())
                },
                warmup: warm,
                seconds: secs,
                notpm: acc.new_orders_committed() as f64 * 60.0 / secs,
                tpm: acc.done.iter().sum::<u64>() as f64 * 60.0 / secs,
                done: acc.done,
                rollbacks: acc.rollbacks,
                latency: std::array::from_fn(|i| acc.latency(TxKind::ALL[i])),
                stats: st.delta(&last_stats),
            };
            if opts.print && (rec.done.iter().sum::<u64>() > 0 || !all_done) {
                println!("{}", interval_line(&opts.label, &rec));
            }
            if rec.done.iter().sum::<u64>() > 0 || !all_done {
                intervals.push(rec);
            }
            if warm {
                if tick >= warm_end {
                    measured_start = Some(tick);
                    stats_measure_start = st.clone();
                }
            } else {
                total.merge(&acc);
            }
            last_stats = st;
            last_tick = tick;
            measured_end = tick;
            if all_done || (!bounded && tick >= end) {
                stop.store(true, Ordering::Relaxed);
                break;
            }
        }
    });

    let errs = errors.into_inner();
    if let Some((terminal, detail)) = errs.into_iter().next() {
        return Err(TpccError::Terminal { terminal, detail });
    }
    let stats = last_stats.delta(&stats_measure_start);
    let seconds = measured_start
        .map(|m| measured_end.duration_since(m).as_secs_f64())
        .unwrap_or(0.0)
        .max(1e-9);
    engine.checkpoint()?;
    Ok(RunResult {
        engine: E::LABEL.to_string(),
        terminals: opts.terminals,
        warehouses: marker.warehouses,
        seconds,
        notpm: total.new_orders_committed() as f64 * 60.0 / seconds,
        tpm: total.done.iter().sum::<u64>() as f64 * 60.0 / seconds,
        done: total.done,
        new_orders_committed: total.new_orders_committed(),
        rollbacks: total.rollbacks,
        latency: std::array::from_fn(|i| total.latency(TxKind::ALL[i])),
        rates: total.rates(),
        stats,
        intervals,
        run_no,
    })
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

/// Reads the acknowledged-New-Order side file: (W, D, O) per line.
pub fn read_acked(path: &std::path::Path) -> TpccResult<Vec<(u16, u8, u32)>> {
    let text = std::fs::read_to_string(path).map_err(|e| TpccError::io(path, e))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = match f.as_slice() {
            [w, d, o] => w
                .parse()
                .ok()
                .zip(d.parse().ok())
                .zip(o.parse().ok())
                .map(|((w, d), o)| (w, d, o)),
            _ => None,
        };
        match parsed {
            Some(t) => out.push(t),
            // A torn last line (the process was killed mid-write) is not an acknowledgement.
            None if n + 1 == text.lines().count() && !text.ends_with('\n') => {}
            None => {
                return Err(TpccError::Config {
                    origin: path.display().to_string(),
                    detail: format!("line {} is not `W D O`: {line:?}", n + 1),
                })
            }
        }
    }
    Ok(out)
}

/// The acknowledged New-Orders (from [`read_acked`]) that are missing from the store: each must
/// have its ORDER and its ORDER-LINE rows.
pub fn missing_acked<E: Engine>(
    engine: &E,
    acked: &[(u16, u8, u32)],
) -> TpccResult<Vec<(u16, u8, u32)>> {
    let mut tx = engine.read()?;
    let mut missing = Vec::new();
    for &(w, d, o) in acked {
        if tx.get(table::ORDER, &schema::order_key(w, d, o))?.is_none()
            || tx
                .get(table::ORDER_LINE, &schema::order_line_key(w, d, o, 1))?
                .is_none()
        {
            missing.push((w, d, o));
        }
    }
    Ok(missing)
}
