//! The error type of keel-flush. Every variant names the file, page or LSN it is about.

use keel_io::{IoError, PoisonCause};
use keel_page::{Lsn, PageError, PageId, PageSize};
use std::path::PathBuf;

/// The error a [`crate::WalFlush`] implementation reports (boxed: the writer only passes it on).
pub type WalError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong writing, reading or recovering pages.
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    /// An I/O error from keel-io (it names the file).
    #[error(transparent)]
    Io(#[from] IoError),

    /// A page read back failed verification and cannot be used as data (names file, page id and
    /// what was expected and found).
    #[error(transparent)]
    Corruption(#[from] PageError),

    /// An earlier sync (or a write whose outcome is unknown) failed: the writer refuses all
    /// further writes. A failed sync is never retried as if it had worked.
    /// The call whose sync or write failed returns this too (with the original error inside).
    #[error("the page writer is poisoned: {cause}; no further writes are accepted")]
    Poisoned {
        /// The first failure: operation, file and the original error.
        #[source]
        cause: PoisonCause,
    },

    /// Asking the redo log to become durable failed.
    #[error(
        "WAL rule: flushing the redo log up to {lsn} before writing {page_id} failed: {source}"
    )]
    Wal {
        /// The LSN the log had to reach.
        lsn: Lsn,
        /// The page that needed it (the newest page of the batch).
        page_id: PageId,
        /// The log's error.
        #[source]
        source: WalError,
    },

    /// The redo log is durable only up to `durable`, below the LSN of a page about to be written:
    /// writing it would break the WAL rule (docs/design.md invariant 1). No page byte was written.
    #[error("WAL rule violated: {page_id} has {needed} but the redo log is durable only up to {durable}; nothing was written")]
    WalRule {
        /// The page whose LSN is not durable.
        page_id: PageId,
        /// Its LSN.
        needed: Lsn,
        /// The log's durable LSN.
        durable: Lsn,
    },

    /// Atomic writes were asked for (`TornPageProtection::Atomic`) but the probe says pages of
    /// this size cannot be written atomically here.
    #[error("atomic writes of {page_size} pages are not possible on {path} (file system {filesystem}): {found}")]
    AtomicUnavailable {
        /// The directory or file probed.
        path: PathBuf,
        /// The file-system name the probe reported.
        filesystem: String,
        /// The page size asked for.
        page_size: PageSize,
        /// What the probe found.
        found: String,
    },

    /// A page handed to the writer is not a valid image of the page it claims to be.
    #[error("{page_id}: cannot write this page image: {reason}")]
    BadPage {
        /// The page.
        page_id: PageId,
        /// What is wrong.
        reason: String,
    },

    /// A buffer passed to a read has the wrong size.
    #[error("{page_id}: read buffer is {len} bytes, the page size is {page_size}")]
    BadBuffer {
        /// The page.
        page_id: PageId,
        /// The buffer length.
        len: usize,
        /// The page size.
        page_size: PageSize,
    },

    /// The doublewrite area's own structures are damaged in a way that could hide page images
    /// (e.g. its header is unreadable while its slots hold data), or it was made for another page
    /// size.
    #[error("doublewrite area {file}: {reason}")]
    DoublewriteArea {
        /// The area's file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// A page (read from the data file or found in the doublewrite area) carries an LSN above
    /// what the redo log holds durably. Pages are written only after the log is durable up to
    /// their LSN, so durable log data was lost: the page is refused, never used.
    #[error("{file}: {page_id} has LSN {page_lsn}, above the end of the durable redo log ({log_durable}): durable log data was lost (page LSN in the future)")]
    PageLsnInFuture {
        /// The data file (or doublewrite area).
        file: PathBuf,
        /// The page.
        page_id: PageId,
        /// The page's LSN.
        page_lsn: Lsn,
        /// How far the log is durable.
        log_durable: Lsn,
    },

    /// A page id that no file can hold (its byte offset would pass `i64::MAX`): a damaged page
    /// pointer. Refused before any I/O.
    #[error("{file}: {page_id} is out of range for {page_size} pages (its offset would pass the largest file offset)")]
    PageOutOfRange {
        /// The data file.
        file: PathBuf,
        /// The page.
        page_id: PageId,
        /// The page size.
        page_size: PageSize,
    },

    /// A page read back older than the writer wrote it, before any data sync covered that
    /// write: the device lost the write (a buffered write that failed in write-back). The read
    /// is refused and the writer poisoned; a reopen recovers the page from the redo log.
    #[error("{file}: {page_id} read back with LSN {read}, older than the LSN {written} written to it since the last data sync: the device lost a write; reopen the store to recover it from the redo log")]
    LostWrite {
        /// The data file.
        file: PathBuf,
        /// The page.
        page_id: PageId,
        /// The LSN of the page as written.
        written: Lsn,
        /// The LSN of the page as read.
        read: Lsn,
    },

    /// The configuration cannot work.
    #[error("invalid page writer configuration: {0}")]
    Config(String),
}

/// Result with [`FlushError`].
pub type Result<T, E = FlushError> = std::result::Result<T, E>;

impl FlushError {
    /// True when stored bytes are damaged: a page that failed its checks
    /// ([`FlushError::Corruption`]) or a damaged doublewrite area
    /// ([`FlushError::DoublewriteArea`]).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            FlushError::Corruption(_)
                | FlushError::DoublewriteArea { .. }
                | FlushError::PageLsnInFuture { .. }
                | FlushError::PageOutOfRange { .. }
        )
    }
}
