//! Which pages has the writer written in place that no successful data sync has covered yet,
//! and at which LSN? A read of such a page that comes back older met a write the device lost:
//! a buffered write that failed in write-back, after which the kernel holds the page clean and
//! may drop it, so a read returns the block as it was — before any `fsync` reported the error,
//! and after it (the error is reported once; the store then still serves reads). Without this
//! check such a read is valid, checksummed, old data: a silent wrong answer (found by
//! `keel/tests/io_faults.rs` once SimFs could lose a write in write-back, the behaviour
//! `keel/tests/device_errors.rs` observed on real file systems).
//!
//! # Invariants
//!
//! * An entry is added when an in-place write returned, and removed only by a data sync that
//!   began after that write returned and succeeded; a failed sync removes none (the writer is
//!   poisoned and never syncs again, so the entries stay for its life).
//! * A page read back with an LSN below its entry is refused with [`FlushError::LostWrite`] and
//!   poisons the writer: the data file lost a write, no later sync can be trusted to cover it.
//!   Tests: the unit tests below and `tests/basic.rs`
//!   `a_page_whose_write_was_lost_in_writeback_is_refused_not_read_old` (each fails with the
//!   check removed); `keel/tests/device_errors.rs` and `io_faults.rs` found the bug.

use crate::error::{FlushError, Result};
use keel_page::{Lsn, PageId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;

/// The pages written in place since the last data sync that covered them.
#[derive(Debug, Default)]
pub(crate) struct Unsynced(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// Bumped by every data sync that begins.
    generation: u64,
    /// Page → (LSN written, generation when the write returned).
    pages: HashMap<PageId, (Lsn, u64)>,
}

impl Unsynced {
    /// Records in-place writes that returned: `(page, LSN)` each.
    pub fn wrote(&self, pages: impl IntoIterator<Item = (PageId, Lsn)>) {
        let mut g = self.0.lock();
        let generation = g.generation;
        for (id, lsn) in pages {
            g.pages.insert(id, (lsn, generation));
        }
    }

    /// A data sync begins: returns the token [`Unsynced::synced`] takes once it succeeded. Every
    /// write recorded before this call is covered by that sync.
    pub fn sync_begins(&self) -> u64 {
        let mut g = self.0.lock();
        let token = g.generation;
        g.generation = g.generation.wrapping_add(1);
        token
    }

    /// The sync that began with `token` succeeded: forgets the writes it covered.
    pub fn synced(&self, token: u64) {
        let mut g = self.0.lock();
        g.pages.retain(|_, &mut (_, generation)| generation > token);
    }

    /// Checks page `id`, just read from `file` with LSN `read`, against its unsynced write.
    ///
    /// # Errors
    /// [`FlushError::LostWrite`] when the page is older than the write.
    pub fn check_read(&self, file: &Path, id: PageId, read: Lsn) -> Result<()> {
        match self.0.lock().pages.get(&id) {
            Some(&(written, _)) if read < written => Err(FlushError::LostWrite {
                file: file.to_path_buf(),
                page_id: id,
                written,
                read,
            }),
            _ => Ok(()),
        }
    }

    /// Pages tracked (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock().pages.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_read_back_older_than_its_unsynced_write_is_refused() {
        let u = Unsynced::default();
        let f = Path::new("/d/data.keel");
        u.wrote([(PageId(3), Lsn(100)), (PageId(4), Lsn(50))]);
        assert!(u.check_read(f, PageId(3), Lsn(100)).is_ok());
        assert!(u.check_read(f, PageId(3), Lsn(120)).is_ok());
        assert!(matches!(
            u.check_read(f, PageId(3), Lsn(99)),
            Err(FlushError::LostWrite {
                written: Lsn(100),
                read: Lsn(99),
                ..
            })
        ));
        // A page never written here is not checked.
        assert!(u.check_read(f, PageId(9), Lsn(1)).is_ok());
    }

    #[test]
    fn only_a_sync_that_began_after_a_write_forgets_it() {
        let u = Unsynced::default();
        let f = Path::new("/d/data.keel");
        u.wrote([(PageId(1), Lsn(10))]);
        let token = u.sync_begins();
        // Written while the sync ran: not covered by it.
        u.wrote([(PageId(2), Lsn(20))]);
        u.synced(token);
        assert_eq!(u.len(), 1);
        assert!(u.check_read(f, PageId(1), Lsn(5)).is_ok());
        assert!(u.check_read(f, PageId(2), Lsn(5)).is_err());
        // A sync that began without succeeding forgets nothing.
        let _failed = u.sync_begins();
        assert_eq!(u.len(), 1);
        let next = u.sync_begins();
        u.synced(next);
        assert_eq!(u.len(), 0);
    }
}
