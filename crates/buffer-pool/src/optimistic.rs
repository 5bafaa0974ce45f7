//! Optimistic reads: how a resident page is read with no pin, no latch and no page-table lock.
//!
//! Answers: how [`BufferPool::read_optimistic`] finds a page (a hint table: page id → the frame
//! that last held it), how it knows what it read is one consistent image of that page (the
//! frame's seqlock version, see the `frame` module), and how a later check tells whether the
//! page has changed since ([`OptimisticToken`], [`BufferPool::is_unchanged`]).
//!
//! Invariants kept:
//! - a result is returned only if the frame's version was even (no exclusive holder) before
//!   the read and is unchanged after it, and the frame held page `id`, valid, at the start: a
//!   torn or replaced page is never returned (unless the test knob
//!   `skip_optimistic_validation` is on);
//! - a hint is only a guess: any frame number (or none) is safe, it is checked against the
//!   frame's page id under the version; hints are updated when a page is read or mapped;
//! - a token that names no frame never validates.
//!
//! Tests: `optimistic/tests.rs` (a reader that skips the re-check sees torn and replaced
//! pages under a writer and under eviction; the real one never does).

use crate::knobs::TestKnobs;
use crate::BufferPool;
use keel_page::PageId;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(test)]
mod tests;

/// What [`BufferPool::read_optimistic`] validated: a frame and its version. Hand it to
/// [`BufferPool::is_unchanged`] to check later that the page read has not changed since
/// (optimistic lock coupling: a parent re-validated after its child was read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptimisticToken {
    frame: u32,
    version: u64,
}

impl OptimisticToken {
    /// The token as one integer (for layers that carry it opaquely).
    pub fn to_bits(self) -> u128 {
        (u128::from(self.frame) << 64) | u128::from(self.version)
    }

    /// The token from [`to_bits`](Self::to_bits). Any value is safe to check: one that names
    /// no frame is never valid.
    pub fn from_bits(bits: u128) -> OptimisticToken {
        OptimisticToken {
            frame: u32::try_from(bits >> 64).unwrap_or(u32::MAX),
            version: bits as u64,
        }
    }
}

/// Cache lines at the start of a page that `read_optimistic` prefetches (1 KiB: the header
/// and a B-tree leaf's slot array).
const OPTIMISTIC_PREFETCH_LINES: usize = 16;

/// Asks the CPU to start loading the cache line at address `addr` (a hint: never blocks, never
/// faults, whatever the address).
#[inline(always)]
fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` has no architectural effect and cannot fault on any address; it
    // is `unsafe` only because it is a `#[target_feature(enable = "sse")]` function, and SSE
    // is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

impl BufferPool {
    /// Optimistic read of a resident page: no pin, no latch, no page-table lock — only loads.
    /// Finds the frame through a hint table, reads its version (must be even: no exclusive
    /// holder), checks that the frame holds page `id`, runs `f` on the frame's bytes as aligned
    /// little-endian words, and returns `f`'s result only if the version is unchanged after it
    /// (a seqlock; see the `frame` module invariants). `None`: the page is not resident under its
    /// hint, is latched exclusive, or changed during the read — use [`read`](Self::read).
    ///
    /// The words may change while `f` runs: `f` must load them with `Ordering::Relaxed`,
    /// bounds-check everything it decodes (garbage may be read before the validation fails),
    /// must terminate on any bytes, and must not act on what it read (its result is discarded
    /// unless validated). Does not count a page hit: callers add their validated reads with
    /// [`add_optimistic_hits`](Self::add_optimistic_hits) (one counter update per operation
    /// instead of one per page).
    #[inline]
    pub fn read_optimistic<R>(
        &self,
        id: PageId,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, OptimisticToken)> {
        self.read_optimistic_if(id, || true, f)
    }

    /// [`read_optimistic`](Self::read_optimistic) that also gives up (`None`) unless `usable`,
    /// called after the frame's version was read (inside the validated window), returns true:
    /// a snapshot reader checks there that the page has no version it must read instead.
    #[inline]
    pub(crate) fn read_optimistic_if<R>(
        &self,
        id: PageId,
        usable: impl FnOnce() -> bool,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, OptimisticToken)> {
        // A forked child reads through `read`, which refuses it (a version lookup locks).
        if self.forked() {
            return None;
        }
        let hint = self.hints[id.0 as usize & self.hint_mask].load(Ordering::Relaxed);
        let fr = self.frames.get(hint as usize)?;
        // Start loading the page's first lines (header, slot array) in parallel with the
        // frame's line: the page is usually the slower of the two.
        let page = self.arena_base + hint as usize * self.page_size;
        for line in 0..(self.page_size / 64).min(OPTIMISTIC_PREFETCH_LINES) {
            prefetch(page + line * 64);
        }
        let v = fr.version();
        if v & 1 != 0
            || fr.page_id.load(Ordering::Acquire) != id.0
            || !fr.valid.load(Ordering::Acquire)
        {
            return None;
        }
        if !usable() {
            return None;
        }
        let r = f(fr.optimistic_words());
        if !fr.version_is(v) && !TestKnobs::on(&self.knobs.skip_optimistic_validation) {
            return None;
        }
        if !fr.referenced.load(Ordering::Relaxed) {
            fr.referenced.store(true, Ordering::Relaxed);
        }
        Some((
            r,
            OptimisticToken {
                frame: hint,
                version: v,
            },
        ))
    }

    /// Whether the page read under `token` is unchanged since (same frame version).
    #[inline]
    pub fn is_unchanged(&self, token: OptimisticToken) -> bool {
        self.frames
            .get(token.frame as usize)
            .is_some_and(|fr| fr.version_is(token.version))
            || TestKnobs::on(&self.knobs.skip_optimistic_validation)
    }

    /// Counts `n` page hits of validated optimistic reads in the pool's statistics.
    pub fn add_optimistic_hits(&self, n: u64) {
        if n > 0 {
            self.optimistic_hits.add(n);
        }
    }

    /// Records that frame `f` holds page `id` for optimistic readers (a store only if the
    /// hint differs, so a hot hint's cache line stays shared).
    #[inline]
    pub(crate) fn set_hint(&self, id: PageId, f: u32) {
        let h = &self.hints[id.0 as usize & self.hint_mask];
        if h.load(Ordering::Relaxed) != f {
            h.store(f, Ordering::Relaxed);
        }
    }
}
