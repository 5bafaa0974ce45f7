//! The reference engine: "memory (no durability)".
//!
//! One `BTreeMap` per table behind a reader-writer lock. A write transaction holds the write lock
//! for its whole life and changes the maps in place, keeping an undo log; `abort` or drop replays
//! the undo log backwards, so rollback is real. A read transaction holds the read lock, so it only
//! ever sees committed data. It is the correctness baseline for the workload's tests and a
//! "no I/O at all" row in reports.
//!
//! Commits are **not durable**: nothing reaches the disk at commit. So that the CLI can `load` in
//! one process and `run` / `check` in another (and a matrix can copy a loaded directory),
//! [`Engine::checkpoint`] writes the whole state to `memory-engine.snapshot` in the store
//! directory (temporary file, fsync, rename, fsync of the directory) and `open` reads it back.
//! A crash loses every commit since the last checkpoint; that is why this engine reports
//! `DURABLE = false` and the crash test skips it.
//!
//! Invariants (tests in `tests/engine.rs` break each on purpose):
//! - a dropped or aborted transaction leaves every table exactly as before (undo log replay);
//! - the snapshot is all-or-nothing: a snapshot whose CRC-32C trailer does not match, or whose
//!   lengths run past the end, is refused with an error naming the file and offset — never loaded
//!   partially.

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use crate::config::StoreConfig;
use crate::engine::{
    Direction, Engine, EngineError, EngineResult, EngineStats, Flow, ReadTx, Visitor, WriteTx,
};

/// File name of the snapshot inside the store directory.
pub const SNAPSHOT_FILE: &str = "memory-engine.snapshot";
const MAGIC: &[u8; 12] = b"KEELTPCCMEM1";

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
struct State {
    names: HashMap<String, usize>,
    order: Vec<String>,
    tables: Vec<Map>,
}

impl State {
    fn table(&self, name: &str) -> Option<&Map> {
        self.names.get(name).map(|&i| &self.tables[i])
    }

    fn table_index(&mut self, name: &str) -> usize {
        if let Some(&i) = self.names.get(name) {
            return i;
        }
        let i = self.tables.len();
        self.tables.push(Map::new());
        self.order.push(name.to_string());
        self.names.insert(name.to_string(), i);
        i
    }
}

/// The in-memory reference engine (see the module docs).
pub struct MemoryEngine {
    dir: PathBuf,
    state: RwLock<State>,
    stats: Mutex<EngineStats>,
}

impl std::fmt::Debug for MemoryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryEngine")
            .field("dir", &self.dir)
            .finish()
    }
}

/// A write transaction of [`MemoryEngine`].
pub struct MemWrite<'a> {
    engine: &'a MemoryEngine,
    state: RwLockWriteGuard<'a, State>,
    undo: Vec<(usize, Vec<u8>, Option<Vec<u8>>)>,
    finished: bool,
}

/// A read transaction of [`MemoryEngine`].
pub struct MemRead<'a> {
    state: RwLockReadGuard<'a, State>,
}

fn scan_map(
    map: Option<&Map>,
    start: &[u8],
    end: &[u8],
    dir: Direction,
    visit: &mut Visitor<'_>,
) -> EngineResult<()> {
    let Some(map) = map else { return Ok(()) };
    if start >= end {
        return Ok(());
    }
    let range = map.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
    match dir {
        Direction::Forward => {
            for (k, v) in range {
                if visit(k, v)? == Flow::Stop {
                    break;
                }
            }
        }
        Direction::Reverse => {
            for (k, v) in range.rev() {
                if visit(k, v)? == Flow::Stop {
                    break;
                }
            }
        }
    }
    Ok(())
}

impl ReadTx for MemRead<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        Ok(self.state.table(table).and_then(|m| m.get(key).cloned()))
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()> {
        scan_map(self.state.table(table), start, end, dir, visit)
    }
}

impl ReadTx for MemWrite<'_> {
    fn get(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        Ok(self.state.table(table).and_then(|m| m.get(key).cloned()))
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        end: &[u8],
        dir: Direction,
        visit: &mut Visitor<'_>,
    ) -> EngineResult<()> {
        scan_map(self.state.table(table), start, end, dir, visit)
    }
}

impl MemWrite<'_> {
    fn rollback(&mut self) {
        while let Some((t, k, old)) = self.undo.pop() {
            let map = &mut self.state.tables[t];
            match old {
                Some(v) => {
                    map.insert(k, v);
                }
                None => {
                    map.remove(&k);
                }
            }
        }
        self.finished = true;
        self.engine.stats.lock().aborts += 1;
    }
}

impl WriteTx for MemWrite<'_> {
    fn insert(&mut self, table: &str, key: &[u8], value: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        let t = self.state.table_index(table);
        let old = self.state.tables[t].insert(key.to_vec(), value.to_vec());
        self.undo.push((t, key.to_vec(), old.clone()));
        Ok(old)
    }

    fn remove(&mut self, table: &str, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        let Some(&t) = self.state.names.get(table) else {
            return Ok(None);
        };
        let old = self.state.tables[t].remove(key);
        if let Some(v) = &old {
            self.undo.push((t, key.to_vec(), Some(v.clone())));
        }
        Ok(old)
    }

    fn commit(mut self) -> EngineResult<()> {
        self.finished = true;
        self.undo.clear();
        self.engine.stats.lock().commits += 1;
        Ok(())
    }

    fn abort(mut self) {
        self.rollback();
    }
}

impl Drop for MemWrite<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.rollback();
        }
    }
}

impl MemoryEngine {
    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of rows in `table` (0 if it does not exist).
    pub fn row_count(&self, table: &str) -> usize {
        self.state.read().table(table).map_or(0, |m| m.len())
    }

    fn write_snapshot(&self) -> EngineResult<u64> {
        let io = |path: &Path, source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        };
        let final_path = self.dir.join(SNAPSHOT_FILE);
        let tmp_path = self.dir.join(format!("{SNAPSHOT_FILE}.tmp"));
        let state = self.state.read();
        let file = std::fs::File::create(&tmp_path).map_err(|e| io(&tmp_path, e))?;
        let mut w = CrcWriter {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            crc: 0,
            bytes: 0,
        };
        let mut body = || -> std::io::Result<()> {
            w.write_all(MAGIC)?;
            w.write_all(&(state.order.len() as u32).to_le_bytes())?;
            for (i, name) in state.order.iter().enumerate() {
                let map = &state.tables[i];
                w.write_all(&(name.len() as u16).to_le_bytes())?;
                w.write_all(name.as_bytes())?;
                w.write_all(&(map.len() as u64).to_le_bytes())?;
                for (k, v) in map {
                    w.write_all(&(k.len() as u32).to_le_bytes())?;
                    w.write_all(k)?;
                    w.write_all(&(v.len() as u32).to_le_bytes())?;
                    w.write_all(v)?;
                }
            }
            let crc = w.crc;
            w.inner.write_all(&crc.to_le_bytes())?;
            w.bytes += 4;
            w.inner.flush()?;
            w.inner.get_ref().sync_all()
        };
        body().map_err(|e| io(&tmp_path, e))?;
        let bytes = w.bytes;
        drop(state);
        std::fs::rename(&tmp_path, &final_path).map_err(|e| io(&final_path, e))?;
        let d = std::fs::File::open(&self.dir).map_err(|e| io(&self.dir, e))?;
        d.sync_all().map_err(|e| io(&self.dir, e))?;
        Ok(bytes)
    }

    fn read_snapshot(path: &Path) -> EngineResult<State> {
        let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let corrupt = |detail: String| EngineError::Corrupt {
            path: path.to_path_buf(),
            detail,
        };
        if bytes.len() < MAGIC.len() + 8 {
            return Err(corrupt(format!("file is {} bytes, too short", bytes.len())));
        }
        let (body, trailer) = bytes.split_at(bytes.len() - 4);
        let mut want = [0u8; 4];
        want.copy_from_slice(trailer);
        let want = u32::from_le_bytes(want);
        let found = crc32c::crc32c(body);
        if want != found {
            return Err(corrupt(format!(
                "CRC-32C mismatch: trailer {want:#010x}, contents {found:#010x}"
            )));
        }
        let mut r = SliceReader { buf: body, pos: 0 };
        let magic = r.take(MAGIC.len()).map_err(&corrupt)?;
        if magic != MAGIC {
            return Err(corrupt("bad magic at offset 0".to_string()));
        }
        let mut state = State::default();
        let tables = r.u32().map_err(&corrupt)?;
        for _ in 0..tables {
            let nlen = r.u16().map_err(&corrupt)? as usize;
            let at = r.pos;
            let name = std::str::from_utf8(r.take(nlen).map_err(&corrupt)?)
                .map_err(|_| corrupt(format!("table name at offset {at} is not UTF-8")))?
                .to_string();
            let i = state.table_index(&name);
            let rows = r.u64().map_err(&corrupt)?;
            for _ in 0..rows {
                let kl = r.u32().map_err(&corrupt)? as usize;
                let k = r.take(kl).map_err(&corrupt)?.to_vec();
                let vl = r.u32().map_err(&corrupt)? as usize;
                let v = r.take(vl).map_err(&corrupt)?.to_vec();
                state.tables[i].insert(k, v);
            }
        }
        if r.pos != body.len() {
            return Err(corrupt(format!(
                "{} trailing bytes at offset {}",
                body.len() - r.pos,
                r.pos
            )));
        }
        Ok(state)
    }
}

struct CrcWriter<W: std::io::Write> {
    inner: W,
    crc: u32,
    bytes: u64,
}

impl<W: std::io::Write> std::io::Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct SliceReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> SliceReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "length {n} at offset {} runs past the end ({} bytes)",
                    self.pos,
                    self.buf.len()
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, String> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(a))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

impl Engine for MemoryEngine {
    type Write<'a> = MemWrite<'a>;
    type Read<'a> = MemRead<'a>;

    const LABEL: &'static str = "memory (no durability)";
    const DURABLE: bool = false;
    const HONOURS_CONFIG: bool = false;

    fn open(dir: &Path, _config: &StoreConfig) -> EngineResult<Self> {
        std::fs::create_dir_all(dir).map_err(|source| EngineError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let snap = dir.join(SNAPSHOT_FILE);
        let state = if snap.exists() {
            Self::read_snapshot(&snap)?
        } else {
            State::default()
        };
        Ok(MemoryEngine {
            dir: dir.to_path_buf(),
            state: RwLock::new(state),
            stats: Mutex::new(EngineStats::default()),
        })
    }

    fn write(&self) -> EngineResult<MemWrite<'_>> {
        Ok(MemWrite {
            engine: self,
            state: self.state.write(),
            undo: Vec::new(),
            finished: false,
        })
    }

    fn read(&self) -> EngineResult<MemRead<'_>> {
        Ok(MemRead {
            state: self.state.read(),
        })
    }

    fn checkpoint(&self) -> EngineResult<()> {
        let bytes = self.write_snapshot()?;
        let mut s = self.stats.lock();
        s.data_writes += 1;
        s.data_syncs += 2;
        *s.other.entry("snapshot_bytes".to_string()).or_insert(0) += bytes;
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        self.stats.lock().clone()
    }
}
