//! Keel beside the embedded peers on key-value workloads (issue 16): redb (every commit
//! `Durability::Immediate`), SQLite via rusqlite (WAL, `synchronous = FULL`, a `WITHOUT ROWID`
//! table), fjall (single-writer transactions, every commit `PersistMode::SyncAll`). Same random
//! 16-byte keys and 100-byte values, the same cache size for every engine, every commit durable.
//! Engines are interleaved within each repeat (A B C D, A B C D, ...), and the table gives the
//! median of the repeats with their spread and Keel's ratio to the best peer.
//!
//! `cargo bench -p keel-benches --bench peers` runs a small default (quick to run anywhere).
//! Environment:
//! - `KEEL_PEERS_ROWS` (default 200000): rows loaded for the get, scan and order-entry cases;
//! - `KEEL_PEERS_REPEATS` (default 3);
//! - `KEEL_PEERS_CASES` (default all): a comma list of `commit1,commit16,bulk,get,scan,order,cold`;
//! - `KEEL_PEERS_ENGINES` (default all): a comma list of `keel,redb,sqlite,fjall`, where
//!   `keel@4096` or `keel@8192` is Keel with that page size (16 KiB by default) and
//!   `keel@buffered` Keel without O_DIRECT on its data file;
//! - `KEEL_PEERS_SET` (default none): Keel settings over its defaults, `key=value` separated by
//!   `;` as `keel-tpcc --set` takes them (`log_file_size=256MiB;torn_page=none`);
//! - `KEEL_PEERS_DIR` (default the system temp dir): where the stores are made (each removed
//!   after its case).
//!
//! The bulk case prints a second line per engine, `settled`: the same load counted with the
//! engine's settling after it (Keel's checkpoint, SQLite's WAL checkpoint, fjall's memtable
//! flush), so an engine that defers work past the load (Keel's dirty pages, fjall's memtable)
//! is charged for it.
//!
//! Costs beside throughput, per operation: device bytes written (`/proc/diskstats` of the
//! device holding the stores: run on a quiet machine; `/proc/self/io` is not used, as it
//! charged Keel 1 MiB per 4 KiB io_uring log write on this machine's kernel),
//! process CPU µs and voluntary context switches (`getrusage`, through keel-tpcc's `ProcessUsage`);
//! the bulk case also prints the loading thread's own CPU per row (`RUSAGE_THREAD`), as an
//! engine that works on background threads spends less of it than its process CPU. The `cold` case drops the OS page cache before it starts
//! (as root) and runs with data five times the engine cache, each engine's gets in a child
//! process inside a memory cgroup of its cache plus `KEEL_PEERS_COLD_SLACK_MIB` (default 32;
//! `peers_cold.rs`), so buffered engines cannot keep the data in the OS page cache beyond that
//! (without a memory cgroup it runs unlimited and prints a `NOTE:`).
//!
//! `commit1` also measures, interleaved with the engines, the device's floor for one durable
//! commit at a time: a 4 KiB `pwrite` at the next position of a zero-filled file, then
//! `fdatasync` (the least any engine can do per durable commit; REFERENCE.md E4). It prints
//! each engine's rate against it and what 1.5× the best peer would need.

#[path = "peers_cold.rs"]
mod cold;

use keel_tpcc::costs::{device_of, parse_diskstats, ProcessUsage};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What a case needs of an engine: durable write transactions with reads, gets, scans.
trait Kv: Send + Sync {
    /// One durable write transaction: `f` reads and writes through the handle; committed
    /// (durably) when `f` returns.
    fn write(&self, f: &mut dyn FnMut(&mut dyn KvTx) -> Res<()>) -> Res<()>;
    /// A point read outside a write transaction.
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>>;
    /// Reads `n` consecutive rows from `start`; returns the bytes of keys and values seen.
    fn scan(&self, start: &[u8], n: usize) -> Res<usize>;
    /// Makes the next open start without recovery work (a clean close; dropping does the rest).
    fn quiesce(&self) -> Res<()> {
        Ok(())
    }
}

/// A write transaction's view.
trait KvTx {
    fn get(&mut self, key: &[u8]) -> Res<Option<Vec<u8>>>;
    fn put(&mut self, key: &[u8], value: &[u8]) -> Res<()>;
}

// ---- Keel ----

struct KeelKv(keel::Store);

struct KeelTx<'a, 't>(keel::Table<'a, 't>);

impl KvTx for KeelTx<'_, '_> {
    fn get(&mut self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self.0.get(key)?)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.0.insert(key, value)?;
        Ok(())
    }
}

impl Kv for KeelKv {
    fn write(&self, f: &mut dyn FnMut(&mut dyn KvTx) -> Res<()>) -> Res<()> {
        let tx = self.0.write()?;
        {
            let mut t = KeelTx(tx.table("kv")?);
            f(&mut t)?;
        }
        tx.commit()?;
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self.0.read()?.table("kv")?.get(key)?)
    }
    fn scan(&self, start: &[u8], n: usize) -> Res<usize> {
        let r = self.0.read()?;
        let t = r.table("kv")?;
        let mut bytes = 0;
        // Borrowed rows (as redb's range hands out AccessGuards).
        let mut c = t.cursor(start..)?;
        for _ in 0..n {
            let Some((k, v)) = c.next()? else { break };
            bytes += k.len() + v.len();
        }
        Ok(bytes)
    }
    fn quiesce(&self) -> Res<()> {
        // Dropping a Store does not checkpoint (it is a crash as far as the files go): the
        // next open would replay the log, and with a smaller pool could not hold the load's
        // 10,000-row transactions.
        self.0.checkpoint()?;
        Ok(())
    }
}

// ---- redb ----

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("kv");

struct RedbKv(redb::Database);

struct RedbTx<'a>(redb::Table<'a, &'static [u8], &'static [u8]>);

impl KvTx for RedbTx<'_> {
    fn get(&mut self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        use redb::ReadableTable;
        Ok(self.0.get(key)?.map(|g| g.value().to_vec()))
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.0.insert(key, value)?;
        Ok(())
    }
}

impl Kv for RedbKv {
    fn write(&self, f: &mut dyn FnMut(&mut dyn KvTx) -> Res<()>) -> Res<()> {
        let mut tx = self.0.begin_write()?;
        tx.set_durability(redb::Durability::Immediate)?;
        {
            let mut t = RedbTx(tx.open_table(REDB_TABLE)?);
            f(&mut t)?;
        }
        tx.commit()?;
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        use redb::ReadableDatabase;
        let r = self.0.begin_read()?;
        let t = r.open_table(REDB_TABLE)?;
        Ok(t.get(key)?.map(|g| g.value().to_vec()))
    }
    fn scan(&self, start: &[u8], n: usize) -> Res<usize> {
        use redb::ReadableDatabase;
        let r = self.0.begin_read()?;
        let t = r.open_table(REDB_TABLE)?;
        let mut bytes = 0;
        for row in t.range(start..)?.take(n) {
            let (k, v) = row?;
            bytes += k.value().len() + v.value().len();
        }
        Ok(bytes)
    }
}

// ---- SQLite ----

struct SqliteKv {
    path: PathBuf,
    cache_kib: usize,
    conns: std::sync::Mutex<Vec<rusqlite::Connection>>,
}

impl SqliteKv {
    fn open(path: PathBuf, cache_bytes: usize) -> Res<SqliteKv> {
        let kv = SqliteKv {
            path,
            cache_kib: cache_bytes / 1024,
            conns: std::sync::Mutex::new(Vec::new()),
        };
        let c = kv.connect()?;
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID;",
        )?;
        kv.conns.lock().map_err(|_| "poisoned")?.push(c);
        Ok(kv)
    }

    fn connect(&self) -> Res<rusqlite::Connection> {
        let c = rusqlite::Connection::open(&self.path)?;
        c.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
        c.execute_batch(&format!(
            "PRAGMA synchronous = FULL; PRAGMA cache_size = -{}; PRAGMA busy_timeout = 60000;",
            self.cache_kib
        ))?;
        Ok(c)
    }

    fn with<T>(&self, f: impl FnOnce(&mut rusqlite::Connection) -> Res<T>) -> Res<T> {
        let pooled = self.conns.lock().map_err(|_| "poisoned")?.pop();
        let mut c = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        let r = f(&mut c);
        self.conns.lock().map_err(|_| "poisoned")?.push(c);
        r
    }
}

struct SqliteTx<'a>(&'a rusqlite::Transaction<'a>);

impl KvTx for SqliteTx<'_> {
    fn get(&mut self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        use rusqlite::OptionalExtension;
        let mut st = self.0.prepare_cached("SELECT v FROM kv WHERE k = ?1")?;
        Ok(st.query_row([key], |r| r.get(0)).optional()?)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        let mut st = self
            .0
            .prepare_cached("INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)")?;
        st.execute(rusqlite::params![key, value])?;
        Ok(())
    }
}

impl Kv for SqliteKv {
    fn write(&self, f: &mut dyn FnMut(&mut dyn KvTx) -> Res<()>) -> Res<()> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            f(&mut SqliteTx(&tx))?;
            tx.commit()?;
            Ok(())
        })
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        use rusqlite::OptionalExtension;
        self.with(|c| {
            let mut st = c.prepare_cached("SELECT v FROM kv WHERE k = ?1")?;
            Ok(st.query_row([key], |r| r.get(0)).optional()?)
        })
    }
    fn quiesce(&self) -> Res<()> {
        // The WAL copied into the database file and emptied (as Keel's checkpoint writes its
        // pages and frees its log).
        self.with(|c| {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            Ok(())
        })
    }
    fn scan(&self, start: &[u8], n: usize) -> Res<usize> {
        self.with(|c| {
            let mut st =
                c.prepare_cached("SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2")?;
            let mut rows = st.query(rusqlite::params![start, n as i64])?;
            let mut bytes = 0;
            while let Some(r) = rows.next()? {
                bytes += r.get_ref(0)?.as_blob()?.len() + r.get_ref(1)?.as_blob()?.len();
            }
            Ok(bytes)
        })
    }
}

// ---- fjall ----

struct FjallKv {
    db: fjall::SingleWriterTxDatabase,
    ks: fjall::SingleWriterTxKeyspace,
}

struct FjallTx<'a, 'b> {
    tx: &'b mut fjall::SingleWriterWriteTx<'a>,
    ks: &'b fjall::SingleWriterTxKeyspace,
}

impl KvTx for FjallTx<'_, '_> {
    fn get(&mut self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        use fjall::Readable;
        Ok(self.tx.get(self.ks, key)?.map(|v| v.to_vec()))
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Res<()> {
        self.tx.insert(self.ks, key, value);
        Ok(())
    }
}

impl Kv for FjallKv {
    fn write(&self, f: &mut dyn FnMut(&mut dyn KvTx) -> Res<()>) -> Res<()> {
        let mut tx = self
            .db
            .write_tx()
            .durability(Some(fjall::PersistMode::SyncAll));
        f(&mut FjallTx {
            tx: &mut tx,
            ks: &self.ks,
        })?;
        tx.commit()?;
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        use fjall::Readable;
        Ok(self.db.read_tx().get(&self.ks, key)?.map(|v| v.to_vec()))
    }
    fn scan(&self, start: &[u8], n: usize) -> Res<usize> {
        use fjall::Readable;
        let snap = self.db.read_tx();
        let mut bytes = 0;
        for g in snap.range(&self.ks, start..).take(n) {
            let (k, v) = g.into_inner()?;
            bytes += k.len() + v.len();
        }
        Ok(bytes)
    }
    fn quiesce(&self) -> Res<()> {
        // The memtable written to a table file, so the next open does not rebuild it in
        // memory from the journal (as Keel's checkpoint spares its replay).
        self.ks.inner().rotate_memtable_and_wait()?;
        Ok(())
    }
}

// ---- harness ----

const ENGINES: [&str; 4] = ["keel", "redb", "sqlite", "fjall"];

fn open(engine: &str, dir: &Path, cache: usize) -> Res<Arc<dyn Kv>> {
    std::fs::create_dir_all(dir)?;
    // `keel@4096` and `keel@8192`: Keel with that page size (the default is 16 KiB);
    // `keel@buffered`: Keel's data file through the OS page cache (`direct_io: false`).
    let (engine, variant) = match engine.split_once('@') {
        Some((e, v)) => (e, Some(v)),
        None => (engine, None),
    };
    let (page_size, direct_io) = match variant {
        None => (keel::Config::default().page_size, true),
        Some("buffered") => (keel::Config::default().page_size, false),
        Some(ps) => (ps.parse::<usize>()?, true),
    };
    Ok(match engine {
        "keel" => Arc::new(KeelKv(keel::Store::open(
            dir,
            keel_config(cache, page_size, direct_io)?,
        )?)),
        "redb" => {
            let mut b = redb::Database::builder();
            b.set_cache_size(cache);
            Arc::new(RedbKv(b.create(dir.join("kv.redb"))?))
        }
        "sqlite" => Arc::new(SqliteKv::open(dir.join("kv.sqlite"), cache)?),
        "fjall" => {
            let db = fjall::SingleWriterTxDatabase::builder(dir)
                .cache_size(cache as u64)
                .open()?;
            let ks = db.keyspace("kv", fjall::KeyspaceCreateOptions::default)?;
            Arc::new(FjallKv { db, ks })
        }
        other => return Err(format!("unknown engine {other}").into()),
    })
}

/// Keel's configuration for a case: the defaults with this cache, page size and data-file mode,
/// then each `key=value` of `KEEL_PEERS_SET` (separated by `;`, as `keel-tpcc --set` takes them:
/// `log_file_size=256MiB;torn_page=none`).
fn keel_config(cache: usize, page_size: usize, direct_io: bool) -> Res<keel::Config> {
    let mut set = keel_tpcc::config::StoreConfig::default();
    if let Ok(list) = std::env::var("KEEL_PEERS_SET") {
        for assignment in list.split(';').filter(|a| !a.trim().is_empty()) {
            set.set(assignment)?;
        }
    }
    let mut cfg = set.keel_config()?;
    if set.get("pool_size").is_none() {
        cfg.pool_size = cache;
    }
    if set.get("page_size").is_none() {
        cfg.page_size = page_size;
    }
    if set.get("direct_io").is_none() {
        cfg.direct_io = direct_io;
    }
    Ok(cfg)
}

/// One engine's medians in a case: its name, operations per second, device bytes per op.
type Median = (String, f64, f64);

/// Keel's medians and those of the peer with the highest rate (Keel variants such as
/// `keel@4096` are not peers), if Keel and a peer ran.
fn keel_and_best_peer(meds: &[Median]) -> Option<(&Median, &Median)> {
    let keel = meds.iter().find(|m| m.0 == "keel")?;
    let best = meds
        .iter()
        .filter(|m| !m.0.starts_with("keel"))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some((keel, best))
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Key `i` of the data set: 16 bytes that sort randomly against `i`.
fn key(i: u64) -> [u8; 16] {
    let mut r = Rng(i.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&r.next().to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// Value `i`: 100 pseudo-random bytes (incompressible, so no engine gains from compressing).
fn value(i: u64) -> [u8; 100] {
    let mut r = Rng(i ^ 0x5EED_0000_0000_0000);
    let mut v = [0u8; 100];
    for chunk in v.chunks_mut(8) {
        let x = r.next().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
    v
}

/// Counters: bytes the device holding the stores wrote (`/proc/diskstats`: what reached the
/// device, file-system journal included), and this process's CPU µs and voluntary context
/// switches.
#[derive(Clone, Copy)]
struct Costs {
    write_bytes: u64,
    usage: ProcessUsage,
}

/// The device the stores are on (`None`: not measurable, e.g. tmpfs: bytes print as 0).
static DEVICE: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();

fn costs() -> Costs {
    let write_bytes = DEVICE
        .get()
        .copied()
        .flatten()
        .and_then(|(major, minor)| {
            let text = std::fs::read_to_string("/proc/diskstats").ok()?;
            parse_diskstats(&text, major, minor)
        })
        .map_or(0, |d| d.write_bytes);
    Costs {
        write_bytes,
        usage: ProcessUsage::now(),
    }
}

/// One measurement: operations per second, device bytes and CPU µs per operation.
#[derive(Clone, Copy)]
struct Sample {
    per_sec: f64,
    bytes_per_op: f64,
    cpu_us_per_op: f64,
    cs_per_op: f64,
    /// The bulk case only: the same operations counted with the engine's settling after them
    /// (`Kv::quiesce`: Keel's checkpoint, SQLite's WAL checkpoint, fjall's memtable flush),
    /// so work an engine defers past the measured load is charged too.
    settled: Option<Settled>,
}

/// Rate and device bytes per operation with the settling included.
#[derive(Clone, Copy)]
struct Settled {
    per_sec: f64,
    bytes_per_op: f64,
    /// CPU µs per row of the thread that loaded (`getrusage(RUSAGE_THREAD)`), the load alone:
    /// what the caller itself spends, against the process's CPU, which includes the engine's
    /// background threads (fjall flushes and compacts on its own; Keel's inserts run on the
    /// caller's thread).
    caller_cpu_us_per_op: f64,
}

fn measure(ops: u64, f: impl FnOnce() -> Res<()>) -> Res<Sample> {
    let c0 = costs();
    let t0 = Instant::now();
    f()?;
    let secs = t0.elapsed().as_secs_f64();
    let c1 = costs();
    let n = ops.max(1) as f64;
    Ok(Sample {
        per_sec: n / secs,
        bytes_per_op: c1.write_bytes.saturating_sub(c0.write_bytes) as f64 / n,
        cpu_us_per_op: c1.usage.cpu_us.saturating_sub(c0.usage.cpu_us) as f64 / n,
        cs_per_op: c1.usage.voluntary_cs.saturating_sub(c0.usage.voluntary_cs) as f64 / n,
        settled: None,
    })
}

/// The device's floor for single durable commits: `n` times a 4 KiB write at the next
/// position of a zero-filled 16 MiB file (overwrites: no metadata to commit), then
/// `fdatasync`.
fn device_commits(dir: &Path, n: u64) -> Res<Sample> {
    use std::os::unix::fs::FileExt;
    const FILE: u64 = 16 << 20;
    std::fs::create_dir_all(dir)?;
    let path = dir.join("floor");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let zeros = vec![0u8; 1 << 20];
    for i in 0..FILE >> 20 {
        f.write_all_at(&zeros, i << 20)?;
    }
    f.sync_all()?;
    let page = [7u8; 4096];
    let sample = measure(n, || {
        for i in 0..n {
            f.write_all_at(&page, (i * 4096) % FILE)?;
            f.sync_data()?;
        }
        Ok(())
    })?;
    drop(f);
    let _ = std::fs::remove_dir_all(dir);
    Ok(sample)
}

/// Measures `n` gets of random keys of the `rows` loaded (each must be there).
fn random_gets(kv: &dyn Kv, rows: u64, n: u64, seed: u64) -> Res<Sample> {
    let mut r = Rng(seed);
    measure(n, || {
        for _ in 0..n {
            let i = r.next() % rows;
            if kv.get(&key(i))?.is_none() {
                return Err(format!("key {i} missing").into());
            }
        }
        Ok(())
    })
}

/// Loads rows `0..rows` in transactions of `per_txn`.
fn load(kv: &dyn Kv, rows: u64, per_txn: u64) -> Res<()> {
    let mut i = 0;
    while i < rows {
        let end = (i + per_txn).min(rows);
        kv.write(&mut |t| {
            for j in i..end {
                t.put(&key(j), &value(j))?;
            }
            Ok(())
        })?;
        i = end;
    }
    Ok(())
}

struct Settings {
    rows: u64,
    cache: usize,
}

/// Runs case `case` on a fresh store of `engine` under `dir`; returns its sample.
fn run_case(case: &str, engine: &str, dir: &Path, s: &Settings, rep: u64) -> Res<Sample> {
    let _ = std::fs::remove_dir_all(dir);
    let seed = 1000 + rep;
    let sample = match case {
        "commit1" | "commit16" => {
            let kv = open(engine, dir, s.cache)?;
            let threads: u64 = if case == "commit1" { 1 } else { 16 };
            let per_thread = if threads == 1 { 2000 } else { 300 };
            measure(threads * per_thread, || {
                std::thread::scope(|sc| {
                    let hs: Vec<_> = (0..threads)
                        .map(|t| {
                            let kv = kv.clone();
                            sc.spawn(move || -> Res<()> {
                                let mut r = Rng(seed * 100 + t);
                                for _ in 0..per_thread {
                                    let i = r.next();
                                    kv.write(&mut |tx| tx.put(&key(i), &value(i)))?;
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    hs.into_iter()
                        .try_for_each(|h| h.join().map_err(|_| "thread panicked")?)
                })
            })?
        }
        "bulk" => {
            let kv = open(engine, dir, s.cache)?;
            let t0 = ProcessUsage::thread_now();
            let loaded = measure(s.rows, || load(kv.as_ref(), s.rows, 10_000))?;
            let t1 = ProcessUsage::thread_now();
            let settle = measure(s.rows, || kv.quiesce())?;
            let n = s.rows.max(1) as f64;
            Sample {
                settled: Some(Settled {
                    per_sec: n / (n / loaded.per_sec + n / settle.per_sec),
                    bytes_per_op: loaded.bytes_per_op + settle.bytes_per_op,
                    caller_cpu_us_per_op: t1.cpu_us.saturating_sub(t0.cpu_us) as f64 / n,
                }),
                ..loaded
            }
        }
        "get" => {
            let kv = open(engine, dir, s.cache)?;
            load(kv.as_ref(), s.rows, 10_000)?;
            random_gets(kv.as_ref(), s.rows, 200_000, seed)?
        }
        "scan" => {
            let kv = open(engine, dir, s.cache)?;
            load(kv.as_ref(), s.rows, 10_000)?;
            let (scans, len) = (1000u64, 1000usize);
            let mut r = Rng(seed);
            measure(scans * len as u64, || {
                for _ in 0..scans {
                    let start = key(r.next() % s.rows);
                    std::hint::black_box(kv.scan(&start, len)?);
                }
                Ok(())
            })?
        }
        "order" => {
            let kv = open(engine, dir, s.cache)?;
            load(kv.as_ref(), s.rows, 10_000)?;
            let n = 500u64;
            let mut r = Rng(seed);
            let mut next_new = s.rows;
            measure(n, || {
                for _ in 0..n {
                    let reads: Vec<u64> = (0..10).map(|_| r.next() % s.rows).collect();
                    let news: Vec<u64> = (0..10).map(|k| next_new + k).collect();
                    next_new += 10;
                    kv.write(&mut |t| {
                        for &i in &reads {
                            let mut v = t.get(&key(i))?.ok_or("row missing")?;
                            v[0] = v[0].wrapping_add(1);
                            t.put(&key(i), &v)?;
                        }
                        for &i in &news {
                            t.put(&key(i), &value(i))?;
                        }
                        Ok(())
                    })?;
                }
                Ok(())
            })?
        }
        "cold" => {
            // Data five times the cache: rows of ~116 bytes (plus engine overhead).
            let cache = (s.rows * 116 / 5) as usize;
            // Loaded with the resident cache (a 10,000-row transaction must fit it), then
            // reopened with the small one.
            let kv = open(engine, dir, s.cache)?;
            load(kv.as_ref(), s.rows, 10_000)?;
            kv.quiesce()?;
            drop(kv);
            drop_os_cache();
            cold_gets(engine, dir, s.rows, cache.max(1 << 20), seed)?
        }
        other => return Err(format!("unknown case {other}").into()),
    };
    let _ = std::fs::remove_dir_all(dir);
    Ok(sample)
}

/// The cold gets: in a child process inside a memory cgroup of the engine's cache plus
/// `KEEL_PEERS_COLD_SLACK_MIB` (default 32) when one can be made, so buffered engines cannot
/// keep more of the data in the OS page cache than that; else here, unlimited (with a `NOTE:`).
fn cold_gets(engine: &str, dir: &Path, rows: u64, cache: usize, seed: u64) -> Res<Sample> {
    let slack: u64 = std::env::var("KEEL_PEERS_COLD_SLACK_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let limit = cache as u64 + (slack << 20);
    let name = format!("keel-peers-cold-{}", std::process::id());
    let cg = match cold::MemCgroup::create(&name, limit) {
        Ok(cg) => cg,
        Err(why) => {
            println!("NOTE: cold {engine}: not memory-limited ({why})");
            let kv = open(engine, dir, cache)?;
            return random_gets(kv.as_ref(), rows, 20_000, seed);
        }
    };
    let spec = format!(
        "{engine}|{}|{rows}|{cache}|{seed}|{}",
        dir.display(),
        cg.procs().display()
    );
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("--bench")
        .env(cold::CHILD_ENV, spec)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let peak = cg.peak().map_or("?".to_string(), |p| (p >> 20).to_string());
    let line = text.lines().find_map(|l| l.strip_prefix("COLD-SAMPLE "));
    let (Some(line), true) = (line, out.status.success()) else {
        return Err(format!(
            "cold {engine}: child failed ({}) in a {} MiB cgroup (peak {peak} MiB): {text}",
            out.status,
            limit >> 20
        )
        .into());
    };
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse::<f64>())
        .collect::<Result<_, _>>()?;
    let [per_sec, bytes_per_op, cpu_us_per_op, cs_per_op] = f[..] else {
        return Err(format!("cold {engine}: bad child line {line:?}").into());
    };
    println!(
        "cold      {engine:<7} memory limit {} MiB (cache {} MiB + slack {slack}), peak {peak} MiB",
        limit >> 20,
        cache >> 20
    );
    Ok(Sample {
        per_sec,
        bytes_per_op,
        cpu_us_per_op,
        cs_per_op,
        settled: None,
    })
}

/// The child side of [`cold_gets`]: joins the cgroup, opens the store with the small cache,
/// runs the gets and prints the sample on a `COLD-SAMPLE` line.
fn cold_child(spec: &str) -> Res<()> {
    let p: Vec<&str> = spec.split('|').collect();
    let [engine, dir, rows, cache, seed, procs] = p[..] else {
        return Err(format!("bad {} {spec:?}", cold::CHILD_ENV).into());
    };
    cold::join(Path::new(procs))?;
    let dir = Path::new(dir);
    let _ = DEVICE.set(device_of(dir).ok());
    let kv = open(engine, dir, cache.parse()?)?;
    let s = random_gets(kv.as_ref(), rows.parse()?, 20_000, seed.parse()?)?;
    println!(
        "COLD-SAMPLE {} {} {} {}",
        s.per_sec, s.bytes_per_op, s.cpu_us_per_op, s.cs_per_op
    );
    Ok(())
}

/// Drops the OS page cache (clean pages: the store was closed, its writes are durable).
fn drop_os_cache() {
    if std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_err() {
        println!("NOTE: cannot drop the OS page cache (not root): the cold case starts warm");
    }
}

fn median_spread(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn env_list(name: &str, all: &[&str]) -> Vec<String> {
    std::env::var(name).map_or_else(
        |_| all.iter().map(|s| s.to_string()).collect(),
        |v| v.split(',').map(|s| s.trim().to_string()).collect(),
    )
}

fn main() -> Res<()> {
    // `cargo bench` passes --bench; `cargo test --benches` runs this with no flag: do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    if let Ok(spec) = std::env::var(cold::CHILD_ENV) {
        return cold_child(&spec);
    }
    let rows: u64 = std::env::var("KEEL_PEERS_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let repeats: u64 = std::env::var("KEEL_PEERS_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let cases = env_list(
        "KEEL_PEERS_CASES",
        &[
            "commit1", "commit16", "bulk", "get", "scan", "order", "cold",
        ],
    );
    let engines = env_list("KEEL_PEERS_ENGINES", &ENGINES);
    let base = std::env::var("KEEL_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir())
        .join(format!("keel-peers-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let device = device_of(&base);
    if let Err(why) = &device {
        println!("NOTE: {why}");
    }
    let _ = DEVICE.set(device.ok());
    // Cache for the resident cases: the whole data set fits (rows * ~116 B, with room).
    let settings = Settings {
        rows,
        cache: ((rows * 116 * 4) as usize).max(64 << 20),
    };
    println!(
        "peers: {rows} rows, {repeats} repeats, cache {} MiB (cold: data 5x the cache), engines {engines:?}, dir {}",
        settings.cache >> 20,
        base.display()
    );
    for case in &cases {
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); engines.len()];
        // `commit1`: the device floor, measured in each repeat beside the engines.
        let mut floor: Vec<f64> = Vec::new();
        let mut floor_cpu: Vec<f64> = Vec::new();
        for rep in 0..repeats {
            for (e, engine) in engines.iter().enumerate() {
                let dir = base.join(format!("{case}-{engine}"));
                samples[e].push(run_case(case, engine, &dir, &settings, rep)?);
            }
            if case == "commit1" {
                let d = device_commits(&base.join("device-floor"), 2000)?;
                floor.push(d.per_sec);
                floor_cpu.push(d.cpu_us_per_op);
            }
        }
        let unit = match case.as_str() {
            "commit1" | "commit16" => "commits/s",
            "bulk" => "rows/s",
            "get" | "cold" => "gets/s",
            "scan" => "rows/s",
            _ => "txn/s",
        };
        println!("\n== {case} ({unit}; median [min..max] of {repeats}; bytes written, CPU µs and voluntary context switches per op)");
        let mut meds = Vec::new();
        for (e, engine) in engines.iter().enumerate() {
            let rate: Vec<f64> = samples[e].iter().map(|s| s.per_sec).collect();
            let bytes: Vec<f64> = samples[e].iter().map(|s| s.bytes_per_op).collect();
            let cpu: Vec<f64> = samples[e].iter().map(|s| s.cpu_us_per_op).collect();
            let (m, lo, hi) = median_spread(&rate);
            let (b, _, _) = median_spread(&bytes);
            let (c, _, _) = median_spread(&cpu);
            let cs: Vec<f64> = samples[e].iter().map(|s| s.cs_per_op).collect();
            let (x, _, _) = median_spread(&cs);
            println!(
                "{case:<9} {engine:<7} {m:>12.0} [{lo:.0}..{hi:.0}]  {b:>10.0} B/op  {c:>8.2} µs CPU/op  {x:>6.2} cs/op"
            );
            meds.push((engine.clone(), m, b));
        }
        // The bulk load with each engine's settling after it (`Sample::settled`).
        let mut settled_meds = Vec::new();
        for (e, engine) in engines.iter().enumerate() {
            let settled: Vec<Settled> = samples[e].iter().filter_map(|s| s.settled).collect();
            if settled.is_empty() {
                continue;
            }
            let rate: Vec<f64> = settled.iter().map(|s| s.per_sec).collect();
            let bytes: Vec<f64> = settled.iter().map(|s| s.bytes_per_op).collect();
            let caller: Vec<f64> = settled.iter().map(|s| s.caller_cpu_us_per_op).collect();
            let (m, lo, hi) = median_spread(&rate);
            let (b, blo, bhi) = median_spread(&bytes);
            let (c, clo, chi) = median_spread(&caller);
            println!(
                "{case:<9} {engine:<7} settled: {m:>12.0} [{lo:.0}..{hi:.0}]  {b:>10.0} B/op [{blo:.0}..{bhi:.0}]  load: {c:.2} µs CPU/row [{clo:.2}..{chi:.2}] on the caller's thread"
            );
            settled_meds.push((engine.clone(), m, b));
        }
        if let Some(((_, km, kb), (best, bm, bb))) = keel_and_best_peer(&settled_meds) {
            println!(
                "{case:<9} settled: keel / best peer ({best}): {:.2}x the rows/s, {:.2}x the bytes per row",
                km / bm,
                kb / bb
            );
        }
        if let Some(((_, k, _), (best, b, _))) = keel_and_best_peer(&meds) {
            println!("{case:<9} keel / best peer ({best}): {:.2}x", k / b);
            if !floor.is_empty() {
                let (f, lo, hi) = median_spread(&floor);
                let (fc, _, _) = median_spread(&floor_cpu);
                println!(
                    "{case:<9} device floor (4 KiB pwrite + fdatasync, zero-filled file): {f:.0} [{lo:.0}..{hi:.0}] commits/s at {fc:.2} µs CPU each (the kernel's); keel {:.2}x of it, {best} {:.2}x; 1.5x {best} would need {:.0} = {:.2}x the floor",
                    k / f,
                    b / f,
                    1.5 * b,
                    1.5 * b / f
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}
