//! Doublewrite recovery: before anything else touches the data file, restore from the
//! doublewrite area every page whose home copy is torn or older than its valid area copy, then
//! sync the data file, so no slot is reused while its in-place write may be lost.
//!
//! The recovery may begin in memory ([`PageWriter::recover_doublewrite_in_memory`]: the images
//! served to reads in place of their home pages, nothing written), so that a store's open can
//! run its checks before it writes anything; the restore then writes the same images.
//!
//! Invariants (tests in `src/tests/crash.rs`): after recovery every page the area holds a
//! valid, newer image of is restored; an area slot that is itself torn is ignored (its home
//! copy was never written over, by the doublewrite order); the restore compares each image
//! with the data file's own bytes, never with an in-memory image, and ends the in-memory
//! images once the restored pages are synced, before any page write or the area's format.
//!
//! **An image at or below the log's checkpoint repairs nothing** (the checkpoint the open gives
//! [`PageWriter::recover_doublewrite_in_memory`]). A write torn by a crash is one the
//! checkpoint did not cover: the checkpoint is recorded only after the data file is synced
//! ([`PageWriter::stamp_checkpoint`]), so every write of a page at or below it is home and
//! durable, and a page's next write carries a newer LSN. (Builds before page 0 recorded the
//! file checkpoint deferred that sync to the area's slot reuse; the open gives their stores no
//! checkpoint here, and they keep the rule below it.) So a home page
//! that fails verification (or reads as never written) under such an image is damage since —
//! a flipped bit, a zeroed sector — and the image may be of the page's previous life (a page
//! freed and re-used is written home without the area when it is started afresh): restored, it
//! served another table's rows as this page's, past every check. Only when the damaged page's
//! header still names the page and the image's LSN (the same version, damaged since) is the
//! image restored; otherwise the page is left, read as damaged and named (test `tests/basic.rs`
//! `a_damaged_page_is_not_repaired_with_an_image_the_checkpoint_covered`). Images above the
//! checkpoint are restored as before: a stale one among them is superseded by the redo, which
//! holds the page's whole history since the checkpoint.

use super::*;

/// What [`PageWriter::recover_doublewrite`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoublewriteRecovery {
    /// Slots read.
    pub slots_scanned: usize,
    /// Slots whose directory passed its checksum.
    pub slots_valid: usize,
    /// Images that passed their own checksum and page verification.
    pub images_valid: usize,
    /// Images listed by a valid directory that failed their checksum (a torn slot write, or a
    /// slot overwritten by a later batch): ignored.
    pub images_invalid: usize,
    /// Pages restored in place.
    pub restored_pages: u64,
    /// Each restored page, in page order.
    pub restored: Vec<RestoredPage>,
}

impl DoublewriteRecovery {
    /// A report of `scan`'s counts, with nothing restored yet.
    fn scanned(scan: &crate::area::Scan) -> DoublewriteRecovery {
        DoublewriteRecovery {
            slots_scanned: scan.slots_scanned,
            slots_valid: scan.slots_valid,
            images_valid: scan.images_valid,
            images_invalid: scan.images_invalid,
            ..DoublewriteRecovery::default()
        }
    }
}

/// What the doublewrite area holds, read without restoring or changing anything
/// ([`PageWriter::inspect_doublewrite`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoublewriteInspection {
    /// Slots read.
    pub slots_scanned: usize,
    /// Slots whose directory passed its checksum.
    pub slots_valid: usize,
    /// Images that passed their own checksum and page verification.
    pub images_valid: usize,
    /// Images listed by a valid directory that failed their checksum.
    pub images_invalid: usize,
    /// Slots holding bytes whose directory does not decode, each with the reason ("slot 3: ...").
    /// A crash during a slot write leaves one such slot (recovery skips it: by the doublewrite
    /// order its pages were not yet written in place); anything else is damage.
    pub damaged_slots: Vec<String>,
}

/// One page restored from the doublewrite area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredPage {
    /// The page.
    pub page_id: PageId,
    /// The LSN of the image restored.
    pub image_lsn: Lsn,
    /// The LSN of the home page if it was valid (and older); `None` if it failed verification or
    /// was never written.
    pub home_lsn: Option<Lsn>,
}

impl PageWriter {
    /// Reads the doublewrite area (header, every slot directory, every image checksum) and says
    /// what it holds, restoring nothing; `None` when the store has no area. In a store being
    /// written, a slot written at that moment may show as damaged.
    ///
    /// # Errors
    ///
    /// A read fails, or the area's header is damaged while its slots hold data
    /// ([`FlushError::DoublewriteArea`]).
    pub fn inspect_doublewrite(&self) -> Result<Option<DoublewriteInspection>> {
        let Some(area) = &self.area else {
            return Ok(None);
        };
        let scan = area.scan(self.config.checksum, self.config.page_size)?;
        Ok(Some(DoublewriteInspection {
            slots_scanned: scan.slots_scanned,
            slots_valid: scan.slots_valid,
            images_valid: scan.images_valid,
            images_invalid: scan.images_invalid,
            damaged_slots: scan
                .slots_damaged
                .iter()
                .map(|(slot, reason)| format!("slot {slot}: {reason}"))
                .collect(),
        }))
    }

    /// Refuses a doublewrite area of another store or page size
    /// ([`DoublewriteArea::check_belongs`](crate::area::DoublewriteArea::check_belongs)) without
    /// reading or writing anything: the open's check before it starts the log and recovers.
    /// Nothing to check without an area.
    ///
    /// # Errors
    /// [`FlushError::DoublewriteArea`] naming the file.
    pub fn check_doublewrite_area(&self) -> Result<()> {
        match &self.area {
            Some(area) => area.check_belongs(self.config.page_size),
            None => Ok(()),
        }
    }

    /// Restores torn pages from the doublewrite area; run before redo replay. For each page, the
    /// valid image with the highest LSN (then the highest batch sequence number) is restored if
    /// the home page fails verification or was never written (only an image above the log's
    /// checkpoint given to [`recover_doublewrite_in_memory`](Self::recover_doublewrite_in_memory):
    /// module docs), or has a lower LSN; the data file is
    /// synced (restored pages, and home pages a previous run wrote in place but, deferring the
    /// sync to slot reuse, may not have synced) before the area is reused. Outside doublewrite mode the area (left by an
    /// earlier run) is emptied afterwards, so a page torn later can never be "repaired" with an
    /// older image. Idempotent. [`restore_doublewrite`](Self::restore_doublewrite) then
    /// [`finish_doublewrite_recovery`](Self::finish_doublewrite_recovery).
    pub fn recover_doublewrite(&self) -> Result<DoublewriteRecovery> {
        let report = self.restore_doublewrite()?;
        self.finish_doublewrite_recovery()?;
        Ok(report)
    }

    /// Readies the doublewrite area after [`restore_doublewrite`](Self::restore_doublewrite):
    /// formats it for the configured geometry and store (an empty or new file included), or
    /// empties an area kept only for recovery. Nothing to do if it is ready; the whole recovery
    /// if it has not run. The store's open calls it once the log has started (so an open
    /// refused before writes nothing into the area); a page write calls it first if it has not
    /// run (a replay that evicts a page).
    ///
    /// # Errors
    /// An I/O error of the area's file.
    pub fn finish_doublewrite_recovery(&self) -> Result<()> {
        self.poison.check()?;
        let Some(area) = &self.area else {
            return Ok(());
        };
        if area.is_ready() {
            return Ok(());
        }
        if !area.is_recovered() {
            self.restore_doublewrite()?;
        }
        let _guard = self.recovery.lock();
        area.format()
    }

    /// The restoring half of [`recover_doublewrite`](Self::recover_doublewrite): restores the
    /// torn pages and syncs the data file, and writes nothing into the area (its format waits
    /// for [`finish_doublewrite_recovery`](Self::finish_doublewrite_recovery)).
    ///
    /// # Errors
    /// An I/O error; [`FlushError::DoublewriteArea`] for an area that cannot be used.
    pub fn restore_doublewrite(&self) -> Result<DoublewriteRecovery> {
        self.poison.check()?;
        let Some(area) = &self.area else {
            return Ok(DoublewriteRecovery::default());
        };
        let _guard = self.recovery.lock();
        let (scan, best) = self.restore_candidates(area)?;
        let mut restore: Vec<(&Candidate, Option<Lsn>)> = Vec::new();
        for (c, home_lsn) in best.values() {
            if let Some(home_lsn) = home_lsn {
                restore.push((c, *home_lsn));
            }
        }
        let mut report = DoublewriteRecovery::scanned(&scan);
        if !restore.is_empty() {
            let ops: Vec<WriteOp<'_>> = restore
                .iter()
                .map(|(c, _)| {
                    Ok(WriteOp {
                        offset: self.page_offset(c.page_id)?,
                        buf: &c.image,
                    })
                })
                .collect::<Result<_>>()?;
            // The images durable in the area before any goes home (`DoublewriteArea::rewrite`);
            // a failed sync poisons, as every sync of the writer does.
            let ctx = self.ctx();
            if let Some(file) = area.rewrite()? {
                ctx.sync(&**file, true)?;
            }
            ctx.write_home(&ops, false)?;
            ctx.sync_data_file()?;
            for (c, home_lsn) in &restore {
                tracing::warn!(
                    page = c.page_id.0,
                    image_lsn = c.lsn.0,
                    home_lsn = ?home_lsn.map(|l| l.0),
                    "restored a page from the doublewrite area"
                );
                report.restored.push(RestoredPage {
                    page_id: c.page_id,
                    image_lsn: c.lsn,
                    home_lsn: *home_lsn,
                });
            }
            report.restored_pages = restore.len() as u64;
            add(&self.counters.restored_pages, report.restored_pages);
        } else if scan.slots_valid > 0 {
            // Nothing to restore, but the home pages that matched may be durable only in the
            // page cache: the previous run deferred its data sync to slot reuse and stopped (a
            // clean close or a process crash, not a power loss). The slots are all free from
            // here on, so the data file is synced before any of them can be overwritten.
            self.ctx().sync_data_file()?;
        }
        area.note_recovered(scan.max_seq);
        // The images an in-memory recovery served in place of their home pages are home now
        // (written and synced above): reads go to the data file again, where later writes of
        // these pages land.
        self.overlay.install(BTreeMap::new());
        tracing::info!(
            area = %area.path().display(),
            slots_valid = report.slots_valid,
            images_valid = report.images_valid,
            images_invalid = report.images_invalid,
            restored = report.restored_pages,
            "doublewrite recovery done"
        );
        Ok(report)
    }

    /// The best doublewrite image of each page in the area and, for each, whether its home page
    /// needs it (`Some(home LSN or None)`: restore; `None`: the home copy is as new).
    #[allow(clippy::type_complexity)]
    pub(super) fn restore_candidates(
        &self,
        area: &DoublewriteArea,
    ) -> Result<(
        crate::area::Scan,
        BTreeMap<PageId, (Candidate, Option<Option<Lsn>>)>,
    )> {
        let mut scan = area.scan(self.config.checksum, self.config.page_size)?;
        let mut best: BTreeMap<PageId, Candidate> = BTreeMap::new();
        for c in std::mem::take(&mut scan.candidates) {
            match best.get(&c.page_id) {
                Some(b) if (b.lsn, b.seq) >= (c.lsn, c.seq) => {}
                _ => {
                    best.insert(c.page_id, c);
                }
            }
        }
        let ps = self.config.page_size.bytes();
        let mut home = AlignedBuf::page(ps);
        let mut out = BTreeMap::new();
        let checkpoint = Lsn(self
            .dw_checkpoint
            .load(std::sync::atomic::Ordering::Acquire));
        for (id, c) in best {
            self.check_not_in_future(id, c.lsn).map_err(|e| match e {
                FlushError::PageLsnInFuture {
                    page_id,
                    page_lsn,
                    log_durable,
                    ..
                } => FlushError::PageLsnInFuture {
                    file: area.path().to_path_buf(),
                    page_id,
                    page_lsn,
                    log_durable,
                },
                other => other,
            })?;
            // The data file's own bytes: an in-memory recovery's image of the page is what
            // this compares with, never the home copy.
            self.read_disk(c.page_id, &mut home)?;
            let need = match verify(&home, c.page_id, self.config.checksum, self.data.path()) {
                Ok(PageState::Valid(h)) if h.lsn > c.lsn => None,
                // The same version, unless torn: without a page checksum a page torn between
                // its first and last sector passes every check (header and trailer LSN agree),
                // so its bytes are compared with the image's (found by the crash matrix once it
                // ran without checksums: the torn page was kept).
                Ok(PageState::Valid(h))
                    if h.lsn == c.lsn && keel_page::same_version(&home, &c.image) =>
                {
                    None
                }
                Ok(PageState::Valid(h)) => Some(Some(h.lsn)),
                // The module's rule: no torn write is at or below the checkpoint. The one
                // damage such an image may mend is of this very version, whose header still
                // names the page and the image's LSN.
                Ok(PageState::Unwritten) | Err(_) if c.lsn <= checkpoint => {
                    keel_page::PageHeader::read(&home)
                        .is_some_and(|h| h.page_id == c.page_id && h.lsn == c.lsn)
                        .then_some(None)
                }
                Ok(PageState::Unwritten) | Err(_) => Some(None),
            };
            out.insert(id, (c, need));
        }
        Ok((scan, out))
    }

    /// Doublewrite recovery in memory: computes exactly what
    /// [`PageWriter::recover_doublewrite`] would restore and, instead of writing it, serves each
    /// image to this writer's reads in place of its home page (which stays as it is on disk).
    /// `checkpoint` is the log's checkpoint LSN: an image at or below it restores no page that
    /// fails verification or was never written (module docs), here and in the restore that
    /// follows.
    /// Nothing is written or synced, and the area is not reused. The report lists the pages as
    /// `restored` (in memory). A read-only open stops there. A read-write open also begins
    /// here, so that an open refused by a later check (the replay, the meta page) writes
    /// nothing; once it has started the log, [`restore_doublewrite`](Self::restore_doublewrite)
    /// (through [`finish_doublewrite_recovery`](Self::finish_doublewrite_recovery), or the first
    /// page write before it) writes the same images home, syncs, and ends the overlay — before
    /// any page is written and before the area is formatted.
    ///
    /// # Errors
    /// As [`PageWriter::doublewrite_pages_to_restore`].
    pub fn recover_doublewrite_in_memory(&self, checkpoint: Lsn) -> Result<DoublewriteRecovery> {
        self.dw_checkpoint
            .store(checkpoint.0, std::sync::atomic::Ordering::Release);
        let Some(area) = &self.area else {
            return Ok(DoublewriteRecovery::default());
        };
        let (scan, best) = self.restore_candidates(area)?;
        let mut report = DoublewriteRecovery::scanned(&scan);
        let mut pages = BTreeMap::new();
        for (id, (c, need)) in best {
            if let Some(home_lsn) = need {
                report.restored.push(RestoredPage {
                    page_id: id,
                    image_lsn: c.lsn,
                    home_lsn,
                });
                pages.insert(id, c.image.to_vec());
            }
        }
        report.restored_pages = pages.len() as u64;
        self.overlay.install(pages);
        Ok(report)
    }

    /// The pages [`PageWriter::recover_doublewrite`] would restore, computed without writing
    /// anything (for read-only opens, which refuse a store that needs recovery).
    ///
    /// # Errors
    /// I/O errors reading the area or the data file; [`FlushError::DoublewriteArea`] when the
    /// area's own structures are damaged.
    pub fn doublewrite_pages_to_restore(&self) -> Result<Vec<PageId>> {
        let Some(area) = &self.area else {
            return Ok(Vec::new());
        };
        let (_, best) = self.restore_candidates(area)?;
        Ok(best
            .into_iter()
            .filter(|(_, (_, need))| need.is_some())
            .map(|(id, _)| id)
            .collect())
    }
}
