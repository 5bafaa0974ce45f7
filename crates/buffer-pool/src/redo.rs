//! Redo records as the pool sees them.
//!
//! TEMPORARY SHIM: mirrors /work/brief/REDO-CONTRACT.md until keel-redo-log lands; then this
//! module re-exports `keel_redo_log::{Record, RecoveredGroup}`.

use keel_page::{Lsn, PageId, PageType};

/// A redo record (see keel-redo-log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The whole page is (re)initialised.
    PageInit {
        /// The page.
        page_id: PageId,
        /// Its new type.
        page_type: PageType,
    },
    /// `bytes` written at `offset`.
    PageWrite {
        /// The page.
        page_id: PageId,
        /// Byte offset in the page.
        offset: u32,
        /// The new bytes.
        bytes: Vec<u8>,
    },
    /// A full page image.
    PageImage {
        /// The page.
        page_id: PageId,
        /// The page's bytes.
        image: Vec<u8>,
    },
    /// The page was freed.
    PageFree {
        /// The page.
        page_id: PageId,
    },
    /// Opaque bytes for upper layers.
    Logical {
        /// Kind tag.
        kind: u16,
        /// Payload.
        bytes: Vec<u8>,
    },
}

impl Record {
    /// The page the record is about, if any.
    pub fn page_id(&self) -> Option<PageId> {
        match self {
            Record::PageInit { page_id, .. }
            | Record::PageWrite { page_id, .. }
            | Record::PageImage { page_id, .. }
            | Record::PageFree { page_id } => Some(*page_id),
            Record::Logical { .. } => None,
        }
    }
}

/// A complete group found by the log's recovery scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredGroup {
    /// LSN of the group's first byte.
    pub start_lsn: Lsn,
    /// LSN after the group (its commit LSN).
    pub end_lsn: Lsn,
    /// The records, in order.
    pub records: Vec<Record>,
}
