//! The driver: one thread per terminal, each with a home warehouse, no keying or think time
//! (as tpcc-mysql); an interval line every `interval` seconds with NOTPM, p50/p95/p99 latency per
//! transaction type (timed until `commit` returns) and the engine's counters; a summary at the end.
//!
//! Invariants:
//! - a New-Order id is appended to the acknowledged side file only after its `commit` returned
//!   `Ok` (so after a crash every id in the file must be in the store: the SIGKILL test);
//! - warm-up transactions are never counted in the measured totals;
//! - transactions completing after the measured period ended are not counted.

use parking_lot::Mutex;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::engine::{Engine, ReadTx, WriteTx};
use crate::error::{TpccError, TpccResult};
use crate::load::read_marker;
use crate::rng::NuRandC;
use crate::schema::{self, table};
use crate::txn::{Terminal, TxKind};

pub use crate::acked::{missing_acked, read_acked};
pub use crate::results::{
    bytes, interval_line, intervals_csv, summary, write_run_files, Acc, IntervalRecord, Latency,
    Rates, RunResult,
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
