//! Group commit: which thread writes and syncs the log, which threads wait, and how the writer
//! (the `io` lock: file set, write position, sync state) passes between them.
//!
//! # The writer hand-off
//!
//! ```text
//!                      try_with_io succeeds
//!   committer ──────────────────────────────────────▶ LEADER (holds `io`)
//!   (wait_flushed)                                     │ flush_locked: write completed
//!       │ io busy (another leader or the flusher)       │ groups, sync, publish_but(true)
//!       ▼                                               ▼
//!   QUEUED in durable_waiters / written_waiters     io_released (io_gen += 1)
//!   (under `sig`, keyed by (lsn, ticket);             │ wake every queued thread whose LSN
//!    records its LSN in want_durable/written)         │ is now durable, each once
//!       ▲                                             │
//!       │ still queued after a release ──────────────▶ work_cv.notify_one(): the FLUSHER
//!       │                                             │ thread takes `io` (with_io), syncs
//!       │                                             │ up to want_*, releases: same rules
//!       │ woken (Parker::wake, exactly once)          ▼
//!       └──────────────── covered by `durable` ◀──── publish / io_released
//!
//!   poison (first failed write or sync): every queue is emptied and every waiter woken with
//!   the poison; futures resolve with it; the flusher stops writing.
//! ```
//!
//! A lone committer leads its own sync (no thread switch). Under load the flusher keeps syncing
//! while others queue behind it, so nobody has to be woken before each sync; every release
//! either leaves the queues empty or has the flusher on its way, so no waiter is stranded
//! (`tests/wakeups.rs` turns the hand-off off and shows a waiter stranded).
//!
//! Invariants: `durable <= written <= completed` after every step of `flush_locked` (asserted);
//! the wait-path invariants 1–3 in the parent module's doc.

use super::*;

impl Shared {
    /// Wakes the blocked threads and futures whose LSN `written` / `durable` now covers (all
    /// of them on poison), each exactly once; the others stay queued.
    pub(super) fn publish(&self) {
        self.publish_but(false)
    }

    /// [`Shared::publish`]; with `keep_durable_waiters`, threads waiting for `durable` are left
    /// for [`Shared::io_released`] (the writer's owner calls this right after a sync; they are
    /// woken with one chained wakeup once the writer is free again).
    pub(super) fn publish_but(&self, keep_durable_waiters: bool) {
        let d = self.durable.load(SeqCst);
        let w = self.written.load(SeqCst);
        let poisoned = self.poison.is_poisoned();
        let mut threads = Vec::new();
        {
            let mut g = self.sig.lock();
            if !g.wakers.is_empty() {
                let sig = &mut *g;
                let ready = sig
                    .wakers
                    .extract_if(.., |_, (lsn, written_only, _)| {
                        poisoned || if *written_only { w >= *lsn } else { d >= *lsn }
                    })
                    .map(|(_, (_, _, waker))| waker);
                sig.ready.extend(ready);
            }
            let (d, w) = if poisoned {
                (u64::MAX, u64::MAX)
            } else {
                (d, w)
            };
            if poisoned || !keep_durable_waiters {
                take_upto(&mut g.durable_waiters, d, &mut threads);
            }
            take_upto(&mut g.written_waiters, w, &mut threads);
            if g.ring_sleepers > 0 {
                self.ring_cv.notify_all();
            }
            if poisoned && g.completion_sleepers > 0 {
                self.completion_cv.notify_all();
            }
        }
        for p in threads {
            p.wake();
        }
    }

    /// Wakes the futures [`Shared::publish_but`] found ready. Called with no lock of the log
    /// held (after the writer is released, `io_released`): a waker may run any code of the
    /// executor's, dropping the last handle of the log or of the store on this thread.
    pub(super) fn wake_ready(&self) {
        let ready = std::mem::take(&mut self.sig.lock().ready);
        for w in ready {
            w.wake();
        }
    }

    /// Runs `f` with the writer locked; afterwards wakes the waiters it covered and hands the
    /// writer on if others wait (see [`Shared::io_released`]).
    pub(super) fn with_io<R>(&self, f: impl FnOnce(&mut Writer) -> R) -> R {
        let r = {
            let mut g = self.io.lock();
            f(&mut g)
        };
        self.io_released();
        r
    }

    /// [`Shared::with_io`] if the writer is free now.
    pub(super) fn try_with_io<R>(&self, f: impl FnOnce(&mut Writer) -> R) -> Option<R> {
        let r = {
            let mut g = self.io.try_lock()?;
            f(&mut g)
        };
        self.io_released();
        Some(r)
    }

    /// After the writer was released: bumps the generation (a waiter that failed to take the
    /// writer before this does not go to sleep), wakes the queued threads whose LSN is now
    /// durable, each once, and — with `waiter_flush`, if threads are still queued — hands the
    /// writer to the flusher thread (they recorded what they need in `want_*`). The flusher
    /// keeps syncing while waiters queue up behind its syncs, so under load no sleeping thread
    /// has to be woken before each sync; a single committer still leads itself. Every release
    /// either leaves the queue empty or has the flusher on its way, so no waiter is stranded.
    pub(super) fn io_released(&self) {
        self.io_gen.fetch_add(1, SeqCst);
        let d = self.durable.load(SeqCst);
        let mut ready = Vec::new();
        {
            let mut g = self.sig.lock();
            take_upto(&mut g.durable_waiters, d, &mut ready);
            if self.cfg.waiter_flush
                && !self.no_handoff
                && !(g.durable_waiters.is_empty() && g.written_waiters.is_empty())
            {
                self.work_cv.notify_one();
            }
        }
        Parker::wake_all(ready);
        self.wake_ready();
    }

    /// Seals the tail before a sync (`SealOnSync`): the rest of a partly filled last block is
    /// reserved as a filler. Returns the reserved end.
    pub(super) fn seal_tail(&self, io: &mut Writer) -> u64 {
        let p = self.geo.payload as u64;
        let mut r = self.resv.lock();
        let end = r.end;
        if end.is_multiple_of(p) {
            return end;
        }
        let f = p - end % p;
        r.end = end + f;
        self.reserved.store(r.end, SeqCst);
        drop(r);
        io.fillers.push_back((end, end + f));
        Counters::add(&self.stats.filler_bytes, f);
        self.complete(end, end + f);
        end + f
    }

    pub(super) fn wait_completion(&self, beyond: u64) -> Result<()> {
        let mut g = self.sig.lock();
        g.completion_sleepers += 1;
        while self.completed.load(SeqCst) <= beyond && !self.poison.is_poisoned() {
            self.completion_cv.wait(&mut g);
        }
        g.completion_sleepers -= 1;
        drop(g);
        self.check_poison()
    }

    /// Writes (and with `sync`, syncs) at least up to `want` and everything completed now.
    pub(super) fn flush_locked(&self, io: &mut Writer, sync: bool, want: u64) -> Result<()> {
        self.check_poison()?;
        let mut target = want.max(self.completed.load(SeqCst));
        if sync && self.seal {
            target = target.max(self.seal_tail(io));
        }
        loop {
            let c = self.completed.load(SeqCst);
            let mut upto = c.min(target);
            // Never more than UNSYNCED_MAX written past the durable end (a large group, a burst
            // of Buffered commits): the write stops at the last block boundary within it, the
            // log is synced there — a whole block, so no durable block is written again
            // (invariant 4; a sync mid-block, unsealed, let the next write tear an
            // acknowledged group: test `corrupt_middle.rs`
            // `the_capped_sync_never_leaves_a_durable_block_to_be_written_again`) — and the
            // write goes on.
            let p = self.geo.payload as u64;
            let cap_of = |durable: u64| durable.saturating_add(self.unsynced_max) / p * p;
            let mut cap = cap_of(io.durable);
            if upto > cap {
                if io.w >= cap {
                    self.sync_written(io)?;
                    cap = cap_of(io.durable);
                }
                upto = upto.min(cap);
            }
            if upto > io.w {
                if let Err(f) = io.emit(&self.ring, upto, &self.stats) {
                    return Err(self.poison_with(f));
                }
                self.written.store(io.w, SeqCst);
                self.publish();
            }
            debug_assert!(
                io.w <= io.durable.saturating_add(self.unsynced_max),
                "log written to LSN {} past its durable end {} by more than UNSYNCED_MAX",
                io.w,
                io.durable
            );
            if io.w >= target {
                break;
            }
            if io.w >= upto && upto < c.min(target) {
                // Capped, not waiting for a completion: sync and write on.
                continue;
            }
            self.wait_completion(io.w)?;
        }
        if sync && io.w > io.durable {
            self.sync_written(io)?;
        }
        self.assert_lsn_order();
        Ok(())
    }

    /// Syncs what is written (the caller holds the writer) and publishes the new durable end;
    /// the threads now durable are woken when the writer is released.
    fn sync_written(&self, io: &mut Writer) -> Result<()> {
        match io.sync(&self.stats) {
            Ok(n) => self.stats.record_commits(n),
            Err(f) => return Err(self.poison_with(f)),
        }
        self.record_newest_file(io)?;
        self.durable.store(io.durable, SeqCst);
        self.publish_but(true);
        Ok(())
    }

    /// Waits until `lsn` is durable (`sync`) or written.
    ///
    /// With `waiter_flush`, a thread that finds the writer free leads: it writes and syncs
    /// everything completed. Otherwise it queues itself by LSN (recording it in `want_*` for
    /// the flusher thread, which the writer's owner wakes on release) and sleeps until a sync
    /// covers it; it is woken exactly once, by `io_released` or `publish`. Without
    /// `waiter_flush` it asks the flusher thread at once and sleeps until covered.
    pub(super) fn wait_flushed(&self, lsn: u64, sync: bool) -> Result<()> {
        let lsn = lsn.min(self.reserved.load(SeqCst));
        let reached = |sh: &Shared| {
            if sync {
                sh.durable.load(SeqCst) >= lsn
            } else {
                sh.written.load(SeqCst) >= lsn
            }
        };
        let lead = self.cfg.waiter_flush;
        loop {
            if reached(self) {
                return Ok(());
            }
            self.check_poison()?;
            let gen = self.io_gen.load(SeqCst);
            if lead {
                let led = self.try_with_io(|w| -> Result<()> {
                    if reached(self) {
                        return Ok(());
                    }
                    if sync && !self.cfg.group_commit_delay.is_zero() {
                        std::thread::sleep(self.cfg.group_commit_delay);
                    }
                    self.flush_locked(w, sync, lsn)
                });
                if let Some(r) = led {
                    r?;
                    continue;
                }
                // Another thread is writing: optionally spin (yielding) for a while before
                // sleeping. With more threads than cores the spinning steals the CPU the
                // appenders need, so the default is not to.
                let spin = self.cfg.spin_before_sleep;
                if !spin.is_zero() {
                    let t0 = Instant::now();
                    while !reached(self)
                        && self.io_gen.load(SeqCst) == gen
                        && !self.poison.is_poisoned()
                        && t0.elapsed() < spin
                    {
                        std::thread::yield_now();
                    }
                    if reached(self) || self.io_gen.load(SeqCst) != gen {
                        continue;
                    }
                }
            }
            let me = Parker::new();
            {
                let mut g = self.sig.lock();
                // Checked under the lock that `publish` and `io_released` take after moving
                // `durable` / `written` / the generation: none of them can be missed.
                if reached(self)
                    || self.poison.is_poisoned()
                    || (lead && self.io_gen.load(SeqCst) != gen)
                {
                    continue;
                }
                // The flusher thread serves every queued waiter: asked now without
                // `waiter_flush`, else when the writer is released (`io_released`).
                if !(lead && self.no_handoff) {
                    if sync {
                        g.want_durable = g.want_durable.max(lsn);
                    } else {
                        g.want_written = g.want_written.max(lsn);
                    }
                }
                if !lead {
                    self.work_cv.notify_all();
                }
                let ticket = g.next_id;
                g.next_id += 1;
                let q = if sync {
                    &mut g.durable_waiters
                } else {
                    &mut g.written_waiters
                };
                q.insert((lsn, ticket), me.clone());
            }
            me.wait();
        }
    }
}
