//! The meta page, free-list trunk and store identity decoders never panic on arbitrary bytes:
//! each returns a value or an error naming the file, and what they return stays within the
//! page (free ids counted within the meta page's capacity, a trunk's ids within its page).
//!
//! Input: byte 0 picks the decoder, whether the page is sealed first (so decoding reaches the
//! fields behind the checksum) and whether the bytes are patches to a real store's meta page
//! and identity (built once, 4 KiB pages) or the whole page; byte 1 the page size for whole
//! pages; the rest is the page's bytes (zero padded) or `[offset u16, length, bytes...]`
//! patches.
#![no_main]

use keel::inspect::{decode_identity, decode_meta_page, decode_trunk_page, meta_free_ids};
use keel::{Config, Store};
use keel_io::{FileClass, FileSystem, OpenOptions, SimConfig, SimFs};
use keel_page::{seal, Checksum, PageId, PAGE_HEADER_SIZE};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// A real store's meta page (page 0 of `data.keel`) and identity file (`store.keel`).
fn base() -> &'static (Vec<u8>, Vec<u8>) {
    static BASE: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    BASE.get_or_init(|| {
        let fs = SimFs::new(SimConfig::seeded(1));
        let config = Config {
            page_size: 4096,
            pool_size: 64 * 4096,
            log_file_size: 64 * 4096,
            ..Config::default()
        };
        let store =
            Store::open_with_fs(Arc::new(fs.clone()), Path::new("/db"), config).expect("create");
        let tx = store.write().expect("write");
        for i in 0..200u32 {
            tx.table("t")
                .expect("table")
                .insert(&i.to_be_bytes(), &[1; 80])
                .expect("insert");
        }
        tx.commit().expect("commit");
        let mut tx = store.write().expect("write");
        tx.drop_table("t").expect("drop");
        tx.commit().expect("commit");
        store.close().expect("close");
        let read = |name: &str| {
            let f = fs
                .open(
                    &Path::new("/db").join(name),
                    &OpenOptions::new(FileClass::Other),
                )
                .expect("open");
            let mut b = vec![0u8; 4096];
            let n = f.len().expect("len").min(4096) as usize;
            f.read_exact_at(&mut b[..n], 0).expect("read");
            b.truncate(n);
            b
        };
        (read("data.keel"), read("store.keel"))
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let file = Path::new("/db/data.keel");
    let body = &data[2..];
    let (mut page, identity) = if data[0] & 8 == 8 {
        let (meta, identity) = base();
        let (mut page, mut identity) = (meta.clone(), identity.clone());
        let mut rest = body;
        while rest.len() >= 3 {
            let off = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
            let n = usize::from(rest[2] % 16).min(rest.len() - 3);
            let target = if data[0] & 16 == 16 {
                &mut identity
            } else {
                &mut page
            };
            for (i, b) in rest[3..3 + n].iter().enumerate() {
                let len = target.len().max(1);
                if let Some(t) = target.get_mut((off + i) % len) {
                    *t = *b;
                }
            }
            rest = &rest[3 + n..];
        }
        (page, identity)
    } else {
        let size = [4096usize, 8192, 16384][data[1] as usize % 3];
        let mut page = vec![0u8; size];
        let n = body.len().min(size);
        page[..n].copy_from_slice(&body[..n]);
        (page, body.to_vec())
    };
    let size = page.len();
    if data[0] & 1 == 1 {
        seal(&mut page, Checksum::Crc32c);
    }
    match data[0] >> 1 & 3 {
        0 => {
            if let Ok(info) = decode_meta_page(&page, file) {
                let ids = meta_free_ids(&page, &info);
                assert!(ids.len() * 8 <= size, "more free ids than the page holds");
            }
        }
        1 => {
            if let Ok((_, ids)) = decode_trunk_page(&page, PageId(3), file) {
                assert!(ids.len() * 8 <= size - PAGE_HEADER_SIZE);
            }
        }
        _ => {
            let _ = decode_identity(&identity, Path::new("/db/store.keel"));
        }
    }
});
