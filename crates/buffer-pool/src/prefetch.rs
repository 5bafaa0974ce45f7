//! Prefetch: how many pages are brought in with one batched read.
//!
//! Answers: what [`BufferPool::prefetch`] does with a list of page ids (reads every one that
//! is not resident through the store's `read_pages`, in chunks of 64, so a transaction's pages
//! can be brought in before it takes the writer lock) and what it reports ([`PrefetchReport`]).
//!
//! Invariants kept:
//! - a prefetched page is installed only if the store read it valid; a page that is unwritten
//!   or fails verification is unmapped again (a later `read` reports why), never left as data;
//! - every frame claimed for a chunk stays latched exclusive until the chunk's read is done,
//!   and is unpinned at the end whatever happened (on an error, unmapped first);
//! - at most a quarter of the frames are claimed by one call; running out of frames ends the
//!   call early, without error (counted as `no_frame`).
//!
//! Tests: `tests/pool.rs: prefetch_reads_many_pages_in_one_batch`.

use crate::frame::NO_PAGE;
use crate::stats::bump;
use crate::{BufferPool, PoolError, Result};
use keel_page::{PageId, PageState};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;

/// What `prefetch` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchReport {
    /// Distinct pages asked for.
    pub requested: usize,
    /// Already resident.
    pub resident: usize,
    /// Read in this call.
    pub loaded: usize,
    /// Not loaded: unwritten, corrupt or unreadable (a later `read` reports why).
    pub failed: usize,
    /// Not loaded: no frame could be freed for them.
    pub no_frame: usize,
}

impl BufferPool {
    /// Prefetch: reads every non-resident page of `ids` in batches through the store's
    /// `read_pages` (io_uring when available), so a transaction's pages can be brought in
    /// before it takes the writer lock. Pages that are unwritten or fail verification are not
    /// installed (a later `read` reports them). Stops early, without error, when no frame can be
    /// freed.
    pub fn prefetch(&self, ids: &[PageId]) -> Result<PrefetchReport> {
        self.refuse_forked()?;
        bump(&self.c.prefetch_calls, 1);
        let mut uniq: Vec<PageId> = ids.iter().copied().filter(|p| p.0 != NO_PAGE).collect();
        uniq.sort_unstable();
        uniq.dedup();
        let mut rep = PrefetchReport {
            requested: uniq.len(),
            ..Default::default()
        };
        let limit = (self.frames.len() / 4).max(1);
        let mut todo: Vec<PageId> = Vec::new();
        for id in uniq {
            if self.contains(id) {
                rep.resident += 1;
            } else if todo.len() < limit {
                todo.push(id);
            } else {
                rep.no_frame += 1;
            }
        }
        for chunk in todo.chunks(64) {
            let mut claimed: Vec<(PageId, u32)> = Vec::with_capacity(chunk.len());
            let mut latches = Vec::with_capacity(chunk.len());
            let mut out_of_frames = false;
            for &id in chunk {
                if out_of_frames {
                    rep.no_frame += 1;
                    continue;
                }
                let f = match self.claim_frame(id) {
                    Ok(f) => f,
                    Err(PoolError::NoFreeFrame { .. }) => {
                        out_of_frames = true;
                        rep.no_frame += 1;
                        continue;
                    }
                    Err(e) => {
                        drop(latches);
                        for (pid, f) in claimed {
                            self.unmap(f, pid);
                            self.unpin(f);
                        }
                        return Err(e);
                    }
                };
                let x = self.frames[f as usize].exclusive();
                if let Some(g) = self.map_claimed(f, id) {
                    // Someone else brought it in meanwhile.
                    drop(x);
                    self.release_claimed(f);
                    self.unpin(g);
                    rep.resident += 1;
                    continue;
                }
                claimed.push((id, f));
                latches.push(x);
            }
            if claimed.is_empty() {
                continue;
            }
            let results = {
                let mut reqs: Vec<(PageId, &mut [u8])> = claimed
                    .iter()
                    .zip(latches.iter_mut())
                    .map(|((id, _), x)| (*id, x.bytes_mut()))
                    .collect();
                self.store.read_pages(&mut reqs)
            };
            bump(&self.c.pages_read, claimed.len() as u64);
            bump(&self.c.prefetch_pages, claimed.len() as u64);
            let mut ok = Vec::with_capacity(claimed.len());
            for (i, (id, f)) in claimed.iter().enumerate() {
                let fr = &self.frames[*f as usize];
                match results.get(i) {
                    Some(Ok(PageState::Valid(_))) => {
                        fr.lock_meta().clear();
                        fr.referenced.store(true, Ordering::Relaxed);
                        fr.valid.store(true, Ordering::Release);
                        rep.loaded += 1;
                        ok.push(true);
                    }
                    _ => {
                        self.unmap(*f, *id);
                        rep.failed += 1;
                        ok.push(false);
                    }
                }
            }
            drop(latches);
            for (_, f) in claimed {
                self.unpin(f);
            }
        }
        Ok(rep)
    }
}
