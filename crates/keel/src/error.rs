//! The store's error type.

use keel_page::{Lsn, PageId};
use std::path::PathBuf;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] keel_io::IoError),
    /// A page failed its checks and could not be repaired: never used as data.
    #[error("corruption in {file}, {page_id}: {detail}")]
    Corruption {
        /// The data file.
        file: PathBuf,
        /// The page.
        page_id: PageId,
        /// What was expected and found (checksums, ids, LSNs).
        detail: String,
    },
    /// The redo log failed (an error naming the file or LSN).
    #[error(transparent)]
    Log(#[from] keel_redo_log::LogError),
    /// The page writer failed.
    #[error(transparent)]
    Flush(#[from] keel_flush::FlushError),
    /// The buffer pool refused (e.g. a transaction larger than the pool).
    #[error(transparent)]
    Pool(keel_buffer_pool::PoolError),
    /// A B-tree node is inconsistent.
    #[error(transparent)]
    BTree(keel_btree::BTreeError),
    /// A setting is invalid or does not match the existing store.
    #[error("configuration: {0}")]
    Config(String),
    /// A sync failed earlier: the store takes no more writes. Reopen it to recover.
    #[error("the store is poisoned after a failed sync ({0}); reopen it to recover")]
    Poisoned(String),
    /// The store files are not a Keel store, or of another format version.
    #[error("{path}: {detail}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A transaction's redo (with full page images) is larger than the log can take between
    /// checkpoints; it was rolled back. Use larger or more log files.
    #[error("transaction too large for the redo log: up to {redo_bytes} bytes of redo, room for {room}; it was rolled back (raise log_file_size or log_file_count)")]
    TxnTooLargeForLog {
        /// Worst-case redo bytes of the transaction.
        redo_bytes: usize,
        /// What the log leaves one transaction.
        room: usize,
    },
    /// A read transaction asked for a table that does not exist.
    #[error("no table named {0:?}")]
    TableNotFound(String),
    /// Recovery met redo it cannot apply.
    #[error("recovery failed at {lsn}: {detail}")]
    Recovery {
        /// Where.
        lsn: Lsn,
        /// Why.
        detail: String,
    },
}

impl From<keel_buffer_pool::PoolError> for Error {
    fn from(e: keel_buffer_pool::PoolError) -> Error {
        match e {
            keel_buffer_pool::PoolError::Corruption(keel_page::PageError::Corruption {
                file,
                page_id,
                detail,
            }) => Error::Corruption {
                file,
                page_id,
                detail: detail.to_string(),
            },
            keel_buffer_pool::PoolError::Unrecoverable {
                file,
                page_id,
                reason,
            } => Error::Corruption {
                file,
                page_id,
                detail: format!("cannot be recovered: {reason}"),
            },
            other => Error::Pool(other),
        }
    }
}

impl From<keel_btree::BTreeError> for Error {
    fn from(e: keel_btree::BTreeError) -> Error {
        match e {
            keel_btree::BTreeError::Storage(inner) => match inner.downcast::<Error>() {
                Ok(e) => *e,
                Err(other) => match other.downcast::<keel_buffer_pool::PoolError>() {
                    Ok(p) => Error::from(*p),
                    Err(other) => Error::BTree(keel_btree::BTreeError::Storage(other)),
                },
            },
            other => Error::BTree(other),
        }
    }
}

impl Error {
    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// True when the store could not open because `torn_page = "atomic"` was asked for and the
    /// file system cannot write a page atomically (the message names what the probe found).
    /// Lets a caller fall back or skip without depending on keel-flush's error type.
    pub fn is_atomic_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Flush(keel_flush::FlushError::AtomicUnavailable { .. })
        )
    }
}
