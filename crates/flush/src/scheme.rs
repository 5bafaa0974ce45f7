//! The torn-page protection schemes: one trait, [`ProtectionScheme`], with one small
//! implementation per mode. The writer seals a batch into [`Group`]s and hands each to its
//! scheme; the scheme decides how the pages reach their home and when they are durable.
//!
//! # Invariants kept here (each tested by breaking it on purpose, see `crate::tests`)
//!
//! * Doublewrite order (docs/design.md invariant 2): a group's protected images are written to a
//!   doublewrite slot and the area is synced before any page of the group is written in place;
//!   the slot is reused only after a data-file sync that started after the group's in-place
//!   writes completed. That sync is deferred: `Doublewrite::write_group` returns after the
//!   in-place writes with the slot *pending* (its pages are durable: recovery restores them from
//!   the synced slot); the next batch that finds no free slot syncs the data file
//!   ([`Ctx::sync_data_file`], which frees every slot that was pending before it started), as
//!   does any other data sync of the writer. A group that holds pages which skipped the
//!   doublewrite (init on flush) syncs the data file before returning: they have no copy.
//! * Slot states after a failure: free after a failure before any in-place write (nothing of
//!   the batch reached the data file); never reused after a failure during or after the in-place
//!   writes (the writer is poisoned, the images must survive until recovery).
//! * A failed sync poisons the writer: the error is returned once, every later write returns
//!   [`FlushError::Poisoned`]; a batch whose sync "succeeded" after another batch's sync failed is
//!   not reported durable (the page cache may have dropped its pages).
//! * A failed in-place write poisons too: the page's home may hold part of a page, so its
//!   doublewrite copy must survive until recovery.

use crate::area::{encode_directory, DoublewriteArea};
use crate::config::ResolvedMode;
use crate::error::{FlushError, Result};
use crate::stats::{add, Counters};
use crate::unsynced::Unsynced;
use keel_io::{AlignedBuf, File, PoisonCause, WriteOp};
use keel_page::{Lsn, PageId};
use std::fmt::Debug;
use std::sync::Arc;

/// Deliberate faults for the tests that break docs/design.md's invariants on purpose. Outside
/// `cfg(test)` there is no way to set them and every read is `cfg!(test) && knob`, a constant
/// `false`: a release build has no branch that can skip an invariant.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Knobs {
    /// Invariant 1: do not ask the log to flush before writing.
    pub skip_wal_flush: bool,
    /// Invariant 1: do not check the log's durable LSN before writing.
    pub skip_wal_check: bool,
    /// Invariant 2: write pages in place before the doublewrite area is synced.
    pub in_place_before_doublewrite_sync: bool,
    /// Invariant 2: free a slot at the end of its batch, right after the in-place writes were
    /// issued (no pending state, no data sync before reuse, none at all), so a later batch may
    /// overwrite the slot while they are still volatile.
    pub defer_data_sync: bool,
}

/// The page writer's poison flag ([`keel_io::Poison`], the type every layer uses): set by the
/// first failed sync or in-place write, never cleared; its cause is kept whole.
#[derive(Debug, Default)]
pub(crate) struct Poison(keel_io::Poison);

impl Poison {
    /// `Err(Poisoned)` once poisoned.
    pub fn check(&self) -> Result<()> {
        match self.0.cause() {
            None => Ok(()),
            Some(cause) => Err(FlushError::Poisoned {
                cause: cause.clone(),
            }),
        }
    }

    /// Poisons (the first cause is kept).
    pub fn set(&self, cause: PoisonCause) {
        self.0.poison(cause);
    }

    /// Whether poisoned.
    pub fn is_set(&self) -> bool {
        self.0.is_poisoned()
    }

    /// The first cause, once poisoned.
    pub fn cause(&self) -> Option<&PoisonCause> {
        self.0.cause()
    }
}

/// One page of a group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupPage {
    pub id: PageId,
    pub lsn: Lsn,
}

/// Sealed page images ready to write: `buf` holds `dir_len` bytes reserved for a doublewrite
/// slot directory, then the images back to back. The first `protected` pages get the scheme's
/// protection; the rest skipped it (init on flush).
#[derive(Debug)]
pub(crate) struct Group {
    pub buf: AlignedBuf,
    pub dir_len: usize,
    pub page_size: usize,
    pub pages: Vec<GroupPage>,
    pub protected: usize,
}

impl Group {
    /// The sealed image of page `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        let o = self.dir_len + i * self.page_size;
        &self.buf[o..o + self.page_size]
    }

    /// In-place writes of pages `range`, in file order.
    pub fn home_ops(&self, range: std::ops::Range<usize>) -> Vec<WriteOp<'_>> {
        let mut ops: Vec<WriteOp<'_>> = range
            .map(|i| WriteOp {
                // Every id was checked by `PageWriter::write_pages` (`check_page`): no overflow.
                offset: self.pages[i].id.0.saturating_mul(self.page_size as u64),
                buf: self.image(i),
            })
            .collect();
        ops.sort_by_key(|w| w.offset);
        ops
    }
}

/// What a scheme needs to write: the data file, counters, the poison flag, the knobs, and the
/// doublewrite area (if the writer has one) whose pending slots a data sync frees.
pub(crate) struct Ctx<'a> {
    pub data: &'a dyn File,
    pub area: Option<&'a DoublewriteArea>,
    pub counters: &'a Counters,
    pub poison: &'a Poison,
    pub knobs: &'a Knobs,
    /// The pages written in place that no data sync has covered yet.
    pub unsynced: &'a Unsynced,
}

impl Ctx<'_> {
    /// Writes `ops` to their homes (as RWF_ATOMIC writes when `atomic`). Any failure poisons: a
    /// home may now hold part of a page.
    pub fn write_home(&self, ops: &[WriteOp<'_>], atomic: bool) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        self.poison.check()?;
        let r = if atomic {
            self.data.write_atomic_batch(ops)
        } else {
            self.data.write_batch(ops)
        };
        match r {
            Ok(()) => {
                let bytes: usize = ops.iter().map(|w| w.buf.len()).sum();
                add(&self.counters.data_writes, ops.len() as u64);
                add(&self.counters.data_pages_written, ops.len() as u64);
                add(&self.counters.data_bytes_written, bytes as u64);
                self.unsynced.wrote(ops.iter().filter_map(|w| {
                    let h = keel_page::PageHeader::read(w.buf)?;
                    Some((h.page_id, h.lsn))
                }));
                if atomic {
                    add(&self.counters.atomic_writes, ops.len() as u64);
                }
                Ok(())
            }
            Err(e) => {
                let cause = PoisonCause::new("in-place write", self.data.path(), e)
                    .with_consequence(
                        "a page's home may hold part of a page and must be repaired by recovery",
                    );
                self.poison.set(cause.clone());
                Err(FlushError::Poisoned { cause })
            }
        }
    }

    /// Syncs `file` (the data file or the doublewrite area). A failure poisons; success is
    /// reported only if no other sync failed meanwhile.
    pub fn sync(&self, file: &dyn File, doublewrite: bool) -> Result<()> {
        self.poison.check()?;
        match file.sync_data() {
            Ok(()) => {
                add(&self.counters.syncs, 1);
                if doublewrite {
                    add(&self.counters.doublewrite_syncs, 1);
                }
                // Another batch's failed sync may have dropped this batch's pages from the page
                // cache even though this sync returned success.
                self.poison.check()
            }
            Err(e) => {
                let cause = PoisonCause::new("sync", file.path(), e)
                    .with_consequence("never retried: the kernel may have dropped the pages");
                self.poison.set(cause.clone());
                Err(FlushError::Poisoned { cause })
            }
        }
    }

    /// Syncs the data file and, on success, frees every doublewrite slot that was pending
    /// before the sync started (its in-place writes had completed, so this sync made them
    /// durable). Every data sync of the writer goes through here.
    pub fn sync_data_file(&self) -> Result<()> {
        // Read before the sync: only slots pending by now had their in-place writes completed
        // before the sync started.
        let gen = self.area.map(|a| a.pending_gen());
        let token = self.unsynced.sync_begins();
        self.sync(self.data, false)?;
        self.unsynced.synced(token);
        if let (Some(area), Some(gen)) = (self.area, gen) {
            area.free_pending(gen);
        }
        Ok(())
    }
}

/// A torn-page protection scheme: how one sealed group reaches its home durably.
pub(crate) trait ProtectionScheme: Send + Sync + Debug {
    /// The mode it implements.
    fn mode(&self) -> ResolvedMode;

    /// Whether pages rebuildable from redo may skip this scheme's protection (and be counted as
    /// skipped). False for schemes that protect nothing at write time.
    fn protects(&self) -> bool;

    /// The most protected pages one group may hold (the doublewrite batch size).
    fn group_limit(&self) -> usize {
        usize::MAX
    }

    /// Bytes to reserve in front of a group's images (a doublewrite slot directory).
    fn dir_len(&self) -> usize {
        0
    }

    /// Whether the buffer pool must log a full page image with a page's first change after a
    /// checkpoint.
    fn wants_full_page_images(&self) -> bool {
        false
    }

    /// Writes the group; returns when it is durable.
    fn write_group(&self, ctx: &Ctx<'_>, group: &mut Group) -> Result<()>;
}

/// `None` and `FullPageWrites`: pages in place, then one data sync.
#[derive(Debug)]
pub(crate) struct InPlace {
    pub full_page_writes: bool,
}

impl ProtectionScheme for InPlace {
    fn mode(&self) -> ResolvedMode {
        if self.full_page_writes {
            ResolvedMode::FullPageWrites
        } else {
            ResolvedMode::None
        }
    }

    fn protects(&self) -> bool {
        false
    }

    fn wants_full_page_images(&self) -> bool {
        self.full_page_writes
    }

    fn write_group(&self, ctx: &Ctx<'_>, group: &mut Group) -> Result<()> {
        ctx.write_home(&group.home_ops(0..group.pages.len()), false)?;
        ctx.sync_data_file()
    }
}

/// `Atomic`: each protected page one RWF_ATOMIC write (the io layer rejects, before any I/O, a
/// write its probe says cannot be atomic); skipped pages plain writes; then one data sync
/// (atomicity is not durability).
#[derive(Debug)]
pub(crate) struct Atomic;

impl ProtectionScheme for Atomic {
    fn mode(&self) -> ResolvedMode {
        ResolvedMode::Atomic
    }

    fn protects(&self) -> bool {
        true
    }

    fn write_group(&self, ctx: &Ctx<'_>, group: &mut Group) -> Result<()> {
        ctx.write_home(&group.home_ops(0..group.protected), true)?;
        let skipped = group.home_ops(group.protected..group.pages.len());
        ctx.write_home(&skipped, false)?;
        add(&ctx.counters.pages_skipped_protection, skipped.len() as u64);
        ctx.sync_data_file()
    }
}

/// `Doublewrite`: InnoDB's scheme on a [`DoublewriteArea`].
#[derive(Debug)]
pub(crate) struct Doublewrite {
    pub area: Arc<DoublewriteArea>,
    /// The algorithm the group's pages were sealed with.
    pub checksum: keel_page::Checksum,
    pub batch_pages: usize,
    pub dir_len: usize,
}

impl ProtectionScheme for Doublewrite {
    fn mode(&self) -> ResolvedMode {
        ResolvedMode::Doublewrite {
            batch_pages: self.batch_pages,
        }
    }

    fn protects(&self) -> bool {
        true
    }

    fn group_limit(&self) -> usize {
        self.batch_pages
    }

    fn dir_len(&self) -> usize {
        self.dir_len
    }

    fn write_group(&self, ctx: &Ctx<'_>, group: &mut Group) -> Result<()> {
        let n = group.pages.len();
        let skipped = n - group.protected;
        if group.protected == 0 {
            ctx.write_home(&group.home_ops(0..n), false)?;
            add(&ctx.counters.pages_skipped_protection, skipped as u64);
            return ctx.sync_data_file();
        }
        let (slot, seq) = self.area.acquire(
            || ctx.poison.check(),
            || {
                ctx.sync_data_file()?;
                add(&ctx.counters.doublewrite_reuse_syncs, 1);
                Ok(())
            },
        )?;
        self.write_in_slot(ctx, group, slot, seq)
    }
}

impl Doublewrite {
    /// Slot write -> area sync -> in-place writes -> slot pending. The slot ends free after a
    /// failure before any in-place write (nothing of the batch reached the data file, and the
    /// slot's previous batch was durable in place before it was handed out), lost after a
    /// failure during or after the in-place writes (the writer is poisoned; its images must stay
    /// for recovery), pending otherwise — freed by the next successful data sync.
    fn write_in_slot(&self, ctx: &Ctx<'_>, group: &mut Group, slot: usize, seq: u64) -> Result<()> {
        if let Err(e) = self.copy_to_slot(ctx, group, slot, seq) {
            self.area.release(slot);
            return Err(e);
        }
        let n = group.pages.len();
        let prot = group.protected;
        let in_place = ctx.write_home(&group.home_ops(0..n), false).and_then(|()| {
            add(&ctx.counters.pages_skipped_protection, (n - prot) as u64);
            if cfg!(test) && ctx.knobs.in_place_before_doublewrite_sync {
                ctx.sync(&**self.area.file()?, true)?;
            }
            Ok(())
        });
        if let Err(e) = in_place {
            self.area.abandon(slot);
            return Err(e);
        }
        if cfg!(test) && ctx.knobs.defer_data_sync {
            self.area.release(slot);
            return Ok(());
        }
        self.area.mark_pending(slot);
        if n > prot {
            // Pages that skipped the doublewrite have no copy in the area: durable only in place.
            // This sync frees the slot (and every other pending one) too.
            ctx.sync_data_file()?;
        }
        Ok(())
    }

    /// Writes the group's protected images into `slot` and (unless a test fault says otherwise)
    /// syncs the area. Nothing is written in place yet.
    fn copy_to_slot(&self, ctx: &Ctx<'_>, group: &mut Group, slot: usize, seq: u64) -> Result<()> {
        let prot = group.protected;
        let ps = group.page_size;
        let entries: Vec<(PageId, Lsn)> =
            group.pages[..prot].iter().map(|p| (p.id, p.lsn)).collect();
        {
            let (dir, images) = group.buf.split_at_mut(self.dir_len);
            encode_directory(
                dir,
                slot,
                seq,
                ps,
                &entries,
                &images[..prot * ps],
                self.checksum,
            );
        }
        let slot_bytes = &group.buf[..self.dir_len + prot * ps];
        ctx.poison.check()?;
        self.area.write_slot(slot, slot_bytes)?;
        add(&ctx.counters.doublewrite_writes, 1);
        add(&ctx.counters.doublewrite_pages, prot as u64);
        add(
            &ctx.counters.doublewrite_bytes_written,
            slot_bytes.len() as u64,
        );
        if !(cfg!(test) && ctx.knobs.in_place_before_doublewrite_sync) {
            ctx.sync(&**self.area.file()?, true)?;
        }
        Ok(())
    }
}
