//! The page writer's counters, named after InnoDB's (`Innodb_data_writes`,
//! `Innodb_dblwr_writes`, `Innodb_dblwr_pages_written`, ...).
//!
//! Counted when the operation completed successfully. Relaxed atomics: statistics only.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// A copy of the page writer's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushStats {
    /// `write_pages` calls that completed.
    pub batches: u64,
    /// Write requests to the data file (one per page written in place; `Innodb_data_writes`
    /// counts the doublewrite's writes too — add `doublewrite_writes` for that figure).
    pub data_writes: u64,
    /// Pages written at their home location (restored pages included).
    pub data_pages_written: u64,
    /// Bytes written to the data file.
    pub data_bytes_written: u64,
    /// Write requests to the doublewrite area: one sequential write per batch
    /// (`Innodb_dblwr_writes`).
    pub doublewrite_writes: u64,
    /// Page images written to the doublewrite area (`Innodb_dblwr_pages_written`).
    pub doublewrite_pages: u64,
    /// Bytes written to the doublewrite area (slot directories included).
    pub doublewrite_bytes_written: u64,
    /// Pages that could be rebuilt from redo alone and so skipped the protection (init on flush):
    /// no doublewrite copy, a plain instead of an atomic write, or no full page image.
    pub pages_skipped_protection: u64,
    /// `RWF_ATOMIC` page writes.
    pub atomic_writes: u64,
    /// Full page images the buffer pool logged (reported through
    /// [`crate::PageWriter::count_full_page_image`]).
    pub full_page_images: u64,
    /// Bytes of those images.
    pub full_page_image_bytes: u64,
    /// Syncs the writer issued (data file and doublewrite area).
    pub syncs: u64,
    /// Of `syncs`, those of the doublewrite area.
    pub doublewrite_syncs: u64,
    /// Of `syncs`, data-file syncs issued because a batch needed a doublewrite slot and every
    /// slot was pending (its batch in the synced area and written in place, the data file not yet
    /// synced). Data syncs per batch = `syncs - doublewrite_syncs` over `batches`.
    #[serde(default)]
    pub doublewrite_reuse_syncs: u64,
    /// Pages restored from the doublewrite area by recovery.
    pub restored_pages: u64,
    /// Times the WAL rule made the writer force the redo log (the log was not yet durable up to
    /// a batch's newest page LSN).
    pub forced_log_flushes: u64,
    /// Times [`crate::PageWriter::stamp_checkpoint`] rewrote page 0 to record a new file
    /// checkpoint LSN (once per checkpoint). Absent from stats written before it: 0.
    #[serde(default)]
    pub checkpoint_stamps: u64,
    /// Pages read (and verified) from the data file.
    pub pages_read: u64,
}

impl FlushStats {
    /// `self - earlier`, field by field (saturating).
    pub fn since(&self, earlier: &FlushStats) -> FlushStats {
        macro_rules! sub {
            ($($f:ident),*) => { FlushStats { $($f: self.$f.saturating_sub(earlier.$f)),* } };
        }
        sub!(
            batches,
            data_writes,
            data_pages_written,
            data_bytes_written,
            doublewrite_writes,
            doublewrite_pages,
            doublewrite_bytes_written,
            pages_skipped_protection,
            atomic_writes,
            full_page_images,
            full_page_image_bytes,
            syncs,
            doublewrite_syncs,
            doublewrite_reuse_syncs,
            restored_pages,
            forced_log_flushes,
            checkpoint_stamps,
            pages_read
        )
    }
}

/// Live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub batches: AtomicU64,
    pub data_writes: AtomicU64,
    pub data_pages_written: AtomicU64,
    pub data_bytes_written: AtomicU64,
    pub doublewrite_writes: AtomicU64,
    pub doublewrite_pages: AtomicU64,
    pub doublewrite_bytes_written: AtomicU64,
    pub pages_skipped_protection: AtomicU64,
    pub atomic_writes: AtomicU64,
    pub full_page_images: AtomicU64,
    pub full_page_image_bytes: AtomicU64,
    pub syncs: AtomicU64,
    pub doublewrite_syncs: AtomicU64,
    pub doublewrite_reuse_syncs: AtomicU64,
    pub restored_pages: AtomicU64,
    pub forced_log_flushes: AtomicU64,
    pub checkpoint_stamps: AtomicU64,
    pub pages_read: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> FlushStats {
        macro_rules! get {
            ($($f:ident),*) => { FlushStats { $($f: self.$f.load(Ordering::Relaxed)),* } };
        }
        get!(
            batches,
            data_writes,
            data_pages_written,
            data_bytes_written,
            doublewrite_writes,
            doublewrite_pages,
            doublewrite_bytes_written,
            pages_skipped_protection,
            atomic_writes,
            full_page_images,
            full_page_image_bytes,
            syncs,
            doublewrite_syncs,
            doublewrite_reuse_syncs,
            restored_pages,
            forced_log_flushes,
            checkpoint_stamps,
            pages_read
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_and_since() {
        let c = Counters::default();
        add(&c.data_writes, 3);
        let a = c.snapshot();
        add(&c.data_writes, 2);
        add(&c.restored_pages, 1);
        let d = c.snapshot().since(&a);
        assert_eq!(d.data_writes, 2);
        assert_eq!(d.restored_pages, 1);
        assert_eq!(d.syncs, 0);
        let json = serde_json::to_string(&c.snapshot()).unwrap();
        assert!(json.contains("\"data_writes\":5"), "{json}");
    }
}
