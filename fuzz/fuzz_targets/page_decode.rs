//! Arbitrary bytes, read as a page at an arbitrary position, never make verification panic.
#![no_main]

use keel_page::{verify, Checksum, PageId, PageState};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let id = u64::from_le_bytes(data[..8].try_into().unwrap_or([0; 8]));
    let algo = Checksum::ALL[data[8] as usize % 3];
    let page = &data[9..];
    if let Ok(PageState::Valid(h)) = verify(page, PageId(id), algo, Path::new("fuzz")) {
        assert_eq!(h.page_id, PageId(id));
    }
});
