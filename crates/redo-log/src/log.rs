//! [`RedoLog`]: appending, group commit, the flusher thread, checkpoints, and opening with
//! recovery.
//!
//! Invariants of the wait path (`tests/wakeups.rs` breaks and checks them):
//!
//! 1. A thread blocked in `wait_flushed` sits in a wait queue keyed by its LSN with its own
//!    parker; it is taken out of the queue and woken in one step under `sig`, so it is woken
//!    exactly once: when `durable` (or `written`) covers its LSN, or on poison.
//! 2. No wakeup is lost: a waiter checks its LSN, the poison and the writer's generation under
//!    `sig` before it queues; `publish` and `io_released` take `sig` after changing them.
//! 3. A release of the writer that leaves threads queued hands the writer to the flusher
//!    thread (`want_*` holds what they need); switching that off strands them.

use crate::block::{payload_size, Geometry};
use crate::config::{Durability, LogConfig, LogFiles, TailPolicy};
use crate::error::{LogError, Result};
use crate::files::{parse_name, FileSource, LogFileSet};
use crate::header::{read_header, Slot, StaticHeader, HEADER_BYTES, HEADER_FILE, SLOT_BYTES};
use crate::record::{encode_group, Record, GROUP_HEADER};
use crate::ring::Ring;
use crate::scan::{scan, BlockSource, Event, ScanParams};
use crate::stats::{Counters, LogStats};
use crate::writer::{Failure, Writer};
use keel_io::{File, FileClass, FileSystem, IoError, OpenOptions, SyncMethod};
use keel_page::Lsn;
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread::{JoinHandle, Thread};
use std::time::Instant;

/// A complete group found by the recovery scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredGroup {
    /// LSN of the group's first byte.
    pub start_lsn: Lsn,
    /// LSN after the group (its commit LSN).
    pub end_lsn: Lsn,
    /// The records, in order.
    pub records: Vec<Record>,
}

/// What the recovery scan found when the log was opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The checkpoint LSN of the newest valid checkpoint slot.
    pub checkpoint_lsn: Lsn,
    /// Where the scan started (the start of the group that contains the checkpoint LSN, or the
    /// checkpoint LSN itself).
    pub scan_start_lsn: Lsn,
    /// Every complete group whose end LSN is after the checkpoint LSN, in LSN order.
    pub groups: Vec<RecoveredGroup>,
    /// Where new appends continue (the start of the block after the last one recovered).
    pub end_lsn: Lsn,
    /// Bytes of incomplete (or earlier abandoned) groups that were skipped.
    pub discarded_bytes: u64,
    /// Why bytes were discarded (`None` if none were).
    pub discard_reason: Option<String>,
    /// Why the scan stopped where it did (e.g. "block 12 ...: checksum mismatch").
    pub end_reason: String,
    /// This opening's incarnation number (1 for a new log).
    pub incarnation: u32,
    /// Durable log data given up because the open accepted a damaged block in the middle
    /// (`accept_loss` of [`RedoLog::open_mode`]): which block, why it was known durable, and
    /// where the recovered log ends. `None` when nothing durable was lost.
    pub log_loss: Option<String>,
}

/// Switches that disable safety checks on purpose, for the tests that show the checks matter.
/// Public only with the `test-switches` feature, which only this crate's dev-dependency
/// enables: outside tests every switch is off and nothing can turn one on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestSwitches {
    /// The recovery scan ignores checksums, block numbers and epochs (the tail check).
    pub skip_block_checks: bool,
    /// No blocks are kept free for write-ahead padding and the restart block, and padding is
    /// not clamped: writes may overwrite log the checkpoint still needs.
    pub no_space_reserve: bool,
    /// Appenders copy into the log buffer without waiting for room: bytes not yet written to
    /// the file may be overwritten.
    pub no_ring_wait: bool,
    /// Releasing the writer wakes only the threads it made durable, never a next leader: a
    /// thread that queued behind a sync that did not cover it may sleep until some other
    /// thread happens to lead (or forever).
    pub no_handoff: bool,
}

#[derive(Debug)]
struct Resv {
    end: u64,
    limit: u64,
}

#[derive(Debug, Default)]
struct Done {
    completed: u64,
    pending: BTreeMap<u64, u64>,
}

/// A blocked thread's wakeup: set once, by whoever removes the thread from its queue.
#[derive(Debug)]
struct Parker {
    woken: AtomicBool,
    thread: Thread,
    /// Threads this one wakes as soon as it runs (set before [`Parker::wake`]).
    chain: Mutex<Vec<Arc<Parker>>>,
}

impl Parker {
    fn new() -> Arc<Parker> {
        Arc::new(Parker {
            woken: AtomicBool::new(false),
            thread: std::thread::current(),
            chain: Mutex::new(Vec::new()),
        })
    }

    /// Wakes the thread (it must already be out of every queue, so this happens once).
    fn wake(&self) {
        self.woken.store(true, SeqCst);
        self.thread.unpark();
    }

    /// Blocks until [`Parker::wake`] (a leftover unpark token only costs one more check), then
    /// wakes the threads chained to this one.
    fn wait(&self) {
        while !self.woken.load(SeqCst) {
            std::thread::park();
        }
        let chain = std::mem::take(&mut *self.chain.lock());
        for p in chain {
            p.wake();
        }
    }

    /// Wakes all of `ps`: the first directly, the others through it, so the caller (the
    /// writer's owner, about to write and sync again) makes one wakeup call instead of many.
    fn wake_all(mut ps: Vec<Arc<Parker>>) {
        if ps.is_empty() {
            return;
        }
        let first = ps.swap_remove(0);
        *first.chain.lock() = ps;
        first.wake();
    }
}

/// Threads blocked until the log reaches an LSN, keyed by (LSN, ticket): sorted, so a sync
/// wakes exactly the prefix it made durable.
type WaitQueue = BTreeMap<(u64, u64), Arc<Parker>>;

/// Moves every entry of `q` with an LSN at or below `upto` into `out`.
fn take_upto(q: &mut WaitQueue, upto: u64, out: &mut Vec<Arc<Parker>>) {
    if q.is_empty() {
        return;
    }
    let rest = match upto.checked_add(1) {
        Some(next) => q.split_off(&(next, 0)),
        None => WaitQueue::new(),
    };
    out.extend(std::mem::replace(q, rest).into_values());
}

#[derive(Debug, Default)]
struct Sig {
    /// Futures: id → (lsn, only the write is awaited, waker).
    wakers: BTreeMap<u64, (u64, bool, Waker)>,
    next_id: u64,
    want_durable: u64,
    want_written: u64,
    space_wanted: bool,
    /// Threads in `wait_flushed` waiting for `durable`, and for `written`.
    durable_waiters: WaitQueue,
    written_waiters: WaitQueue,
    /// Threads sleeping on `completion_cv` (the writer's owner) and on `ring_cv` (appenders).
    completion_sleepers: usize,
    ring_sleepers: usize,
    shutdown: bool,
}

#[derive(Debug, Clone)]
struct PoisonInfo {
    path: PathBuf,
    op: &'static str,
    cause: Arc<IoError>,
}

#[derive(Debug)]
struct Ckpt {
    header: Arc<dyn File>,
    seq: u64,
    checkpoint_lsn: u64,
    scan_start: u64,
    incarnation: u32,
}

#[derive(Debug)]
pub(crate) struct Shared {
    dir: PathBuf,
    cfg: LogConfig,
    geo: Geometry,
    seal: bool,
    /// Blocks kept free for write-ahead padding and a restart block.
    reserve_blocks: u64,
    ring: Ring,
    resv: Mutex<Resv>,
    space_cv: Condvar,
    reserved: AtomicU64,
    done: Mutex<Done>,
    completed: AtomicU64,
    written: AtomicU64,
    durable: AtomicU64,
    sig: Mutex<Sig>,
    completion_cv: Condvar,
    ring_cv: Condvar,
    work_cv: Condvar,
    io: Mutex<Writer>,
    io_gen: AtomicU64,
    ckpt: Mutex<Ckpt>,
    checkpoint_lsn: AtomicU64,
    scan_start: AtomicU64,
    poisoned: AtomicBool,
    poison: Mutex<Option<PoisonInfo>>,
    closed: AtomicBool,
    stats: Counters,
    no_ring_wait: bool,
    no_handoff: bool,
}

/// The redo log: a shared handle (`Clone`, `Send`, `Sync`) that owns the flusher thread, which
/// stops when the last handle is dropped (after writing and syncing what is buffered).
#[derive(Clone, Debug)]
pub struct RedoLog {
    h: Arc<Handle>,
}

#[derive(Debug)]
struct Handle {
    sh: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

impl Handle {
    fn close_inner(&self) -> Result<()> {
        let sh = &self.sh;
        let was_closed = sh.closed.swap(true, SeqCst);
        // Appenders waiting for log space get `Closed`.
        drop(sh.resv.lock());
        sh.space_cv.notify_all();
        let r = if was_closed {
            Ok(())
        } else {
            let end = sh.reserved.load(SeqCst);
            sh.check_poison().and_then(|_| sh.wait_flushed(end, true))
        };
        sh.sig.lock().shutdown = true;
        sh.work_cv.notify_all();
        if let Some(t) = self.flusher.lock().take() {
            let _ = t.join();
        }
        r
    }
}

fn salt_now(dir: &Path) -> u32 {
    // SplitMix64 over time, process id and the directory name: distinct per creation.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t ^ (std::process::id() as u64).rotate_left(32);
    for b in dir.as_os_str().as_encoded_bytes() {
        x = x.wrapping_mul(31).wrapping_add(*b as u64);
    }
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z as u32) | 1
}

/// How far past a damaged block recovery looks for proof that it had been durable, at least
/// (the log buffer's size when that is larger): a torn tail is confined to what was written
/// after the last completed sync, which the log buffer bounds.
const LOOKAHEAD_BYTES: usize = 16 << 20;

/// How [`RedoLog::open_mode`] treats the log directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogOpenMode {
    /// Create a new, empty log if `dir` has none (what [`RedoLog::open`] does).
    CreateIfMissing,
    /// The log must exist: a missing header is an error, never a new log.
    Existing,
    /// The log must exist and nothing is written: scan only, no appends.
    ReadOnly,
}

/// Creates a new, empty log in `dir`.
fn create_log(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    cfg: &LogConfig,
    opts: OpenOptions,
) -> Result<()> {
    // Leftovers of an earlier log or an interrupted creation.
    for path in fs.list_dir(dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if parse_name(name).is_some() || name == "log.header.tmp" {
            fs.remove_file(&path)?;
        }
    }
    let (preallocated, files) = match cfg.files {
        LogFiles::Preallocated { files, .. } => (true, files),
        LogFiles::Growing { .. } => (false, 0),
    };
    let st = StaticHeader {
        block_size: cfg.block_size.bytes() as u32,
        preallocated,
        files,
        file_size: cfg.files.file_size(),
        salt: salt_now(dir),
        version: crate::header::VERSION,
    };
    let geo = geometry(&st);
    LogFileSet::create(fs, dir, &geo, opts, st.file_size)?;
    let tmp = dir.join("log.header.tmp");
    let h = fs.open(&tmp, &OpenOptions::new(FileClass::Log).create(true))?;
    let mut img = vec![0u8; HEADER_BYTES];
    img[..SLOT_BYTES].copy_from_slice(&st.encode());
    let slot = Slot {
        seq: 1,
        checkpoint_lsn: 0,
        scan_start: 0,
        incarnation: 0,
    };
    let o = Slot::offset(1) as usize;
    img[o..o + SLOT_BYTES].copy_from_slice(&slot.encode(st.salt));
    h.write_all_at(&img, 0)?;
    h.sync_all()?;
    drop(h);
    fs.rename(&tmp, &dir.join(HEADER_FILE))?;
    Ok(())
}

fn geometry(st: &StaticHeader) -> Geometry {
    let b = st.block_size as usize;
    Geometry {
        block: b,
        payload: payload_size(b),
        preallocated: st.preallocated,
        blocks_per_file: st.file_size / b as u64,
        files: st.files,
        salt: st.salt,
    }
}

fn mismatch(path: &Path, field: &'static str, stored: String, configured: String) -> LogError {
    LogError::ConfigMismatch {
        path: path.to_path_buf(),
        field,
        stored,
        configured,
    }
}

impl RedoLog {
    /// Creates the log in `dir` if it has none, otherwise opens it and runs the recovery scan.
    ///
    /// Every opening is a new incarnation: the scan's result is returned, the header records the
    /// incarnation, and appends continue at the start of the block after the last recovered one
    /// (that block is written at once with the restart flag, so a crash right after opening is
    /// recovered the same way).
    pub fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        config: LogConfig,
    ) -> Result<(RedoLog, Recovered)> {
        RedoLog::open_inner(
            fs,
            dir,
            config,
            TestSwitches::default(),
            LogOpenMode::CreateIfMissing,
            false,
        )
    }

    /// [`RedoLog::open`] with safety checks switched off on purpose (tests only: exists with
    /// the `test-switches` feature, which only this crate's own tests enable).
    ///
    /// # Errors
    /// As [`RedoLog::open`].
    #[cfg(any(test, feature = "test-switches"))]
    pub fn open_with(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        switches: TestSwitches,
    ) -> Result<(RedoLog, Recovered)> {
        RedoLog::open_inner(fs, dir, cfg, switches, LogOpenMode::CreateIfMissing, false)
    }

    /// Opens the log in `dir` the way `mode` says: [`LogOpenMode::CreateIfMissing`] is
    /// [`RedoLog::open`]; [`LogOpenMode::Existing`] refuses a directory without a log (a missing
    /// `log.header` is [`LogError::Missing`], never replaced by a new empty log);
    /// [`LogOpenMode::ReadOnly`] also writes nothing at all: it runs the recovery scan and returns
    /// a log that takes no appends ([`LogError::Closed`]) and has no flusher thread.
    ///
    /// `accept_loss`: when the recovery scan ends at a damaged block that had been durable (a
    /// corrupt middle, [`LogError::CorruptMiddle`]), accept the loss of everything after it
    /// instead of refusing; [`Recovered::log_loss`] then says what was given up. Never the
    /// default: it discards acknowledged commits.
    ///
    /// # Errors
    /// As [`RedoLog::open`], plus [`LogError::Missing`] when the log is absent and `mode` does
    /// not create it, and [`LogError::CorruptMiddle`] (unless `accept_loss`).
    pub fn open_mode(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        mode: LogOpenMode,
        accept_loss: bool,
    ) -> Result<(RedoLog, Recovered)> {
        RedoLog::open_inner(fs, dir, cfg, TestSwitches::default(), mode, accept_loss)
    }

    fn open_inner(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        switches: TestSwitches,
        mode: LogOpenMode,
        accept_loss: bool,
    ) -> Result<(RedoLog, Recovered)> {
        cfg.validate()?;
        let read_only = mode == LogOpenMode::ReadOnly;
        let hpath = dir.join(HEADER_FILE);
        if mode == LogOpenMode::CreateIfMissing {
            fs.create_dir_all(dir)?;
        } else if !fs.exists(&hpath)? {
            return Err(LogError::Missing {
                path: hpath,
                what: "the log header",
            });
        }
        let caps = fs.capabilities(dir)?;
        let b = cfg.block_size.bytes();
        if cfg.sync_method == SyncMethod::ODirect {
            let need = caps
                .logical_block_size
                .max(caps.direct_io.map(|d| d.offset).unwrap_or(0));
            if (b as u32) < need {
                return Err(LogError::BlockBelowDeviceBlock {
                    dir: dir.to_path_buf(),
                    block_size: b,
                    logical_block_size: need,
                });
            }
        }
        let atomic_unit = if caps.physical_block_size > 0 {
            caps.physical_block_size
        } else {
            caps.logical_block_size
        };
        // Growing logs are append-only: sealing the tail before each sync makes every durable
        // write extend the file (E4), instead of rewriting the tail block in place.
        let seal = !cfg.files.is_preallocated()
            || match cfg.tail_policy {
                TailPolicy::Auto => b as u32 > atomic_unit,
                TailPolicy::RewriteInPlace => false,
                TailPolicy::SealOnSync => true,
            };
        let opts = OpenOptions::new(FileClass::Log).for_sync_method(cfg.sync_method);
        if !fs.exists(&hpath)? {
            if mode != LogOpenMode::CreateIfMissing {
                return Err(LogError::Missing {
                    path: hpath,
                    what: "the log header",
                });
            }
            create_log(&fs, dir, &cfg, opts)?;
        }
        let header = fs.open(&hpath, &OpenOptions::new(FileClass::Log))?;
        let (st, slot) = read_header(&*header)?;
        if st.block_size as usize != b {
            return Err(mismatch(
                &hpath,
                "log block size",
                st.block_size.to_string(),
                b.to_string(),
            ));
        }
        let (pre, files) = match cfg.files {
            LogFiles::Preallocated { files, .. } => (true, files),
            LogFiles::Growing { .. } => (false, 0),
        };
        let mode = |p: bool| if p { "preallocated" } else { "growing" }.to_string();
        if st.preallocated != pre {
            return Err(mismatch(
                &hpath,
                "log files",
                mode(st.preallocated),
                mode(pre),
            ));
        }
        if st.file_size != cfg.files.file_size() {
            return Err(mismatch(
                &hpath,
                "log file size",
                st.file_size.to_string(),
                cfg.files.file_size().to_string(),
            ));
        }
        if st.files != files {
            return Err(mismatch(
                &hpath,
                "number of log files",
                st.files.to_string(),
                files.to_string(),
            ));
        }
        let geo = geometry(&st);
        let p = geo.payload as u64;
        let mut set = LogFileSet::open(fs.clone(), dir, geo, opts, st.file_size)?;

        // The recovery scan.
        let mut groups = Vec::new();
        let end = {
            let mut src = FileSource::new(&set);
            let params = ScanParams {
                geo,
                start: slot.scan_start,
                max_incarnation: slot.incarnation,
                verify: !switches.skip_block_checks,
                lookahead: (cfg.buffer_size.max(LOOKAHEAD_BYTES) / geo.payload) as u64,
            };
            scan(&mut src, &params, &mut |ev| {
                if let Event::Group {
                    start,
                    end,
                    records,
                } = ev
                {
                    if end > slot.checkpoint_lsn {
                        groups.push(RecoveredGroup {
                            start_lsn: Lsn(start),
                            end_lsn: Lsn(end),
                            records,
                        });
                    }
                }
                true
            })?
        };

        let log_loss = match &end.corrupt_middle {
            None => None,
            Some((block, evidence)) => {
                let (fi, off) = geo.location(*block);
                let path = set.path(fi);
                let lsn = Lsn(block.saturating_mul(p));
                if !accept_loss {
                    return Err(LogError::CorruptMiddle {
                        path,
                        block: *block,
                        offset: off,
                        lsn,
                        evidence: evidence.clone(),
                    });
                }
                let what = format!(
                    "block {block} ({} offset {off}, {lsn}) is damaged although {evidence}; everything from {} on was given up ({} complete groups recovered before it)",
                    path.display(),
                    Lsn(end.end),
                    groups.len()
                );
                tracing::warn!(loss = %what, "accepting the loss of durable log data");
                Some(what)
            }
        };

        // A new incarnation, recorded before anything of it is written.
        let incarnation =
            slot.incarnation
                .checked_add(1)
                .ok_or_else(|| LogError::CorruptHeader {
                    path: hpath.clone(),
                    reason: "incarnation counter exhausted".into(),
                })?;
        let seq = slot.seq + 1;
        let new_slot = Slot {
            seq,
            incarnation,
            ..slot
        };
        if !read_only {
            header.write_all_at(&new_slot.encode(st.salt), Slot::offset(seq))?;
            header.sync_data()?;
        }

        let scan_start_block = slot.scan_start / p;
        let m = end.next_block;
        let reserve_blocks = if switches.no_space_reserve {
            0
        } else if st.preallocated {
            let wab = if cfg.sync_method == SyncMethod::ODirect {
                1
            } else {
                (cfg.write_ahead_size / b) as u64
            };
            wab.max(1) + 1
        } else {
            0
        };
        if st.preallocated
            && !switches.no_space_reserve
            && m + reserve_blocks > scan_start_block + geo.lap_blocks() + 1
        {
            return Err(LogError::Corrupt {
                path: set.path(geo.location(m).0),
                lsn: Lsn(m * p),
                reason: format!(
                    "the log continues to block {m}, beyond the space the checkpoint at block {scan_start_block} allows"
                ),
            });
        }
        if !st.preallocated && !read_only {
            let (fi, off) = geo.location(m);
            set.truncate_after(fi, off)?;
            set.remove_before(geo.location(scan_start_block).0)?;
        }
        let write_ahead = if st.preallocated
            && cfg.sync_method != SyncMethod::ODirect
            && cfg.write_ahead_size > b
        {
            cfg.write_ahead_size as u64
        } else {
            0
        };
        let mut w = Writer::new(
            set,
            geo,
            cfg.sync_method,
            write_ahead,
            m,
            incarnation,
            scan_start_block,
        );
        w.unclamped_padding = switches.no_space_reserve;
        // Version 1 logs keep a durable lag of 0 (no claims), so that builds that read only
        // version 1 never meet a block they reject.
        w.claims_durable = st.version >= 2;
        let stats = Counters::default();
        let ring = Ring::new(cfg.buffer_size);
        // Write the (empty) restart block and sync it.
        if !read_only {
            w.emit(&ring, m * p, &stats)
                .map_err(|f| LogError::Io(f.err))?;
            w.sync(&stats).map_err(|f| LogError::Io(f.err))?;
        }

        let start = m * p;
        let limit = limit_for(&geo, slot.scan_start, reserve_blocks);
        let sh = Arc::new(Shared {
            dir: dir.to_path_buf(),
            seal,
            geo,
            reserve_blocks,
            ring,
            resv: Mutex::new(Resv { end: start, limit }),
            space_cv: Condvar::new(),
            reserved: AtomicU64::new(start),
            done: Mutex::new(Done {
                completed: start,
                pending: BTreeMap::new(),
            }),
            completed: AtomicU64::new(start),
            written: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            sig: Mutex::new(Sig::default()),
            completion_cv: Condvar::new(),
            ring_cv: Condvar::new(),
            work_cv: Condvar::new(),
            io: Mutex::new(w),
            io_gen: AtomicU64::new(0),
            ckpt: Mutex::new(Ckpt {
                header,
                seq,
                checkpoint_lsn: slot.checkpoint_lsn,
                scan_start: slot.scan_start,
                incarnation,
            }),
            checkpoint_lsn: AtomicU64::new(slot.checkpoint_lsn),
            scan_start: AtomicU64::new(slot.scan_start),
            poisoned: AtomicBool::new(false),
            poison: Mutex::new(None),
            closed: AtomicBool::new(false),
            stats,
            cfg,
            no_ring_wait: switches.no_ring_wait,
            no_handoff: switches.no_handoff,
        });
        let t = if read_only {
            // Takes no appends and never writes: no flusher.
            sh.closed.store(true, SeqCst);
            None
        } else {
            let sh2 = sh.clone();
            Some(
                std::thread::Builder::new()
                    .name("keel-log-flusher".into())
                    .spawn(move || flusher_main(sh2))
                    .map_err(LogError::Thread)?,
            )
        };
        let recovered = Recovered {
            checkpoint_lsn: Lsn(slot.checkpoint_lsn),
            scan_start_lsn: Lsn(slot.scan_start),
            groups,
            end_lsn: Lsn(start),
            discarded_bytes: end.discarded_bytes,
            discard_reason: if end.discards.is_empty() {
                None
            } else {
                Some(end.discards.join("; "))
            },
            end_reason: end.stop,
            incarnation,
            log_loss,
        };
        Ok((
            RedoLog {
                h: Arc::new(Handle {
                    sh,
                    flusher: Mutex::new(t),
                }),
            },
            recovered,
        ))
    }

    fn sh(&self) -> &Shared {
        &self.h.sh
    }

    /// Appends one group (one transaction) followed by its commit marker and returns the group's
    /// end LSN (its commit LSN): every page the group modifies takes this LSN as its page LSN.
    /// Waits (never fails) while the log buffer or the log space is full.
    pub fn append(&self, records: &[Record]) -> Result<Lsn> {
        self.append_range(records).map(|r| r.end)
    }

    /// [`RedoLog::append`], returning the group's start LSN as well. A page's oldest
    /// modification for checkpointing is the start LSN of the first group that changed it (or
    /// any LSN before it, such as [`RedoLog::end_lsn`] read before appending).
    pub fn append_range(&self, records: &[Record]) -> Result<Range<Lsn>> {
        let sh = self.sh();
        sh.check_usable()?;
        let mut buf = Vec::new();
        let len = encode_group(records, &mut buf).map_err(|bytes| LogError::GroupTooLarge {
            bytes,
            limit: u32::MAX as u64,
            why: "32-bit group length",
        })? as u64;
        if let Some(cap) = sh.max_group() {
            if len > cap {
                return Err(LogError::GroupTooLarge {
                    bytes: len,
                    limit: cap,
                    why: "log capacity",
                });
            }
        }
        let start = sh.reserve(len)?;
        sh.copy_in(start, &buf)?;
        Counters::add(&sh.stats.bytes_appended, len);
        Counters::add(&sh.stats.groups_appended, 1);
        Ok(Lsn(start)..Lsn(start + len))
    }

    /// Blocks until the log is durable up to `lsn` (or the log is poisoned). If no write is in
    /// progress and [`LogConfig::waiter_flush`] is set, the calling thread writes and syncs
    /// everything buffered itself, for every waiter; otherwise the flusher does. LSNs past the
    /// end are treated as the end.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        let sh = self.sh();
        let t0 = Instant::now();
        let r = sh.wait_flushed(lsn.0, true);
        Counters::add(&sh.stats.commit_waits, 1);
        Counters::add_time(&sh.stats.commit_wait_ns, t0.elapsed());
        r
    }

    /// A future that resolves when the log is durable up to `lsn`, at the same moment
    /// [`RedoLog::wait_durable`] would return; it never blocks the thread polling it (the
    /// flusher thread does the I/O), so it suits async runtimes such as tokio.
    pub fn durable(&self, lsn: Lsn) -> Durable {
        Durable {
            sh: self.h.sh.clone(),
            lsn: lsn.0,
            written_only: false,
            id: None,
        }
    }

    /// Forces write and sync up to at least `lsn` now (the WAL rule before a page write).
    pub fn flush_to(&self, lsn: Lsn) -> Result<()> {
        self.sh().wait_flushed(lsn.0, true)
    }

    /// Waits for what the configured [`Durability`] says a commit at `lsn` needs: `Sync`, durable;
    /// `Buffered`, written to the OS; `Lazy`, nothing (only errors are reported).
    pub fn wait_committed(&self, lsn: Lsn) -> Result<()> {
        let sh = self.sh();
        match sh.cfg.durability {
            Durability::Sync => self.wait_durable(lsn),
            Durability::Buffered => {
                let t0 = Instant::now();
                let r = sh.wait_flushed(lsn.0, false);
                Counters::add(&sh.stats.commit_waits, 1);
                Counters::add_time(&sh.stats.commit_wait_ns, t0.elapsed());
                r
            }
            Durability::Lazy => sh.check_poison(),
        }
    }

    /// [`RedoLog::wait_committed`] as a future.
    pub fn committed(&self, lsn: Lsn) -> Durable {
        let sh = &self.h.sh;
        let lsn = match sh.cfg.durability {
            Durability::Lazy => 0,
            _ => lsn.0,
        };
        Durable {
            sh: sh.clone(),
            lsn,
            written_only: sh.cfg.durability != Durability::Sync,
            id: None,
        }
    }

    /// The LSN up to which the log is durable.
    pub fn durable_lsn(&self) -> Lsn {
        Lsn(self.sh().durable.load(SeqCst))
    }

    /// The LSN up to which the log is written to the OS.
    pub fn written_lsn(&self) -> Lsn {
        Lsn(self.sh().written.load(SeqCst))
    }

    /// The LSN after the last appended group.
    pub fn end_lsn(&self) -> Lsn {
        Lsn(self.sh().reserved.load(SeqCst))
    }

    /// Records a checkpoint: redo before `lsn` is no longer needed — the caller guarantees that
    /// every page changed by a group ending at or before `lsn` is on disk. Recovery will return
    /// every group that ends after `lsn` (a group containing `lsn` included). The log is made
    /// durable up to `lsn`, the checkpoint is written to the alternate checksummed header slot and
    /// synced, then log space before the scan start becomes reusable (appenders waiting for
    /// space wake up). A checkpoint at or below the current one does nothing.
    pub fn checkpoint(&self, lsn: Lsn) -> Result<()> {
        self.sh().checkpoint(lsn.0)
    }

    /// The current checkpoint LSN.
    pub fn checkpoint_lsn(&self) -> Lsn {
        Lsn(self.sh().checkpoint_lsn.load(SeqCst))
    }

    /// Bytes of log between the checkpoint's scan start and the end (for a checkpointer's
    /// trigger).
    pub fn space_used(&self) -> u64 {
        let sh = self.sh();
        sh.reserved
            .load(SeqCst)
            .saturating_sub(sh.scan_start.load(SeqCst))
    }

    /// The most log bytes that can lie between the checkpoint and the end (`None` for growing
    /// files, which never fill).
    pub fn capacity(&self) -> Option<u64> {
        self.sh().capacity()
    }

    /// A copy of the counters.
    pub fn stats(&self) -> LogStats {
        self.sh().stats.snapshot()
    }

    /// Whether an earlier write or sync failed (every call now returns
    /// [`LogError::Poisoned`]).
    pub fn is_poisoned(&self) -> bool {
        self.sh().poisoned.load(SeqCst)
    }

    /// The tail policy in force (`Auto` resolved): whether partly filled tail blocks are sealed
    /// before a sync.
    pub fn seals_tail(&self) -> bool {
        self.sh().seal
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.sh().dir
    }

    /// The configuration the log was opened with.
    pub fn config(&self) -> &LogConfig {
        &self.sh().cfg
    }

    /// Writes and syncs everything appended, stops the flusher thread and refuses further
    /// appends ([`LogError::Closed`]). Also done when the last handle is dropped.
    pub fn close(&self) -> Result<()> {
        self.h.close_inner()
    }
}

fn limit_for(geo: &Geometry, scan_start: u64, reserve_blocks: u64) -> u64 {
    if !geo.preallocated {
        return u64::MAX;
    }
    let p = geo.payload as u64;
    (scan_start / p + geo.lap_blocks() + 1 - reserve_blocks) * p
}

/// Ring space an appender waits for before copying a piece (the first piece must hold the
/// whole group header).
const MIN_PIECE: u64 = 4096;

impl Shared {
    fn poison_info(&self) -> Option<PoisonInfo> {
        self.poison.lock().clone()
    }

    fn check_poison(&self) -> Result<()> {
        if self.poisoned.load(SeqCst) {
            if let Some(p) = self.poison_info() {
                return Err(LogError::Poisoned {
                    path: p.path,
                    op: p.op,
                    cause: p.cause,
                });
            }
        }
        Ok(())
    }

    fn check_usable(&self) -> Result<()> {
        self.check_poison()?;
        if self.closed.load(SeqCst) {
            return Err(LogError::Closed {
                dir: self.dir.clone(),
            });
        }
        Ok(())
    }

    fn poison_with(&self, f: Failure) -> LogError {
        let info = {
            let mut p = self.poison.lock();
            if p.is_none() {
                tracing::error!(path = %f.path.display(), op = f.op, error = %f.err, "redo log poisoned");
                *p = Some(PoisonInfo {
                    path: f.path,
                    op: f.op,
                    cause: Arc::new(f.err),
                });
            }
            p.clone()
        };
        self.poisoned.store(true, SeqCst);
        drop(self.resv.lock());
        self.space_cv.notify_all();
        self.publish();
        self.work_cv.notify_all();
        match info {
            Some(p) => LogError::Poisoned {
                path: p.path,
                op: p.op,
                cause: p.cause,
            },
            None => LogError::Closed {
                dir: self.dir.clone(),
            },
        }
    }

    fn capacity(&self) -> Option<u64> {
        if self.geo.preallocated {
            Some(
                (self.geo.lap_blocks().saturating_sub(self.reserve_blocks))
                    * self.geo.payload as u64,
            )
        } else {
            None
        }
    }

    fn max_group(&self) -> Option<u64> {
        self.capacity()
            .map(|c| c.saturating_sub(self.geo.payload as u64))
    }

    /// Reserves `len` bytes of LSN space, waiting for a checkpoint while the log is full.
    fn reserve(&self, len: u64) -> Result<u64> {
        let mut r = self.resv.lock();
        let mut waited = false;
        loop {
            self.check_usable()?;
            if r.end + len <= r.limit {
                let s = r.end;
                r.end += len;
                self.reserved.store(r.end, SeqCst);
                return Ok(s);
            }
            if !waited {
                waited = true;
                Counters::add(&self.stats.space_waits, 1);
            }
            self.space_cv.wait(&mut r);
        }
    }

    /// Copies a reserved group into the ring, piece by piece as room allows, publishing each
    /// piece's completion.
    fn copy_in(&self, start: u64, bytes: &[u8]) -> Result<()> {
        let size = self.ring.size();
        let len = bytes.len() as u64;
        let mut off = 0u64;
        while off < len {
            let pos = start + off;
            let room = if self.no_ring_wait {
                u64::MAX
            } else {
                (self.written.load(SeqCst) + size).saturating_sub(pos)
            };
            let need = (len - off).min(MIN_PIECE).max(if off == 0 {
                (GROUP_HEADER as u64).min(len)
            } else {
                1
            });
            if room < need {
                self.wait_ring(pos + need)?;
                continue;
            }
            let n = room.min(len - off);
            self.ring
                .write(pos, &bytes[off as usize..(off + n) as usize]);
            self.complete(pos, pos + n);
            off += n;
        }
        Ok(())
    }

    fn wait_ring(&self, need_end: u64) -> Result<()> {
        Counters::add(&self.stats.buffer_waits, 1);
        let size = self.ring.size();
        let mut g = self.sig.lock();
        g.space_wanted = true;
        self.work_cv.notify_all();
        g.ring_sleepers += 1;
        while self.written.load(SeqCst) + size < need_end && !self.poisoned.load(SeqCst) {
            self.ring_cv.wait(&mut g);
        }
        g.ring_sleepers -= 1;
        drop(g);
        self.check_poison()
    }

    fn complete(&self, s: u64, e: u64) {
        let c = {
            let mut d = self.done.lock();
            if s != d.completed {
                d.pending.insert(s, e);
                return;
            }
            d.completed = e;
            loop {
                let k = d.completed;
                match d.pending.remove(&k) {
                    Some(e2) => d.completed = e2,
                    None => break,
                }
            }
            d.completed
        };
        // Two appenders may get here out of order after releasing `done`: never move back.
        self.completed.fetch_max(c, SeqCst);
        let g = self.sig.lock();
        if g.completion_sleepers > 0 {
            self.completion_cv.notify_all();
        }
        let durable = self.durable.load(SeqCst);
        let written = self.written.load(SeqCst);
        if g.space_wanted
            || g.want_durable > durable
            || g.want_written > written
            || self.cfg.durability == Durability::Buffered
        {
            self.work_cv.notify_one();
        }
    }

    /// Wakes the blocked threads and futures whose LSN `written` / `durable` now covers (all
    /// of them on poison), each exactly once; the others stay queued.
    fn publish(&self) {
        self.publish_but(false)
    }

    /// [`Shared::publish`]; with `keep_durable_waiters`, threads waiting for `durable` are left
    /// for [`Shared::io_released`] (the writer's owner calls this right after a sync; they are
    /// woken with one chained wakeup once the writer is free again).
    fn publish_but(&self, keep_durable_waiters: bool) {
        let d = self.durable.load(SeqCst);
        let w = self.written.load(SeqCst);
        let poisoned = self.poisoned.load(SeqCst);
        let mut wake = Vec::new();
        let mut threads = Vec::new();
        {
            let mut g = self.sig.lock();
            if !g.wakers.is_empty() {
                g.wakers.retain(|_, (lsn, written_only, waker)| {
                    let ready = poisoned || if *written_only { w >= *lsn } else { d >= *lsn };
                    if ready {
                        wake.push(waker.clone());
                    }
                    !ready
                });
            }
            let (d, w) = if poisoned {
                (u64::MAX, u64::MAX)
            } else {
                (d, w)
            };
            if poisoned || !keep_durable_waiters {
                take_upto(&mut g.durable_waiters, d, &mut threads);
            }
            take_upto(&mut g.written_waiters, w, &mut threads);
            if g.ring_sleepers > 0 {
                self.ring_cv.notify_all();
            }
            if poisoned && g.completion_sleepers > 0 {
                self.completion_cv.notify_all();
            }
        }
        for p in threads {
            p.wake();
        }
        for w in wake {
            w.wake();
        }
    }

    /// Runs `f` with the writer locked; afterwards wakes the waiters it covered and hands the
    /// writer on if others wait (see [`Shared::io_released`]).
    fn with_io<R>(&self, f: impl FnOnce(&mut Writer) -> R) -> R {
        let r = {
            let mut g = self.io.lock();
            f(&mut g)
        };
        self.io_released();
        r
    }

    /// [`Shared::with_io`] if the writer is free now.
    fn try_with_io<R>(&self, f: impl FnOnce(&mut Writer) -> R) -> Option<R> {
        let r = {
            let mut g = self.io.try_lock()?;
            f(&mut g)
        };
        self.io_released();
        Some(r)
    }

    /// After the writer was released: bumps the generation (a waiter that failed to take the
    /// writer before this does not go to sleep), wakes the queued threads whose LSN is now
    /// durable, each once, and — with `waiter_flush`, if threads are still queued — hands the
    /// writer to the flusher thread (they recorded what they need in `want_*`). The flusher
    /// keeps syncing while waiters queue up behind its syncs, so under load no sleeping thread
    /// has to be woken before each sync; a single committer still leads itself. Every release
    /// either leaves the queue empty or has the flusher on its way, so no waiter is stranded.
    fn io_released(&self) {
        self.io_gen.fetch_add(1, SeqCst);
        let d = self.durable.load(SeqCst);
        let mut ready = Vec::new();
        {
            let mut g = self.sig.lock();
            take_upto(&mut g.durable_waiters, d, &mut ready);
            if self.cfg.waiter_flush
                && !self.no_handoff
                && !(g.durable_waiters.is_empty() && g.written_waiters.is_empty())
            {
                self.work_cv.notify_one();
            }
        }
        Parker::wake_all(ready);
    }

    /// Seals the tail before a sync (`SealOnSync`): the rest of a partly filled last block is
    /// reserved as a filler. Returns the reserved end.
    fn seal_tail(&self, io: &mut Writer) -> u64 {
        let p = self.geo.payload as u64;
        let mut r = self.resv.lock();
        let end = r.end;
        if end.is_multiple_of(p) {
            return end;
        }
        let f = p - end % p;
        r.end = end + f;
        self.reserved.store(r.end, SeqCst);
        drop(r);
        io.fillers.push_back((end, end + f));
        Counters::add(&self.stats.filler_bytes, f);
        self.complete(end, end + f);
        end + f
    }

    fn wait_completion(&self, beyond: u64) -> Result<()> {
        let mut g = self.sig.lock();
        g.completion_sleepers += 1;
        while self.completed.load(SeqCst) <= beyond && !self.poisoned.load(SeqCst) {
            self.completion_cv.wait(&mut g);
        }
        g.completion_sleepers -= 1;
        drop(g);
        self.check_poison()
    }

    /// Writes (and with `sync`, syncs) at least up to `want` and everything completed now.
    fn flush_locked(&self, io: &mut Writer, sync: bool, want: u64) -> Result<()> {
        self.check_poison()?;
        let mut target = want.max(self.completed.load(SeqCst));
        if sync && self.seal {
            target = target.max(self.seal_tail(io));
        }
        loop {
            let c = self.completed.load(SeqCst);
            let upto = c.min(target);
            if upto > io.w {
                if let Err(f) = io.emit(&self.ring, upto, &self.stats) {
                    return Err(self.poison_with(f));
                }
                self.written.store(io.w, SeqCst);
                self.publish();
            }
            if io.w >= target {
                break;
            }
            self.wait_completion(io.w)?;
        }
        if sync && io.w > io.durable {
            match io.sync(&self.stats) {
                Ok(n) => self.stats.record_commits(n),
                Err(f) => return Err(self.poison_with(f)),
            }
            self.durable.store(io.durable, SeqCst);
            // The threads now durable are woken when the writer is released.
            self.publish_but(true);
        }
        Ok(())
    }

    /// Waits until `lsn` is durable (`sync`) or written.
    ///
    /// With `waiter_flush`, a thread that finds the writer free leads: it writes and syncs
    /// everything completed. Otherwise it queues itself by LSN (recording it in `want_*` for
    /// the flusher thread, which the writer's owner wakes on release) and sleeps until a sync
    /// covers it; it is woken exactly once, by `io_released` or `publish`. Without
    /// `waiter_flush` it asks the flusher thread at once and sleeps until covered.
    fn wait_flushed(&self, lsn: u64, sync: bool) -> Result<()> {
        let lsn = lsn.min(self.reserved.load(SeqCst));
        let reached = |sh: &Shared| {
            if sync {
                sh.durable.load(SeqCst) >= lsn
            } else {
                sh.written.load(SeqCst) >= lsn
            }
        };
        let lead = self.cfg.waiter_flush;
        loop {
            if reached(self) {
                return Ok(());
            }
            self.check_poison()?;
            let gen = self.io_gen.load(SeqCst);
            if lead {
                let led = self.try_with_io(|w| -> Result<()> {
                    if reached(self) {
                        return Ok(());
                    }
                    if sync && !self.cfg.group_commit_delay.is_zero() {
                        std::thread::sleep(self.cfg.group_commit_delay);
                    }
                    self.flush_locked(w, sync, lsn)
                });
                if let Some(r) = led {
                    r?;
                    continue;
                }
                // Another thread is writing: optionally spin (yielding) for a while before
                // sleeping. With more threads than cores the spinning steals the CPU the
                // appenders need, so the default is not to.
                let spin = self.cfg.spin_before_sleep;
                if !spin.is_zero() {
                    let t0 = Instant::now();
                    while !reached(self)
                        && self.io_gen.load(SeqCst) == gen
                        && !self.poisoned.load(SeqCst)
                        && t0.elapsed() < spin
                    {
                        std::thread::yield_now();
                    }
                    if reached(self) || self.io_gen.load(SeqCst) != gen {
                        continue;
                    }
                }
            }
            let me = Parker::new();
            {
                let mut g = self.sig.lock();
                // Checked under the lock that `publish` and `io_released` take after moving
                // `durable` / `written` / the generation: none of them can be missed.
                if reached(self)
                    || self.poisoned.load(SeqCst)
                    || (lead && self.io_gen.load(SeqCst) != gen)
                {
                    continue;
                }
                // The flusher thread serves every queued waiter: asked now without
                // `waiter_flush`, else when the writer is released (`io_released`).
                if !(lead && self.no_handoff) {
                    if sync {
                        g.want_durable = g.want_durable.max(lsn);
                    } else {
                        g.want_written = g.want_written.max(lsn);
                    }
                }
                if !lead {
                    self.work_cv.notify_all();
                }
                let ticket = g.next_id;
                g.next_id += 1;
                let q = if sync {
                    &mut g.durable_waiters
                } else {
                    &mut g.written_waiters
                };
                q.insert((lsn, ticket), me.clone());
            }
            me.wait();
        }
    }

    fn checkpoint(&self, lsn: u64) -> Result<()> {
        self.check_usable()?;
        let end = self.reserved.load(SeqCst);
        if lsn > end {
            return Err(LogError::CheckpointBeyondEnd {
                lsn: Lsn(lsn),
                end: Lsn(end),
            });
        }
        let mut ck = self.ckpt.lock();
        if lsn <= ck.checkpoint_lsn {
            return Ok(());
        }
        self.wait_flushed(lsn, true)?;
        let floor = ck.scan_start;
        let scan_start = self.with_io(|w| self.boundary_at_or_before(w, lsn, floor))?;
        let slot = Slot {
            seq: ck.seq + 1,
            checkpoint_lsn: lsn,
            scan_start,
            incarnation: ck.incarnation,
        };
        let hdr = ck.header.clone();
        let salt = self.geo.salt;
        let res = hdr
            .write_all_at(&slot.encode(salt), Slot::offset(slot.seq))
            .map_err(|err| ("write", err))
            .and_then(|_| hdr.sync_data().map_err(|err| ("sync", err)));
        if let Err((op, err)) = res {
            return Err(self.poison_with(Failure {
                path: hdr.path().to_path_buf(),
                op,
                err,
            }));
        }
        ck.seq = slot.seq;
        ck.checkpoint_lsn = lsn;
        ck.scan_start = scan_start;
        self.checkpoint_lsn.store(lsn, SeqCst);
        self.scan_start.store(scan_start, SeqCst);
        Counters::add(&self.stats.checkpoints, 1);
        let p = self.geo.payload as u64;
        self.with_io(|w| {
            w.scan_start_block = scan_start / p;
            if self.geo.preallocated {
                Ok(())
            } else {
                w.files.remove_before(self.geo.location(scan_start / p).0)
            }
        })?;
        let mut r = self.resv.lock();
        r.limit = limit_for(&self.geo, scan_start, self.reserve_blocks);
        drop(r);
        self.space_cv.notify_all();
        Ok(())
    }

    /// The latest position ≤ `lsn` where a scan can start (a group or filler start, a restart
    /// block, or the end of the data), found by reading back to a block whose first-group field
    /// is ≤ `lsn` and scanning forward. `lsn` is durable.
    fn boundary_at_or_before(&self, io: &mut Writer, lsn: u64, floor: u64) -> Result<u64> {
        if lsn == io.w && io.next_boundary == io.w {
            return Ok(lsn);
        }
        let geo = self.geo;
        let p = geo.payload as u64;
        let last_written = match &io.tail {
            Some(t) => t.block,
            None => (io.w / p).saturating_sub(1),
        };
        let floor_block = floor / p;
        let mut b = (lsn / p).min(last_written);
        let mut raw = vec![0u8; geo.block];
        let start = {
            let mut src = FileSource::new(&io.files);
            loop {
                if b <= floor_block {
                    break floor;
                }
                let ok = src.read_block(b, &mut raw)?;
                let hdr = if ok {
                    crate::block::check_block(&raw, geo.salt, b, geo.epoch_of(b), true)
                        .map_err(|f| f.to_string())
                } else {
                    Err("missing".to_string())
                };
                let hdr = hdr.map_err(|why| LogError::Corrupt {
                    path: src.path_of(b),
                    lsn: Lsn(lsn),
                    reason: format!(
                        "durable block {b} ({}) fails verification: {why}",
                        src.describe(b)
                    ),
                })?;
                if hdr.restart && b * p <= lsn {
                    break b * p;
                }
                if let Some(o) = hdr.first_group {
                    if b * p + o as u64 <= lsn {
                        break b * p + o as u64;
                    }
                }
                b -= 1;
            }
        };
        let mut best = start;
        let mut src = FileSource::new(&io.files);
        let params = ScanParams {
            geo,
            start,
            max_incarnation: io.incarnation,
            verify: true,
            lookahead: 0,
        };
        scan(&mut src, &params, &mut |ev| match ev {
            Event::Boundary(x) if x <= lsn => {
                best = x;
                true
            }
            Event::Boundary(_) => false,
            Event::Group { .. } => true,
        })?;
        Ok(best)
    }
}

/// The flusher thread: writes and syncs on request (futures, waiters when `waiter_flush` is off,
/// appenders waiting for buffer room), on every completion in `Buffered` mode, and every
/// `flush_interval`.
fn flusher_main(sh: Arc<Shared>) {
    let interval = sh.cfg.flush_interval;
    let mut last_sync = Instant::now();
    loop {
        let (sync, want, exit) = {
            let mut g = sh.sig.lock();
            loop {
                let durable = sh.durable.load(SeqCst);
                let written = sh.written.load(SeqCst);
                let completed = sh.completed.load(SeqCst);
                if g.shutdown {
                    break (true, completed, true);
                }
                if sh.poisoned.load(SeqCst) {
                    sh.work_cv.wait(&mut g);
                    continue;
                }
                if g.want_durable > durable {
                    break (true, g.want_durable, false);
                }
                let due = last_sync.elapsed() >= interval;
                if due && completed > durable {
                    break (true, completed, false);
                }
                if due {
                    last_sync = Instant::now();
                }
                if g.space_wanted && completed > written {
                    g.space_wanted = false;
                    break (false, completed, false);
                }
                if g.want_written > written {
                    break (false, g.want_written, false);
                }
                if sh.cfg.durability == Durability::Buffered && completed > written {
                    break (false, completed, false);
                }
                sh.work_cv.wait_until(&mut g, last_sync + interval);
            }
        };
        if exit && sh.poisoned.load(SeqCst) {
            return;
        }
        if sync && !exit && !sh.cfg.group_commit_delay.is_zero() {
            std::thread::sleep(sh.cfg.group_commit_delay);
        }
        let want = want.min(sh.reserved.load(SeqCst));
        let _ = sh.with_io(|w| sh.flush_locked(w, sync, want));
        if sync {
            last_sync = Instant::now();
        }
        if exit {
            return;
        }
    }
}

/// A future resolving when the log is durable (or, for [`RedoLog::committed`] in `Buffered`
/// mode, written) up to an LSN. `'static`, `Send`; it never blocks: the flusher thread does the
/// I/O and wakes it.
#[derive(Debug)]
pub struct Durable {
    sh: Arc<Shared>,
    lsn: u64,
    written_only: bool,
    id: Option<u64>,
}

impl Future for Durable {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let sh = &this.sh;
        let lsn = this.lsn.min(sh.reserved.load(SeqCst));
        let reached = |sh: &Shared| {
            if this.written_only {
                sh.written.load(SeqCst) >= lsn
            } else {
                sh.durable.load(SeqCst) >= lsn
            }
        };
        if reached(sh) {
            return Poll::Ready(Ok(()));
        }
        if let Err(e) = sh.check_poison() {
            return Poll::Ready(Err(e));
        }
        let mut g = sh.sig.lock();
        if reached(sh) {
            return Poll::Ready(Ok(()));
        }
        if sh.poisoned.load(SeqCst) {
            drop(g);
            return Poll::Ready(sh.check_poison());
        }
        let id = match this.id {
            Some(id) => id,
            None => {
                let id = g.next_id;
                g.next_id += 1;
                this.id = Some(id);
                id
            }
        };
        g.wakers
            .insert(id, (lsn, this.written_only, cx.waker().clone()));
        if this.written_only {
            g.want_written = g.want_written.max(lsn);
        } else {
            g.want_durable = g.want_durable.max(lsn);
        }
        sh.work_cv.notify_all();
        Poll::Pending
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.sh.sig.lock().wakers.remove(&id);
        }
    }
}
