//! The read path: one page or a batch (io_uring where available), each verified (checksum, page
//! id, torn trailer) and refused when its LSN is above the durable log (page LSN in the
//! future) or its id is out of range. Invariant: a page that fails is an error naming the file
//! and page, never data.

use super::*;

impl PageWriter {
    /// Reads page `id` into `buf` (one page of bytes) and verifies it: `Ok(Valid)`,
    /// `Ok(Unwritten)` for an all-zero page or one beyond the end of the file, or
    /// [`FlushError::Corruption`] naming file, page and what was expected and found (a torn page
    /// is never returned as data).
    pub fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<PageState> {
        let ps = self.config.page_size.bytes();
        if buf.len() != ps {
            return Err(FlushError::BadBuffer {
                page_id: id,
                len: buf.len(),
                page_size: self.config.page_size,
            });
        }
        if self.data.is_direct() && !(buf.as_ptr() as usize).is_multiple_of(keel_io::PAGE_ALIGN) {
            let mut bounce = AlignedBuf::page(ps);
            let st = self.read_raw(id, &mut bounce);
            buf.copy_from_slice(&bounce);
            return st.and_then(|()| self.verify(id, buf));
        }
        self.read_raw(id, buf)?;
        self.verify(id, buf)
    }

    pub(super) fn verify(&self, id: PageId, buf: &[u8]) -> Result<PageState> {
        add(&self.counters.pages_read, 1);
        let st = verify(buf, id, self.config.checksum, self.data.path())?;
        if let PageState::Valid(h) = &st {
            self.check_not_in_future(id, h.lsn)?;
        }
        let lsn = match &st {
            PageState::Valid(h) => h.lsn,
            // A page written since the last data sync that reads back unwritten lost its write.
            _ => Lsn(0),
        };
        if let Err(e) = self.unsynced.check_read(self.data.path(), id, lsn) {
            self.poison_by_read(
                &e,
                "the device lost a write; no later sync can be trusted to cover it",
            );
            return Err(e);
        }
        Ok(st)
    }

    /// Poisons the writer for what a read of the data file found (`found`), which no later
    /// write can be trusted to get past (`consequence`).
    fn poison_by_read(&self, found: &FlushError, consequence: &'static str) {
        let cause = keel_io::PoisonCause::new(
            "read",
            self.data.path(),
            keel_io::IoError::Os {
                op: "pread",
                path: self.data.path().to_path_buf(),
                source: std::io::Error::other(found.to_string()),
            },
        )
        .with_consequence(consequence);
        self.poison.set(cause);
    }

    /// WAL rule, read side: a page reaches the disk only after the log is durable up to its
    /// LSN, so a page whose LSN is above what the log holds durably proves that durable log
    /// data was lost (a damaged log, or a log from another store). Such a page is refused
    /// (InnoDB: "page LSN in the future"), never used: its changes belong to commits recovery
    /// did not see.
    ///
    /// And on a running store the refusal is made to last: the writer is poisoned (no more
    /// writes in this process) and the log's header records that the log had been durable to the page's LSN
    /// ([`RedoLog::record_durable_at_least`]), so every later open refuses too. Refused only at
    /// the read, the store took new commits, whose LSNs passed the page's, and the page then
    /// read as valid data: a lost transaction half applied, with a clean check (a tester: a log
    /// file put back from an older copy, or a store copied with `cp -r` while it ran).
    ///
    /// # Errors
    /// [`FlushError::PageLsnInFuture`] naming the data file, the page and both LSNs.
    pub fn check_not_in_future(&self, id: PageId, lsn: Lsn) -> Result<()> {
        let durable = self.log.durable_lsn();
        if lsn > durable {
            let e = FlushError::PageLsnInFuture {
                file: self.data.path().to_path_buf(),
                page_id: id,
                page_lsn: lsn,
                log_durable: durable,
            };
            // Only on a running store: an open still recovering is refused by this error (and
            // writes nothing), a read-only one cannot write anyway.
            let running = self.log.record_durable_at_least(lsn).unwrap_or_else(|r| {
                tracing::error!(error = %r, "could not record the lost log data in the header");
                true
            });
            if running {
                self.poison_by_read(
                    &e,
                    "the log lost durable data the data file depends on: a later open refuses \
                     until the log is put back, or opens for salvage with accept_log_loss",
                );
            }
            return Err(e);
        }
        Ok(())
    }

    /// Reads the bytes of page `id` (aligned `buf` if the file is direct); bytes beyond the end of
    /// the file read as zero.
    /// The byte offset of page `id` in the data file, or [`FlushError::PageOutOfRange`] when no
    /// file can hold it (a damaged page pointer): checked before any I/O is issued.
    pub(super) fn page_offset(&self, id: PageId) -> Result<u64> {
        id.offset(self.config.page_size)
            .ok_or_else(|| FlushError::PageOutOfRange {
                file: self.data.path().to_path_buf(),
                page_id: id,
                page_size: self.config.page_size,
            })
    }

    /// Reads the bytes of page `id` as this writer's reads see them: the in-memory doublewrite
    /// image of a recovery not yet written home, else the data file ([`Self::read_disk`]).
    pub(super) fn read_raw(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        self.page_offset(id)?;
        if self.overlay.read(id, buf) {
            return Ok(());
        }
        self.read_disk(id, buf)
    }

    /// Reads the bytes of page `id` from the data file itself, past any in-memory doublewrite
    /// image (what the doublewrite recovery compares its images with).
    pub(super) fn read_disk(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        let off = self.page_offset(id)?;
        match self.data.read_exact_at(buf, off) {
            Ok(()) => Ok(()),
            Err(IoError::ShortRead { .. }) => {
                buf.fill(0);
                let len = self.data.len()?;
                let mut avail = len.saturating_sub(off).min(buf.len() as u64) as usize;
                if self.data.is_direct() {
                    avail = avail / 512 * 512;
                }
                if avail > 0 {
                    self.data.read_exact_at(&mut buf[..avail], off)?;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Reads many pages in one batch (submitted together by the io_uring backend) and verifies
    /// each; one result per request, in order. Pages beyond the end of the file are unwritten.
    pub fn read_pages(&self, reqs: &mut [(PageId, &mut [u8])]) -> Vec<Result<PageState>> {
        let ps = self.config.page_size.bytes();
        let mut results: Vec<Option<Result<PageState>>> = (0..reqs.len()).map(|_| None).collect();
        let len = match self.data.len() {
            Ok(l) => l,
            Err(e) => {
                let msg = e.to_string();
                return reqs
                    .iter()
                    .map(|_| {
                        Err(FlushError::Io(IoError::Os {
                            op: "fstat",
                            path: self.data.path().to_path_buf(),
                            source: std::io::Error::other(msg.clone()),
                        }))
                    })
                    .collect();
            }
        };
        // Requests that can go in one batch: right size, wholly inside the file.
        let batchable: Vec<usize> = reqs
            .iter()
            .enumerate()
            .filter(|(_, (id, buf))| {
                buf.len() == ps
                    && !self.overlay.holds(*id)
                    && id
                        .offset(self.config.page_size)
                        .is_some_and(|o| o.saturating_add(ps as u64) <= len)
            })
            .map(|(i, _)| i)
            .collect();
        if !batchable.is_empty() {
            let direct = self.data.is_direct();
            let mut bounce = AlignedBuf::page(if direct { batchable.len() * ps } else { 0 });
            let ok = {
                let mut ops: Vec<ReadOp<'_>> = Vec::with_capacity(batchable.len());
                if direct {
                    let mut rest: &mut [u8] = &mut bounce;
                    for &i in &batchable {
                        let (head, tail) = rest.split_at_mut(ps);
                        rest = tail;
                        ops.push(ReadOp {
                            // Batchable: its offset was checked above.
                            offset: reqs[i].0.offset(self.config.page_size).unwrap_or(0),
                            buf: head,
                        });
                    }
                    self.data.read_batch(&mut ops).is_ok()
                } else {
                    let mut want: Vec<bool> = vec![false; reqs.len()];
                    for &i in &batchable {
                        want[i] = true;
                    }
                    for (i, (id, buf)) in reqs.iter_mut().enumerate() {
                        if want[i] {
                            ops.push(ReadOp {
                                // Batchable: its offset was checked above.
                                offset: id.offset(self.config.page_size).unwrap_or(0),
                                buf: &mut buf[..],
                            });
                        }
                    }
                    self.data.read_batch(&mut ops).is_ok()
                }
            };
            if ok {
                for (k, &i) in batchable.iter().enumerate() {
                    if direct {
                        reqs[i].1.copy_from_slice(&bounce[k * ps..(k + 1) * ps]);
                    }
                    results[i] = Some(self.verify(reqs[i].0, reqs[i].1));
                }
            }
        }
        // Everything else (and everything, if the batch failed) one by one.
        reqs.iter_mut()
            .zip(results)
            .map(|((id, buf), r)| r.unwrap_or_else(|| self.read_page(*id, buf)))
            .collect()
    }
}
