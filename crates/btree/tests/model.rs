//! Model tests: the B+tree against `std::collections::BTreeMap`, on in-memory pages.

use keel_btree::{BTree, BTreeError, MemPages, PageRead};
use keel_page::{PageId, PAGE_HEADER_SIZE};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Get(Vec<u8>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Small alphabet so that keys collide (replace/remove hit existing keys), variable lengths.
    prop_oneof![
        proptest::collection::vec(0u8..4, 1..6),
        proptest::collection::vec(any::<u8>(), 1..40),
        (0u32..2000).prop_map(|n| n.to_be_bytes().to_vec()),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..100),
        1 => proptest::collection::vec(any::<u8>(), 900..3000), // overflow on 4 KiB pages
        1 => Just(vec![]),
    ]
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), value()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => key().prop_map(Op::Remove),
        2 => key().prop_map(Op::Get),
        1 => (bound(), bound(), any::<bool>()).prop_map(|(a, b, r)| Op::Range(a, b, r)),
    ]
}

fn valid_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    // BTreeMap panics on inverted or empty-excluded ranges; the tree just returns nothing.
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a), Bound::Excluded(b)) | (Bound::Excluded(a), Bound::Included(b)) => {
            a < b
        }
        (Bound::Excluded(a), Bound::Excluded(b)) => a < b,
        _ => true,
    }
}

fn run(ops: &[Op], page_size: usize) -> Result<(), TestCaseError> {
    let mut pages = MemPages::new(page_size);
    let tree = BTree::create(&mut pages).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                prop_assert_eq!(
                    tree.insert(&mut pages, k, v).unwrap(),
                    model.insert(k.clone(), v.clone())
                );
            }
            Op::Remove(k) => prop_assert_eq!(tree.remove(&mut pages, k).unwrap(), model.remove(k)),
            Op::Get(k) => {
                prop_assert_eq!(tree.get(&pages, k).unwrap(), model.get(k).cloned());
                // The same get through the optimistic descent.
                pages.set_optimistic_reads(true);
                let before = pages.optimistic_reads();
                prop_assert_eq!(tree.get(&pages, k).unwrap(), model.get(k).cloned());
                prop_assert!(pages.optimistic_reads() > before, "no optimistic read");
                pages.set_optimistic_reads(false);
            }
            Op::Range(lo, hi, rev) => {
                let got: Vec<_> = if *rev {
                    tree.range(
                        &pages,
                        (
                            lo.as_ref().map(|k| k.as_slice()),
                            hi.as_ref().map(|k| k.as_slice()),
                        ),
                    )
                    .rev()
                    .collect::<Result<_, _>>()
                    .unwrap()
                } else {
                    tree.range(
                        &pages,
                        (
                            lo.as_ref().map(|k| k.as_slice()),
                            hi.as_ref().map(|k| k.as_slice()),
                        ),
                    )
                    .collect::<Result<_, _>>()
                    .unwrap()
                };
                let want: Vec<_> = if valid_range(lo, hi) {
                    let it = model
                        .range::<Vec<u8>, _>((lo.clone(), hi.clone()))
                        .map(|(k, v)| (k.clone(), v.clone()));
                    if *rev {
                        it.rev().collect()
                    } else {
                        it.collect()
                    }
                } else {
                    vec![]
                };
                prop_assert_eq!(&got, &want);
                if !*rev {
                    // The forward cursor (leaf to leaf, borrowed rows) returns the same rows.
                    let mut c = tree
                        .cursor(
                            &pages,
                            (
                                lo.as_ref().map(|k| k.as_slice()),
                                hi.as_ref().map(|k| k.as_slice()),
                            ),
                        )
                        .unwrap();
                    let mut by_cursor = Vec::new();
                    while let Some((k, v)) = c.next().unwrap() {
                        by_cursor.push((k.to_vec(), v.to_vec()));
                    }
                    prop_assert_eq!(by_cursor, want);
                }
            }
        }
    }
    let stats = tree.check(&pages).unwrap();
    prop_assert_eq!(stats.entries, model.len());
    prop_assert_eq!(tree.len(&pages).unwrap(), model.len() as u64);
    // Every live page belongs to the tree exactly once: nothing leaked, nothing shared.
    let mut ids = tree.page_ids(&pages).unwrap();
    // The check's own walk lists the same pages (keel's Store::check relies on it).
    let (checked_stats, mut checked_ids) = tree.check_with_pages(&pages).unwrap();
    prop_assert_eq!(checked_stats, stats);
    checked_ids.sort();
    let mut sorted = ids.clone();
    sorted.sort();
    prop_assert_eq!(checked_ids, sorted);
    prop_assert_eq!(
        ids.len(),
        stats.leaves + stats.inners + stats.overflow_pages
    );
    prop_assert_eq!(ids.len(), pages.live_pages());
    // No leaf below the root is left without a row (removals unlink them): a table whose rows
    // come and go keeps no page it no longer needs.
    prop_assert_eq!(stats.empty_leaves, 0);
    // Every node dumps, and its cells are the keys a scan returns.
    let mut dumped_keys = 0;
    for id in &ids {
        let bytes = pages.raw_mut(*id).unwrap().clone();
        if let Ok(n) = keel_btree::dump_node(&bytes, *id) {
            if n.leaf {
                dumped_keys += n.cells.len();
            } else {
                prop_assert_eq!(n.children.len(), n.cells.len() + 1);
            }
        }
    }
    prop_assert_eq!(dumped_keys, model.len());
    ids.sort();
    ids.dedup();
    prop_assert_eq!(ids.len(), pages.live_pages());
    let all: Vec<_> = tree.range(&pages, ..).collect::<Result<_, _>>().unwrap();
    let want: Vec<_> = model.into_iter().collect();
    prop_assert_eq!(&all, &want);
    let mut c = tree.cursor(&pages, ..).unwrap();
    let mut by_cursor = Vec::new();
    while let Some((k, v)) = c.next().unwrap() {
        by_cursor.push((k.to_vec(), v.to_vec()));
    }
    prop_assert_eq!(by_cursor, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn matches_btreemap_on_4k_pages(ops in proptest::collection::vec(op(), 1..400)) {
        run(&ops, 4096)?;
    }

    #[test]
    fn matches_btreemap_on_16k_pages(ops in proptest::collection::vec(op(), 1..400)) {
        run(&ops, 16384)?;
    }
}

#[test]
fn deep_tree_of_four_levels_and_both_ends_of_a_range() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    let mk = |i: u32| {
        let mut k = i.to_be_bytes().to_vec();
        k.resize(300, b'x');
        k
    };
    let n = 20_000u32;
    // Insert in a scrambled order so splits happen everywhere, not only at the right edge.
    for j in 0..n {
        let i = (j.wrapping_mul(7919)) % n;
        tree.insert(&mut pages, &mk(i), &i.to_le_bytes()).unwrap();
    }
    let st = tree.check(&pages).unwrap();
    assert!(st.depth >= 4, "depth {} with {:?}", st.depth, st);
    assert_eq!(st.entries, n as usize);
    for i in (0..n).step_by(97) {
        assert_eq!(
            tree.get(&pages, &mk(i)).unwrap(),
            Some(i.to_le_bytes().to_vec())
        );
    }
    // The forward cursor walks the four levels leaf to leaf: every key of the range once, in
    // order (and the whole tree).
    let (lo, hi) = (mk(100), mk(5100));
    let mut c = tree.cursor(&pages, lo.as_slice()..hi.as_slice()).unwrap();
    let mut i = 100u32;
    while let Some((k, v)) = c.next().unwrap() {
        assert_eq!(k, mk(i).as_slice());
        assert_eq!(v, i.to_le_bytes());
        i += 1;
    }
    assert_eq!(i, 5100);
    let mut c = tree.cursor(&pages, ..).unwrap();
    let mut count = 0u32;
    while c.next().unwrap().is_some() {
        count += 1;
    }
    assert_eq!(count, n);
    // Consume a range from both ends at once: every key exactly once, no crossing.
    let mut r = tree.range(&pages, lo.as_slice()..hi.as_slice());
    let mut seen = Vec::new();
    loop {
        let a = r.next();
        let b = r.next_back();
        if a.is_none() && b.is_none() {
            break;
        }
        for x in [a, b].into_iter().flatten() {
            seen.push(u32::from_le_bytes(x.unwrap().1.try_into().unwrap()));
        }
    }
    seen.sort();
    assert_eq!(seen, (100..5100).collect::<Vec<_>>());
    // Remove everything: the tree stays valid and empty.
    for i in 0..n {
        assert!(tree.remove(&mut pages, &mk(i)).unwrap().is_some());
    }
    assert_eq!(tree.check(&pages).unwrap().entries, 0);
    assert_eq!(tree.range(&pages, ..).count(), 0);
}

#[test]
fn large_values_use_overflow_pages_and_free_them() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    let base = pages.live_pages();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    tree.insert(&mut pages, b"big", &big).unwrap();
    assert!(pages.live_pages() >= base + 100_000 / 4096);
    assert_eq!(tree.get(&pages, b"big").unwrap().unwrap(), big);
    let st = tree.check(&pages).unwrap();
    assert!(st.overflow_pages >= 24, "{st:?}");
    // Replace with a small value: the chain is freed.
    let old = tree.insert(&mut pages, b"big", b"small").unwrap().unwrap();
    assert_eq!(old, big);
    assert_eq!(pages.live_pages(), base);
    tree.insert(&mut pages, b"big", &big).unwrap();
    assert_eq!(tree.remove(&mut pages, b"big").unwrap().unwrap(), big);
    assert_eq!(pages.live_pages(), base);
}

#[test]
fn keys_longer_than_the_limit_are_refused() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    let max = tree.limits().max_key;
    tree.insert(&mut pages, &vec![1u8; max], b"v").unwrap();
    assert!(matches!(
        tree.insert(&mut pages, &vec![1u8; max + 1], b"v"),
        Err(BTreeError::KeyTooLarge { .. })
    ));
}

/// Invariant 1 broken on purpose: swap two keys' order inside a leaf; `check` catches it.
#[test]
fn check_catches_keys_out_of_order() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    tree.insert(&mut pages, b"aaaa", b"1").unwrap();
    tree.insert(&mut pages, b"bbbb", b"2").unwrap();
    tree.check(&pages).unwrap();
    let root = tree.root();
    let p = pages.raw_mut(root).unwrap();
    // The slot array starts 24 bytes after the page header, 8 bytes a slot (cell offset, key
    // hint): swap slots 0 and 1.
    let s = PAGE_HEADER_SIZE + 24;
    let (a, b) = (p[s..s + 8].to_vec(), p[s + 8..s + 16].to_vec());
    p[s..s + 8].copy_from_slice(&b);
    p[s + 8..s + 16].copy_from_slice(&a);
    let err = tree.check(&pages).unwrap_err();
    assert!(err.to_string().contains("out of order"), "{err}");
}

/// A store that records a cursor's read-ahead: every id handed to `prefetch`, the calls, and
/// each leaf read with whether it had been handed over before the read.
struct Hinting<'a> {
    pages: &'a MemPages,
    hinted: std::cell::RefCell<Vec<PageId>>,
    calls: std::cell::Cell<usize>,
    leaves_read: std::cell::RefCell<Vec<(PageId, bool)>>,
}

impl<'a> Hinting<'a> {
    fn new(pages: &'a MemPages) -> Hinting<'a> {
        Hinting {
            pages,
            hinted: Default::default(),
            calls: Default::default(),
            leaves_read: Default::default(),
        }
    }

    /// Leaves read without a hint before them.
    fn unhinted_leaf_reads(&self) -> usize {
        self.leaves_read.borrow().iter().filter(|(_, h)| !h).count()
    }
}

impl keel_btree::PageRead for Hinting<'_> {
    fn page_size(&self) -> usize {
        self.pages.page_size()
    }
    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        self.pages.read(id, |p| {
            // A leaf's node kind byte follows the page header.
            if p[PAGE_HEADER_SIZE] == 1 {
                let hinted = self.hinted.borrow().contains(&id);
                self.leaves_read.borrow_mut().push((id, hinted));
            }
            f(p)
        })
    }
    fn prefetch(&self, ids: &[PageId]) {
        self.calls.set(self.calls.get() + 1);
        self.hinted.borrow_mut().extend_from_slice(ids);
    }
}

/// A forward cursor hands every leaf after the first to the store's prefetch before it reads
/// it, in batches (read-ahead for scans of cold data).
#[test]
fn a_cursor_reads_ahead_every_leaf_before_it_reads_it() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    for i in 0u32..20_000 {
        tree.insert(
            &mut pages,
            &i.wrapping_mul(2654435761).to_be_bytes(),
            &[1u8; 40],
        )
        .unwrap();
    }
    let st = tree.check(&pages).unwrap();
    let h = Hinting::new(&pages);
    let mut c = tree.cursor(&h, ..).unwrap();
    let mut n = 0;
    while c.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 20_000);
    // Only the first leaf of the scan is read without a hint.
    let unhinted = h.unhinted_leaf_reads();
    assert!(
        unhinted <= 1,
        "{unhinted} leaves read without a hint ({} leaves)",
        st.leaves
    );
    assert!(
        h.calls.get() * 4 <= st.leaves,
        "{} calls for {} leaves",
        h.calls.get(),
        st.leaves
    );
}

/// A bounded range's read-ahead hands over only the leaves the range can reach: a short scan
/// crossing into a second leaf must not make the store read the parent's next sixteen. Every
/// leaf read after the first is still hinted first.
#[test]
fn a_bounded_cursor_reads_ahead_only_leaves_in_its_range() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    for i in 0u32..20_000 {
        tree.insert(&mut pages, &i.to_be_bytes(), &[1u8; 40])
            .unwrap();
    }
    for (lo, n) in [(1000u32, 120u32), (5000, 1), (7777, 400), (0, 60)] {
        let h = Hinting::new(&pages);
        let (a, b) = (lo.to_be_bytes(), (lo + n).to_be_bytes());
        let mut c = tree.cursor(&h, a.as_slice()..b.as_slice()).unwrap();
        let mut rows = 0;
        while c.next().unwrap().is_some() {
            rows += 1;
        }
        assert_eq!(rows, n);
        let read = h.leaves_read.borrow();
        for (id, hinted) in read.iter().skip(1) {
            assert!(hinted, "leaf {id:?} read without a hint");
        }
        // No more leaves hinted than the scan reads (the first is read without one; the last
        // read-ahead's first child may be the one leaf past the range the scan looks into).
        let hinted = h.hinted.borrow().len();
        assert!(
            hinted <= read.len(),
            "{hinted} leaves hinted for a scan of {n} rows reading {} leaves",
            read.len()
        );
    }
}

/// Cursor invariant 1 broken on purpose: keys out of order within a leaf (two slots
/// swapped), and across leaves (a leaf's first key copied over by the previous leaf's last),
/// are corruption, never rows returned out of order.
#[test]
fn a_cursor_refuses_keys_out_of_order() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    tree.insert(&mut pages, b"aaaa", b"1").unwrap();
    tree.insert(&mut pages, b"bbbb", b"2").unwrap();
    let s = PAGE_HEADER_SIZE + 24;
    let p = pages.raw_mut(tree.root()).unwrap();
    let (a, b) = (p[s..s + 8].to_vec(), p[s + 8..s + 16].to_vec());
    p[s..s + 8].copy_from_slice(&b);
    p[s + 8..s + 16].copy_from_slice(&a);
    let mut c = tree.cursor(&pages, ..).unwrap();
    assert!(c.next().unwrap().is_some());
    let err = c.next().unwrap_err();
    assert!(err.to_string().contains("out of order"), "{err}");
    assert!(
        c.next().unwrap().is_none(),
        "the cursor stays at its end after an error"
    );
    // Across leaves: two leaves under one root; the second leaf's slot 0 is pointed at a cell
    // holding a key below the first leaf's last key.
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    for i in 0u32..200 {
        tree.insert(&mut pages, &i.to_be_bytes(), &[0u8; 30])
            .unwrap();
    }
    let mut c = tree.cursor(&pages, ..).unwrap();
    let mut n = 0;
    while c.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 200);
    let root = pages.raw_mut(tree.root()).unwrap().clone();
    let leftmost = PageId(u64::from_le_bytes(
        root[PAGE_HEADER_SIZE + 16..PAGE_HEADER_SIZE + 24]
            .try_into()
            .unwrap(),
    ));
    let first_leaf = pages.raw_mut(leftmost).unwrap().clone();
    // The second leaf: the root's first separator cell names it (key length u16, pad, child).
    let cell_at = u32::from_le_bytes(root[s..s + 4].try_into().unwrap()) as usize;
    let second = PageId(u64::from_le_bytes(
        root[cell_at + 4..cell_at + 12].try_into().unwrap(),
    ));
    // Give the second leaf the first leaf's bytes (same keys again), keeping its page id.
    let p = pages.raw_mut(second).unwrap();
    let header = p[..PAGE_HEADER_SIZE].to_vec();
    p.copy_from_slice(&first_leaf);
    p[..PAGE_HEADER_SIZE].copy_from_slice(&header);
    let err = cursor_error(&tree, &pages, "repeated keys were returned");
    assert!(err.to_string().contains("out of order"), "{err}");
}

/// Cursor invariant 3 broken on purpose: the cursor copies only a leaf's bytes in use, so its
/// buffer's free space still holds the previous leaf's cells. A slot of the last leaf pointed
/// into its free space, right at one of those stale cells, is corruption naming the leaf,
/// never the stale row (nor a key-order error found by chance).
#[test]
fn a_cursor_never_reads_a_stale_cell() {
    let h = PAGE_HEADER_SIZE;
    let u32_at = |p: &[u8], o: usize| u32::from_le_bytes(p[o..o + 4].try_into().unwrap()) as usize;
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    // Appends: full leaves, and a last leaf with room (a large free space).
    for i in 0u32..200 {
        tree.insert(&mut pages, &i.to_be_bytes(), &[7u8; 30])
            .unwrap();
    }
    assert_eq!(tree.check(&pages).unwrap().depth, 2);
    let root = pages.raw_mut(tree.root()).unwrap().clone();
    let nslots = u32_at(&root, h + 4);
    let child = |i: usize| {
        let o = if i == 0 {
            h + 16
        } else {
            u32_at(&root, h + 24 + (i - 1) * 8) + 4
        };
        PageId(u64::from_le_bytes(root[o..o + 8].try_into().unwrap()))
    };
    let (before, last) = (child(nslots - 1), child(nslots));
    let prev = pages.raw_mut(before).unwrap().clone();
    let l = pages.raw_mut(last).unwrap();
    let (slots_end, cell_start) = (h + 24 + u32_at(l, h + 4) * 8, u32_at(l, h + 8));
    // A cell of the leaf before that lies in the last leaf's free space.
    let stale = (0..u32_at(&prev, h + 4))
        .map(|i| u32_at(&prev, h + 24 + i * 8))
        .find(|&o| o >= slots_end && o + 8 + 4 + 30 <= cell_start)
        .expect("the leaf before has a cell where the last leaf has free space");
    l[h + 24..h + 28].copy_from_slice(&(stale as u32).to_le_bytes());
    let err = cursor_error(&tree, &pages, "the damaged slot was not noticed");
    let msg = err.to_string();
    assert!(msg.contains("cell area"), "{msg}");
    assert!(msg.contains(&last.to_string()), "{msg}");
}

/// Invariant 2 broken on purpose: a child at the wrong level is reported, not followed.
#[test]
fn check_and_get_catch_a_child_at_the_wrong_level() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    for i in 0u32..2000 {
        tree.insert(&mut pages, &i.to_be_bytes(), &[0u8; 50])
            .unwrap();
    }
    let st = tree.check(&pages).unwrap();
    assert!(st.depth >= 2);
    // Make the root's leftmost child claim to be level 7.
    let leftmost = {
        let p = pages.raw_mut(tree.root()).unwrap();
        PageId(u64::from_le_bytes(
            p[PAGE_HEADER_SIZE + 16..PAGE_HEADER_SIZE + 24]
                .try_into()
                .unwrap(),
        ))
    };
    pages.raw_mut(leftmost).unwrap()[PAGE_HEADER_SIZE + 1] = 7;
    assert!(tree
        .check(&pages)
        .unwrap_err()
        .to_string()
        .contains("level"));
    // Reported as the root's pointer to that child, with the level mismatch as the cause.
    match tree.get(&pages, &0u32.to_be_bytes()) {
        Err(BTreeError::BadPointer {
            page_id,
            slot: 0,
            target,
            source,
        }) => {
            assert_eq!((page_id, target), (tree.root(), leftmost));
            assert!(matches!(*source, BTreeError::Corrupt { .. }), "{source}");
        }
        other => panic!("expected a bad pointer, got {other:?}"),
    }
    // An insert (whose descent stops at the leaf's id and checks the leaf when it latches it
    // for the edit) reports the same pointer, and changes nothing.
    match tree.insert(&mut pages, &0u32.to_be_bytes(), &[1u8; 50]) {
        Err(BTreeError::BadPointer {
            page_id,
            slot: 0,
            target,
            ..
        }) => assert_eq!((page_id, target), (tree.root(), leftmost)),
        other => panic!("expected a bad pointer, got {other:?}"),
    }
    // A child at level 0 that is not a leaf is refused too, not searched as one.
    let p = pages.raw_mut(leftmost).unwrap();
    p[PAGE_HEADER_SIZE + 1] = 0;
    p[PAGE_HEADER_SIZE] = 2;
    match tree.insert(&mut pages, &0u32.to_be_bytes(), &[1u8; 50]) {
        Err(BTreeError::BadPointer { target, .. }) => assert_eq!(target, leftmost),
        other => panic!("expected a bad pointer, got {other:?}"),
    }
}

/// Invariant 3: garbage node bytes give errors naming the page, never a panic.
#[test]
fn garbage_pages_never_panic() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..300 {
        let mut pages = MemPages::new(4096);
        let tree = BTree::create(&mut pages).unwrap();
        for i in 0u32..300 {
            tree.insert(&mut pages, &i.to_be_bytes(), &[1u8; 40])
                .unwrap();
        }
        let ids: Vec<PageId> = (1..=pages.live_pages() as u64).map(PageId).collect();
        for _ in 0..8 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = ids[(seed >> 33) as usize % ids.len()];
            if let Some(p) = pages.raw_mut(id) {
                let off = PAGE_HEADER_SIZE + (seed >> 20) as usize % (4096 - PAGE_HEADER_SIZE - 8);
                p[off] = (seed >> 8) as u8;
            }
        }
        let _ = tree.check(&pages);
        let _ = tree.len(&pages);
        let _ = tree.page_ids(&pages);
        for id in &ids {
            if let Some(p) = pages.raw_mut(*id) {
                let p = p.clone();
                let _ = keel_btree::dump_node(&p, *id);
            }
        }
        for i in (0u32..300).step_by(7) {
            let _ = tree.get(&pages, &i.to_be_bytes());
        }
        let _ = tree.range(&pages, ..).take(1000).count();
        if let Ok(mut c) = tree.cursor(&pages, ..) {
            for _ in 0..1000 {
                if !matches!(c.next(), Ok(Some(_))) {
                    break;
                }
            }
        }
        let _ = tree.range(&pages, ..).rev().take(1000).count();
        let _ = tree.insert(&mut pages, b"zz", b"v");
        let _ = pages.page_size();
    }
}

/// `len` counts what `check` counts, and a child pointer back to the root is an error naming
/// the pointer, never an endless walk.
#[test]
fn len_counts_rows_and_refuses_a_cycle() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    assert_eq!(tree.len(&pages).unwrap(), 0);
    for i in 0u32..3000 {
        tree.insert(&mut pages, &i.to_be_bytes(), &[0u8; 50])
            .unwrap();
    }
    for i in (0u32..3000).step_by(3) {
        tree.remove(&mut pages, &i.to_be_bytes()).unwrap();
    }
    assert_eq!(tree.len(&pages).unwrap(), 2000);
    assert_eq!(tree.check(&pages).unwrap().entries, 2000);
    // The root's leftmost child pointer now points at the root.
    let root = tree.root();
    pages.raw_mut(root).unwrap()[PAGE_HEADER_SIZE + 16..PAGE_HEADER_SIZE + 24]
        .copy_from_slice(&root.0.to_le_bytes());
    match tree.len(&pages) {
        Err(BTreeError::BadPointer { page_id, slot, .. }) => {
            assert_eq!((page_id, slot), (root, 0));
        }
        other => panic!("expected a bad pointer, got {other:?}"),
    }
    // An insert below that pointer reports it too (its descent stops at the leaf's id), once:
    // the cause is the self-pointer, not the same bad pointer again.
    match tree.insert(&mut pages, &1u32.to_be_bytes(), &[1u8; 50]) {
        Err(BTreeError::BadPointer {
            page_id,
            slot,
            source,
            ..
        }) => {
            assert_eq!((page_id, slot), (root, 0));
            assert!(matches!(*source, BTreeError::Corrupt { .. }), "{source}");
        }
        other => panic!("expected a bad pointer, got {other:?}"),
    }
}

/// The error a whole-tree cursor scan stops with; panics with `unnoticed` if it ends cleanly.
fn cursor_error(tree: &BTree, pages: &MemPages, unnoticed: &str) -> BTreeError {
    let mut c = tree.cursor(pages, ..).unwrap();
    loop {
        match c.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("{unnoticed}"),
            Err(e) => return e,
        }
    }
}
