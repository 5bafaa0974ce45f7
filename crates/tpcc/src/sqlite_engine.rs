//! A peer: SQLite 3 (rusqlite, the bundled library) behind the workload's [`Engine`] trait, so the
//! same TPC-C transactions run on it beside Keel (`--engine sqlite`, or `engine = "sqlite"` in a
//! matrix row).
//!
//! Settings, stated in every report through [`SqliteEngine::LABEL`]: one database file
//! `<dir>/tpcc.sqlite` in WAL mode with `synchronous = FULL` (the WAL is synced at every commit,
//! so an acknowledged commit survives a power loss: the same promise as Keel's
//! `Durability::Sync`), 4 KiB pages (SQLite's default), and a page cache of the run's `pool_size`
//! (`PRAGMA cache_size = -KiB` on every connection). Only `pool_size` of the store configuration
//! applies; SQLite reads and writes through the OS page cache (it has no O_DIRECT).
//!
//! Each workload table is a `WITHOUT ROWID` table `"t_<name>" (k BLOB PRIMARY KEY, v BLOB)`: a
//! clustered B-tree keyed by the same bytes as Keel's, created by the first write transaction
//! that writes it.
//!
//! Invariants this adapter keeps (tested in `tests/peer_engines.rs`):
//! - one write transaction at a time: [`Engine::write`] takes the writer connection's mutex and
//!   runs `BEGIN IMMEDIATE`; dropping or aborting the transaction runs `ROLLBACK`;
//! - a read transaction (`BEGIN` on a pooled reader connection) sees one committed snapshot;
//! - a table that does not exist reads as empty, in read and write transactions alike; a table
//!   created by a rolled-back transaction is forgotten with it;
//! - scans visit exactly `[start, end)` in the asked direction.

use parking_lot::{Mutex, MutexGuard};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::StoreConfig;
use crate::engine::{
    Direction, Engine, EngineError, EngineResult, EngineStats, Flow, ReadTx, Visitor, WriteTx,
};
use crate::run_meta::EffectiveInfo;

/// The database file inside the engine's directory.
pub const SQLITE_FILE: &str = "tpcc.sqlite";

/// SQLite as a workload engine.
pub struct SqliteEngine {
    path: PathBuf,
    cache_bytes: usize,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    /// Tables known to exist in the committed database.
    tables: Mutex<HashSet<String>>,
    commits: AtomicU64,
    aborts: AtomicU64,
}

impl std::fmt::Debug for SqliteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SqliteEngine({})", self.path.display())
    }
}

fn store_err(e: rusqlite::Error) -> EngineError {
    EngineError::Store(Box::new(e))
}

fn is_missing_table(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(_, Some(m)) if m.starts_with("no such table"))
}

/// The SQL name of workload table `name` (`"t_<name>"`); names are ASCII letters, digits and
/// `_` (the workload's are), anything else is refused rather than quoted.
fn sql_table(name: &str) -> EngineResult<String> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(EngineError::Store(
            format!("table name {name:?}: only ASCII letters, digits and _ are supported").into(),
        ));
    }
    Ok(format!("\"t_{name}\""))
}

impl SqliteEngine {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connect(path: &Path, flags: OpenFlags, cache_bytes: usize) -> EngineResult<Connection> {
        let c = Connection::open_with_flags(path, flags).map_err(|e| match e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::CannotOpen => {
                EngineError::Io {
                    path: path.to_path_buf(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string()),
                }
            }
            other => store_err(other),
        })?;
        let mode: String = c
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(store_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(EngineError::Unsupported(format!(
                "{}: SQLite refused WAL mode (journal_mode is {mode})",
                path.display()
            )));
        }
        let kib = (cache_bytes / 1024).max(1);
        c.execute_batch(&format!(
            "PRAGMA synchronous = FULL; PRAGMA cache_size = -{kib}; PRAGMA busy_timeout = 60000;"
        ))
        .map_err(store_err)?;
        Ok(c)
    }

    fn open_at(dir: &Path, config: &StoreConfig, create: bool) -> EngineResult<Self> {
        let cache_bytes = config
            .keel_config()
            .map_err(|e| EngineError::Store(Box::new(e)))?
            .pool_size;
        let path = dir.join(SQLITE_FILE);
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            std::fs::create_dir_all(dir).map_err(|e| EngineError::Io {
                path: dir.to_path_buf(),
                source: e,
            })?;
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        } else if !path.is_file() {
            return Err(EngineError::Io {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no SQLite database here (nothing was created)",
                ),
            });
        }
        let writer = Self::connect(&path, flags, cache_bytes)?;
        let mut tables = HashSet::new();
        {
            let mut st = writer
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
                .map_err(store_err)?;
            let names = st
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(store_err)?;
            for n in names {
                let n = n.map_err(store_err)?;
                if let Some(t) = n.strip_prefix("t_") {
                    tables.insert(t.to_string());
                }
            }
        }
        Ok(SqliteEngine {
            path,
            cache_bytes,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            tables: Mutex::new(tables),
            commits: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
        })
    }
}

/// A write transaction of [`SqliteEngine`]: the writer connection inside `BEGIN IMMEDIATE`.
pub struct SqliteWrite<'a> {
    engine: &'a SqliteEngine,
    conn: MutexGuard<'a, Connection>,
    /// Tables this transaction created (known to the engine only once it commits).
    created: HashSet<String>,
    finished: bool,
}

/// A read transaction of [`SqliteEngine`]: a pooled reader connection inside `BEGIN`.
pub struct SqliteRead<'a> {
    engine: &'a SqliteEngine,
    conn: Option<Connection>,
}

fn get_in(conn: &Connection, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
    let sql = format!("SELECT v FROM {} WHERE k = ?1", sql_table(table)?);
    let mut st = match conn.prepare_cached(&sql) {
        Ok(s) => s,
        Err(e) if is_missing_table(&e) => return Ok(None),
        Err(e) => return Err(store_err(e)),
    };
    st.query_row([key], |r| r.get::<_, Vec<u8>>(0))
        .optional()
        .map_err(store_err)
}

fn scan_in(
    conn: &Connection,
    table: &str,
    start: &[u8],
    end: &[u8],
    dir: Direction,
    visit: &mut Visitor<'_>,
) -> EngineResult<()> {
    if start >= end {
        return Ok(());
    }
    let order = match dir {
        Direction::Forward => "ASC",
        Direction::Reverse => "DESC",
    };
    let sql = format!(
        "SELECT k, v FROM {} WHERE k >= ?1 AND k < ?2 ORDER BY k {order}",
        sql_table(table)?
    );
    let mut st = match conn.prepare_cached(&sql) {
        Ok(s) => s,
        Err(e) if is_missing_table(&e) => return Ok(()),
        Err(e) => return Err(store_err(e)),
    };
    let mut rows = st.query([start, end]).map_err(store_err)?;
    while let Some(row) = rows.next().map_err(store_err)? {
        let k = row
            .get_ref(0)
            .and_then(|v| Ok(v.as_blob()?))
            .map_err(store_err)?;
        let v = row
            .get_ref(1)
            .and_then(|v| Ok(v.as_blob()?))
            .map_err(store_err)?;
        if visit(k, v)? == Flow::Stop {
            break;
        }
    }
    Ok(())
}

impl SqliteWrite<'_> {
    fn ensure_table(&mut self, table: &str) -> EngineResult<()> {
        if self.created.contains(table) || self.engine.tables.lock().contains(table) {
            return Ok(());
        }
        self.conn
            .execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS {} (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
                sql_table(table)?
            ))
            .map_err(store_err)?;
        self.created.insert(table.to_string());
        Ok(())
    }

    fn end(&mut self, sql: &str) -> EngineResult<()> {
        self.finished = true;
        self.conn.execute_batch(sql).map_err(store_err)
    }
}

impl ReadTx for SqliteWrite<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        get_in(&self.conn, table, key)
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()> {
        scan_in(&self.conn, table, start, end, dir, visit)
    }
}

impl WriteTx for SqliteWrite<'_> {
    fn insert(&mut self, table: &str, key: &[u8], value: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        self.ensure_table(table)?;
        let old = get_in(&self.conn, table, key)?;
        let sql = format!(
            "INSERT INTO {} (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            sql_table(table)?
        );
        self.conn
            .prepare_cached(&sql)
            .and_then(|mut st| st.execute([key, value]))
            .map_err(store_err)?;
        Ok(old)
    }

    fn remove(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        let sql = format!("DELETE FROM {} WHERE k = ?1 RETURNING v", sql_table(table)?);
        let mut st = match self.conn.prepare_cached(&sql) {
            Ok(s) => s,
            Err(e) if is_missing_table(&e) => return Ok(None),
            Err(e) => return Err(store_err(e)),
        };
        st.query_row([key], |r| r.get::<_, Vec<u8>>(0))
            .optional()
            .map_err(store_err)
    }

    fn commit(mut self) -> EngineResult<()> {
        self.end("COMMIT")?;
        let created = std::mem::take(&mut self.created);
        self.engine.tables.lock().extend(created);
        self.engine.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn abort(self) {
        // Drop rolls back.
    }
}

impl Drop for SqliteWrite<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // A failed ROLLBACK leaves the connection in its transaction; the next BEGIN then
            // fails with SQLite's own error, so nothing is silently committed.
            let _ = self.end("ROLLBACK");
            self.engine.aborts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ReadTx for SqliteRead<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        match &self.conn {
            Some(c) => get_in(c, table, key),
            None => Ok(None),
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
        match &self.conn {
            Some(c) => scan_in(c, table, start, end, dir, visit),
            None => Ok(()),
        }
    }
}

impl Drop for SqliteRead<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            // Ending the read transaction releases its snapshot; a connection that cannot end
            // it is not reused.
            if c.execute_batch("COMMIT").is_ok() {
                self.engine.readers.lock().push(c);
            }
        }
    }
}

impl Engine for SqliteEngine {
    type Write<'a> = SqliteWrite<'a>;
    type Read<'a> = SqliteRead<'a>;

    const LABEL: &'static str = "sqlite (WAL, synchronous=FULL)";
    const DURABLE: bool = true;
    const HONOURS_CONFIG: bool = false;

    fn open(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        Self::open_at(dir, config, true)
    }

    /// Never creates: a directory without `tpcc.sqlite` is an error and stays as it was.
    fn open_existing(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        Self::open_at(dir, config, false)
    }

    fn write(&self) -> EngineResult<Self::Write<'_>> {
        let conn = self.writer.lock();
        conn.execute_batch("BEGIN IMMEDIATE").map_err(store_err)?;
        Ok(SqliteWrite {
            engine: self,
            conn,
            created: HashSet::new(),
            finished: false,
        })
    }

    fn read(&self) -> EngineResult<Self::Read<'_>> {
        let pooled = self.readers.lock().pop();
        let conn = match pooled {
            Some(c) => c,
            None => Self::connect(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                self.cache_bytes,
            )?,
        };
        conn.execute_batch("BEGIN").map_err(store_err)?;
        Ok(SqliteRead {
            engine: self,
            conn: Some(conn),
        })
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`: the WAL's pages into the database file, the WAL
    /// emptied, so a copied directory opens without replaying it.
    fn checkpoint(&self) -> EngineResult<()> {
        let conn = self.writer.lock();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(store_err)
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            commits: self.commits.load(Ordering::Relaxed),
            aborts: self.aborts.load(Ordering::Relaxed),
            ..EngineStats::default()
        }
    }

    fn effective(&self) -> EffectiveInfo {
        let version = rusqlite::version();
        EffectiveInfo {
            lines: vec![
                format!(
                    "SQLite {version} (bundled): WAL, synchronous=FULL (the WAL is synced at every commit), 4 KiB pages, cache {} KiB per connection",
                    self.cache_bytes / 1024
                ),
                "reads and writes through the OS page cache (no O_DIRECT); only pool_size of the store configuration applies".into(),
            ],
            json: serde_json::json!({
                "engine": "sqlite",
                "version": version,
                "journal_mode": "wal",
                "synchronous": "full",
                "cache_bytes": self.cache_bytes,
                "file": self.path,
            }),
        }
    }
}
