//! Full page images for `FullPageWrites` mode (PostgreSQL's `full_page_writes`).

use crate::{FlushError, Result};
use keel_page::{PageHeader, PageId};
use keel_redo_log::Record;

/// Builds the redo record that carries a full image of `page` (the in-memory page, as it is
/// after the change being logged), for the buffer pool to log with a page's first change after a
/// checkpoint when [`crate::PageWriter::should_log_full_page_image`] says so; report it with
/// [`crate::PageWriter::count_full_page_image`]. Recovery installs the image unconditionally,
/// then applies later records.
///
/// Errors if `page` is not a page (a supported page size) or its header names another page.
pub fn full_page_image_record(page_id: PageId, page: &[u8]) -> Result<Record> {
    if keel_page::PageSize::from_bytes(page.len()).is_none() {
        return Err(FlushError::BadPage {
            page_id,
            reason: format!("a full page image of {} bytes is not a page", page.len()),
        });
    }
    match PageHeader::read(page) {
        Some(h) if h.page_id == page_id => Ok(Record::PageImage {
            page_id,
            image: page.to_vec(),
        }),
        Some(h) => Err(FlushError::BadPage {
            page_id,
            reason: format!("the image's header says {}", h.page_id),
        }),
        None => Err(FlushError::BadPage {
            page_id,
            reason: "no room for a header".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_page::{Lsn, PageType};

    #[test]
    fn builds_a_page_image_record_and_refuses_non_pages() {
        let mut p = vec![0u8; 8192];
        PageHeader::init(&mut p, PageId(4), PageType::RAW, Lsn(9));
        p[100] = 7;
        match full_page_image_record(PageId(4), &p).unwrap() {
            Record::PageImage { page_id, image } => {
                assert_eq!(page_id, PageId(4));
                assert_eq!(image, p);
            }
            r => panic!("{r:?}"),
        }
        let r = Record::PageImage {
            page_id: PageId(4),
            image: p.clone(),
        };
        assert_eq!(r.encoded_len(), 1 + 8 + 4 + 8192);
        assert!(full_page_image_record(PageId(5), &p)
            .unwrap_err()
            .to_string()
            .contains("page 4"));
        assert!(full_page_image_record(PageId(4), &p[..100]).is_err());
    }
}
