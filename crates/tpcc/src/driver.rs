//! The driver: one thread per terminal, each with a home warehouse. Closed loop by default (no
//! keying or think time, as tpcc-mysql); with `rate`, open loop: each terminal's transactions
//! arrive as a Poisson process (exponential gaps, rate / terminals each) and a transaction's
//! latency runs from its scheduled arrival, so queueing behind a slow one is counted (no
//! coordinated omission). An interval line every `interval` seconds (NOTPM, latency
//! percentiles up to p99.9, CPU and device bytes per transaction: see [`interval_legend`]), a
//! summary at the end. Ctrl-C (the `interrupt` flag) ends the current interval early and the run
//! finishes normally: summary, run.json and CSV cover the measured time until then.
//!
//! Writers: per [`RunOptions::writers`], New-Order, Payment and Delivery run as concurrent write
//! transactions (the default; conflicted ones are retried inside `txn.rs` with the same input
//! and counted per type) or on the exclusive writer; Order-Status and Stock-Level always read
//! snapshots.
//!
//! Invariants:
//! - a New-Order id is appended to the acknowledged side file only after its `commit` returned
//!   `Ok` (so after a crash every id in the file must be in the store: the SIGKILL test); a
//!   conflicted attempt returns nothing to the terminal, only the attempt that committed does;
//! - warm-up transactions are never counted in the measured totals;
//! - transactions completing after the measured period ended are not counted.

use parking_lot::Mutex;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::costs::{Costs, Snapshot};
use crate::engine::{Engine, ReadTx, WriteTx};
use crate::error::{TpccError, TpccResult};
use crate::load::read_marker;
use crate::rng::NuRandC;
use crate::run_meta::{build_commit, rfc3339_utc, Host, RunMeta};
use crate::schema::{self, table};
use crate::txn::{Terminal, TxKind};

pub use crate::txn::{WriterMode, MAX_RETRIES};

pub use crate::acked::{missing_acked, read_acked};
pub use crate::results::{
    bytes, interval_legend, interval_line, intervals_csv, summary, write_run_files, Acc,
    IntervalRecord, Latency, Rates, RunResult,
};

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
    /// Open loop: transactions per second over all terminals, arriving as Poisson processes.
    /// `None`: closed loop.
    pub rate: Option<f64>,
    /// A directory on the store's device, for the device's byte counters (default: the current
    /// directory).
    pub device_dir: Option<PathBuf>,
    /// Set to end the run early (Ctrl-C): the current interval ends at once and the run
    /// finishes normally.
    pub interrupt: Option<Arc<AtomicBool>>,
    /// How New-Order, Payment and Delivery take their write transactions (`--writers`);
    /// an engine without concurrent writers runs the exclusive writer whatever this says (the
    /// run metadata records both).
    pub writers: WriterMode,
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
            rate: None,
            device_dir: None,
            interrupt: None,
            writers: WriterMode::default(),
        }
    }
}

/// An exponential gap of mean `1 / rate` seconds (a Poisson process's inter-arrival time).
fn exponential_gap(rng: &mut crate::rng::Rng, rate: f64) -> Duration {
    // Uniform in (0, 1]: 53 random bits, never 0 (ln 0 is -inf).
    let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    Duration::from_secs_f64((-u.ln() / rate).min(3600.0))
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
    if let Some(r) = opts.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(TpccError::Usage(format!(
                "--rate must be a positive number of transactions per second, not {r}"
            )));
        }
    }
    if opts.interval < Duration::from_millis(100) {
        return Err(TpccError::Usage(
            "the report interval must be at least 0.1 s".into(),
        ));
    }
    let run_no = bump_run_counter(engine)?;
    let writers = opts.writers.effective::<E>();
    let meta = RunMeta {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: build_commit().to_string(),
        started_utc: rfc3339_utc(SystemTime::now()),
        seed: opts.seed,
        warmup_s: opts.warmup.as_secs_f64(),
        duration_s: opts.duration.as_secs_f64(),
        interval_s: opts.interval.as_secs_f64(),
        terminals: opts.terminals,
        rate_tps: opts.rate,
        engine: E::LABEL.to_string(),
        host: Host::this(),
        effective: engine.effective(),
        writers: Some(writers),
        writers_requested: Some(opts.writers),
    };
    if opts.print {
        for l in meta.lines() {
            println!("{l}");
        }
        println!("{}", interval_legend());
    }
    let device_dir = opts
        .device_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("."));
    let interrupted = AtomicBool::new(false);
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
    let snap_at_start = Snapshot::take(&device_dir);
    let mut snap_measure_start = snap_at_start.clone();
    let mut last_snap = snap_at_start;
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
            term.writers = writers;
            let per_terminal = opts.rate.map(|r| r / opts.terminals as f64);
            let mut arrivals = crate::rng::Rng::derive(opts.seed, 0xA77E_0000 + id as u64);
            let mut next_arrival = Instant::now();
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(max) = opts.max_transactions {
                        if n >= max {
                            break;
                        }
                    }
                    let t0 = match per_terminal {
                        Some(r) => {
                            next_arrival += exponential_gap(&mut arrivals, r);
                            // Sleep until the arrival in short steps, so a stop is noticed.
                            loop {
                                let now = Instant::now();
                                if now >= next_arrival || stop.load(Ordering::Relaxed) {
                                    break;
                                }
                                std::thread::sleep(
                                    (next_arrival - now).min(Duration::from_millis(50)),
                                );
                            }
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            next_arrival
                        }
                        None => Instant::now(),
                    };
                    let kind = term.next_kind();
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
                if opts
                    .interrupt
                    .as_ref()
                    .is_some_and(|f| f.load(Ordering::Relaxed))
                {
                    interrupted.store(true, Ordering::Relaxed);
                    stop.store(true, Ordering::Relaxed);
                }
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
            let snap = Snapshot::take(&device_dir);
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
                retries: acc.retries,
                latency: std::array::from_fn(|i| acc.latency(TxKind::ALL[i])),
                stats: st.delta(&last_stats),
                costs: Costs::between(&last_snap, &snap, acc.done.iter().sum()),
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
                    snap_measure_start = snap.clone();
                }
            } else {
                total.merge(&acc);
            }
            last_stats = st;
            last_snap = snap;
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
    let transactions: u64 = total.done.iter().sum();
    let costs = Costs::between(&snap_measure_start, &last_snap, transactions);
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
        retries: total.retries,
        max_retries: total.max_retries,
        latency: std::array::from_fn(|i| total.latency(TxKind::ALL[i])),
        rates: total.rates(),
        stats,
        costs,
        intervals,
        run_no,
        meta,
        interrupted: interrupted.into_inner(),
    })
}
