//! Page copies and the order of writes they need: which page may not be written before which.
//!
//! A `PageCopy` record makes page `dst` a copy of page `src` as `src` is at that point of the
//! log (a B-tree split makes its new right half so: `PageTxn::copy_page`). Replay can make the
//! copy only while `src` can be brought to that state, that is, while `src`'s disk copy is older
//! than the copy's group. Once a later version of `src` is on disk, `dst` must be on disk too,
//! at or past the copy — or its content must be dead by a free in the durable log.
//!
//! Invariant (kept by `BufferPool::flush_pages`; test `a_copy_is_written_before_its_source`
//! in `tests/page_copies.rs`, which the knob `ignore_copy_order` breaks on purpose): a page
//! with a pending copy is written only after every such copy is durable in a completed write
//! (an earlier batch: the store's `write_pages` returns only once its pages are durable), or,
//! for a copy whose page was freed since, after the log is durable past the free. A pending
//! copy is one made at commit and not yet so resolved. A source freed together with (or after)
//! its freed copies resolves them at once (`source_freed`): no later version of it can reach
//! disk before the free is durable — the WAL rule sees to a new version, and a frame the
//! freeing transaction did not hold (freed past its page limit, or let go of), which may still
//! be written with its content from before the free, carries the free's LSN
//! (`FrameMeta::freed_at`), and its write waits for the log to be durable there (test
//! `a_source_freed_while_it_stays_in_the_pool_waits_for_the_free_to_be_durable`; without the
//! wait, `Buffered` commits in the crash matrix left a source past its copy on disk and the copy
//! never written).
//!
//! No cycles: a copy is refused (the caller logs the page's bytes instead) when its
//! destination must itself wait for a copy of its own (`PageTxn::copy_page`), so writing the
//! copies a page waits for, then the page, always ends.

use keel_page::{Lsn, PageId};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

impl crate::BufferPool {
    /// The group ending at `end` made the copies `made` (source, copy) and freed the pages
    /// `freed`: the pending copies change as the commit (and the replay of its group at
    /// recovery, so that the pending copies after recovery are those a run would have) says.
    /// `made` holds (source, copy, assumed: see [`Copy::assumed`]).
    pub(crate) fn note_copies(
        &self,
        made: impl Iterator<Item = (PageId, PageId, bool)>,
        freed: &[PageId],
        end: Lsn,
    ) {
        let mut d = self.copy_deps.lock();
        for (src, dst, assumed) in made {
            d.add_copy(src, dst, end, assumed);
        }
        for &p in freed {
            d.freed(p, end);
        }
        for &p in freed {
            d.source_freed(p, end);
        }
        self.copy_deps_len.store(d.len(), Ordering::Release);
    }
}

/// One pending copy: page `dst` was made from the source at the group ending at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copy {
    /// The copy.
    pub dst: PageId,
    /// End LSN of the group that made it.
    pub at: Lsn,
    /// End LSN of the group that freed `dst` since, if one did: then the source may be written
    /// once the log is durable there (recovery finds `dst`'s content dead).
    pub freed: Option<Lsn>,
    /// Noted by recovery for a copy it skipped (`dst` read from disk already past the copy):
    /// the run may have resolved it long since — the skip shows `dst` was written past it — and
    /// recovery keeps it pending only so that `dst`'s rewrite precedes its source's (the write
    /// read back may not have been durable). A cycle through such a copy is no sign of damage:
    /// recovery resolves the assumed copy instead (`recovery.rs`, `GroupCopies::break_assumed`).
    pub assumed: bool,
}

/// The pending copies of every page.
#[derive(Debug, Default)]
pub(crate) struct CopyDeps {
    /// Source page → its pending copies.
    by_src: HashMap<PageId, Vec<Copy>>,
    /// Copy → the sources it was made from (pending).
    by_dst: HashMap<PageId, Vec<PageId>>,
    /// Pending copies in all.
    len: usize,
}

impl CopyDeps {
    /// Pending copies in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Records that page `dst` was made a copy of `src` by the group ending at `at`.
    #[cfg(test)]
    pub fn add(&mut self, src: PageId, dst: PageId, at: Lsn) {
        self.add_copy(src, dst, at, false);
    }

    /// [`CopyDeps::add`], `assumed` as [`Copy::assumed`] says.
    pub fn add_copy(&mut self, src: PageId, dst: PageId, at: Lsn, assumed: bool) {
        self.add_edge(
            src,
            Copy {
                dst,
                at,
                freed: None,
                assumed,
            },
        );
    }

    /// The pending copies page `src` waits for.
    pub fn of(&self, src: PageId) -> &[Copy] {
        self.by_src.get(&src).map_or(&[], |v| v.as_slice())
    }

    /// A source page `id` is a pending copy of, if it is one (the first, if several).
    pub fn source_of(&self, id: PageId) -> Option<PageId> {
        self.by_dst.get(&id).and_then(|v| v.first().copied())
    }

    /// Whether page `id` is a pending copy (of any source).
    pub fn is_copy(&self, id: PageId) -> bool {
        self.by_dst.contains_key(&id)
    }

    /// Whether page `id` waits for a copy of its own.
    pub fn waits(&self, id: PageId) -> bool {
        self.by_src.contains_key(&id)
    }

    /// Whether page `id` is the source of a pending copy that is live: not freed, or freed at
    /// an LSN past `durable`. (A freed source is never written, so a copy freed after the
    /// source's own free stays marked, not resolved: counting it would hold forever.)
    pub fn waits_live(&self, id: PageId, durable: Lsn) -> bool {
        self.of(id)
            .iter()
            .any(|c| c.freed.is_none_or(|f| f > durable))
    }

    /// Page `dst` was freed by the group ending at `end`: its pending copies now wait for the
    /// log to be durable there instead of for a write of `dst` — and for `dst`'s own pending
    /// copies, which its sources inherit. A copy of a copy needs the middle page's content,
    /// which redo rebuilds only from the first source as it was: freeing the middle page must
    /// not let the first source be written before the copy of the copy is. (It did: a split's
    /// right half split again, then emptied and freed, let the left half be written while the
    /// second right half was not; recovery could then rebuild neither — found by the pool's
    /// random copy test, reachable once emptied leaves were freed.)
    pub fn freed(&mut self, dst: PageId, end: Lsn) {
        let Some(srcs) = self.by_dst.get(&dst).cloned() else {
            return;
        };
        let inherited: Vec<Copy> = self.of(dst).to_vec();
        for src in srcs {
            // Inherited through a copy recovery only assumed pending, a wait is assumed too.
            let assumed = !self.of(src).iter().any(|c| c.dst == dst && !c.assumed);
            for c in self.by_src.get_mut(&src).into_iter().flatten() {
                if c.dst == dst && c.freed.is_none() {
                    c.freed = Some(end);
                }
            }
            for c in &inherited {
                let c = Copy {
                    assumed: c.assumed || assumed,
                    ..*c
                };
                if c.dst != src && !self.of(src).contains(&c) {
                    self.add_edge(src, c);
                }
            }
        }
    }

    /// Page `src` waits for the pending copy `c`.
    fn add_edge(&mut self, src: PageId, c: Copy) {
        self.by_src.entry(src).or_default().push(c);
        let srcs = self.by_dst.entry(c.dst).or_default();
        if !srcs.contains(&src) {
            srcs.push(src);
        }
        self.len += 1;
    }

    /// Page `src` was freed by the group ending at `end`: its pending copies that were freed at
    /// or before `end` are resolved (any later version of `src` comes after `end`, and the WAL
    /// rule makes the log durable past it before it is written). Without this, the copies of a
    /// dropped tree would stay pending for good.
    pub fn source_freed(&mut self, src: PageId, end: Lsn) {
        let gone: Vec<Copy> = self
            .of(src)
            .iter()
            .filter(|c| c.freed.is_some_and(|t| t <= end))
            .copied()
            .collect();
        for c in gone {
            self.resolve(src, c);
        }
    }

    /// A write of page `dst` at page LSN `lsn` is durable: every pending copy of it made at or
    /// before `lsn` is resolved.
    pub fn written(&mut self, dst: PageId, lsn: Lsn) {
        let Some(srcs) = self.by_dst.remove(&dst) else {
            return;
        };
        let mut left = Vec::new();
        for src in srcs {
            let mut keep = false;
            if let Some(v) = self.by_src.get_mut(&src) {
                let before = v.len();
                v.retain(|c| c.dst != dst || c.at > lsn);
                self.len -= before - v.len();
                keep = v.iter().any(|c| c.dst == dst);
                if v.is_empty() {
                    self.by_src.remove(&src);
                }
            }
            if keep {
                left.push(src);
            }
        }
        if !left.is_empty() {
            self.by_dst.insert(dst, left);
        }
    }

    /// Resolves every pending copy freed since it was made (recovery: the frees it replays are
    /// durable, which is all such a copy waits for).
    pub fn resolve_freed(&mut self) {
        let freed: Vec<(PageId, Copy)> = self
            .by_src
            .iter()
            .flat_map(|(&src, v)| {
                v.iter()
                    .filter(|c| c.freed.is_some())
                    .map(move |c| (src, *c))
            })
            .collect();
        for (src, c) in freed {
            self.resolve(src, c);
        }
    }

    /// Resolves the pending copy `c` of page `src` (its copy is durable, or the log is durable
    /// past its free).
    pub fn resolve(&mut self, src: PageId, c: Copy) {
        let Some(v) = self.by_src.get_mut(&src) else {
            return;
        };
        let Some(i) = v.iter().position(|x| *x == c) else {
            return;
        };
        v.swap_remove(i);
        self.len -= 1;
        let none_left = !v.iter().any(|x| x.dst == c.dst);
        if v.is_empty() {
            self.by_src.remove(&src);
        }
        if none_left {
            if let Some(srcs) = self.by_dst.get_mut(&c.dst) {
                srcs.retain(|s| *s != src);
                if srcs.is_empty() {
                    self.by_dst.remove(&c.dst);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_resolve_by_write_free_or_hand() {
        let mut d = CopyDeps::default();
        d.add(PageId(1), PageId(2), Lsn(100));
        d.add(PageId(1), PageId(3), Lsn(200));
        d.add(PageId(4), PageId(3), Lsn(300));
        assert_eq!(d.len(), 3);
        assert!(d.waits(PageId(1)) && d.waits(PageId(4)) && !d.waits(PageId(2)));
        // A write older than the copy resolves nothing.
        d.written(PageId(3), Lsn(150));
        assert_eq!(d.len(), 3);
        // A write at 250 resolves the copy made at 200, not the one made at 300.
        d.written(PageId(3), Lsn(250));
        assert_eq!(d.len(), 2);
        assert_eq!(d.of(PageId(4)).len(), 1);
        d.freed(PageId(3), Lsn(400));
        assert_eq!(d.of(PageId(4))[0].freed, Some(Lsn(400)));
        // A source freed before its copy's free keeps waiting; freed with or after it, not.
        d.source_freed(PageId(4), Lsn(399));
        assert!(d.waits(PageId(4)));
        d.source_freed(PageId(4), Lsn(400));
        assert!(!d.waits(PageId(4)));
        d.written(PageId(2), Lsn(100));
        assert_eq!(d.len(), 0);
        // Copies of copies.
        d.add(PageId(1), PageId(2), Lsn(500));
        d.add(PageId(2), PageId(3), Lsn(600));
        d.written(PageId(2), Lsn(500));
        d.written(PageId(3), Lsn(600));
        assert!(d.by_src.is_empty() && d.by_dst.is_empty());
    }

    #[test]
    fn a_freed_copy_passes_its_own_copies_to_its_sources() {
        let mut d = CopyDeps::default();
        // 2 a copy of 1, 3 a copy of 2; then 2 freed: 1 waits for 3 (whose content needs 2's,
        // which needs 1's as it was).
        d.add(PageId(1), PageId(2), Lsn(100));
        d.add(PageId(2), PageId(3), Lsn(200));
        d.freed(PageId(2), Lsn(300));
        assert!(d
            .of(PageId(1))
            .iter()
            .any(|c| c.dst == PageId(3) && c.freed.is_none()));
        // Recovery resolves the freed copy (its free is durable), not the inherited wait.
        d.resolve_freed();
        assert_eq!(d.of(PageId(1)).len(), 1);
        d.written(PageId(3), Lsn(200));
        assert!(!d.waits(PageId(1)));
        // Inherited through an assumed copy, the wait is assumed.
        let mut d = CopyDeps::default();
        d.add_copy(PageId(1), PageId(2), Lsn(100), true);
        d.add(PageId(2), PageId(3), Lsn(200));
        d.freed(PageId(2), Lsn(300));
        assert!(d
            .of(PageId(1))
            .iter()
            .any(|c| c.dst == PageId(3) && c.assumed));
    }
}
