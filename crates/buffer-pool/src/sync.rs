//! The synchronisation primitives of module `versions`, behind one name so that a test build can
//! swap them for a model checker's.
//!
//! Answers: which mutex and atomics `versions` runs on. In every normal build (debug, test,
//! release) they are exactly `parking_lot::Mutex` and `std::sync::atomic`'s types: this module
//! only re-exports them. Built with `RUSTFLAGS="--cfg keel_shuttle"` (and only then, the
//! `shuttle` dependency being declared under `[target.'cfg(keel_shuttle)'.dependencies]`) they
//! are [shuttle](https://docs.rs/shuttle)'s, so that `tests/versions_shuttle.rs` can explore the
//! interleavings of snapshots, seals, publishes and collections deterministically; the mutex is
//! then wrapped so its `lock` has parking_lot's signature (no poisoning, no `Result`).
//!
//! `Arc` is `std::sync::Arc` in both builds: `shuttle::sync::Arc` is a re-export of it.
//!
//! Invariant: code under `cfg(keel_shuttle)` must only ever run inside a shuttle execution
//! (shuttle's primitives panic elsewhere), so that build is for `tests/versions_shuttle.rs`
//! alone; the crate's other tests run in the normal build.

pub(crate) use std::sync::Arc;

#[cfg(not(keel_shuttle))]
pub(crate) use parking_lot::Mutex;
#[cfg(not(keel_shuttle))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(keel_shuttle)]
pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(keel_shuttle)]
pub(crate) use shuttle_mutex::Mutex;

#[cfg(keel_shuttle)]
mod shuttle_mutex {
    use std::sync::PoisonError;

    /// `shuttle::sync::Mutex` with parking_lot's `lock` (a poisoned lock is taken as it is:
    /// parking_lot has no poisoning, and a panic fails the shuttle test anyway).
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

    impl<T> Mutex<T> {
        #[track_caller]
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(shuttle::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> shuttle::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }
}
