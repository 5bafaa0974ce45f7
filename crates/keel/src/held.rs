//! Which transactions of which store this thread holds, so a call that could only wait for this
//! same thread — a write or checkpoint while it holds a read transaction, anything while it
//! holds a write transaction — is [`Error::WouldDeadlock`], never a hang (issue 13: `let _r =
//! s.read()?; s.write()?;` on one thread used to wait forever).
//!
//! Invariant: an entry is pushed when a transaction takes the store lock and popped when it
//! releases it (the mark is dropped with the lock guard), on the thread that holds it (the
//! guards cannot move between threads). Test: `tests/errors.rs`
//! `a_thread_never_waits_for_itself`.

use crate::{Error, Result};
use std::cell::RefCell;

/// What a thread holds of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

thread_local! {
    static HELD: RefCell<Vec<(usize, Kind)>> = const { RefCell::new(Vec::new()) };
}

/// A transaction's entry; removed when dropped.
pub(crate) struct Held {
    store: usize,
    kind: Kind,
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&e| e == (self.store, self.kind)) {
                h.swap_remove(i);
            }
        });
    }
}

/// Records that this thread now holds a `kind` transaction of `store`.
pub(crate) fn mark(store: usize, kind: Kind) -> Held {
    HELD.with(|h| h.borrow_mut().push((store, kind)));
    Held { store, kind }
}

/// Refuses `call` (which takes `store`'s lock as `wants`) when this thread holds a transaction
/// of `store` it would wait for.
pub(crate) fn check(store: usize, wants: Kind, call: &'static str) -> Result<()> {
    let holds = HELD.with(|h| {
        h.borrow()
            .iter()
            .filter(|&&(s, _)| s == store)
            .map(|&(_, k)| k)
            .find(|&k| k == Kind::Write || wants == Kind::Write)
    });
    match holds {
        None => Ok(()),
        Some(k) => Err(Error::WouldDeadlock {
            holds: match k {
                Kind::Read => "holds a read transaction of this store",
                Kind::Write => "holds a write transaction of this store",
            },
            call,
        }),
    }
}
