//! The doublewrite area (header, slot directories, images, the recovery scan and restore)
//! never panics or restores a page that does not verify, whatever bytes the area file holds:
//! opening the page writer, inspecting the area, recovering from it and reading every page
//! return values or errors.
//!
//! The base image is built once: a 4 KiB-page page writer in doublewrite mode (batches of 4)
//! writes three batches (some pages twice), then the machine loses power with every write kept.
//! Input: patches `[offset (3 bytes, little endian), length, bytes...]` to the area file
//! (offsets wrap at its length); with byte 0 odd, one data page is torn too, so recovery has
//! something to restore.
#![no_main]

use keel_flush::{FlushPage, PageWriter, PageWriterConfig, TornPageProtection, WalError, WalFlush};
use keel_io::{CrashPolicy, FileClass, FileSystem, OpenOptions, SimConfig, SimFs};
use keel_page::{
    Lsn, PageHeader, PageId, PageSize, PageState, PageType, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE,
};
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

const DIR: &str = "/db";
const PS: usize = 4096;

/// A log that is always durable (the area is under test, not the WAL rule).
struct Durable;

impl WalFlush for Durable {
    fn flush_to(&self, _lsn: Lsn) -> Result<(), WalError> {
        Ok(())
    }
    fn durable_lsn(&self) -> Lsn {
        Lsn(u64::MAX)
    }
}

fn config() -> PageWriterConfig {
    PageWriterConfig::new(
        PageSize::K4,
        TornPageProtection::Doublewrite { batch_pages: 4 },
    )
}

fn page(id: u64, lsn: u64) -> Vec<u8> {
    let mut p = vec![0u8; PS];
    PageHeader::init(&mut p, PageId(id), PageType::RAW, Lsn(lsn));
    p[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + 8].copy_from_slice(&(id * 1000 + lsn).to_le_bytes());
    p
}

/// Every file of the base image with its durable bytes.
fn base() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static BASE: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    BASE.get_or_init(|| {
        let fs = SimFs::new(SimConfig::seeded(5));
        let w = PageWriter::open(Arc::new(fs.clone()), Path::new(DIR), config(), Durable)
            .expect("open");
        for (batch, ids) in [[1u64, 2, 3, 4], [5, 6, 7, 8], [2, 4, 6, 8]]
            .iter()
            .enumerate()
        {
            let imgs: Vec<(u64, u64, Vec<u8>)> = ids
                .iter()
                .map(|&id| {
                    let lsn = 100 * (batch as u64 + 1) + id;
                    (id, lsn, page(id, lsn))
                })
                .collect();
            let pages: Vec<FlushPage<'_>> = imgs
                .iter()
                .map(|(id, lsn, img)| FlushPage {
                    page_id: PageId(*id),
                    image: img,
                    lsn: Lsn(*lsn),
                    rebuildable_from_redo: false,
                })
                .collect();
            w.write_pages(&pages).expect("write");
        }
        let post = fs.crash_with(CrashPolicy::keep_all());
        drop(w);
        let mut files = Vec::new();
        for p in post.durable_files().expect("files") {
            let bytes = post.durable_contents(&p).expect("contents");
            files.push((p, bytes));
        }
        files.sort();
        files
    })
}

fuzz_target!(|data: &[u8]| {
    let mut files = base().clone();
    let Some(area) = files
        .iter()
        .position(|(p, _)| p.file_name().is_some_and(|n| n == "doublewrite.keel"))
    else {
        return;
    };
    if let (Some(&first), Some(data_file)) = (
        data.first(),
        files
            .iter()
            .position(|(p, _)| p.file_name().is_some_and(|n| n == "data.keel")),
    ) {
        if first & 1 == 1 {
            let bytes = &mut files[data_file].1;
            let at = (usize::from(first >> 1) % 9) * PS + PS / 2;
            if at < bytes.len() {
                bytes[at] ^= 0xff;
            }
        }
    }
    let mut rest = data.get(1..).unwrap_or_default();
    while rest.len() >= 4 {
        let off = u32::from_le_bytes([rest[0], rest[1], rest[2], 0]) as usize;
        let n = usize::from(rest[3]).min(rest.len() - 4);
        let file = &mut files[area].1;
        if !file.is_empty() {
            for (i, b) in rest[4..4 + n].iter().enumerate() {
                let at = (off + i) % file.len();
                file[at] = *b;
            }
        }
        rest = &rest[4 + n..];
    }
    let fs = SimFs::new(SimConfig::seeded(9));
    for (p, bytes) in &files {
        let Some(parent) = p.parent() else { return };
        if fs.create_dir_all(parent).is_err() {
            return;
        }
        let Ok(f) = fs.open(p, &OpenOptions::new(FileClass::Other).create(true)) else {
            return;
        };
        if f.write_all_at(bytes, 0).is_err() || f.sync_all().is_err() {
            return;
        }
    }
    let Ok(w) = PageWriter::open(Arc::new(fs), Path::new(DIR), config(), Durable) else {
        return;
    };
    let _ = w.inspect_doublewrite();
    if w.recover_doublewrite().is_err() {
        return;
    }
    let mut buf = vec![0u8; PS];
    for id in 0..10 {
        if let Ok(PageState::Valid(h)) = w.read_page(PageId(id), &mut buf) {
            // A page that verifies is one the writer wrote: the area never restores forged bytes.
            let want = page(id, h.lsn.0);
            assert_eq!(
                buf[PAGE_HEADER_SIZE..PS - PAGE_TRAILER_SIZE],
                want[PAGE_HEADER_SIZE..PS - PAGE_TRAILER_SIZE],
                "page {id} verifies but is not a written version"
            );
        }
    }
});
