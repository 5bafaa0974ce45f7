//! Counters of the log ([`LogStats`]).

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A summary of a histogram.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramSummary {
    /// Number of samples.
    pub samples: u64,
    /// Smallest sample.
    pub min: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest sample.
    pub max: u64,
    /// `(value, count)` for every distinct recorded value (values are exact up to 2 significant
    /// digits).
    pub buckets: Vec<(u64, u64)>,
}

impl HistogramSummary {
    /// Summarises `h`.
    pub fn of(h: &Histogram<u64>) -> HistogramSummary {
        if h.is_empty() {
            return HistogramSummary::default();
        }
        HistogramSummary {
            samples: h.len(),
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            buckets: h
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }
}

/// A copy of the log's counters (serde-serialisable).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogStats {
    /// Bytes of record groups appended (framing included, block headers not).
    pub bytes_appended: u64,
    /// Record groups appended.
    pub groups_appended: u64,
    /// Every byte written to log files: block headers and trailers, rewritten tail blocks and
    /// write-ahead padding included.
    pub bytes_written: u64,
    /// Payload bytes written for the first time (the part of `bytes_written` that is new log).
    pub payload_bytes_written: u64,
    /// Write-ahead padding: zero bytes written after the last block of a write to reach a
    /// `write_ahead_size` boundary.
    pub padding_bytes: u64,
    /// Filler bytes: the unused rest of tail blocks sealed before a sync (`SealOnSync`).
    pub filler_bytes: u64,
    /// Writes that wrote a partly filled block again (the tail block rewritten as it fills).
    pub tail_rewrites: u64,
    /// Payload bytes written again by those rewrites.
    pub tail_rewrite_bytes: u64,
    /// Write calls to log files.
    pub writes: u64,
    /// Sync calls on log files (none for `ODsync`, whose writes are synchronous).
    pub syncs: u64,
    /// Time spent in sync calls (and, for `ODsync`, in writes), microseconds.
    pub sync_time_us: u64,
    /// Flushes that made new log durable (one per group commit).
    pub durable_flushes: u64,
    /// Groups made durable per durable flush.
    pub commits_per_sync: HistogramSummary,
    /// Calls that waited for durability (or, `Buffered`, for the write).
    pub commit_waits: u64,
    /// Time those calls waited, microseconds.
    pub commit_wait_time_us: u64,
    /// Appenders that waited for log space (a checkpoint).
    pub space_waits: u64,
    /// Appenders that waited for room in the log buffer.
    pub buffer_waits: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Times the flusher thread woke (a request, a completion it waited for, or its interval).
    /// An idle log's flusher sleeps: this stays still while nothing is appended.
    pub flusher_wakeups: u64,
    /// Growing logs: unlinks of files behind the checkpoint that failed (the file stays, and the
    /// next checkpoint or open tries again; a warning is logged each time). Absent from stats
    /// serialised before session 39: read as 0.
    #[serde(default)]
    pub unlink_failures: u64,
}

#[derive(Debug)]
pub(crate) struct Counters {
    pub bytes_appended: AtomicU64,
    pub groups_appended: AtomicU64,
    pub bytes_written: AtomicU64,
    pub payload_bytes_written: AtomicU64,
    pub padding_bytes: AtomicU64,
    pub filler_bytes: AtomicU64,
    pub tail_rewrites: AtomicU64,
    pub tail_rewrite_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
    pub sync_ns: AtomicU64,
    pub durable_flushes: AtomicU64,
    pub commit_waits: AtomicU64,
    pub commit_wait_ns: AtomicU64,
    pub space_waits: AtomicU64,
    pub buffer_waits: AtomicU64,
    pub checkpoints: AtomicU64,
    pub flusher_wakeups: AtomicU64,
    pub unlink_failures: AtomicU64,
    pub commits_per_sync: Mutex<Histogram<u64>>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            bytes_appended: AtomicU64::new(0),
            groups_appended: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            payload_bytes_written: AtomicU64::new(0),
            padding_bytes: AtomicU64::new(0),
            filler_bytes: AtomicU64::new(0),
            tail_rewrites: AtomicU64::new(0),
            tail_rewrite_bytes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            sync_ns: AtomicU64::new(0),
            durable_flushes: AtomicU64::new(0),
            commit_waits: AtomicU64::new(0),
            commit_wait_ns: AtomicU64::new(0),
            space_waits: AtomicU64::new(0),
            buffer_waits: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            flusher_wakeups: AtomicU64::new(0),
            unlink_failures: AtomicU64::new(0),
            commits_per_sync: Mutex::new(
                Histogram::new_with_bounds(1, 1 << 24, 2)
                    .expect("constant histogram bounds are valid"),
            ),
        }
    }
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    pub fn add_time(c: &AtomicU64, d: Duration) {
        c.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Relaxed);
    }

    pub fn record_commits(&self, n: u64) {
        self.durable_flushes.fetch_add(1, Relaxed);
        if n > 0 {
            self.commits_per_sync.lock().saturating_record(n);
        }
    }

    pub fn snapshot(&self) -> LogStats {
        let g = |c: &AtomicU64| c.load(Relaxed);
        LogStats {
            bytes_appended: g(&self.bytes_appended),
            groups_appended: g(&self.groups_appended),
            bytes_written: g(&self.bytes_written),
            payload_bytes_written: g(&self.payload_bytes_written),
            padding_bytes: g(&self.padding_bytes),
            filler_bytes: g(&self.filler_bytes),
            tail_rewrites: g(&self.tail_rewrites),
            tail_rewrite_bytes: g(&self.tail_rewrite_bytes),
            writes: g(&self.writes),
            syncs: g(&self.syncs),
            sync_time_us: g(&self.sync_ns) / 1000,
            durable_flushes: g(&self.durable_flushes),
            commits_per_sync: HistogramSummary::of(&self.commits_per_sync.lock()),
            commit_waits: g(&self.commit_waits),
            commit_wait_time_us: g(&self.commit_wait_ns) / 1000,
            space_waits: g(&self.space_waits),
            buffer_waits: g(&self.buffer_waits),
            checkpoints: g(&self.checkpoints),
            flusher_wakeups: g(&self.flusher_wakeups),
            unlink_failures: g(&self.unlink_failures),
        }
    }
}
