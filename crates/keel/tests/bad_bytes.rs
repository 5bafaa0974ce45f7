//! Bad bytes in every file: the "never silent" invariant over the whole store, as an
//! independent checker would test it through the public API.
//!
//! Each case builds a small store on SimFs with random transactions (keys of varied length,
//! values from 0 bytes to several pages, overwrites and deletes), every commit acknowledged, then
//! ends the process in one of three ways (clean `close`, drop without a checkpoint, power loss),
//! then damages ONE file of the store directory in one way (a flipped bit, a zeroed 512-byte
//! sector, a garbage 4 KiB block, a whole file zeroed, the file deleted, truncated or grown by
//! garbage, replaced by a stale copy (its contents after an earlier acknowledged commit), by
//! the file of the same name from another store, or by that of a *twin*: a store with the same
//! transactions but other values, whose LSNs and checkpoints agree) and reopens.
//!
//! A quarter of the cases reopen with another torn-page protection than the run had, a quarter
//! keep their log in growing files, a quarter use 8 or 16 KiB pages, and a quarter the legacy
//! page checksum.
//!
//! The property: the store either refuses (an error at open or on a read), or returns exactly
//! the acknowledged data — by get, forward scan and reverse scan — and keeps doing so after one
//! more commit and a reopen. A panic, a silently shorter table, or a store re-created over the
//! old files fails the case.
//!
//! A stale copy of a log file whose commits were never checkpointed into the data file is a
//! rollback to an earlier commit point that nothing else on disk contradicts: like damage to the
//! log's final blocks it cannot be detected, and it is counted apart ("stale-log rollbacks").
//! A stale data file can be: it used to open silently with the old table, and is now refused
//! (the file checkpoint on page 0, design invariant 9). A twin's data file used to open
//! silently with the twin's values (11 of 3,000 cases once twins were tried): every LSN agreed;
//! the meta page now records the store it belongs to (invariant 10).
//!
//! Why this test exists: the crash matrix (`crash.rs`) only loses or tears *unsynced* writes, so
//! damage to synced bytes — a log block in the replay range, a zeroed meta page, a deleted log
//! header — was never tried, and each of those lost acknowledged commits silently (issue 11,
//! items 3, 4 and 6).

#[path = "common/rng.rs"]
mod rng;

use keel::{Config, Durability, Error, Store, TornPage};
use keel_io::{FileClass, FileSystem, OpenOptions, SimConfig, SimFs};
use rng::Rng;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every torn-page protection (`Auto` is one of the others).
const MODES: [TornPage; 4] = [
    TornPage::Doublewrite,
    TornPage::FullPageWrites,
    TornPage::Atomic,
    TornPage::None,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Close,
    Drop,
    PowerLoss,
}

#[derive(Clone)]
enum Damage {
    FlipBit {
        offset: u64,
        bit: u8,
    },
    ZeroSector {
        offset: u64,
    },
    Garbage4k {
        offset: u64,
    },
    ZeroFile,
    Delete,
    /// The file cut to `len % its length` bytes (an interrupted copy, a file system that lost
    /// the end of a file).
    Truncate {
        len: u64,
    },
    /// `n` garbage bytes appended (a file that grew past what the store wrote).
    Extend {
        n: u64,
    },
    /// The file's contents as they were after an earlier acknowledged commit (a stale copy
    /// restored from a backup): `None` if it did not exist then.
    Stale(Option<Vec<u8>>),
    /// The file of the same name from another store (files copied between two store
    /// directories): `None` if that store has none.
    Foreign(Option<Vec<u8>>),
    /// The file of the same name from a *twin*: a store with the same configuration and the
    /// same transactions (so the same LSNs and, after a clean close, the same checkpoint) whose
    /// values differ. Nothing but the store's identity tells its files apart.
    Twin(Option<Vec<u8>>),
    /// The contents of this log file and of another of the same store exchanged (a restore
    /// that put two files back under each other's names): the other file and its bytes.
    Swap(PathBuf, Vec<u8>),
}

impl std::fmt::Debug for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::FlipBit { offset, bit } => {
                write!(f, "FlipBit {{ offset: {offset}, bit: {bit} }}")
            }
            Damage::ZeroSector { offset } => write!(f, "ZeroSector {{ offset: {offset} }}"),
            Damage::Garbage4k { offset } => write!(f, "Garbage4k {{ offset: {offset} }}"),
            Damage::ZeroFile => write!(f, "ZeroFile"),
            Damage::Delete => write!(f, "Delete"),
            Damage::Truncate { len } => write!(f, "Truncate {{ len: {len} }}"),
            Damage::Extend { n } => write!(f, "Extend {{ n: {n} }}"),
            Damage::Stale(None) => write!(f, "Stale (did not exist)"),
            Damage::Stale(Some(b)) => write!(f, "Stale ({} bytes)", b.len()),
            Damage::Foreign(None) => write!(f, "Foreign (the other store has none)"),
            Damage::Foreign(Some(b)) => write!(f, "Foreign ({} bytes)", b.len()),
            Damage::Twin(None) => write!(f, "Twin (the twin has none)"),
            Damage::Twin(Some(b)) => write!(f, "Twin ({} bytes)", b.len()),
            Damage::Swap(other, _) => write!(f, "Swap (with {})", other.display()),
        }
    }
}

fn config(mode: TornPage) -> Config {
    Config {
        page_size: 4096,
        pool_size: 48 * 4096,
        torn_page: mode,
        doublewrite_batch: 8,
        log_block_size: 512,
        write_ahead_size: 4096,
        log_file_size: 256 * 1024,
        log_file_count: 2,
        log_buffer_size: 64 * 1024,
        durability: Durability::Sync,
        checkpoint_interval: Duration::from_millis(5),
        ..Config::default()
    }
}

fn contents(store: &Store) -> Result<Model, Error> {
    let r = store.read()?;
    let t = match r.table("t") {
        Ok(t) => t,
        Err(Error::TableNotFound(_)) => return Ok(Model::new()),
        Err(e) => return Err(e),
    };
    let fwd: Model = t.range(..)?.collect::<Result<_, _>>()?;
    let mut rev: Vec<(Vec<u8>, Vec<u8>)> = t.range(..)?.rev().collect::<Result<_, _>>()?;
    rev.reverse();
    if rev.len() != fwd.len()
        || rev
            .iter()
            .zip(fwd.iter())
            .any(|(a, b)| a.0 != *b.0 || a.1 != *b.1)
    {
        return Ok(Model::from([(
            b"<forward and reverse scans differ>".to_vec(),
            Vec::new(),
        )]));
    }
    Ok(fwd)
}

fn check_gets(store: &Store, model: &Model) -> Result<Option<String>, Error> {
    let r = store.read()?;
    let t = match r.table("t") {
        Ok(t) => t,
        Err(Error::TableNotFound(_)) if model.is_empty() => return Ok(None),
        Err(e) => return Err(e),
    };
    for (k, v) in model {
        match t.get(k)? {
            Some(got) if got == *v => {}
            other => {
                return Ok(Some(format!(
                    "get({:?}) returned {:?} bytes, expected {}",
                    String::from_utf8_lossy(k),
                    other.map(|o| o.len()),
                    v.len()
                )))
            }
        }
    }
    Ok(None)
}

fn damage(fs: &SimFs, path: &Path, d: &Damage) -> Result<(), String> {
    let e = |e: keel_io::IoError| e.to_string();
    match d {
        Damage::Delete | Damage::Stale(None) | Damage::Foreign(None) | Damage::Twin(None) => {
            return fs.remove_file(path).map_err(e)
        }
        _ => {}
    }
    let bytes = fs.contents(path).map_err(e)?;
    let f = fs
        .open(path, &OpenOptions::new(FileClass::Other))
        .map_err(e)?;
    let len = bytes.len() as u64;
    match *d {
        Damage::FlipBit { offset, bit } => {
            let o = offset % len.max(1);
            if len > 0 {
                let b = bytes[o as usize] ^ (1 << bit);
                f.write_all_at(&[b], o).map_err(e)?;
            }
        }
        Damage::ZeroSector { offset } => {
            let o = (offset % len.max(1)) / 512 * 512;
            let n = 512.min(len - o.min(len));
            f.write_all_at(&vec![0u8; n as usize], o).map_err(e)?;
        }
        Damage::Garbage4k { offset } => {
            let o = (offset % len.max(1)) / 4096 * 4096;
            let n = 4096.min(len - o.min(len));
            let mut r = Rng(offset);
            let g: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            f.write_all_at(&g, o).map_err(e)?;
        }
        Damage::ZeroFile => {
            f.write_all_at(&vec![0u8; len as usize], 0).map_err(e)?;
        }
        Damage::Truncate { len: to } => f.set_len(to % len.max(1)).map_err(e)?,
        Damage::Extend { n } => {
            let mut r = Rng(n);
            let g: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            f.write_all_at(&g, len).map_err(e)?;
        }
        Damage::Stale(Some(ref old))
        | Damage::Foreign(Some(ref old))
        | Damage::Twin(Some(ref old)) => {
            f.set_len(0).map_err(e)?;
            f.write_all_at(old, 0).map_err(e)?;
        }
        Damage::Swap(ref other, ref theirs) => {
            let g = fs
                .open(other, &OpenOptions::new(FileClass::Other))
                .map_err(e)?;
            g.set_len(0).map_err(e)?;
            g.write_all_at(&bytes, 0).map_err(e)?;
            g.sync_all().map_err(e)?;
            f.set_len(0).map_err(e)?;
            f.write_all_at(theirs, 0).map_err(e)?;
        }
        Damage::Delete | Damage::Stale(None) | Damage::Foreign(None) | Damage::Twin(None) => {
            unreachable!()
        }
    }
    f.sync_all().map_err(e)
}

/// The log blocks (file, byte range) that hold the newest log data: the valid blocks whose
/// numbers are within `TAIL_BLOCKS` of the highest valid block. Damage confined to the log's
/// tail — the blocks written by the final commits, after which nothing durable was written —
/// is indistinguishable from a torn write (InnoDB, PostgreSQL and SQLite's WAL share this
/// limit): recovery ends before it and those final commits are lost. The case counts as a
/// *tail loss* only if the table then equals the model at an earlier commit point.
fn log_tail(fs: &SimFs, dir: &Path) -> Vec<(PathBuf, u64, u64)> {
    use keel_redo_log::inspect::{check_block, decode_header, payload_size, Geometry};
    const TAIL_BLOCKS: u64 = 96;
    let log = dir.join(keel::LOG_DIR);
    let Ok(h) = fs.contents(&log.join("log.header")) else {
        return Vec::new();
    };
    let Ok((st, slot)) = decode_header(&log.join("log.header"), &h) else {
        return Vec::new();
    };
    let b = st.block_size as usize;
    let geo = Geometry {
        block: b,
        payload: payload_size(b),
        preallocated: st.preallocated,
        blocks_per_file: st.file_size / b as u64,
        files: st.files,
        salt: st.salt,
    };
    let mut blocks = Vec::new();
    for path in fs.list_dir(&log).unwrap_or_default() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(idx) = name
            .strip_prefix("log.")
            .and_then(|x| x.parse::<u64>().ok())
        else {
            continue;
        };
        let bytes = fs.contents(&path).unwrap_or_default();
        for (i, raw) in bytes.chunks_exact(b).enumerate() {
            let mut n8 = [0u8; 8];
            n8.copy_from_slice(&raw[..8]);
            let n = u64::from_le_bytes(n8);
            if geo.location(n) != (idx, i as u64 * b as u64) {
                continue;
            }
            if check_block(raw, geo.salt, n, geo.epoch_of(n), true).is_ok() {
                blocks.push((n, path.clone(), i as u64 * b as u64));
            }
        }
    }
    let last = blocks.iter().map(|x| x.0).max().unwrap_or(0);
    // Blocks below the durable LSN the header records are not tail: the open refuses a scan
    // that ends before it (session 45; before, a whole growing file zeroed there counted as a
    // tail loss).
    let durable = slot
        .durable_lsn
        .map_or(0, |d| d.div_ceil(geo.payload as u64));
    blocks
        .into_iter()
        .filter(|x| x.0 + TAIL_BLOCKS > last && x.0 >= durable)
        .map(|(_, p, o)| (p, o, o + b as u64))
        .collect()
}

fn damaged_range(d: &Damage, len: u64) -> (u64, u64) {
    match *d {
        Damage::FlipBit { offset, .. } => {
            let o = offset % len.max(1);
            (o, o + 1)
        }
        Damage::ZeroSector { offset } => {
            let o = (offset % len.max(1)) / 512 * 512;
            (o, o + 512)
        }
        Damage::Garbage4k { offset } => {
            let o = (offset % len.max(1)) / 4096 * 4096;
            (o, o + 4096)
        }
        Damage::Truncate { len: to } => (to % len.max(1), len),
        Damage::Extend { n } => (len, len + n),
        Damage::ZeroFile
        | Damage::Delete
        | Damage::Stale(_)
        | Damage::Foreign(_)
        | Damage::Twin(_)
        | Damage::Swap(..) => (0, len),
    }
}

/// The file at `path` of another store made with the same configuration (its own rows, closed
/// cleanly or dropped), or `None` if it has none.
fn foreign_file(rng: &mut Rng, cfg: &Config, path: &Path) -> Result<Option<Vec<u8>>, String> {
    let fs = SimFs::new(SimConfig::seeded(rng.next()).hardware_atomic());
    let dir = Path::new("/db");
    let store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone())
        .map_err(|e| format!("foreign open: {e}"))?;
    // As much redo as the store under test writes, so the two stores' LSNs overlap.
    for i in 0..5 + rng.below(60) {
        let tx = store.write().map_err(|e| e.to_string())?;
        let rows: Vec<usize> = (0..1 + rng.below(8))
            .map(|_| {
                let max = if rng.below(10) == 0 { 3 * 4096 } else { 300 };
                rng.below(max) as usize
            })
            .collect();
        tx.table("t")
            .and_then(|mut t| {
                for (j, len) in rows.into_iter().enumerate() {
                    t.insert(format!("other{i:04}.{j}").as_bytes(), &vec![0xee; len])?;
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
    }
    if rng.below(2) == 0 {
        store.close().map_err(|e| e.to_string())?;
    } else {
        drop(store);
    }
    Ok(fs.contents(path).ok())
}

/// Whether transaction `i` of case `seed` drops the table before it writes (one in eight,
/// from a generator of its own): the table's pages are freed and the new table's taken afresh
/// from the freed ids, which are then written home without the doublewrite area — while the
/// area may still hold images of their previous life. No case dropped before: a flipped bit in
/// such a page was "repaired" with the old table's image, silently (the area's images at or
/// below the checkpoint now repair nothing).
fn drops_first(seed: u64, i: u64) -> bool {
    Rng(seed ^ 0xd20b_0000_0000_0017 ^ i.wrapping_mul(0x9e37_79b9)).below(8) == 0
}

/// After which of its `txns` transactions case `seed` closes the store and opens it again (a
/// third of the cases, from a generator of their own): a later incarnation of the log and a
/// new checkpoint, so a stale copy from before it — the log's header among them — meets what
/// the later opening wrote. Every case before ran one opening: a stale `log.header` put back
/// lost the second opening's commits silently. A twin reopens at the same point.
fn reopen_at(seed: u64, txns: u64) -> Option<u64> {
    let mut again = Rng(seed ^ 0x2e0e_4000_0000_0018);
    (again.below(3) == 0).then(|| again.next() % txns)
}

/// One random transaction of the history (committed, acknowledged), applied to `model` too,
/// after dropping the table if `drop_first`. A twin passes `twist` ≠ 0: the same draws, so the
/// same keys and value lengths (the same redo sizes, hence the same LSNs), with every value
/// byte XORed with it.
fn write_txn(
    store: &Store,
    rng: &mut Rng,
    model: &mut Model,
    twist: u8,
    drop_first: bool,
) -> Result<(), String> {
    let before = model.clone();
    let mut tx = store.write().map_err(|e| e.to_string())?;
    if drop_first {
        tx.drop_table("t").map_err(|e| e.to_string())?;
        model.clear();
    }
    {
        let mut t = tx.table("t").map_err(|e| e.to_string())?;
        for _ in 0..1 + rng.below(8) {
            let kmax = if rng.below(8) == 0 { 400 } else { 24 };
            let klen = 1 + rng.below(kmax);
            let key: Vec<u8> = (0..klen).map(|_| b'a' + rng.below(3) as u8).collect();
            if rng.below(5) == 0 {
                t.remove(&key).map_err(|e| e.to_string())?;
                model.remove(&key);
            } else {
                let vlen = match rng.below(10) {
                    0 => rng.below(3 * 4096),
                    1 => 0,
                    _ => rng.below(300),
                };
                let fill = rng.next() as u8 ^ twist;
                let v = vec![fill; vlen as usize];
                t.insert(&key, &v).map_err(|e| e.to_string())?;
                model.insert(key, v);
            }
        }
    }
    match tx.commit() {
        Ok(()) => Ok(()),
        // A drop of a large table with full-page writes can need more redo than the small log
        // holds: refused, nothing committed (a twin is refused alike).
        Err(e) if e.is_too_large() => {
            *model = before;
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The file at `path` of the twin of the case `seed`: a store on another file system with the
/// same configuration, the same transactions (values XORed with 0xa5) and the same ending, or
/// `None` if it has none.
fn twin_file(
    seed: u64,
    cfg: &Config,
    ending: Ending,
    path: &Path,
) -> Result<Option<Vec<u8>>, String> {
    let mut rng = Rng(seed);
    let _mode = rng.below(4);
    let fs = SimFs::new(SimConfig::seeded(seed ^ 0x7717).hardware_atomic());
    let store = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/db"), cfg.clone())
        .map_err(|e| format!("twin open: {e}"))?;
    let mut model = Model::new();
    let txns = 5 + rng.below(40);
    let reopen = reopen_at(seed, txns);
    let mut store = store;
    for i in 0..txns {
        write_txn(&store, &mut rng, &mut model, 0xa5, drops_first(seed, i))?;
        if reopen == Some(i) {
            store
                .close()
                .map_err(|e| format!("twin close to reopen: {e}"))?;
            store = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/db"), cfg.clone())
                .map_err(|e| format!("twin reopen: {e}"))?;
        }
    }
    let post = match ending {
        Ending::Close => {
            store.close().map_err(|e| format!("twin close: {e}"))?;
            fs
        }
        Ending::Drop => {
            drop(store);
            fs
        }
        Ending::PowerLoss => {
            let p = fs.crash_or_crashed_into();
            drop(store);
            p
        }
    };
    Ok(post.contents(path).ok())
}

/// How a case ended.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Open or a read refused with an error.
    Refused,
    /// Exactly the acknowledged data.
    Intact,
    /// Damage in the log's tail: the table equals an earlier commit point (see [`log_tail`]).
    TailLoss,
}

/// Ok: refused, intact or a tail loss; Err: a silent wrong answer or a panic.
fn run_case(seed: u64) -> Result<(Verdict, String), String> {
    let mut rng = Rng(seed);
    let mode = MODES[rng.below(4) as usize];
    let fs = SimFs::new(SimConfig::seeded(seed).hardware_atomic());
    let dir = Path::new("/db");
    // A quarter of the cases keep their log in growing files (32 KiB each, so a case spans
    // several): a file deleted, cut short or stale in the middle of such a log is damage the
    // preallocated files never showed. Its own generator, so the other choices are those the
    // seed always gave.
    let mut cfg = config(mode);
    if Rng(seed ^ 0x6706_1e00_0000_0004).below(4) == 0 {
        cfg.log_files = keel::LogFileMode::Growing;
        cfg.log_file_size = 32 * 1024;
    } else if Rng(seed ^ 0x4f11_e500_0000_0016).below(3) == 0 {
        // A third of the preallocated logs in four files, not two: a damaged file then has
        // others after it holding durable blocks, as in a store's default log. Its own
        // generator.
        cfg.log_file_size = 128 * 1024;
        cfg.log_file_count = 4;
    }
    // A quarter use 8 or 16 KiB pages, and a quarter the legacy page checksum (never none: a
    // flipped bit would then be undetectable by construction).
    let mut shape = Rng(seed ^ 0x5a9e_0000_0000_0005);
    if shape.below(4) == 0 {
        cfg.page_size = [8192, 16384][shape.below(2) as usize];
        cfg.pool_size = 48 * cfg.page_size;
        // Full page images grow with the page: the log too.
        cfg.log_file_size *= cfg.page_size as u64 / 4096;
    }
    if shape.below(4) == 0 {
        cfg.checksum = keel::Checksum::Legacy;
    }
    // Half the cases run checkpoints and page cleaning in the test's thread
    // (`Config::inline_maintenance`): no timer decides what the files hold when the damage
    // strikes, so such a case replays exactly (`KEEL_BAD_BYTES_SEED`); the others keep the
    // background threads and their timing. Its own generator.
    cfg.inline_maintenance = Rng(seed ^ 0x1e11_0000_0000_000f).below(2) == 0;
    let mut store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone())
        .map_err(|e| format!("first open: {e}"))?;
    let mut model = Model::new();
    let mut snapshots = vec![Model::new()];

    // A second stream for the damages added later, so that the cases of the first ones replay
    // as they did.
    let mut more = Rng(seed ^ 0x5741_1e00_0000_0001);
    let txns = 5 + rng.below(40);
    let stale_at = more.below(txns);
    let mut stale: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    let reopen_at = reopen_at(seed, txns);
    for i in 0..txns {
        write_txn(&store, &mut rng, &mut model, 0, drops_first(seed, i))?;
        snapshots.push(model.clone());
        if reopen_at == Some(i) {
            store.close().map_err(|e| format!("close to reopen: {e}"))?;
            store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone())
                .map_err(|e| format!("reopen: {e}"))?;
        }
        if i == stale_at {
            for f in fs.files().map_err(|e| e.to_string())? {
                // A growing log's old file may be deleted by the checkpointer meanwhile.
                if let Ok(bytes) = fs.contents(&f) {
                    stale.insert(f, bytes);
                }
            }
        }
    }
    let ending = [Ending::Close, Ending::Drop, Ending::PowerLoss][rng.below(3) as usize];
    // Half the runs that end without a close end with the process killed instead of the store
    // dropped (no destructor runs, so no final log sync: the page cache keeps what was written,
    // unsynced). Its own generator.
    let killed = ending == Ending::Drop && Rng(seed ^ 0x0c0a_5e00_0000_0013).below(2) == 0;
    let post = match ending {
        Ending::Close => {
            store.close().map_err(|e| format!("close: {e}"))?;
            fs.clone()
        }
        Ending::Drop if killed => {
            let p = fs.process_crash();
            drop(store);
            p
        }
        Ending::Drop => {
            drop(store);
            fs.clone()
        }
        Ending::PowerLoss => {
            let p = fs.crash_or_crashed_into();
            drop(store);
            p
        }
    };
    let mut files: Vec<PathBuf> = post.files().map_err(|e| e.to_string())?;
    files.sort();
    if files.is_empty() {
        return Err("no files".into());
    }
    let victim = files[rng.below(files.len() as u64) as usize].clone();
    let d = match rng.below(10) {
        0..=3 => Damage::FlipBit {
            offset: rng.next(),
            bit: rng.below(8) as u8,
        },
        4 | 5 => Damage::ZeroSector { offset: rng.next() },
        6 | 7 => Damage::Garbage4k { offset: rng.next() },
        8 => Damage::ZeroFile,
        _ => Damage::Delete,
    };
    let d = match more.below(8) {
        0 => Damage::Truncate { len: more.next() },
        1 => Damage::Extend {
            n: 1 + more.below(3 * 4096),
        },
        2 | 3 => Damage::Stale(stale.get(&victim).cloned()),
        // A third stream decides between a foreign store and a twin, so that the foreign cases
        // drawn before twins existed replay as they did.
        4 if Rng(seed ^ 0x7717_0000_0000_0003).below(2) == 0 => {
            Damage::Twin(twin_file(seed, &cfg, ending, &victim)?)
        }
        4 => Damage::Foreign(foreign_file(&mut more, &cfg, &victim)?),
        _ => d,
    };
    // A sixth of the cases whose victim is a log file swap it with another log file of the
    // store (a zeroed, swapped or replaced middle log file opened as a torn tail before
    // session 45: a tester; no damage here moved a file's contents to another's name). Its own
    // generator.
    let mut swap = Rng(seed ^ 0x5a4b_0000_0000_0015);
    let is_log = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("log.0"))
    };
    let d = if swap.below(6) == 0 && is_log(&victim) {
        let others: Vec<&PathBuf> = files
            .iter()
            .filter(|f| is_log(f) && **f != victim)
            .collect();
        if others.is_empty() {
            d
        } else {
            let other = others[swap.below(others.len() as u64) as usize].clone();
            let theirs = post.contents(&other).map_err(|e| e.to_string())?;
            Damage::Swap(other, theirs)
        }
    } else {
        d
    };
    let original = post.contents(&victim).ok();
    let victim_len = original.as_ref().map_or(0, |c| c.len() as u64);
    let (lo, hi) = damaged_range(&d, victim_len);
    let in_tail = log_tail(&post, dir).iter().any(|(p, a, b)| {
        (*p == victim && lo < *b && *a < hi) || matches!(&d, Damage::Swap(o, _) if o == p)
    });
    damage(&post, &victim, &d)?;
    // A quarter of the cases reopen with another torn-page protection than the run's (each
    // open may choose): the damage must be refused or harmless in that mode too. Its own
    // generator, so the rest of each case is what the seed always gave.
    let mut switch = Rng(seed ^ 0x5717_c40d_e000_0002);
    let (cfg, reopened) = if switch.below(4) == 0 {
        let m = switch.other(&MODES, mode);
        (
            Config {
                torn_page: m,
                ..cfg
            },
            format!(", reopened in {m:?}"),
        )
    } else {
        (cfg, String::new())
    };
    let what = format!(
        "{mode:?}, {:?} log, {} KiB pages, {:?}, {ending:?}{}, {d:?} in {}{reopened}{}",
        cfg.log_files,
        cfg.page_size / 1024,
        cfg.checksum,
        if killed { " (process killed)" } else { "" },
        victim.display(),
        if cfg.inline_maintenance {
            ", inline maintenance (replays exactly)"
        } else {
            ""
        }
    );
    let fs2 = post.clone();
    let before = files_of(&fs2);
    let verdict = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<Verdict, String> {
        let store = match Store::open_with_fs(Arc::new(fs2.clone()), dir, cfg.clone()) {
            Ok(s) => s,
            Err(e) => {
                // A refused open writes nothing: no file added, removed or changed (the
                // doublewrite recovery serves its images in memory until every check has passed;
                // before, 7 refusals in 8,000 had restored them into the data file).
                let after = files_of(&fs2);
                if after != before {
                    let differ: Vec<&PathBuf> = before
                        .iter()
                        .filter(|b| !after.contains(b))
                        .map(|(p, _)| p)
                        .chain(
                            after
                                .iter()
                                .filter(|a| !before.iter().any(|b| b.0 == a.0))
                                .map(|(p, _)| p),
                        )
                        .collect();
                    return Err(format!("the refused open ({e}) wrote: {differ:?}"));
                }
                if verbose() || std::env::var("KEEL_BAD_BYTES_REASONS").is_ok() {
                    println!("open refused: {e}");
                }
                // Half the refusals are followed by the user undoing the damage (the file put
                // back as it was): a refusal must never have made things worse, so the store
                // then opens with every acknowledged row. Its own generator.
                if Rng(seed ^ 0x0d0e_0000_0000_000e).below(2) == 0 {
                    undo_damage(&fs2, &victim, original.as_deref())?;
                    if let Damage::Swap(other, theirs) = &d {
                        undo_damage(&fs2, other, Some(theirs))?;
                    }
                    let store = match Store::open_with_fs(Arc::new(fs2.clone()), dir, cfg.clone()) {
                        Ok(s) => s,
                        // Without protection the power loss itself may have torn a page the
                        // store cannot do without: refused before the damage too.
                        Err(u)
                            if mode == TornPage::None
                                && ending == Ending::PowerLoss
                                && u.is_corruption() =>
                        {
                            return Ok(Verdict::Refused);
                        }
                        Err(u) => {
                            return Err(format!(
                                "refused ({e}), and with the damage undone still refused: {u}"
                            ))
                        }
                    };
                    let got = contents(&store).map_err(|u| {
                        format!("refused ({e}); with the damage undone a read failed: {u}")
                    })?;
                    if got != model {
                        return Err(format!(
                            "refused ({e}); with the damage undone {} rows, {} acknowledged: the refused open lost data",
                            got.len(),
                            model.len()
                        ));
                    }
                    UNDONE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return Ok(Verdict::Refused);
            }
        };
        if verbose() {
            println!("reopened: {:?}", store.recovery());
        }
        let got = match contents(&store) {
            Ok(m) => m,
            Err(_) => return Ok(Verdict::Refused),
        };
        if got != model && in_tail && snapshots.contains(&got) {
            return Ok(Verdict::TailLoss);
        }
        if got != model {
            return Err(format!(
                "silent wrong answer: {} rows returned, {} acknowledged",
                got.len(),
                model.len()
            ));
        }
        match check_gets(&store, &model) {
            Ok(None) => {}
            Ok(Some(msg)) => return Err(format!("silent wrong answer: {msg}")),
            Err(_) => return Ok(Verdict::Refused),
        }
        // One more commit, then a reopen: a store that opened over damage must not lose the
        // old data when it writes.
        let more = store.write().and_then(|tx| {
            tx.table("t")?.insert(b"after-damage", b"x")?;
            tx.commit()
        });
        if more.is_err() {
            return Ok(Verdict::Refused);
        }
        drop(store);
        let store = match Store::open_with_fs(Arc::new(fs2.clone()), dir, cfg.clone()) {
            Ok(s) => s,
            Err(_) => return Ok(Verdict::Refused),
        };
        let mut want = model.clone();
        want.insert(b"after-damage".to_vec(), b"x".to_vec());
        match contents(&store) {
            Ok(m) if m == want => Ok(Verdict::Intact),
            Ok(m) => Err(format!(
                "silent loss after a write on the damaged store: {} rows, {} expected",
                m.len(),
                want.len()
            )),
            Err(_) => Ok(Verdict::Refused),
        }
    }));
    match verdict {
        Ok(Ok(v)) => Ok((v, what)),
        Ok(Err(msg)) => Err(format!("{what}: {msg}")),
        Err(p) => Err(format!(
            "{what}: panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// Refused opens whose damage was then undone, and which then opened intact.
static UNDONE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Puts `path` back as it was before the damage (`original`; `None`: it did not exist).
fn undo_damage(fs: &SimFs, path: &Path, original: Option<&[u8]>) -> Result<(), String> {
    let e = |e: keel_io::IoError| e.to_string();
    let Some(bytes) = original else {
        return match fs.remove_file(path) {
            Ok(()) => Ok(()),
            Err(_) if !fs.exists(path).map_err(e)? => Ok(()),
            Err(x) => Err(x.to_string()),
        };
    };
    let f = fs
        .open(path, &OpenOptions::new(FileClass::Other).create(true))
        .map_err(e)?;
    f.set_len(0).map_err(e)?;
    f.write_all_at(bytes, 0).map_err(e)?;
    f.sync_all().map_err(e)?;
    Ok(())
}

/// Every file of the simulated machine but the lock file, with its contents.
fn files_of(fs: &SimFs) -> Vec<(PathBuf, Vec<u8>)> {
    fs.files()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != keel::layout::LOCK_FILE))
        .map(|p| {
            let c = fs.contents(&p).unwrap_or_default();
            (p, c)
        })
        .collect()
}

fn verbose() -> bool {
    std::env::var("KEEL_BAD_BYTES_SEED").is_ok()
}

fn matrix(cases: u64, seed_base: u64) {
    if let Some(seed) = std::env::var("KEEL_BAD_BYTES_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        println!("{:?}", run_case(seed));
        return;
    }
    let (mut refused, mut intact, mut tail) = (0, 0, Vec::new());
    let mut failures = Vec::new();
    for i in 0..cases {
        let seed = seed_base + i * 104_729;
        match run_case(seed) {
            Ok((Verdict::Refused, _)) => refused += 1,
            Ok((Verdict::Intact, _)) => intact += 1,
            Ok((Verdict::TailLoss, what)) => tail.push(format!("seed {seed}: {what}")),
            Err(e) => failures.push(format!("seed {seed}: {e}")),
        }
    }
    let stale_logs = tail.iter().filter(|t| t.contains("Stale")).count();
    println!(
        "bad bytes: {cases} cases, {refused} refused with an error, {intact} intact, {} tail losses (damage to the log's final blocks) and {stale_logs} stale-log rollbacks (both undetectable by design), {} silent failures",
        tail.len() - stale_logs,
        failures.len()
    );
    println!(
        "bad bytes: {} refusals undone (the file put back) opened intact",
        UNDONE.load(std::sync::atomic::Ordering::Relaxed)
    );
    for t in &tail {
        println!("  tail loss: {t}");
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases gave a silent wrong answer or panicked:\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn bad_bytes_in_any_file_are_refused_or_harmless() {
    let cases = std::env::var("KEEL_BAD_BYTES_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    matrix(cases, 17);
}

/// A flipped bit in pages whose ids were freed (a table dropped) and taken afresh by another
/// table: such pages are written home without the doublewrite area, which still holds images
/// of their previous life, at or below the checkpoint. The open must refuse or read the new
/// table exactly — it restored the old images in place of the damaged pages and served the
/// dropped table's rows as the new one's, past `check` (found by a session's adversarial
/// test; the matrix above meets the combination too rarely to stand guard).
#[test]
fn a_damaged_page_is_never_repaired_with_the_image_of_its_previous_life() {
    use std::os::unix::fs::FileExt;
    let cfg = Config {
        page_size: 4096,
        pool_size: 4 << 20,
        log_file_size: 1 << 20,
        doublewrite_batch: 16,
        inline_maintenance: true,
        ..Config::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = Store::open(d, cfg.clone()).unwrap();
    // Table a written twice, each checkpointed: its pages' images are in the area.
    for fill in [0xAA, 0xA1] {
        let tx = s.write().unwrap();
        let mut a = tx.table("a").unwrap();
        for i in 0..60u32 {
            a.insert(format!("a{i:04}").as_bytes(), &[fill; 300])
                .unwrap();
        }
        drop(a);
        tx.commit().unwrap();
        s.checkpoint().unwrap();
    }
    // Dropped; table b built on its freed ids.
    let mut tx = s.write().unwrap();
    assert!(tx.drop_table("a").unwrap());
    tx.commit().unwrap();
    let mut model = Model::new();
    let tx = s.write().unwrap();
    let mut b = tx.table("b").unwrap();
    for i in 0..60u32 {
        let (k, v) = (format!("b{i:04}").into_bytes(), vec![0xBB; 300]);
        b.insert(&k, &v).unwrap();
        model.insert(k, v);
    }
    drop(b);
    tx.commit().unwrap();
    s.close().unwrap();
    // One flipped bit in the middle of the last page (a leaf of b on an id of a).
    let path = d.join(keel::layout::DATA_FILE_NAME);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let pages = f.metadata().unwrap().len() / 4096;
    for p in pages - 1..pages {
        let mut byte = [0u8; 1];
        f.read_exact_at(&mut byte, p * 4096 + 2000).unwrap();
        f.write_all_at(&[byte[0] ^ 0x10], p * 4096 + 2000).unwrap();
    }
    drop(f);
    for read_only in [true, false] {
        let opened = Store::open(
            d,
            Config {
                read_only,
                ..cfg.clone()
            },
        );
        let Ok(s) = opened else { continue };
        let rows = s.read().and_then(|r| {
            let t = r.table("b")?;
            t.range(..)?.collect::<Result<Model, Error>>()
        });
        if let Ok(rows) = rows {
            println!(
                "read-only {read_only}: restored {}",
                s.recovery().doublewrite_restored
            );
            let old = rows.keys().filter(|k| k.starts_with(b"a")).count();
            assert!(
                rows == model,
                "read-only {read_only}: {} rows ({old} of the dropped table), {} acknowledged",
                rows.len(),
                model.len()
            );
        }
    }
}
