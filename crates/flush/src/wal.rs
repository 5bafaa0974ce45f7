//! The writer's only dependency on the redo log: make it durable up to an LSN (the WAL rule).
//!
//! Kept as a small trait so tests can put a fake log in front of the writer that records the
//! order of events (docs/design.md invariant 1), and so the writer does not care how the log works.

use crate::error::WalError;
use keel_page::Lsn;
use std::sync::Arc;

/// What the page writer needs from the redo log.
///
/// Contract: after `flush_to(lsn)` returns `Ok`, `durable_lsn() >= lsn`. The writer checks this
/// before any page byte is written, and refuses the batch if it does not hold.
pub trait WalFlush: Send + Sync {
    /// Makes the log durable (written and synced) up to at least `lsn`; blocks until it is.
    fn flush_to(&self, lsn: Lsn) -> Result<(), WalError>;

    /// The LSN up to which the log is durable now.
    fn durable_lsn(&self) -> Lsn;

    /// Records durably that the log had been durable at least up to `lsn` (a data page carries
    /// it, and the log no longer reaches it), so that later opens refuse. `Ok(true)` when the
    /// log is running (started, writable), `Ok(false)` when it is not and nothing was recorded
    /// (an open still recovering; a read-only log; the default, for a fake log).
    ///
    /// # Errors
    /// The record could not be written.
    fn record_durable_at_least(&self, lsn: Lsn) -> Result<bool, WalError> {
        let _ = lsn;
        Ok(false)
    }
}

impl<T: WalFlush + ?Sized> WalFlush for Arc<T> {
    fn flush_to(&self, lsn: Lsn) -> Result<(), WalError> {
        (**self).flush_to(lsn)
    }

    fn durable_lsn(&self) -> Lsn {
        (**self).durable_lsn()
    }

    fn record_durable_at_least(&self, lsn: Lsn) -> Result<bool, WalError> {
        (**self).record_durable_at_least(lsn)
    }
}

impl<T: WalFlush + ?Sized> WalFlush for Box<T> {
    fn flush_to(&self, lsn: Lsn) -> Result<(), WalError> {
        (**self).flush_to(lsn)
    }

    fn durable_lsn(&self) -> Lsn {
        (**self).durable_lsn()
    }

    fn record_durable_at_least(&self, lsn: Lsn) -> Result<bool, WalError> {
        (**self).record_durable_at_least(lsn)
    }
}

/// The real redo log: `flush_to` forces write + sync up to the LSN (or reports the log's poison).
impl WalFlush for keel_redo_log::RedoLog {
    fn flush_to(&self, lsn: Lsn) -> Result<(), WalError> {
        keel_redo_log::RedoLog::flush_to(self, lsn).map_err(|e| Box::new(e) as WalError)
    }

    fn durable_lsn(&self) -> Lsn {
        keel_redo_log::RedoLog::durable_lsn(self)
    }

    fn record_durable_at_least(&self, lsn: Lsn) -> Result<bool, WalError> {
        keel_redo_log::RedoLog::record_durable_at_least(self, lsn)
            .map_err(|e| Box::new(e) as WalError)
    }
}
