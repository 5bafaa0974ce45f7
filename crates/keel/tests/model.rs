//! Model test: the store against `BTreeMap`s (proptest): random inserts, removes, gets and
//! ranges over several tables, commits, aborts and clean or unclean reopens, on SimFs.

#[path = "common/bounds.rs"]
mod bounds;

use bounds::holds_keys;
use keel::{Config, Error, Store};
use keel_io::{SimConfig, SimFs};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, Vec<u8>, Vec<u8>),
    Remove(u8, Vec<u8>),
    Get(u8, Vec<u8>),
    Range(u8, Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
    /// `drop_table`, then (when the bool is set) the same name opened again at once: a new,
    /// empty table in the same transaction.
    Drop(u8, bool),
    /// `len`, `is_empty`, `existing_table` and `list_tables` inside the transaction.
    Count(u8),
    /// A cursor, forward rows and backward rows of the table, each one row in, then an insert
    /// and a remove through another handle, then the scans finished: each sees the rows past
    /// the one it returned as they are after the writes (a scan that had ended stays ended).
    ScanAround(u8, Vec<u8>, Vec<u8>, Vec<u8>),
    /// An insert of a key longer than the page size allows (by the number), and a table of a
    /// name as long: refused with `KeyTooLarge` and `TableNameTooLong`, nothing changed, and
    /// the transaction goes on; the key's removal removes nothing.
    TooLong(u8, usize),
    /// `add_i64` of the delta to the row. Over a value that is not 8 bytes the exclusive
    /// writer refuses it at once (nothing changed), and so does a concurrent transaction over
    /// a row it wrote itself; over a committed row a concurrent transaction defers it: the row
    /// then reads as the error, a scan returns the rows before it, the error, and the end (and
    /// stays ended), and the commit fails with nothing committed.
    Add(u8, Vec<u8>, i64),
}

#[derive(Debug, Clone)]
enum Step {
    /// The operations, whether to commit, and whether in a concurrent transaction
    /// (`write_concurrent`) instead of the exclusive writer: the same operations must give the
    /// same answers in both.
    Txn(Vec<Op>, bool, bool),
    ReopenClean,
    ReopenAfterCrash,
    Checkpoint,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Short keys that collide, and real-looking keys whose neighbours share long prefixes
    // (`k00112defg...`): those give nodes a hint prefix, which issue 11 item 1 needed.
    prop_oneof![
        proptest::collection::vec(b'a'..b'e', 1..4),
        (0u16..400).prop_map(|n| n.to_be_bytes().to_vec()),
        (0u16..120, 0usize..26).prop_map(|(n, tail)| {
            format!("k{n:05}{}", &"abcdefghijklmnopqrstuvwxyz"[..tail]).into_bytes()
        }),
        // The edges of byte order: the empty key, keys that are prefixes of each other
        // followed by 0x00 or 0xFF, keys of 0xFF bytes only.
        prop::sample::select(EDGE_KEYS.to_vec()).prop_map(|k| k.to_vec()),
        // Long keys (up to the longest a 4 KiB page allows) that differ only at the end:
        // separators that fill a node, and hint prefixes as long as the key.
        (0u8..6, 0usize..4).prop_map(|(last, short)| {
            let mut k = vec![b'L'; keel::max_key_len(4096) - short];
            if let Some(b) = k.last_mut() {
                *b = last;
            }
            k
        }),
    ]
}

/// Keys at the edges of byte order.
const EDGE_KEYS: [&[u8]; 10] = [
    b"",
    b"\0",
    b"\0\0",
    b"a",
    b"a\0",
    b"a\xff",
    b"a\xff\xff",
    b"ab",
    b"\xff",
    b"\xff\xff\xff",
];

fn value() -> impl Strategy<Value = Vec<u8>> {
    // Small values, values near a quarter page (leaves of one or two cells), values of
    // several pages (overflow chains), and lengths at the layout's edges.
    prop_oneof![
        5 => proptest::collection::vec(any::<u8>(), 0..64),
        3 => proptest::collection::vec(any::<u8>(), 600..1000),
        1 => proptest::collection::vec(any::<u8>(), 1000..12000),
        2 => (prop::sample::select(edge_value_lens()), any::<u8>())
            .prop_map(|(n, b)| (0..n).map(|i| b.wrapping_add(i as u8)).collect()),
    ]
}

/// Value lengths at the edges of the page layout, for each page size the test runs: the
/// longest value stored inline next to a key of 0–8 bytes and one byte more (the first in an
/// overflow chain), and chains of one to three overflow pages exactly full, one byte short and
/// one byte over.
fn edge_value_lens() -> Vec<usize> {
    let mut v = Vec::new();
    for ps in [4096, 8192, 16384] {
        let l = keel_btree::Limits::new(ps);
        for k in 0..=8 {
            v.extend([l.max_inline_value(k), l.max_inline_value(k) + 1]);
        }
        for pages in 1..=3 {
            let full = pages * l.overflow_capacity();
            v.extend([full - 1, full, full + 1]);
        }
    }
    v.sort_unstable();
    v.dedup();
    v
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
        5 => (0u8..3, key(), value()).prop_map(|(t, k, v)| Op::Insert(t, k, v)),
        2 => (0u8..3, key()).prop_map(|(t, k)| Op::Remove(t, k)),
        2 => (0u8..3, key()).prop_map(|(t, k)| Op::Get(t, k)),
        1 => (0u8..3, bound(), bound(), any::<bool>()).prop_map(|(t, a, b, r)| Op::Range(t, a, b, r)),
        1 => (0u8..3, any::<bool>()).prop_map(|(t, again)| Op::Drop(t, again)),
        1 => (0u8..3).prop_map(Op::Count),
        1 => (0u8..3, key(), value(), key()).prop_map(|(t, k, v, r)| Op::ScanAround(t, k, v, r)),
        1 => (0u8..3, 1usize..40).prop_map(|(t, over)| Op::TooLong(t, over)),
        1 => (0u8..3, key(), any::<i64>()).prop_map(|(t, k, d)| Op::Add(t, k, d)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (proptest::collection::vec(op(), 1..12), prop::bool::weighted(0.8), any::<bool>())
            .prop_map(|(o, c, concurrent)| Step::Txn(o, c, concurrent)),
        1 => Just(Step::ReopenClean),
        1 => Just(Step::ReopenAfterCrash),
        1 => Just(Step::Checkpoint),
    ]
}

type Tables = BTreeMap<u8, BTreeMap<Vec<u8>, Vec<u8>>>;

/// The store's configuration: pages of `page_size` bytes; with `inline` maintenance (no
/// cleaner or checkpointer thread: the case runs the same every time, which proptest's
/// shrinking needs to be sure of a smaller failing case) or the threads and a checkpoint every
/// 5 ms.
fn cfg(page_size: usize, inline: bool) -> Config {
    Config {
        page_size,
        pool_size: 48 * page_size,
        log_file_size: 64 * page_size as u64,
        checkpoint_interval: Duration::from_millis(5),
        inline_maintenance: inline,
        doublewrite_batch: 8,
        ..Config::default()
    }
}

/// The name of table `t`: the empty name, one of the longest a 4 KiB page allows, and one
/// with a NUL and a non-ASCII character (names are catalog keys, compared as bytes).
fn tname(t: u8) -> String {
    match t {
        0 => String::new(),
        1 => "n".repeat(keel::max_key_len(4096)),
        _ => format!("t\0ü{t}"),
    }
}

/// The tables' names in the order `list_tables` gives: byte order.
fn names(model: &Tables) -> Vec<String> {
    let mut v: Vec<String> = model.keys().map(|t| tname(*t)).collect();
    v.sort();
    v
}

fn check_all(store: &Store, model: &Tables) -> Result<(), TestCaseError> {
    // Every tree sound and every page of the file accounted for (before the read transaction:
    // the check takes the store's read lock itself).
    let rep = store.check().unwrap();
    prop_assert!(rep.is_ok(), "store check: {:?}", rep.problems);
    let r = store.read().unwrap();
    prop_assert_eq!(r.list_tables().unwrap(), names(model));
    for t in 0u8..3 {
        let name = tname(t);
        let want = model.get(&t).cloned().unwrap_or_default();
        let got: BTreeMap<Vec<u8>, Vec<u8>> = match r.table(&name) {
            Ok(tab) => {
                prop_assert!(
                    model.contains_key(&t),
                    "table {} exists but was dropped",
                    name
                );
                prop_assert_eq!(tab.len().unwrap(), want.len() as u64, "table {} len", name);
                prop_assert_eq!(tab.is_empty().unwrap(), want.is_empty());
                tab.range(..).unwrap().map(|x| x.unwrap()).collect()
            }
            Err(Error::TableNotFound(_)) => {
                prop_assert!(!model.contains_key(&t), "table {} is missing", name);
                BTreeMap::new()
            }
            Err(e) => panic!("{e}"),
        };
        // Forward and reverse scans and a get of every key, after every step: a tree whose
        // search disagrees with its slot order (issue 11 item 1) shows in one of them.
        if let Ok(tab) = r.table(&name) {
            let mut rev: Vec<(Vec<u8>, Vec<u8>)> =
                tab.range(..).unwrap().rev().map(|x| x.unwrap()).collect();
            rev.reverse();
            let fwd: Vec<(Vec<u8>, Vec<u8>)> = want.clone().into_iter().collect();
            prop_assert!(rev == fwd, "table {} reverse scan", name);
            let mut c = tab.cursor(..).unwrap();
            let mut by_cursor = Vec::new();
            while let Some((k, v)) = c.next().unwrap() {
                by_cursor.push((k.to_vec(), v.to_vec()));
            }
            prop_assert!(by_cursor == fwd, "table {} cursor scan", name);
            for (k, v) in &want {
                let got_v = tab.get(k).unwrap();
                prop_assert_eq!(got_v.as_ref(), Some(v), "table {} get", name);
            }
        }
        prop_assert_eq!(got, want, "table {}", name);
    }
    Ok(())
}

proptest! {
    // 128 cases; `PROPTEST_CASES` sets another number (an explicit count here would ignore it).
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128)
    ))]

    #[test]
    fn store_matches_btreemaps(
        steps in proptest::collection::vec(step(), 1..40),
        seed in any::<u64>(),
        ps in prop_oneof![Just(4096usize), Just(8192), Just(16384)],
        inline in any::<bool>(),
    ) {
        let dir = Path::new("/db");
        let mut fs = SimFs::new(SimConfig::seeded(seed));
        let mut store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg(ps, inline)).unwrap();
        let mut model: Tables = BTreeMap::new();
        for s in steps {
            match s {
                Step::Txn(ops, commit, concurrent) => {
                    let mut tx = if concurrent {
                        store.write_concurrent().unwrap()
                    } else {
                        store.write().unwrap()
                    };
                    let mut work = model.clone();
                    // Rows the transaction wrote (a concurrent one adds to those at once).
                    let mut own: BTreeSet<(u8, Vec<u8>)> = BTreeSet::new();
                    // A concurrent transaction's deferred addition that cannot apply: its
                    // commit must fail.
                    let mut doomed = false;
                    // An operation refused for the transaction's size (the transaction grew
                    // past the pages the pool lets one hold): the transaction stops there (`ok!`
                    // is used only outside inner loops, so its `break` leaves the operations).
                    let mut too_large = None;
                    macro_rules! ok {
                        ($e:expr) => {
                            match $e {
                                Ok(v) => v,
                                Err(e) if e.is_too_large() => {
                                    too_large = Some(e);
                                    break;
                                }
                                Err(e) => panic!("{e}"),
                            }
                        };
                    }
                    for o in ops {
                        match o {
                            Op::Insert(t, k, v) => {
                                let mut tab = ok!(tx.table(&tname(t)));
                                let m = work.entry(t).or_default();
                                own.insert((t, k.clone()));
                                prop_assert_eq!(ok!(tab.insert(&k, &v)), m.insert(k, v));
                            }
                            Op::Remove(t, k) => {
                                let mut tab = ok!(tx.table(&tname(t)));
                                let m = work.entry(t).or_default();
                                let had = m.remove(&k);
                                if had.is_some() {
                                    own.insert((t, k.clone()));
                                }
                                prop_assert_eq!(ok!(tab.remove(&k)), had);
                            }
                            Op::Add(t, k, delta) => {
                                let mut tab = ok!(tx.table(&tname(t)));
                                let m = work.entry(t).or_default();
                                let old = match m.get(&k) {
                                    None => Some(0),
                                    Some(v) => <[u8; 8]>::try_from(v.as_slice()).ok().map(i64::from_le_bytes),
                                };
                                let got = tab.add_i64(&k, delta);
                                match old {
                                    Some(n) => {
                                        prop_assert!(got.is_ok(), "add to {:?}: {:?}", m.get(&k), got);
                                        m.insert(k, n.wrapping_add(delta).to_le_bytes().to_vec());
                                    }
                                    None if !concurrent || own.contains(&(t, k.clone())) => {
                                        prop_assert!(matches!(got, Err(Error::NotAnInteger { .. })), "add to {:?}: {:?}", m.get(&k), got);
                                    }
                                    None => {
                                        prop_assert!(got.is_ok(), "a concurrent add is deferred: {:?}", got);
                                        let g = tab.get(&k);
 prop_assert!(matches!(g, Err(Error::NotAnInteger { .. })), "get after a deferred add that cannot apply: {:?}", g);
                                        let before = |rev: bool| -> Vec<(Vec<u8>, Vec<u8>)> {
                                            let it = m.iter().filter(|(x, _)| if rev { **x > k } else { **x < k });
                                            let it = it.map(|(x, v)| (x.clone(), v.clone()));
                                            if rev { it.rev().collect() } else { it.collect() }
                                        };
                                        for rev in [false, true] {
                                            let mut rows = tab.range(..).unwrap();
                                            let mut seen = Vec::new();
                                            let err = loop {
                                                match if rev { rows.next_back() } else { rows.next() } {
                                                    Some(Ok(row)) => seen.push(row),
                                                    Some(Err(e)) => break Some(e),
                                                    None => break None,
                                                }
                                            };
                                            prop_assert_eq!(seen, before(rev), "rows before the failed add (rev {})", rev);
                                            prop_assert!(matches!(err, Some(Error::NotAnInteger { .. })), "{:?}", err);
                                            prop_assert!(rows.next().is_none() && rows.next_back().is_none(), "a scan stays ended after its error");
                                        }
                                        let mut c = tab.cursor(..).unwrap();
                                        let mut seen = Vec::new();
                                        let err = loop {
                                            match c.next() {
                                                Ok(Some((x, v))) => seen.push((x.to_vec(), v.to_vec())),
                                                Ok(None) => break None,
                                                Err(e) => break Some(e),
                                            }
                                        };
                                        prop_assert_eq!(seen, before(false), "cursor rows before the failed add");
                                        prop_assert!(matches!(err, Some(Error::NotAnInteger { .. })), "{:?}", err);
                                        prop_assert!(c.next().unwrap().is_none(), "a cursor stays ended after its error");
                                        doomed = true;
                                        break;
                                    }
                                }
                            }
                            Op::Get(t, k) => {
                                let tab = ok!(tx.table(&tname(t)));
                                let m = work.entry(t).or_default();
                                prop_assert_eq!(tab.get(&k).unwrap(), m.get(&k).cloned());
                            }
                            Op::Range(t, lo, hi, rev) => {
                                let tab = ok!(tx.table(&tname(t)));
                                let m = work.entry(t).or_default();
                                let r = (lo.as_ref().map(|k| k.as_slice()), hi.as_ref().map(|k| k.as_slice()));
                                let rows = tab.range(r).unwrap();
                                let got: Vec<(Vec<u8>, Vec<u8>)> = if rev {
                                    rows.rev().map(|x| x.unwrap()).collect()
                                } else {
                                    rows.map(|x| x.unwrap()).collect()
                                };
                                let want: Vec<(Vec<u8>, Vec<u8>)> = if holds_keys(&lo, &hi) {
                                    let it = m.range::<Vec<u8>, _>((lo.clone(), hi.clone())).map(|(k, v)| (k.clone(), v.clone()));
                                    if rev { it.rev().collect() } else { it.collect() }
                                } else {
                                    Vec::new()
                                };
                                prop_assert_eq!(&got, &want);
                                if !rev {
                                    // The borrowed-row cursor, inside the write transaction.
                                    let mut c = tab.cursor(r).unwrap();
                                    let mut by_cursor = Vec::new();
                                    while let Some((k, v)) = c.next().unwrap() {
                                        by_cursor.push((k.to_vec(), v.to_vec()));
                                    }
                                    prop_assert_eq!(by_cursor, want);
                                }
                            }
                            Op::Drop(t, again) => {
                                let name = tname(t);
                                prop_assert_eq!(ok!(tx.drop_table(&name)), work.remove(&t).is_some());
                                prop_assert!(matches!(tx.existing_table(&name), Err(Error::TableNotFound(_))));
                                if again {
                                    let tab = ok!(tx.table(&name));
                                    prop_assert_eq!(tab.len().unwrap(), 0);
                                    work.insert(t, BTreeMap::new());
                                }
                            }
                            Op::ScanAround(t, k, v, rm) => {
                                let name = tname(t);
                                let tab = ok!(tx.table(&name));
                                let mut other = ok!(tx.table(&name));
                                let m = work.entry(t).or_default();
                                let mut c = tab.cursor(..).unwrap();
                                let mut fwd = tab.range(..).unwrap();
                                let mut back = tab.range(..).unwrap();
                                let first_c = c.next().unwrap().map(|(k, _)| k.to_vec());
                                let first_f = fwd.next().map(|r| r.unwrap().0);
                                let first_b = back.next_back().map(|r| r.unwrap().0);
                                prop_assert_eq!(&first_c, &m.keys().next().cloned());
                                prop_assert_eq!(&first_f, &first_c);
                                prop_assert_eq!(&first_b, &m.keys().next_back().cloned());
                                own.insert((t, k.clone()));
                                prop_assert_eq!(ok!(other.insert(&k, &v)), m.insert(k, v));
                                let had = m.remove(&rm);
                                if had.is_some() {
                                    own.insert((t, rm.clone()));
                                }
                                prop_assert_eq!(ok!(other.remove(&rm)), had);
                                // A scan that ended stays ended (fused).
                                let after = |first: &Option<Vec<u8>>| -> Vec<(Vec<u8>, Vec<u8>)> {
                                    m.iter()
                                        .filter(|(k, _)| first.as_ref().is_some_and(|f| *k > f))
                                        .map(|(k, v)| (k.clone(), v.clone()))
                                        .collect()
                                };
                                let mut rest_c = Vec::new();
                                while let Some((k, v)) = c.next().unwrap() {
                                    rest_c.push((k.to_vec(), v.to_vec()));
                                }
                                prop_assert_eq!(rest_c, after(&first_c), "cursor after writes");
                                let rest_f: Vec<_> = fwd.map(|r| r.unwrap()).collect();
                                prop_assert_eq!(rest_f, after(&first_f), "rows after writes");
                                let rest_b: Vec<_> = back.rev().map(|r| r.unwrap()).collect();
                                let want_b: Vec<(Vec<u8>, Vec<u8>)> = m
                                    .iter()
                                    .rev()
                                    .filter(|(k, _)| first_b.as_ref().is_some_and(|f| *k < f))
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect();
                                prop_assert_eq!(rest_b, want_b, "rows backward after writes");
                            }
                            Op::TooLong(t, over) => {
                                let mut tab = ok!(tx.table(&tname(t)));
                                work.entry(t).or_default();
                                let max = keel::max_key_len(ps);
                                let k = vec![b'L'; max + over];
                                let got = tab.insert(&k, b"v");
                                prop_assert!(
                                    matches!(got, Err(Error::KeyTooLarge { len, max: m }) if len == max + over && m == max),
                                    "a key of {} bytes: {:?}", max + over, got
                                );
                                // Its removal removes nothing (no row can have it), in
                                // both kinds of transaction.
                                let got = tab.remove(&k);
                                prop_assert!(matches!(got, Ok(None)), "remove of a key of {} bytes: {:?}", max + over, got);
                                // A table name as long: refused before anything is done.
                                let long = "n".repeat(max + over);
                                let got = tx.table(&long).map(|_| ());
                                prop_assert!(
                                    matches!(got, Err(Error::TableNameTooLong { len, max: m }) if len == max + over && m == max),
                                    "a table name of {} bytes: {:?}", max + over, got
                                );
                                prop_assert!(matches!(tx.existing_table(&long), Err(Error::TableNotFound(_))));
                                // A value whose overflow pages alone the pool cannot give one
                                // transaction (48 frames, 36 for a transaction): refused before
                                // anything is done, the transaction goes on.
                                let l = keel_btree::Limits::new(ps);
                                let big = vec![b'v'; 36 * l.overflow_capacity() + over];
                                let got = tab.insert(b"big", &big);
                                prop_assert!(
                                    matches!(got, Err(Error::ValueTooLargeForPool { len, .. }) if len == big.len()),
                                    "a value of {} bytes: {:?}", big.len(), got
                                );
                            }
                            Op::Count(t) => {
                                prop_assert_eq!(tx.list_tables().unwrap(), names(&work));
                                match (tx.existing_table(&tname(t)), work.get(&t)) {
                                    (Ok(tab), Some(m)) => {
                                        prop_assert_eq!(tab.len().unwrap(), m.len() as u64);
                                        prop_assert_eq!(tab.is_empty().unwrap(), m.is_empty());
                                    }
                                    (Err(Error::TableNotFound(_)), None) => {}
                                    (got, want) => {
                                        prop_assert!(false, "existing_table t{}: {:?} vs model {:?}", t, got.map(|_| ()), want.map(|m| m.len()));
                                    }
                                }
                            }
                        }
                    }
                    if doomed {
                        let c = tx.commit();
                        prop_assert!(matches!(c, Err(Error::NotAnInteger { .. })), "commit after a deferred add that cannot apply: {:?}", c);
                    } else if let Some(e) = too_large {
                        // Failed part-way (it had changed pages): it can only be rolled back,
                        // and nothing of it is committed; refused before any change: it goes on
                        // and commits what it did before (design invariant 12).
                        prop_assert!(!e.is_corruption() && !e.is_poisoned(), "{}", e);
                        match tx.commit() {
                            Ok(()) => model = work,
                            Err(c) => prop_assert!(c.is_txn_failed(), "after {}: commit {}", e, c),
                        }
                    } else if commit {
                        match tx.commit() {
                            // Tables created by the transaction exist from now on, even if empty.
                            Ok(()) => model = work,
                            // Refused for its size at commit (nothing committed): a
                            // transaction whose redo the log cannot hold, or a concurrent one
                            // whose writes, which take their pages at commit, need more than the
                            // pool gives one transaction.
                            Err(e) if e.is_too_large() => {}
                            Err(e) => panic!("commit: {e}"),
                        }
                    } else {
                        tx.abort();
                    }
                }
                Step::Checkpoint => {
                    store.checkpoint().unwrap();
                }
                Step::ReopenClean => {
                    store.close().unwrap();
                    store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg(ps, inline)).unwrap();
                }
                Step::ReopenAfterCrash => {
                    // Every commit was acknowledged under Durability::Sync: all must survive.
                    let post = fs.crash();
                    drop(store);
                    fs = post;
                    store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg(ps, inline)).unwrap();
                }
            }
            check_all(&store, &model)?;
        }
    }
}
