//! Why a store takes no more writes. The first failed write or sync of the log or the page
//! writer poisons that layer (a failed fsync is never retried as if it had worked); the store
//! keeps the first such error's text and whether it was a full disk, and every later write,
//! commit or checkpoint returns [`Error::Poisoned`] with that cause. Reopening recovers. A layer
//! that poisoned itself on a path whose error reached no caller of the store (a background page
//! write, an eviction whose error the caller dropped) poisons the store at the next begin or
//! commit of a write (`Inner::check_poison`, test `errors.rs:
//! a_full_data_file_refuses_every_later_write`).
//!
//! Invariant: the cause is set once (the first failure wins; later ones do not overwrite it),
//! and it is the layer's own cause, kept whole (`keel_io::PoisonCause`), not the text of
//! whatever error happened to be seen first.

use crate::Error;
use keel_flush::PageWriter;
use keel_io::PoisonCause;
use keel_redo_log::RedoLog;

/// The store's poison: [`keel_io::Poison`], the type the log and the page writer use too.
pub(crate) type StorePoison = keel_io::Poison;

/// The cause that poisons the store after `err`, if a layer below is poisoned: the layer's first
/// failure found in `err`'s chain, else what the log or the page writer holds. `None` when no
/// layer is poisoned (an ordinary error: the store goes on).
pub(crate) fn poison_reason(
    log: &RedoLog,
    writer: &PageWriter,
    err: &Error,
) -> Option<PoisonCause> {
    cause_in(err).or_else(|| layer_cause(log, writer))
}

/// The cause the log or the page writer holds, if either poisoned itself.
pub(crate) fn layer_cause(log: &RedoLog, writer: &PageWriter) -> Option<PoisonCause> {
    log.poison_cause().or_else(|| writer.poison_cause())
}

/// The first [`PoisonCause`] in `err`'s source chain.
pub(crate) fn cause_in(err: &Error) -> Option<PoisonCause> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(c) = e.downcast_ref::<PoisonCause>() {
            return Some(c.clone());
        }
        cur = e.source();
    }
    None
}

/// The error every write returns once the store is poisoned.
pub(crate) fn poisoned(cause: &PoisonCause) -> Error {
    Error::Poisoned {
        cause: cause.clone(),
    }
}
