//! The real engine: the durable `keel` store behind the workload's [`Engine`] trait.
//!
//! [`KeelEngine`] wraps a [`keel::Store`]. Write transactions are [`keel::WriteTxn`]s: from
//! [`Engine::write`] the exclusive writer (one at a time, early lock release, group commit), from
//! [`Engine::write_concurrent`] a concurrent one ([`keel::Store::write_concurrent`]: snapshot
//! reads, buffered writes, read-set validation at commit, [`keel::Error::Conflict`] becoming
//! [`EngineError::Conflict`]); read transactions are [`keel::ReadTxn`]s
//! (snapshots that never wait for the writer). Tables
//! are opened per call through `tx.table(name)` (cheap: the store caches its catalog). The
//! run's [`StoreConfig`] is a set of [`keel::Config`] keys, parsed by the store itself
//! ([`keel_config`]); an unset key keeps the store's default.
//!
//! Invariants this adapter keeps (each has a test in `tests/keel_engine.rs`; the TPC-C test there
//! also alters a row through the adapter and shows the check catching it):
//! - a table that was never created reads as empty in a read transaction
//!   ([`keel::Error::TableNotFound`] becomes "no rows"), like the trait's contract says;
//! - scans visit exactly `[start, end)` in the asked direction (an empty or inverted range visits
//!   nothing);
//! - a configuration the store cannot run here (atomic writes on a file system without them)
//!   becomes [`EngineError::Unsupported`] with the store's reason, so a matrix lists it as
//!   skipped rather than failing;
//! - a dropped or aborted write transaction leaves no trace (the store rolls it back);
//! - a concurrent commit the store refuses ([`keel::Error::Conflict`]) is
//!   [`EngineError::Conflict`] (so the workload retries it) and applied nothing; other errors
//!   never are.
//!
//! In a write transaction `tx.table(name)` creates a missing table, so a read there of a table
//! never written creates it (empty, committed with the transaction, gone if it rolls back); the
//! workload only reads tables its load created.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::StoreConfig;
use crate::engine::{
    Direction, Engine, EngineError, EngineResult, EngineStats, Flow, ReadTx, Visitor, WriteTx,
};

/// The durable keel store as a workload engine.
pub struct KeelEngine(pub keel::Store);

impl std::fmt::Debug for KeelEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeelEngine({})", self.0.dir().display())
    }
}

/// A write transaction of [`KeelEngine`].
pub struct KeelWrite<'a> {
    tx: keel::WriteTxn<'a>,
}

/// A read transaction of [`KeelEngine`]: a snapshot (it owns what it needs; the lifetime is
/// the engine trait's).
pub struct KeelRead<'a> {
    tx: keel::ReadTxn,
    _engine: std::marker::PhantomData<&'a KeelEngine>,
}

/// The store's [`keel::Config`] for the run's settings: the store's defaults with every key the
/// run sets (the keys and spellings are the store's own; see [`StoreConfig`]).
///
/// # Errors
///
/// A key or value the store refuses ([`keel::Error::Config`], naming the key).
pub fn keel_config(c: &StoreConfig) -> EngineResult<keel::Config> {
    c.keel_config().map_err(engine_error)
}

/// Maps a store error onto the workload's error type (atomic writes that the file system cannot
/// do become [`EngineError::Unsupported`]; a refused concurrent commit, or a concurrent
/// writer's snapshot dropped for the version budget, becomes [`EngineError::Conflict`] with the store's message; corruption keeps its file and detail).
pub fn engine_error(e: keel::Error) -> EngineError {
    match e {
        e if e.is_atomic_unavailable() => EngineError::Unsupported(e.to_string()),
        e if e.is_retryable() => EngineError::Conflict(e.to_string()),
        keel::Error::Corruption {
            file,
            page_id,
            detail,
        } => EngineError::Corrupt {
            path: file,
            detail: format!("{page_id}: {detail}"),
        },
        other => EngineError::Store(Box::new(other)),
    }
}

/// Visits `[start, end)` of `t` in direction `dir`: forward through the cursor (rows borrowed,
/// no allocation per row), backward through owned rows (the cursor only goes forward).
fn scan_table(
    t: &impl keel::ReadableTable,
    start: &[u8],
    end: &[u8],
    dir: Direction,
    visit: &mut Visitor<'_>,
) -> EngineResult<()> {
    match dir {
        Direction::Forward => {
            let mut c = t.cursor(start..end).map_err(engine_error)?;
            while let Some((k, v)) = c.next().map_err(engine_error)? {
                if visit(k, v)? == Flow::Stop {
                    break;
                }
            }
            Ok(())
        }
        Direction::Reverse => visit_rows(t.range(start..end).map_err(engine_error)?.rev(), visit),
    }
}

fn visit_rows<I>(rows: I, visit: &mut Visitor<'_>) -> EngineResult<()>
where
    I: Iterator<Item = keel::Result<(Vec<u8>, Vec<u8>)>>,
{
    for kv in rows {
        let (k, v) = kv.map_err(engine_error)?;
        if visit(&k, &v)? == Flow::Stop {
            break;
        }
    }
    Ok(())
}

impl ReadTx for KeelRead<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        match self.tx.table(table) {
            Ok(t) => t.get(key).map_err(engine_error),
            Err(keel::Error::TableNotFound(_)) => Ok(None),
            Err(e) => Err(engine_error(e)),
        }
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()> {
        if start >= end {
            return Ok(());
        }
        let t = match self.tx.table(table) {
            Ok(t) => t,
            Err(keel::Error::TableNotFound(_)) => return Ok(()),
            Err(e) => return Err(engine_error(e)),
        };
        scan_table(&t, start, end, dir, visit)
    }
}

impl ReadTx for KeelWrite<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        self.tx
            .table(table)
            .and_then(|t| t.get(key))
            .map_err(engine_error)
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()> {
        if start >= end {
            return Ok(());
        }
        let t = self.tx.table(table).map_err(engine_error)?;
        scan_table(&t, start, end, dir, visit)
    }
}

impl WriteTx for KeelWrite<'_> {
    fn insert(&mut self, table: &str, key: &[u8], value: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        self.tx
            .table(table)
            .and_then(|mut t| t.insert(key, value))
            .map_err(engine_error)
    }

    fn remove(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        self.tx
            .table(table)
            .and_then(|mut t| t.remove(key))
            .map_err(engine_error)
    }

    fn add_i64(&mut self, table: &str, key: &[u8], delta: i64) -> EngineResult<()> {
        self.tx
            .table(table)
            .and_then(|mut t| t.add_i64(key, delta))
            .map_err(engine_error)
    }

    fn commit(self) -> EngineResult<()> {
        self.tx.commit().map_err(engine_error)
    }

    fn abort(self) {
        self.tx.abort();
    }
}

impl KeelEngine {
    /// The store.
    pub fn store(&self) -> &keel::Store {
        &self.0
    }
}

impl Engine for KeelEngine {
    type Write<'a> = KeelWrite<'a>;
    type Read<'a> = KeelRead<'a>;

    const LABEL: &'static str = "keel";
    const DURABLE: bool = true;
    const HONOURS_CONFIG: bool = true;
    const CONCURRENT_WRITERS: bool = true;

    fn open(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        keel::Store::open(dir, keel_config(config)?)
            .map(KeelEngine)
            .map_err(engine_error)
    }

    /// Read-write and never creating: a directory without a store is an error
    /// ([`keel::Error::NotAStore`]) and is left as it was.
    fn open_loaded(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        let config = keel::Config {
            create: false,
            ..keel_config(config)?
        };
        keel::Store::open(dir, config)
            .map(KeelEngine)
            .map_err(engine_error)
    }

    /// Read-only and never creating: a directory without a store is an error and is left as it
    /// was; a store that needs recovery (after a crash) is recovered by a read-write open that
    /// still never creates (on a read-only mount that fails with a clear message).
    fn open_existing(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        let base = keel::Config {
            create: false,
            ..keel_config(config)?
        };
        let ro = keel::Config {
            read_only: true,
            ..base.clone()
        };
        match keel::Store::open(dir, ro) {
            Ok(s) => Ok(KeelEngine(s)),
            Err(keel::Error::NeedsRecovery { detail, .. }) => {
                eprintln!(
                    "note: {} needs recovery ({detail}); recovering it with a read-write open",
                    dir.display()
                );
                keel::Store::open(dir, base)
                    .map(KeelEngine)
                    .map_err(engine_error)
            }
            Err(e) => Err(engine_error(e)),
        }
    }

    fn write(&self) -> EngineResult<Self::Write<'_>> {
        Ok(KeelWrite {
            tx: self.0.write().map_err(engine_error)?,
        })
    }

    fn write_concurrent(&self) -> EngineResult<Self::Write<'_>> {
        Ok(KeelWrite {
            tx: self.0.write_concurrent().map_err(engine_error)?,
        })
    }

    fn read(&self) -> EngineResult<Self::Read<'_>> {
        Ok(KeelRead {
            tx: self.0.read().map_err(engine_error)?,
            _engine: std::marker::PhantomData,
        })
    }

    fn checkpoint(&self) -> EngineResult<()> {
        self.0.checkpoint().map(|_| ()).map_err(engine_error)
    }

    fn integrity(&self) -> EngineResult<Option<(Vec<String>, String)>> {
        let r = self.0.check().map_err(engine_error)?;
        let rows: u64 = r.tables.iter().map(|t| t.rows).sum();
        let summary = format!(
            "{} pages ({} free), {} tables, {rows} rows",
            r.page_count,
            r.free_pages,
            r.tables.len()
        );
        Ok(Some((r.problems, summary)))
    }

    fn effective(&self) -> crate::run_meta::EffectiveInfo {
        let e = self.0.effective();
        let c = &e.config;
        let mut lines = vec![
            format!("torn pages: {} ({})", e.torn_page, e.torn_page_reason),
            format!(
                "data file: {}{}; I/O backend {}",
                if e.direct_io { "" } else { "buffered: " },
                e.direct_io_reason,
                e.io_backend
            ),
            format!(
                "durability {:?}, log sync {:?}, {} log files of {} with {}-byte blocks, pool {}, page {}, checksum {:?}",
                c.durability,
                c.log_sync,
                c.log_file_count,
                crate::driver::bytes(c.log_file_size),
                c.log_block_size,
                crate::driver::bytes(c.pool_size as u64),
                c.page_size(),
                c.checksum
            ),
        ];
        if let Some(p) = &e.probe {
            let atomic = if p.atomic.unit_max == 0 {
                "no atomic writes".to_string()
            } else {
                format!(
                    "atomic write units {}..={} bytes (hardware-backed up to {})",
                    p.atomic.unit_min, p.atomic.unit_max, p.atomic.unit_max_opt
                )
            };
            lines.push(format!(
                "probe: file system {}, device blocks {} logical / {} physical, {atomic}, io_uring {}",
                p.filesystem,
                p.logical_block_size,
                p.physical_block_size,
                if p.io_uring { "yes" } else { "no" }
            ));
        }
        crate::run_meta::EffectiveInfo {
            lines,
            json: serde_json::to_value(e).unwrap_or_default(),
        }
    }

    fn stats(&self) -> EngineStats {
        let s = self.0.stats();
        // O_DSYNC writes are synchronous: the log issues no sync call, so count the durable
        // flushes (one per group commit) as its syncs.
        let odsync = self.0.effective().config.log_sync == keel::SyncMethod::ODsync;
        let log_syncs = if odsync {
            s.log.durable_flushes
        } else {
            s.log.syncs
        };
        let mut other = BTreeMap::new();
        for (k, v) in [
            ("checkpoints", s.checkpoints),
            ("log_durable_flushes", s.log.durable_flushes),
            ("log_write_calls", s.log.writes),
            ("log_padding_bytes", s.log.padding_bytes),
            ("log_tail_rewrites", s.log.tail_rewrites),
            ("log_space_waits", s.log.space_waits),
            ("flush_batches", s.flush.batches),
            ("data_bytes_written", s.flush.data_bytes_written),
            ("doublewrite_syncs", s.flush.doublewrite_syncs),
            ("full_page_image_bytes", s.flush.full_page_image_bytes),
            ("forced_log_flushes", s.flush.forced_log_flushes),
            ("pages_read", s.flush.pages_read),
            ("doublewrite_bytes", s.io.doublewrite.write_bytes),
            ("data_read_bytes", s.io.data.read_bytes),
            ("writer_lock_wait_us", s.writer_lock_wait_us),
            ("concurrent_commit_hold_us", s.concurrent_commit_hold_us),
            ("validations_narrowed", s.validations_narrowed),
            ("validations_full", s.validations_full),
            ("validation_reads_reread", s.validation_reads_reread),
            ("validation_reads_skipped", s.validation_reads_skipped),
            ("versions_copied", s.pool.versions_copied),
            ("copies_used", s.pool.copies_used),
            ("copies_stale", s.pool.copies_stale),
            ("split_page_copies", s.pool.page_copies),
            ("copy_waits", s.pool.copy_waits),
        ] {
            other.insert(k.to_string(), v);
        }
        EngineStats {
            commits: s.commits,
            aborts: s.aborts,
            conflicts: s.conflicts,
            data_writes: s.flush.data_writes,
            data_pages_written: s.flush.data_pages_written,
            doublewrite_writes: s.flush.doublewrite_writes,
            doublewrite_pages: s.flush.doublewrite_pages,
            pages_skipped_protection: s.flush.pages_skipped_protection,
            atomic_writes: s.flush.atomic_writes,
            full_page_images: s.flush.full_page_images,
            log_bytes: s.log.bytes_written,
            log_syncs,
            data_syncs: s.flush.syncs,
            other,
        }
    }
}
