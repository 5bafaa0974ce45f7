//! The workload of the real-file-system crash tests (`fs_shutdown.rs`, `power_loss.rs`): writers
//! committing transactions of a few inserts, updates and removes on keys of their own, each
//! also adding 1 to its counter row, so that after a crash the counters name the commit every
//! writer recovered to and [`model`] rebuilds the whole table from them.
//!
//! Invariant: a transaction's writes are a function of the seed, the writer and its number
//! alone ([`writes`]); writers never share a key, so the table is the union of their models
//! whatever the interleaving, and a rolled-back transaction writes values the model never holds.

// Each test binary uses a part of it.
#![allow(dead_code)]

use super::model::Model;
use super::rng::Rng;
use keel::Store;

/// The table every writer writes.
pub const TABLE: &str = "t";

/// The row writer `w`'s transactions add 1 to (`add_i64`).
pub fn counter(w: usize) -> Vec<u8> {
    format!("~counter{w}").into_bytes()
}

/// Transaction `n` of writer `w`: its writes (`None` removes), a function of the seed, `w` and
/// `n` alone, so that the checker rebuilds the model the writers committed. Writers have keys of
/// their own (`w{w}k..`), so the table is the union of their models whatever the interleaving.
pub fn writes(seed: u64, w: usize, n: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut r = Rng(seed ^ n.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (w as u64) << 56);
    let count = 1 + r.below(8);
    (0..count)
        .map(|i| {
            let key = format!("w{w}k{:04}", r.below(1_000)).into_bytes();
            if r.below(8) == 0 {
                (key, None)
            } else {
                let len = 8 + r.below(400) as usize;
                let mut v = format!("{w}:{n}:{i}:").into_bytes();
                v.resize(len, b'a' + (n % 26) as u8);
                (key, Some(v))
            }
        })
        .collect()
}

/// The table after each writer `w` committed its transactions `1..=cs[w]`.
pub fn model(seed: u64, cs: &[u64]) -> Model {
    let mut m = Model::new();
    for (w, &c) in cs.iter().enumerate() {
        for n in 1..=c {
            for (k, v) in writes(seed, w, n) {
                match v {
                    Some(v) => m.insert(k, v),
                    None => m.remove(&k),
                };
            }
        }
        if c > 0 {
            m.insert(counter(w), (c as i64).to_le_bytes().to_vec());
        }
    }
    m
}

/// The commit each writer's counter in `rows` names (0 without a counter row).
///
/// # Errors
/// A counter that is not an 8-byte integer.
pub fn counters(rows: &Model, writers: usize) -> Result<Vec<u64>, String> {
    (0..writers)
        .map(|w| match rows.get(&counter(w)) {
            None => Ok(0),
            Some(v) => <[u8; 8]>::try_from(v.as_slice())
                .map(|b| i64::from_le_bytes(b) as u64)
                .map_err(|_| format!("counter {w} holds {v:?}")),
        })
        .collect()
}

/// Where `rows` differs from `want`: up to ten keys, for a failure's message.
pub fn diff(rows: &Model, want: &Model) -> Vec<String> {
    want.iter()
        .filter(|(k, v)| rows.get(*k) != Some(*v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .chain(
            rows.keys()
                .filter(|k| !want.contains_key(*k))
                .map(|k| format!("extra {}", String::from_utf8_lossy(k))),
        )
        .take(10)
        .collect()
}

/// A write transaction of the wanted kind (exclusive, or concurrent).
pub fn begin(store: &Store, concurrent: bool) -> keel::Result<keel::WriteTxn<'_>> {
    if concurrent {
        store.write_concurrent()
    } else {
        store.write()
    }
}

/// Writer `w`'s transaction `n`, rolled back first a sixth of the time (a transaction that writes
/// over the writer's keys and its counter, values the model never holds: nothing of it may
/// show, in memory or after a crash), then committed. `Ok(false)`: a conflict (run it again).
///
/// # Errors
/// The commit's (or an operation's) error; a failed rollback only prints.
pub fn commit(store: &Store, seed: u64, concurrent: bool, w: usize, n: u64) -> keel::Result<bool> {
    if Rng(seed ^ n.wrapping_mul(0x9e37_79b9) ^ (w as u64) << 48).below(6) == 0 {
        let rolled_back = (|| -> keel::Result<()> {
            let tx = begin(store, concurrent)?;
            let mut t = tx.table(TABLE)?;
            for (k, _) in writes(seed, w, n + 1_000_000) {
                t.insert(&k, b"rolled back")?;
            }
            t.add_i64(&counter(w), 1_000)?;
            drop(t);
            tx.abort();
            Ok(())
        })();
        if let Err(e) = rolled_back {
            eprintln!("writer {w} rollback before {n}: {e}");
        }
    }
    let result = (|| -> keel::Result<()> {
        let tx = begin(store, concurrent)?;
        {
            let mut t = tx.table(TABLE)?;
            for (k, v) in writes(seed, w, n) {
                match v {
                    Some(v) => {
                        t.insert(&k, &v)?;
                    }
                    None => {
                        t.remove(&k)?;
                    }
                }
            }
            t.add_i64(&counter(w), 1)?;
        }
        tx.commit()
    })();
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}
