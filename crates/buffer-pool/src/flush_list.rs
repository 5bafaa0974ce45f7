//! Dirty pages and the flush list: which pages hold committed changes that are not on disk,
//! and how batches of them are written.
//!
//! Answers: how dirty pages are ordered (the flush list, keyed by oldest modification), how a
//! batch is written (`flush_pages`: copy under a shared latch, hand the copies to the store,
//! then settle each page's dirty state), which pages a batch takes (`oldest_batch`), and the
//! public ways to write them ([`BufferPool::flush_up_to`], [`BufferPool::flush_all`]).
//!
//! Invariants kept (docs/design.md invariant 3, the flush side; crate docs, invariant 3):
//! - a frame is on the flush list exactly while its meta says `dirty`, under the key
//!   `(oldest, page, frame)`; `oldest` is at or below the start of the page's oldest unwritten
//!   group;
//! - a page leaves the flush list only when a write of its newest committed state is durable:
//!   a page committed again while being written stays dirty, its key moved to the oldest change
//!   after the copy (`next_oldest`);
//! - **no-steal**: a page owned by an uncommitted transaction is never written; neither is a
//!   page another flusher is writing (`flushing`), so one page is never in flight twice;
//! - **init-on-flush** (crate docs, invariant 4): a page is handed to the writer as
//!   rebuildable from redo only if its PageInit lies at or after the published horizon, decided
//!   under the flush-list mutex; while that write is in flight the page's key is lowered to the
//!   PageInit, so the checkpoint (module `checkpoint`) stays at or below it.
//!
//! Tests: `tests/pool.rs: flush_list_is_ordered_by_oldest_modification`,
//! `uncommitted_pages_are_never_written`,
//! `a_rebuildable_page_in_flight_holds_the_checkpoint_at_its_init`; `tests/crash.rs:
//! with_the_cleaner_running_every_mode_recovers` (a flusher that marks a re-committed page
//! clean), `init_on_flush_claimed_wrongly_on_purpose_is_caught`.

use crate::knobs::TestKnobs;
use crate::page_store::PageOut;
use crate::stats::bump;
use crate::{BufferPool, Result};
use keel_io::AlignedBuf;
use keel_page::{Lsn, PageId};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Why a batch of pages is written (selects counters and latch behaviour).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlushKind {
    /// Cleaner refilling the free reserve: skip latched pages.
    Lru,
    /// Oldest pages for the checkpoint; `wait` = block on latches.
    FlushList { wait: bool },
    /// A user thread that found no clean frame.
    Single,
}

/// What one flush batch did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlushOutcome {
    pub written: usize,
    /// Skipped: owned by an uncommitted transaction.
    pub owned: usize,
    /// Skipped: latched, or being written by another flusher.
    pub busy: usize,
}

impl BufferPool {
    /// The oldest modification of any dirty page (a lower bound of the start LSN of its oldest
    /// unwritten group), or `None` when no page is dirty. Pages held by an uncommitted
    /// transaction count from the moment it commits.
    pub fn oldest_dirty_lsn(&self) -> Option<Lsn> {
        self.flush_list.lock().first().map(|k| k.0)
    }

    /// Pages with committed changes not yet on disk.
    pub fn dirty_pages(&self) -> usize {
        self.flush_list.lock().len()
    }

    /// Writes every committed dirty page whose oldest modification is below `lsn`, in batches,
    /// in the calling thread (waits for page latches). Pages held by an uncommitted transaction
    /// cannot be written (no-steal) and are left dirty. Returns the number of pages written.
    ///
    /// Do not call while holding page guards of this pool.
    pub fn flush_up_to(&self, lsn: Lsn) -> Result<usize> {
        let mut total = 0;
        let mut idle_rounds = 0u32;
        loop {
            let (ids, busy) = self.oldest_batch(Some(lsn), self.batch_pages);
            if ids.is_empty() && !busy {
                return Ok(total);
            }
            let out = if ids.is_empty() {
                FlushOutcome {
                    busy: 1,
                    ..Default::default()
                }
            } else {
                self.flush_pages(&ids, FlushKind::FlushList { wait: true })?
            };
            total += out.written;
            if out.written == 0 {
                if out.busy == 0 || idle_rounds > 20_000 {
                    return Ok(total);
                }
                // Another flusher is writing some of them: wait for it.
                idle_rounds += 1;
                std::thread::sleep(Duration::from_micros(200));
            } else {
                idle_rounds = 0;
            }
        }
    }

    /// Writes every committed dirty page. Returns the number written.
    pub fn flush_all(&self) -> Result<usize> {
        self.flush_up_to(Lsn(u64::MAX))
    }

    /// Up to `max` dirty pages with the oldest modifications below `below` that are not held
    /// by a transaction or being written; and whether any was skipped for being written.
    pub(crate) fn oldest_batch(&self, below: Option<Lsn>, max: usize) -> (Vec<PageId>, bool) {
        let fl = self.flush_list.lock();
        let mut ids = Vec::new();
        let mut skipped_busy = false;
        for &(lsn, id, f) in fl.iter() {
            if below.is_some_and(|b| lsn >= b) || ids.len() >= max {
                break;
            }
            let fr = &self.frames[f as usize];
            if fr.owned.load(Ordering::Relaxed) {
                continue;
            }
            if fr.flushing.load(Ordering::Relaxed) {
                skipped_busy = true;
                continue;
            }
            ids.push(id);
        }
        (ids, skipped_busy)
    }

    /// Waits until no flusher is writing frame `f`.
    pub(crate) fn wait_not_flushing(&self, f: u32) {
        let fr = &self.frames[f as usize];
        while fr.lock_meta().flushing {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn take_buf(&self) -> AlignedBuf {
        self.bufs
            .lock()
            .pop()
            .unwrap_or_else(|| AlignedBuf::page(self.page_size))
    }

    fn return_bufs(&self, mut bufs: Vec<AlignedBuf>) {
        let mut pool = self.bufs.lock();
        let cap = self.batch_pages * 2;
        while pool.len() < cap {
            match bufs.pop() {
                Some(b) => pool.push(b),
                None => break,
            }
        }
    }

    /// Writes the dirty, committed pages among `ids` as one batch through the store. Pages that
    /// are clean, held by an uncommitted transaction (no-steal) or already being written are
    /// skipped. A page stays on the flush list until its write is durable.
    pub(crate) fn flush_pages(&self, ids: &[PageId], kind: FlushKind) -> Result<FlushOutcome> {
        struct Prep {
            id: PageId,
            f: u32,
            lsn: Lsn,
            rebuildable: bool,
        }
        let mut out = FlushOutcome::default();
        let mut preps: Vec<Prep> = Vec::with_capacity(ids.len());
        let mut bufs: Vec<AlignedBuf> = Vec::with_capacity(ids.len());
        let claim_all = TestKnobs::on(&self.knobs.claim_all_rebuildable);
        for &id in ids {
            let Some(f) = self.pin_quiet(id) else {
                continue;
            };
            let fr = &self.frames[f as usize];
            let latch = match kind {
                FlushKind::FlushList { wait: true } => Some(fr.shared()),
                _ => fr.try_shared(),
            };
            let Some(latch) = latch else {
                out.busy += 1;
                self.unpin(f);
                continue;
            };
            if !fr.valid.load(Ordering::Acquire) || fr.page_id.load(Ordering::Relaxed) != id.0 {
                drop(latch);
                self.unpin(f);
                continue;
            }
            let mut m = fr.lock_meta();
            if !m.dirty || m.owner != 0 || m.flushing {
                if m.owner != 0 {
                    out.owned += 1;
                } else if m.flushing {
                    out.busy += 1;
                }
                drop(m);
                drop(latch);
                self.unpin(f);
                continue;
            }
            m.set_flushing(true);
            m.copy_lsn = m.newest;
            m.next_oldest = None;
            let mut rebuildable = false;
            if m.rebuildable || claim_all {
                // Decide under the flush-list mutex, atomically with checkpoint computation: if
                // the page may skip protection, hold the checkpoint at or below its PageInit
                // until the write is durable.
                let mut fl = self.flush_list.lock();
                let horizon = Lsn(self.horizon.load(Ordering::Acquire));
                if claim_all || m.rebuild_from >= horizon {
                    rebuildable = true;
                    if m.rebuildable && m.rebuild_from < m.oldest {
                        fl.remove(&(m.oldest, id, f));
                        m.oldest = m.rebuild_from;
                        fl.insert((m.oldest, id, f));
                    }
                }
            }
            let lsn = m.newest;
            drop(m);
            let mut buf = self.take_buf();
            buf.copy_from_slice(latch.bytes());
            drop(latch);
            bufs.push(buf);
            preps.push(Prep {
                id,
                f,
                lsn,
                rebuildable,
            });
        }
        if preps.is_empty() {
            self.return_bufs(bufs);
            return Ok(out);
        }
        let res = {
            let pages: Vec<PageOut<'_>> = preps
                .iter()
                .zip(bufs.iter())
                .map(|(p, b)| PageOut {
                    page_id: p.id,
                    image: b,
                    lsn: p.lsn,
                    rebuildable_from_redo: p.rebuildable,
                })
                .collect();
            self.store.write_pages(&pages)
        };
        let n = preps.len();
        for p in &preps {
            let fr = &self.frames[p.f as usize];
            let mut m = fr.lock_meta();
            m.set_flushing(false);
            if res.is_ok() && m.dirty && fr.page_id.load(Ordering::Relaxed) == p.id.0 {
                let mut fl = self.flush_list.lock();
                fl.remove(&(m.oldest, p.id, p.f));
                if m.newest == m.copy_lsn {
                    m.set_dirty(false);
                } else {
                    // Committed again while being written: only changes after the copy remain.
                    m.oldest = m.next_oldest.unwrap_or(m.oldest);
                    fl.insert((m.oldest, p.id, p.f));
                }
            }
            m.next_oldest = None;
            drop(m);
            self.unpin(p.f);
        }
        self.return_bufs(bufs);
        match res {
            Ok(()) => {
                out.written = n;
                bump(&self.c.pages_written, n as u64);
                bump(
                    &self.c.pages_written_rebuildable,
                    preps.iter().filter(|p| p.rebuildable).count() as u64,
                );
                match kind {
                    FlushKind::Lru => {
                        bump(&self.c.cleaner_lru_batches, 1);
                        bump(&self.c.cleaner_lru_pages, n as u64);
                    }
                    FlushKind::FlushList { .. } => {
                        bump(&self.c.flush_list_batches, 1);
                        bump(&self.c.flush_list_pages, n as u64);
                    }
                    FlushKind::Single => bump(&self.c.single_page_flushes, 1),
                }
                Ok(out)
            }
            Err(e) => {
                bump(&self.c.write_errors, 1);
                Err(e)
            }
        }
    }
}
