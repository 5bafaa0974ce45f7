//! Bytes read from disk are never trusted (issue 11, item 6, the class): a tree whose pages get
//! random damage — flipped bytes, random page ids in child and overflow pointers, random slot
//! offsets and counts — answers every get, scan, check, insert and remove with a value or an
//! error, never a panic. Run in debug (`cargo test -p keel-btree`) it also proves there is no
//! unchecked arithmetic on those values: an overflow would panic.

use keel_btree::{BTree, MemPages};
use keel_io::SplitMix64;
use keel_page::PageId;
use std::panic::AssertUnwindSafe;

fn tree(page_size: usize, seed: u64) -> (MemPages, BTree, Vec<PageId>) {
    let mut pages = MemPages::new(page_size);
    let t = BTree::create(&mut pages).unwrap();
    let mut rng = SplitMix64::new(seed);
    for i in 0..600u32 {
        let vlen = if rng.below(10) == 0 {
            3 * page_size
        } else {
            60
        };
        t.insert(
            &mut pages,
            format!("k{i:05}").as_bytes(),
            &vec![i as u8; vlen],
        )
        .unwrap();
    }
    let ids: Vec<PageId> = (1..4000u64)
        .map(PageId)
        .filter(|&id| pages.raw_mut(id).is_some())
        .collect();
    (pages, t, ids)
}

fn damage(pages: &mut MemPages, ids: &[PageId], rng: &mut SplitMix64) {
    let id = ids[rng.below(ids.len() as u64) as usize];
    let Some(p) = pages.raw_mut(id) else { return };
    let len = p.len() as u64;
    match rng.below(4) {
        // A random byte.
        0 => p[rng.below(len) as usize] = rng.next_u64() as u8,
        // A huge or random page id at a random 8-byte-aligned place (pointers, counts).
        1 => {
            let o = (rng.below(len / 8) * 8) as usize;
            let v = match rng.below(3) {
                0 => (1u64 << 50) + 5,
                1 => u64::MAX - rng.below(16),
                _ => rng.below(5000),
            };
            p[o..o + 8].copy_from_slice(&v.to_le_bytes());
        }
        // A random u32 (slot offsets, counts, lengths) in the first KiB.
        2 => {
            let o = (rng.below(256) * 4) as usize;
            p[o..o + 4].copy_from_slice(&(rng.next_u64() as u32).to_le_bytes());
        }
        // A run of 0xFF.
        _ => {
            let o = rng.below(len - 64) as usize;
            p[o..o + 64].fill(0xFF);
        }
    }
}

#[test]
fn damaged_pages_give_errors_never_panics() {
    let mut panics = Vec::new();
    for page_size in [4096usize, 16384] {
        for case in 0..60u64 {
            let (mut pages, t, ids) = tree(page_size, case);
            let mut rng = SplitMix64::new(case ^ 0xBAD);
            for _ in 0..1 + rng.below(4) {
                damage(&mut pages, &ids, &mut rng);
            }
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let _ = t.check(&pages);
                for kv in t.range(&pages, ..).take(5000) {
                    if kv.is_err() {
                        break;
                    }
                }
                for kv in t.range(&pages, ..).rev().take(5000) {
                    if kv.is_err() {
                        break;
                    }
                }
                for i in (0..600u32).step_by(7) {
                    let _ = t.get(&pages, format!("k{i:05}").as_bytes());
                }
                pages.set_optimistic_reads(true);
                for i in (0..600u32).step_by(11) {
                    let _ = t.get(&pages, format!("k{i:05}").as_bytes());
                }
                pages.set_optimistic_reads(false);
                for i in (0..600u32).step_by(13) {
                    let k = format!("k{i:05}");
                    let _ = t.insert(&mut pages, k.as_bytes(), b"new");
                    let _ = t.remove(&mut pages, k.as_bytes());
                }
            }));
            if let Err(p) = r {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panics.push(format!("{page_size}-byte pages, case {case}: {msg}"));
            }
        }
    }
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
}
