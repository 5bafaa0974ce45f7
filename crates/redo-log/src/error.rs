//! The error type of keel-redo-log.

use keel_io::{IoError, PoisonCause};
use keel_page::Lsn;
use std::path::PathBuf;

/// Everything that can go wrong with the redo log. Every variant names the file, directory or LSN
/// it is about.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An I/O call failed (the error names the file).
    #[error(transparent)]
    Io(#[from] IoError),

    /// An earlier write or sync of the log failed, so the log refuses everything from then on:
    /// data written since the last successful sync may be lost, and a failed sync is never
    /// retried as if it had worked. Reopen the log to recover what is durable.
    /// The call whose write or sync failed returns this too (the original error inside).
    #[error("the redo log is poisoned: {cause}; no further writes")]
    Poisoned {
        /// The first failure: `"write"` or `"sync"`, the log file, the original error.
        #[source]
        cause: PoisonCause,
    },

    /// The log was shut down.
    #[error("the redo log in {dir} is closed")]
    Closed {
        /// The log directory.
        dir: PathBuf,
    },

    /// The configuration is not usable.
    #[error("invalid redo log configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },

    /// The log on disk was created with a different setting than the one configured now.
    #[error("{path}: the log was created with {field} = {stored}, but {configured} is configured")]
    ConfigMismatch {
        /// The log header file.
        path: PathBuf,
        /// Which setting.
        field: &'static str,
        /// The value stored in the log header.
        stored: String,
        /// The value in the configuration.
        configured: String,
    },

    /// O_DIRECT writes whole log blocks, so a block must be at least the device's logical block
    /// size.
    #[error("{dir}: sync method o_direct needs log blocks of at least the device's logical block size ({logical_block_size} bytes); the configured log block size is {block_size} bytes")]
    BlockBelowDeviceBlock {
        /// The log directory.
        dir: PathBuf,
        /// The configured log block size.
        block_size: usize,
        /// What the device reports.
        logical_block_size: u32,
    },

    /// The log header file is damaged (both checkpoint slots, or the static block).
    #[error("{path}: corrupt log header: {reason}")]
    CorruptHeader {
        /// The log header file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// A piece of an existing log is missing (e.g. `log.header` deleted): the log is never
    /// re-created over the store's data.
    #[error(
        "{path}: {what} is missing; the store's log cannot be opened (it is never re-created)"
    )]
    Missing {
        /// The missing file.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },

    /// A log file is missing or has the wrong size.
    #[error("{path}: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// Durable log data that recovery needs is unreadable (the checkpoint points into a block that
    /// fails verification). Synced data never tears under the fault model, so this is media
    /// corruption; the log refuses to guess.
    #[error("{path}: the log is corrupt at {lsn}: {reason}")]
    Corrupt {
        /// The log file.
        path: PathBuf,
        /// The LSN recovery needed.
        lsn: Lsn,
        /// What is wrong.
        reason: String,
    },

    /// The recovery scan met a damaged block that had been durable — a later valid block proves
    /// it — so the log did not end there: what follows it would be silently lost. The open is
    /// refused (a torn tail, which only ever holds unsynced data, still opens). To give the rest
    /// of the log up explicitly, open with `accept_loss` ([`crate::RedoLog::open_mode`]).
    #[error("{path}: log block {block} (offset {offset}, {lsn}) is damaged in the middle of durable log data: {evidence}; refusing to open (the data after it would be lost; see accept_log_loss)")]
    CorruptMiddle {
        /// The log file holding the block.
        path: PathBuf,
        /// The block number.
        block: u64,
        /// Its byte offset in the file.
        offset: u64,
        /// The LSN where the block's payload starts.
        lsn: Lsn,
        /// Why the block is known to have been durable.
        evidence: String,
    },

    /// A group is larger than the log can ever hold.
    #[error(
        "a record group of {bytes} bytes cannot be logged: the limit is {limit} bytes ({why})"
    )]
    GroupTooLarge {
        /// The encoded size of the group.
        bytes: u64,
        /// The largest group the log accepts.
        limit: u64,
        /// Which limit.
        why: &'static str,
    },

    /// `checkpoint` was asked for an LSN the log has not reached.
    #[error("cannot checkpoint at {lsn}: the log ends at {end}")]
    CheckpointBeyondEnd {
        /// The requested checkpoint LSN.
        lsn: Lsn,
        /// The end of the log.
        end: Lsn,
    },

    /// The flusher thread could not be started.
    #[error("cannot start the redo log flusher thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Result with [`LogError`].
pub type Result<T, E = LogError> = std::result::Result<T, E>;

impl LogError {
    /// True for [`LogError::Poisoned`].
    pub fn is_poisoned(&self) -> bool {
        matches!(self, LogError::Poisoned { .. })
    }

    /// True when durable log bytes are damaged or gone: [`LogError::Corrupt`] (a block recovery
    /// needs fails verification), [`LogError::CorruptMiddle`], [`LogError::CorruptHeader`],
    /// [`LogError::Missing`] or [`LogError::BadFile`] (a log file missing or of the wrong size:
    /// it was `false`, where the design promises every missing or damaged store file is
    /// corruption — a tester).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            LogError::Corrupt { .. }
                | LogError::CorruptHeader { .. }
                | LogError::Missing { .. }
                | LogError::CorruptMiddle { .. }
                | LogError::BadFile { .. }
        )
    }
}
