//! Redo log commit rate and latency (issue 3; REFERENCE.md E4 and E5).
//!
//! One commit = `append` one group (a 100-byte `PageWrite`, 135 bytes in the log) +
//! `wait_durable` (Durability::Sync), by 1, 4, 16 or 64 committer threads at once, for
//! block size 512 / 4096 × write-ahead padding on / off × sync method × Preallocated / Growing
//! files, on real files in `keel_benches::bench_dir("redo_log")` (`$KEEL_BENCH_DIR` picks the
//! disk). Padding applies to preallocated files written through the page cache only (appends and
//! O_DIRECT never read), so it is varied for those. Criterion reports time per commit across all
//! committers (its throughput line is commits/s); each configuration also prints commits/s,
//! p50/p99 commit latency (hdrhistogram) and the log's own counters.
//!
//! Beside each configuration, in the same group and the same run, the raw baseline of the same
//! write size and file kind: a loop of `pwrite(size)` at the next position + the sync method, on a
//! zero-filled file (preallocated) or an appended one (growing) — the foundation's `device`
//! bench loop. The log's write size is the block size, or `write_ahead_size` (4096) with padding.
//!
//! At the end, `targets` measures each issue-3 target as interleaved A/B rounds (A B A B …, the
//! median of 5 rounds per side) and prints the ratios. The cold-page-cache case (padding off
//! vs on, 512-byte blocks) drops the page cache before every round
//! (`echo 3 > /proc/sys/vm/drop_caches`; needs root — otherwise it prints `SKIPPED:`), and prints
//! the bytes the process read from the device meanwhile (`/proc/self/io` `read_bytes`): the
//! read-before-write that padding avoids.
//!
//! Each target line gives the median, the range of the rounds and, for log sides, the commits per
//! sync over the measured rounds.
//!
//! `KEEL_LOG_BENCH_QUICK=1`: committers 1 and 16 only (for a fast look).
//! `KEEL_LOG_BENCH=matrix` or `=targets`: run only that part. `KEEL_LOG_TARGET=<text>`: only the
//! targets whose title contains it. `KEEL_LOG_SPIN_US=<µs>`: override
//! `LogConfig::spin_before_sleep`.
#![allow(missing_docs)] // criterion_group! generates an undocumented pub fn

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hdrhistogram::Histogram;
use keel_benches::{bench_dir, method_name};
use keel_io::{
    preallocate, AlignedBuf, Backend, File, FileClass, FileSystem, OpenOptions, OsFs,
    Preallocation, SyncMethod,
};
use keel_page::PageId;
use keel_redo_log::{LogBlockSize, LogConfig, LogFiles, LogStats, Record, RedoLog};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const GROUP_PAYLOAD: usize = 100;
const LOG_FILE: u64 = 16 << 20;
const RAW_FILE: u64 = 32 << 20;

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1000))
        .sample_size(10)
        .nresamples(10_000)
}

fn committer_counts() -> Vec<usize> {
    if std::env::var_os("KEEL_LOG_BENCH_QUICK").is_some() {
        vec![1, 16]
    } else {
        vec![1, 4, 16, 64]
    }
}

fn records(i: u64, payload: usize) -> Vec<Record> {
    let mut bytes = vec![0u8; payload.max(8)];
    bytes[..8].copy_from_slice(&i.to_le_bytes());
    vec![Record::PageWrite {
        page_id: PageId(i % 1000),
        offset: 64,
        bytes: bytes.into(),
    }]
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Variant {
    preallocated: bool,
    block: LogBlockSize,
    padding: bool,
    sync: SyncMethod,
    committers: usize,
    /// Bytes of the `PageWrite` in each commit (100 unless a target says otherwise).
    payload: usize,
}

impl Variant {
    fn name(&self) -> String {
        format!(
            "{}/{}/{}/{}/c{}",
            if self.preallocated {
                "prealloc"
            } else {
                "growing"
            },
            self.block.bytes(),
            if self.padding { "pad" } else { "nopad" },
            method_name(self.sync),
            self.committers
        )
    }

    fn config(&self) -> LogConfig {
        LogConfig {
            block_size: self.block,
            write_ahead_size: if self.padding {
                4096
            } else {
                self.block.bytes()
            },
            sync_method: self.sync,
            files: if self.preallocated {
                LogFiles::Preallocated {
                    file_size: LOG_FILE,
                    files: 2,
                }
            } else {
                LogFiles::Growing {
                    file_size: LOG_FILE,
                }
            },
            buffer_size: 4 << 20,
            spin_before_sleep: std::env::var("KEEL_LOG_SPIN_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_micros)
                .unwrap_or(LogConfig::default().spin_before_sleep),
            ..LogConfig::default()
        }
    }

    /// Bytes per log write with one committer (the raw baseline's write size).
    fn write_size(&self) -> usize {
        if self.padding && self.preallocated && self.sync != SyncMethod::ODirect {
            4096.max(self.block.bytes())
        } else {
            self.block.bytes()
        }
    }
}

/// A log with committer threads that wait for work orders, and a checkpointer that recycles the
/// log (checkpoint at the durable LSN once half the capacity is used).
struct Bench {
    log: RedoLog,
    orders: Vec<Sender<u64>>,
    done: Receiver<()>,
    lat: Arc<Mutex<Histogram<u64>>>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    checkpointer: Option<JoinHandle<()>>,
    dir: PathBuf,
}

impl Bench {
    fn new(dir: &Path, v: &Variant) -> Bench {
        let _ = std::fs::remove_dir_all(dir);
        let fs: Arc<dyn FileSystem> = Arc::new(OsFs::new(Backend::Pwrite));
        let (log, _) = RedoLog::open(fs, dir, v.config()).expect("open log");
        let (done_tx, done) = channel();
        let lat = Arc::new(Mutex::new(hist()));
        let mut orders = Vec::new();
        let mut threads = Vec::new();
        for t in 0..v.committers {
            let (tx, rx) = channel::<u64>();
            orders.push(tx);
            let log = log.clone();
            let done_tx = done_tx.clone();
            let lat = lat.clone();
            let payload = v.payload;
            threads.push(std::thread::spawn(move || {
                let mut h = hist();
                let mut i = (t as u64) << 40;
                while let Ok(n) = rx.recv() {
                    if n == u64::MAX {
                        break;
                    }
                    for _ in 0..n {
                        i += 1;
                        let t0 = Instant::now();
                        let lsn = log.append(&records(i, payload)).expect("append");
                        log.wait_durable(lsn).expect("wait_durable");
                        h.saturating_record(t0.elapsed().as_micros() as u64);
                    }
                    if let Ok(mut l) = lat.lock() {
                        let _ = l.add(&h);
                    }
                    h.reset();
                    let _ = done_tx.send(());
                }
            }));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let checkpointer = {
            let log = log.clone();
            let stop = stop.clone();
            Some(std::thread::spawn(move || {
                let cap = log.capacity().unwrap_or(LOG_FILE);
                while !stop.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(2));
                    if log.space_used() > cap / 2 {
                        let _ = log.checkpoint(log.durable_lsn());
                    }
                }
            }))
        };
        Bench {
            log,
            orders,
            done,
            lat,
            threads,
            stop,
            checkpointer,
            dir: dir.to_path_buf(),
        }
    }

    /// Runs `n` commits spread over the committers; wall time.
    fn run(&self, n: u64) -> Duration {
        let k = self.orders.len() as u64;
        let t0 = Instant::now();
        let mut busy = 0;
        for (i, tx) in self.orders.iter().enumerate() {
            let share = n / k + u64::from((i as u64) < n % k);
            if share > 0 {
                tx.send(share).expect("order");
                busy += 1;
            }
        }
        for _ in 0..busy {
            self.done.recv().expect("done");
        }
        t0.elapsed()
    }

    fn take_latency(&self) -> Histogram<u64> {
        let mut l = self.lat.lock().expect("latency lock");
        let h = l.clone();
        l.reset();
        h
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        for tx in &self.orders {
            let _ = tx.send(u64::MAX);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.stop.store(true, SeqCst);
        if let Some(t) = self.checkpointer.take() {
            let _ = t.join();
        }
        let _ = self.log.close();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The raw baseline: write `size` bytes at the next position, then sync per `method`.
struct Raw {
    fs: OsFs,
    path: PathBuf,
    file: Arc<dyn File>,
    size: usize,
    method: SyncMethod,
    preallocated: bool,
    pos: u64,
    buf: AlignedBuf,
    n: u64,
}

impl Raw {
    fn fresh(fs: &OsFs, path: &Path, method: SyncMethod, preallocated: bool) -> Arc<dyn File> {
        let _ = std::fs::remove_file(path);
        let f = fs
            .open(
                path,
                &OpenOptions::new(FileClass::Log)
                    .create(true)
                    .for_sync_method(method),
            )
            .expect("open raw file");
        let how = if preallocated {
            Preallocation::Zeroed
        } else {
            Preallocation::Grow
        };
        preallocate(f.as_ref(), RAW_FILE, how).expect("preallocate raw file");
        f
    }

    fn new(dir: &Path, size: usize, method: SyncMethod, preallocated: bool) -> Raw {
        let fs = OsFs::new(Backend::Pwrite);
        let path = dir.join(format!("raw-{size}-{}-{preallocated}", method_name(method)));
        let file = Raw::fresh(&fs, &path, method, preallocated);
        Raw {
            fs,
            path,
            file,
            size,
            method,
            preallocated,
            pos: 0,
            buf: AlignedBuf::page(size),
            n: 0,
        }
    }

    /// `iters` commits; time spent (recreating a used-up growing file is not timed).
    fn run(&mut self, iters: u64, lat: Option<&mut Histogram<u64>>) -> Duration {
        let mut spent = Duration::ZERO;
        let mut lat = lat;
        for _ in 0..iters {
            if self.pos + self.size as u64 > RAW_FILE {
                if !self.preallocated {
                    self.file = Raw::fresh(&self.fs, &self.path, self.method, false);
                }
                self.pos = 0;
            }
            self.n += 1;
            self.buf[..8].copy_from_slice(&self.n.to_le_bytes());
            let t0 = Instant::now();
            self.file
                .write_all_at(&self.buf, self.pos)
                .expect("raw write");
            self.file.sync(self.method).expect("raw sync");
            let d = t0.elapsed();
            if let Some(h) = lat.as_deref_mut() {
                h.saturating_record(d.as_micros() as u64);
            }
            spent += d;
            self.pos += self.size as u64;
        }
        spent
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn per_commit(s: &LogStats, base: &LogStats, commits: u64) -> String {
    let c = commits.max(1) as f64;
    format!(
        "writes/commit {:.2}, syncs/commit {:.2}, commits/sync p50 {}, bytes written/commit {:.0} (padding {:.0}, tail rewrites {:.2}/commit)",
        (s.writes - base.writes) as f64 / c,
        (s.syncs - base.syncs) as f64 / c,
        s.commits_per_sync.p50,
        (s.bytes_written - base.bytes_written) as f64 / c,
        (s.padding_bytes - base.padding_bytes) as f64 / c,
        (s.tail_rewrites - base.tail_rewrites) as f64 / c,
    )
}

fn part_enabled(part: &str) -> bool {
    std::env::var("KEEL_LOG_BENCH").map_or(true, |p| p == part || p == "all")
}

fn matrix(c: &mut Criterion) {
    if !part_enabled("matrix") {
        return;
    }
    let root = bench_dir("redo_log");
    let caps = OsFs::new(Backend::Pwrite)
        .capabilities(&root)
        .expect("probe bench dir");
    eprintln!(
        "redo_log bench in {} ({}; logical {} B, physical {} B)",
        root.display(),
        caps.filesystem,
        caps.logical_block_size,
        caps.physical_block_size
    );
    for preallocated in [true, false] {
        for sync in SyncMethod::ALL {
            let kind = if preallocated { "prealloc" } else { "growing" };
            let mut group = c.benchmark_group(format!("redo_log/{kind}/{}", method_name(sync)));
            group.throughput(Throughput::Elements(1));
            // Raw baselines first, in the same group.
            let mut raw_rate: HashMap<usize, f64> = HashMap::new();
            for size in [512usize, 4096] {
                let mut raw = Raw::new(&root, size, sync, preallocated);
                let mut total = (0u64, Duration::ZERO);
                group.bench_function(BenchmarkId::new("raw", size), |b| {
                    b.iter_custom(|iters| {
                        let d = raw.run(iters, None);
                        total.0 += iters;
                        total.1 += d;
                        d
                    })
                });
                let rate = total.0 as f64 / total.1.as_secs_f64();
                raw_rate.insert(size, rate);
                println!(
                    "  raw {kind}/{size}/{}: {rate:.0} commits/s",
                    method_name(sync)
                );
            }
            for block in LogBlockSize::ALL {
                let paddings: &[bool] = if preallocated && sync != SyncMethod::ODirect {
                    &[true, false]
                } else {
                    &[false]
                };
                for &padding in paddings {
                    for &committers in &committer_counts() {
                        let v = Variant {
                            preallocated,
                            block,
                            padding,
                            sync,
                            committers,
                            payload: GROUP_PAYLOAD,
                        };
                        let name = v.name();
                        let bench = Bench::new(&root.join("log"), &v);
                        let base = bench.log.stats();
                        let mut total = (0u64, Duration::ZERO);
                        group.bench_function(
                            BenchmarkId::new(
                                format!(
                                    "log/{}/{}",
                                    block.bytes(),
                                    if padding { "pad" } else { "nopad" }
                                ),
                                format!("c{committers}"),
                            ),
                            |b| {
                                b.iter_custom(|iters| {
                                    let d = bench.run(iters);
                                    total.0 += iters;
                                    total.1 += d;
                                    d
                                })
                            },
                        );
                        let lat = bench.take_latency();
                        let rate = total.0 as f64 / total.1.as_secs_f64();
                        let raw = raw_rate.get(&v.write_size()).copied().unwrap_or(f64::NAN);
                        println!(
                            "  {name}: {rate:.0} commits/s, p50 {} µs, p99 {} µs; raw {} B {:.0}/s -> ratio {:.2}; {}",
                            lat.value_at_quantile(0.5),
                            lat.value_at_quantile(0.99),
                            v.write_size(),
                            raw,
                            rate / raw,
                            per_commit(&bench.log.stats(), &base, total.0)
                        );
                    }
                }
            }
            group.finish();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Targets, as interleaved A/B rounds.

const ROUNDS: usize = 5;
const ROUND_TIME: Duration = Duration::from_millis(400);

/// One side of an A/B comparison.
enum Side {
    Log(Bench),
    Raw(Raw),
}

impl Side {
    /// Commits for about `ROUND_TIME`; (commits/s, latency histogram).
    fn round(&mut self) -> (f64, Histogram<u64>) {
        let mut n = 0u64;
        let mut spent = Duration::ZERO;
        let mut lat = hist();
        while spent < ROUND_TIME {
            // 200 commits per committer between barriers (the end of a chunk waits for every
            // committer; with 200 in all, 16 committers did ~12 each and the ramp at each end
            // weighed on the figure).
            let chunk = match self {
                Side::Log(b) => 200 * b.orders.len() as u64,
                Side::Raw(_) => 200,
            };
            match self {
                Side::Log(b) => {
                    spent += b.run(chunk);
                    let _ = lat.add(b.take_latency());
                }
                Side::Raw(r) => spent += r.run(chunk, Some(&mut lat)),
            }
            n += chunk;
        }
        (n as f64 / spent.as_secs_f64(), lat)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn drop_caches() -> bool {
    // Only clean pages are dropped: write back everything first (the log files are synced
    // anyway).
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Interleaves rounds of `sides`; prints each side's median commits/s and p50/p99, returns the
/// medians.
fn ab(title: &str, sides: &mut [(&str, Side)], cold: bool) -> Vec<f64> {
    if let Ok(only) = std::env::var("KEEL_LOG_TARGET") {
        if !title.contains(&only) {
            return vec![f64::NAN; sides.len()];
        }
    }
    let mut rates = vec![Vec::new(); sides.len()];
    let mut lats: Vec<Histogram<u64>> = sides.iter().map(|_| hist()).collect();
    let mut reads = vec![0u64; sides.len()];
    for side in sides.iter_mut() {
        side.1.round(); // warm-up
    }
    let base: Vec<Option<LogStats>> = sides
        .iter()
        .map(|s| match &s.1 {
            Side::Log(b) => Some(b.log.stats()),
            Side::Raw(_) => None,
        })
        .collect();
    for _ in 0..ROUNDS {
        for (i, side) in sides.iter_mut().enumerate() {
            if cold {
                drop_caches();
            }
            let r0 = read_bytes();
            let (rate, lat) = side.1.round();
            reads[i] += read_bytes() - r0;
            rates[i].push(rate);
            let _ = lats[i].add(lat);
        }
    }
    println!("target: {title}");
    let mut out = Vec::new();
    for (i, side) in sides.iter().enumerate() {
        let m = median(rates[i].clone());
        let mut spread = rates[i].clone();
        spread.sort_by(|a, b| a.total_cmp(b));
        let syncs = match (&side.1, &base[i]) {
            (Side::Log(b), Some(s0)) => {
                let s = b.log.stats();
                let commits = (s.groups_appended - s0.groups_appended).max(1);
                format!(
                    ", {:.2} commits/sync",
                    commits as f64 / (s.syncs - s0.syncs).max(1) as f64
                )
            }
            _ => String::new(),
        };
        println!(
            "  {:<44} {:>8.0} commits/s (median of {ROUNDS}; {:.0}..{:.0}), p50 {} µs, p99 {} µs{syncs}{}",
            side.0,
            m,
            spread[0],
            spread[spread.len() - 1],
            lats[i].value_at_quantile(0.5),
            lats[i].value_at_quantile(0.99),
            if cold {
                format!(", device reads {} KiB", reads[i] / 1024)
            } else {
                String::new()
            }
        );
        out.push(m);
    }
    out
}

fn targets(_c: &mut Criterion) {
    if !part_enabled("targets") {
        return;
    }
    let root = bench_dir("redo_log_targets");
    let log = |name: &str, v: Variant| Side::Log(Bench::new(&root.join(name), &v));
    let v = |preallocated, block, padding, sync, committers| Variant {
        preallocated,
        block,
        padding,
        sync,
        committers,
        payload: GROUP_PAYLOAD,
    };
    use LogBlockSize::{B4096, B512};
    use SyncMethod::{Fdatasync, Fsync};

    println!("\n=== issue 3 targets (interleaved A/B, {ROUNDS} rounds of {ROUND_TIME:?}) ===");
    let r = ab(
        "one committer, Preallocated, fdatasync >= 90% of raw write+fdatasync of the same size",
        &mut [
            (
                "raw 4096 B zeroed + fdatasync",
                Side::Raw(Raw::new(&root, 4096, Fdatasync, true)),
            ),
            ("log B4096 c1", log("a", v(true, B4096, true, Fdatasync, 1))),
            (
                "log B512 pad (4 KiB writes) c1",
                log("b", v(true, B512, true, Fdatasync, 1)),
            ),
            (
                "raw 512 B zeroed + fdatasync",
                Side::Raw(Raw::new(&root, 512, Fdatasync, true)),
            ),
            (
                "log B512 nopad c1",
                log("c", v(true, B512, false, Fdatasync, 1)),
            ),
        ],
        false,
    );
    println!(
        "  => B4096 {:.0}% of raw 4096, B512+pad {:.0}% of raw 4096, B512 nopad {:.0}% of raw 512 (target >= 90%)",
        100.0 * r[1] / r[0],
        100.0 * r[2] / r[0],
        100.0 * r[4] / r[3]
    );

    let r = ab(
        "16 committers >= 8x one committer (group commit)",
        &mut [
            ("log B4096 c1", log("a", v(true, B4096, true, Fdatasync, 1))),
            (
                "log B4096 c16",
                log("b", v(true, B4096, true, Fdatasync, 16)),
            ),
        ],
        false,
    );
    println!(
        "  => 16 committers: {:.1}x one committer (target >= 8x)",
        r[1] / r[0]
    );

    for sync in [Fdatasync, Fsync] {
        let r = ab(
            &format!(
                "Preallocated >= 1.5x Growing, one committer, {}",
                method_name(sync)
            ),
            &mut [
                (
                    "log prealloc B4096 c1",
                    log("a", v(true, B4096, true, sync, 1)),
                ),
                (
                    "log growing B4096 c1",
                    log("b", v(false, B4096, false, sync, 1)),
                ),
                (
                    "raw 4096 zeroed",
                    Side::Raw(Raw::new(&root, 4096, sync, true)),
                ),
                (
                    "raw 4096 appending",
                    Side::Raw(Raw::new(&root, 4096, sync, false)),
                ),
            ],
            false,
        );
        println!(
            "  => Preallocated {:.2}x Growing (target >= 1.5x); raw zeroed {:.2}x raw appending",
            r[0] / r[1],
            r[2] / r[3]
        );
    }

    let r = ab(
        "padding on: 512-byte blocks within 5% of 4096-byte blocks (warm cache)",
        &mut [
            (
                "log B512 pad c1",
                log("a", v(true, B512, true, Fdatasync, 1)),
            ),
            ("log B4096 c1", log("b", v(true, B4096, true, Fdatasync, 1))),
        ],
        false,
    );
    println!(
        "  => B512/B4096 = {:.3} (target 0.95 ..= 1.05)",
        r[0] / r[1]
    );

    if drop_caches() {
        let r = ab(
            "padding off with a cold page cache (caches dropped before every round): the penalty",
            &mut [
                (
                    "log B512 pad c1 (cold)",
                    log("a", v(true, B512, true, Fdatasync, 1)),
                ),
                (
                    "log B512 nopad c1 (cold)",
                    log("b", v(true, B512, false, Fdatasync, 1)),
                ),
                (
                    "log B4096 c1 (cold)",
                    log("c", v(true, B4096, true, Fdatasync, 1)),
                ),
                (
                    "raw 512 zeroed (cold)",
                    Side::Raw(Raw::new(&root, 512, Fdatasync, true)),
                ),
                (
                    "raw 4096 zeroed (cold)",
                    Side::Raw(Raw::new(&root, 4096, Fdatasync, true)),
                ),
            ],
            true,
        );
        println!(
            "  => cold cache: padding off runs at {:.2}x padding on (B512); raw 512 at {:.2}x raw 4096",
            r[1] / r[0],
            r[3] / r[4]
        );
        // Larger transactions (2000-byte groups) touch a new page every ~2 commits.
        let big = |padding| Variant {
            payload: 2000,
            ..v(true, B512, padding, Fdatasync, 1)
        };
        let r = ab(
            "padding off with a cold page cache, 2000-byte transactions",
            &mut [
                ("log B512 pad c1 2 KB groups (cold)", log("a", big(true))),
                ("log B512 nopad c1 2 KB groups (cold)", log("b", big(false))),
            ],
            true,
        );
        println!(
            "  => cold cache, 2 KB transactions: padding off runs at {:.2}x padding on",
            r[1] / r[0]
        );
    } else {
        println!("SKIPPED: cold-page-cache target: writing /proc/sys/vm/drop_caches needs root");
    }
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group! {
    name = benches;
    config = config();
    targets = matrix, targets
}
criterion_main!(benches);
