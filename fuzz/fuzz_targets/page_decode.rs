//! Arbitrary bytes read as a page of a real size at an arbitrary position never make
//! verification panic, and a page sealed by `seal` always verifies.
//!
//! Input: byte 0 picks the page size (4, 8 or 16 KiB), byte 1 the checksum algorithm, byte 2
//! the mode (bit 0: seal the page first, so the checks after the checksum are reached; bit 1:
//! store the claimed page id in the header first), bytes 3..11 the page id the page is read
//! at, the rest the page's bytes, zero-padded or cut to the page size. (The first version of
//! this target passed the raw tail as the page, so no input ever had a page's length and
//! nothing past the length check ran.)
#![no_main]

use keel_page::{seal, verify, Checksum, PageId, PageState};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

/// Offset of the page id in the page header (see docs/format.md).
const OFF_PAGE_ID: usize = 8;

fuzz_target!(|data: &[u8]| {
    if data.len() < 11 {
        return;
    }
    let page_size = [4096usize, 8192, 16384][data[0] as usize % 3];
    let algo = Checksum::ALL[data[1] as usize % Checksum::ALL.len()];
    let mode = data[2];
    let mut id_bytes = [0u8; 8];
    id_bytes.copy_from_slice(&data[3..11]);
    let id = PageId(u64::from_le_bytes(id_bytes));
    let mut page = vec![0u8; page_size];
    let body = &data[11..];
    let n = body.len().min(page_size);
    page[..n].copy_from_slice(&body[..n]);
    if mode & 2 != 0 {
        page[OFF_PAGE_ID..OFF_PAGE_ID + 8].copy_from_slice(&id.0.to_le_bytes());
    }
    if mode & 1 != 0 {
        seal(&mut page, algo);
    }
    let got = verify(&page, id, algo, Path::new("fuzz"));
    if let Ok(PageState::Valid(h)) = &got {
        assert_eq!(h.page_id, id);
        assert_eq!(h.algorithm_tag, algo.tag());
    }
    if mode & 3 == 3 {
        // Sealed with its own id: it must verify (or be all zeros, never written).
        assert!(
            matches!(got, Ok(PageState::Valid(_)) | Ok(PageState::Unwritten)),
            "a sealed page failed verification: {got:?}"
        );
    }
    // Any length other than a page size is refused, never read.
    let _ = verify(&page[..page_size - 1], id, algo, Path::new("fuzz"));
});
