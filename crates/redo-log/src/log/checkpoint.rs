//! Checkpoints: record a checkpoint LSN in the header's alternating slots, which frees the log
//! space before it (the scan start moves to the start of the group holding the checkpoint).
//!
//! Invariants (tests: `tests/log.rs` `checkpoint_at_a_group_end_drops_that_group_and_survives_reopen`,
//! `full_log_waits_for_checkpoint`; the unit tests below trip the assertion):
//! 1. The checkpoint LSN never goes backwards and never passes what is durable (asserted).
//! 2. Slots alternate: the slot written is never the one holding the newest valid checkpoint,
//!    so a torn slot write leaves the previous checkpoint readable.

use super::*;

impl Shared {
    pub(super) fn checkpoint(&self, lsn: u64) -> Result<()> {
        self.check_usable()?;
        let end = self.reserved.load(SeqCst);
        if lsn > end {
            return Err(LogError::CheckpointBeyondEnd {
                lsn: Lsn(lsn),
                end: Lsn(end),
            });
        }
        let mut ck = self.ckpt.lock();
        if lsn <= ck.checkpoint_lsn {
            return Ok(());
        }
        self.wait_flushed(lsn, true)?;
        let floor = ck.scan_start;
        // A growing log records its newest file (created, its name durable): an open finding
        // none as new refuses, instead of losing the commits past the present files.
        // ... and how far the log is durable: an open whose scan ends short of it refuses.
        let (scan_start, newest_file, durable) = self.with_io(|w| {
            let newest = (!self.geo.preallocated).then(|| w.files.newest()).flatten();
            Ok::<_, LogError>((
                self.boundary_at_or_before(w, lsn, floor)?,
                newest,
                w.durable,
            ))
        })?;
        self.write_slot(|s| {
            s.checkpoint_lsn = lsn;
            s.scan_start = scan_start;
            s.newest_file = s.newest_file.max(newest_file);
            s.durable_lsn = s.durable_lsn.max(Some(durable));
            // A checkpoint of this build: the caller recorded it in its data first (keel's
            // page 0), which is what the mark says.
            s.checkpoint_kept = true;
        })?;
        assert_checkpoint_advance(
            ck.checkpoint_lsn,
            lsn,
            scan_start,
            self.durable.load(SeqCst),
        );
        ck.checkpoint_lsn = lsn;
        ck.scan_start = scan_start;
        self.checkpoint_lsn.store(lsn, SeqCst);
        self.scan_start.store(scan_start, SeqCst);
        Counters::add(&self.stats.checkpoints, 1);
        let p = self.geo.payload as u64;
        let removed = self.with_io(|w| {
            w.scan_start_block = scan_start / p;
            if self.geo.preallocated {
                Ok(())
            } else {
                w.files.remove_before(self.geo.location(scan_start / p).0)
            }
        });
        // The checkpoint is durable (its slot synced): a growing log's old file that could not
        // be unlinked costs disk space, not durability, and is tried again at the next
        // checkpoint and at every open (as PostgreSQL treats a WAL segment it could not
        // remove). Failing the checkpoint for it would report a checkpoint that happened as
        // failed, and leave the log's space limit where it was.
        if let Err(e) = removed {
            Counters::add(&self.stats.unlink_failures, 1);
            tracing::warn!(error = %e, "could not remove a log file behind the checkpoint; kept for the next checkpoint");
        }
        let mut r = self.resv.lock();
        r.limit = limit_for(&self.geo, scan_start, self.reserve_blocks);
        drop(r);
        self.space_cv.notify_all();
        Ok(())
    }

    /// Writes the next header slot — the last one written, changed by `change`, with the next
    /// sequence number (so into the other slot) — and syncs it; a failure poisons the log.
    pub(super) fn write_slot(&self, change: impl FnOnce(&mut Slot)) -> Result<()> {
        let mut sl = self.slots.lock();
        let mut slot = sl.last;
        slot.seq = slot.seq.saturating_add(1);
        change(&mut slot);
        self.put_slot(&sl.header, &slot)?;
        sl.last = slot;
        Ok(())
    }

    /// Writes `slot` into its place in the header `hdr` and syncs it; a failure poisons the
    /// log (a slot whose sync failed is never taken as written: the start is not retried on
    /// it, and no later write relies on it).
    pub(super) fn put_slot(&self, hdr: &Arc<dyn File>, slot: &Slot) -> Result<()> {
        self.check_poison()?;
        let res = hdr
            .write_all_at(&slot.encode(self.geo.salt), Slot::offset(slot.seq))
            .map_err(|err| ("write", err))
            .and_then(|_| hdr.sync_data().map_err(|err| ("sync", err)));
        match res {
            Ok(()) => Ok(()),
            Err((op, err)) => Err(self.poison_with(Failure {
                path: hdr.path().to_path_buf(),
                op,
                err,
            })),
        }
    }

    /// A growing log, after a sync that may have covered blocks of a file created since the
    /// header last recorded its newest file (the last slot written, a checkpoint's included):
    /// records it (a slot write and sync, once per new file) before the sync's commits are
    /// acknowledged, so an open finding the file deleted refuses instead of losing them
    /// (module `open`). The slot records the durable LSN too (now inside that file), so an open
    /// finding the file zeroed or replaced by another (no valid block) refuses as well.
    pub(super) fn record_newest_file(&self, io: &Writer) -> Result<()> {
        if self.geo.preallocated {
            return Ok(());
        }
        let newest = io.files.newest();
        if newest <= self.slots.lock().last.newest_file {
            return Ok(());
        }
        self.write_slot(|s| {
            s.newest_file = s.newest_file.max(newest);
            s.durable_lsn = s.durable_lsn.max(Some(io.durable));
        })
    }

    /// The latest position ≤ `lsn` where a scan can start (a group or filler start, a restart
    /// block, or the end of the data), found by reading back to a block whose first-group field
    /// is ≤ `lsn` and scanning forward. `lsn` is durable.
    ///
    /// Never the first byte of a block this log has not written (the end of the data when the
    /// tail was sealed): a recovery's scan starts by reading that block, which then holds
    /// whatever an older incarnation left in its slot — a torn tail the last recovery gave up,
    /// whose groups it replayed onto pages that had moved on (a tester: a lost transaction came
    /// back after the next checkpoint and close, and the table read as corrupt). From a
    /// boundary inside the written blocks the scan reaches that block by the block-to-block
    /// rule, which stops at a block of an older incarnation.
    pub(super) fn boundary_at_or_before(
        &self,
        io: &mut Writer,
        lsn: u64,
        floor: u64,
    ) -> Result<u64> {
        let geo = self.geo;
        let p = geo.payload as u64;
        let last_written = match &io.tail {
            Some(t) => t.block,
            None => (io.w / p).saturating_sub(1),
        };
        // A boundary where a scan may start: not the first byte of an unwritten block.
        let written = |x: u64| !(x.is_multiple_of(p) && x / p > last_written);
        if lsn == io.w && io.next_boundary == io.w && written(lsn) {
            return Ok(lsn);
        }
        let floor_block = floor / p;
        let mut b = (lsn / p).min(last_written);
        let mut raw = vec![0u8; geo.block];
        let start = {
            let mut src = FileSource::new(&io.files);
            loop {
                if b <= floor_block {
                    break floor;
                }
                let ok = src.read_block(b, &mut raw)?;
                let hdr = if ok {
                    crate::block::check_block(&raw, geo.salt, b, geo.epoch_of(b), true)
                        .map_err(|f| f.to_string())
                } else {
                    Err("missing".to_string())
                };
                let hdr = hdr.map_err(|why| LogError::Corrupt {
                    path: src.path_of(b),
                    lsn: Lsn(lsn),
                    reason: format!(
                        "durable block {b} ({}) fails verification: {why}",
                        src.describe(b)
                    ),
                })?;
                if hdr.restart && b * p <= lsn {
                    break b * p;
                }
                if let Some(o) = hdr.first_group {
                    if b * p + o as u64 <= lsn {
                        break b * p + o as u64;
                    }
                }
                b -= 1;
            }
        };
        let mut best = start;
        let mut src = FileSource::new(&io.files);
        let params = ScanParams {
            geo,
            start,
            max_incarnation: io.incarnation,
            verify: true,
            lookahead: 0,
        };
        scan(&mut src, &params, &mut |ev| match ev {
            Event::Boundary(x) if x <= lsn && !written(x) => true,
            Event::Boundary(x) if x <= lsn => {
                best = x;
                true
            }
            Event::Boundary(_) => false,
            Event::Group { .. } => true,
        })?;
        Ok(best)
    }
}

/// A checkpoint moves forward, its scan start lies at or before it, and it never passes what is
/// durable (cheap, always on).
fn assert_checkpoint_advance(prev: u64, next: u64, scan_start: u64, durable: u64) {
    assert!(
        prev < next && scan_start <= next && next <= durable,
        "invariant: checkpoint {prev} -> {next} moves forward, scan start {scan_start} <= it <= durable {durable}"
    );
}

#[cfg(test)]
mod tests {
    use super::assert_checkpoint_advance;

    #[test]
    fn a_checkpoint_that_moves_forward_passes() {
        assert_checkpoint_advance(0, 4096, 0, 4096);
    }

    #[test]
    #[should_panic(expected = "invariant: checkpoint")]
    fn a_checkpoint_going_backwards_trips() {
        assert_checkpoint_advance(8192, 4096, 0, 8192);
    }

    #[test]
    #[should_panic(expected = "invariant: checkpoint")]
    fn a_checkpoint_past_the_durable_log_trips() {
        assert_checkpoint_advance(0, 8192, 0, 4096);
    }
}
