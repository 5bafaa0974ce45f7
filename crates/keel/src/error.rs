//! The store's error type.

use keel_page::{Lsn, PageId};
use std::path::PathBuf;
use std::sync::Arc;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a store operation can fail with.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a `_` arm. Use the
/// predicates rather than matching nested layers: [`Error::is_corruption`] is true for every
/// variant (at any depth) that means stored bytes are damaged, [`Error::is_no_space`] for a full
/// device, [`Error::is_poisoned`] when the store takes no more writes. The nested error types
/// ([`LogError`](crate::LogError), [`FlushError`](crate::FlushError),
/// [`PoolError`](crate::PoolError), [`BTreeError`](crate::BTreeError),
/// [`IoError`](crate::IoError)) are re-exported so callers can match them too.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A B-tree operation failed: a node's bytes are inconsistent
    /// ([`BTreeError::Corrupt`](keel_btree::BTreeError::Corrupt), a corruption), or its storage
    /// failed in a way no other variant describes.
    #[error(transparent)]
    BTree(keel_btree::BTreeError),
    /// A page pointer read from disk (a B-tree child or an overflow link) leads to a page that
    /// cannot be read or is not what the pointer promised: names the page and slot that held the
    /// pointer, the target page, and the cause.
    #[error("{page_id}, slot {slot}: pointer to {target}: {source}")]
    BadPointer {
        /// The page holding the pointer.
        page_id: PageId,
        /// The slot of the pointer in that page.
        slot: usize,
        /// The page it points to.
        target: PageId,
        /// What went wrong following it.
        #[source]
        source: Box<Error>,
    },
    /// The key is longer than this store's page size allows. The limit is
    /// [`max_key_len`](crate::max_key_len)`(page_size)`: 976 bytes on 4 KiB pages, 2,000 on
    /// 8 KiB, 4,048 on 16 KiB (a node must always hold at least four cells). Nothing was changed.
    #[error("key of {len} bytes is longer than the maximum of {max} bytes for this page size")]
    KeyTooLarge {
        /// Key length.
        len: usize,
        /// The limit for this page size.
        max: usize,
    },
    /// A table name (a key of the catalog) is longer than this store's page size allows: the
    /// limit is [`max_key_len`](crate::max_key_len)`(page_size)` bytes of UTF-8. Nothing was
    /// changed; the transaction goes on.
    #[error(
        "table name of {len} bytes is longer than the maximum of {max} bytes for this page size"
    )]
    TableNameTooLong {
        /// Name length in bytes.
        len: usize,
        /// The limit for this page size.
        max: usize,
    },
    /// The value is longer than [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) (4 GiB - 1; values
    /// larger than a page fraction live in overflow chains). Nothing was changed.
    #[error("value of {len} bytes is longer than the maximum of {max} bytes")]
    ValueTooLarge {
        /// Value length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value's overflow pages and its leaf alone are more pages than the pool lets one
    /// write transaction hold (its pages stay in memory until it commits), so no transaction of
    /// this store can insert it. Nothing was changed; the transaction goes on. A larger
    /// `pool_size` takes it.
    #[error("value of {len} bytes needs {pages} pages (its overflow chain and leaf), more than the {limit} the pool lets one transaction hold; nothing was changed (raise pool_size)")]
    ValueTooLargeForPool {
        /// Value length.
        len: usize,
        /// The pages it needs at least.
        pages: usize,
        /// The most pages one transaction may hold.
        limit: usize,
    },
    /// [`Table::add_i64`](crate::Table::add_i64) found a value under the key that is not a
    /// 64-bit integer (8 bytes, little-endian). Nothing was changed (at commit: nothing of the
    /// transaction was committed).
    #[error("table {table:?}: the value under key 0x{key} is {len} bytes, not an 8-byte integer to add to")]
    NotAnInteger {
        /// The table.
        table: String,
        /// The key, in hex.
        key: String,
        /// The value's length.
        len: usize,
    },
    /// A setting is invalid or does not match the existing store.
    #[error("configuration: {0}")]
    Config(String),
    /// An earlier write or sync failed (a full device, an I/O error): the store takes no more
    /// writes, because data written since the last successful sync may not be durable and a
    /// failed sync is never retried as if it had worked. Reopen the store to recover everything
    /// that was acknowledged.
    #[error("the store takes no more writes: {cause}; reopen it to recover")]
    Poisoned {
        /// The first failure below the store: the operation, the file and the original error
        /// (`cause.is_no_space()` tells a full device from a failed sync).
        #[source]
        cause: keel_io::PoisonCause,
    },
    /// The store files are not a Keel store, or of another format version.
    #[error("{path}: {detail}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A transaction's redo (with full page images) is larger than the log can take between
    /// checkpoints; it was rolled back. Use smaller transactions, larger or more log files (a
    /// store's log keeps the size it was made with), or, in full-page-writes mode, where every
    /// page a transaction changes may cost a full image, another torn-page protection.
    #[error("transaction too large for the redo log: up to {redo_bytes} bytes of redo, room for {room}; it was rolled back (split the transaction; a store made with larger log files (log_file_size, log_file_count) has more room; in full-page-writes mode each page a transaction changes may cost a full page image, which torn_page = doublewrite or atomic do not log)")]
    TxnTooLargeForLog {
        /// Worst-case redo bytes of the transaction.
        redo_bytes: u64,
        /// What the log leaves one transaction.
        room: u64,
    },
    /// Another `Store` holds the directory: another process (`pid`) or another open in this
    /// process. A store has one opener at a time (read-only opens share).
    #[error("{dir}: the store is already open{}", holder(*pid, *readers))]
    AlreadyOpen {
        /// The store directory.
        dir: PathBuf,
        /// The holder's process id, where known.
        pid: Option<u32>,
        /// The holders are read-only openers (which record no pid).
        readers: bool,
    },
    /// The directory holds no store, and the open was not allowed to create one
    /// (`create = false`, or `read_only`). Nothing was created.
    #[error("{dir}: not a Keel store ({detail}); nothing was created")]
    NotAStore {
        /// The directory.
        dir: PathBuf,
        /// What was found.
        detail: String,
    },
    /// The directory holds part of a store but a piece is missing (the identity file, the data
    /// file, the log): the store is refused, never re-created over what is there.
    #[error("{dir}: incomplete store: {missing} is missing (found: {found}); refusing to open or re-create it")]
    IncompleteStore {
        /// The directory.
        dir: PathBuf,
        /// The missing piece.
        missing: String,
        /// The pieces that are there.
        found: String,
    },
    /// A read-only open found a store that needs more recovery than it can do in memory (the
    /// recovered pages would fill more than 3/4 of its pool), so it is refused.
    #[error("{dir}: the store needs recovery ({detail}); open it read-write once to recover it")]
    NeedsRecovery {
        /// The directory.
        dir: PathBuf,
        /// What recovery would do.
        detail: String,
    },
    /// This thread already holds a write transaction of this store that the call would wait
    /// for (a write or a checkpoint): refused instead of waiting forever. Commit or drop the
    /// transaction first. (Reads never wait: a read transaction is a snapshot.)
    #[error("this thread {holds}: {call} would wait for it forever")]
    WouldDeadlock {
        /// What the thread holds.
        holds: &'static str,
        /// The call refused.
        call: &'static str,
    },
    /// A read transaction's snapshot was refused: the old page versions it needs passed the
    /// version budget (`Config::snapshot_budget`), so the oldest snapshots were dropped rather
    /// than stall writers or grow memory without bound. Retry with a new read transaction.
    #[error("snapshot at {lsn} is too old: the page versions it needs passed the budget of {budget} bytes (start a new read transaction)")]
    SnapshotTooOld {
        /// The snapshot's commit LSN.
        lsn: Lsn,
        /// The budget, bytes.
        budget: u64,
    },
    /// A concurrent write transaction ([`Store::write_concurrent`](crate::Store::write_concurrent))
    /// read something that another transaction changed and committed after this one's
    /// snapshot, so committing it would not be serializable: nothing was committed. Run the
    /// transaction again (its logic, on a new transaction); [`Error::is_conflict`] tells it from
    /// other errors.
    #[error("write conflict: {what} changed after this transaction's snapshot at {snapshot}; nothing was committed (retry the transaction)")]
    Conflict {
        /// The read that no longer holds (table, key or range).
        what: String,
        /// The snapshot the transaction read at.
        snapshot: Lsn,
    },
    /// A write was asked of a store opened read-only.
    #[error("{dir}: the store is open read-only")]
    ReadOnly {
        /// The directory.
        dir: PathBuf,
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
            keel_buffer_pool::PoolError::Store(inner) => {
                match inner.downcast::<keel_flush::FlushError>() {
                    Ok(f) => Error::Flush(*f),
                    Err(other) => match other.downcast::<keel_io::IoError>() {
                        Ok(io) => Error::Io(*io),
                        Err(other) => Error::Pool(keel_buffer_pool::PoolError::Store(other)),
                    },
                }
            }
            keel_buffer_pool::PoolError::Log(inner) => {
                match inner.downcast::<keel_redo_log::LogError>() {
                    Ok(l) => Error::Log(*l),
                    Err(other) => Error::Pool(keel_buffer_pool::PoolError::Log(other)),
                }
            }
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
            keel_buffer_pool::PoolError::SnapshotTooOld { lsn, budget } => {
                Error::SnapshotTooOld { lsn, budget }
            }
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
            keel_btree::BTreeError::BadPointer {
                page_id,
                slot,
                target,
                source,
            } => {
                let cause = Error::from(*source);
                if cause.is_corruption() || matches!(cause, Error::Io(_)) {
                    Error::BadPointer {
                        page_id,
                        slot,
                        target,
                        source: Box::new(cause),
                    }
                } else {
                    // Not about the pointer (a full pool, a poisoned store): the error itself.
                    cause
                }
            }
            keel_btree::BTreeError::KeyTooLarge { len, max } => Error::KeyTooLarge { len, max },
            keel_btree::BTreeError::ValueTooLarge { len } => Error::ValueTooLarge {
                len,
                max: crate::MAX_VALUE_LEN,
            },
            other => Error::BTree(other),
        }
    }
}

impl Error {
    /// True when stored bytes are damaged, whichever layer found it: a page that failed its
    /// checks ([`Error::Corruption`]), a damaged B-tree node, log block, log header, doublewrite
    /// area or store identity ([`Error::Format`]), or redo that cannot be applied
    /// ([`Error::Recovery`]), or a missing piece of a store ([`Error::IncompleteStore`]). Such
    /// data is never used; the error names the file and the page, block or LSN.
    pub fn is_corruption(&self) -> bool {
        match self {
            Error::Corruption { .. }
            | Error::Format { .. }
            | Error::Recovery { .. }
            | Error::IncompleteStore { .. } => true,
            Error::BadPointer { source, .. } => {
                source.is_corruption() || source.is_pointer_out_of_range()
            }
            Error::Log(e) => e.is_corruption(),
            Error::Flush(e) => e.is_corruption(),
            Error::Pool(e) => pool_is_corruption(e),
            Error::BTree(e) => btree_is_corruption(e),
            _ => false,
        }
    }

    fn is_pointer_out_of_range(&self) -> bool {
        // An I/O error following a pointer (e.g. an impossible offset) means the pointer is bad.
        matches!(self, Error::Io(_))
    }

    /// True when a write failed because the device is full (ENOSPC), directly or as the cause
    /// of the store's poisoning.
    pub fn is_no_space(&self) -> bool {
        if let Error::Poisoned { cause } = self {
            return cause.is_no_space();
        }
        for e in self.chain() {
            // A layer's transparent `Io` variant forwards `source()` past its `IoError` too,
            // so each layer's error is asked for it here.
            let io = e
                .downcast_ref::<keel_io::IoError>()
                .or_else(|| e.downcast_ref::<Arc<keel_io::IoError>>().map(|a| &**a))
                .or_else(|| match e.downcast_ref::<keel_redo_log::LogError>() {
                    Some(keel_redo_log::LogError::Io(io)) => Some(io),
                    _ => None,
                })
                .or_else(|| match e.downcast_ref::<keel_flush::FlushError>() {
                    Some(keel_flush::FlushError::Io(io)) => Some(io),
                    _ => None,
                });
            if io.is_some_and(keel_io::IoError::is_no_space) {
                return true;
            }
            if let Some(cause) = e.downcast_ref::<keel_io::PoisonCause>() {
                return cause.is_no_space();
            }
        }
        false
    }

    /// This error and its sources, outermost first. Transparent variants forward `source()`
    /// past the error they wrap, so the walk starts from that one.
    fn chain(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        let start: &(dyn std::error::Error + 'static) = match self {
            Error::Io(e) => e,
            Error::Log(e) => e,
            Error::Flush(e) => e,
            Error::Pool(e) => e,
            Error::BTree(e) => e,
            other => other,
        };
        std::iter::successors(Some(start), |e| e.source())
    }

    /// True when a transaction was refused for its size: [`Error::TxnTooLargeForLog`],
    /// [`Error::ValueTooLargeForPool`] (that row refused, the transaction usable), or the
    /// pool's `TxnTooLarge` (more pages than the pool lets one transaction hold) at any depth,
    /// also as the cause of a transaction failed part-way (`TxnFailed`, what every later use
    /// and the commit return). Nothing of the transaction is committed; a smaller one, or a
    /// larger pool or log, works.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            Error::TxnTooLargeForLog { .. } | Error::ValueTooLargeForPool { .. }
        ) || self.chain().any(|e| {
            matches!(
                e.downcast_ref(),
                Some(
                    keel_buffer_pool::PoolError::TxnTooLarge { .. }
                        | keel_buffer_pool::PoolError::TxnFailed {
                            too_large: true,
                            ..
                        }
                )
            ) || e
                .downcast_ref::<Error>()
                .is_some_and(|inner| !std::ptr::eq(inner, self) && inner.is_too_large())
        })
    }

    /// True for a write transaction that failed part-way through one of its operations
    /// (the pool's `TxnFailed`, design invariant 12): every later use and its commit are
    /// refused; nothing of it is committed, and it can only be rolled back.
    pub fn is_txn_failed(&self) -> bool {
        matches!(
            self,
            Error::Pool(keel_buffer_pool::PoolError::TxnFailed { .. })
        )
    }

    /// Whether this is a [`Error::Conflict`]: a concurrent write transaction that can be run
    /// again (nothing of it was committed).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Whether the transaction can simply be run again on a new one: a [`Error::Conflict`], or
    /// a [`Error::SnapshotTooOld`] (a concurrent writer's snapshot dropped for the version
    /// budget: nothing of it is committed either). A retry loop for concurrent writers asks
    /// this, not [`is_conflict`](Self::is_conflict) alone.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict { .. } | Error::SnapshotTooOld { .. })
    }

    /// True for [`Error::Poisoned`], or a lower layer's refusal after its own failed write or
    /// sync: the store takes no more writes until it is reopened.
    pub fn is_poisoned(&self) -> bool {
        match self {
            Error::Poisoned { .. } => true,
            Error::Log(e) => e.is_poisoned(),
            Error::Flush(e) => matches!(e, keel_flush::FlushError::Poisoned { .. }),
            _ => false,
        }
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

/// Who holds a store, for [`Error::AlreadyOpen`]: read-only openers (which record no pid), this
/// process (a `Store` not yet dropped, or a `ReadTxn` of one, which keeps it open), another
/// process, or unknown.
fn holder(pid: Option<u32>, readers: bool) -> String {
    if readers {
        return " read-only (keel check, keel info, keel backup or a read-only Store)".to_string();
    }
    match pid {
        Some(p) if p == std::process::id() => format!(
            " by this process ({p}): a Store of it, or a ReadTxn that outlives its Store, is still alive"
        ),
        Some(p) => format!(" (held by process {p})"),
        None => String::new(),
    }
}

fn pool_is_corruption(e: &keel_buffer_pool::PoolError) -> bool {
    e.is_corruption()
}

fn btree_is_corruption(e: &keel_btree::BTreeError) -> bool {
    match e {
        keel_btree::BTreeError::Corrupt { .. } | keel_btree::BTreeError::BadPointer { .. } => true,
        keel_btree::BTreeError::Storage(inner) => {
            if let Some(e) = inner.downcast_ref::<Error>() {
                e.is_corruption()
            } else if let Some(p) = inner.downcast_ref::<keel_buffer_pool::PoolError>() {
                pool_is_corruption(p)
            } else {
                false
            }
        }
        _ => false,
    }
}
