//! What ran, where, when and how: the metadata every run carries into `run.json`, `report.md` and
//! the lines printed at its start, so that a figure can be traced to the build, the machine, the
//! seed and the configuration actually in force (what `auto` chose, whether O_DIRECT was on,
//! what the file-system probe found).
//!
//! Invariant: nothing here is guessed. A field the machine cannot give is empty or `None`; the
//! commit is the one the binary was built from (`build.rs`), `unknown` outside a git checkout.

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::txn::WriterMode;

/// The machine a run ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPUs available to the process.
    pub cpus: usize,
    /// CPU model (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// Physical memory, bytes.
    pub memory_bytes: u64,
}

impl Host {
    /// This machine.
    pub fn this() -> Host {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        Host {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .unwrap_or("")
                .trim()
                .to_string(),
            memory_bytes: meminfo
                .lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
                .map_or(0, |kb| kb.saturating_mul(1024)),
        }
    }
}

/// The settings an engine actually ran with, as it reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffectiveInfo {
    /// One line per finding, for the start of a run and for report.md (e.g. "torn pages:
    /// doublewrite (auto: atomic writes unsupported ...)").
    pub lines: Vec<String>,
    /// The engine's own structured report (Keel: `Store::effective()` with the probe).
    pub json: serde_json::Value,
}

/// Everything needed to trace a run's figures back to what produced them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// keel-tpcc's (and Keel's) version.
    pub version: String,
    /// The git commit the binary was built from (`-dirty` when the tree had changes).
    pub commit: String,
    /// When the run started, UTC (RFC 3339).
    pub started_utc: String,
    /// Seed of the terminals.
    pub seed: u64,
    /// Warm-up, seconds.
    pub warmup_s: f64,
    /// Measured duration asked for, seconds.
    pub duration_s: f64,
    /// Report interval, seconds.
    pub interval_s: f64,
    /// Terminals.
    pub terminals: usize,
    /// Arrival rate (transactions per second, Poisson) or `None` for closed-loop terminals.
    pub rate_tps: Option<f64>,
    /// Engine label (states its durability for the peers).
    pub engine: String,
    /// The machine.
    pub host: Host,
    /// The configuration in force.
    pub effective: EffectiveInfo,
    /// How New-Order, Payment and Delivery took their write transactions in this run (the
    /// mode in force). `None` in runs recorded before the mode existed (they used the
    /// exclusive writer).
    #[serde(default)]
    pub writers: Option<WriterMode>,
    /// The mode asked for (`--writers`); differs from `writers` when the engine has no
    /// concurrent writers and ran the exclusive writer instead.
    #[serde(default)]
    pub writers_requested: Option<WriterMode>,
}

impl RunMeta {
    /// The lines printed at the start of a run.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![
            format!(
                "keel-tpcc {} (commit {}), started {}, seed {}",
                self.version, self.commit, self.started_utc, self.seed
            ),
            format!(
                "host {}: Linux {}, {} CPUs ({}), {:.1} GiB",
                self.host.hostname,
                self.host.kernel,
                self.host.cpus,
                if self.host.cpu_model.is_empty() {
                    "model unknown"
                } else {
                    &self.host.cpu_model
                },
                self.host.memory_bytes as f64 / (1u64 << 30) as f64
            ),
            format!(
                "workload: {} terminals, {}, {:.0} s warm-up + {:.0} s measured, interval {:.0} s",
                self.terminals,
                match self.rate_tps {
                    Some(r) => format!("Poisson arrivals at {r} transactions/s"),
                    None => "closed loop (no think time)".into(),
                },
                self.warmup_s,
                self.duration_s,
                self.interval_s
            ),
            format!("engine: {}", self.engine),
            format!("writers: {}", self.writers_text()),
        ];
        v.extend(self.effective.lines.iter().map(|l| format!("  {l}")));
        v
    }
}

impl RunMeta {
    /// The writer mode in force, with what it means and, when the engine could not run the
    /// requested one, that it was ignored.
    pub fn writers_text(&self) -> String {
        match (self.writers, self.writers_requested) {
            (None, _) => "not recorded (runs before --writers used the exclusive writer)".into(),
            (Some(WriterMode::Concurrent), _) => format!(
                "concurrent (New-Order, Payment and Delivery as concurrent write transactions, validated at commit; a conflicted one runs again with the same input, at most {} retries)",
                crate::txn::MAX_RETRIES
            ),
            (Some(WriterMode::Exclusive), Some(WriterMode::Concurrent)) => format!(
                "exclusive (--writers concurrent ignored: the {} engine has no concurrent writers)",
                self.engine
            ),
            (Some(WriterMode::Exclusive), _) => {
                "exclusive (one write transaction at a time; no conflicts)".into()
            }
        }
    }
}

/// The commit this binary was built from (set by `build.rs`).
pub fn build_commit() -> &'static str {
    option_env!("KEEL_GIT_COMMIT").unwrap_or("unknown")
}

/// `t` as RFC 3339 UTC (`2026-11-24T21:55:03Z`), without a date library: days since the epoch
/// to a civil date (H. Hinnant's algorithm).
pub fn rfc3339_utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2026-11-24T21:55:03Z
        let t = UNIX_EPOCH + Duration::from_secs(1_795_557_303);
        assert_eq!(rfc3339_utc(t), "2026-11-24T21:55:03Z");
        // A leap day.
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339_utc(t), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn this_host_is_described() {
        let h = Host::this();
        assert!(h.cpus >= 1);
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(h.memory_bytes > 0, "{h:?}");
            assert!(!h.kernel.is_empty(), "{h:?}");
        } else {
            println!("SKIPPED: no /proc on this machine");
        }
    }
}
