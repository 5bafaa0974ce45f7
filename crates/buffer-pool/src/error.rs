//! The error type of keel-buffer-pool.

use keel_page::{Lsn, PageError, PageId};
use std::path::PathBuf;

/// Result with [`PoolError`].
pub type Result<T, E = PoolError> = std::result::Result<T, E>;

/// Everything the buffer pool can report. Every variant names the page, file or LSN involved.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A page read from disk failed verification (checksum, page id, torn trailer) and cannot be
    /// repaired: it is never used as data.
    #[error(transparent)]
    Corruption(#[from] PageError),
    /// A page that was never written (all zero, or beyond the end of the data file) was asked
    /// for: a dangling page reference, never returned as data.
    #[error("{file}: {page_id} was never written")]
    Unwritten {
        /// The data file.
        file: PathBuf,
        /// The page.
        page_id: PageId,
    },
    /// The page writer / storage below the pool failed (I/O, poisoned after a failed sync, ...).
    #[error("page store: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The redo log failed (append or flush).
    #[error("redo log: {0}")]
    Log(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A write transaction needs more frames than the pool can give it (no-steal: its pages stay
    /// in memory until it commits). The operation that failed changed nothing; abort the
    /// transaction.
    #[error("transaction too large for the pool: it holds {txn_pages} pages and needs one more, but the pool has {frames} frames and lets one transaction hold at most {limit}")]
    TxnTooLarge {
        /// Pages the transaction holds.
        txn_pages: usize,
        /// Frames in the pool.
        frames: usize,
        /// The most pages one transaction may hold.
        limit: usize,
    },
    /// The transaction failed part-way through an operation of its caller
    /// ([`PageTxn::fail`](crate::PageTxn::fail)): its pages may hold part of that operation,
    /// so nothing more is read, changed or committed; roll it back.
    #[error("the transaction failed part-way ({reason}); its pages may hold part of that operation, so it can only be rolled back")]
    TxnFailed {
        /// What failed.
        reason: String,
        /// The operation failed for being too large (the pool's or the log's limit per
        /// transaction): a smaller transaction may succeed.
        too_large: bool,
    },
    /// No frame can be freed: every frame is pinned (or held by an uncommitted transaction).
    #[error("no frame can be freed for {page_id}: {pinned} of {frames} frames are pinned, {txn_pages} held by uncommitted transactions")]
    NoFreeFrame {
        /// The page that needed a frame.
        page_id: PageId,
        /// Frames in the pool.
        frames: usize,
        /// Frames pinned when the search gave up.
        pinned: usize,
        /// Frames held by uncommitted transactions.
        txn_pages: usize,
    },
    /// Another write transaction holds uncommitted changes to this page.
    #[error("{page_id} holds uncommitted changes of another transaction")]
    PageBusy {
        /// The page.
        page_id: PageId,
    },
    /// This transaction already holds a write guard on the page (latches are not re-entrant).
    #[error("{page_id} is already write-latched by this transaction")]
    AlreadyLatched {
        /// The page.
        page_id: PageId,
    },
    /// A modification outside the page's payload (header and trailer belong to the page format).
    #[error(
        "{page_id}: write of {len} bytes at offset {offset} is outside the payload {min}..{max}"
    )]
    OutOfBounds {
        /// The page.
        page_id: PageId,
        /// Offset of the write.
        offset: usize,
        /// Length of the write.
        len: usize,
        /// First payload byte.
        min: usize,
        /// End of the payload.
        max: usize,
    },
    /// A redo record read back from the log cannot be applied to its page.
    #[error("redo record for {page_id} in the group ending at {lsn} cannot be applied: {reason}")]
    BadRedo {
        /// The page.
        page_id: PageId,
        /// End LSN of the group holding the record.
        lsn: Lsn,
        /// What is wrong with it.
        reason: String,
    },
    /// Recovery found redo for a page whose copy on disk is unusable and whose redo since the
    /// checkpoint cannot rebuild it (no PageInit / PageImage): the page is lost, never used.
    #[error("{file}: {page_id} cannot be recovered: {reason}")]
    Unrecoverable {
        /// The data file.
        file: PathBuf,
        /// The page.
        page_id: PageId,
        /// What was found on disk and in the redo.
        reason: String,
    },
    /// A snapshot reader was refused: the old page versions it needs would pass the pool's
    /// version budget (`PoolConfig::version_budget`), so the oldest snapshots were dropped
    /// (as Oracle's "snapshot too old"). Retry with a new read transaction.
    #[error("snapshot at {lsn} is too old: the page versions it needs passed the budget of {budget} bytes (start a new read transaction)")]
    SnapshotTooOld {
        /// The snapshot's commit LSN.
        lsn: Lsn,
        /// The version budget in bytes.
        budget: u64,
    },
    /// The pool configuration is invalid.
    #[error("buffer pool config: {0}")]
    Config(String),
}

impl PoolError {
    /// Wraps an error of the page store.
    pub fn store<E: std::error::Error + Send + Sync + 'static>(e: E) -> PoolError {
        PoolError::Store(Box::new(e))
    }

    /// Wraps an error of the redo log.
    pub fn log<E: std::error::Error + Send + Sync + 'static>(e: E) -> PoolError {
        PoolError::Log(Box::new(e))
    }

    /// True when stored bytes are damaged: a page that failed its checks
    /// ([`PoolError::Corruption`]), redo that cannot be applied ([`PoolError::BadRedo`]), a page
    /// that cannot be rebuilt ([`PoolError::Unrecoverable`]), a dangling reference to a page that
    /// was never written ([`PoolError::Unwritten`]), or a corruption reported by the page
    /// writer or the redo log below.
    pub fn is_corruption(&self) -> bool {
        match self {
            PoolError::Corruption(_)
            | PoolError::BadRedo { .. }
            | PoolError::Unrecoverable { .. }
            | PoolError::Unwritten { .. } => true,
            PoolError::Store(_) => self
                .flush_error()
                .is_some_and(keel_flush::FlushError::is_corruption),
            PoolError::Log(_) => self
                .log_error()
                .is_some_and(keel_redo_log::LogError::is_corruption),
            _ => false,
        }
    }

    /// The page writer's error, if this is one (e.g. to tell `FlushError::Poisoned`).
    pub fn flush_error(&self) -> Option<&keel_flush::FlushError> {
        match self {
            PoolError::Store(e) => e.downcast_ref(),
            _ => None,
        }
    }

    /// The redo log's error, if this is one.
    pub fn log_error(&self) -> Option<&keel_redo_log::LogError> {
        match self {
            PoolError::Log(e) => e.downcast_ref(),
            _ => None,
        }
    }
}
