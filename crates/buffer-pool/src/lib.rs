//! keel-buffer-pool: Keel's buffer pool — frames, page table, latches, CLOCK eviction, dirty
//! tracking and the flush list, the page cleaner, write transactions that record redo, full page
//! images and init-on-flush state, checkpoint support and redo application at recovery.
//!
//! # Shape
//!
//! - A fixed pool of frames (`pool_bytes / page_size`) in one page-aligned allocation
//!   ([`keel_io::AlignedBuf`], fit for O_DIRECT), a sharded page table, pin counts and a
//!   reader/writer latch per frame.
//! - [`BufferPool::read`] returns a [`PageReadGuard`] (pin + shared latch). Writes happen inside
//!   a write transaction ([`BufferPool::begin`] → [`PageTxn`]): [`PageTxn::write`] /
//!   [`PageTxn::new_page`] return a [`PageWriteGuard`] (exclusive latch) whose
//!   [`write`](PageWriteGuard::write) / [`modify`](PageWriteGuard::modify) /
//!   [`init`](PageWriteGuard::init) change the page *and* record the redo (and undo).
//!   [`PageTxn::commit`] appends the group to the log (prefixed by full page images when the
//!   store wants them), gives the pages the commit LSN and puts them on the flush list;
//!   dropping the transaction rolls every page back in memory.
//! - Pages are read and written through a [`PageStore`]: keel-flush's page writer (checksums,
//!   torn-page protection, WAL rule), or [`MemStore`] in tests.
//! - Eviction is CLOCK (second chance). Only clean, unpinned frames are evicted. The
//!   [`PageCleaner`] keeps a reserve of free frames by writing batches of cold dirty pages and
//!   writes the oldest dirty pages so checkpoints advance; a user thread that finds no clean
//!   frame writes one page itself (counted as `single_page_flushes`, the slow path).
//! - [`BufferPool::prefetch`] reads many pages in one batch (the writer's `read_pages`), so a
//!   transaction's pages can be brought in before it takes the writer lock.
//! - [`BufferPool::apply_redo`] replays recovered redo groups (module `recovery`).
//!
//! # Invariants (each has a test that breaks it on purpose)
//!
//! 1. **Pins**: a pinned frame keeps its page; a page found in the table and pinned is never
//!    evicted (pins are only raised under the page-table shard lock; eviction takes the shard
//!    lock exclusive and moves the pin 0 → 1 by compare-exchange). Guards release their latch,
//!    then their pin. (tests `pool::eviction_never_takes_a_pinned_page`, concurrency test)
//! 2. **No-steal**: a page with changes of an uncommitted transaction is pinned and owned: never
//!    evicted or written before commit; a transaction larger than `max_txn_pct` of the pool
//!    fails with [`PoolError::TxnTooLarge`] and changes nothing.
//! 3. **Dirty tracking / checkpoint** (DESIGN.md invariant 3): a page leaves the flush list only
//!    when a write of its newest committed state is durable; its key is a lower bound of the
//!    start of its oldest unwritten group; [`BufferPool::checkpoint_lsn`] never returns more than
//!    the oldest key, nor more than the log's end read while no commit is between reading the
//!    log's end and listing its pages. (crash test with the `checkpoint_overreport` knob)
//! 4. **Init-on-flush**: a page is handed to the writer as rebuildable from redo only if a
//!    PageInit of it lies at or after the published horizon, and while that write is in flight
//!    the page holds the checkpoint at or below that PageInit (decided under the flush-list
//!    mutex, atomically with checkpoint computation). (crash test with the
//!    `claim_all_rebuildable` knob)
//! 5. **Full page images**: in full-page-writes mode the first change of a page after the
//!    published horizon logs a `PageImage` of the page before the change in the same group;
//!    checkpoints in that mode never exceed the published horizon. (crash test with the
//!    `skip_full_page_images` knob)
//! 6. **WAL rule** (DESIGN.md invariant 1) is enforced by the page writer before any write; the
//!    pool hands it each page's LSN. (crash test in `tests/crash.rs`)
//!
//! # Lock order
//!
//! checkpoint decision lock → frame latch → frame meta → flush list → page-table shard
//! (the shard lock is innermost: nothing is acquired while holding it except atomics).

mod cleaner;
mod error;
mod frame;
mod guard;
mod pool;
pub mod recovery;
pub mod redo;
mod store;
mod table;
mod txn;

pub use cleaner::PageCleaner;
pub use error::{PoolError, Result};
pub use guard::PageReadGuard;
pub use pool::{BufferPool, PoolConfig, PoolStats, PrefetchReport, TestKnobs};
pub use recovery::RedoApplyReport;
pub use redo::{Record, RecoveredGroup};
pub use store::{MemLog, MemStore, MemStoreStats, PageOut, PageStore, RedoSink};
pub use txn::{apply_init, PageTxn, PageWriteGuard};
