//! Which transactions of which store this thread holds, so a call that could only wait for this
//! same thread — a write or checkpoint while it holds a read transaction, anything while it
//! holds a write transaction — is [`Error::WouldDeadlock`], never a hang (issue 13: `let _r =
//! s.read()?; s.write()?;` on one thread used to wait forever).
//!
//! Invariant: an entry is pushed when a transaction takes the store lock and popped when it
//! releases it (the mark is dropped with the lock guard), on the thread that holds it (the
//! guards cannot move between threads). A store is named by its serial ([`next_serial`]), never
//! by its address: a transaction that is `mem::forget`-ed leaves its entry behind, and a store
//! opened later at the freed address must not inherit it (it did: a reopened store refused its
//! first read as `WouldDeadlock`). Tests: `tests/errors.rs` `a_thread_never_waits_for_itself`
//! and `a_forgotten_transaction_does_not_follow_a_reopen`.

use crate::{Error, Result};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Serials handed to stores as they open; never reused within a process.
static SERIALS: AtomicU64 = AtomicU64::new(1);

/// A serial no other store of this process has or will have.
pub(crate) fn next_serial() -> u64 {
    SERIALS.fetch_add(1, Ordering::Relaxed)
}

/// What a thread holds of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

thread_local! {
    static HELD: RefCell<Vec<(u64, Kind)>> = const { RefCell::new(Vec::new()) };
}

/// A transaction's entry; removed when dropped.
pub(crate) struct Held {
    store: u64,
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
pub(crate) fn mark(store: u64, kind: Kind) -> Held {
    HELD.with(|h| h.borrow_mut().push((store, kind)));
    Held { store, kind }
}

/// Refuses `call` (which takes `store`'s lock as `wants`) when this thread holds a transaction
/// of `store` it would wait for.
pub(crate) fn check(store: u64, wants: Kind, call: &'static str) -> Result<()> {
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
