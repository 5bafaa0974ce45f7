//! Regression: the exact history of issue 11 item 1 (4 KiB pages). A forward scan and a get
//! missed rows after an overwrite; the reverse scan still saw them.

use keel_btree::{BTree, MemPages};
use std::collections::BTreeMap;

/// (transaction, op, key, value length); "del" removes.
pub const HISTORY: &[(u32, &str, &str, usize)] = &[
    (0, "put", "k01796cdefghijklmnopqrstuvwxyzab", 176),
    (0, "put", "k00356stuvwxyzabcdefghijklmnopqrstuvwx", 4974),
    (0, "put", "k01062wxyzabcdefghi", 393),
    (0, "put", "k00604ghijk", 1418),
    (1, "put", "k00899pqrstuvwxyzabcdefghi", 3689),
    (1, "put", "k01361jklmnopqrstuvwx", 32),
    (
        1,
        "put",
        "k01142yzabcdefghijklmnopqrstuvwxyzabcdefghijkl",
        3,
    ),
    (1, "put", "k00484qrstuvwxyzabcdefghijklmnop", 15),
    (1, "put", "k01081pqrstuvwxyzabcdefghijkl", 1628),
    (
        2,
        "put",
        "k01060uvwxyzabcdefghijklmnopqrstuvwxyzabcdefgh",
        811,
    ),
    (2, "put", "k01973xyzabcdefghijklmnopqrstuvwxyzabcdef", 473),
    (2, "put", "k01288opqrstuvwxyzabcdefghijklmnopqrstuvwxy", 63),
    (3, "put", "k00309xyzabcdefghijklmnopqrstuvwxyzab", 4),
    (3, "put", "k01579tuvwxyzabcdefghijklmnopq", 368),
    (
        3,
        "put",
        "k00269jklmnopqrstuvwxyzabcdefghijklmnopqrstu",
        5845,
    ),
    (
        4,
        "put",
        "k00597zabcdefghijklmnopqrstuvwxyzabcdefghijk",
        344,
    ),
    (4, "put", "k00334w", 455),
    (5, "put", "k02355pqr", 446),
    (5, "put", "k01198cdefghijklmnopqrstuvwx", 296),
    (
        5,
        "put",
        "k01388klmnopqrstuvwxyzabcdefghijklmnopqrstuvwx",
        328,
    ),
    (6, "put", "k01120cdefghijk", 856),
    (6, "put", "k01575pqrstuvwxyzabcdefghijklmnopqrstuvwxyz", 16),
    (7, "put", "k01118abcdefghijklmnopqrstuvwxyzabcdefghij", 324),
    (8, "put", "k01320uvwxyzabcdefghi", 188),
    (8, "put", "k01244wxyzabcdefghijkl", 1485),
    (8, "put", "k01121defghijklmnopqrs", 950),
    (9, "put", "k01185pqrstuvwxyzab", 15),
    (9, "put", "k01100ijklmnopqrstuvwxyzabcdefghijklmno", 704),
    (10, "put", "k01104mnopqrstuvwxyzabcdef", 112),
    (11, "put", "k01108qrstuvw", 348),
    (12, "del", "k01120cdefghijk", 0),
    (13, "put", "k01121defghijklmnopqrs", 493),
];

#[test]
fn issue_11_item_1_history_keeps_every_row() {
    let mut pages = MemPages::new(4096);
    let tree = BTree::create(&mut pages).unwrap();
    let mut model = BTreeMap::new();
    for (i, &(_, op, key, len)) in HISTORY.iter().enumerate() {
        let k = key.as_bytes().to_vec();
        if op == "del" {
            assert_eq!(
                tree.remove(&mut pages, &k).unwrap(),
                model.remove(&k),
                "op {i}"
            );
        } else {
            let v: Vec<u8> = (0..len).map(|j| (j * 7 + i) as u8).collect();
            assert_eq!(
                tree.insert(&mut pages, &k, &v).unwrap(),
                model.insert(k, v),
                "op {i}"
            );
        }
        if let Err(e) = tree.check(&pages) {
            panic!("check after op {i}: {e}");
        }
        let fwd: Vec<(Vec<u8>, Vec<u8>)> = tree.range(&pages, ..).map(|r| r.unwrap()).collect();
        let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
        assert_eq!(fwd.len(), want.len(), "forward scan after op {i}");
        assert!(fwd == want, "forward scan contents after op {i}");
        let mut rev: Vec<(Vec<u8>, Vec<u8>)> =
            tree.range(&pages, ..).rev().map(|r| r.unwrap()).collect();
        rev.reverse();
        assert!(rev == want, "reverse scan after op {i}");
        for (k, v) in &model {
            assert_eq!(
                tree.get(&pages, k).unwrap().as_ref(),
                Some(v),
                "get after op {i}"
            );
        }
    }
    assert_eq!(model.len(), 29);
}
