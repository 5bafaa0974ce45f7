//! Joining a background thread from wherever its owner is dropped.
//!
//! The engine's threads (the log's flusher, the store's checkpointer, the pool's page cleaner)
//! are joined when their owner drops, and the owner's last handle may drop on one of those very
//! threads: a future's waker that they run belongs to the executor, and may drop a task that
//! holds the last handle of the store. Joining the current thread fails (`EDEADLK`, which std
//! turns into a panic) or waits forever; such a thread is told to stop like the others and
//! exits when it returns to its loop.

use std::thread::JoinHandle;

/// Joins `t`, unless it is the current thread: that one is left to finish on its own (its
/// owner has already told it to stop).
pub fn join_unless_current<T>(t: JoinHandle<T>) {
    if t.thread().id() == std::thread::current().id() {
        return;
    }
    let _ = t.join();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    /// A thread given its own handle returns from the join (a plain `join` panics: EDEADLK);
    /// another thread's handle is joined.
    #[test]
    fn a_thread_joining_itself_returns() {
        let (handle_tx, handle_rx) = channel::<JoinHandle<()>>();
        let (done_tx, done_rx) = channel();
        let t = std::thread::spawn(move || {
            if let Ok(me) = handle_rx.recv() {
                join_unless_current(me);
                done_tx.send(()).ok();
            }
        });
        handle_tx.send(t).ok();
        assert!(done_rx.recv_timeout(Duration::from_secs(10)).is_ok());
        let (tx, rx) = channel();
        join_unless_current(std::thread::spawn(move || tx.send(()).ok()));
        assert!(rx.try_recv().is_ok(), "the other thread had finished");
    }
}
