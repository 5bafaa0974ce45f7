//! Redo application at recovery (docs/design.md invariant 4, the pool's half).
//!
//! Given the complete groups the log's recovery scan returned (after the doublewrite area has
//! restored what it can), pages are brought up to date group by group:
//!
//! - a group's records apply to a page iff the page's LSN < the group's end LSN (decided at the
//!   page's first record in the group); a `PageImage` is installed unconditionally (the disk
//!   copy may be torn) and the group's later records for the page then apply;
//! - a page whose first record since the checkpoint is `PageInit` / `PageImage` / `PageFree` is
//!   not read at all: redo alone defines it; a `PageFree` never takes a frame (a resident copy
//!   is dropped, as at commit), so what a group holds at once is the pages it changes;
//! - a page that must be read but fails verification (torn, corrupt) or was never written is
//!   rebuilt only if a later `PageInit` / `PageImage` of it exists in the recovered redo, or
//!   is dropped if a later `PageFree` does (its earlier records are superseded: a freed dirty
//!   page is never written, so its disk copy may predate them); otherwise recovery stops with
//!   [`PoolError::Unrecoverable`] naming the file and page — the page is never used as data;
//! - after a group, every page it changed takes the group's end LSN and is dirty with its
//!   oldest modification at the group's start, so the recovered state reaches disk before a
//!   checkpoint can pass it; a page it read and skipped (already at or past the group) is dirty
//!   too, at its own LSN — its copy may be a failed write the page cache still shows
//!   (`finish_skipped`);
//! - while a group changes a page, the page is owned (as a transaction owns the pages it
//!   changes: no-steal) and no flush writes it — not the flush of a page that waits for it as
//!   its copy either — until the group's end LSN is on it ([`RECOVERY_OWNER`]). Written halfway
//!   with the previous group's LSN, a power loss before its next write had the next recovery
//!   apply the group to it a second time (a split's right half, written as the copy of its
//!   source when a frame was claimed mid-group: a corrupt page, rows lost; a tester).
//!
//! Tests: `tests/recovery.rs` (torn pages rebuilt or reported, LSN rule, images first) and the
//! crash property tests; keel's `crash.rs`
//! `power_lost_at_any_call_of_a_recovery_short_of_frames_loses_nothing` (the ownership).

use crate::flush_list::FlushKind;
use crate::redo::{Record, RecoveredGroup};
use crate::stats::bump;
use crate::txn::{apply_copy, apply_init};
use crate::{BufferPool, PoolError, Result};
use keel_page::{set_lsn, Lsn, PageHeader, PageId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What [`BufferPool::apply_redo`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedoApplyReport {
    /// Groups replayed.
    pub groups: u64,
    /// Page records applied.
    pub records_applied: u64,
    /// Page records skipped because the page was already at or past their group.
    pub records_skipped: u64,
    /// Page records before a PageInit / PageImage of a page whose disk copy was unusable.
    pub records_superseded: u64,
    /// Non-page records seen (left to upper layers).
    pub logical_records: u64,
    /// Pages read from disk.
    pub pages_read: u64,
    /// Pages defined by redo alone (first record PageInit / PageImage), not read.
    pub pages_from_redo: u64,
    /// Full page images installed.
    pub images_installed: u64,
    /// Pages whose disk copy was torn, corrupt or never written, rebuilt from redo.
    pub unusable_pages_rebuilt: Vec<PageId>,
    /// Pages freed by the redo (left unwritten).
    pub pages_freed: u64,
}

/// The owner recovery marks a page with while a group changes it (transaction ids count up
/// from 1 and never reach it).
pub(crate) const RECOVERY_OWNER: u64 = u64::MAX;

#[derive(Clone, Copy)]
enum PState {
    Live,
    Freed,
    /// Disk copy unusable: skip records until this (group, record) position.
    SkipUntil(usize, usize),
}

/// The copies a group made, as its commit noted them: one source per copy, the last
/// (`PageTxn::copy_page` overwrites a page's source when the page, freed and started afresh in
/// the same transaction, is made a copy again; a free alone leaves it), in the order first
/// made. Noted in the pending copies only at the group's end, as the commit did: noting each
/// copy as it was replayed kept a copy the transaction had overwritten, and a later copy in the
/// same group then looked like a cycle no run makes — a store that could not be opened after a
/// split, a drop of the table, a new table and its splits in one transaction
/// (`tests/page_copies.rs`: `a_page_made_a_copy_again_in_one_transaction_replays`).
#[derive(Default)]
struct GroupCopies {
    /// (source, copy, assumed: a skipped copy, see `copy_deps::Copy::assumed`), in the order
    /// each copy was first made.
    made: Vec<(PageId, PageId, bool)>,
    /// Copy → its index in `made`.
    at: HashMap<PageId, usize>,
}

/// One wait on a path of [`GroupCopies::path`]: a pending copy (its source and entry) or this
/// group's copy (its index in `made`).
enum Wait {
    Pending(PageId, crate::copy_deps::Copy),
    Group(usize),
}

impl GroupCopies {
    /// Page `dst` is now a copy of `src` (its earlier source in this group, if any, forgotten).
    fn set(&mut self, src: PageId, dst: PageId, assumed: bool) {
        match self.at.get(&dst) {
            Some(&i) => self.made[i] = (src, dst, assumed),
            None => {
                self.at.insert(dst, self.made.len());
                self.made.push((src, dst, assumed));
            }
        }
    }

    /// Page `dst` is no copy made in this group (its earlier source, if any, forgotten).
    fn forget(&mut self, dst: PageId) {
        if let Some(i) = self.at.remove(&dst) {
            self.remove_at(i);
        }
    }

    /// Removes `made[i]` (whose entry in `at` the caller removed), keeping `at` in step.
    fn remove_at(&mut self, i: usize) {
        self.made.remove(i);
        for j in self.at.values_mut() {
            if *j > i {
                *j -= 1;
            }
        }
    }

    /// Whether page `from` waits for page `to` (directly or through copies of copies) through
    /// the pending copies `deps` and this group's copies (a source waits for its copy),
    /// counting the copies recovery only assumed pending when `assumed`. Recovery refuses a
    /// copy that would close a cycle of copies the run noted: a run never makes one
    /// (`PageTxn::copy_page`), so only damaged redo can.
    fn reaches(
        &self,
        deps: &crate::copy_deps::CopyDeps,
        from: PageId,
        to: PageId,
        assumed: bool,
    ) -> bool {
        self.path(deps, from, to, assumed).is_some()
    }

    /// A path of waits from `from` to `to` (see [`GroupCopies::reaches`]).
    fn path(
        &self,
        deps: &crate::copy_deps::CopyDeps,
        from: PageId,
        to: PageId,
        assumed: bool,
    ) -> Option<Vec<Wait>> {
        let mut came: HashMap<PageId, (PageId, Wait)> = HashMap::new();
        let mut seen = std::collections::HashSet::from([from]);
        let mut stack = vec![from];
        while let Some(p) = stack.pop() {
            if p == to {
                let mut path = Vec::new();
                let mut at = to;
                while let Some((prev, w)) = came.remove(&at) {
                    path.push(w);
                    at = prev;
                }
                return Some(path);
            }
            let pending = deps
                .of(p)
                .iter()
                .filter(|c| assumed || !c.assumed)
                .map(|c| (c.dst, Wait::Pending(p, *c)));
            let group = self
                .made
                .iter()
                .enumerate()
                .filter(|(_, (s, _, a))| *s == p && (assumed || !*a))
                .map(|(i, (_, d, _))| (*d, Wait::Group(i)));
            for (next, w) in pending.chain(group).collect::<Vec<_>>() {
                if seen.insert(next) {
                    came.insert(next, (p, w));
                    stack.push(next);
                }
            }
        }
        None
    }

    /// Resolves copies recovery only assumed pending until `from` no longer waits for `to`:
    /// each lies where the run had written the copy past its group (the skip showed it), so
    /// the cycle they close is one the run never had. Call only when no path of noted copies
    /// joins the two (each path then holds an assumed copy). A group copy resolved is dropped
    /// from `made`.
    fn break_assumed(&mut self, deps: &mut crate::copy_deps::CopyDeps, from: PageId, to: PageId) {
        while let Some(path) = self.path(deps, from, to, true) {
            let assumed = path.iter().find(|w| match w {
                Wait::Pending(_, c) => c.assumed,
                Wait::Group(i) => self.made.get(*i).is_some_and(|m| m.2),
            });
            match assumed {
                Some(Wait::Pending(src, c)) => deps.resolve(*src, *c),
                Some(Wait::Group(i)) => {
                    if let Some(&(_, dst, _)) = self.made.get(*i) {
                        self.at.remove(&dst);
                        self.remove_at(*i);
                    }
                }
                // Not called so (see above): nothing to break.
                None => return,
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Touched {
    Apply { f: u32, freed: bool, init: bool },
    NoApply { f: u32 },
    SkipUntil(usize, usize),
}

impl BufferPool {
    /// Applies recovered redo (see the module docs of `recovery`). Call on a pool with no
    /// transactions, after the page writer's doublewrite recovery and before anything else
    /// uses the pool; `checkpoint` is the recovered checkpoint LSN (it becomes the pool's
    /// horizon). The applied pages are dirty in the pool: flush them (`flush_all`) before
    /// taking a checkpoint past them.
    pub fn apply_redo(
        &self,
        checkpoint: Lsn,
        groups: &[RecoveredGroup],
    ) -> Result<RedoApplyReport> {
        self.set_horizon(checkpoint);
        let mut rep = RedoApplyReport::default();
        let at = RebuildPoints::of(groups);
        let mut states: HashMap<PageId, PState> = HashMap::new();
        let file = self.store.data_path().to_path_buf();
        let ps = self.page_size;
        for (gi, g) in groups.iter().enumerate() {
            let mut touched: HashMap<PageId, Touched> = HashMap::new();
            let mut copies = GroupCopies::default();
            let res = self.apply_group(
                gi,
                g,
                checkpoint,
                &at,
                &mut states,
                &mut touched,
                &mut copies,
                &mut rep,
                &file,
                ps,
            );
            // Finish the group's pages whatever happened (releases pins).
            for (pid, t) in touched {
                match t {
                    Touched::Apply { f, freed, init } => {
                        if res.is_ok() {
                            if freed {
                                self.unmap(f, pid);
                                states.insert(pid, PState::Freed);
                                rep.pages_freed += 1;
                            } else {
                                self.finish_recovered(f, pid, g, init);
                                states.insert(pid, PState::Live);
                            }
                        } else {
                            // The pool is not usable after a failed recovery anyway; drop it.
                            self.unmap(f, pid);
                        }
                        self.unpin(f);
                    }
                    Touched::NoApply { f } => {
                        if res.is_ok() {
                            self.finish_skipped(f, pid, g);
                        }
                        states.insert(pid, PState::Live);
                        self.unpin(f);
                    }
                    Touched::SkipUntil(..) => {}
                }
            }
            res?;
            // The group's frees change the pending copies as its commit did (a copy freed; a
            // freed source's copies that were freed before it resolved): without this, the
            // copies replayed could wait in a cycle the run never had (module `copy_deps`).
            // Only pages the group leaves freed, as the commit's own list has them: a page
            // freed and then allocated again in one group (a merge, then a split) may be a copy
            // made after its free, which stays pending. Counting its free marked that copy
            // freed, so the flush after recovery wrote its source first, and a crash during that
            // flush left the copy impossible to rebuild (crash matrix: power lost again during
            // recovery).
            let mut freed: Vec<PageId> = Vec::new();
            for r in &g.records {
                match r {
                    Record::PageFree { page_id } => freed.push(*page_id),
                    r => {
                        if let Some(p) = r.page_id() {
                            freed.retain(|&f| f != p);
                        }
                    }
                }
            }
            let pending = self
                .copy_deps_len
                .load(std::sync::atomic::Ordering::Acquire)
                > 0;
            if !copies.made.is_empty() || (!freed.is_empty() && pending) {
                self.note_copies(copies.made.into_iter(), &freed, g.end_lsn);
                // A copy freed since waits only for the log to be durable past its free, and
                // every group recovery replays is durable: it is resolved now, as the run
                // resolved it at the source's next write. Kept, it made a later copy the
                // other way look like a cycle no run makes (the pool's random copy test).
                let mut deps = self.copy_deps.lock();
                deps.resolve_freed();
                self.copy_deps_len
                    .store(deps.len(), std::sync::atomic::Ordering::Release);
            }
            rep.groups += 1;
            bump(&self.c.redo_groups, 1);
            // Keep frames available: write the oldest recovered pages when most are dirty.
            if self.dirty_pages() * 4 > self.frames() * 3 {
                let (ids, _) = self.oldest_batch(None, self.batch_pages);
                self.flush_pages(&ids, FlushKind::FlushList { wait: true })?;
            }
        }
        bump(&self.c.redo_records_applied, rep.records_applied);
        bump(&self.c.redo_records_skipped, rep.records_skipped);
        Ok(rep)
    }

    /// A page the group's records skip (its copy is at or past the group): dirty all the same,
    /// at its own LSN, so the checkpoint after recovery writes it home and syncs it before the
    /// log's checkpoint passes the group. Its copy may be readable but not durable: a write
    /// the device refused (a failed sync) stays in the page cache clean on Linux, reads as
    /// written, and a sync alone never writes it — a reopen on the same boot then skipped the
    /// redo, checkpointed past it, and a power loss lost those commits (test `keel`
    /// `io_faults.rs` `a_reopen_after_a_failed_data_sync_keeps_what_it_skipped`). The page
    /// writer now drops the data file's cached pages when it opens (`keel_io::File::drop_cache`:
    /// on ext4 the rewrite of such a cached page never reaches the disk), so the copy is the
    /// device's — which may still hold it only in its volatile cache, whose flush failed: the
    /// write makes it durable or fails.
    fn finish_skipped(&self, f: u32, pid: PageId, g: &RecoveredGroup) {
        let fr = &self.frames[f as usize];
        let lsn = BufferPool::header_lsn(fr.shared().bytes());
        let mut m = fr.lock_meta();
        if !m.dirty {
            m.oldest = g.start_lsn;
            self.flush_list.lock().insert((g.start_lsn, pid, f));
            m.set_dirty(true);
        }
        m.set_newest(lsn);
    }

    fn finish_recovered(&self, f: u32, pid: PageId, g: &RecoveredGroup, init: bool) {
        let fr = &self.frames[f as usize];
        let mut x = fr.exclusive();
        set_lsn(x.bytes_mut(), g.end_lsn);
        let mut m = fr.lock_meta();
        // The group's LSN is on the page: it may be written from here.
        m.set_owner(0);
        if !m.dirty {
            m.oldest = g.start_lsn;
            self.flush_list.lock().insert((g.start_lsn, pid, f));
            m.set_dirty(true);
        }
        m.set_newest(g.end_lsn);
        if init {
            m.rebuildable = true;
            m.rebuild_from = g.start_lsn;
            m.rebuild_by_copy = false;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_group(
        &self,
        gi: usize,
        g: &RecoveredGroup,
        checkpoint: Lsn,
        at: &RebuildPoints,
        states: &mut HashMap<PageId, PState>,
        touched: &mut HashMap<PageId, Touched>,
        copies: &mut GroupCopies,
        rep: &mut RedoApplyReport,
        file: &std::path::Path,
        ps: usize,
    ) -> Result<()> {
        for (ri, r) in g.records.iter().enumerate() {
            let Some(pid) = r.page_id() else {
                rep.logical_records += 1;
                continue;
            };
            // An init rebuilds a page, except one made a copy in the recovered redo: the copy
            // needs its source as it was then, so such a page's disk copy is read (it may be
            // past the copy, if the source is: module `copy_deps`).
            let rebuilds = match r {
                Record::PageInit { .. } => !at.copies.contains(&pid),
                Record::PageImage { .. } => true,
                _ => false,
            };
            let t = match touched.get(&pid).copied() {
                Some(Touched::SkipUntil(sg, sr)) if (gi, ri) < (sg, sr) => {
                    rep.records_superseded += 1;
                    continue;
                }
                Some(Touched::SkipUntil(..)) if matches!(r, Record::PageFree { .. }) => {
                    // Reached the free that makes the page's content dead.
                    touched.remove(&pid);
                    states.insert(pid, PState::Freed);
                    rep.records_applied += 1;
                    rep.pages_freed += 1;
                    continue;
                }
                Some(Touched::SkipUntil(..)) => {
                    // Reached the PageInit / PageImage that rebuilds the page.
                    let f = self.blank_frame(pid)?;
                    rep.unusable_pages_rebuilt.push(pid);
                    let t = Touched::Apply {
                        f,
                        freed: false,
                        init: false,
                    };
                    touched.insert(pid, t);
                    t
                }
                Some(t) => t,
                None => {
                    let state = states.get(&pid).copied();
                    match state {
                        Some(PState::SkipUntil(sg, sr)) if (gi, ri) < (sg, sr) => {
                            touched.insert(pid, Touched::SkipUntil(sg, sr));
                            rep.records_superseded += 1;
                            continue;
                        }
                        Some(PState::SkipUntil(..)) if matches!(r, Record::PageFree { .. }) => {
                            states.insert(pid, PState::Freed);
                            rep.records_applied += 1;
                            rep.pages_freed += 1;
                            continue;
                        }
                        Some(PState::SkipUntil(..)) => {
                            let f = self.blank_frame(pid)?;
                            rep.unusable_pages_rebuilt.push(pid);
                            let t = Touched::Apply {
                                f,
                                freed: false,
                                init: false,
                            };
                            touched.insert(pid, t);
                            t
                        }
                        None | Some(PState::Freed) if matches!(r, Record::PageFree { .. }) => {
                            states.insert(pid, PState::Freed);
                            rep.records_applied += 1;
                            continue;
                        }
                        Some(PState::Live) if matches!(r, Record::PageFree { .. }) => {
                            // A free needs no copy of the page: it leaves the pool unwritten,
                            // as at commit, and holds no frame (a dropped tree larger than the
                            // pool replays in a pool of any size).
                            self.drop_resident(pid);
                            states.insert(pid, PState::Freed);
                            rep.records_applied += 1;
                            rep.pages_freed += 1;
                            continue;
                        }
                        None | Some(PState::Freed) if rebuilds => {
                            self.defined_by_redo(pid, touched, rep)?
                        }
                        _ => {
                            // A PageWrite (or a free) on a page whose disk copy is needed.
                            let was_live = matches!(state, Some(PState::Live));
                            match self.touch_read(pid, g, was_live, touched, rep) {
                                Ok(t) => t,
                                Err(
                                    e @ (PoolError::Corruption(_) | PoolError::Unwritten { .. }),
                                ) if !was_live => match at.next(pid, (gi, ri)) {
                                    Some(p) if p == (gi, ri) => {
                                        // This record (an init of a page made a copy later)
                                        // defines the page: its disk copy is not needed.
                                        self.defined_by_redo(pid, touched, rep)?
                                    }
                                    Some((sg, sr)) => {
                                        states.insert(pid, PState::SkipUntil(sg, sr));
                                        touched.insert(pid, Touched::SkipUntil(sg, sr));
                                        rep.records_superseded += 1;
                                        continue;
                                    }
                                    _ => {
                                        return Err(PoolError::Unrecoverable {
                                                file: file.to_path_buf(),
                                                page_id: pid,
                                                reason: format!(
                                                    "{e}; its redo since the checkpoint at {checkpoint} (first record in the group ending at {}) holds no PageInit or PageImage to rebuild it",
                                                    g.end_lsn
                                                ),
                                            });
                                    }
                                },
                                Err(e) => return Err(e),
                            }
                        }
                    }
                }
            };
            // A copy to be made needs its source as it is at this point of the log.
            let mut copy_src = None;
            if let (Record::PageCopy { from, .. }, Touched::Apply { f, .. }) = (r, t) {
                match self.copy_source(*from, pid, g, states, touched, rep)? {
                    Some(sf) => copy_src = Some(sf),
                    None => {
                        // The source is past the copy (or unusable): the copy's own disk copy
                        // should have been written first. Only a later rebuild of the page
                        // (its content dead until then) saves it.
                        let Some(p) = at.next(pid, (gi, ri)) else {
                            return Err(PoolError::Unrecoverable {
                                file: file.to_path_buf(),
                                page_id: pid,
                                reason: format!(
                                    "it was made a copy of {from} in the group ending at {}, but {from} on disk is already past that group (or unusable) while this page's disk copy is older: the copy was not written before its source, and no later init, image or free of it follows",
                                    g.end_lsn
                                ),
                            });
                        };
                        self.unmap(f, pid);
                        self.unpin(f);
                        states.insert(pid, PState::SkipUntil(p.0, p.1));
                        touched.insert(pid, Touched::SkipUntil(p.0, p.1));
                        rep.records_superseded += 1;
                        // The run made the page a copy of `from` here, which replaced any
                        // earlier copy of it in this group (`PageTxn::copy_page`); so must the
                        // replay's account, or that earlier source still seems to wait for the
                        // page, and a later copy the other way looks like a cycle no run makes
                        // (crash matrix seed 30217562: 11 a copy of 12, freed, started afresh
                        // as a copy of 14 whose disk copy was past it, then 12 a copy of 11).
                        // Noted as assumed, as a skipped copy is (the run wrote the source past
                        // it, so it had written the copy first).
                        if copies.reaches(&self.copy_deps.lock(), pid, *from, true) {
                            copies.forget(pid);
                        } else {
                            copies.set(*from, pid, true);
                        }
                        continue;
                    }
                }
            }
            match t {
                Touched::Apply { f, freed, init } => {
                    let mut x = self.frames[f as usize].exclusive();
                    self.own_for_group(f);
                    let page = x.bytes_mut();
                    let bad = |reason: String| PoolError::BadRedo {
                        page_id: pid,
                        lsn: g.end_lsn,
                        reason,
                    };
                    let (mut freed, mut init) = (freed, init);
                    match r {
                        Record::PageInit { page_type, .. } => {
                            apply_init(page, pid, *page_type);
                            freed = false;
                            init = true;
                        }
                        Record::PageImage { image, .. } => {
                            if image.len() != ps {
                                return Err(bad(format!(
                                    "image of {} bytes, pages are {ps}",
                                    image.len()
                                )));
                            }
                            match PageHeader::read(image) {
                                Some(h) if h.page_id == pid => {}
                                // The image of a page that did not exist yet.
                                _ if keel_page::is_zero(image) => {}
                                other => {
                                    return Err(bad(format!(
                                        "image header names {:?}",
                                        other.map(|h| h.page_id)
                                    )))
                                }
                            }
                            page.copy_from_slice(image);
                            freed = false;
                            rep.images_installed += 1;
                        }
                        Record::PageWrite { .. } | Record::PageMove { .. } => {
                            if freed {
                                return Err(bad(
                                    "a change to a page freed earlier in the group".into()
                                ));
                            }
                            // The one vocabulary and its one bounds check (keel_page::PageOp).
                            if let Some((_, op)) = r.page_op() {
                                op.apply(page).map_err(|e| bad(e.to_string()))?;
                            }
                        }
                        Record::PageFree { .. } => freed = true,
                        Record::PageCopy { from, .. } => {
                            if freed {
                                return Err(bad(
                                    "a copy to a page freed earlier in the group".into()
                                ));
                            }
                            let Some(sf) = copy_src else {
                                return Err(bad("a copy without its source".into()));
                            };
                            // The source will wait for this page: if this page already waits
                            // for the source, the two could never be written (no run makes a
                            // cycle: `PageTxn::copy_page` refuses one).
                            {
                                let mut deps = self.copy_deps.lock();
                                if copies.reaches(&deps, pid, *from, false) {
                                    return Err(bad(format!(
                                        "made a copy of {from}, which already waits for this page through pending copies: a cycle no run makes (damaged redo)"
                                    )));
                                }
                                // A cycle through copies recovery skipped (written past their
                                // group in the run, so resolved there) is none the run had:
                                // they are resolved (crash matrix seed 50240891).
                                copies.break_assumed(&mut deps, pid, *from);
                                self.copy_deps_len
                                    .store(deps.len(), std::sync::atomic::Ordering::Release);
                            }
                            let s = self.frames[sf as usize].shared();
                            if s.bytes().len() != page.len() {
                                return Err(bad("a copy between pages of two sizes".into()));
                            }
                            apply_copy(page, s.bytes(), pid);
                            drop(s);
                            // Redo rebuilds it only with its source: never written unprotected.
                            init = false;
                            copies.set(*from, pid, false);
                        }
                        Record::Logical { .. } => {}
                    }
                    rep.records_applied += 1;
                    touched.insert(pid, Touched::Apply { f, freed, init });
                }
                Touched::NoApply { f } => {
                    if let Record::PageImage { .. } = r {
                        // Images are installed unconditionally; the rest of the group follows.
                        touched.insert(
                            pid,
                            Touched::Apply {
                                f,
                                freed: false,
                                init: false,
                            },
                        );
                        let mut x = self.frames[f as usize].exclusive();
                        self.own_for_group(f);
                        if let Record::PageImage { image, .. } = r {
                            if image.len() != ps {
                                return Err(PoolError::BadRedo {
                                    page_id: pid,
                                    lsn: g.end_lsn,
                                    reason: format!("image of {} bytes", image.len()),
                                });
                            }
                            x.bytes_mut().copy_from_slice(image);
                        }
                        rep.images_installed += 1;
                        rep.records_applied += 1;
                    } else {
                        // A copy the page is already past: the page is written again all the
                        // same (`finish_skipped`), and its copy may be what the device lacks
                        // (a failed write the page cache shows), so its source waits for that
                        // write, as after the commit — unless that would close a cycle with
                        // copies the run had resolved since (then the two were both written
                        // past the group, which the run's order allowed).
                        if let Record::PageCopy { from, .. } = r {
                            if !copies.reaches(&self.copy_deps.lock(), pid, *from, true) {
                                copies.set(*from, pid, true);
                            }
                        }
                        rep.records_skipped += 1;
                    }
                }
                Touched::SkipUntil(..) => rep.records_superseded += 1,
            }
        }
        Ok(())
    }

    /// The frame of page `src` as it is at this point of group `g`, for a copy to page `dst`:
    /// touched by the group so far, or read now (then touched: applied from here if its disk
    /// copy is older than the group). `None` when its disk copy is past the group or unusable.
    fn copy_source(
        &self,
        src: PageId,
        dst: PageId,
        g: &RecoveredGroup,
        states: &HashMap<PageId, PState>,
        touched: &mut HashMap<PageId, Touched>,
        rep: &mut RedoApplyReport,
    ) -> Result<Option<u32>> {
        let bad = |reason: &str| PoolError::BadRedo {
            page_id: dst,
            lsn: g.end_lsn,
            reason: format!("{reason} (page {src})"),
        };
        if src == dst {
            return Err(bad("a page made a copy of itself"));
        }
        match touched.get(&src).copied() {
            Some(Touched::Apply { freed: true, .. }) => {
                Err(bad("a copy of a page freed earlier in the group"))
            }
            Some(Touched::Apply { f, .. }) => Ok(Some(f)),
            Some(Touched::NoApply { .. } | Touched::SkipUntil(..)) => Ok(None),
            None => match states.get(&src) {
                Some(PState::SkipUntil(..)) => Ok(None),
                Some(PState::Freed) => Err(bad("a copy of a freed page")),
                state => {
                    let was_live = matches!(state, Some(PState::Live));
                    match self.touch_read(src, g, was_live, touched, rep) {
                        Ok(Touched::Apply { f, .. }) => Ok(Some(f)),
                        Ok(_) => Ok(None),
                        Err(PoolError::Corruption(_) | PoolError::Unwritten { .. }) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            },
        }
    }

    /// Page `pid` from the pool or its disk copy, touched by group `g`: applying if its LSN is
    /// older than the group, else not (the rule of the module docs). Read errors are the
    /// caller's to judge.
    fn touch_read(
        &self,
        pid: PageId,
        g: &RecoveredGroup,
        was_live: bool,
        touched: &mut HashMap<PageId, Touched>,
        rep: &mut RedoApplyReport,
    ) -> Result<Touched> {
        let f = self.fix(pid)?;
        if !was_live {
            rep.pages_read += 1;
        }
        let lsn = BufferPool::header_lsn(self.frames[f as usize].shared().bytes());
        let t = if lsn < g.end_lsn {
            Touched::Apply {
                f,
                freed: false,
                init: false,
            }
        } else {
            Touched::NoApply { f }
        };
        touched.insert(pid, t);
        Ok(t)
    }

    /// A blank frame for page `pid`, which redo alone defines from here: touched, applying.
    fn defined_by_redo(
        &self,
        pid: PageId,
        touched: &mut HashMap<PageId, Touched>,
        rep: &mut RedoApplyReport,
    ) -> Result<Touched> {
        let f = self.blank_frame(pid)?;
        rep.pages_from_redo += 1;
        let t = Touched::Apply {
            f,
            freed: false,
            init: false,
        };
        touched.insert(pid, t);
        Ok(t)
    }

    /// Drops page `pid` from the pool if it is resident (its changes are dead: it was freed).
    fn drop_resident(&self, pid: PageId) {
        if let Some(f) = self.lookup_pin(pid) {
            let fr = &self.frames[f as usize];
            let x = fr.exclusive();
            if fr.page_id.load(std::sync::atomic::Ordering::Relaxed) == pid.0 {
                self.unmap(f, pid);
            }
            drop(x);
            self.unpin(f);
        }
    }

    /// A zeroed frame for `pid` (resident or newly installed), pinned and owned by the group.
    fn blank_frame(&self, pid: PageId) -> Result<u32> {
        let (f, latched) = self.install_blank(pid)?;
        let mut x = match latched {
            Some(x) => x,
            None => self.frames[f as usize].exclusive(),
        };
        self.own_for_group(f);
        x.bytes_mut().fill(0);
        Ok(f)
    }

    /// Marks frame `f` (pinned, its exclusive latch held by the caller) as changed by the
    /// group being replayed: no flush writes it until `finish_recovered` stamps the group's
    /// LSN on it (or it is dropped).
    fn own_for_group(&self, f: u32) {
        let mut m = self.frames[f as usize].lock_meta();
        if m.owner != RECOVERY_OWNER {
            m.set_owner(RECOVERY_OWNER);
        }
    }
}

/// The pages the recovered redo changes that it cannot rebuild by itself: their first record
/// since the checkpoint is neither an image, nor an init (of a page not made a copy anywhere in
/// the redo: a copy needs its source as it was), nor a free (which makes the content dead).
/// Replay needs their disk copies, so a torn write of one during recovery is repaired only if
/// the write was protected (doublewrite, atomic). In full-page-writes mode the redo begins
/// every changed page with an image or an init, so there are none — unless the log was written
/// in another mode (doublewrite, atomic, none), which logs no images.
pub fn pages_redo_cannot_rebuild(groups: &[RecoveredGroup]) -> Vec<PageId> {
    let at = RebuildPoints::of(groups);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        for (ri, r) in g.records.iter().enumerate() {
            let Some(pid) = r.page_id() else { continue };
            if !seen.insert(pid) {
                continue;
            }
            // Its first record must be a rebuild point, and not the init of a copy (which
            // needs its source as it was, as replay does).
            let rebuilds = at.next(pid, (gi, ri)) == Some((gi, ri))
                && !(matches!(r, Record::PageInit { .. }) && at.copies.contains(&pid));
            if !rebuilds {
                out.push(pid);
            }
        }
    }
    out
}

/// Where each page's redo rebuilds it (init, image, free: positions as (group, record), in log
/// order), and which pages are made copies anywhere in the recovered redo.
#[derive(Default)]
struct RebuildPoints {
    rebuilds: HashMap<PageId, Vec<(usize, usize)>>,
    copies: std::collections::HashSet<PageId>,
}

impl RebuildPoints {
    /// Where each page of `groups` becomes well-defined again if its disk copy is unusable: an
    /// init or an image rebuilds it, and a free makes its content dead (a freed dirty page
    /// leaves the pool unwritten, so a checkpoint may pass its earlier changes while the replay
    /// still holds records of it up to the free); and which pages are made copies.
    fn of(groups: &[RecoveredGroup]) -> RebuildPoints {
        let mut at = RebuildPoints::default();
        for (gi, g) in groups.iter().enumerate() {
            for (ri, r) in g.records.iter().enumerate() {
                match r {
                    Record::PageInit { page_id, .. }
                    | Record::PageImage { page_id, .. }
                    | Record::PageFree { page_id } => {
                        at.rebuilds.entry(*page_id).or_default().push((gi, ri));
                    }
                    Record::PageCopy { page_id, .. } => {
                        at.copies.insert(*page_id);
                    }
                    _ => {}
                }
            }
        }
        at
    }

    /// The first position at or after `from` where page `id`'s redo rebuilds it.
    fn next(&self, id: PageId, from: (usize, usize)) -> Option<(usize, usize)> {
        let v = self.rebuilds.get(&id)?;
        v.get(v.partition_point(|&p| p < from)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::GroupCopies;
    use crate::copy_deps::CopyDeps;
    use keel_page::{Lsn, PageId};

    #[test]
    fn a_group_keeps_each_copys_last_source_and_finds_cycles_through_both() {
        let mut deps = CopyDeps::default();
        // An earlier group: 1 waits for its copy 2.
        deps.add(PageId(1), PageId(2), Lsn(100));
        let mut g = GroupCopies::default();
        // 46 made a copy of 27, then (freed, started afresh) a copy of 58: its source is 58.
        g.set(PageId(27), PageId(46), false);
        g.set(PageId(58), PageId(46), false);
        assert_eq!(g.made, [(PageId(58), PageId(46), false)]);
        // So 27 may now be made a copy of 46: 27 does not wait for 46.
        assert!(!g.reaches(&deps, PageId(27), PageId(46), true));
        // Through both: 1 waits for 2 (the earlier group), 2 for its copy 5 (this group).
        g.set(PageId(2), PageId(5), false);
        assert!(g.reaches(&deps, PageId(1), PageId(5), true));
        assert!(!g.reaches(&deps, PageId(5), PageId(1), true));
    }

    /// Copies recovery only assumed pending (skipped ones) are left out of the damage check
    /// and resolved when they close a cycle; copies the run noted are kept.
    #[test]
    fn a_cycle_through_assumed_copies_is_broken_there() {
        let mut deps = CopyDeps::default();
        // 10 waits for 8 (assumed: recovery skipped the copy), 20 for 21 (noted).
        deps.add_copy(PageId(10), PageId(8), Lsn(100), true);
        deps.add(PageId(20), PageId(21), Lsn(100));
        let mut g = GroupCopies::default();
        // This group: 8 waits for 16 (noted), 21 for 22 (assumed).
        g.set(PageId(8), PageId(16), false);
        g.set(PageId(21), PageId(22), true);
        assert!(g.reaches(&deps, PageId(10), PageId(16), true));
        assert!(!g.reaches(&deps, PageId(10), PageId(16), false));
        g.break_assumed(&mut deps, PageId(10), PageId(16));
        assert!(!g.reaches(&deps, PageId(10), PageId(16), true));
        assert!(!deps.waits(PageId(10)) && deps.waits(PageId(20)));
        g.break_assumed(&mut deps, PageId(20), PageId(22));
        assert_eq!(g.made, [(PageId(8), PageId(16), false)]);
        assert!(deps.waits(PageId(20)), "a noted copy stays");
    }
}
