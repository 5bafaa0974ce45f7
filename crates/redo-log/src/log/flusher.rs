//! The flusher thread (writes and syncs on request, on every completion in `Buffered` mode, and
//! every `flush_interval` while something completed is not yet durable; with nothing to do it
//! sleeps until an append completes) and [`Durable`], the future that resolves when the log
//! reaches an LSN. The thread takes the writer like any leader (see `group_commit.rs`).

use super::*;

/// The flusher thread: writes and syncs on request (futures, waiters when `waiter_flush` is off,
/// appenders waiting for buffer room), on every completion in `Buffered` mode, and every
/// `flush_interval`.
pub(super) fn flusher_main(sh: Arc<Shared>) {
    let interval = sh.cfg.flush_interval;
    let mut last_sync = Instant::now();
    loop {
        let (sync, want, exit) = {
            let mut g = sh.sig.lock();
            loop {
                let durable = sh.durable.load(SeqCst);
                let written = sh.written.load(SeqCst);
                let completed = sh.completed.load(SeqCst);
                if g.shutdown {
                    break (true, completed, true);
                }
                if sh.poison.is_poisoned() {
                    sh.work_cv.wait(&mut g);
                    continue;
                }
                if g.want_durable > durable {
                    break (true, g.want_durable, false);
                }
                let due = last_sync.elapsed() >= interval;
                if due && completed > durable {
                    break (true, completed, false);
                }
                if due {
                    last_sync = Instant::now();
                }
                if g.space_wanted && completed > written {
                    g.space_wanted = false;
                    break (false, completed, false);
                }
                if g.want_written > written {
                    break (false, g.want_written, false);
                }
                if sh.cfg.durability == Durability::Buffered && completed > written {
                    break (false, completed, false);
                }
                if completed > durable {
                    // Completed but not durable: due at the next interval.
                    // An interval past the clock's range (`Duration::MAX`) waits for a wake-up.
                    match last_sync.checked_add(interval) {
                        Some(at) => {
                            sh.work_cv.wait_until(&mut g, at);
                        }
                        None => sh.work_cv.wait(&mut g),
                    }
                } else {
                    // Nothing to make durable: sleep until an append completes (`complete`
                    // wakes a parked flusher under this lock, so no completion is missed) or
                    // another request comes, instead of waking every interval for nothing. The
                    // interval then counts from that wake-up.
                    g.flusher_parked = true;
                    sh.work_cv.wait(&mut g);
                    g.flusher_parked = false;
                    last_sync = Instant::now();
                }
                Counters::add(&sh.stats.flusher_wakeups, 1);
            }
        };
        if exit && sh.poison.is_poisoned() {
            return;
        }
        if sync && !exit && !sh.cfg.group_commit_delay.is_zero() {
            std::thread::sleep(sh.cfg.group_commit_delay);
        }
        let want = want.min(sh.reserved.load(SeqCst));
        let _ = sh.with_io(|w| sh.flush_locked(w, sync, want));
        if sync {
            last_sync = Instant::now();
        }
        if exit {
            return;
        }
    }
}

/// A future resolving when the log is durable (or, for [`RedoLog::committed`] in `Buffered`
/// mode, written) up to an LSN. `'static`, `Send`; it never blocks: the flusher thread does the
/// I/O and wakes it.
#[derive(Debug)]
pub struct Durable {
    pub(super) sh: Arc<Shared>,
    pub(super) lsn: u64,
    pub(super) written_only: bool,
    pub(super) id: Option<u64>,
}

impl Future for Durable {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let sh = &this.sh;
        if this.lsn == 0 {
            // `Durability::Lazy` (nothing to wait for): as `wait_committed`, which reports a
            // poisoned log (the future said Ok where `commit` said `Poisoned`).
            return Poll::Ready(sh.check_poison());
        }
        let lsn = this.lsn.min(sh.reserved.load(SeqCst));
        let reached = |sh: &Shared| {
            if this.written_only {
                sh.written.load(SeqCst) >= lsn
            } else {
                sh.durable.load(SeqCst) >= lsn
            }
        };
        if reached(sh) {
            return Poll::Ready(Ok(()));
        }
        // A forked child has no flusher: the future would wait for good (a tester's children
        // all hung on a commit's future made before the fork). Refused before any lock.
        if keel_io::os::fork::forked_since(sh.born) {
            return Poll::Ready(Err(crate::LogError::Io(keel_io::IoError::Forked {
                path: sh.dir.clone(),
            })));
        }
        if let Err(e) = sh.check_poison() {
            return Poll::Ready(Err(e));
        }
        let mut g = sh.sig.lock();
        if reached(sh) {
            return Poll::Ready(Ok(()));
        }
        if sh.poison.is_poisoned() {
            drop(g);
            return Poll::Ready(sh.check_poison());
        }
        let id = match this.id {
            Some(id) => id,
            None => {
                let id = g.next_id;
                g.next_id += 1;
                this.id = Some(id);
                id
            }
        };
        let old = g
            .wakers
            .insert(id, (lsn, this.written_only, cx.waker().clone()));
        if this.written_only {
            g.want_written = g.want_written.max(lsn);
        } else {
            g.want_durable = g.want_durable.max(lsn);
        }
        sh.work_cv.notify_all();
        // A waker is dropped with no lock of the log held (see `Sig::ready`).
        drop(g);
        drop(old);
        Poll::Pending
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        // In a forked child its waker stays registered in the child's copy of the log, which
        // nothing reads; the lock is left alone.
        if keel_io::os::fork::forked_since(self.sh.born) {
            return;
        }
        if let Some(id) = self.id {
            // Dropped after the lock (see `Sig::ready`).
            let waker = self.sh.sig.lock().wakers.remove(&id);
            drop(waker);
        }
    }
}
