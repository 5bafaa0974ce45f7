//! Unit tests of the slotted node: each invariant broken on purpose, mutations, bounds.

use super::*;

fn leaf(size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size];
    init(&mut p, KIND_LEAF, 0);
    p
}

#[test]
fn insert_search_remove_round_trip() {
    let mut p = leaf(4096);
    let id = PageId(1);
    for (i, k) in [b"b", b"d", b"a", b"c"].iter().enumerate() {
        let n = Node::new(&p, id).unwrap();
        let idx = n.search(*k).unwrap().unwrap_err();
        assert!(insert(&mut p, id, idx, &leaf_cell_inline(*k, &[i as u8; 10])).unwrap());
    }
    let n = Node::new(&p, id).unwrap();
    let keys: Vec<_> = (0..n.len()).map(|i| n.key(i).unwrap().to_vec()).collect();
    assert_eq!(
        keys,
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
    );
    assert_eq!(n.value(0).unwrap(), ValueRef::Inline(&[2u8; 10]));
    remove(&mut p, id, 1).unwrap();
    let n = Node::new(&p, id).unwrap();
    assert_eq!(n.len(), 3);
    assert_eq!(n.search(b"b").unwrap(), Err(1));
}

#[test]
fn insert_edits_equal_insert() {
    let id = PageId(3);
    let mut by_insert = leaf(4096);
    let mut by_edits = leaf(4096);
    let mut seed = 5u64;
    for i in 0..400u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = (seed >> 16).to_be_bytes();
        let cell = leaf_cell_inline(&key, &vec![i as u8; (seed % 40) as usize]);
        let idx = match Node::new(&by_insert, id).unwrap().search(&key).unwrap() {
            Ok(_) => continue,
            Err(i) => i,
        };
        let plan = insert_edits(&by_edits, id, idx, &cell).unwrap();
        let inserted = insert(&mut by_insert, id, idx, &cell).unwrap();
        match plan {
            Some(p) => {
                assert!(inserted);
                for e in p.edits(&cell) {
                    e.apply(&mut by_edits).unwrap();
                }
            }
            None => {
                // No room without compaction: the fallback path is `insert` itself.
                assert!(!inserted || Node::new(&by_edits, id).unwrap().frag() > 0);
                break;
            }
        }
        assert_eq!(by_insert, by_edits, "after {i} inserts");
    }
    assert!(Node::new(&by_edits, id).unwrap().len() > 20);
    // A slot index past the end is corruption, not a wild move.
    let n = Node::new(&by_edits, id).unwrap().len();
    assert!(insert_edits(&by_edits, id, n + 1, &leaf_cell_inline(b"k", b"v")).is_err());
}

/// Invariant 1: a key outside the node's hint prefix lowers the prefix and rewrites every
/// hint; searches stay exact before and after, and `check_hints` holds.
#[test]
fn hint_prefix_is_kept() {
    let id = PageId(4);
    let mut p = leaf(4096);
    let keys: Vec<Vec<u8>> = (0..20u8).map(|i| vec![7, 7, 7, i * 2]).collect();
    let cells: Vec<Vec<u8>> = keys.iter().map(|k| leaf_cell_inline(k, b"v")).collect();
    assert!(rebuild(&mut p, KIND_LEAF, 0, PageId(0), &cells));
    assert_eq!(Node::new(&p, id).unwrap().hint_prefix(), 3);
    // Inside the prefix: the exact edits apply.
    let inside = leaf_cell_inline(&[7, 7, 7, 5], b"v");
    let idx = Node::new(&p, id)
        .unwrap()
        .search(&[7, 7, 7, 5])
        .unwrap()
        .unwrap_err();
    assert!(insert_edits(&p, id, idx, &inside).unwrap().is_some());
    // Outside it (before and after every key): the edits refuse, `insert` lowers it.
    for (k, hp) in [(vec![7u8, 7, 6, 9], 2), (vec![7u8, 8], 1)] {
        let cell = leaf_cell_inline(&k, b"v");
        let idx = Node::new(&p, id).unwrap().search(&k).unwrap().unwrap_err();
        assert!(insert_edits(&p, id, idx, &cell).unwrap().is_none());
        assert!(insert(&mut p, id, idx, &cell).unwrap());
        assert_eq!(Node::new(&p, id).unwrap().hint_prefix(), hp);
    }
    let n = Node::new(&p, id).unwrap();
    assert_eq!(n.hint_prefix(), 1);
    n.check_hints().unwrap();
    for k in keys.iter().chain([&vec![7u8, 7, 6, 9], &vec![7u8, 8]]) {
        assert!(n.search(k).unwrap().is_ok(), "{k:?}");
    }
    for (k, want) in [(vec![6u8], 0), (vec![7u8, 6], 0), (vec![9u8], n.len())] {
        assert_eq!(n.search(&k).unwrap(), Err(want), "{k:?}");
    }
    assert_eq!(n.search(&[7, 7, 7, 3]).unwrap(), Err(3));
}

/// Invariant 3: removing a node's last key resets its hint prefix, so the next key (hinted
/// under prefix 0 by the exact edits) and every later one agree with the header. Broken on
/// purpose (a stale prefix written back into an emptied node), the check reports it and the
/// edits refuse, leaving `insert` to repair it.
#[test]
fn an_emptied_node_forgets_its_hint_prefix() {
    let id = PageId(6);
    let mut p = leaf(4096);
    let cells: Vec<Vec<u8>> = [b"k01121a".as_slice(), b"k01121z"]
        .iter()
        .map(|k| leaf_cell_inline(k, b"v"))
        .collect();
    assert!(rebuild(&mut p, KIND_LEAF, 0, PageId(0), &cells));
    assert_eq!(Node::new(&p, id).unwrap().hint_prefix(), 6);
    remove(&mut p, id, 1).unwrap();
    remove(&mut p, id, 0).unwrap();
    let n = Node::new(&p, id).unwrap();
    assert_eq!(n.hint_prefix(), 0);
    n.check_hints().unwrap();
    // The overwrite sequence of issue 11 item 1: re-insert by the exact edits, then a
    // neighbour; every key stays findable.
    let c = leaf_cell_inline(b"k01121defg", b"v2");
    let e = insert_edits(&p, id, 0, &c).unwrap().unwrap();
    for edit in e.edits(&c) {
        edit.apply(&mut p).unwrap();
    }
    assert!(insert(&mut p, id, 1, &leaf_cell_inline(b"k01185", b"v")).unwrap());
    let n = Node::new(&p, id).unwrap();
    n.check_hints().unwrap();
    assert_eq!(n.search(b"k01121defg").unwrap(), Ok(0));
    assert_eq!(n.search(b"k01185").unwrap(), Ok(1));
    // Broken on purpose: an empty node that kept a stale prefix.
    remove(&mut p, id, 1).unwrap();
    remove(&mut p, id, 0).unwrap();
    wr_u16(&mut p, NH_HINT_PREFIX, 5);
    let err = Node::new(&p, id).unwrap().check_hints().unwrap_err();
    assert!(
        err.to_string().contains("empty node with hint prefix 5"),
        "{err}"
    );
    assert!(insert_edits(&p, id, 0, &c).unwrap().is_none());
    assert!(insert(&mut p, id, 0, &c).unwrap());
    Node::new(&p, id).unwrap().check_hints().unwrap();
}

/// Invariant 2 broken on purpose: a slot whose hint does not match its key is reported by
/// the check (a search trusting it would go astray).
#[test]
fn a_stale_hint_is_reported() {
    let id = PageId(5);
    let mut p = leaf(4096);
    let cells: Vec<Vec<u8>> = (0..10u8)
        .map(|i| leaf_cell_inline(&[1, 2, i], b"v"))
        .collect();
    assert!(rebuild(&mut p, KIND_LEAF, 0, PageId(0), &cells));
    Node::new(&p, id).unwrap().check_hints().unwrap();
    wr_u32(&mut p, SLOTS + 3 * SLOT_SIZE + 4, 0xFFFF_FFFF);
    let err = Node::new(&p, id).unwrap().check_hints().unwrap_err();
    assert!(err.to_string().contains("slot 3"), "{err}");
    // Invariant 1 broken: a key that does not share the prefix.
    assert!(rebuild(&mut p, KIND_LEAF, 0, PageId(0), &cells));
    wr_u16(&mut p, NH_HINT_PREFIX, 3);
    let err = Node::new(&p, id).unwrap().check_hints().unwrap_err();
    assert!(err.to_string().contains("hint prefix"), "{err}");
}

#[test]
fn fragmentation_is_reclaimed_by_compaction() {
    let mut p = leaf(4096);
    let id = PageId(1);
    let lim = Limits::new(4096);
    let v = vec![7u8; lim.max_inline_value(2)];
    let mut n = 0usize;
    while insert(
        &mut p,
        id,
        n,
        &leaf_cell_inline(&(n as u16).to_be_bytes(), &v),
    )
    .unwrap()
    {
        n += 1;
    }
    assert!(n >= 4, "at least four max-size cells fit, got {n}");
    remove(&mut p, id, 0).unwrap();
    // Free space alone is too small, free + fragmentation is enough: compaction makes room.
    assert!(insert(&mut p, id, 0, &leaf_cell_inline(&[0, 0], &v)).unwrap());
}

/// Invariant 3 broken on purpose: a slot pointing past the page end is reported, not followed.
#[test]
fn a_slot_pointing_outside_the_page_is_corruption() {
    let mut p = leaf(4096);
    let id = PageId(9);
    insert(&mut p, id, 0, &leaf_cell_inline(b"k", b"v")).unwrap();
    let off = slot_offset(&p, 0);
    assert!(off > 0);
    wr_u32(&mut p, SLOTS, 4090);
    let err = Node::new(&p, id).unwrap().cell(0).unwrap_err();
    assert!(err.to_string().contains("page 9"), "{err}");
    // A key length running past the end is caught too.
    wr_u32(&mut p, SLOTS, off as u32);
    wr_u16(&mut p, off, 5000);
    assert!(Node::new(&p, id).unwrap().key(0).is_err());
    // A slot count that cannot fit is caught by the header check.
    wr_u32(&mut p, NH_NSLOTS, 100_000);
    assert!(Node::new(&p, id).is_err());
}

#[test]
fn limits_leave_room_for_four_cells() {
    for size in [4096usize, 8192, 16384, 32768, 65536] {
        let l = Limits::new(size);
        assert!(4 * (l.max_cell + SLOT_SIZE) <= size - PAGE_TRAILER_SIZE - SLOTS);
        assert!(l.max_key < u16::MAX as usize);
    }
}

/// The cell area (cell start to the node's end) is exactly the live cells plus the
/// fragmentation count: what compaction and the free-space decisions rely on.
fn accounting_holds(p: &[u8], id: PageId) -> bool {
    let n = Node::new(p, id).unwrap();
    let live: usize = (0..n.len()).map(|i| n.cell(i).unwrap().len()).sum();
    n.end - rd_u32(p, NH_CELL_START) as usize == live + n.frag()
}

fn apply(p: &mut [u8], ops: &[keel_page::PageOp<'_>]) {
    for e in ops {
        e.apply(p).unwrap();
    }
}

/// Removes and in-place replaces (shorter, equal and longer cells) keep every key in its slot
/// with its latest value, and keep the byte accounting; a replace that forgets to count the
/// old cell as fragmentation is caught (broken on purpose).
#[test]
fn remove_and_replace_edits_keep_the_accounting() {
    let id = PageId(9);
    let mut p = leaf(4096);
    let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut seed = 11u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..40u64 {
        let key = (i * 7919 % 1000).to_be_bytes().to_vec();
        let idx = Node::new(&p, id)
            .unwrap()
            .search(&key)
            .unwrap()
            .unwrap_err();
        let v = vec![i as u8; 10];
        assert!(insert(&mut p, id, idx, &leaf_cell_inline(&key, &v)).unwrap());
        model.insert(idx, (key, v));
    }
    let (mut moved, mut in_place, mut refused) = (0, 0, 0);
    for step in 0..400 {
        let r = rnd();
        let idx = (r % model.len() as u64) as usize;
        if r % 10 == 0 && model.len() > 1 {
            let plan = remove_edits(&p, id, idx).unwrap();
            apply(&mut p, &plan.edits());
            model.remove(idx);
        } else {
            let v = vec![step as u8; (r >> 8) as usize % 40];
            let cell = leaf_cell_inline(&model[idx].0, &v);
            match replace_edits(&p, id, idx, &cell).unwrap() {
                Some(plan) => {
                    if cell.len() > Node::new(&p, id).unwrap().cell(idx).unwrap().len() {
                        moved += 1;
                    } else {
                        in_place += 1;
                    }
                    apply(&mut p, &plan.edits(&cell));
                    model[idx].1 = v;
                }
                None => {
                    // No free space for a longer cell: compact, as the tree's fallback does.
                    refused += 1;
                    let mut cells = Node::new(&p, id).unwrap().cells().unwrap();
                    cells[idx] = cell;
                    assert!(rebuild(&mut p, KIND_LEAF, 0, PageId(0), &cells));
                    model[idx].1 = v;
                }
            }
        }
        let n = Node::new(&p, id).unwrap();
        assert_eq!(n.len(), model.len());
        for (i, (k, v)) in model.iter().enumerate() {
            assert_eq!(n.key(i).unwrap(), &k[..], "step {step}");
            assert_eq!(n.value(i).unwrap(), ValueRef::Inline(v), "step {step}");
        }
        n.check_hints().unwrap();
        assert!(accounting_holds(&p, id), "step {step}");
    }
    assert!(
        moved > 10 && in_place > 10 && refused > 0,
        "{moved} {in_place} {refused}"
    );
    // Broken on purpose: a longer cell whose old bytes are not counted as fragmentation.
    let idx = 0;
    let mut cells = Node::new(&p, id).unwrap().cells().unwrap();
    assert!(rebuild(&mut p, KIND_LEAF, 0, PageId(0), &cells));
    let cell = leaf_cell_inline(&model[idx].0, &[1u8; 60]);
    let plan = replace_edits(&p, id, idx, &cell).unwrap().unwrap();
    let mut ops = plan.edits(&cell);
    let header = ops.pop().unwrap();
    let mut wrong = header_without_frag(&p, &header);
    ops.push(keel_page::PageOp::Write {
        offset: NH_CELL_START,
        bytes: &wrong,
    });
    apply(&mut p, &ops);
    assert!(!accounting_holds(&p, id), "an uncounted old cell is caught");
    wrong.fill(0);
    cells.clear();
}

/// The header edit of a moved replace with the fragmentation count left as it was.
fn header_without_frag(p: &[u8], header: &keel_page::PageOp<'_>) -> [u8; 8] {
    let keel_page::PageOp::Write { bytes, .. } = header else {
        panic!("the last edit of a moved replace writes the header");
    };
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&bytes[..4]);
    h[4..].copy_from_slice(&p[NH_FRAG..NH_FRAG + 4]);
    h
}

/// A replace by a cell of another key, or of a slot past the end, is corruption.
#[test]
fn replace_edits_refuse_another_key_and_bad_slots() {
    let id = PageId(2);
    let mut p = leaf(4096);
    assert!(insert(&mut p, id, 0, &leaf_cell_inline(b"a", b"1")).unwrap());
    assert!(replace_edits(&p, id, 0, &leaf_cell_inline(b"b", b"1")).is_err());
    assert!(replace_edits(&p, id, 1, &leaf_cell_inline(b"a", b"1")).is_err());
    assert!(remove_edits(&p, id, 1).is_err());
    // The same cell again changes nothing: no edits at all.
    let same = leaf_cell_inline(b"a", b"1");
    assert!(replace_edits(&p, id, 0, &same)
        .unwrap()
        .unwrap()
        .edits(&same)
        .is_empty());
}

/// A node with cells of random sizes, some removed (fragmentation scattered among live cells).
fn fragmented(id: PageId, seed: u64) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut p = leaf(4096);
    let mut s = seed | 1;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut n = 0u64;
    loop {
        let key = (rnd() % 100_000).to_be_bytes();
        let node = Node::new(&p, id).unwrap();
        let Err(idx) = node.search(&key).unwrap() else {
            continue;
        };
        let v = vec![n as u8; (rnd() % 200) as usize];
        if !insert(&mut p, id, idx, &leaf_cell_inline(&key, &v)).unwrap() {
            break;
        }
        n += 1;
    }
    for _ in 0..n / 3 {
        let len = Node::new(&p, id).unwrap().len();
        remove(&mut p, id, (rnd() % len as u64) as usize).unwrap();
    }
    let cells = Node::new(&p, id).unwrap().cells().unwrap();
    (p, cells)
}

/// Compaction as moves: the node holds the same cells in the same slots, no fragmentation, the
/// cell area exactly the live cells, and the cell asked for now fits the free space; the edits
/// are far fewer bytes than the cells. Overlapping cells are corruption, never moved (broken on
/// purpose).
#[test]
fn compact_edits_keep_every_cell_and_make_room() {
    let id = PageId(3);
    for seed in 1..40u64 {
        let (mut p, cells) = fragmented(id, seed);
        let node = Node::new(&p, id).unwrap();
        let (free, frag) = (node.free_space(), node.frag());
        assert!(frag > 0, "seed {seed}: removes left fragmentation");
        let need = free - SLOT_SIZE + 1; // one byte more than fits now
        let plan = compact_edits(&p, id, Some(need)).unwrap();
        if free + frag < need + SLOT_SIZE {
            assert!(plan.is_none());
            continue;
        }
        let plan = plan.expect("room after compaction");
        let ops = plan.edits();
        let logged: usize = ops
            .iter()
            .map(|o| match o {
                keel_page::PageOp::Write { bytes, .. } => bytes.len() + 4,
                keel_page::PageOp::Move { .. } => 6,
            })
            .sum();
        let live: usize = cells.iter().map(Vec::len).sum();
        apply(&mut p, &ops);
        let after = Node::new(&p, id).unwrap();
        assert_eq!(after.cells().unwrap(), cells, "seed {seed}");
        assert_eq!(after.frag(), 0);
        assert!(accounting_holds(&p, id), "seed {seed}");
        assert!(after.free_space() >= need + SLOT_SIZE);
        assert!(
            logged < live,
            "seed {seed}: {logged} bytes logged for {live} of cells"
        );
        after.check_hints().unwrap();
    }
    // Two slots pointing at overlapping bytes.
    let (mut p, _) = fragmented(id, 7);
    let o = slot_offset(&p, 1);
    wr_u32(&mut p, SLOTS, (o + 1) as u32);
    let need = Node::new(&p, id).unwrap().free_space();
    assert!(compact_edits(&p, id, Some(need)).is_err());
}

/// Truncation keeps the first slots and counts the rest as fragmentation (the accounting
/// holds); to nothing, it also resets the hint prefix (invariant 3).
#[test]
fn truncate_edits_keep_the_first_cells_and_the_accounting() {
    let id = PageId(4);
    let (p0, cells) = fragmented(id, 5);
    for keep in [cells.len(), cells.len() / 2, 1, 0] {
        let mut p = p0.clone();
        apply(&mut p, &truncate_edits(&p0, id, keep).unwrap().edits());
        let n = Node::new(&p, id).unwrap();
        assert_eq!(n.cells().unwrap(), cells[..keep]);
        assert!(accounting_holds(&p, id), "keep {keep}");
        if keep == 0 {
            assert_eq!(n.hint_prefix(), 0);
        }
    }
    assert!(truncate_edits(&p0, id, cells.len() + 1).is_err());
}

/// `touch_free_space` reads only inside the free space, whatever the length asked: an empty
/// node, a full one, a length past the page (a panic on an out-of-range index would show).
#[test]
fn touching_the_free_space_stays_inside_it() {
    let id = PageId(1);
    let mut p = leaf(4096);
    for len in [0usize, 1, 64, 124, 4000, 4096, 1 << 20, usize::MAX] {
        Node::new(&p, id).unwrap().touch_free_space(len);
    }
    let mut i = 0u32;
    while insert(
        &mut p,
        id,
        i as usize,
        &leaf_cell_inline(&i.to_be_bytes(), &[7; 100]),
    )
    .unwrap()
    {
        i += 1;
    }
    assert!(i > 10, "{i} cells");
    for len in [0usize, 1, 64, 124, 4096, usize::MAX] {
        Node::new(&p, id).unwrap().touch_free_space(len);
    }
}
