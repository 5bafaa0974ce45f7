//! The workload of the real-file-system crash tests (`fs_shutdown.rs`, `power_loss.rs`): writers
//! committing transactions of a few inserts, updates and removes on keys of their own, each
//! also adding 1 to its counter row, so that after a crash the counters name the commit every
//! writer recovered to and [`model`] rebuilds the whole table from them.
//!
//! Invariant: a transaction's writes are a function of the seed, the writer and its number
//! alone ([`writes`]); writers never share a key, so the table is the union of their models
//! whatever the interleaving, and a rolled-back transaction writes values the model never holds.

// Each test binary uses a part of it.
#![allow(dead_code)]

use super::model::Model;
use super::rng::Rng;
use keel::Store;

/// The table every writer writes.
pub const TABLE: &str = "t";

/// The row writer `w`'s transactions add 1 to (`add_i64`).
pub fn counter(w: usize) -> Vec<u8> {
    format!("~counter{w}").into_bytes()
}

/// Transaction `n` of writer `w`: its writes (`None` removes), a function of the seed, `w` and
/// `n` alone, so that the checker rebuilds the model the writers committed. Writers have keys of
/// their own (`w{w}k..`), so the table is the union of their models whatever the interleaving.
pub fn writes(seed: u64, w: usize, n: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut r = Rng(seed ^ n.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (w as u64) << 56);
    let count = 1 + r.below(8);
    (0..count)
        .map(|i| {
            let key = format!("w{w}k{:04}", r.below(1_000)).into_bytes();
            if r.below(8) == 0 {
                (key, None)
            } else {
                let len = 8 + r.below(400) as usize;
                let mut v = format!("{w}:{n}:{i}:").into_bytes();
                v.resize(len, b'a' + (n % 26) as u8);
                (key, Some(v))
            }
        })
        .collect()
}

/// The table after each writer `w` committed its transactions `1..=cs[w]`.
pub fn model(seed: u64, cs: &[u64]) -> Model {
    let mut m = Model::new();
    for (w, &c) in cs.iter().enumerate() {
        for n in 1..=c {
            for (k, v) in writes(seed, w, n) {
                match v {
                    Some(v) => m.insert(k, v),
                    None => m.remove(&k),
                };
            }
        }
        if c > 0 {
            m.insert(counter(w), (c as i64).to_le_bytes().to_vec());
        }
    }
    m
}

/// The commit each writer's counter in `rows` names (0 without a counter row).
///
/// # Errors
/// A counter that is not an 8-byte integer.
pub fn counters(rows: &Model, writers: usize) -> Result<Vec<u64>, String> {
    (0..writers)
        .map(|w| match rows.get(&counter(w)) {
            None => Ok(0),
            Some(v) => <[u8; 8]>::try_from(v.as_slice())
                .map(|b| i64::from_le_bytes(b) as u64)
                .map_err(|_| format!("counter {w} holds {v:?}")),
        })
        .collect()
}

/// Where `rows` differs from `want`: up to ten keys, for a failure's message.
pub fn diff(rows: &Model, want: &Model) -> Vec<String> {
    want.iter()
        .filter(|(k, v)| rows.get(*k) != Some(*v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .chain(
            rows.keys()
                .filter(|k| !want.contains_key(*k))
                .map(|k| format!("extra {}", String::from_utf8_lossy(k))),
        )
        .take(10)
        .collect()
}

/// A write transaction of the wanted kind (exclusive, or concurrent).
pub fn begin(store: &Store, concurrent: bool) -> keel::Result<keel::WriteTxn<'_>> {
    if concurrent {
        store.write_concurrent()
    } else {
        store.write()
    }
}

/// Writer `w`'s transaction `n`, rolled back first a sixth of the time (a transaction that writes
/// over the writer's keys and its counter, values the model never holds: nothing of it may
/// show, in memory or after a crash), then committed. `Ok(false)`: a conflict (run it again).
///
/// # Errors
/// The commit's (or an operation's) error; a failed rollback only prints.
pub fn commit(store: &Store, seed: u64, concurrent: bool, w: usize, n: u64) -> keel::Result<bool> {
    if Rng(seed ^ n.wrapping_mul(0x9e37_79b9) ^ (w as u64) << 48).below(6) == 0 {
        let rolled_back = (|| -> keel::Result<()> {
            let tx = begin(store, concurrent)?;
            let mut t = tx.table(TABLE)?;
            for (k, _) in writes(seed, w, n + 1_000_000) {
                t.insert(&k, b"rolled back")?;
            }
            t.add_i64(&counter(w), 1_000)?;
            drop(t);
            tx.abort();
            Ok(())
        })();
        if let Err(e) = rolled_back {
            eprintln!("writer {w} rollback before {n}: {e}");
        }
    }
    let result = (|| -> keel::Result<()> {
        let tx = begin(store, concurrent)?;
        {
            let mut t = tx.table(TABLE)?;
            for (k, v) in writes(seed, w, n) {
                match v {
                    Some(v) => {
                        t.insert(&k, &v)?;
                    }
                    None => {
                        t.remove(&k)?;
                    }
                }
            }
            t.add_i64(&counter(w), 1)?;
        }
        tx.commit()
    })();
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}

/// One acknowledged commit, as a child writes it to its acks file: writer, its number, and the
/// recording disk's position when `commit()` returned (0 without a recording disk).
pub type Ack = (usize, u64, usize);

/// Starts this test binary again as a child running only the test `test`, with `env` set to
/// `spec` (the child reads its round from it); its stderr is kept for a failure's message.
///
/// # Errors
/// The spawn's.
pub fn spawn_child(test: &str, env: &str, spec: String) -> Result<std::process::Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    std::process::Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, spec)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn the child: {e}"))
}

/// Waits until the child has acknowledged `target` commits in `acks` (in all), for at most
/// 60 s.
///
/// # Errors
/// The child ended first (with its stderr), or the time ran out (the child is killed).
pub fn wait_for_acks(
    child: &mut std::process::Child,
    acks: &std::path::Path,
    target: u64,
) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let n = read_acks(acks)?.len() as u64;
        if n >= target {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(format!(
                "the child ended ({status}) after {n} commits: {err}"
            ));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("only {n} commits in 60 s"));
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// The `ACK w n [position]` lines of an acks file.
///
/// # Errors
/// The file cannot be read.
pub fn read_acks(file: &std::path::Path) -> Result<Vec<Ack>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut it = l.strip_prefix("ACK ")?.split(' ');
            let w = it.next()?.parse().ok()?;
            let n = it.next()?.parse().ok()?;
            let at = it.next().map_or(Some(0), |p| p.parse().ok())?;
            Some((w, n, at))
        })
        .collect())
}

/// For each of `writers` writers, the last commit in `acks` acknowledged at or before position
/// `at` (`usize::MAX`: all of them).
pub fn acked_at(acks: &[Ack], writers: usize, at: usize) -> Vec<u64> {
    let mut last = vec![0u64; writers];
    for &(w, n, pos) in acks {
        if pos <= at {
            if let Some(x) = last.get_mut(w) {
                *x = (*x).max(n);
            }
        }
    }
    last
}

/// `writers` threads committing their transactions on `store` ([`commit`], a conflict run
/// again), each up to its `commits`th (`None`: until the process ends), calling `ack(w, n)` once
/// writer `w`'s commit `n` returned. The first error stops every writer and is returned.
///
/// # Errors
/// The first commit (or operation) that failed, naming its writer and number.
pub fn run_writers(
    store: &Store,
    seed: u64,
    concurrent: bool,
    writers: usize,
    commits: Option<u64>,
    ack: &(dyn Fn(usize, u64) + Sync),
) -> Result<(), String> {
    let failed: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for w in 0..writers {
            let (failed, stop) = (&failed, &stop);
            scope.spawn(move || {
                let mut n = 1u64;
                while commits.is_none_or(|c| n <= c)
                    && !stop.load(std::sync::atomic::Ordering::Relaxed)
                {
                    match commit(store, seed, concurrent, w, n) {
                        Ok(true) => {
                            ack(w, n);
                            n += 1;
                        }
                        // A conflict: run it again.
                        Ok(false) => {}
                        Err(e) => {
                            if let Ok(mut f) = failed.lock() {
                                f.get_or_insert(format!("writer {w} commit {n}: {e}"));
                            }
                            stop.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The child's writers ([`run_writers`] until the process is killed), each appending
/// `ACK w n` (with ` position()` when given) to `acks` once `commit()` returned. An error (the
/// file system went away under them) is printed and the child exits with status 4.
pub fn child_writers(
    store: &Store,
    seed: u64,
    concurrent: bool,
    writers: usize,
    acks: &std::path::Path,
    position: Option<&(dyn Fn() -> usize + Sync)>,
) {
    let acks = std::sync::Mutex::new(
        std::fs::OpenOptions::new()
            .append(true)
            .open(acks)
            .expect("the acks file"),
    );
    let ack = |w: usize, n: u64| {
        let line = match position {
            Some(p) => format!("ACK {w} {n} {}\n", p()),
            None => format!("ACK {w} {n}\n"),
        };
        // One write per line, so the parent never reads half a line.
        if let Ok(mut f) = acks.lock() {
            std::io::Write::write_all(&mut *f, line.as_bytes()).expect("the acks file");
        }
    };
    if let Err(e) = run_writers(store, seed, concurrent, writers, None, &ack) {
        eprintln!("child {e}");
        std::process::exit(4);
    }
}

/// Why [`verify`] failed.
#[derive(Debug)]
pub enum Unverified {
    /// A read or `Store::check` reported corruption (what a torn page of a store without
    /// torn-page protection may show after a power loss).
    Corruption(String),
    /// A wrong answer, or any other error.
    Wrong(String),
}

impl Unverified {
    /// The failure's message, whatever its kind.
    pub fn message(self) -> String {
        match self {
            Unverified::Corruption(m) | Unverified::Wrong(m) => m,
        }
    }
}

/// Checks a recovered store against the writers' commits: each writer's counter `c` between
/// `must[w]` (durable before the crash) and `acked[w] + 1` (its last acknowledged, and the one
/// in flight), the table equal to the [`model`] at those counters, and `Store::check` clean.
/// Returns the counters. `context` goes into a wrong counter's message (the recovery report,
/// the log's files).
///
/// # Errors
/// [`Unverified::Corruption`] for corruption reported, [`Unverified::Wrong`] for the rest.
pub fn verify(
    store: &Store,
    seed: u64,
    must: &[u64],
    acked: &[u64],
    context: &dyn std::fmt::Display,
) -> Result<Vec<u64>, Unverified> {
    let rows = super::model::contents(store).map_err(|e| {
        let m = format!("reading table {TABLE}: {e}");
        if e.is_corruption() {
            Unverified::Corruption(m)
        } else {
            Unverified::Wrong(m)
        }
    })?;
    let cs = counters(&rows, acked.len()).map_err(Unverified::Wrong)?;
    for (w, &c) in cs.iter().enumerate() {
        let (m, a) = (must[w], acked[w]);
        if c < m || c > a + 1 {
            return Err(Unverified::Wrong(format!(
                "writer {w} recovered to its commit {c}, but {m} was durable before the crash, and {a} its last acknowledged (at most one more in flight); {context}"
            )));
        }
    }
    let want = model(seed, &cs);
    if rows != want {
        return Err(Unverified::Wrong(format!(
            "the table at commits {cs:?} differs from the model (durable {must:?}, acknowledged {acked:?}): {:?}",
            diff(&rows, &want)
        )));
    }
    let report = store
        .check()
        .map_err(|e| Unverified::Wrong(format!("check: {e}")))?;
    if !report.is_ok() {
        let m = format!("check: {:?}", report.problems);
        return Err(
            if report.problems.iter().all(|p| p.contains("corruption")) {
                Unverified::Corruption(m)
            } else {
                Unverified::Wrong(m)
            },
        );
    }
    Ok(cs)
}

/// Opens the store a crash left in `dir`. `Ok(None)`: the open reported corruption, which
/// only a store without torn-page protection (`unprotected`) may do after a power loss.
///
/// # Errors
/// Any other refusal, with `what` (the commits that must be there) in its message.
pub fn open_crashed(
    dir: &std::path::Path,
    config: keel::Config,
    unprotected: bool,
    what: &dyn std::fmt::Display,
) -> Result<Option<Store>, String> {
    match Store::open(dir, config) {
        Ok(s) => Ok(Some(s)),
        Err(e) if unprotected && e.is_corruption() => Ok(None),
        Err(e) => Err(format!("reopen with {what}: {e}")),
    }
}

/// [`verify`] of a store a crash left: `Ok(None)` when it reported corruption, which only a
/// store without torn-page protection (`unprotected`) may do.
///
/// # Errors
/// A wrong answer, or corruption reported by a protected store.
pub fn verify_crashed(
    store: &Store,
    seed: u64,
    must: &[u64],
    acked: &[u64],
    context: &dyn std::fmt::Display,
    unprotected: bool,
) -> Result<Option<Vec<u64>>, String> {
    match verify(store, seed, must, acked, context) {
        Ok(cs) => Ok(Some(cs)),
        Err(Unverified::Corruption(_)) if unprotected => Ok(None),
        Err(e) => Err(e.message()),
    }
}

/// A log block size for a round of `seed`: 512 or 4096 bytes, from a generator of its own (so
/// the round's other choices are what the seed always gave).
pub fn log_block_size(seed: u64) -> u32 {
    if Rng(seed ^ 0x10b1_0000_0000_0039).below(2) == 0 {
        512
    } else {
        4096
    }
}

/// The store a round of the real-file-system crash tests runs: what it draws of `Config`.
#[derive(Clone, Debug)]
pub struct Shape {
    pub mode: keel::TornPage,
    pub log_files: keel::LogFileMode,
    pub log_sync: keel::SyncMethod,
    /// Checkpoint every few milliseconds (else only under log pressure).
    pub frequent_checkpoints: bool,
    /// Page size (4 or 16 KiB).
    pub page_size: usize,
    /// The data file through the page cache (else `O_DIRECT`, the default).
    pub buffered_data: bool,
    /// `Config::inline_maintenance`: no cleaner or checkpointer thread.
    pub inline: bool,
    /// The log's block size, 512 or 4096 bytes (512-byte blocks on a device of 4 KiB sectors
    /// write whole sectors: write-ahead padding, tail rewrites).
    pub log_block_size: u32,
}

impl Shape {
    /// A shape drawn from `r`, its torn-page mode one of `modes` (what the file system offers),
    /// its log block size from `seed` ([`log_block_size`]).
    pub fn draw(modes: &[keel::TornPage], r: &mut Rng, seed: u64) -> Shape {
        let mode = modes[r.below(modes.len() as u64) as usize];
        let syncs = [
            keel::SyncMethod::Fdatasync,
            keel::SyncMethod::Fsync,
            keel::SyncMethod::ODsync,
            keel::SyncMethod::ODirect,
        ];
        // Drawn in this order (a struct's fields are evaluated as written).
        Shape {
            mode,
            log_files: if r.below(2) == 0 {
                keel::LogFileMode::Preallocated
            } else {
                keel::LogFileMode::Growing
            },
            log_sync: syncs[r.below(syncs.len() as u64) as usize],
            // Atomic writes of a 16 KiB page need a device that does them.
            page_size: if r.below(4) == 0 && mode != keel::TornPage::Atomic {
                16384
            } else {
                4096
            },
            buffered_data: r.below(4) == 0,
            inline: r.below(2) == 0,
            frequent_checkpoints: r.below(2) == 0,
            log_block_size: log_block_size(seed),
        }
    }

    /// The store's configuration: a pool of 64 pages (the table, ~2,000 rows of up to 400
    /// bytes, does not fit, so the cleaner and eviction write pages between checkpoints), two
    /// log files of 256 KiB per 4 KiB of page (checkpoints under log pressure, and wrap-around,
    /// within a round), doublewrite batches of 8, synced commits; `create`.
    pub fn config(&self) -> keel::Config {
        keel::Config {
            page_size: self.page_size,
            direct_io: !self.buffered_data,
            inline_maintenance: self.inline,
            pool_size: 64 * self.page_size,
            torn_page: self.mode,
            doublewrite_batch: 8,
            log_files: self.log_files,
            log_sync: self.log_sync,
            log_block_size: self.log_block_size,
            log_file_size: 256 * 1024 * (self.page_size as u64 / 4096),
            log_file_count: 2,
            log_buffer_size: 64 * 1024,
            durability: keel::Durability::Sync,
            checkpoint_interval: if self.frequent_checkpoints {
                std::time::Duration::from_millis(5)
            } else {
                std::time::Duration::from_secs(3600)
            },
            create: true,
            ..keel::Config::default()
        }
    }
}
