//! [`RedoLog`]: the log's shared state and its public handle. What the log does is split by
//! question into the files under `log/`:
//!
//! | file | question |
//! | --- | --- |
//! | `log/open.rs` | opening: create a new log, or read the header, scan and recover |
//! | `log/append.rs` | appending: reserve log space, copy a group into the ring buffer, mark it complete |
//! | `log/group_commit.rs` | group commit: who writes and syncs, who waits, how the writer is handed on (state diagram there) |
//! | `log/checkpoint.rs` | checkpoints: writing a checkpoint slot, freeing log space |
//! | `log/flusher.rs` | the flusher thread and the `Durable` future |
//!
//! # The shared state ([`Shared`])
//!
//! LSNs only grow, and `durable <= written <= completed <= reserved` always (asserted where they
//! move):
//! - `reserved` (under `resv`): the end of the space handed out to appenders;
//! - `completed` (under `done`): the end of the gap-free prefix of groups fully copied into the
//!   ring buffer (`done.pending` holds completed groups after a gap);
//! - `written`: how far the ring has been written to the files; `durable`: how far synced.
//!   Both move only under the writer lock `io` and are published by `publish`;
//! - `sig` (a mutex) holds everything waiters need: the wait queues, futures' wakers, `want_*`
//!   for the flusher thread and the sleeper counts; `publish` and `io_released` take it after
//!   moving an LSN, so a waiter that checked under it cannot miss a wakeup;
//! - `io` (a mutex) is the writer: the file set, the write position and the sync state;
//!   `io_gen` counts its releases;
//! - `ckpt` (a mutex) the checkpoint slots; `checkpoint_lsn` and `scan_start` mirror it for
//!   lock-free reads;
//! - `poisoned` / `poison`: set once by the first failed write or sync, never cleared.
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

mod append;
mod checkpoint;
mod flusher;
mod group_commit;
mod open;

use append::limit_for;
use flusher::flusher_main;
pub use flusher::Durable;
pub(crate) use open::salt_now;
pub use open::{LogOpenMode, Recovered, RecoveredGroup};

use crate::block::Geometry;
use crate::config::{Durability, LogConfig, LogFiles, TailPolicy};
use crate::error::{LogError, Result};
use crate::files::{parse_name, FileSource, LogFileSet};
use crate::header::{read_header, Slot, StaticHeader, HEADER_BYTES, HEADER_FILE, SLOT_BYTES};
use crate::log_writer::{Failure, Writer};
use crate::record::{encode_group_as, Encoding, Record, GROUP_HEADER};
use crate::ring::Ring;
use crate::scan::{scan, BlockSource, Event, ScanParams};
use crate::stats::{Counters, LogStats};
use keel_io::{File, FileClass, FileSystem, OpenOptions, Poison, PoisonCause, SyncMethod};
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
    /// The writer writes any distance past the durable end without syncing (no
    /// [`UNSYNCED_MAX`] cap): a damaged durable block's proof may then lie past the recovery's
    /// look-ahead, and the damage is taken for a torn tail.
    pub no_unsynced_cap: bool,
}

/// How far the log is ever written past its durable end (a larger write syncs first and goes
/// on in steps). The recovery scan relies on it: a block that was durable is followed, within
/// this distance of the first write after the sync that covered it, by a block claiming it
/// durable, and it looks `LOOKAHEAD_BYTES` (twice this) past a damaged
/// block for that claim — a bound that must not depend on the settings of the opening that
/// wrote the log (test `corrupt_middle.rs`
/// `a_damaged_block_far_before_its_sync_is_refused_whatever_the_buffer`).
pub(crate) const UNSYNCED_MAX: u64 = 8 << 20;

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
    /// Wakers of futures now ready, taken out of `wakers` and woken once no lock of the log is
    /// held ([`Shared::wake_ready`]): waking (or dropping) a waker runs the executor's code,
    /// which may drop the last handle of the log — its teardown then runs on this thread, and
    /// must find the writer free (test `wakeups.rs`
    /// `a_waker_that_drops_the_last_handle_on_the_flusher_thread_neither_hangs_nor_panics`).
    ready: Vec<Waker>,
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
    /// The flusher sleeps with no deadline: everything completed is durable, so nothing is due
    /// until an append completes, which then wakes it (`complete`).
    flusher_parked: bool,
    shutdown: bool,
}

/// The checkpoint in force (held for a whole checkpoint: checkpoints run one at a time).
#[derive(Debug)]
struct Ckpt {
    checkpoint_lsn: u64,
    scan_start: u64,
}

/// The header's checkpoint slots: the file and the slot last written (or to be written by
/// `start`). Every slot write — the start's, a checkpoint's, a growing log's new newest file —
/// goes through [`Shared::write_slot`] under this lock, the innermost of the log's locks (taken
/// with the writer held, and after a checkpoint's writer calls), so the slots alternate.
#[derive(Debug)]
struct Slots {
    header: Arc<dyn File>,
    last: Slot,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    /// The fork generation the log was opened in: a commit's future polled or dropped in a
    /// forked child (no flusher there, the log's locks maybe held for good by threads of the
    /// parent) resolves with `IoError::Forked` and takes no lock.
    pub(crate) born: u64,
    /// How groups are encoded: compact from log format version 3 on (`record.rs`).
    encoding: Encoding,
    /// Whether groups may hold `PageCopy` records (log format version 4 on).
    page_copies: bool,
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
    slots: Mutex<Slots>,
    checkpoint_lsn: AtomicU64,
    scan_start: AtomicU64,
    poison: Poison,
    closed: AtomicBool,
    stats: Counters,
    no_ring_wait: bool,
    no_handoff: bool,
    /// [`UNSYNCED_MAX`], or unbounded under the `no_unsynced_cap` test switch.
    unsynced_max: u64,
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
    /// What [`RedoLog::start`] writes, until it has (`None` once started, and for a read-only
    /// log).
    pending: Mutex<Option<PendingStart>>,
}

/// The writes that start an opened log (module `open`): the header slot recording the new
/// incarnation, a growing log's files to cut, and the restart block.
#[derive(Debug)]
struct PendingStart {
    /// Growing logs: (file, length) to cut the newest file to, removing later files, and the
    /// first file to keep.
    cut: Option<(u64, u64, u64)>,
    /// LSN of the restart block.
    restart_at: u64,
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
            // The last handle may drop on the flusher itself (a future's waker run there): it
            // then exits when it returns to its loop.
            keel_io::join_unless_current(t);
        }
        r
    }
}

/// The most a thread's encoding scratch buffer keeps between appends.
const SCRATCH_KEEP: usize = 16 << 20;

thread_local! {
    /// Each appending thread's buffer for encoding a group (see `RedoLog::append_range`).
    static ENCODE_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl RedoLog {
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
        if !sh.page_copies {
            if let Some(r) = records
                .iter()
                .find(|r| matches!(r, Record::PageCopy { .. }))
            {
                return Err(LogError::InvalidConfig {
                    reason: format!(
                        "{r:?} needs log format version 4; this log (in {}) is older: a build that reads only its version could not replay it",
                        sh.dir.display()
                    ),
                });
            }
        }
        // The encoding goes to this thread's scratch buffer, kept between appends: a fresh
        // buffer per group cost a big transaction its page faults again on every commit (the
        // allocator returns large freed blocks to the system).
        ENCODE_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                buf.clear();
                let r = self.append_encoded(records, &mut buf);
                if buf.capacity() > SCRATCH_KEEP {
                    *buf = Vec::new();
                }
                r
            }
            Err(_) => self.append_encoded(records, &mut Vec::new()),
        })
    }

    /// Encodes `records` into `buf` (empty) and appends them as one group.
    fn append_encoded(&self, records: &[Record], buf: &mut Vec<u8>) -> Result<Range<Lsn>> {
        let sh = self.sh();
        let len =
            encode_group_as(records, buf, sh.encoding).map_err(|bytes| LogError::GroupTooLarge {
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
        sh.copy_in(start, buf)?;
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

    /// Makes the redo a recovery scanned durable before anything is built on it: every log file
    /// is synced. A process that died (killed, not a power loss) leaves its unsynced log writes
    /// in the page cache, where the next open's scan reads them as the log; that open then
    /// writes pages carrying their LSNs (a replay that evicts, the recovery's flush) and records
    /// a checkpoint past them, and the write-ahead rule holds only if those log writes are
    /// durable first — else a power loss during the recovery leaves pages ahead of the durable
    /// log, and every later open refuses the store (test `crash.rs`
    /// `a_power_loss_during_the_recovery_after_a_process_crash_loses_nothing_it_showed`: 22 of
    /// 200 cases did). PostgreSQL syncs its data directory before crash recovery for the same
    /// reason (`recovery_init_sync_method`). The recovered blocks are first written again as
    /// they read (the same bytes: a file's contents do not change), so that redo a failed sync
    /// left readable but not durable is written by this sync or makes it fail: the scan read
    /// the device (the files' cached pages are dropped when they open, `LogFileSet::open`:
    /// after a failed sync the page cache holds, clean, blocks the device never got, and on
    /// ext4 a rewrite through those pages never reaches the disk), and what the device returns
    /// may still sit in its volatile cache, whose flush failed. A read-write open calls it
    /// before the replay, before the log starts.
    ///
    /// # Errors
    /// A sync failed ([`LogError::Io`]); the log is poisoned (a failed sync is never retried
    /// as if it had worked).
    pub fn sync_recovered(&self) -> Result<()> {
        let sh = self.sh();
        let p = sh.geo.payload as u64;
        let first = sh.ckpt.lock().scan_start / p;
        let end = sh.resv.lock().end.div_ceil(p);
        let w = sh.io.lock();
        // The recovered blocks written again before the sync: they may be what a failed sync
        // left readable but not durable, which a sync alone would report durable (a failed
        // sync is never taken as having worked: test `crash.rs`
        // `a_reopen_after_a_failed_sync_makes_what_it_recovered_durable`).
        let rewritten = w.files.rewrite_blocks(first, end).map(|_| ());
        let synced = rewritten.and_then(|()| w.files.sync_all());
        drop(w);
        match synced {
            Ok(n) => {
                crate::stats::Counters::add(&sh.stats.syncs, n);
                Ok(())
            }
            Err((path, err)) => Err(sh.poison_with(crate::log_writer::Failure {
                path,
                op: "sync",
                err,
            })),
        }
    }

    /// The log's salt: random at creation, mixed into every block checksum; the store's
    /// identity for the files beside the log (the doublewrite area records it).
    pub fn salt(&self) -> u32 {
        self.sh().geo.salt
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

    /// Records in the header that the log had been made durable at least up to `lsn`: what a
    /// data page carrying `lsn` proves by the write-ahead rule when the log no longer reaches
    /// it (a log file put back from an older copy, a store copied while it ran). Every later
    /// open then refuses, the scan ending short of the record, until the log is put back or
    /// the loss is accepted; without the record, new commits reused the lost LSNs, and once
    /// past them such a page read as valid data — a lost transaction half applied (a tester).
    /// Nothing for a log that is not started (an open still deciding writes nothing) or is
    /// read-only (`Ok(false)`), or when the header records as much already (`Ok(true)`, as
    /// when it records it now).
    ///
    /// # Errors
    /// The header's write or sync failed ([`LogError::Io`]); the log is poisoned.
    pub fn record_durable_at_least(&self, lsn: Lsn) -> Result<bool> {
        if self.h.flusher.lock().is_none() {
            return Ok(false);
        }
        let sh = self.sh();
        if sh.slots.lock().last.durable_lsn < Some(lsn.0) {
            sh.write_slot(|s| s.durable_lsn = s.durable_lsn.max(Some(lsn.0)))?;
        }
        Ok(true)
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
        self.sh().poison.is_poisoned()
    }

    /// What poisoned the log (its first failed write or sync), if it is poisoned.
    pub fn poison_cause(&self) -> Option<PoisonCause> {
        self.sh().poison.cause().cloned()
    }

    /// The tail policy in force (`Auto` resolved): whether partly filled tail blocks are sealed
    /// before a sync.
    pub fn seals_tail(&self) -> bool {
        self.sh().seal
    }

    /// Whether groups may hold [`Record::PageCopy`] (log format version 4 and later; an older
    /// log refuses them at append, so that the builds that read it can still replay it).
    pub fn accepts_page_copies(&self) -> bool {
        self.sh().page_copies
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

impl Shared {
    fn check_poison(&self) -> Result<()> {
        match self.poison.cause() {
            Some(cause) => Err(LogError::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
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

    /// Poisons the log with `f` (the first failure is kept), wakes everyone who waits so they
    /// see it, and returns the poison error (with the first cause).
    fn poison_with(&self, f: Failure) -> LogError {
        let cause = self.poison.poison(PoisonCause::new(f.op, f.path, f.err));
        drop(self.resv.lock());
        self.space_cv.notify_all();
        self.publish();
        self.work_cv.notify_all();
        // Whoever holds the writer wakes the futures when it lets go (`io_released`); if
        // nobody does, now.
        if !self.io.is_locked() {
            self.wake_ready();
        }
        LogError::Poisoned { cause }
    }

    /// Asserts `durable <= written <= completed <= reserved`. Each only grows and each pair holds
    /// at every instant, so loading them in this order gives a consistent check without a lock.
    fn assert_lsn_order(&self) {
        assert_lsn_order(
            self.durable.load(SeqCst),
            self.written.load(SeqCst),
            self.completed.load(SeqCst),
            self.reserved.load(SeqCst),
        );
    }
}

/// The log's LSN order (cheap, always on; see the module doc).
fn assert_lsn_order(durable: u64, written: u64, completed: u64, reserved: u64) {
    assert!(
        durable <= written && written <= completed && completed <= reserved,
        "invariant: durable {durable} <= written {written} <= completed {completed} <= reserved {reserved}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_order_holds_for_ordered_lsns() {
        assert_lsn_order(0, 0, 0, 0);
        assert_lsn_order(4096, 8192, 8192, 12000);
    }

    #[test]
    #[should_panic(expected = "invariant: durable")]
    fn lsn_order_trips_when_durable_passes_written() {
        assert_lsn_order(8192, 4096, 8192, 8192);
    }

    #[test]
    #[should_panic(expected = "invariant: durable")]
    fn lsn_order_trips_when_completed_passes_reserved() {
        assert_lsn_order(0, 0, 9000, 8192);
    }
}
