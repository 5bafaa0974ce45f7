//! Values read from disk are checked before they are used (issue 11, item 6): a child page id of
//! 2^50 + 5 in an inner node is a typed corruption error naming the inner page, its slot and the
//! target — never a debug-build overflow panic, never a misdirected read in release.

use keel::{Checksum, Config, Error, Store};
use keel_page::{seal, PAGE_HEADER_SIZE};
use std::path::Path;

const BAD_CHILD: u64 = (1 << 50) + 5;

/// The store in `dir` with `page_size`-byte pages and a 4 MiB pool.
fn open(dir: &Path, page_size: usize) -> Result<Store, Error> {
    Store::open(
        dir,
        Config {
            page_size,
            pool_size: 4 << 20,
            ..Config::default()
        },
    )
}

fn build(dir: &Path, page_size: usize) {
    let s = open(dir, page_size).unwrap();
    let tx = s.write().unwrap();
    {
        let mut t = tx.table("t").unwrap();
        for i in 0..3000u32 {
            t.insert(format!("key{i:06}").as_bytes(), &[7u8; 40])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    s.close().unwrap();
}

/// Patches the leftmost child of every inner node (node kind 2) to `BAD_CHILD`, resealing the
/// page so that its checksum still holds. Returns the patched page ids.
fn patch_inner_nodes(dir: &Path, page_size: usize) -> Vec<u64> {
    let path = dir.join("data.keel");
    let mut bytes = std::fs::read(&path).unwrap();
    let mut patched = Vec::new();
    for (i, page) in bytes.chunks_exact_mut(page_size).enumerate() {
        // Node header after the page header: kind u8 (1 leaf, 2 inner), ..., leftmost u64 at +16.
        if page.iter().all(|&b| b == 0) || page[PAGE_HEADER_SIZE] != 2 {
            continue;
        }
        let o = PAGE_HEADER_SIZE + 16;
        page[o..o + 8].copy_from_slice(&BAD_CHILD.to_le_bytes());
        seal(page, Checksum::Crc32c);
        patched.push(i as u64);
    }
    std::fs::write(&path, &bytes).unwrap();
    patched
}

fn scan_all(dir: &Path, page_size: usize) -> Result<usize, Error> {
    let s = open(dir, page_size)?;
    let r = s.read()?;
    let t = r.table("t")?;
    let mut n = 0;
    for kv in t.range(..)? {
        kv?;
        n += 1;
    }
    t.get(b"key000000")?;
    Ok(n)
}

#[test]
fn a_child_pointer_out_of_every_range_is_a_typed_error_naming_the_page() {
    for page_size in [4096usize, 16384] {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), page_size);
        let patched = patch_inner_nodes(dir.path(), page_size);
        assert!(!patched.is_empty(), "no inner node at {page_size}");
        let e = scan_all(dir.path(), page_size).expect_err("a bad child pointer was followed");
        assert!(e.is_corruption(), "{page_size}: {e}");
        names_the_bad_pointer(&e, &patched, "a scan");
        let msg = e.to_string();
        assert!(msg.contains(&BAD_CHILD.to_string()), "{msg}");
        // A write below the bad pointer names it too: an insert's descent stops at the leaf's
        // id and reads the leaf when it latches it for the edit, where the failed read is
        // still reported as the pointer's fault.
        let e = insert_first(dir.path(), page_size).expect_err("a bad child pointer was followed");
        names_the_bad_pointer(&e, &patched, "an insert");
    }
}

/// `e` (from `what`) is a bad pointer in one of the `patched` pages, to [`BAD_CHILD`].
fn names_the_bad_pointer(e: &Error, patched: &[u64], what: &str) {
    match e {
        Error::BadPointer {
            page_id, target, ..
        } => {
            assert!(patched.contains(&page_id.0), "{what}: {e}");
            assert_eq!(target.0, BAD_CHILD, "{what}: {e}");
        }
        other => panic!("{what}: expected BadPointer, got {other:?}"),
    }
}

/// Inserts a key before every other key (under the leftmost pointers).
fn insert_first(dir: &Path, page_size: usize) -> Result<(), Error> {
    let s = open(dir, page_size)?;
    let tx = s.write()?;
    tx.table("t")?.insert(b"key", b"first")?;
    tx.commit()
}
