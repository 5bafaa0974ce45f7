//! The `keel` facade end to end (issue 5's targets), on real files under
//! `keel_benches::bench_dir("store")` (`$KEEL_BENCH_DIR` to choose the disk).
//!
//! - `get/resident_1m`: point gets on a table of 1M keys (16-byte keys, 100-byte values) loaded
//!   with `Durability::Lazy` in big transactions into a pool that holds all of it (the bench
//!   prints the pool's hit/miss counts over the run to show no page was read). Target: ≥ 1M/s.
//! - `get/not_resident`: the same table reopened with a 16 MiB pool (≈ 6% of the pages): most
//!   gets read a page: from the device with `direct_io` (the default since issue 14), from the
//!   OS page cache with `KEEL_STORE_BENCH_DIRECT_IO=0`.
//! - `range/10k_rows`: 10,000 rows from a random start in a read transaction, in rows/s.
//! - `insert/lazy_{100,1000}_per_txn`: random 16-byte keys with 100-byte values into a growing
//!   table, `Durability::Lazy`, 100 or 1000 inserts per transaction; time per insert.
//!   Target: ≥ 300k/s.
//! - `commit/{sync,buffered,lazy}`: one transaction inserting one row, begin to commit return.
//! - `commit/raw_log_sync`: `RedoLog::append` + `wait_durable` of a group the size the `sync`
//!   case appended on average (same log configuration, same run) — the floor for `commit/sync`.
//!   Target: `commit/sync` within 10% of it, measured paired: the two are also run interleaved,
//!   commit by commit (100,000 each, about 5 s, long enough for the store's checkpoints to happen), and the
//!   `paired commits` notes give p50, p90, mean, p99, p99.9 and max of both, and what the store's
//!   checkpoints did meanwhile.
//! - `commit/raw_write_fdatasync_4k`: `pwrite` of 4 KiB at the next position of a zero-filled
//!   file + `fdatasync`, the device's floor.
//!
//! Each case runs 0.5 s warm-up + 3 s measurement; with the 1M-key load the whole bench takes
//! about two minutes. `KEEL_STORE_BENCH=gets`, `=inserts` or `=commits` runs only that part;
//! `KEEL_STORE_BENCH_DIRECT_IO=0` (or `=1`) sets `direct_io` for every store the bench opens
//! (default: the library's default, on where the file system supports it). The load rate, the
//! `direct_io` in force and the ratios against the targets are printed as `NOTE:` lines.
#![allow(missing_docs)] // criterion_group! generates an undocumented pub fn

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use keel::{Config, Durability, Store};
use keel_benches::bench_dir;
use keel_io::SplitMix64;
use keel_page::PageId;
use keel_redo_log::{Record, RedoLog};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: u64 = 1_000_000;
const VALUE: usize = 100;
const TABLE: &str = "bench";
/// Commits of each kind in the interleaved Sync-versus-raw-log comparison: enough (a few
/// seconds) that the store's checkpoints happen during it, as they do in criterion's case.
const PAIRED: usize = 100_000;

/// Whether the part `name` of the bench runs (`KEEL_STORE_BENCH` unset, or equal to it).
fn part_enabled(name: &str) -> bool {
    std::env::var("KEEL_STORE_BENCH").map_or(true, |v| v == name)
}

/// 16 bytes, ordered by `i`.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.to_be_bytes());
    k[8..].copy_from_slice(&(i ^ 0x5A5A_5A5A_5A5A_5A5A).to_le_bytes());
    k
}

fn value(i: u64) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(j as u8);
    }
    v
}

fn config(durability: Durability, pool: usize) -> Config {
    let mut c = Config {
        pool_size: pool,
        durability,
        ..Config::default()
    };
    match std::env::var("KEEL_STORE_BENCH_DIRECT_IO").as_deref() {
        Ok("0") => c.direct_io = false,
        Ok("1") => c.direct_io = true,
        _ => {}
    }
    c
}

fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(3000))
        .sample_size(20)
        .nresamples(20_000)
}

/// Per-iteration time of a finished criterion case, from its saved estimate.
fn estimate_ns(group: &str, case: &str) -> Option<f64> {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = base
        .join("criterion")
        .join(group)
        .join(case)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    // The figure criterion prints: the slope of the linear fit, else the mean.
    v["slope"]["point_estimate"]
        .as_f64()
        .or_else(|| v["mean"]["point_estimate"].as_f64())
}

/// On-CPU time of the calling thread in ns (`/proc/thread-self/schedstat`; 0 if unreadable).
/// The machine is shared, so wall time includes time this thread waited for a core; the
/// on-CPU time per operation is what one core can do.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse().ok()))
        .unwrap_or(0)
}

/// Operations and on-CPU time accumulated over a criterion case's timed loops.
#[derive(Default)]
struct Cpu {
    ops: u64,
    ns: u64,
}

impl Cpu {
    /// Runs `f` `iters` times, returns the wall time and adds the on-CPU time.
    fn run(&mut self, iters: u64, ops_per_iter: u64, mut f: impl FnMut()) -> Duration {
        let c0 = thread_cpu_ns();
        let t0 = Instant::now();
        for _ in 0..iters {
            f();
        }
        let wall = t0.elapsed();
        self.ns += thread_cpu_ns().saturating_sub(c0);
        self.ops += iters * ops_per_iter;
        wall
    }

    fn note(&self, case: &str, unit: &str) {
        let per = self.ns as f64 / self.ops.max(1) as f64;
        println!(
            "NOTE: {case}: {per:.0} ns on-CPU per {unit} = {:.0} {unit}s/s per busy core ({} {unit}s timed)",
            1e9 / per.max(1e-9),
            self.ops
        );
    }
}

fn load(store: &Store) {
    let t0 = Instant::now();
    let per_txn = 10_000;
    let mut i = 0;
    while i < KEYS {
        let tx = store.write().expect("write txn");
        {
            let mut t = tx.table(TABLE).expect("table");
            for k in i..(i + per_txn).min(KEYS) {
                t.insert(&key(k), &value(k)).expect("insert");
            }
        }
        tx.commit().expect("commit");
        i += per_txn;
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "NOTE: loaded {KEYS} keys in order (Lazy, {per_txn} per txn) in {s:.2} s = {:.0} inserts/s",
        KEYS as f64 / s
    );
}

/// Criterion case `get/<name>`: point gets of random keys of the loaded table (keys drawn with
/// `seed`), with the on-CPU note.
fn random_gets(c: &mut Criterion, store: &Store, name: &str, seed: u64) {
    let r = store.read().expect("read txn");
    let t = r.table(TABLE).expect("table");
    let mut g = c.benchmark_group("get");
    g.throughput(Throughput::Elements(1));
    let mut rng = SplitMix64::new(seed);
    let mut cpu = Cpu::default();
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            cpu.run(iters, 1, || {
                black_box(t.get(&key(rng.next_u64() % KEYS)).expect("get"));
            })
        })
    });
    g.finish();
    cpu.note(&format!("get/{name}"), "get");
}

fn gets_and_ranges(c: &mut Criterion) {
    if !part_enabled("gets") {
        return;
    }
    let dir = bench_dir("store/table");
    let resident_pool = 768 << 20;
    let store = Store::open(&dir, config(Durability::Lazy, resident_pool)).expect("open");
    println!(
        "NOTE: direct_io in force: {} ({})",
        store.effective().direct_io,
        store.effective().direct_io_reason
    );
    load(&store);
    store.checkpoint().expect("checkpoint");
    let before = store.stats().pool;
    random_gets(c, &store, "resident_1m", 1);
    let after = store.stats().pool;
    println!(
        "NOTE: resident gets: pool {} frames, {} hits, {} misses over the run (data pages read: {})",
        after.frames,
        after.hits - before.hits,
        after.misses - before.misses,
        after.pages_read - before.pages_read
    );
    {
        let r = store.read().expect("read txn");
        let t = r.table(TABLE).expect("table");
        let mut g = c.benchmark_group("range");
        const ROWS: usize = 10_000;
        g.throughput(Throughput::Elements(ROWS as u64));
        let mut rng = SplitMix64::new(2);
        let mut cpu = Cpu::default();
        g.bench_function("10k_rows", |b| {
            b.iter_custom(|iters| {
                cpu.run(iters, ROWS as u64, || {
                    let start = key(rng.next_u64() % (KEYS - ROWS as u64));
                    let mut n = 0usize;
                    for kv in t.range(start.as_slice()..).expect("range").take(ROWS) {
                        black_box(kv.expect("row"));
                        n += 1;
                    }
                    assert_eq!(n, ROWS);
                })
            })
        });
        g.finish();
        cpu.note("range/10k_rows", "row");
    }
    store.close().expect("close");

    // The same table through a pool far smaller than it.
    let small_pool = 16 << 20;
    let store = Store::open(&dir, config(Durability::Lazy, small_pool)).expect("reopen");
    let before = store.stats().pool;
    random_gets(c, &store, "not_resident", 3);
    let after = store.stats().pool;
    let (h, m) = (after.hits - before.hits, after.misses - before.misses);
    println!(
        "NOTE: not-resident gets: pool {} frames, {h} hits, {m} misses ({:.1}% of page accesses missed)",
        after.frames,
        100.0 * m as f64 / (h + m).max(1) as f64
    );
    store.close().expect("close");
}

fn inserts(c: &mut Criterion) {
    if !part_enabled("inserts") {
        return;
    }
    let mut g = c.benchmark_group("insert");
    g.throughput(Throughput::Elements(1));
    for per_txn in [100u64, 1000] {
        let dir = bench_dir(&format!("store/insert-{per_txn}"));
        let store = Store::open(&dir, config(Durability::Lazy, 768 << 20)).expect("open");
        let mut rng = SplitMix64::new(10 + per_txn);
        let mut cpu = Cpu::default();
        g.bench_function(format!("lazy_{per_txn}_per_txn"), |b| {
            b.iter_custom(|iters| {
                // Whole transactions of `per_txn` inserts; the time is divided per insert.
                let txns = iters.div_ceil(per_txn);
                let wall = cpu.run(txns, per_txn, || {
                    let tx = store.write().expect("write txn");
                    {
                        let mut t = tx.table(TABLE).expect("table");
                        for _ in 0..per_txn {
                            let k = rng.next_u64();
                            t.insert(&key(k), &value(k)).expect("insert");
                        }
                    }
                    tx.commit().expect("commit");
                });
                wall.mul_f64(iters as f64 / (txns * per_txn) as f64)
            })
        });
        cpu.note(&format!("insert/lazy_{per_txn}_per_txn"), "insert");
        let s = store.stats();
        println!(
            "NOTE: insert/lazy_{per_txn}_per_txn: {} commits, {:.0} log bytes per insert, pool evictions {}, {} checkpoints; writers waited at the sync checkpoint point {} times, {:.0} ms in all",
            s.commits,
            s.log.bytes_appended as f64 / (s.commits.max(1) * per_txn) as f64,
            s.pool.evictions,
            s.checkpoints,
            s.sync_checkpoint_waits,
            s.sync_checkpoint_wait_us as f64 / 1000.0
        );
        drop(store);
    }
    g.finish();
}

/// The raw floors: the redo log alone, and write + fdatasync.
fn commits(c: &mut Criterion) {
    if !part_enabled("commits") {
        return;
    }
    let mut g = c.benchmark_group("commit");
    let mut sync_group_bytes = 0.0;
    let mut sync_store = None;
    for (name, d) in [
        ("sync", Durability::Sync),
        ("buffered", Durability::Buffered),
        ("lazy", Durability::Lazy),
    ] {
        let dir = bench_dir(&format!("store/commit-{name}"));
        let store = Store::open(&dir, config(d, 64 << 20)).expect("open");
        let mut rng = SplitMix64::new(20);
        let before_all = store.stats();
        let before = before_all.log.clone();
        g.bench_function(name, |b| {
            b.iter(|| {
                let tx = store.write().expect("write txn");
                let k = rng.next_u64();
                tx.table(TABLE)
                    .expect("table")
                    .insert(&key(k), &value(k))
                    .expect("insert");
                tx.commit().expect("commit");
            })
        });
        let after_all = store.stats();
        let after = after_all.log.clone();
        let groups = after.groups_appended - before.groups_appended;
        let bytes = (after.bytes_appended - before.bytes_appended) as f64 / groups.max(1) as f64;
        println!(
            "NOTE: commit/{name}: {groups} groups of {bytes:.0} log bytes on average, {} syncs; \
             {} checkpoints wrote {} pages; writers waited at the sync checkpoint point {} times ({:.1} ms)",
            after.syncs - before.syncs,
            after_all.checkpoints - before_all.checkpoints,
            after_all.flush.data_pages_written - before_all.flush.data_pages_written,
            after_all.sync_checkpoint_waits - before_all.sync_checkpoint_waits,
            (after_all.sync_checkpoint_wait_us - before_all.sync_checkpoint_wait_us) as f64 / 1e3
        );
        if d == Durability::Sync {
            sync_group_bytes = bytes;
            sync_store = Some(store);
        }
    }

    // The redo log alone, same configuration, a group of the same size.
    let dir = bench_dir("store/raw-log");
    let cfg = config(Durability::Sync, 64 << 20).log_config();
    let (log, _) = RedoLog::open(Arc::new(keel_io::OsFs::auto()), &dir, cfg).expect("log");
    let mut payload = sync_group_bytes.max(64.0) as usize;
    let record = |n: usize| Record::PageWrite {
        page_id: PageId(7),
        offset: 64,
        bytes: vec![0xA5; n].into(),
    };
    // Calibrate: one append, then trim the payload by the group's framing overhead.
    let b0 = log.stats().bytes_appended;
    let lsn = log.append(&[record(payload)]).expect("append");
    log.wait_durable(lsn).expect("durable");
    let framing = (log.stats().bytes_appended - b0) as usize - payload;
    payload = payload.saturating_sub(framing).max(1);
    let checkpoint_every = 2000;
    let mut since = 0;
    g.bench_function("raw_log_sync", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                if since >= checkpoint_every {
                    // Free log space (untimed): a real store's checkpointer does this.
                    log.checkpoint(log.end_lsn()).expect("checkpoint");
                    since = 0;
                }
                let t0 = Instant::now();
                let lsn = log.append(&[record(payload)]).expect("append");
                log.wait_durable(lsn).expect("durable");
                spent += t0.elapsed();
                since += 1;
            }
            spent
        })
    });
    println!(
        "NOTE: commit/raw_log_sync: groups of {} log bytes (payload {payload} + framing {framing})",
        payload + framing
    );
    // The same two, interleaved commit by commit, so that both see the same disk and the same
    // background load (other processes on a shared machine move the separate cases' means).
    if let Some(store) = sync_store.take() {
        let mut rng = SplitMix64::new(30);
        let (mut keel, mut raw) = (Vec::new(), Vec::new());
        let s0 = store.stats();
        for i in 0..PAIRED {
            if i % checkpoint_every == 0 {
                log.checkpoint(log.end_lsn()).expect("checkpoint");
            }
            let t0 = Instant::now();
            let tx = store.write().expect("write txn");
            let k = rng.next_u64();
            tx.table(TABLE)
                .expect("table")
                .insert(&key(k), &value(k))
                .expect("insert");
            tx.commit().expect("commit");
            keel.push(t0.elapsed().as_nanos() as u64);
            let t0 = Instant::now();
            let lsn = log.append(&[record(payload)]).expect("append");
            log.wait_durable(lsn).expect("durable");
            raw.push(t0.elapsed().as_nanos() as u64);
        }
        let s1 = store.stats();
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64 / 1e3;
        let (keel_mean, raw_mean) = (mean(&keel), mean(&raw));
        keel.sort_unstable();
        raw.sort_unstable();
        let q = |v: &[u64], f: f64| v[((v.len() - 1) as f64 * f) as usize] as f64 / 1e3;
        println!(
            "NOTE: paired commits ({PAIRED} each, interleaved): keel Sync p50 {:.1} µs p90 {:.1} µs, \
             raw redo log p50 {:.1} µs p90 {:.1} µs; p50 ratio {:.3}, p50 difference {:.1} µs (target ratio ≤ 1.10)",
            q(&keel, 0.5),
            q(&keel, 0.9),
            q(&raw, 0.5),
            q(&raw, 0.9),
            q(&keel, 0.5) / q(&raw, 0.5),
            q(&keel, 0.5) - q(&raw, 0.5)
        );
        println!(
            "NOTE: paired commits: mean keel {keel_mean:.1} µs / raw {raw_mean:.1} µs = {:.3}; \
             p99 {:.1} / {:.1} µs, p99.9 {:.1} / {:.1} µs, max {:.1} / {:.1} µs",
            keel_mean / raw_mean,
            q(&keel, 0.99),
            q(&raw, 0.99),
            q(&keel, 0.999),
            q(&raw, 0.999),
            q(&keel, 1.0),
            q(&raw, 1.0)
        );
        println!(
            "NOTE: paired commits: meanwhile the store took {} checkpoints, wrote {} pages ({} doublewrite batches), \
             writers waited at the sync checkpoint point {} times ({:.1} ms)",
            s1.checkpoints - s0.checkpoints,
            s1.flush.data_pages_written - s0.flush.data_pages_written,
            s1.flush.doublewrite_writes - s0.flush.doublewrite_writes,
            s1.sync_checkpoint_waits - s0.sync_checkpoint_waits,
            (s1.sync_checkpoint_wait_us - s0.sync_checkpoint_wait_us) as f64 / 1e3
        );
        drop(store);
    }
    let _ = log.close();
    drop(log);

    // write + fdatasync of 4 KiB at the next position of a zero-filled file.
    let path = bench_dir("store/raw-fdatasync").join("zeroed");
    const FILE: u64 = 64 << 20;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("open file");
    let zeros = vec![0u8; 1 << 20];
    for i in 0..FILE / zeros.len() as u64 {
        f.write_all_at(&zeros, i * zeros.len() as u64)
            .expect("zero-fill");
    }
    f.sync_all().expect("sync");
    let page = vec![0x5Au8; 4096];
    let mut pos = 0u64;
    g.bench_function("raw_write_fdatasync_4k", |b| {
        b.iter(|| {
            f.write_all_at(&page, pos).expect("write");
            f.sync_data().expect("fdatasync");
            pos = (pos + 4096) % FILE;
        })
    });
    g.finish();
    drop(f);

    let ratio = |a: &str, b: &str| match (estimate_ns("commit", a), estimate_ns("commit", b)) {
        (Some(x), Some(y)) => format!("{:.1} µs / {:.1} µs = {:.3}", x / 1e3, y / 1e3, x / y),
        _ => "n/a (estimates not found)".into(),
    };
    println!(
        "NOTE: commit/sync vs commit/raw_log_sync, criterion cases run one after the other \
         (not paired: background load moves them apart; the paired figures are the target's measure): {}",
        ratio("sync", "raw_log_sync")
    );
    println!(
        "NOTE: commit/raw_log_sync vs raw_write_fdatasync_4k: {}",
        ratio("raw_log_sync", "raw_write_fdatasync_4k")
    );
}

fn targets(_: &mut Criterion) {
    let per_s = |group: &str, case: &str| estimate_ns(group, case).map(|ns| 1e9 / ns);
    // Only the parts that ran now: the others' saved estimates may be from an older build.
    if let Some(r) = per_s("get", "resident_1m").filter(|_| part_enabled("gets")) {
        println!(
            "NOTE: get/resident_1m: {r:.0} gets/s = {:.2} x the 1M/s target",
            r / 1e6
        );
    }
    for per_txn in [100, 1000] {
        if let Some(r) =
            per_s("insert", &format!("lazy_{per_txn}_per_txn")).filter(|_| part_enabled("inserts"))
        {
            println!(
                "NOTE: insert/lazy_{per_txn}_per_txn: {r:.0} inserts/s = {:.2} x the 300k/s target",
                r / 3e5
            );
        }
    }
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = gets_and_ranges, inserts, commits, targets
}
criterion_main!(benches);
