//! Reads at a snapshot: the page as of a registered [`Snapshot`], from the version store when
//! a writer changed the page since (or is changing it), else from the pool.
//!
//! Answers: how a reader that never takes the writer's lock still never sees a change that is
//! uncommitted or newer than its snapshot.
//!
//! Invariant (module `versions`, invariant 1): the version lookup happens while the reader
//! holds the page's shared latch, or between an optimistic read's version load and its
//! validation; a writer stores a page's version under the exclusive latch before its first
//! change. So the lookup either finds the version or the page has not been changed since the
//! snapshot. A version kept as undo (invariant 5) is rebuilt from the frame under the shared
//! latch; an optimistic read that finds one falls back to the latched read. After the lookup
//! the reader checks that its snapshot was not revoked (invariant 4) — also when the read
//! failed: a revoked snapshot may reach a page freed since and never written, whose read error
//! is not the answer (`SnapshotTooOld` is). Tests: `tests/snapshots.rs`, and keel's
//! `tests/snapshots.rs` (`HeldScan`).

use crate::guard::PageReadGuard;
use crate::optimistic::OptimisticToken;
use crate::versions::{Found, Snapshot};
use crate::{BufferPool, Result};
use keel_page::PageId;
use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// A page as a snapshot sees it: the pool's frame (latched shared) or an old version.
pub enum SnapPage<'a> {
    /// The page in the pool is the page at the snapshot.
    Frame(PageReadGuard<'a>),
    /// The page changed since the snapshot: its image at the snapshot.
    Version(Arc<[u8]>),
}

impl Deref for SnapPage<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SnapPage::Frame(g) => g,
            SnapPage::Version(v) => v,
        }
    }
}

impl BufferPool {
    /// Registers a snapshot of the newest published commit: reads through it
    /// ([`read_at`](Self::read_at)) see exactly the commits up to it.
    pub fn snapshot(&self) -> Snapshot {
        self.versions.snapshot()
    }

    /// The newest published commit LSN (what a snapshot taken now reads at).
    pub fn latest_commit(&self) -> keel_page::Lsn {
        self.versions.latest()
    }

    /// Counters of the version store (versions kept, bytes, snapshots, refusals).
    pub fn version_counts(&self) -> crate::VersionCounts {
        self.versions.counts()
    }

    /// Page `id` as of `snap`.
    ///
    /// # Errors
    ///
    /// [`PoolError::SnapshotTooOld`](crate::PoolError::SnapshotTooOld) if the snapshot was
    /// revoked; otherwise as [`read`](Self::read).
    pub fn read_at(&self, id: PageId, snap: &Snapshot) -> Result<SnapPage<'_>> {
        self.refuse_forked()?;
        // A version found before latching spares the read of a page that may have left the
        // pool (freed) or changed since.
        // (An undo version needs the frame: it is rebuilt under the latch below.)
        let image = || match snap.find(id) {
            Some(Found::Image(v)) => snap.check().map(|()| Some(SnapPage::Version(v))),
            _ => Ok(None),
        };
        if let Some(page) = image()? {
            return Ok(page);
        }
        let g = match self.read(id) {
            Ok(g) => g,
            Err(e) => {
                // A commit that freed the page while this read waited for its latch kept the
                // page's image as a version and dropped the frame unwritten, and the read then
                // went to the disk, where the page may never have been: the version is the
                // answer (the first lookup came before the free). Before, the read's "never
                // written" was returned for a page the snapshot could read
                // (`tests/snapshots.rs`: `a_page_freed_while_a_snapshot_reads_it_is_read_from_its_version`).
                if let Some(page) = image()? {
                    return Ok(page);
                }
                // Module `versions`, invariant 4: a revoked snapshot's versions are gone, so a
                // page it reaches may have been freed since (and never written) or reused: the
                // read's error is then that of a page the snapshot no longer owns, and the
                // answer is the refusal.
                snap.check()?;
                return Err(e);
            }
        };
        let page = match snap.find(id) {
            Some(Found::Image(v)) => SnapPage::Version(v),
            // Module `versions`, invariant 5: under the shared latch the frame and the undo
            // its owner recorded under the exclusive latch match.
            Some(Found::Undo(t, slot)) => SnapPage::Version(self.versions.rebuild(&g, &t, slot)),
            None => SnapPage::Frame(g),
        };
        snap.check()?;
        Ok(page)
    }

    /// [`read_optimistic`](Self::read_optimistic) as of `snap`: `None` also when the page has a
    /// version for this snapshot (the caller then uses [`read_at`](Self::read_at)) or the
    /// snapshot was revoked (`read_at` reports it).
    #[inline]
    pub fn read_optimistic_at<R>(
        &self,
        id: PageId,
        snap: &Snapshot,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, OptimisticToken)> {
        let r = self.read_optimistic_if(id, || snap.find(id).is_none(), f)?;
        snap.check().ok()?;
        Some(r)
    }
}
