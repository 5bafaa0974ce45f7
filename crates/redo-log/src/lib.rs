//! keel-redo-log: Keel's redo log — where a commit becomes durable.
//!
//! The log is a stream of blocks of 512 or 4096 bytes ([`LogBlockSize`], fixed at creation) in
//! preallocated circular files or growing files ([`LogFiles`]), plus a header file with two
//! checksummed checkpoint slots. An LSN is a position in the stream of block *payload* bytes:
//! block `n` holds LSNs `[n*P, (n+1)*P)` with `P = B - 28`. Transactions append record groups
//! ([`Record`], one group per transaction, ending with a commit marker); recovery returns a group
//! only if all of it, marker included, is in the log. Every byte is described in
//! `docs/format.md` ("Redo log").
//!
//! # API
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use keel_redo_log::*;
//! # use keel_page::{PageId, PageType};
//! # fn main() -> Result<(), LogError> {
//! let fs: Arc<dyn keel_io::FileSystem> = Arc::new(keel_io::OsFs::default());
//! let (log, recovered) = RedoLog::open(fs, "db/log".as_ref(), LogConfig::default())?;
//! for g in &recovered.groups { /* replay g.records where page LSN < g.end_lsn */ }
//! let lsn = log.append(&[Record::PageInit { page_id: PageId(1), page_type: PageType::RAW }])?;
//! log.wait_durable(lsn)?;            // or `log.durable(lsn).await` from async code
//! log.checkpoint(lsn)?;              // once every page changed up to `lsn` is on disk
//! # Ok(()) }
//! ```
//!
//! * [`RedoLog::open`] creates or opens and recovers ([`Recovered`]).
//! * [`RedoLog::append`] / [`RedoLog::append_range`]: reserve LSNs, copy into the log buffer;
//!   waits while the buffer or the log space is full, never fails for that.
//! * [`RedoLog::wait_durable`], [`RedoLog::durable`] (future), [`RedoLog::flush_to`],
//!   [`RedoLog::wait_committed`] / [`RedoLog::committed`] (by [`Durability`]).
//! * [`RedoLog::checkpoint`], [`RedoLog::checkpoint_lsn`], [`RedoLog::space_used`],
//!   [`RedoLog::capacity`], [`RedoLog::stats`] ([`LogStats`]), [`RedoLog::is_poisoned`],
//!   [`RedoLog::close`].
//!
//! # Group commit
//!
//! An appender encodes its group privately, reserves an LSN range under a short mutex, copies the
//! bytes into the ring buffer with no global lock held (the ring is split into separately locked
//! segments), and publishes completion; the completed prefix of the stream is what may be
//! written. One thread at a time owns the writer: the flusher thread, or — with
//! [`LogConfig::waiter_flush`] (default) — a thread blocked in `wait_durable` when the writer is
//! idle. Whoever owns it writes everything completed and syncs once. A thread that finds the
//! writer busy queues itself by the LSN it needs, each with its own parker, and sleeps: after a
//! sync exactly the queued threads (and futures) whose LSN is now durable are woken, each once,
//! and no other (no thundering herd). If threads are still queued when the writer is released,
//! it is handed to the flusher thread, which keeps syncing while commits queue up behind its
//! syncs; so under load no sleeping thread has to be woken before each sync, while a single
//! committer still writes and syncs itself without a thread switch. A waiter may first spin
//! (yielding) for [`LogConfig::spin_before_sleep`] (default: not at all — with more committers
//! than cores the spinning takes the CPU the appenders need). Futures never do I/O: they ask the
//! flusher thread.
//!
//! # Tail blocks
//!
//! The last block of a write is usually partly filled. With preallocated files it is rewritten in
//! place as it fills ([`TailPolicy::RewriteInPlace`], InnoDB) when one block is no larger than the
//! device's physical block; otherwise ([`TailPolicy::SealOnSync`], e.g. 4 KiB blocks on a device
//! that tears at 512 bytes) its rest is filled with a filler before each sync, so a block holding
//! acknowledged commits is never written again. Growing files always seal: they are append-only,
//! so every sync extends the file (E4).
//!
//! # Failure handling
//!
//! A failed write or sync poisons the log: every waiter, future and later call gets
//! [`LogError::Poisoned`] naming the file; a failed sync is never retried as if it had worked.
//! Reopening recovers what is durable.
//!
//! # Invariants (each has a test that breaks it on purpose)
//!
//! 1. The scan accepts a block only if its CRC-32C, block number and epoch are right
//!    (`block::tests::every_check_catches_its_fault`); with the check switched off, the crash
//!    property fails (`tests/crash.rs: disabling_the_tail_check_breaks_recovery`).
//! 2. A group is recovered only if it is complete (`record::tests::framing_damage_is_rejected`,
//!    `tests/log.rs: torn_tail_group_is_discarded_with_a_reason`).
//! 3. Recovered groups are a prefix of the appended order and include every group whose
//!    `wait_durable` returned, under the fault model (lost, torn, reordered unsynced writes)
//!    (`tests/crash.rs`).
//! 4. With `SealOnSync`, a block holding durable data is never rewritten; with in-place tail
//!    rewrites a block larger than the device's atomic unit loses acknowledged commits when
//!    torn (`tests/crash.rs: in_place_tail_rewrite_with_small_sectors_loses_commits`).
//! 5. No write touches un-checkpointed log: appenders wait for a checkpoint and padding is
//!    clamped (`tests/log.rs: full_log_waits_for_checkpoint`,
//!    `tests/crash.rs: no_space_reserve_overwrites_needed_log`).
//! 6. The two checkpoint slots are checksummed and alternate; the newest valid one wins
//!    (`header::tests::torn_newest_slot_falls_back_to_the_older_one`).
//! 7. A failed sync poisons (`tests/log.rs: failed_sync_poisons_every_waiter_and_append`).
//! 8. Decoding never panics on any bytes (fuzz targets `log_block`, `log_scan`;
//!    `tests/log.rs: random_bytes_never_panic`, `resealed_random_blocks_never_panic`).
//! 9. A log buffer byte is overwritten only after it was written to the file
//!    (`tests/log.rs: ring_overwrite_corrupts_the_log`).
//! 10. No wakeup is lost: every thread blocked in `wait_durable` / `flush_to` /
//!     `wait_committed` returns once a sync (or write) covers its LSN, or with the poison
//!     (`tests/wakeups.rs: many_threads_many_small_commits_all_return`,
//!     `poison_wakes_every_blocked_committer`); without the hand-off of the writer to the
//!     flusher thread, queued waiters are stranded (`without_the_handoff_waiters_are_stranded`).

mod block;
mod config;
mod error;
mod files;
mod header;
mod log;
mod log_writer;
mod record;
mod ring;
mod salt;
mod scan;
mod stats;

pub use config::{Durability, LogBlockSize, LogConfig, LogFiles, TailPolicy};
pub use error::{LogError, Result};
#[cfg(any(test, feature = "test-switches"))]
pub use log::TestSwitches;
pub use log::{Durable, LogOpenMode, Recovered, RecoveredGroup, RedoLog};
pub use record::{Record, WriteBytes, WRITE_INLINE};
pub use salt::{change_salt, fresh_salt, SaltChange};
pub use stats::{HistogramSummary, LogStats};

/// Low-level access to the on-disk format, for tools, tests and fuzzing.
pub mod inspect {
    pub use crate::block::{
        block_crc, check_block, payload_size, BlockFault, BlockHeader, Geometry, BLOCK_HEADER,
        BLOCK_TRAILER, MAX_DURABLE_LAG,
    };
    pub use crate::files::parse_name as parse_file_name;
    pub use crate::header::{decode_header, Slot, StaticHeader, HEADER_BYTES, HEADER_FILE};
    pub use crate::record::{
        decode_group, encode_group, encode_group_as, group_len, group_len_as, group_len_bound,
        Encoding,
    };

    use crate::error::Result;
    use crate::scan::{scan, Event, ImageSource, ScanParams};
    use crate::RecoveredGroup;
    use keel_page::Lsn;

    /// What [`scan_images`] found.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ScanSummary {
        /// Complete groups ending after the checkpoint.
        pub groups: Vec<RecoveredGroup>,
        /// LSN after the last accepted group.
        pub end: u64,
        /// First block not accepted.
        pub next_block: u64,
        /// Bytes of incomplete groups skipped.
        pub discarded_bytes: u64,
        /// Why the scan stopped.
        pub stop: String,
    }

    /// Runs the recovery scan over in-memory images of the log files (`files[i]` is file `i`),
    /// starting at LSN `start`. Never panics.
    pub fn scan_images(
        geo: Geometry,
        files: &[&[u8]],
        start: u64,
        checkpoint: u64,
        max_incarnation: u32,
    ) -> Result<ScanSummary> {
        let mut src = ImageSource { geo, files };
        let params = ScanParams {
            geo,
            start,
            max_incarnation,
            verify: true,
            lookahead: 64,
        };
        let mut groups = Vec::new();
        let end = scan(&mut src, &params, &mut |ev| {
            if let Event::Group {
                start,
                end,
                records,
            } = ev
            {
                if end > checkpoint {
                    groups.push(RecoveredGroup {
                        start_lsn: Lsn(start),
                        end_lsn: Lsn(end),
                        records,
                    });
                }
            }
            true
        })?;
        Ok(ScanSummary {
            groups,
            end: end.end,
            next_block: end.next_block,
            discarded_bytes: end.discarded_bytes,
            stop: end.stop,
        })
    }
}
