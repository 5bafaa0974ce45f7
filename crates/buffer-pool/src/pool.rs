//! The pool: configuration, frames, the page table, CLOCK eviction, the flush list, page
//! reads, flushing, checkpoint support and statistics.

use crate::frame::{Frame, NO_PAGE};
use crate::guard::{PageReadGuard, PinGuard};
use crate::store::{PageOut, PageStore, RedoSink};
use crate::table::{shard_of, Shard, SHARDS};
use crate::{PoolError, Result};
use keel_io::AlignedBuf;
use keel_page::{Lsn, PageHeader, PageId, PageSize, PageState};
use parking_lot::{Condvar, Mutex, RwLock};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Buffer pool settings (serde; every field has a default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// Page size of the data file.
    pub page_size: PageSize,
    /// Pool size in bytes; the pool has `pool_bytes / page_size` frames (at least 8).
    pub pool_bytes: usize,
    /// Clean free frames the page cleaner keeps in reserve (0: frames / 32, between 2 and 1024).
    pub free_reserve: usize,
    /// Pages per page-cleaner write batch.
    pub cleaner_batch_pages: usize,
    /// The cleaner writes the oldest dirty pages while more than this percentage of the frames
    /// is dirty (so the checkpoint can advance).
    pub dirty_target_pct: u8,
    /// How often the cleaner wakes up when nobody wakes it, in milliseconds.
    pub cleaner_interval_ms: u64,
    /// The most pages one write transaction may hold, in percent of the frames (no-steal: they
    /// stay in memory until commit).
    pub max_txn_pct: u8,
    /// When every frame is pinned, how long (milliseconds) a page request waits for pins that
    /// are not held by transactions (readers, loads, writes in progress) to go away before it
    /// fails with [`PoolError::NoFreeFrame`].
    pub frame_wait_ms: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            page_size: PageSize::K16,
            pool_bytes: 64 << 20,
            free_reserve: 0,
            cleaner_batch_pages: 64,
            dirty_target_pct: 50,
            cleaner_interval_ms: 20,
            max_txn_pct: 75,
            frame_wait_ms: 5000,
        }
    }
}

/// Pool statistics (serde). Counters count since the pool was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStats {
    /// Frames in the pool.
    pub frames: u64,
    /// Frames on the free list.
    pub free_frames: u64,
    /// Pages with committed changes not yet on disk (the flush list's length).
    pub dirty_pages: u64,
    /// Page lookups that found the page resident.
    pub hits: u64,
    /// Page lookups that had to read the page.
    pub misses: u64,
    /// Pages read from the store (misses, prefetch, recovery).
    pub pages_read: u64,
    /// Pages evicted (clean pages dropped to reuse their frame).
    pub evictions: u64,
    /// `prefetch` calls.
    pub prefetch_calls: u64,
    /// Pages read by prefetch batches.
    pub prefetch_pages: u64,
    /// Page-cleaner wake-ups.
    pub cleaner_rounds: u64,
    /// Batches the cleaner wrote to refill the free reserve (cold dirty pages).
    pub cleaner_lru_batches: u64,
    /// Pages in those batches.
    pub cleaner_lru_pages: u64,
    /// Clean cold frames the cleaner moved to the free list.
    pub cleaner_evictions: u64,
    /// Batches of oldest dirty pages written (by the cleaner or `flush_up_to`).
    pub flush_list_batches: u64,
    /// Pages in those batches.
    pub flush_list_pages: u64,
    /// Single pages written by a user thread that found no clean frame (the slow path).
    pub single_page_flushes: u64,
    /// Every page written, by any path.
    pub pages_written: u64,
    /// Of those, pages handed to the writer as rebuildable from redo (init-on-flush).
    pub pages_written_rebuildable: u64,
    /// Page write batches that failed.
    pub write_errors: u64,
    /// Page-cleaner rounds that ended in an error.
    pub cleaner_errors: u64,
    /// Committed write transactions.
    pub commits: u64,
    /// Aborted write transactions.
    pub aborts: u64,
    /// Transactions refused because they grew too large for the pool.
    pub txn_too_large: u64,
    /// Full page images logged (full-page-writes mode).
    pub full_page_images: u64,
    /// Bytes of those images.
    pub full_page_image_bytes: u64,
    /// Recovery: groups replayed.
    pub redo_groups: u64,
    /// Recovery: page records applied.
    pub redo_records_applied: u64,
    /// Recovery: page records skipped (page LSN already at or past the group).
    pub redo_records_skipped: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub pages_read: AtomicU64,
    pub evictions: AtomicU64,
    pub prefetch_calls: AtomicU64,
    pub prefetch_pages: AtomicU64,
    pub cleaner_rounds: AtomicU64,
    pub cleaner_lru_batches: AtomicU64,
    pub cleaner_lru_pages: AtomicU64,
    pub cleaner_evictions: AtomicU64,
    pub flush_list_batches: AtomicU64,
    pub flush_list_pages: AtomicU64,
    pub single_page_flushes: AtomicU64,
    pub pages_written: AtomicU64,
    pub pages_written_rebuildable: AtomicU64,
    pub write_errors: AtomicU64,
    pub cleaner_errors: AtomicU64,
    pub commits: AtomicU64,
    pub aborts: AtomicU64,
    pub txn_too_large: AtomicU64,
    pub full_page_images: AtomicU64,
    pub full_page_image_bytes: AtomicU64,
    pub redo_groups: AtomicU64,
    pub redo_records_applied: AtomicU64,
    pub redo_records_skipped: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Why a batch of pages is written (selects counters and latch behaviour).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlushKind {
    /// Cleaner refilling the free reserve: skip latched pages.
    Lru,
    /// Oldest pages for the checkpoint; `wait` = block on latches.
    FlushList { wait: bool },
    /// A user thread that found no clean frame.
    Single,
}

/// What one flush batch did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlushOutcome {
    pub written: usize,
    /// Skipped: owned by an uncommitted transaction.
    pub owned: usize,
    /// Skipped: latched, or being written by another flusher.
    pub busy: usize,
}

/// Page-cleaner control block.
#[derive(Default)]
pub(crate) struct CleanerCtl {
    pub stop: bool,
    pub wake: bool,
    pub running: bool,
    pub last_error: Option<String>,
}

/// Knobs that break the pool's invariants on purpose, for the tests that show the crash tests
/// catch it. Reachable only with the `test-knobs` feature, which only this crate's own
/// dev-dependency enables; without it every knob reads as off at compile time
/// ([`TestKnobs::on`]), so a release build has no knob that can disable an invariant.
#[derive(Default)]
pub struct TestKnobs {
    /// `checkpoint_lsn` ignores dirty pages and returns the log's end (breaks docs/design.md
    /// invariant 3).
    pub checkpoint_overreport: AtomicBool,
    /// Transactions never log full page images (breaks full-page-writes protection).
    pub skip_full_page_images: AtomicBool,
    /// Every page is handed to the writer as rebuildable from redo (breaks init-on-flush).
    pub claim_all_rebuildable: AtomicBool,
    /// `read_optimistic` does not re-check the frame's version after the read (breaks the
    /// seqlock validation: torn or replaced pages are returned as if read consistently).
    pub skip_optimistic_validation: AtomicBool,
    /// The last unpin of a frame without a page frees it without taking it first (breaks the
    /// frame ownership rule of `free_if_orphan`).
    pub free_without_taking: AtomicBool,
    /// Full-page-writes mode: `checkpoint_lsn` returns the oldest dirty page's LSN even when it
    /// is below the horizon (breaks the rule that a checkpoint never passes the last image of a
    /// page still to be written).
    pub fpw_checkpoint_passes_images: AtomicBool,
}

impl TestKnobs {
    /// Whether `knob` is set: always false (and compiled away) outside tests.
    #[inline(always)]
    pub(crate) fn on(knob: &AtomicBool) -> bool {
        cfg!(any(test, feature = "test-knobs")) && knob.load(Ordering::Relaxed)
    }
}

/// What [`BufferPool::read_optimistic`] validated: a frame and its version. Hand it to
/// [`BufferPool::is_unchanged`] to check later that the page read has not changed since
/// (optimistic lock coupling: a parent re-validated after its child was read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptimisticToken {
    frame: u32,
    version: u64,
}

impl OptimisticToken {
    /// The token as one integer (for layers that carry it opaquely).
    pub fn to_bits(self) -> u128 {
        (u128::from(self.frame) << 64) | u128::from(self.version)
    }

    /// The token from [`to_bits`](Self::to_bits). Any value is safe to check: one that names
    /// no frame is never valid.
    pub fn from_bits(bits: u128) -> OptimisticToken {
        OptimisticToken {
            frame: u32::try_from(bits >> 64).unwrap_or(u32::MAX),
            version: bits as u64,
        }
    }
}

/// Cache lines at the start of a page that `read_optimistic` prefetches (1 KiB: the header
/// and a B-tree leaf's slot array).
const OPTIMISTIC_PREFETCH_LINES: usize = 16;

/// Asks the CPU to start loading the cache line at address `addr` (a hint: never blocks, never
/// faults, whatever the address).
#[inline(always)]
fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` has no architectural effect and cannot fault on any address; it
    // is `unsafe` only because it is a `#[target_feature(enable = "sse")]` function, and SSE
    // is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// A counter alone on its cache line.
#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

/// What `prefetch` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchReport {
    /// Distinct pages asked for.
    pub requested: usize,
    /// Already resident.
    pub resident: usize,
    /// Read in this call.
    pub loaded: usize,
    /// Not loaded: unwritten, corrupt or unreadable (a later `read` reports why).
    pub failed: usize,
    /// Not loaded: no frame could be freed for them.
    pub no_frame: usize,
}

/// The buffer pool. `Send + Sync`; share it with `Arc` (the page cleaner needs an `Arc`).
///
/// See the crate documentation for the protocols and invariants.
pub struct BufferPool {
    pub(crate) cfg: PoolConfig,
    pub(crate) page_size: usize,
    pub(crate) store: Arc<dyn PageStore>,
    pub(crate) frames: Box<[Frame]>,
    pub(crate) table: Box<[Shard]>,
    /// Frame hints for optimistic reads: `hints[id & hint_mask]` is the frame that last held
    /// page `id` (or any frame: a hint is only a guess, checked against the frame's page id
    /// under its version).
    hints: Box<[AtomicU32]>,
    hint_mask: usize,
    /// Address of frame 0's bytes (frames are `page_size` apart), for prefetching a page
    /// before its frame's line has arrived.
    arena_base: usize,
    /// Page hits of optimistic reads (added by callers in batches, see `add_optimistic_hits`).
    optimistic_hits: PaddedCounter,
    pub(crate) free: Mutex<Vec<u32>>,
    pub(crate) free_len: AtomicUsize,
    hand: AtomicUsize,
    /// Dirty pages by (oldest modification, page, frame).
    pub(crate) flush_list: Mutex<BTreeSet<(Lsn, PageId, u32)>>,
    /// The newest checkpoint horizon published: no checkpoint above it is ever written, and
    /// full-page-image decisions compare page LSNs with it.
    pub(crate) horizon: AtomicU64,
    /// Full-page-writes mode: the newest checkpoint LSN `checkpoint_lsn` returned (it advances
    /// only when nothing older than the horizon is dirty).
    fpw_checkpoint: AtomicU64,
    /// Held shared by committers from reading the log's end to putting their pages on the flush
    /// list; exclusive while a checkpoint LSN is computed.
    pub(crate) decision: RwLock<()>,
    /// Frames held by uncommitted transactions.
    pub(crate) txn_pages: AtomicUsize,
    pub(crate) next_txn: AtomicU64,
    pub(crate) ctl: Mutex<CleanerCtl>,
    pub(crate) cv: Condvar,
    pub(crate) c: Counters,
    bufs: Mutex<Vec<AlignedBuf>>,
    pub(crate) max_txn_pages: usize,
    pub(crate) free_reserve: usize,
    /// Pages per write batch: `cleaner_batch_pages`, at most a quarter of the frames (a batch
    /// stays pinned while it is written).
    pub(crate) batch_pages: usize,
    #[doc(hidden)]
    pub(crate) knobs: TestKnobs,
    /// Test hook: runs in `unpin` right after a frame's last pin went, before its page id is
    /// read (to interleave an evictor there deterministically).
    #[cfg(test)]
    #[allow(clippy::type_complexity)]
    pub(crate) after_last_unpin: Mutex<Option<Box<dyn Fn(u32) + Send + Sync>>>,
    // Declared last: dropped after the frames that point into it.
    _arena: AlignedBuf,
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

    /// A pool of `config.pool_bytes / page_size` frames over `store`.
    ///
    /// Errors if the store's page size differs from the config's or the pool would have fewer
    /// than 8 frames.
    pub fn new(config: PoolConfig, store: Arc<dyn PageStore>) -> Result<BufferPool> {
        let page_size = config.page_size.bytes();
        if store.page_size() != config.page_size {
            return Err(PoolError::Config(format!(
                "pool page size {} differs from the store's {}",
                config.page_size,
                store.page_size()
            )));
        }
        let n = config.pool_bytes / page_size;
        if n < 8 {
            return Err(PoolError::Config(format!(
                "pool_bytes {} holds {n} pages of {}; at least 8 are needed",
                config.pool_bytes, config.page_size
            )));
        }
        if n > u32::MAX as usize / 2 {
            return Err(PoolError::Config(format!("{n} frames are too many")));
        }
        if config.cleaner_batch_pages == 0 || config.max_txn_pct == 0 || config.max_txn_pct > 100 {
            return Err(PoolError::Config(
                "cleaner_batch_pages must be > 0 and max_txn_pct in 1..=100".into(),
            ));
        }
        let mut arena = AlignedBuf::huge(n * page_size);
        let base = arena.as_mut_ptr();
        if base.is_null() || !(base as usize).is_multiple_of(8) || !page_size.is_multiple_of(8) {
            // Frame::optimistic_words relies on 8-byte aligned frames.
            return Err(PoolError::Config(
                "the pool's arena is not 8-byte aligned".into(),
            ));
        }
        let hint_len = (2 * n).next_power_of_two();
        let hints: Box<[AtomicU32]> = (0..hint_len).map(|_| AtomicU32::new(u32::MAX)).collect();
        let frames: Box<[Frame]> = (0..n)
            .map(|i| {
                let p =
                    NonNull::new(base.wrapping_add(i * page_size)).unwrap_or(NonNull::dangling());
                Frame::new(p, page_size)
            })
            .collect();
        let table: Box<[Shard]> = (0..SHARDS).map(|_| Shard::default()).collect();
        let free_reserve = if config.free_reserve == 0 {
            (n / 32).clamp(2, 1024)
        } else {
            config.free_reserve.min(n / 2)
        };
        let max_txn_pages = (n * config.max_txn_pct as usize / 100).max(1);
        Ok(BufferPool {
            page_size,
            store,
            frames,
            table,
            hints,
            hint_mask: hint_len - 1,
            arena_base: base as usize,
            optimistic_hits: PaddedCounter::default(),
            free: Mutex::new((0..n as u32).rev().collect()),
            free_len: AtomicUsize::new(n),
            hand: AtomicUsize::new(0),
            flush_list: Mutex::new(BTreeSet::new()),
            horizon: AtomicU64::new(0),
            fpw_checkpoint: AtomicU64::new(0),
            decision: RwLock::new(()),
            txn_pages: AtomicUsize::new(0),
            next_txn: AtomicU64::new(1),
            ctl: Mutex::new(CleanerCtl::default()),
            cv: Condvar::new(),
            c: Counters::default(),
            bufs: Mutex::new(Vec::new()),
            max_txn_pages,
            free_reserve,
            batch_pages: config.cleaner_batch_pages.min(n / 4).max(1),
            knobs: TestKnobs::default(),
            #[cfg(test)]
            after_last_unpin: Mutex::new(None),
            cfg: config,
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

    /// Reads page `id` (from the pool, or from the store through the page writer, checksum
    /// verified) and returns it latched shared. The pin and the latch last as long as the guard.
    ///
    /// Errors: [`PoolError::Corruption`] for a page failing verification, [`PoolError::Unwritten`]
    /// for a page never written, [`PoolError::NoFreeFrame`] when no frame can be freed.
    pub fn read(&self, id: PageId) -> Result<PageReadGuard<'_>> {
        loop {
            let f = self.fix(id)?;
            let frame = &self.frames[f as usize];
            let pin = PinGuard::new(self, f);
            let latch = frame.shared();
            if frame.valid.load(Ordering::Acquire) && frame.page_id.load(Ordering::Relaxed) == id.0
            {
                self.set_hint(id, f);
                return Ok(PageReadGuard::new(id, latch, pin));
            }
            // The load this reader waited for failed: retry (and see its error ourselves).
        }
    }

    /// Optimistic read of a resident page: no pin, no latch, no page-table lock — only loads.
    /// Finds the frame through a hint table, reads its version (must be even: no exclusive
    /// holder), checks that the frame holds page `id`, runs `f` on the frame's bytes as aligned
    /// little-endian words, and returns `f`'s result only if the version is unchanged after it
    /// (a seqlock; see the `frame` module invariants). `None`: the page is not resident under its
    /// hint, is latched exclusive, or changed during the read — use [`read`](Self::read).
    ///
    /// The words may change while `f` runs: `f` must load them with `Ordering::Relaxed`,
    /// bounds-check everything it decodes (garbage may be read before the validation fails),
    /// must terminate on any bytes, and must not act on what it read (its result is discarded
    /// unless validated). Does not count a page hit: callers add their validated reads with
    /// [`add_optimistic_hits`](Self::add_optimistic_hits) (one counter update per operation
    /// instead of one per page).
    #[inline]
    pub fn read_optimistic<R>(
        &self,
        id: PageId,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, OptimisticToken)> {
        let hint = self.hints[id.0 as usize & self.hint_mask].load(Ordering::Relaxed);
        let fr = self.frames.get(hint as usize)?;
        // Start loading the page's first lines (header, slot array) in parallel with the
        // frame's line: the page is usually the slower of the two.
        let page = self.arena_base + hint as usize * self.page_size;
        for line in 0..(self.page_size / 64).min(OPTIMISTIC_PREFETCH_LINES) {
            prefetch(page + line * 64);
        }
        let v = fr.version();
        if v & 1 != 0
            || fr.page_id.load(Ordering::Acquire) != id.0
            || !fr.valid.load(Ordering::Acquire)
        {
            return None;
        }
        let r = f(fr.optimistic_words());
        if !fr.version_is(v) && !TestKnobs::on(&self.knobs.skip_optimistic_validation) {
            return None;
        }
        if !fr.referenced.load(Ordering::Relaxed) {
            fr.referenced.store(true, Ordering::Relaxed);
        }
        Some((
            r,
            OptimisticToken {
                frame: hint,
                version: v,
            },
        ))
    }

    /// Whether the page read under `token` is unchanged since (same frame version).
    #[inline]
    pub fn is_unchanged(&self, token: OptimisticToken) -> bool {
        self.frames
            .get(token.frame as usize)
            .is_some_and(|fr| fr.version_is(token.version))
            || TestKnobs::on(&self.knobs.skip_optimistic_validation)
    }

    /// Counts `n` page hits of validated optimistic reads in the pool's statistics.
    pub fn add_optimistic_hits(&self, n: u64) {
        if n > 0 {
            self.optimistic_hits.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Records that frame `f` holds page `id` for optimistic readers (a store only if the
    /// hint differs, so a hot hint's cache line stays shared).
    #[inline]
    fn set_hint(&self, id: PageId, f: u32) {
        let h = &self.hints[id.0 as usize & self.hint_mask];
        if h.load(Ordering::Relaxed) != f {
            h.store(f, Ordering::Relaxed);
        }
    }

    /// Whether page `id` is resident (no I/O, no pin).
    pub fn contains(&self, id: PageId) -> bool {
        self.table[shard_of(id.0)].map.read().contains_key(&id.0)
    }

    /// Pins page `id` if it is resident (counts a hit).
    #[inline]
    pub(crate) fn lookup_pin(&self, id: PageId) -> Option<u32> {
        let shard = &self.table[shard_of(id.0)];
        let map = shard.map.read();
        let f = *map.get(&id.0)?;
        self.frames[f as usize].pin.fetch_add(1, Ordering::Acquire);
        drop(map);
        shard.hits.fetch_add(1, Ordering::Relaxed);
        let fr = &self.frames[f as usize];
        if !fr.referenced.load(Ordering::Relaxed) {
            fr.referenced.store(true, Ordering::Relaxed);
        }
        Some(f)
    }

    /// Pins page `id`, reading it if needed. The frame may turn out invalid (a concurrent load
    /// failed): callers check `valid` under the latch and retry.
    pub(crate) fn fix(&self, id: PageId) -> Result<u32> {
        if id.0 == NO_PAGE {
            return Err(PoolError::Config(format!("{id} is reserved")));
        }
        if let Some(f) = self.lookup_pin(id) {
            return Ok(f);
        }
        self.table[shard_of(id.0)]
            .misses
            .fetch_add(1, Ordering::Relaxed);
        self.load(id)
    }

    /// Unpins frame `f`. A frame that holds no page and loses its last pin goes to the free list.
    #[inline]
    pub(crate) fn unpin(&self, f: u32) {
        let fr = &self.frames[f as usize];
        if fr.pin.fetch_sub(1, Ordering::Release) == 1 {
            #[cfg(test)]
            if let Some(hook) = &*self.after_last_unpin.lock() {
                hook(f);
            }
            if fr.page_id.load(Ordering::Acquire) == NO_PAGE {
                self.free_if_orphan(f);
            }
        }
    }

    /// The last pin of frame `f` went while it held no page: free it, but only after taking it
    /// (pin 0 → 1). Once the pin reached 0 an evictor may have claimed the frame (it holds a pin
    /// then, and the page id reads `NO_PAGE` until it maps the frame to its new page) — freeing
    /// it then would hand one frame to two pages, and a page-table entry would point at a frame
    /// holding another page (readers of it would retry forever). Test:
    /// `a_last_unpin_never_frees_a_frame_an_evictor_took`.
    #[cold]
    fn free_if_orphan(&self, f: u32) {
        let fr = &self.frames[f as usize];
        if TestKnobs::on(&self.knobs.free_without_taking) {
            self.push_free(f);
            return;
        }
        if fr
            .pin
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        if fr.page_id.load(Ordering::Acquire) != NO_PAGE {
            // Claimed, mapped and released again meanwhile: a resident page, not ours.
            fr.pin.fetch_sub(1, Ordering::Release);
            return;
        }
        fr.pin.store(0, Ordering::Release);
        self.push_free(f);
    }

    fn push_free(&self, f: u32) {
        let fr = &self.frames[f as usize];
        fr.valid.store(false, Ordering::Relaxed);
        fr.referenced.store(false, Ordering::Relaxed);
        *fr.meta.lock() = Default::default();
        let mut free = self.free.lock();
        free.push(f);
        self.free_len.store(free.len(), Ordering::Relaxed);
    }

    /// Pops a free frame and pins it (pin 0 → 1).
    fn pop_free(&self) -> Option<u32> {
        if self.free_len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut free = self.free.lock();
        let f = free.pop()?;
        self.free_len.store(free.len(), Ordering::Relaxed);
        drop(free);
        self.frames[f as usize].pin.store(1, Ordering::Release);
        Some(f)
    }

    /// Evicts clean, unpinned frame `f` holding `id`; on success the caller owns it (pin 1,
    /// no page).
    pub(crate) fn try_evict(&self, f: u32, id: PageId) -> bool {
        let fr = &self.frames[f as usize];
        let mut map = self.table[shard_of(id.0)].map.write();
        if fr.page_id.load(Ordering::Relaxed) != id.0 || fr.dirty.load(Ordering::Acquire) {
            return false;
        }
        if fr
            .pin
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Pin 0 under the exclusive shard lock: nobody can pin it, and dirty can only be set by
        // a pinned transaction, so the frame is clean and ours.
        if fr.dirty.load(Ordering::Acquire) || map.get(&id.0) != Some(&f) {
            fr.pin.store(0, Ordering::Release);
            return false;
        }
        map.remove(&id.0);
        fr.page_id.store(NO_PAGE, Ordering::Release);
        fr.valid.store(false, Ordering::Relaxed);
        fr.bump_identity();
        drop(map);
        *fr.meta.lock() = Default::default();
        bump(&self.c.evictions, 1);
        true
    }

    /// Gets a frame for page `for_page`: the free list, else CLOCK, else (slow path) writes one
    /// cold dirty page itself. Returns the frame pinned once, holding no page.
    pub(crate) fn claim_frame(&self, for_page: PageId) -> Result<u32> {
        if let Some(f) = self.pop_free() {
            if self.free_len.load(Ordering::Relaxed) < self.free_reserve / 2 {
                self.wake_cleaner();
            }
            return Ok(f);
        }
        self.wake_cleaner();
        let n = self.frames.len();
        let started = std::time::Instant::now();
        let mut round = 0u32;
        loop {
            round += 1;
            let mut dirty_victim: Option<(u32, PageId)> = None;
            for _ in 0..2 * n {
                let f = (self.hand.fetch_add(1, Ordering::Relaxed) % n) as u32;
                let fr = &self.frames[f as usize];
                if fr.pin.load(Ordering::Relaxed) != 0 {
                    continue;
                }
                let pid = fr.page_id.load(Ordering::Relaxed);
                if pid == NO_PAGE {
                    continue;
                }
                if fr.referenced.load(Ordering::Relaxed) {
                    fr.referenced.store(false, Ordering::Relaxed);
                    continue;
                }
                if fr.dirty.load(Ordering::Relaxed) {
                    if dirty_victim.is_none()
                        && !fr.flushing.load(Ordering::Relaxed)
                        && !fr.owned.load(Ordering::Relaxed)
                    {
                        dirty_victim = Some((f, PageId(pid)));
                    }
                    continue;
                }
                if self.try_evict(f, PageId(pid)) {
                    return Ok(f);
                }
            }
            if let Some(f) = self.pop_free() {
                return Ok(f);
            }
            if let Some((f, pid)) = dirty_victim {
                // Slow path: no clean frame anywhere; write one cold dirty page ourselves.
                let out = self.flush_pages(&[pid], FlushKind::Single)?;
                if out.written > 0 && self.try_evict(f, pid) {
                    return Ok(f);
                }
            } else {
                std::thread::yield_now();
            }
            if round < 4 {
                continue;
            }
            // Every frame is pinned or dirty. Pins held by transactions stay until they end;
            // others (readers, flushes in progress, loads) are transient: wait for those, for a
            // while.
            let pinned = self
                .frames
                .iter()
                .filter(|f| f.pin.load(Ordering::Relaxed) != 0)
                .count();
            let txn_pages = self.txn_pages.load(Ordering::Relaxed);
            if pinned <= txn_pages
                || started.elapsed() > Duration::from_millis(self.cfg.frame_wait_ms)
            {
                return Err(PoolError::NoFreeFrame {
                    page_id: for_page,
                    frames: n,
                    pinned,
                    txn_pages,
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Maps claimed frame `f` (latched exclusive by the caller) to `id`, unless `id` is
    /// resident already: then returns that frame pinned and releases `f`.
    pub(crate) fn map_claimed(&self, f: u32, id: PageId) -> Option<u32> {
        let mut map = self.table[shard_of(id.0)].map.write();
        if let Some(&g) = map.get(&id.0) {
            self.frames[g as usize].pin.fetch_add(1, Ordering::Acquire);
            return Some(g);
        }
        let fr = &self.frames[f as usize];
        fr.valid.store(false, Ordering::Relaxed);
        fr.page_id.store(id.0, Ordering::Release);
        fr.bump_identity();
        map.insert(id.0, f);
        drop(map);
        self.set_hint(id, f);
        None
    }

    /// Waits until no flusher is writing frame `f`.
    pub(crate) fn wait_not_flushing(&self, f: u32) {
        let fr = &self.frames[f as usize];
        while fr.meta.lock().flushing {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Removes frame `f`'s mapping of `id` (if it is still there) and marks it as holding no
    /// page; its last unpin returns it to the free list. Drops its dirty state.
    ///
    /// If a flusher is writing the frame, waits until that write has completed: the page id
    /// may later be written again from another frame (a freed page re-created), and two writes
    /// of one page must never be in flight together — the older could land last. (The flusher
    /// does not need the frame's latch to finish, so callers may hold it.)
    pub(crate) fn unmap(&self, f: u32, id: PageId) {
        let fr = &self.frames[f as usize];
        {
            let mut m = fr.meta.lock();
            while m.flushing {
                drop(m);
                std::thread::sleep(Duration::from_micros(50));
                m = fr.meta.lock();
            }
            if m.dirty {
                self.flush_list.lock().remove(&(m.oldest, id, f));
            }
            *m = Default::default();
            fr.dirty.store(false, Ordering::Release);
            fr.owned.store(false, Ordering::Relaxed);
        }
        let mut map = self.table[shard_of(id.0)].map.write();
        if map.get(&id.0) == Some(&f) {
            map.remove(&id.0);
        }
        fr.valid.store(false, Ordering::Relaxed);
        fr.page_id.store(NO_PAGE, Ordering::Release);
        fr.bump_identity();
    }

    /// Reads page `id` into a new frame. Returns the frame pinned.
    fn load(&self, id: PageId) -> Result<u32> {
        let f = self.claim_frame(id)?;
        let fr = &self.frames[f as usize];
        let mut x = fr.exclusive();
        if let Some(g) = self.map_claimed(f, id) {
            drop(x);
            self.release_claimed(f);
            return Ok(g);
        }
        bump(&self.c.pages_read, 1);
        let res = self.store.read_page(id, x.bytes_mut());
        match res {
            Ok(PageState::Valid(_)) => {
                *fr.meta.lock() = Default::default();
                fr.referenced.store(true, Ordering::Relaxed);
                fr.valid.store(true, Ordering::Release);
                drop(x);
                Ok(f)
            }
            Ok(PageState::Unwritten) => {
                self.unmap(f, id);
                drop(x);
                self.unpin(f);
                Err(PoolError::Unwritten {
                    file: self.store.data_path().to_path_buf(),
                    page_id: id,
                })
            }
            Err(e) => {
                self.unmap(f, id);
                drop(x);
                self.unpin(f);
                Err(e)
            }
        }
    }

    /// Returns a claimed frame (pin 1, no page) to the free list.
    pub(crate) fn release_claimed(&self, f: u32) {
        self.unpin(f);
    }

    /// Installs page `id` as a zeroed, valid frame without reading it (new pages, recovery).
    /// Returns the frame pinned, and — if it was freshly installed — its latch held exclusive
    /// (so nobody sees the blank page before the caller fills it); `None` if `id` was resident
    /// and the existing frame is returned (pinned, not latched).
    pub(crate) fn install_blank(
        &self,
        id: PageId,
    ) -> Result<(u32, Option<crate::frame::ExclusiveLatch<'_>>)> {
        if let Some(f) = self.lookup_pin(id) {
            return Ok((f, None));
        }
        let f = self.claim_frame(id)?;
        let fr = &self.frames[f as usize];
        let mut x = fr.exclusive();
        if let Some(g) = self.map_claimed(f, id) {
            drop(x);
            self.release_claimed(f);
            return Ok((g, None));
        }
        x.bytes_mut().fill(0);
        *fr.meta.lock() = Default::default();
        fr.referenced.store(true, Ordering::Relaxed);
        fr.valid.store(true, Ordering::Release);
        Ok((f, Some(x)))
    }

    /// Prefetch: reads every non-resident page of `ids` in batches through the store's
    /// `read_pages` (io_uring when available), so a transaction's pages can be brought in
    /// before it takes the writer lock. Pages that are unwritten or fail verification are not
    /// installed (a later `read` reports them). Stops early, without error, when no frame can be
    /// freed.
    pub fn prefetch(&self, ids: &[PageId]) -> Result<PrefetchReport> {
        bump(&self.c.prefetch_calls, 1);
        let mut uniq: Vec<PageId> = ids.iter().copied().filter(|p| p.0 != NO_PAGE).collect();
        uniq.sort_unstable();
        uniq.dedup();
        let mut rep = PrefetchReport {
            requested: uniq.len(),
            ..Default::default()
        };
        let limit = (self.frames.len() / 4).max(1);
        let mut todo: Vec<PageId> = Vec::new();
        for id in uniq {
            if self.contains(id) {
                rep.resident += 1;
            } else if todo.len() < limit {
                todo.push(id);
            } else {
                rep.no_frame += 1;
            }
        }
        for chunk in todo.chunks(64) {
            let mut claimed: Vec<(PageId, u32)> = Vec::with_capacity(chunk.len());
            let mut latches = Vec::with_capacity(chunk.len());
            let mut out_of_frames = false;
            for &id in chunk {
                if out_of_frames {
                    rep.no_frame += 1;
                    continue;
                }
                let f = match self.claim_frame(id) {
                    Ok(f) => f,
                    Err(PoolError::NoFreeFrame { .. }) => {
                        out_of_frames = true;
                        rep.no_frame += 1;
                        continue;
                    }
                    Err(e) => {
                        drop(latches);
                        for (pid, f) in claimed {
                            self.unmap(f, pid);
                            self.unpin(f);
                        }
                        return Err(e);
                    }
                };
                let x = self.frames[f as usize].exclusive();
                if let Some(g) = self.map_claimed(f, id) {
                    // Someone else brought it in meanwhile.
                    drop(x);
                    self.release_claimed(f);
                    self.unpin(g);
                    rep.resident += 1;
                    continue;
                }
                claimed.push((id, f));
                latches.push(x);
            }
            if claimed.is_empty() {
                continue;
            }
            let results = {
                let mut reqs: Vec<(PageId, &mut [u8])> = claimed
                    .iter()
                    .zip(latches.iter_mut())
                    .map(|((id, _), x)| (*id, x.bytes_mut()))
                    .collect();
                self.store.read_pages(&mut reqs)
            };
            bump(&self.c.pages_read, claimed.len() as u64);
            bump(&self.c.prefetch_pages, claimed.len() as u64);
            let mut ok = Vec::with_capacity(claimed.len());
            for (i, (id, f)) in claimed.iter().enumerate() {
                let fr = &self.frames[*f as usize];
                match results.get(i) {
                    Some(Ok(PageState::Valid(_))) => {
                        *fr.meta.lock() = Default::default();
                        fr.referenced.store(true, Ordering::Relaxed);
                        fr.valid.store(true, Ordering::Release);
                        rep.loaded += 1;
                        ok.push(true);
                    }
                    _ => {
                        self.unmap(*f, *id);
                        rep.failed += 1;
                        ok.push(false);
                    }
                }
            }
            drop(latches);
            for (_, f) in claimed {
                self.unpin(f);
            }
        }
        Ok(rep)
    }

    // ---------------------------------------------------------------- flushing

    fn take_buf(&self) -> AlignedBuf {
        self.bufs
            .lock()
            .pop()
            .unwrap_or_else(|| AlignedBuf::page(self.page_size))
    }

    fn return_bufs(&self, mut bufs: Vec<AlignedBuf>) {
        let mut pool = self.bufs.lock();
        let cap = self.batch_pages * 2;
        while pool.len() < cap {
            match bufs.pop() {
                Some(b) => pool.push(b),
                None => break,
            }
        }
    }

    /// Pins `id` if resident without counting a hit or touching the reference bit.
    fn pin_quiet(&self, id: PageId) -> Option<u32> {
        let map = self.table[shard_of(id.0)].map.read();
        let f = *map.get(&id.0)?;
        self.frames[f as usize].pin.fetch_add(1, Ordering::Acquire);
        Some(f)
    }

    /// Writes the dirty, committed pages among `ids` as one batch through the store. Pages that
    /// are clean, held by an uncommitted transaction (no-steal) or already being written are
    /// skipped. A page stays on the flush list until its write is durable.
    pub(crate) fn flush_pages(&self, ids: &[PageId], kind: FlushKind) -> Result<FlushOutcome> {
        struct Prep {
            id: PageId,
            f: u32,
            lsn: Lsn,
            rebuildable: bool,
        }
        let mut out = FlushOutcome::default();
        let mut preps: Vec<Prep> = Vec::with_capacity(ids.len());
        let mut bufs: Vec<AlignedBuf> = Vec::with_capacity(ids.len());
        let claim_all = TestKnobs::on(&self.knobs.claim_all_rebuildable);
        for &id in ids {
            let Some(f) = self.pin_quiet(id) else {
                continue;
            };
            let fr = &self.frames[f as usize];
            let latch = match kind {
                FlushKind::FlushList { wait: true } => Some(fr.shared()),
                _ => fr.try_shared(),
            };
            let Some(latch) = latch else {
                out.busy += 1;
                self.unpin(f);
                continue;
            };
            if !fr.valid.load(Ordering::Acquire) || fr.page_id.load(Ordering::Relaxed) != id.0 {
                drop(latch);
                self.unpin(f);
                continue;
            }
            let mut m = fr.meta.lock();
            if !m.dirty || m.owner != 0 || m.flushing {
                if m.owner != 0 {
                    out.owned += 1;
                } else if m.flushing {
                    out.busy += 1;
                }
                drop(m);
                drop(latch);
                self.unpin(f);
                continue;
            }
            m.flushing = true;
            fr.flushing.store(true, Ordering::Relaxed);
            m.copy_lsn = m.newest;
            m.next_oldest = None;
            let mut rebuildable = false;
            if m.rebuildable || claim_all {
                // Decide under the flush-list mutex, atomically with checkpoint computation: if
                // the page may skip protection, hold the checkpoint at or below its PageInit
                // until the write is durable.
                let mut fl = self.flush_list.lock();
                let horizon = Lsn(self.horizon.load(Ordering::Acquire));
                if claim_all || m.rebuild_from >= horizon {
                    rebuildable = true;
                    if m.rebuildable && m.rebuild_from < m.oldest {
                        fl.remove(&(m.oldest, id, f));
                        m.oldest = m.rebuild_from;
                        fl.insert((m.oldest, id, f));
                    }
                }
            }
            let lsn = m.newest;
            drop(m);
            let mut buf = self.take_buf();
            buf.copy_from_slice(latch.bytes());
            drop(latch);
            bufs.push(buf);
            preps.push(Prep {
                id,
                f,
                lsn,
                rebuildable,
            });
        }
        if preps.is_empty() {
            self.return_bufs(bufs);
            return Ok(out);
        }
        let res = {
            let pages: Vec<PageOut<'_>> = preps
                .iter()
                .zip(bufs.iter())
                .map(|(p, b)| PageOut {
                    page_id: p.id,
                    image: b,
                    lsn: p.lsn,
                    rebuildable_from_redo: p.rebuildable,
                })
                .collect();
            self.store.write_pages(&pages)
        };
        let n = preps.len();
        for p in &preps {
            let fr = &self.frames[p.f as usize];
            let mut m = fr.meta.lock();
            m.flushing = false;
            fr.flushing.store(false, Ordering::Relaxed);
            if res.is_ok() && m.dirty && fr.page_id.load(Ordering::Relaxed) == p.id.0 {
                let mut fl = self.flush_list.lock();
                fl.remove(&(m.oldest, p.id, p.f));
                if m.newest == m.copy_lsn {
                    m.dirty = false;
                    fr.dirty.store(false, Ordering::Release);
                } else {
                    // Committed again while being written: only changes after the copy remain.
                    m.oldest = m.next_oldest.unwrap_or(m.oldest);
                    fl.insert((m.oldest, p.id, p.f));
                }
            }
            m.next_oldest = None;
            drop(m);
            self.unpin(p.f);
        }
        self.return_bufs(bufs);
        match res {
            Ok(()) => {
                out.written = n;
                bump(&self.c.pages_written, n as u64);
                bump(
                    &self.c.pages_written_rebuildable,
                    preps.iter().filter(|p| p.rebuildable).count() as u64,
                );
                match kind {
                    FlushKind::Lru => {
                        bump(&self.c.cleaner_lru_batches, 1);
                        bump(&self.c.cleaner_lru_pages, n as u64);
                    }
                    FlushKind::FlushList { .. } => {
                        bump(&self.c.flush_list_batches, 1);
                        bump(&self.c.flush_list_pages, n as u64);
                    }
                    FlushKind::Single => bump(&self.c.single_page_flushes, 1),
                }
                Ok(out)
            }
            Err(e) => {
                bump(&self.c.write_errors, 1);
                Err(e)
            }
        }
    }

    /// Up to `max` dirty pages with the oldest modifications below `below` that are not held
    /// by a transaction or being written.
    pub(crate) fn oldest_batch(&self, below: Option<Lsn>, max: usize) -> (Vec<PageId>, bool) {
        let fl = self.flush_list.lock();
        let mut ids = Vec::new();
        let mut skipped_busy = false;
        for &(lsn, id, f) in fl.iter() {
            if below.is_some_and(|b| lsn >= b) || ids.len() >= max {
                break;
            }
            let fr = &self.frames[f as usize];
            if fr.owned.load(Ordering::Relaxed) {
                continue;
            }
            if fr.flushing.load(Ordering::Relaxed) {
                skipped_busy = true;
                continue;
            }
            ids.push(id);
        }
        (ids, skipped_busy)
    }

    /// Writes every committed dirty page whose oldest modification is below `lsn`, in batches,
    /// in the calling thread (waits for page latches). Pages held by an uncommitted transaction
    /// cannot be written (no-steal) and are left dirty. Returns the number of pages written.
    ///
    /// Do not call while holding page guards of this pool.
    pub fn flush_up_to(&self, lsn: Lsn) -> Result<usize> {
        let mut total = 0;
        let mut idle_rounds = 0u32;
        loop {
            let (ids, busy) = self.oldest_batch(Some(lsn), self.batch_pages);
            if ids.is_empty() && !busy {
                return Ok(total);
            }
            let out = if ids.is_empty() {
                FlushOutcome {
                    busy: 1,
                    ..Default::default()
                }
            } else {
                self.flush_pages(&ids, FlushKind::FlushList { wait: true })?
            };
            total += out.written;
            if out.written == 0 {
                if out.busy == 0 || idle_rounds > 20_000 {
                    return Ok(total);
                }
                // Another flusher is writing some of them: wait for it.
                idle_rounds += 1;
                std::thread::sleep(Duration::from_micros(200));
            } else {
                idle_rounds = 0;
            }
        }
    }

    /// Writes every committed dirty page. Returns the number written.
    pub fn flush_all(&self) -> Result<usize> {
        self.flush_up_to(Lsn(u64::MAX))
    }

    // ---------------------------------------------------------------- checkpoints

    /// The oldest modification of any dirty page (a lower bound of the start LSN of its oldest
    /// unwritten group), or `None` when no page is dirty. Pages held by an uncommitted
    /// transaction count from the moment it commits.
    pub fn oldest_dirty_lsn(&self) -> Option<Lsn> {
        self.flush_list.lock().first().map(|k| k.0)
    }

    /// Pages with committed changes not yet on disk.
    pub fn dirty_pages(&self) -> usize {
        self.flush_list.lock().len()
    }

    /// Starts a checkpoint and returns the LSN to flush up to (the log's end now).
    ///
    /// In full-page-writes mode this also publishes that LSN as the new horizon: every page
    /// changed from now on whose LSN is at or below it logs a full page image first, so a later
    /// [`checkpoint_lsn`](Self::checkpoint_lsn) may return it once older pages are written.
    /// Recommended sequence (any mode):
    /// `let t = pool.begin_checkpoint(&log); pool.flush_up_to(t)?; log.checkpoint(pool.checkpoint_lsn(&log))`.
    pub fn begin_checkpoint(&self, log: &dyn RedoSink) -> Lsn {
        let Some(_d) = self.decision.try_write_for(Duration::from_millis(50)) else {
            // A committer is blocked (e.g. waiting for log space): keep the current horizon.
            return Lsn(self.horizon.load(Ordering::Acquire));
        };
        let end = log.end_lsn();
        if self.store.wants_full_page_images() {
            let _fl = self.flush_list.lock();
            self.horizon.fetch_max(end.0, Ordering::AcqRel);
        }
        end
    }

    /// The highest LSN a checkpoint may record now (docs/design.md invariant 3): never above the
    /// oldest modification of any dirty page, nor above a change whose group is being
    /// appended, nor (full-page-writes) above the published horizon. Publishes the result as
    /// the horizon, so later init-on-flush decisions account for it. Write it with the log's
    /// `checkpoint`.
    ///
    /// In full-page-writes mode the value advances only once nothing older than the horizon
    /// [`begin_checkpoint`](Self::begin_checkpoint) published is dirty, and then to that
    /// horizon: before that, it could pass the last full image of a page that was changed since
    /// the previous horizon, written clean and changed again (no new image), and that page's
    /// next write, if torn, could not be rebuilt from the recorded checkpoint. Test:
    /// `a_full_page_writes_checkpoint_never_passes_a_dirty_pages_image`.
    pub fn checkpoint_lsn(&self, log: &dyn RedoSink) -> Lsn {
        if TestKnobs::on(&self.knobs.checkpoint_overreport) {
            // Test knob: breaks invariant 3 on purpose.
            let end = log.end_lsn();
            self.horizon.fetch_max(end.0, Ordering::AcqRel);
            return end;
        }
        let fpw = self.store.wants_full_page_images();
        let d = self.decision.try_write_for(Duration::from_millis(50));
        let fl = self.flush_list.lock();
        let h = Lsn(self.horizon.load(Ordering::Acquire));
        let oldest = fl.first().map(|k| k.0);
        let c = if fpw {
            // A page changed after the previous horizon logged its image then; written clean
            // and changed again before this horizon, it logs none. A checkpoint between that
            // image and its next write could not rebuild the page if the write tore, so the
            // checkpoint moves (to the horizon) only once nothing older than the horizon is
            // dirty, and otherwise stays where it was. Every commit in flight starts at or
            // after the published horizon.
            let c = match oldest {
                Some(o) if o < h => Lsn(self.fpw_checkpoint.load(Ordering::Acquire)),
                _ => h,
            };
            if !TestKnobs::on(&self.knobs.fpw_checkpoint_passes_images) {
                self.fpw_checkpoint.fetch_max(c.0, Ordering::AcqRel);
                c
            } else {
                // Test knob: the old rule, the oldest dirty page (can pass a page's image).
                oldest.unwrap_or(h).min(h)
            }
        } else if d.is_some() {
            // No commit is between reading the log's end and listing its pages.
            let end = log.end_lsn();
            oldest.unwrap_or(end).min(end)
        } else {
            // Every commit in flight starts at or after the published horizon.
            oldest.unwrap_or(h).min(h)
        };
        self.horizon.fetch_max(c.0, Ordering::AcqRel);
        c
    }

    /// Sets the horizon after recovery (the recovered checkpoint LSN).
    pub(crate) fn set_horizon(&self, lsn: Lsn) {
        let _fl = self.flush_list.lock();
        self.horizon.store(lsn.0, Ordering::Release);
        self.fpw_checkpoint.store(lsn.0, Ordering::Release);
    }

    /// The published checkpoint horizon.
    pub fn horizon(&self) -> Lsn {
        Lsn(self.horizon.load(Ordering::Acquire))
    }

    // ---------------------------------------------------------------- cleaner support

    pub(crate) fn wake_cleaner(&self) {
        let mut c = self.ctl.lock();
        if c.running && !c.wake {
            c.wake = true;
            self.cv.notify_one();
        }
    }

    /// One pass of the cleaner's LRU side: moves cold clean frames to the free list and writes
    /// a batch of cold dirty pages, until the free list holds the reserve.
    pub(crate) fn refill_free_reserve(&self) -> Result<()> {
        let want = self
            .free_reserve
            .saturating_sub(self.free_len.load(Ordering::Relaxed));
        if want == 0 {
            return Ok(());
        }
        let n = self.frames.len();
        let mut freed = 0;
        let mut cold_dirty: Vec<(u32, PageId)> = Vec::new();
        for _ in 0..n {
            if freed >= want {
                break;
            }
            let f = (self.hand.fetch_add(1, Ordering::Relaxed) % n) as u32;
            let fr = &self.frames[f as usize];
            if fr.pin.load(Ordering::Relaxed) != 0 {
                continue;
            }
            let pid = fr.page_id.load(Ordering::Relaxed);
            if pid == NO_PAGE {
                continue;
            }
            if fr.referenced.load(Ordering::Relaxed) {
                fr.referenced.store(false, Ordering::Relaxed);
                continue;
            }
            if fr.dirty.load(Ordering::Relaxed) {
                if cold_dirty.len() < self.batch_pages
                    && !fr.owned.load(Ordering::Relaxed)
                    && !fr.flushing.load(Ordering::Relaxed)
                {
                    cold_dirty.push((f, PageId(pid)));
                }
                continue;
            }
            if self.try_evict(f, PageId(pid)) {
                self.unpin(f);
                freed += 1;
                bump(&self.c.cleaner_evictions, 1);
            }
        }
        if freed < want && !cold_dirty.is_empty() {
            let ids: Vec<PageId> = cold_dirty.iter().map(|x| x.1).collect();
            self.flush_pages(&ids, FlushKind::Lru)?;
            for (f, pid) in cold_dirty {
                if freed >= want {
                    break;
                }
                let fr = &self.frames[f as usize];
                if !fr.referenced.load(Ordering::Relaxed) && self.try_evict(f, pid) {
                    self.unpin(f);
                    freed += 1;
                    bump(&self.c.cleaner_evictions, 1);
                }
            }
        }
        Ok(())
    }

    /// One pass of the cleaner's flush-list side: if too many pages are dirty, writes a batch of
    /// the oldest. Returns whether more work remains.
    pub(crate) fn flush_oldest_if_needed(&self) -> Result<bool> {
        let dirty = self.dirty_pages();
        let limit = self.frames.len() * self.cfg.dirty_target_pct as usize / 100;
        if dirty <= limit {
            return Ok(false);
        }
        let (ids, _) = self.oldest_batch(None, self.batch_pages);
        if ids.is_empty() {
            return Ok(false);
        }
        let out = self.flush_pages(&ids, FlushKind::FlushList { wait: false })?;
        Ok(out.written > 0 && self.dirty_pages() > limit)
    }

    /// Statistics.
    pub fn stats(&self) -> PoolStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.c;
        PoolStats {
            frames: self.frames.len() as u64,
            free_frames: self.free_len.load(Ordering::Relaxed) as u64,
            dirty_pages: self.dirty_pages() as u64,
            hits: self.table.iter().map(|s| r(&s.hits)).sum::<u64>() + r(&self.optimistic_hits.0),
            misses: self.table.iter().map(|s| r(&s.misses)).sum(),
            pages_read: r(&c.pages_read),
            evictions: r(&c.evictions),
            prefetch_calls: r(&c.prefetch_calls),
            prefetch_pages: r(&c.prefetch_pages),
            cleaner_rounds: r(&c.cleaner_rounds),
            cleaner_lru_batches: r(&c.cleaner_lru_batches),
            cleaner_lru_pages: r(&c.cleaner_lru_pages),
            cleaner_evictions: r(&c.cleaner_evictions),
            flush_list_batches: r(&c.flush_list_batches),
            flush_list_pages: r(&c.flush_list_pages),
            single_page_flushes: r(&c.single_page_flushes),
            pages_written: r(&c.pages_written),
            pages_written_rebuildable: r(&c.pages_written_rebuildable),
            write_errors: r(&c.write_errors),
            cleaner_errors: r(&c.cleaner_errors),
            commits: r(&c.commits),
            aborts: r(&c.aborts),
            txn_too_large: r(&c.txn_too_large),
            full_page_images: r(&c.full_page_images),
            full_page_image_bytes: r(&c.full_page_image_bytes),
            redo_groups: r(&c.redo_groups),
            redo_records_applied: r(&c.redo_records_applied),
            redo_records_skipped: r(&c.redo_records_skipped),
        }
    }

    /// The page LSN in a frame's header.
    pub(crate) fn header_lsn(bytes: &[u8]) -> Lsn {
        PageHeader::read(bytes).map(|h| h.lsn).unwrap_or(Lsn::ZERO)
    }
}
