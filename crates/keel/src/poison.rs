//! Why a store takes no more writes. The first failed write or sync of the log or the page
//! writer poisons that layer (a failed fsync is never retried as if it had worked); the store
//! keeps the first such error's text and whether it was a full disk, and every later write,
//! commit or checkpoint returns [`Error::Poisoned`] with that cause. Reopening recovers.
//!
//! Invariant: the cause is set once (the first failure wins; later ones do not overwrite it).

use crate::Error;
use keel_flush::PageWriter;
use keel_redo_log::RedoLog;

/// Why the store takes no more writes: the first write or sync failure, as reported.
#[derive(Clone, Debug)]
pub(crate) struct PoisonCause {
    pub(crate) cause: String,
    pub(crate) no_space: bool,
}

impl PoisonCause {
    pub(crate) fn of(err: &Error) -> PoisonCause {
        PoisonCause {
            cause: err.to_string(),
            no_space: err.is_no_space(),
        }
    }

    pub(crate) fn error(&self) -> Error {
        Error::Poisoned {
            cause: self.cause.clone(),
            no_space: self.no_space,
        }
    }
}

pub(crate) fn poison_reason(
    log: &RedoLog,
    writer: &PageWriter,
    err: &Error,
) -> Option<PoisonCause> {
    if log.is_poisoned() || writer.is_poisoned() {
        Some(PoisonCause::of(err))
    } else {
        None
    }
}
