//! Damaged B-tree nodes never make the tree panic, loop or read out of bounds: every call on
//! a tree whose node bytes come from the fuzzer (gets, both range directions, the forward
//! cursor, check, len, page ids, insert, remove, destroy) returns a value or an error.
//!
//! Input: byte 0 picks one of five base trees, built once (0 to 1,020 rows, so there are inner
//! nodes, leaves and overflow chains to damage; each input works on a copy), byte 1 whether gets use the optimistic (latch-free word)
//! decoder, the rest overwrites the payload of the tree's pages in turn (the page header is
//! kept, so the node decoder is reached rather than stopped by a page-type check).
#![no_main]

use keel_btree::{BTree, MemPages};
use keel_page::{PageId, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use libfuzzer_sys::fuzz_target;

const PAGE: usize = 4096;

const SIZES: [u32; 5] = [0, 8, 60, 250, 1020];

/// The base trees: for each size, the pages and the tree after inserting that many rows.
/// (Thread-local: `MemPages` counts optimistic reads in a `Cell`; libFuzzer runs one thread.)
fn bases() -> Vec<(MemPages, BTree, u32)> {
    {
        SIZES
            .iter()
            .map(|&rows| {
                let mut pages = MemPages::new(PAGE);
                let tree = BTree::create(&mut pages).expect("create");
                for i in 0..rows {
                    let v = if i % 37 == 0 {
                        vec![9u8; 5000]
                    } else {
                        vec![1u8; 60]
                    };
                    tree.insert(&mut pages, &i.to_be_bytes(), &v)
                        .expect("insert");
                }
                (pages, tree, rows)
            })
            .collect()
    }
}

thread_local! {
    static BASES: Vec<(MemPages, BTree, u32)> = bases();
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (mut pages, tree, rows) = BASES.with(|b| b[usize::from(data[0]) % SIZES.len()].clone());
    pages.set_optimistic_reads(data[1] & 1 == 1);
    let live = pages.live_pages() as u64;
    let payload = PAGE - PAGE_HEADER_SIZE - PAGE_TRAILER_SIZE;
    for (i, chunk) in data[2..].chunks(payload).enumerate() {
        let id = PageId(1 + i as u64 % live.max(1));
        if let Some(p) = pages.raw_mut(id) {
            p[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + chunk.len()].copy_from_slice(chunk);
        }
    }
    let _ = tree.check(&pages);
    let _ = tree.len(&pages);
    let _ = tree.page_ids(&pages);
    for i in (0..rows.max(8)).step_by(5) {
        let _ = tree.get(&pages, &i.to_be_bytes());
    }
    let _ = tree.range(&pages, ..).take(4 * rows as usize + 64).count();
    let _ = tree
        .range(&pages, ..)
        .rev()
        .take(4 * rows as usize + 64)
        .count();
    if let Ok(mut c) = tree.cursor(&pages, ..) {
        for _ in 0..4 * rows as usize + 64 {
            if !matches!(c.next(), Ok(Some(_))) {
                break;
            }
        }
    }
    let lo = 3u32.to_be_bytes();
    let hi = 40u32.to_be_bytes();
    let _ = tree
        .range(&pages, lo.as_slice()..hi.as_slice())
        .take(4096)
        .count();
    let _ = tree.insert(&mut pages, b"zz", &[2u8; 300]);
    let _ = tree.remove(&mut pages, &1u32.to_be_bytes());
    let _ = tree.destroy(&mut pages);
});
