//! `keel-tpcc compare A B`: two runs side by side, each metric as `median (min–max)` and the
//! ratio B/A with its range and a "within noise" verdict ([`crate::spread`]).
//!
//! A side is a `run.json`, a directory holding one, or a directory of repeats (`r1/run.json`,
//! `r2/run.json`, ..., as a matrix writes under `runs/<configuration>/`). With two or more runs
//! a side, the spread is over the runs; with one, over its measured intervals (wider, so the
//! verdict errs towards "within noise").
//!
//! Invariant: a metric one side lacks (no device counters under tmpfs, an old run.json) is shown
//! as `-` and gets no ratio; nothing is compared against a made-up zero.

use std::path::{Path, PathBuf};

use crate::driver::{IntervalRecord, RunResult};
use crate::error::{TpccError, TpccResult};
use crate::spread::{Ratio, Spread};

/// The runs of one side.
#[derive(Debug, Clone)]
pub struct Side {
    /// Where they came from.
    pub path: PathBuf,
    /// The runs (at least one).
    pub runs: Vec<RunResult>,
}

fn read_run(p: &Path) -> TpccResult<RunResult> {
    let text = std::fs::read_to_string(p).map_err(|e| TpccError::io(p, e))?;
    serde_json::from_str(&text)
        .map_err(|e| TpccError::Usage(format!("{} is not a keel-tpcc run.json: {e}", p.display())))
}

impl Side {
    /// Reads a side (see the module docs for the accepted forms).
    ///
    /// # Errors
    ///
    /// Nothing readable at `path`, or a run.json that does not parse.
    pub fn read(path: &Path) -> TpccResult<Side> {
        let mut runs = Vec::new();
        if path.is_file() {
            runs.push(read_run(path)?);
        } else if path.join("run.json").is_file() {
            runs.push(read_run(&path.join("run.json"))?);
        } else if path.is_dir() {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| TpccError::io(path, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join("run.json").is_file())
                .collect();
            dirs.sort();
            for d in dirs {
                runs.push(read_run(&d.join("run.json"))?);
            }
        }
        if runs.is_empty() {
            return Err(TpccError::Usage(format!(
                "{}: no run.json there (give a run.json, its directory, or a directory of repeats)",
                path.display()
            )));
        }
        Ok(Side {
            path: path.to_path_buf(),
            runs,
        })
    }

    /// The spread of `metric`: over the runs when there are two or more, else over the single
    /// run's measured intervals (`interval` gives the metric per interval).
    pub fn spread(
        &self,
        run: impl Fn(&RunResult) -> Option<f64>,
        interval: impl Fn(&IntervalRecord) -> Option<f64>,
    ) -> Option<Spread> {
        if self.runs.len() >= 2 {
            Spread::of(self.runs.iter().filter_map(run))
        } else {
            let r = &self.runs[0];
            let v: Vec<f64> = r
                .intervals
                .iter()
                .filter(|i| !i.warmup && i.done.iter().sum::<u64>() > 0)
                .filter_map(interval)
                .collect();
            if v.is_empty() {
                Spread::of(run(r))
            } else {
                // The whole-run value is the median's best estimate; the intervals give the range.
                let s = Spread::of(v)?;
                let m = run(r).unwrap_or(s.median);
                Some(Spread {
                    median: m,
                    min: s.min.min(m),
                    max: s.max.max(m),
                    n: s.n,
                })
            }
        }
    }

    fn describe(&self) -> String {
        let r = &self.runs[0];
        format!(
            "{} — {} run(s) on {}, commit {}, started {}",
            self.path.display(),
            self.runs.len(),
            r.engine,
            if r.meta.commit.is_empty() {
                "unknown"
            } else {
                &r.meta.commit
            },
            if r.meta.started_utc.is_empty() {
                "unknown"
            } else {
                &r.meta.started_utc
            }
        )
    }
}

type RunMetric = fn(&RunResult) -> Option<f64>;
type IntervalMetric = fn(&IntervalRecord) -> Option<f64>;

/// The compared metrics: name, per run, per interval, decimals.
fn metrics() -> Vec<(&'static str, RunMetric, IntervalMetric, usize)> {
    fn kib(v: f64) -> f64 {
        v / 1024.0
    }
    vec![
        ("NOTPM", |r| Some(r.notpm), |i| Some(i.notpm), 0),
        ("tpm (all types)", |r| Some(r.tpm), |i| Some(i.tpm), 0),
        (
            "p99 New-Order ms",
            |r| Some(r.latency[0].p99_ms),
            |i| Some(i.latency[0].p99_ms),
            2,
        ),
        (
            "p99.9 New-Order ms",
            |r| Some(r.latency[0].p999_ms),
            |i| Some(i.latency[0].p999_ms),
            2,
        ),
        (
            "CPU µs / txn",
            |r| Some(r.costs.cpu_us_per_txn).filter(|_| r.costs.transactions > 0),
            |i| Some(i.costs.cpu_us_per_txn).filter(|_| i.costs.transactions > 0),
            0,
        ),
        (
            "cores used",
            |r| Some(r.costs.cores_used).filter(|_| r.costs.transactions > 0),
            |i| Some(i.costs.cores_used).filter(|_| i.costs.transactions > 0),
            2,
        ),
        (
            "device KiB written / txn",
            |r| r.costs.device.as_ref().map(|d| kib(d.write_bytes_per_txn)),
            |i| i.costs.device.as_ref().map(|d| kib(d.write_bytes_per_txn)),
            1,
        ),
        (
            "device KiB read / txn",
            |r| r.costs.device.as_ref().map(|d| kib(d.read_bytes_per_txn)),
            |i| i.costs.device.as_ref().map(|d| kib(d.read_bytes_per_txn)),
            1,
        ),
        (
            "device flushes / txn",
            |r| r.costs.device.as_ref().map(|d| d.flushes_per_txn),
            |i| i.costs.device.as_ref().map(|d| d.flushes_per_txn),
            2,
        ),
        (
            "voluntary ctx switches / txn",
            |r| Some(r.costs.voluntary_cs_per_txn).filter(|_| r.costs.transactions > 0),
            |i| Some(i.costs.voluntary_cs_per_txn).filter(|_| i.costs.transactions > 0),
            1,
        ),
        (
            "log KiB / txn",
            |r| per_txn(r.stats.log_bytes, r).map(kib),
            |i| per_txn_i(i.stats.log_bytes, i).map(kib),
            2,
        ),
        (
            "syncs / txn",
            |r| per_txn(r.stats.log_syncs + r.stats.data_syncs, r),
            |i| per_txn_i(i.stats.log_syncs + i.stats.data_syncs, i),
            2,
        ),
    ]
}

fn per_txn(v: u64, r: &RunResult) -> Option<f64> {
    let n: u64 = r.done.iter().sum();
    (n > 0).then(|| v as f64 / n as f64)
}

fn per_txn_i(v: u64, i: &IntervalRecord) -> Option<f64> {
    let n: u64 = i.done.iter().sum();
    (n > 0).then(|| v as f64 / n as f64)
}

/// The comparison table as text.
pub fn render(a: &Side, b: &Side) -> String {
    let mut s = format!("A: {}\nB: {}\n", a.describe(), b.describe());
    s.push_str(&format!(
        "spread: {} A, {} B (median (min–max)); ratio B/A (range); \"within noise\" = the range includes 1.0\n\n",
        if a.runs.len() >= 2 { "over the runs of" } else { "over the measured intervals of" },
        if b.runs.len() >= 2 { "over the runs of" } else { "over the measured intervals of" },
    ));
    s.push_str(&format!(
        "{:<30} {:>26} {:>26}  {}\n",
        "metric", "A", "B", "B/A"
    ));
    for (name, run, interval, d) in metrics() {
        let sa = a.spread(run, interval);
        let sb = b.spread(run, interval);
        let show = |x: &Option<Spread>| x.map_or("-".to_string(), |x| x.show(d));
        let ratio = match (&sa, &sb) {
            (Some(x), Some(y)) => Ratio::of(x, y).map_or("-".to_string(), |r| r.show()),
            _ => "-".to_string(),
        };
        s.push_str(&format!(
            "{:<30} {:>26} {:>26}  {}\n",
            name,
            show(&sa),
            show(&sb),
            ratio
        ));
    }
    for (label, side) in [("A", a), ("B", b)] {
        for r in &side.runs {
            for w in &r.costs.machine.warnings {
                s.push_str(&format!("WARNING ({label}): {w}\n"));
            }
            if r.interrupted {
                s.push_str(&format!("NOTE ({label}): a run was interrupted (Ctrl-C)\n"));
            }
        }
    }
    s
}

/// `keel-tpcc compare A B`.
///
/// # Errors
///
/// Either side cannot be read.
pub fn cmd_compare(a: &Path, b: &Path) -> TpccResult<i32> {
    let a = Side::read(a)?;
    let b = Side::read(b)?;
    print!("{}", render(&a, &b));
    Ok(0)
}
