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
