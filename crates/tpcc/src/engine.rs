//! The storage trait the workload runs on.
//!
//! Everything in keel-tpcc (schema, loader, transactions, driver, checks, reports, CLI) is generic
//! over [`Engine`]. The trait mirrors the `keel` facade contract (`Store::write` / `read` /
//! `checkpoint` / `stats`, named tables with `get` / `insert` / `remove` / ordered ranges, `commit`,
//! `abort` or drop to roll back), so the real store plugs in with one thin adapter file.
//!
//! Invariants every implementation must keep (the workload's correctness rests on them, and
//! `tests/engine.rs` breaks each on purpose against the reference engine):
//! - **Atomicity**: a write transaction that is dropped or [`WriteTx::abort`]ed leaves no trace;
//!   after [`WriteTx::commit`] returns `Ok`, all its changes are visible to later transactions.
//! - **Isolation**: one write transaction at a time ([`Engine::write`] blocks while another one is
//!   open); a read transaction sees committed data only. An engine with concurrent writers
//!   ([`Engine::CONCURRENT_WRITERS`]) also runs any number of [`Engine::write_concurrent`]
//!   transactions at once, serializably: a commit that would not be is refused with
//!   [`EngineError::Conflict`] and applies nothing (the caller re-runs the transaction).
//! - **Order**: [`ReadTx::scan`] visits keys in byte order (reversed for [`Direction::Reverse`]),
//!   within the half-open range `[start, end)`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::StoreConfig;

/// An error reported by a storage engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine cannot run this configuration here (for example atomic writes on a file system
    /// without them). A matrix records the configuration as skipped, with this reason.
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    /// An I/O error on a named file.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Bytes read from disk are not what the engine wrote.
    #[error("corrupt data in {path}: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the offset or record.
        detail: String,
    },
    /// A concurrent write transaction ([`Engine::write_concurrent`]) was refused because
    /// something it read was changed by another commit after its snapshot: nothing of it was
    /// applied, and running its logic again on a new transaction is the remedy (the store's
    /// message, naming what changed).
    #[error("{0}")]
    Conflict(String),
    /// Any other error of the underlying store (the adapter boxes the store's own error type).
    #[error("store error: {0}")]
    Store(Box<dyn std::error::Error + Send + Sync>),
}

impl EngineError {
    /// Whether this is a [`EngineError::Conflict`]: the transaction applied nothing and can be
    /// run again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, EngineError::Conflict(_))
    }
}

/// Result alias for engine operations.
pub type EngineResult<T> = Result<T, EngineError>;

/// Scan direction of [`ReadTx::scan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Ascending key order.
    Forward,
    /// Descending key order.
    Reverse,
}

/// What a scan visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Visit the next row.
    Continue,
    /// Stop the scan.
    Stop,
}

/// A visitor called by [`ReadTx::scan`] with each key and value, in scan order.
pub type Visitor<'v> = dyn FnMut(&[u8], &[u8]) -> EngineResult<Flow> + 'v;

/// Reads inside a transaction (read-only or read-write). Tables are named; a table that was never
/// written reads as empty.
pub trait ReadTx {
    /// The value stored under `key`, if any.
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>>;

    /// Visits the rows with `start <= key < end` in `dir` order until the visitor returns
    /// [`Flow::Stop`] or the range is exhausted.
    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()>;
}

/// A write transaction: reads see its own writes; nothing is visible to others before
/// [`WriteTx::commit`]; dropping it without committing rolls it back.
pub trait WriteTx: ReadTx {
    /// Inserts or replaces; returns the old value.
    fn insert(&mut self, table: &str, key: &[u8], value: &[u8]) -> EngineResult<Option<Vec<u8>>>;

    /// Removes; returns the old value.
    fn remove(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>>;

    /// Adds `delta` (wrapping) to the signed 64-bit integer stored under `key` as 8
    /// little-endian bytes; a missing row counts as 0. An engine with atomic adds (Keel's
    /// concurrent transactions: `Table::add_i64`) applies it at commit without reading the
    /// row, so transactions adding to one row do not conflict; this default reads the row and
    /// writes it back.
    ///
    /// # Errors
    ///
    /// The row is not 8 bytes ([`EngineError::Store`]); the engine's errors.
    fn add_i64(&mut self, table: &str, key: &[u8], delta: i64) -> EngineResult<()> {
        let old = match self.get(table, key)? {
            None => 0,
            Some(v) => match <[u8; 8]>::try_from(v.as_slice()) {
                Ok(b) => i64::from_le_bytes(b),
                Err(_) => {
                    return Err(EngineError::Store(
                        format!(
                            "table {table}: a {}-byte value is not an integer to add to",
                            v.len()
                        )
                        .into(),
                    ))
                }
            },
        };
        self.insert(table, key, &old.wrapping_add(delta).to_le_bytes())?;
        Ok(())
    }

    /// Makes the transaction's changes visible and (for a durable engine) durable; returns once
    /// the engine acknowledges the commit.
    fn commit(self) -> EngineResult<()>;

    /// Rolls the transaction back.
    fn abort(self);
}

/// A storage engine the workload can run on.
pub trait Engine: Send + Sync + Sized + 'static {
    /// A write transaction borrowing the engine.
    type Write<'a>: WriteTx
    where
        Self: 'a;
    /// A read-only transaction borrowing the engine.
    type Read<'a>: ReadTx
    where
        Self: 'a;

    /// A short human label for reports (for example `memory (no durability)`).
    const LABEL: &'static str;

    /// Whether acknowledged commits survive a crash (SIGKILL or power loss). The crash test runs
    /// only on durable engines.
    const DURABLE: bool;

    /// Whether [`Engine::write_concurrent`] runs write transactions side by side (validated at
    /// commit, which may report [`EngineError::Conflict`]). When `false` it is
    /// [`Engine::write`], and the driver reports the concurrent writer mode as not applicable.
    const CONCURRENT_WRITERS: bool = false;

    /// Whether the store config knobs change this engine's behaviour. When `false`, the driver
    /// records the configuration in its reports but says it has no effect.
    const HONOURS_CONFIG: bool;

    /// Opens the store in `dir` (creating it if it does not exist) with `config`.
    fn open(dir: &Path, config: &StoreConfig) -> EngineResult<Self>;

    /// Opens an existing store in `dir` for `check`: never creates anything (an error when `dir`
    /// holds no store) and, where the engine can, writes nothing either. The default opens with
    /// [`Engine::open`] after checking that `dir` exists.
    fn open_existing(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        if !dir.exists() {
            return Err(EngineError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            });
        }
        Self::open(dir, config)
    }

    /// Opens the loaded store in `dir` to run the workload on: read-write, but never creating
    /// anything (a mistyped `--dir` must not become an empty store that `load` then refuses as
    /// not empty). The default is [`Engine::open_existing`].
    fn open_loaded(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        Self::open_existing(dir, config)
    }

    /// Starts a write transaction; blocks while another write transaction is open.
    fn write(&self) -> EngineResult<Self::Write<'_>>;

    /// Starts a concurrent write transaction: it reads a snapshot of the newest commit plus its
    /// own writes and never blocks others while it runs; its [`WriteTx::commit`] (and, where an
    /// engine checks early, any of its operations) may fail with [`EngineError::Conflict`], in
    /// which case nothing of it was applied. The default is [`Engine::write`] (an engine without
    /// concurrent writers: one writer at a time, never a conflict).
    fn write_concurrent(&self) -> EngineResult<Self::Write<'_>> {
        self.write()
    }

    /// Starts a read-only transaction over committed data.
    fn read(&self) -> EngineResult<Self::Read<'_>>;

    /// Writes a checkpoint (the workload calls it after a load and at the end of a run, so that a
    /// copied directory opens without a long recovery).
    fn checkpoint(&self) -> EngineResult<()>;

    /// The engine's cumulative counters.
    fn stats(&self) -> EngineStats;

    /// The settings actually in force (what `auto` chose, O_DIRECT, the file-system probe), for
    /// the run metadata. The default reports nothing beyond the label.
    fn effective(&self) -> crate::run_meta::EffectiveInfo {
        crate::run_meta::EffectiveInfo::default()
    }

    /// The engine's own store integrity check beside the TPC-C conditions (Keel: every B-tree
    /// and every page of the file accounted for): `None` where the engine has none, else one
    /// line per problem (empty: sound) and a one-line summary.
    ///
    /// # Errors
    ///
    /// The check could not run (e.g. the meta page cannot be read).
    fn integrity(&self) -> EngineResult<Option<(Vec<String>, String)>> {
        Ok(None)
    }
}

/// Cumulative engine counters, as the facade's `Store::stats()` reports them. The driver prints
/// interval differences of these beside the throughput.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineStats {
    /// Committed write transactions.
    pub commits: u64,
    /// Rolled-back write transactions (refused concurrent commits included, where the engine
    /// counts them so: keel does).
    pub aborts: u64,
    /// Concurrent write transactions refused at commit with a conflict (keel's
    /// `StoreStats::conflicts`; 0 for engines without concurrent writers).
    #[serde(default)]
    pub conflicts: u64,
    /// Write calls to data files (in-place page writes, batched writes count once per call).
    pub data_writes: u64,
    /// Pages written to their home location.
    pub data_pages_written: u64,
    /// Write calls to the doublewrite area.
    pub doublewrite_writes: u64,
    /// Pages written to the doublewrite area.
    pub doublewrite_pages: u64,
    /// Pages written in place without torn-page protection because they were freshly initialised
    /// (init-on-flush skip).
    pub pages_skipped_protection: u64,
    /// `RWF_ATOMIC` page writes.
    pub atomic_writes: u64,
    /// Full page images put into the log (full_page_writes mode).
    pub full_page_images: u64,
    /// Bytes written to the redo log (including padding).
    pub log_bytes: u64,
    /// Syncs of the redo log.
    pub log_syncs: u64,
    /// Syncs of data files (and of the doublewrite area).
    pub data_syncs: u64,
    /// Any other counter the engine reports, by name.
    #[serde(default)]
    pub other: BTreeMap<String, u64>,
}

impl EngineStats {
    /// `self - earlier`, counter by counter (saturating, so a restarted engine gives zeros rather
    /// than wrapping).
    pub fn delta(&self, earlier: &EngineStats) -> EngineStats {
        let mut other = BTreeMap::new();
        for (k, v) in &self.other {
            let e = earlier.other.get(k).copied().unwrap_or(0);
            other.insert(k.clone(), v.saturating_sub(e));
        }
        EngineStats {
            commits: self.commits.saturating_sub(earlier.commits),
            aborts: self.aborts.saturating_sub(earlier.aborts),
            conflicts: self.conflicts.saturating_sub(earlier.conflicts),
            data_writes: self.data_writes.saturating_sub(earlier.data_writes),
            data_pages_written: self
                .data_pages_written
                .saturating_sub(earlier.data_pages_written),
            doublewrite_writes: self
                .doublewrite_writes
                .saturating_sub(earlier.doublewrite_writes),
            doublewrite_pages: self
                .doublewrite_pages
                .saturating_sub(earlier.doublewrite_pages),
            pages_skipped_protection: self
                .pages_skipped_protection
                .saturating_sub(earlier.pages_skipped_protection),
            atomic_writes: self.atomic_writes.saturating_sub(earlier.atomic_writes),
            full_page_images: self
                .full_page_images
                .saturating_sub(earlier.full_page_images),
            log_bytes: self.log_bytes.saturating_sub(earlier.log_bytes),
            log_syncs: self.log_syncs.saturating_sub(earlier.log_syncs),
            data_syncs: self.data_syncs.saturating_sub(earlier.data_syncs),
            other,
        }
    }

    /// Log syncs per commit (0 when nothing committed).
    pub fn syncs_per_commit(&self) -> f64 {
        if self.commits == 0 {
            0.0
        } else {
            self.log_syncs as f64 / self.commits as f64
        }
    }
}

/// Convenience reads on top of [`ReadTx::scan`].
pub trait ReadTxExt: ReadTx {
    /// The first row of `[start, end)` in `dir` order.
    fn first(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
    ) -> EngineResult<Option<(Vec<u8>, Vec<u8>)>> {
        let mut out = None;
        self.scan(table, start, end, dir, &mut |k, v| {
            out = Some((k.to_vec(), v.to_vec()));
            Ok(Flow::Stop)
        })?;
        Ok(out)
    }

    /// All rows of `[start, end)` in ascending order.
    fn collect(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
    ) -> EngineResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.scan(table, start, end, Direction::Forward, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(Flow::Continue)
        })?;
        Ok(out)
    }
}

impl<T: ReadTx + ?Sized> ReadTxExt for T {}
