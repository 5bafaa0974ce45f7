//! Random histories against a `BTreeMap`, checked after EVERY transaction by get, forward and
//! reverse full scans, forward and reverse partial scans with random bounds, and `BTree::check`,
//! on 4, 8 and 16 KiB pages.
//!
//! Why the older model test (`model.rs`) missed issue 11 item 1 (a key overwritten in a leaf
//! that held only that key became unfindable): its keys were random bytes or tiny alphabets, so
//! leaves rarely had a hint prefix; its values were mostly < 100 bytes, so leaves rarely held a
//! single cell; and it compared only the op at hand (one get, one range) rather than the whole
//! tree after each step. Here keys share long prefixes (like real keys: `k01121defg...`), key
//! lengths range up to the page's maximum, values from 0 bytes to several pages (inline values
//! up to the inline limit make one-cell leaves common), overwrites grow and shrink values,
//! deletes are followed by re-inserts, and everything is compared after every transaction.

use keel_btree::{BTree, MemPages};
use keel_io::SplitMix64;
use std::collections::BTreeMap;
use std::ops::Bound;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(rng: &mut SplitMix64, max_key: usize, pool: &[Vec<u8>]) -> Vec<u8> {
    // Often an existing key (overwrite / delete / re-insert), else a new one with a shared prefix.
    if !pool.is_empty() && rng.below(3) == 0 {
        return pool[rng.below(pool.len() as u64) as usize].clone();
    }
    // Neighbouring keys share long prefixes (`k01120...`, `k01121...`), as real keys do.
    let mut k = format!("k{:05}", rng.below(600)).into_bytes();
    let tail = match rng.below(20) {
        0 => rng.below(max_key as u64 - k.len() as u64 + 1) as usize,
        1..=4 => 0,
        _ => rng.below(40) as usize,
    };
    let start = rng.below(26) as u8;
    k.extend((0..tail).map(|i| b'a' + ((start as usize + i) % 26) as u8));
    k.truncate(max_key);
    k
}

fn value(rng: &mut SplitMix64, page_size: usize) -> Vec<u8> {
    // Large inline values (a quarter of the page, around the inline limit) make leaves of one
    // or two cells common; overflow chains of up to several pages; empty values.
    let quarter = page_size as u64 / 4;
    let len = match rng.below(20) {
        0 | 1 => 0,
        2 | 3 => rng.below(3 * page_size as u64 + 1) as usize,
        4..=10 => (quarter / 2 + rng.below(quarter)) as usize,
        _ => rng.below(300) as usize,
    };
    let fill = rng.next_u64() as u8;
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

fn bound(rng: &mut SplitMix64, max_key: usize, pool: &[Vec<u8>]) -> Bound<Vec<u8>> {
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng, max_key, pool)),
        _ => Bound::Excluded(key(rng, max_key, pool)),
    }
}

fn as_slices(x: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match x {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn valid(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a < b,
        _ => true,
    }
}

/// Compares the whole tree with the model; returns a description of the first difference.
fn compare(
    tree: &BTree,
    pages: &MemPages,
    model: &Model,
    rng: &mut SplitMix64,
    max_key: usize,
) -> Result<(), String> {
    tree.check(pages).map_err(|e| format!("check: {e}"))?;
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let fwd: Vec<(Vec<u8>, Vec<u8>)> = tree
        .range(pages, ..)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("forward scan: {e}"))?;
    if fwd != want {
        return Err(format!(
            "forward scan: {} rows, model {}",
            fwd.len(),
            want.len()
        ));
    }
    let mut rev: Vec<(Vec<u8>, Vec<u8>)> = tree
        .range(pages, ..)
        .rev()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reverse scan: {e}"))?;
    rev.reverse();
    if rev != want {
        return Err(format!(
            "reverse scan: {} rows, model {}",
            rev.len(),
            want.len()
        ));
    }
    for (k, v) in model {
        match tree.get(pages, k) {
            Ok(Some(got)) if got == *v => {}
            other => {
                return Err(format!(
                    "get {:?}: {:?}",
                    String::from_utf8_lossy(k),
                    other.map(|o| o.map(|v| v.len()))
                ))
            }
        }
    }
    let pool: Vec<Vec<u8>> = model.keys().cloned().collect();
    for _ in 0..4 {
        let (lo, hi) = (bound(rng, max_key, &pool), bound(rng, max_key, &pool));
        if !valid(&lo, &hi) {
            continue;
        }
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .range((lo.clone(), hi.clone()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let (l, h) = (lo.clone(), hi.clone());
        let got: Vec<(Vec<u8>, Vec<u8>)> = tree
            .range(pages, (as_slices(&l), as_slices(&h)))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("partial scan: {e}"))?;
        if got != want {
            return Err(format!(
                "forward scan {lo:?}..{hi:?}: {} rows, model {}",
                got.len(),
                want.len()
            ));
        }
        let mut got: Vec<(Vec<u8>, Vec<u8>)> = tree
            .range(pages, (as_slices(&l), as_slices(&h)))
            .rev()
            .collect::<Result<_, _>>()
            .map_err(|e| format!("partial reverse scan: {e}"))?;
        got.reverse();
        if got != want {
            return Err(format!(
                "reverse scan {lo:?}..{hi:?}: {} rows, model {}",
                got.len(),
                want.len()
            ));
        }
    }
    Ok(())
}

/// One history: `txns` transactions of 1..=`ops` operations each.
fn history(seed: u64, page_size: usize, txns: usize, ops: u64) -> Result<(), String> {
    let mut rng = SplitMix64::new(seed);
    let mut pages = MemPages::new(page_size);
    let tree = BTree::create(&mut pages).map_err(|e| e.to_string())?;
    let max_key = tree.limits().max_key;
    let mut model = Model::new();
    let mut deleted: Vec<Vec<u8>> = Vec::new();
    for t in 0..txns {
        for _ in 0..1 + rng.below(ops) {
            let existing: Vec<&Vec<u8>> = model.keys().collect();
            let pick = |rng: &mut SplitMix64, from: &[&Vec<u8>]| -> Option<Vec<u8>> {
                (!from.is_empty()).then(|| from[rng.below(from.len() as u64) as usize].clone())
            };
            let roll = rng.below(100);
            let del_target = if roll < 25 {
                pick(&mut rng, &existing)
            } else {
                None
            };
            if let Some(k) = del_target {
                let got = tree.remove(&mut pages, &k).map_err(|e| e.to_string())?;
                let want = model.remove(&k);
                if got != want {
                    return Err(format!("txn {t}: remove returned a different old value"));
                }
                deleted.push(k);
                continue;
            }
            let k = if roll < 55 {
                // Overwrite an existing key (value grows or shrinks).
                pick(&mut rng, &existing)
            } else if roll < 65 && !deleted.is_empty() {
                // Re-insert a deleted key.
                Some(deleted[rng.below(deleted.len() as u64) as usize].clone())
            } else {
                None
            };
            let k = match k {
                Some(k) => k,
                None => key(&mut rng, max_key, &[]),
            };
            let v = value(&mut rng, page_size);
            let got = tree.insert(&mut pages, &k, &v).map_err(|e| e.to_string())?;
            let want = model.insert(k, v);
            if got != want {
                return Err(format!(
                    "txn {t}: insert returned old value {:?}, model {:?}",
                    got.map(|v| v.len()),
                    want.map(|v| v.len())
                ));
            }
        }
        compare(&tree, &pages, &model, &mut rng, max_key)
            .map_err(|e| format!("after txn {t}: {e}"))?;
    }
    Ok(())
}

fn run(page_size: usize, histories: u64) {
    let mut failures = Vec::new();
    for h in 0..histories {
        let seed = 0x4b45_454c ^ (page_size as u64) << 20 ^ h;
        if let Err(e) = history(seed, page_size, 60, 12) {
            failures.push(format!("seed {seed:#x}, {page_size}-byte pages: {e}"));
        }
    }
    println!(
        "btree histories, {page_size}-byte pages: {histories} histories of 60 transactions, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn histories_on_4k_pages() {
    run(4096, 40);
}

#[test]
fn histories_on_8k_pages() {
    run(8192, 25);
}

#[test]
fn histories_on_16k_pages() {
    run(16384, 15);
}
