//! Issue 11 item 1 through the public API: the exact 14 transactions on 4 KiB pages, as separate
//! transactions and as one, checked by get, forward and reverse scans after every transaction and
//! after a reopen.

use keel::{Config, Store};
use std::collections::BTreeMap;

const TXNS: &[&[(&str, &str, usize)]] = &[
    &[
        ("put", "k01796cdefghijklmnopqrstuvwxyzab", 176),
        ("put", "k00356stuvwxyzabcdefghijklmnopqrstuvwx", 4974),
        ("put", "k01062wxyzabcdefghi", 393),
        ("put", "k00604ghijk", 1418),
    ],
    &[
        ("put", "k00899pqrstuvwxyzabcdefghi", 3689),
        ("put", "k01361jklmnopqrstuvwx", 32),
        ("put", "k01142yzabcdefghijklmnopqrstuvwxyzabcdefghijkl", 3),
        ("put", "k00484qrstuvwxyzabcdefghijklmnop", 15),
        ("put", "k01081pqrstuvwxyzabcdefghijkl", 1628),
    ],
    &[
        ("put", "k01060uvwxyzabcdefghijklmnopqrstuvwxyzabcdefgh", 811),
        ("put", "k01973xyzabcdefghijklmnopqrstuvwxyzabcdef", 473),
        ("put", "k01288opqrstuvwxyzabcdefghijklmnopqrstuvwxy", 63),
    ],
    &[
        ("put", "k00309xyzabcdefghijklmnopqrstuvwxyzab", 4),
        ("put", "k01579tuvwxyzabcdefghijklmnopq", 368),
        ("put", "k00269jklmnopqrstuvwxyzabcdefghijklmnopqrstu", 5845),
    ],
    &[
        ("put", "k00597zabcdefghijklmnopqrstuvwxyzabcdefghijk", 344),
        ("put", "k00334w", 455),
    ],
    &[
        ("put", "k02355pqr", 446),
        ("put", "k01198cdefghijklmnopqrstuvwx", 296),
        ("put", "k01388klmnopqrstuvwxyzabcdefghijklmnopqrstuvwx", 328),
    ],
    &[
        ("put", "k01120cdefghijk", 856),
        ("put", "k01575pqrstuvwxyzabcdefghijklmnopqrstuvwxyz", 16),
    ],
    &[("put", "k01118abcdefghijklmnopqrstuvwxyzabcdefghij", 324)],
    &[
        ("put", "k01320uvwxyzabcdefghi", 188),
        ("put", "k01244wxyzabcdefghijkl", 1485),
        ("put", "k01121defghijklmnopqrs", 950),
    ],
    &[
        ("put", "k01185pqrstuvwxyzab", 15),
        ("put", "k01100ijklmnopqrstuvwxyzabcdefghijklmno", 704),
    ],
    &[("put", "k01104mnopqrstuvwxyzabcdef", 112)],
    &[("put", "k01108qrstuvw", 348)],
    &[("del", "k01120cdefghijk", 0)],
    &[("put", "k01121defghijklmnopqrs", 493)],
];

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn verify(store: &Store, model: &Model, when: &str) {
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    let fwd: Vec<(Vec<u8>, Vec<u8>)> = t.range(..).unwrap().map(|x| x.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(fwd.len(), want.len(), "forward scan row count {when}");
    assert!(fwd == want, "forward scan contents {when}");
    let mut rev: Vec<(Vec<u8>, Vec<u8>)> = t.range(..).unwrap().rev().map(|x| x.unwrap()).collect();
    rev.reverse();
    assert!(rev == want, "reverse scan {when}");
    for (k, v) in model {
        assert_eq!(t.get(k).unwrap().as_ref(), Some(v), "get {when}");
    }
}

fn run(one_txn: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        page_size: 4096,
        ..Config::default()
    };
    let store = Store::open(dir.path(), cfg.clone()).unwrap();
    let mut model = Model::new();
    let mut tx = Some(store.write().unwrap());
    for (i, ops) in TXNS.iter().enumerate() {
        {
            let w = tx.as_ref().unwrap();
            let mut t = w.table("t").unwrap();
            for (j, &(op, key, len)) in ops.iter().enumerate() {
                let k = key.as_bytes().to_vec();
                if op == "del" {
                    assert_eq!(t.remove(&k).unwrap(), model.remove(&k), "T{i} op {j}");
                } else {
                    let v: Vec<u8> = (0..len).map(|x| (x * 31 + i) as u8).collect();
                    assert_eq!(t.insert(&k, &v).unwrap(), model.insert(k, v), "T{i} op {j}");
                }
            }
        }
        if !one_txn {
            tx.take().unwrap().commit().unwrap();
            verify(&store, &model, &format!("after T{i}"));
            tx = Some(store.write().unwrap());
        }
    }
    tx.take().unwrap().commit().unwrap();
    assert_eq!(model.len(), 29);
    verify(&store, &model, "at the end");
    drop(tx);
    store.close().unwrap();
    let store = Store::open(dir.path(), cfg).unwrap();
    verify(&store, &model, "after reopening");
}

#[test]
fn issue_11_item_1_as_fourteen_transactions() {
    run(false);
}

#[test]
fn issue_11_item_1_as_one_transaction() {
    run(true);
}
