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
//!   PageInit, so the checkpoint (module `checkpoint`) stays at or below it. A page made a copy
//!   qualifies only while its copy is pending (module `copy_deps`: its source waits for it).
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
use std::collections::HashMap;
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

    /// Pages per batch when a flush writes a level of copies ([`flush_pages`](Self::flush_pages)):
    /// four write batches, as many as the page buffers kept for reuse (`return_bufs`).
    fn level_batch_pages(&self) -> usize {
        self.batch_pages.saturating_mul(4).max(1)
    }

    fn return_bufs(&self, mut bufs: Vec<AlignedBuf>) {
        let mut pool = self.bufs.lock();
        let cap = self.level_batch_pages();
        while pool.len() < cap {
            match bufs.pop() {
                Some(b) => pool.push(b),
                None => break,
            }
        }
    }

    /// Writes the dirty, committed pages among `ids` through the store. Pages that are clean,
    /// held by an uncommitted transaction (no-steal) or already being written are skipped. A
    /// page stays on the flush list until its write is durable.
    ///
    /// Module `copy_deps`: the copies the pages wait for are written first, in batches of
    /// their own (each durable before the next starts); a page whose copies are not all
    /// durable then is skipped.
    pub(crate) fn flush_pages(&self, ids: &[PageId], kind: FlushKind) -> Result<FlushOutcome> {
        if self.copy_deps_len.load(Ordering::Acquire) == 0
            || TestKnobs::on(&self.knobs.ignore_copy_order)
        {
            return self.flush_batch(ids, kind);
        }
        // Levels: `ids`, then the copies they wait for, then the copies those wait for, and so
        // on, however deep (a chain grows by one copy per split of its newest page while no
        // write cuts it). Each page is written once, at the deepest level it appears on, after
        // every copy it waits for. No cycles (module `copy_deps`), so the levels end; the bound
        // (one level per pending copy) only guards damaged state. (The flush once followed
        // chains 64 levels deep and no further: the pages above waited for copies no batch
        // reached, and a synchronous checkpoint spun on them for good.)
        let mut levels: Vec<Vec<PageId>> = vec![ids.to_vec()];
        let mut deepest: HashMap<PageId, usize> = ids.iter().map(|&id| (id, 0)).collect();
        {
            let d = self.copy_deps.lock();
            let bound = d.len() + 1;
            while levels.len() <= bound {
                let Some(last) = levels.last() else { break };
                let mut next: Vec<PageId> = last
                    .iter()
                    .flat_map(|&id| d.of(id).iter().filter(|c| c.freed.is_none()))
                    .map(|c| c.dst)
                    .collect();
                if next.is_empty() {
                    break;
                }
                next.sort_unstable();
                next.dedup();
                for &p in &next {
                    deepest.insert(p, levels.len());
                }
                levels.push(next);
            }
        }
        let mut out = FlushOutcome::default();
        for (k, level) in levels.iter().enumerate().rev() {
            let batch: Vec<PageId> = level
                .iter()
                .copied()
                .filter(|p| deepest.get(p) == Some(&k))
                .collect();
            // A level can hold thousands of copies (a bulk load's leaves, each split many
            // times since the last checkpoint): written in batches of a bounded size, so each
            // reuses the writer's buffers instead of sealing them all into one buffer allocated
            // for it (tens of MiB, faulted in and unmapped each time). Pages of one level do not
            // wait for one another, so any split of a level keeps the order.
            for chunk in batch.chunks(self.level_batch_pages()) {
                let o = self.flush_batch(chunk, kind)?;
                out.written += o.written;
                out.owned += o.owned;
                out.busy += o.busy;
            }
        }
        Ok(out)
    }

    /// Whether page `id` may be written now (module `copy_deps`): every copy it waits for is
    /// durable. Collects the copies found durable in `resolved`; raises `log_to` to the free of
    /// a copy freed since (the log must be durable there first). `Err(owned)` if a copy is
    /// still to be written: `owned` when a transaction holds it (the page then waits like a
    /// page a transaction holds), else it is being written or was not in the batch.
    fn copies_durable(
        &self,
        id: PageId,
        log_to: &mut Lsn,
        resolved: &mut Vec<(PageId, crate::copy_deps::Copy)>,
    ) -> std::result::Result<(), bool> {
        if self.copy_deps_len.load(Ordering::Acquire) == 0
            || TestKnobs::on(&self.knobs.ignore_copy_order)
        {
            return Ok(());
        }
        let copies: Vec<crate::copy_deps::Copy> = self.copy_deps.lock().of(id).to_vec();
        for c in copies {
            if let Some(end) = c.freed {
                *log_to = (*log_to).max(end);
                resolved.push((id, c));
                continue;
            }
            let Some(f) = self.pin_quiet(c.dst) else {
                // Not resident: written and evicted (a dirty page is never evicted unwritten),
                // or freed (marked before its frame left the pool: checked again below).
                let now = self
                    .copy_deps
                    .lock()
                    .of(id)
                    .iter()
                    .find(|x| x.dst == c.dst && x.at == c.at)
                    .copied()
                    .unwrap_or(c);
                if let Some(end) = now.freed {
                    *log_to = (*log_to).max(end);
                }
                resolved.push((id, now));
                continue;
            };
            let fr = &self.frames[f as usize];
            // Durable: not dirty, or dirty only since a write at or past the copy; and neither
            // being written nor owned. An owned copy may be its own commit's, which lists its
            // pages as dirty one by one: the source can be unowned before the copy is dirty.
            let (durable, owned) = {
                let m = fr.lock_meta();
                let durable = fr.page_id.load(Ordering::Relaxed) != c.dst.0
                    || !fr.valid.load(Ordering::Acquire)
                    || ((!m.dirty || m.oldest >= c.at) && !m.flushing && m.owner == 0);
                (durable, m.owner != 0)
            };
            self.unpin(f);
            if !durable {
                return Err(owned);
            }
            resolved.push((id, c));
        }
        Ok(())
    }

    /// Writes the dirty, committed pages among `ids` as one batch through the store (see
    /// [`flush_pages`](Self::flush_pages)).
    fn flush_batch(&self, ids: &[PageId], kind: FlushKind) -> Result<FlushOutcome> {
        struct Prep {
            id: PageId,
            f: u32,
            lsn: Lsn,
            rebuildable: bool,
        }
        let mut out = FlushOutcome::default();
        let mut log_to = Lsn::ZERO;
        let mut resolved = Vec::new();
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
            let m = fr.lock_meta();
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
            // Copies it waits for are checked under its latch: a commit that makes a new copy
            // of it owns it first, so none is added before this write's image is taken.
            drop(m);
            let before = resolved.len();
            if let Err(owned) = self.copies_durable(id, &mut log_to, &mut resolved) {
                resolved.truncate(before);
                bump(&self.c.copy_waits, 1);
                if owned {
                    out.owned += 1;
                } else {
                    out.busy += 1;
                }
                drop(latch);
                self.unpin(f);
                continue;
            }
            let mut m = fr.lock_meta();
            if !m.dirty || m.owner != 0 || m.flushing {
                drop(m);
                drop(latch);
                self.unpin(f);
                continue;
            }
            // A page freed while it stayed in the pool (`FrameMeta::freed_at`): its free is
            // durable before this (pre-free) version is written.
            log_to = log_to.max(m.freed_at);
            m.set_flushing(true);
            m.copy_lsn = m.newest;
            m.next_oldest = None;
            let mut rebuildable = false;
            // A page made a copy is rebuildable only while the copy is pending: its source
            // then waits for this write (and stays at or before the copy on disk).
            let copy_ok = !m.rebuild_by_copy
                || TestKnobs::on(&self.knobs.copies_always_rebuildable)
                || self.copy_deps.lock().is_copy(id);
            if (m.rebuildable && copy_ok) || claim_all {
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
            if log_to > Lsn::ZERO {
                self.store
                    .flush_log_to(log_to)
                    .and_then(|()| self.store.write_pages(&pages))
            } else {
                self.store.write_pages(&pages)
            }
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
        if res.is_ok() && self.copy_deps_len.load(Ordering::Acquire) > 0 {
            let mut d = self.copy_deps.lock();
            for (src, c) in resolved {
                d.resolve(src, c);
            }
            for p in &preps {
                d.written(p.id, p.lsn);
            }
            self.copy_deps_len.store(d.len(), Ordering::Release);
        }
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
