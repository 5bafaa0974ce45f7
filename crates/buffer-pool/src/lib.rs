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
//! # Invariants (each has a test; most break it on purpose with a test knob)
//!
//! The knobs (`BufferPool::knobs`, `TestKnobs`) exist only with the `test-knobs` feature,
//! which only this crate's own dev-dependency enables; in any other build every knob reads as
//! off at compile time, so no release build can disable an invariant.
//!
//! 1. **Pins**: a pinned frame keeps its page; a page found in the table and pinned is never
//!    evicted (pins are only raised under the page-table shard lock; eviction takes the shard
//!    lock exclusive and moves the pin 0 → 1 by compare-exchange). Guards release their latch,
//!    then their pin. Tests: `tests/pool.rs: eviction_never_takes_a_pinned_page`;
//!    `tests/concurrency.rs` (every page read under two threads + cleaner is self-consistent).
//!    A frame belongs to whoever moved its pin 0 → 1: the free list takes a frame without a page
//!    only by that compare-exchange too, so a last unpin racing an evictor never frees the
//!    frame the evictor took (test: `a_last_unpin_never_frees_a_frame_an_evictor_took`, which
//!    breaks it with the knob `free_without_taking`).
//! 2. **No-steal**: a page with changes of an uncommitted transaction is pinned and owned: never
//!    evicted or written before commit; a transaction larger than `max_txn_pct` of the pool
//!    fails with [`PoolError::TxnTooLarge`] and changes nothing. Tests: `tests/pool.rs:
//!    uncommitted_pages_are_never_written`, `txn_too_large_changes_nothing`,
//!    `abort_restores_pages_exactly`.
//! 3. **Dirty tracking / checkpoint** (docs/design.md invariant 3): a page leaves the flush list only
//!    when a write of its newest committed state is durable (a page committed again while being
//!    written stays dirty from the later group); its key is at or below the start of its oldest
//!    unwritten group; [`BufferPool::checkpoint_lsn`] never returns more than the oldest key,
//!    nor more than the log's end read while no commit is between appending and listing its
//!    pages. Tests: `tests/crash.rs: checkpoint_over_report_on_purpose_is_caught` (knob
//!    `checkpoint_overreport`), `tests/pool.rs: flush_list_is_ordered_by_oldest_modification`,
//!    `tests/crash.rs: with_the_cleaner_running_every_mode_recovers` (catches a flusher that
//!    marks a re-committed page clean).
//! 4. **Init-on-flush**: a page is handed to the writer as rebuildable from redo only if a
//!    PageInit of it lies at or after the published horizon, and while that write is in flight
//!    the page holds the checkpoint at or below that PageInit (decided under the flush-list
//!    mutex, atomically with checkpoint computation). A page made a copy (its PageInit then
//!    its PageCopy in one group) is so only while the copy is pending (module `copy_deps`):
//!    its source waits for that write, so redo can still make the copy; once the copy is
//!    durable the source may pass it on disk and the page's later writes are protected.
//!    Tests: `tests/crash.rs:
//!    init_on_flush_claimed_wrongly_on_purpose_is_caught` (knob `claim_all_rebuildable`),
//!    `tests/page_copies.rs: a_pending_copy_skips_the_protection_and_is_rebuilt_from_its_source`
//!    (knob `copies_always_rebuildable`),
//!    `tests/pool.rs: a_rebuildable_page_in_flight_holds_the_checkpoint_at_its_init`,
//!    `init_on_flush_state_follows_the_checkpoint`, `tests/recovery.rs:
//!    fresh_pages_skip_the_doublewrite_e2`.
//! 5. **Full page images**: in full-page-writes mode the first change of a page after the
//!    published horizon logs a `PageImage` of the page before the change in the same group;
//!    checkpoints in that mode never exceed the published horizon. Tests: `tests/crash.rs:
//!    full_page_images_skipped_on_purpose_is_caught` (knob `skip_full_page_images`),
//!    `tests/pool.rs: full_page_image_logged_once_per_checkpoint`.
//! 6. **WAL rule** (docs/design.md invariant 1) is enforced by the page writer before any write; the
//!    pool hands it each page's LSN. Test: `tests/crash.rs: wal_rule_broken_on_purpose_is_caught`
//!    (a log that lies about durability).
//! 7. **Recovery** (docs/design.md invariants 4 and 5, the pool's half): see module [`recovery`];
//!    tests in `tests/recovery.rs` and the crash property tests in `tests/crash.rs` (every mode,
//!    model log and real log, 512/4096-byte sectors; in `None` mode torn pages are reported).
//! 8. **Copies made before the hold**: a committed page image copied before a transaction
//!    takes the page ([`BufferPool::copy_committed`], [`PageTxn::offer_copies`]) becomes the
//!    page's version and undo only if its header (with the LSN) and trailer still equal the
//!    page's when the transaction takes it (module `txn::precopy`). Tests: `tests/pool.rs:
//!    a_stale_copy_is_never_used` (knob `trust_stale_copies`), keel's `tests/concurrent.rs:
//!    a_snapshot_sees_every_commit_acknowledged_before_it`.
//!
//! # Where each concern lives
//!
//! One module per question, each stating its invariants in its module docs: `pool` (the
//! [`BufferPool`] type and its shared state), `config` ([`PoolConfig`] and the sizes derived
//! from it), `stats` ([`PoolStats`], its field list written once), `knobs` (test-only
//! `TestKnobs`), `frame` (frames, latches, the seqlock version, dirty metadata and its
//! mirrors), `page_table` (page-table shards), `residency` (which frame holds which page; reads,
//! loads, pins), `free_list`, `eviction` (the CLOCK sweep), `prefetch`, `flush_list` (dirty
//! pages and write batches), `checkpoint` (the checkpoint-LSN rule), `optimistic` (latch-free
//! reads), `cleaner` (the page cleaner's thread and policies), `txn` (write transactions; `txn::precopy`: page copies made before a hold),
//! [`versions`] (page versions and snapshots; `versions::txn_undo`: pages a transaction keeps
//! as undo while no snapshot is registered), `snapshot_read` (reads at a snapshot),
//! [`recovery`] (redo application) and `page_store` (what the pool reads from and writes to).
//!
//! # Lock order
//!
//! checkpoint decision lock → frame latch → frame meta → flush list → page-table shard
//! (the shard lock is innermost: nothing is acquired while holding it except atomics).
//! Version store: snapshot registry → sealed list → version shard; frame latch → the list of
//! undo registrations → one transaction's undo.

mod checkpoint;
mod cleaner;
mod config;
mod copy_deps;
mod error;
mod eviction;
mod flush_list;
mod frame;
mod free_list;
mod guard;
mod knobs;
mod optimistic;
mod page_store;
mod page_table;
mod pool;
mod prefault;
mod prefetch;
pub mod recovery;
pub mod redo;
mod residency;
mod snapshot_read;
mod stats;
mod sync;
#[cfg(test)]
mod testutil;
mod txn;
pub mod versions;

pub use cleaner::PageCleaner;
pub use config::PoolConfig;
pub use error::{PoolError, Result};
pub use guard::PageReadGuard;
#[cfg(any(test, feature = "test-knobs"))]
pub use knobs::TestKnobs;
pub use optimistic::OptimisticToken;
pub use page_store::{MemLog, MemStore, MemStoreStats, PageOut, PageStore, RedoSink};
pub use pool::BufferPool;
pub use prefetch::PrefetchReport;
pub use recovery::RedoApplyReport;
pub use redo::{Record, RecoveredGroup};
pub use snapshot_read::SnapPage;
pub use stats::PoolStats;
pub use txn::{CommittedCopy, PageTxn, PageWriteGuard};
pub use versions::{Snapshot, VersionCounts};
