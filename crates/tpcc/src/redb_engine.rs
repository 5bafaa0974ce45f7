//! A peer: redb behind the workload's [`Engine`] trait, so the same TPC-C transactions run on it
//! beside Keel (`--engine redb`, or `engine = "redb"` in a matrix row).
//!
//! Settings, stated in every report through [`RedbEngine::LABEL`]: one database file
//! `<dir>/tpcc.redb`, every write transaction committed with `Durability::Immediate` (durable when
//! `commit` returns: the same promise as Keel's `Durability::Sync`), and a cache of the run's
//! `pool_size` (`Builder::set_cache_size`). Only `pool_size` of the store configuration applies;
//! redb reads and writes through the OS page cache. Each workload table is a redb table
//! `&[u8] → &[u8]` of the same name.
//!
//! Invariants this adapter keeps (tested in `tests/peer_engines.rs`):
//! - one write transaction at a time (redb's `begin_write` waits for the open one); a dropped or
//!   aborted transaction leaves no trace;
//! - a read transaction sees one committed snapshot (redb's MVCC);
//! - a table that does not exist reads as empty in a read transaction; in a write transaction
//!   opening it creates it (empty, committed with the transaction), as Keel's adapter does;
//! - scans visit exactly `[start, end)` in the asked direction.
//!
//! A write transaction opens a table per call (a redb `Table` borrows its transaction, so the
//! adapter cannot keep it across calls); a read transaction keeps the tables it opened.
//! `checkpoint` has nothing to do: every redb commit is a checkpoint.

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::StoreConfig;
use crate::engine::{
    Direction, Engine, EngineError, EngineResult, EngineStats, Flow, ReadTx, Visitor, WriteTx,
};
use crate::run_meta::EffectiveInfo;

/// The database file inside the engine's directory.
pub const REDB_FILE: &str = "tpcc.redb";

/// redb as a workload engine.
pub struct RedbEngine {
    path: PathBuf,
    cache_bytes: usize,
    db: Database,
    commits: AtomicU64,
    aborts: AtomicU64,
}

impl std::fmt::Debug for RedbEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedbEngine({})", self.path.display())
    }
}

fn store_err(e: impl Into<redb::Error>) -> EngineError {
    EngineError::Store(Box::new(e.into()))
}

/// A table as a read transaction holds it.
type ReadTable = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

fn def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

/// A write transaction of [`RedbEngine`].
pub struct RedbWrite<'a> {
    engine: &'a RedbEngine,
    tx: Option<redb::WriteTransaction>,
}

/// A read transaction of [`RedbEngine`].
pub struct RedbRead<'a> {
    _engine: &'a RedbEngine,
    tx: redb::ReadTransaction,
    tables: HashMap<String, Option<ReadTable>>,
}

fn scan_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    t: &T,
    start: &[u8],
    end: &[u8],
    dir: Direction,
    visit: &mut Visitor<'_>,
) -> EngineResult<()> {
    if start >= end {
        return Ok(());
    }
    let range = t.range::<&[u8]>(start..end).map_err(store_err)?;
    let mut each = |kv: Result<_, redb::StorageError>| -> EngineResult<Flow> {
        let (k, v): (redb::AccessGuard<&[u8]>, redb::AccessGuard<&[u8]>) = kv.map_err(store_err)?;
        visit(k.value(), v.value())
    };
    match dir {
        Direction::Forward => {
            for kv in range {
                if each(kv)? == Flow::Stop {
                    break;
                }
            }
        }
        Direction::Reverse => {
            for kv in range.rev() {
                if each(kv)? == Flow::Stop {
                    break;
                }
            }
        }
    }
    Ok(())
}

impl RedbWrite<'_> {
    fn tx(&self) -> EngineResult<&redb::WriteTransaction> {
        self.tx
            .as_ref()
            .ok_or_else(|| EngineError::Store("the transaction has ended".into()))
    }
}

impl ReadTx for RedbWrite<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        let t = self.tx()?.open_table(def(table)).map_err(store_err)?;
        let v = t.get(key).map_err(store_err)?;
        Ok(v.map(|g| g.value().to_vec()))
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()> {
        let t = self.tx()?.open_table(def(table)).map_err(store_err)?;
        scan_table(&t, start, end, dir, visit)
    }
}

impl WriteTx for RedbWrite<'_> {
    fn insert(&mut self, table: &str, key: &[u8], value: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        let mut t = self.tx()?.open_table(def(table)).map_err(store_err)?;
        let old = t.insert(key, value).map_err(store_err)?;
        Ok(old.map(|g| g.value().to_vec()))
    }

    fn remove(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        let mut t = self.tx()?.open_table(def(table)).map_err(store_err)?;
        let old = t.remove(key).map_err(store_err)?;
        Ok(old.map(|g| g.value().to_vec()))
    }

    fn commit(mut self) -> EngineResult<()> {
        let tx = self
            .tx
            .take()
            .ok_or_else(|| EngineError::Store("the transaction has ended".into()))?;
        tx.commit().map_err(store_err)?;
        self.engine.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn abort(self) {
        // Drop aborts.
    }
}

impl Drop for RedbWrite<'_> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            // A failed abort is redb's to report on the next transaction; nothing is committed.
            let _ = tx.abort();
            self.engine.aborts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl RedbRead<'_> {
    fn table(&mut self, name: &str) -> EngineResult<Option<&ReadTable>> {
        if !self.tables.contains_key(name) {
            let t = match self.tx.open_table(def(name)) {
                Ok(t) => Some(t),
                Err(TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(store_err(e)),
            };
            self.tables.insert(name.to_string(), t);
        }
        Ok(self.tables.get(name).and_then(Option::as_ref))
    }
}

impl ReadTx for RedbRead<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        let Some(t) = self.table(table)? else {
            return Ok(None);
        };
        let v = t.get(key).map_err(store_err)?;
        Ok(v.map(|g| g.value().to_vec()))
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()> {
        let Some(t) = self.table(table)? else {
            return Ok(());
        };
        scan_table(t, start, end, dir, visit)
    }
}

impl RedbEngine {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_at(dir: &Path, config: &StoreConfig, create: bool) -> EngineResult<Self> {
        let cache_bytes = config
            .keel_config()
            .map_err(|e| EngineError::Store(Box::new(e)))?
            .pool_size;
        let path = dir.join(REDB_FILE);
        let mut b = Database::builder();
        b.set_cache_size(cache_bytes);
        let db = if create {
            std::fs::create_dir_all(dir).map_err(|e| EngineError::Io {
                path: dir.to_path_buf(),
                source: e,
            })?;
            b.create(&path).map_err(store_err)?
        } else {
            if !path.is_file() {
                return Err(EngineError::Io {
                    path,
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no redb database here (nothing was created)",
                    ),
                });
            }
            b.open(&path).map_err(store_err)?
        };
        Ok(RedbEngine {
            path,
            cache_bytes,
            db,
            commits: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
        })
    }
}

impl Engine for RedbEngine {
    type Write<'a> = RedbWrite<'a>;
    type Read<'a> = RedbRead<'a>;

    const LABEL: &'static str = "redb (Durability::Immediate)";
    const DURABLE: bool = true;
    const HONOURS_CONFIG: bool = false;

    fn open(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        Self::open_at(dir, config, true)
    }

    /// Never creates: a directory without `tpcc.redb` is an error and stays as it was.
    fn open_existing(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        Self::open_at(dir, config, false)
    }

    fn write(&self) -> EngineResult<Self::Write<'_>> {
        let mut tx = self.db.begin_write().map_err(store_err)?;
        tx.set_durability(Durability::Immediate)
            .map_err(|e| EngineError::Store(Box::new(e)))?;
        Ok(RedbWrite {
            engine: self,
            tx: Some(tx),
        })
    }

    fn read(&self) -> EngineResult<Self::Read<'_>> {
        Ok(RedbRead {
            _engine: self,
            tx: self.db.begin_read().map_err(store_err)?,
            tables: HashMap::new(),
        })
    }

    /// Nothing to do: every redb commit leaves the file consistent.
    fn checkpoint(&self) -> EngineResult<()> {
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            commits: self.commits.load(Ordering::Relaxed),
            aborts: self.aborts.load(Ordering::Relaxed),
            ..EngineStats::default()
        }
    }

    fn effective(&self) -> EffectiveInfo {
        EffectiveInfo {
            lines: vec![
                format!(
                    "redb: every commit Durability::Immediate (durable when commit returns), cache {} KiB",
                    self.cache_bytes / 1024
                ),
                "reads and writes through the OS page cache (no O_DIRECT); only pool_size of the store configuration applies".into(),
            ],
            json: serde_json::json!({
                "engine": "redb",
                "durability": "immediate",
                "cache_bytes": self.cache_bytes,
                "file": self.path,
            }),
        }
    }
}
