//! Keel's page format: [`PageId`], [`Lsn`], [`PageSize`], the page header and trailer, and
//! page checksums ([`Checksum`]).
//!
//! # On-disk layout of a page (all integers little-endian; see `docs/format.md`)
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | checksum of bytes `4..page_size` (0 when the algorithm is `None`) |
//! | 4 | checksum algorithm tag (0 none, 1 crc32c, 2 legacy) |
//! | 5 | flags: bit 0 set when bytes 24..32 hold the file checkpoint LSN; other bits 0 |
//! | 6..8 | page type |
//! | 8..16 | page id: the page's own position in its file, to catch misdirected writes |
//! | 16..24 | page LSN: end LSN of the newest redo record applied to the page |
//! | 24..32 | the file checkpoint LSN on the first page of a data file (flags bit 0), else 0 |
//! | 32..size-8 | payload, owned by the layer above |
//! | size-8..size | trailer: the page LSN again, to detect a torn page even without a checksum |
//!
//! # Invariants this module keeps (each has a test that breaks it on purpose)
//!
//! 1. A page accepted by [`verify`] has a checksum that matches its bytes under the configured
//!    algorithm, the algorithm tag the caller expects, the page id of the position it was read
//!    from, and a trailer LSN equal to its header LSN. Anything else is a [`PageError::Corruption`]
//!    naming the file, the page id and what was expected and found.
//! 2. A page that is entirely zero is [`PageState::Unwritten`], never corruption and never data.
//! 3. [`verify`] never panics, whatever the bytes (fuzz target `page_decode`).

mod checksum;
mod header;
mod op;
mod zero;

pub use checksum::Checksum;
pub use header::{
    file_checkpoint, same_version, seal, set_file_checkpoint, set_lsn, set_page_type, verify,
    CorruptionDetail, PageError, PageHeader, PageState, PageType, PAGE_HEADER_SIZE,
    PAGE_TRAILER_SIZE,
};
pub use op::{check_payload_range, payload_range, OutsidePayload, PageOp};
pub use zero::is_zero;

use serde::{Deserialize, Serialize};
use std::fmt;

/// The number of a page within its file: the page lives at byte offset `id * page_size`
/// ([`PageId::offset`], checked).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct PageId(pub u64);

/// The largest byte a page may end at: file offsets are signed 64-bit in `pread`, `pwrite` and
/// io_uring, so no page lies past `i64::MAX`.
pub const MAX_FILE_END: u64 = i64::MAX as u64;

impl PageId {
    /// Byte offset of this page in a file of pages of `page_size`, or `None` when the page would
    /// end past [`MAX_FILE_END`] (an id read from disk that no file can hold: a damaged
    /// pointer). Checked: never wraps, never panics.
    pub fn offset(self, page_size: PageSize) -> Option<u64> {
        let ps = page_size.bytes() as u64;
        let start = self.0.checked_mul(ps)?;
        (start.checked_add(ps)? <= MAX_FILE_END).then_some(start)
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {}", self.0)
    }
}

/// A log sequence number: a byte position in the redo log's logical stream.
///
/// LSN 0 means "no redo has touched this": a page with LSN 0 was never modified by logged work.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The LSN before any log record.
    pub const ZERO: Lsn = Lsn(0);
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LSN {}", self.0)
    }
}

/// Page size, fixed when a store is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum PageSize {
    /// 4 KiB.
    #[serde(rename = "4KiB")]
    K4,
    /// 8 KiB.
    #[serde(rename = "8KiB")]
    K8,
    /// 16 KiB (InnoDB's default).
    #[default]
    #[serde(rename = "16KiB")]
    K16,
    /// 32 KiB.
    #[serde(rename = "32KiB")]
    K32,
    /// 64 KiB.
    #[serde(rename = "64KiB")]
    K64,
}

impl PageSize {
    /// The size in bytes.
    pub const fn bytes(self) -> usize {
        match self {
            PageSize::K4 => 4096,
            PageSize::K8 => 8192,
            PageSize::K16 => 16384,
            PageSize::K32 => 32768,
            PageSize::K64 => 65536,
        }
    }

    /// The page size with this many bytes, if it is one Keel supports.
    pub fn from_bytes(bytes: usize) -> Option<PageSize> {
        Some(match bytes {
            4096 => PageSize::K4,
            8192 => PageSize::K8,
            16384 => PageSize::K16,
            32768 => PageSize::K32,
            65536 => PageSize::K64,
            _ => return None,
        })
    }

    /// Every supported size, smallest first.
    pub const ALL: [PageSize; 5] = [
        PageSize::K4,
        PageSize::K8,
        PageSize::K16,
        PageSize::K32,
        PageSize::K64,
    ];
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} KiB", self.bytes() / 1024)
    }
}
