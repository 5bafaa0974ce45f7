//! Which stores this thread holds a write transaction of, so a call that could only wait for
//! this same thread — a write or a checkpoint while it holds a write transaction — is
//! [`Error::WouldDeadlock`], never a hang. (Read transactions are snapshots that take no lock:
//! reading while holding a write transaction, or writing while holding a read transaction,
//! never waits, so neither is marked.)
//!
//! Invariant: an entry is pushed when a write transaction takes the store's writer lock and
//! popped when it releases it (the mark is dropped with the lock guard), on the thread that
//! holds it (the guards cannot move between threads). A store is named by its serial
//! ([`next_serial`]), never by its address: a transaction that is `mem::forget`-ed leaves its
//! entry behind, and a store opened later at the freed address must not inherit it (it did: a
//! reopened store refused its first write as `WouldDeadlock`). Tests: `tests/errors.rs`
//! `a_thread_never_waits_for_itself` and `a_forgotten_transaction_does_not_follow_a_reopen`.

use crate::{Error, Result};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Serials handed to stores as they open; never reused within a process.
static SERIALS: AtomicU64 = AtomicU64::new(1);

/// A serial no other store of this process has or will have.
pub(crate) fn next_serial() -> u64 {
    SERIALS.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    static HELD: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// A transaction's entry; removed when dropped.
pub(crate) struct Held {
    store: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&e| e == self.store) {
                h.swap_remove(i);
            }
        });
    }
}

/// Records that this thread now holds a write transaction of `store`.
pub(crate) fn mark(store: u64) -> Held {
    HELD.with(|h| h.borrow_mut().push(store));
    Held { store }
}

/// Refuses `call` (which takes `store`'s writer lock) when this thread holds a write
/// transaction of `store`.
pub(crate) fn check(store: u64, call: &'static str) -> Result<()> {
    if HELD.with(|h| h.borrow().contains(&store)) {
        return Err(Error::WouldDeadlock {
            holds: "holds a write transaction of this store",
            call,
        });
    }
    Ok(())
}
