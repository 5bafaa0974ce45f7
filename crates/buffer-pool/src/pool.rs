//! The [`BufferPool`] type: the state every part of the pool shares, how a pool is built, and
//! its plain accessors.
//!
//! Answers: what a pool is made of. Each concern that works on this state has its own module
//! and keeps its own invariants there: `config` (settings and derived sizes), `residency`
//! (page table and pins), `free_list`, `eviction` (CLOCK), `prefetch`, `flush_list` (dirty
//! pages and write batches), `checkpoint` (the checkpoint-LSN rule), `optimistic` (latch-free
//! reads), `stats`, `knobs` (test-only), `cleaner`, `txn` and `recovery`.
//!
//! Invariants kept here: the frames are `page_size` apart in one arena that is 8-byte aligned
//! (optimistic readers read it as `AtomicU64` words) and that outlives them (the arena field is
//! declared, so dropped, last); every frame starts free, holding no page, and on the free list.

use crate::cleaner::CleanerCtl;
use crate::config::PoolConfig;
use crate::frame::Frame;
use crate::knobs::TestKnobs;
use crate::page_store::PageStore;
use crate::page_table::{Shard, SHARDS};
use crate::stats::{Counters, StripedCounter};
use crate::versions::Versions;
use crate::{PoolError, Result};
use keel_io::AlignedBuf;
use keel_page::{Lsn, PageHeader, PageId};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeSet;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Arc;

/// The buffer pool. `Send + Sync`; share it with `Arc` (the page cleaner needs an `Arc`).
///
/// See the crate documentation for the protocols and invariants.
pub struct BufferPool {
    pub(crate) cfg: PoolConfig,
    pub(crate) page_size: usize,
    pub(crate) store: Arc<dyn PageStore>,
    pub(crate) frames: Box<[Frame]>,
    /// The page table (module `residency`).
    pub(crate) table: Box<[Shard]>,
    /// Frame hints for optimistic reads: `hints[id & hint_mask]` is the frame that last held
    /// page `id` (or any frame: a hint is only a guess, checked against the frame's page id
    /// under its version). Module `optimistic`.
    pub(crate) hints: Box<[AtomicU32]>,
    pub(crate) hint_mask: usize,
    /// Address of frame 0's bytes (frames are `page_size` apart), for prefetching a page
    /// before its frame's line has arrived.
    pub(crate) arena_base: usize,
    /// Page hits of optimistic reads (added by callers in batches, see `add_optimistic_hits`).
    pub(crate) optimistic_hits: StripedCounter,
    /// Frames holding no page, free to claim (module `free_list`).
    pub(crate) free: Mutex<Vec<u32>>,
    /// `free`'s length, readable without its lock.
    pub(crate) free_len: AtomicUsize,
    /// The CLOCK hand (module `eviction`).
    pub(crate) hand: AtomicUsize,
    /// Dirty pages by (oldest modification, page, frame) (module `flush_list`).
    pub(crate) flush_list: Mutex<BTreeSet<(Lsn, PageId, u32)>>,
    /// Dirty pages that left the pool unwritten because a commit freed them, by (oldest
    /// modification, end of the freeing group): until that group is durable, the checkpoint
    /// stays at or below their oldest modification (module `checkpoint`).
    pub(crate) unwritten_frees: Mutex<BTreeSet<(Lsn, Lsn, PageId)>>,
    /// Pending page copies: which page waits for which to be written (module `copy_deps`).
    pub(crate) copy_deps: Mutex<crate::copy_deps::CopyDeps>,
    /// `copy_deps`' length, readable without its lock (a batch with none skips it).
    pub(crate) copy_deps_len: AtomicUsize,
    /// Whether write transactions may make page copies (`PageTxn::copy_page`): set by the
    /// owner of the pool when its log takes them and its store never leaves a torn page that
    /// recovery cannot repair on its own ([`BufferPool::set_page_copies`]).
    pub(crate) page_copies: std::sync::atomic::AtomicBool,
    /// The newest checkpoint horizon published: no checkpoint above it is ever written, and
    /// full-page-image decisions compare page LSNs with it (module `checkpoint`).
    pub(crate) horizon: AtomicU64,
    /// Full-page-writes mode: the newest checkpoint LSN `checkpoint_lsn` returned (it advances
    /// only when nothing older than the horizon is dirty).
    pub(crate) fpw_checkpoint: AtomicU64,
    /// Held shared by committers from reading the log's end to putting their pages on the flush
    /// list; exclusive while a checkpoint LSN is computed.
    pub(crate) decision: RwLock<()>,
    /// Held by a committer from its log append to its publish, so commits publish in the order
    /// of their LSNs (module `versions`, invariant 2: a snapshot at a commit must not exist
    /// before an earlier commit sealed its versions).
    pub(crate) publish_order: Mutex<()>,
    /// Frames held by uncommitted transactions.
    pub(crate) txn_pages: AtomicUsize,
    pub(crate) next_txn: AtomicU64,
    pub(crate) ctl: Mutex<CleanerCtl>,
    pub(crate) cv: Condvar,
    /// A commit that leaves the pool past its dirty target wakes the cleaner (module
    /// `cleaner`): set while a running cleaner has found nothing to do, and from its start to
    /// its first look.
    pub(crate) cleaner_backoff: AtomicBool,
    pub(crate) c: Counters,
    /// Page-sized buffers flushers copy pages into (module `flush_list`).
    pub(crate) bufs: Mutex<Vec<AlignedBuf>>,
    pub(crate) max_txn_pages: usize,
    pub(crate) free_reserve: usize,
    /// Pages per write batch: `cleaner_batch_pages`, at most a quarter of the frames (a batch
    /// stays pinned while it is written).
    pub(crate) batch_pages: usize,
    #[doc(hidden)]
    pub(crate) knobs: TestKnobs,
    /// The fork generation the pool was made in (`keel_io::os::fork`): in a forked child every
    /// page request and every drop that would take a lock is refused or skipped
    /// ([`refuse_forked`](Self::refuse_forked)).
    pub(crate) born: u64,
    /// Old page versions and registered snapshots (module `versions`).
    pub(crate) versions: Arc<Versions>,
    /// Test hook: runs in `unpin` right after a frame's last pin went, before its page id is
    /// read (to interleave an evictor there deterministically).
    #[cfg(test)]
    #[allow(clippy::type_complexity)]
    pub(crate) after_last_unpin: Mutex<Option<Box<dyn Fn(u32) + Send + Sync>>>,
    // Declared last: dropped after the frames that point into it.
    _arena: Arc<AlignedBuf>,
    /// Faults the arena in ahead of the frames in use (module `prefault`).
    pub(crate) prefault: crate::prefault::Prefault,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("frames", &self.frames.len())
            .field("page_size", &self.page_size)
            .field("dirty", &self.dirty_pages())
            .finish()
    }
}

impl BufferPool {
    /// The knobs that break invariants on purpose (tests only: exists with the `test-knobs`
    /// feature, which only this crate's own dev-dependency enables).
    #[cfg(any(test, feature = "test-knobs"))]
    pub fn knobs(&self) -> &TestKnobs {
        &self.knobs
    }

    /// Whether this process is a fork of the one that made the pool.
    pub fn forked(&self) -> bool {
        keel_io::os::fork::forked_since(self.born)
    }

    /// Refuses a request in a forked child, before any latch or lock is taken: a lock another
    /// thread of the parent held at the fork stays held in the child for good (a child reading
    /// through a transaction made before the fork hung on a frame latch: a tester).
    ///
    /// # Errors
    ///
    /// [`PoolError::Store`] holding `IoError::Forked` (naming the data file) in a forked child.
    #[inline]
    pub fn refuse_forked(&self) -> Result<()> {
        if self.forked() {
            return Err(PoolError::Store(Box::new(keel_io::IoError::Forked {
                path: self.store.data_path().to_path_buf(),
            })));
        }
        Ok(())
    }

    /// A pool of `config.pool_bytes / page_size` frames over `store`.
    ///
    /// Errors if the store's page size differs from the config's, the pool would have fewer
    /// than 8 frames, or its memory cannot be allocated.
    pub fn new(config: PoolConfig, store: Arc<dyn PageStore>) -> Result<BufferPool> {
        let page_size = config.page_size.bytes();
        let sizing = config.sizing(store.page_size())?;
        let n = sizing.frames;
        let bytes = n.checked_mul(page_size).ok_or_else(|| {
            PoolError::Config(format!(
                "{n} frames of {page_size} bytes overflow the address space"
            ))
        })?;
        // A pool the machine cannot map is refused, not an abort of the process.
        let mut arena = AlignedBuf::try_huge(bytes).ok_or_else(|| {
            PoolError::Config(format!(
                "cannot allocate {bytes} bytes for the pool's {n} frames (more than this machine can map: lower pool_size)"
            ))
        })?;
        let base = arena.as_mut_ptr();
        let arena = Arc::new(arena);
        if base.is_null() || !(base as usize).is_multiple_of(8) || !page_size.is_multiple_of(8) {
            // Frame::optimistic_words relies on 8-byte aligned frames.
            return Err(PoolError::Config(
                "the pool's arena is not 8-byte aligned".into(),
            ));
        }
        // The frames' bookkeeping is allocated fallibly too (the arena may be mapped lazily
        // where the bookkeeping cannot be had).
        let no_memory = |what: &str| {
            PoolError::Config(format!(
                "cannot allocate the {what} of the pool's {n} frames (lower pool_size)"
            ))
        };
        let hint_len = (2 * n).next_power_of_two();
        let mut hints: Vec<AtomicU32> = Vec::new();
        hints
            .try_reserve_exact(hint_len)
            .map_err(|_| no_memory("hints"))?;
        hints.extend((0..hint_len).map(|_| AtomicU32::new(u32::MAX)));
        let hints = hints.into_boxed_slice();
        let mut frames: Vec<Frame> = Vec::new();
        frames
            .try_reserve_exact(n)
            .map_err(|_| no_memory("descriptors"))?;
        frames.extend((0..n).map(|i| {
            let p = NonNull::new(base.wrapping_add(i * page_size)).unwrap_or(NonNull::dangling());
            Frame::new(p, page_size)
        }));
        let frames = frames.into_boxed_slice();
        let table: Box<[Shard]> = (0..SHARDS).map(|_| Shard::default()).collect();
        Ok(BufferPool {
            page_size,
            store,
            frames,
            table,
            hints,
            hint_mask: hint_len - 1,
            arena_base: base as usize,
            optimistic_hits: StripedCounter::default(),
            free: Mutex::new((0..n as u32).rev().collect()),
            free_len: AtomicUsize::new(n),
            hand: AtomicUsize::new(0),
            flush_list: Mutex::new(BTreeSet::new()),
            unwritten_frees: Mutex::new(BTreeSet::new()),
            copy_deps: Mutex::new(crate::copy_deps::CopyDeps::default()),
            copy_deps_len: AtomicUsize::new(0),
            page_copies: std::sync::atomic::AtomicBool::new(false),
            horizon: AtomicU64::new(0),
            fpw_checkpoint: AtomicU64::new(0),
            decision: RwLock::new(()),
            publish_order: Mutex::new(()),
            txn_pages: AtomicUsize::new(0),
            next_txn: AtomicU64::new(1),
            ctl: Mutex::new(CleanerCtl::default()),
            cv: Condvar::new(),
            cleaner_backoff: AtomicBool::new(false),
            c: Counters::default(),
            bufs: Mutex::new(Vec::new()),
            max_txn_pages: sizing.max_txn_pages,
            free_reserve: sizing.free_reserve,
            batch_pages: sizing.batch_pages,
            knobs: TestKnobs::default(),
            born: keel_io::os::fork::generation(),
            versions: Arc::new(Versions::new(config.version_budget)),
            #[cfg(test)]
            after_last_unpin: Mutex::new(None),
            cfg: config,
            prefault: crate::prefault::Prefault::new(arena.clone()),
            _arena: arena,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The store pages are read from and written to.
    pub fn store(&self) -> &Arc<dyn PageStore> {
        &self.store
    }

    /// The most pages one write transaction may hold.
    pub fn max_txn_pages(&self) -> usize {
        self.max_txn_pages
    }

    /// The least `pool_bytes` of a pool like this one (its page size and transaction share)
    /// that lets one transaction hold `pages` pages ([`PoolConfig::pool_bytes_for_txn`]).
    pub fn pool_bytes_for_txn(&self, pages: usize) -> usize {
        self.cfg.pool_bytes_for_txn(pages)
    }

    /// The page LSN in a frame's header.
    pub(crate) fn header_lsn(bytes: &[u8]) -> Lsn {
        PageHeader::read(bytes).map(|h| h.lsn).unwrap_or(Lsn::ZERO)
    }
}
