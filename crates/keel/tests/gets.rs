//! Point gets (optimistic, latch-free descents) against a pool far smaller than the table,
//! with the page cleaner and eviction running and a writer committing between read
//! transactions: every get returns a whole, well-formed value of its own key.

use keel::{Config, Durability, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const KEYS: u64 = 6000;

fn key(k: u64) -> [u8; 12] {
    let mut b = *b"key-00000000";
    b[4..].copy_from_slice(format!("{k:08}").as_bytes());
    b
}

/// `k` and generation `g` repeated to 100 bytes (a torn or foreign value breaks the pattern).
fn value(k: u64, g: u64) -> Vec<u8> {
    let unit = format!("{k:08}/{g:06};");
    unit.as_bytes().iter().copied().cycle().take(100).collect()
}

fn well_formed(k: u64, v: &[u8]) -> bool {
    let Some(g) = std::str::from_utf8(&v[9..15])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return false;
    };
    v == value(k, g).as_slice()
}

#[test]
fn gets_under_eviction_and_commits_return_whole_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        page_size: 4096,
        pool_size: 256 << 10, // 64 frames for ~250 pages of table
        log_file_size: 4 << 20,
        durability: Durability::Lazy,
        ..Config::default()
    };
    let store = Store::open(dir.path(), config).unwrap();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        let tx = store.write().unwrap();
        let mut t = tx.table("t").unwrap();
        for &k in chunk {
            t.insert(&key(k), &value(k, 0)).unwrap();
        }
        tx.commit().unwrap();
    }
    let before = store.stats().pool;
    let stop = AtomicBool::new(false);
    let gets = AtomicU64::new(0);
    let commits = AtomicU64::new(0);
    std::thread::scope(|s| {
        for seed in 1..=2u64 {
            let (store, stop, gets) = (&store, &stop, &gets);
            s.spawn(move || {
                let mut x = seed;
                let t0 = Instant::now();
                // Bounded even if the writer dies without setting `stop`.
                while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
                    let r = store.read().unwrap();
                    let t = r.table("t").unwrap();
                    for _ in 0..50 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let k = (x >> 33) % KEYS;
                        let v = t.get(&key(k)).unwrap().expect("every key is present");
                        assert!(
                            well_formed(k, &v),
                            "key {k}: {:?}",
                            String::from_utf8_lossy(&v)
                        );
                        assert_eq!(t.get(&key(KEYS + k)).unwrap(), None);
                        // The borrowed form sees a whole value too.
                        let ok = t.get_with(&key(k), |v| well_formed(k, v)).unwrap();
                        assert_eq!(ok, Some(true), "key {k} (borrowed)");
                        assert_eq!(t.get_with(&key(KEYS + k), |v| v.len()).unwrap(), None);
                        gets.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let (store, stop, commits) = (&store, &stop, &commits);
        s.spawn(move || {
            /// Sets `stop` however the writer ends (a panic included).
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = Stop(stop);
            let t0 = Instant::now();
            let mut g = 0;
            while t0.elapsed() < Duration::from_secs(3) {
                g += 1;
                let tx = store.write().unwrap();
                let mut t = tx.table("t").unwrap();
                // A run of neighbouring keys: a few leaves (a transaction may hold at most
                // 75% of the 64 frames).
                for i in 0..100 {
                    let k = (g * 7919 + i) % KEYS;
                    t.insert(&key(k), &value(k, g)).unwrap();
                }
                tx.commit().unwrap();
                commits.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
    });
    let after = store.stats().pool;
    assert!(gets.load(Ordering::Relaxed) > 1000, "too few gets");
    assert!(commits.load(Ordering::Relaxed) > 10, "too few commits");
    assert!(
        after.evictions + after.cleaner_evictions > before.evictions + before.cleaner_evictions,
        "the pool never evicted: the test did not exercise frame reuse"
    );
    assert!(after.hits > before.hits, "gets count their page hits");
    store.close().unwrap();
}

/// The borrowed get (`get_with`, on both kinds of table and through `ReadableTable`) hands `f`
/// exactly what `get` returns: inline values (short, and longer than the stack buffer),
/// overflow values, absent keys (`f` not called) — and inside a read transaction, the values
/// of its snapshot after later commits changed, removed and added keys.
#[test]
fn get_with_borrows_what_get_returns_at_the_snapshot() {
    use keel::ReadableTable;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        page_size: 4096,
        durability: Durability::Lazy,
        ..Config::default()
    };
    let store = Store::open(dir.path(), config).unwrap();
    let big = |k: u64, g: u64| -> Vec<u8> {
        let unit = format!("{k:08}/{g:06};");
        unit.as_bytes()
            .iter()
            .copied()
            .cycle()
            .take(20_000)
            .collect()
    };
    // Inline values of 100 bytes and of 900 (inline in a 4 KiB page), values in overflow
    // pages, and values longer than `GET_WITH_INLINE` that are still inline under a larger
    // page size are covered by the 16 KiB store below.
    let v = |k: u64, g: u64| -> Vec<u8> {
        match k % 3 {
            0 => value(k, g),
            1 => value(k, g).repeat(9),
            _ => big(k, g),
        }
    };
    {
        let tx = store.write().unwrap();
        let mut t = tx.table("t").unwrap();
        for k in 0..600 {
            t.insert(&key(k), &v(k, 0)).unwrap();
        }
        // Inside the write transaction: its own changes.
        for k in [0, 1, 2, 599] {
            assert_eq!(t.get_with(&key(k), |b| b.to_vec()).unwrap(), Some(v(k, 0)));
        }
        assert_eq!(t.get_with(&key(600), |b| b.len()).unwrap(), None);
        tx.commit().unwrap();
    }
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    let check = |t: &keel::ReadTable<'_>, g: u64| {
        for k in 0..600 {
            let got = t.get_with(&key(k), |b| b.to_vec()).unwrap();
            assert_eq!(got.as_deref(), Some(v(k, g).as_slice()), "key {k}");
            assert_eq!(got, t.get(&key(k)).unwrap());
            let through_trait = ReadableTable::get_with(t, &key(k), |b| b.len()).unwrap();
            assert_eq!(through_trait, Some(v(k, g).len()));
        }
        let mut called = false;
        assert_eq!(t.get_with(&key(600), |_| called = true).unwrap(), None);
        assert!(!called, "f runs only on a value");
    };
    check(&t, 0);
    // Later commits change, remove and add keys: the snapshot still reads generation 0.
    for g in 1..=3 {
        let tx = store.write().unwrap();
        let mut w = tx.table("t").unwrap();
        for k in (0..600).step_by(2) {
            w.insert(&key(k), &v(k, g)).unwrap();
        }
        for k in (1..600).step_by(7) {
            w.remove(&key(k)).unwrap();
        }
        w.insert(&key(600), b"new").unwrap();
        tx.commit().unwrap();
    }
    check(&t, 0);
    drop(r);
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    assert_eq!(
        t.get_with(&key(600), |b| b.to_vec()).unwrap(),
        Some(b"new".to_vec())
    );
    assert_eq!(t.get_with(&key(1), |b| b.len()).unwrap(), None);
    assert_eq!(t.get_with(&key(4), |b| b.to_vec()).unwrap(), Some(v(4, 3)));
    // Odd keys were never rewritten (key 5 holds a value in overflow pages).
    assert_eq!(t.get_with(&key(5), |b| b.to_vec()).unwrap(), Some(v(5, 0)));
    drop(r);
    store.close().unwrap();

    // 16 KiB pages: inline values longer than the stack buffer (`GET_WITH_INLINE`).
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    let long = |k: u64| value(k, 7).repeat(25); // 2,500 bytes, inline in 16 KiB pages
    assert!(long(0).len() > keel::GET_WITH_INLINE);
    let tx = store.write().unwrap();
    let mut t = tx.table("t").unwrap();
    for k in 0..50 {
        t.insert(&key(k), &long(k)).unwrap();
    }
    tx.commit().unwrap();
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    for k in 0..50 {
        assert_eq!(t.get_with(&key(k), |b| b.to_vec()).unwrap(), Some(long(k)));
    }
    drop(r);
    store.close().unwrap();
}
