//! The embedding API end to end on real files.

use keel::{Config, Durability, Error, Store};
use std::collections::BTreeMap;

fn small() -> Config {
    Config {
        page_size: 4096,
        pool_size: 1 << 20,
        log_file_size: 1 << 20,
        ..Config::default()
    }
}

#[test]
fn commit_read_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), small()).unwrap();
        assert!(store.recovery().created);
        let tx = store.write().unwrap();
        let mut t = tx.table("orders").unwrap();
        assert_eq!(t.insert(b"k1", b"v1").unwrap(), None);
        assert_eq!(t.insert(b"k2", b"v2").unwrap(), None);
        assert_eq!(t.insert(b"k1", b"v1b").unwrap(), Some(b"v1".to_vec()));
        assert_eq!(t.get(b"k1").unwrap(), Some(b"v1b".to_vec()));
        tx.commit().unwrap();
        let r = store.read().unwrap();
        let t = r.table("orders").unwrap();
        assert_eq!(t.get(b"k2").unwrap(), Some(b"v2".to_vec()));
        let rows: Vec<_> = t.range(..).unwrap().map(|r| r.unwrap().0).collect();
        assert_eq!(rows, vec![b"k1".to_vec(), b"k2".to_vec()]);
        let rev: Vec<_> = t.range(..).unwrap().rev().map(|r| r.unwrap().0).collect();
        assert_eq!(rev, vec![b"k2".to_vec(), b"k1".to_vec()]);
        assert!(matches!(r.table("nope"), Err(Error::TableNotFound(_))));
    }
    // Dropped without close: reopen recovers from the log.
    let store = Store::open(dir.path(), small()).unwrap();
    assert!(!store.recovery().created);
    let r = store.read().unwrap();
    assert_eq!(
        r.table("orders").unwrap().get(b"k1").unwrap(),
        Some(b"v1b".to_vec())
    );
}

#[test]
fn abort_and_drop_roll_back_everything() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small()).unwrap();
    let tx = store.write().unwrap();
    tx.table("t").unwrap().insert(b"a", b"1").unwrap();
    tx.commit().unwrap();

    let tx = store.write().unwrap();
    let mut t = tx.table("t").unwrap();
    t.insert(b"a", b"changed").unwrap();
    t.insert(b"b", b"new").unwrap();
    tx.table("created_then_aborted")
        .unwrap()
        .insert(b"x", b"y")
        .unwrap();
    tx.abort();

    {
        let tx = store.write().unwrap();
        for i in 0..500u32 {
            tx.table("t")
                .unwrap()
                .insert(&i.to_be_bytes(), &[7u8; 300])
                .unwrap();
        }
        // dropped: rolled back
    }
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    assert_eq!(t.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(t.get(b"b").unwrap(), None);
    assert_eq!(t.range(..).unwrap().count(), 1);
    assert!(matches!(
        r.table("created_then_aborted"),
        Err(Error::TableNotFound(_))
    ));
    // One explicit abort, one dropped transaction.
    assert_eq!(store.stats().aborts, 2);
    drop(r);
    // A commit counts no abort.
    let tx = store.write().unwrap();
    tx.table("t").unwrap().insert(b"c", b"3").unwrap();
    tx.commit().unwrap();
    assert_eq!(store.stats().aborts, 2);
}

#[test]
fn a_transaction_larger_than_the_pool_fails_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        Config {
            pool_size: 64 * 4096,
            ..small()
        },
    )
    .unwrap();
    let tx = store.write().unwrap();
    let mut t = tx.table("t").unwrap();
    let mut failed = None;
    for i in 0..10_000u32 {
        if let Err(e) = t.insert(&i.to_be_bytes(), &[1u8; 1000]) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("a transaction of ~10 MB cannot fit a 256 KiB pool");
    assert!(
        e.to_string().contains("pool") || e.to_string().contains("transaction"),
        "{e}"
    );

    drop(tx);
    let tx = store.write().unwrap();
    tx.table("t").unwrap().insert(b"after", b"ok").unwrap();
    tx.commit().unwrap();
    let r = store.read().unwrap();
    assert_eq!(r.table("t").unwrap().range(..).unwrap().count(), 1);
}

#[test]
fn large_values_deep_trees_and_a_pool_smaller_than_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        pool_size: 256 * 4096,
        ..small()
    };
    let mut model = BTreeMap::new();
    {
        let store = Store::open(dir.path(), cfg.clone()).unwrap();
        for batch in 0..100u32 {
            let tx = store.write().unwrap();
            let mut t = tx.table("big").unwrap();
            for i in 0..40u32 {
                let k = (batch * 40 + i).wrapping_mul(2654435761).to_be_bytes();
                let mut key = k.to_vec();
                key.resize(200, b'.');
                let v = if i % 17 == 0 {
                    vec![batch as u8; 20_000]
                } else {
                    vec![i as u8; 120]
                };
                t.insert(&key, &v).unwrap();
                model.insert(key, v);
            }

            tx.commit().unwrap();
        }
        let s = store.stats();
        assert!(
            s.pool.evictions > 0,
            "the data must not fit the pool: {:?}",
            s.pool
        );
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), cfg).unwrap();
    let r = store.read().unwrap();
    let t = r.table("big").unwrap();
    let all: BTreeMap<_, _> = t.range(..).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(all.len(), model.len());
    assert!(all == model);
}

#[test]
fn every_durability_level_commits() {
    for d in [Durability::Sync, Durability::Buffered, Durability::Lazy] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            Config {
                durability: d,
                ..small()
            },
        )
        .unwrap();
        for i in 0..50u32 {
            let tx = store.write().unwrap();
            tx.table("t")
                .unwrap()
                .insert(&i.to_be_bytes(), b"v")
                .unwrap();
            tx.commit().unwrap();
        }
        store.close().unwrap();
        let store = Store::open(
            dir.path(),
            Config {
                durability: d,
                ..small()
            },
        )
        .unwrap();
        assert_eq!(
            store
                .read()
                .unwrap()
                .table("t")
                .unwrap()
                .range(..)
                .unwrap()
                .count(),
            50
        );
    }
}

#[test]
fn commit_async_under_tokio() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut handles = Vec::new();
        for w in 0..8u32 {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                for i in 0..20u32 {
                    let fut = {
                        let tx = store.write().unwrap();
                        tx.table("t")
                            .unwrap()
                            .insert(&(w * 100 + i).to_be_bytes(), b"v")
                            .unwrap();
                        tx.commit_async()
                    };
                    fut.await.unwrap();
                }
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    });
    assert_eq!(
        store
            .read()
            .unwrap()
            .table("t")
            .unwrap()
            .range(..)
            .unwrap()
            .count(),
        160
    );
}

#[test]
fn reopening_with_another_page_size_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), small()).unwrap().close().unwrap();
    let e = Store::open(
        dir.path(),
        Config {
            page_size: 8192,
            ..small()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("page_size 4096"), "{e}");
}

/// `torn_page = "atomic"` where the file system cannot write a page atomically is refused at
/// open, recognisable without keel-flush's error type; other errors are not mistaken for it.
#[test]
fn atomic_on_a_file_system_without_atomic_writes_is_recognisable() {
    use keel::TornPage;
    use keel_io::{AtomicWriteLimits, SimConfig, SimFs};
    let fs = SimFs::new(SimConfig::seeded(1).atomic(AtomicWriteLimits::NONE));
    let cfg = Config {
        torn_page: TornPage::Atomic,
        ..Config::default()
    };
    let Err(err) = Store::open_with_fs(std::sync::Arc::new(fs), std::path::Path::new("/db"), cfg)
    else {
        panic!("this SimFs has no atomic writes: the open must fail");
    };
    assert!(err.is_atomic_unavailable(), "{err}");
    assert!(!err.is_corruption());
    assert!(!Error::Config("x".into()).is_atomic_unavailable());
}

/// Lazy commits into a 512 KiB log: small enough that writers keep reaching the synchronous
/// checkpoint point. Checkpoints also run every `checkpoint_interval` ms.
fn tiny_log(checkpoint_interval_ms: u64) -> Config {
    Config {
        page_size: 4096,
        pool_size: 4 << 20,
        log_file_size: 256 * 1024,
        log_file_count: 2,
        durability: Durability::Lazy,
        checkpoint_interval: std::time::Duration::from_millis(checkpoint_interval_ms),
        ..Config::default()
    }
}

/// Commits one 200-byte row under a key hashed from `i`.
fn insert_one(store: &Store, i: u32) {
    let tx = store.write().unwrap();
    tx.table("t")
        .unwrap()
        .insert(&i.wrapping_mul(2_654_435_761).to_be_bytes(), &[7u8; 200])
        .unwrap();
    tx.commit().unwrap();
}

/// The checkpointer sleeps until its interval is due (before, it polled every 20 ms: about 50
/// wake-ups a second idle), and a writer that finds the log past the asynchronous checkpoint
/// point wakes it long before that. The log flusher sleeps too while nothing is appended.
#[test]
fn an_idle_store_leaves_its_checkpointer_asleep_and_log_pressure_wakes_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), tiny_log(60_000)).unwrap();
    // The store's creation is a lazy commit, made durable by the flusher within its interval
    // (1 s); from then on the store is idle.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let flusher = store.stats().log.flusher_wakeups;
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let idle = store.stats().checkpointer_wakeups;
    assert_eq!(idle, 0, "an idle store woke its checkpointer {idle} times");
    // Nor its log flusher (it once woke every `flush_interval`, 1 s by default).
    let flusher = store.stats().log.flusher_wakeups - flusher;
    assert_eq!(
        flusher, 0,
        "an idle store woke its log flusher {flusher} times"
    );
    let t0 = std::time::Instant::now();
    let mut i = 0u32;
    while store.stats().checkpointer_wakeups == 0 && t0.elapsed().as_secs() < 20 {
        insert_one(&store, i);
        i += 1;
    }
    let s = store.stats();
    assert!(
        s.checkpointer_wakeups > 0,
        "{i} transactions and the checkpointer still slept: {s:?}"
    );
}

/// Growing log files have no capacity, and were checkpointed only by the interval: with an
/// hour's interval a busy store's log grew by a file every 256 KiB of redo and recovery replayed
/// all of it. The checkpoint is now due at `checkpoint_log_fraction` of `log_file_count` files
/// since the last one, as with preallocated files, so the log (its files on disk and what
/// recovery replays) stays bounded.
#[test]
fn growing_log_files_are_checkpointed_by_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        log_files: keel::LogFileMode::Growing,
        ..tiny_log(3_600_000)
    };
    let store = Store::open(dir.path(), config.clone()).unwrap();
    let t0 = std::time::Instant::now();
    for i in 0..6000u32 {
        insert_one(&store, i);
    }
    // The checkpointer runs on its own thread: give its last kick a moment.
    while store.stats().checkpoints == 0 && t0.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = store.stats();
    assert!(s.checkpoints > 0, "no checkpoint by log size: {s:?}");
    drop(store);
    let log_files = std::fs::read_dir(dir.path().join(keel::LOG_DIR))
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name();
            let n = n.to_string_lossy();
            n.starts_with("log.") && n != "log.header"
        })
        .count();
    let store = Store::open(dir.path(), config).unwrap();
    let replayed = store.recovery().end_lsn.0 - store.recovery().checkpoint_lsn.0;
    assert!(
        replayed < 2 * 512 * 1024,
        "recovery replayed {replayed} bytes of log ({log_files} files)"
    );
    assert!(log_files <= 6, "{log_files} log files kept");
    let r = store.read().unwrap();
    assert_eq!(r.table("t").unwrap().range(..).unwrap().count(), 6000);
}

/// A log far smaller than the work makes writers reach the synchronous checkpoint point; the
/// stats count those waits and their time, and nothing is lost.
#[test]
fn sync_checkpoint_waits_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), tiny_log(60_000)).unwrap();
    for i in 0..4000u32 {
        insert_one(&store, i);
    }
    let s = store.stats();
    assert!(s.sync_checkpoint_waits > 0, "{s:?}");
    assert!(s.checkpoints > 0);
    let r = store.read().unwrap();
    assert_eq!(r.table("t").unwrap().range(..).unwrap().count(), 4000);
}

/// A checkpoint records its progress in the log step by step (oldest pages first), so log space
/// frees up while it runs: one checkpoint of many dirty pages written at different LSNs writes
/// the log's checkpoint slot more than once.
#[test]
fn a_checkpoint_records_its_progress_in_steps() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        Config {
            page_size: 4096,
            pool_size: 16 << 20,
            durability: Durability::Lazy,
            checkpoint_interval: std::time::Duration::from_secs(600),
            ..Config::default()
        },
    )
    .unwrap();
    for t in 0..200u32 {
        let tx = store.write().unwrap();
        {
            let mut tab = tx.table("t").unwrap();
            for i in 0..20u32 {
                let k = (t * 20 + i).wrapping_mul(2_654_435_761);
                tab.insert(&k.to_be_bytes(), &[9u8; 150]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let before = store.stats();
    assert!(before.pool.dirty_pages > 50, "{:?}", before.pool);
    store.checkpoint().unwrap();
    let after = store.stats();
    assert_eq!(after.checkpoints, before.checkpoints + 1);
    let recorded = after.log.checkpoints - before.log.checkpoints;
    assert!(
        recorded >= 3,
        "one checkpoint recorded its progress only {recorded} times"
    );
    assert_eq!(after.pool.dirty_pages, 0);
}

/// A writer waiting for log space at the synchronous checkpoint point holds the writer lock;
/// checkpoints that want that lock for their exclusive phase (user calls, the background
/// thread) must not wait for it then, or the two would wait for each other.
#[test]
fn checkpoints_and_writers_at_the_sync_point_never_wait_for_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), tiny_log(1)).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|s| {
        let st = &store;
        let stop2 = stop.clone();
        s.spawn(move || {
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                st.checkpoint().unwrap();
            }
        });
        s.spawn(move || {
            for i in 0..3000u32 {
                insert_one(st, i);
            }
            done_tx.send(()).unwrap();
        });
        let finished = done_rx.recv_timeout(std::time::Duration::from_secs(120));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(finished.is_ok(), "writers and checkpoints are stuck");
    });
    let s = store.stats();
    assert!(s.sync_checkpoint_waits > 0, "{s:?}");
    let r = store.read().unwrap();
    assert_eq!(r.table("t").unwrap().range(..).unwrap().count(), 3000);
}

/// One reading interface for both kinds of table: a function generic over `ReadableTable`
/// gives the same answers inside a write transaction (its own changes included) and in a read
/// transaction after the commit.
#[test]
fn readable_table_serves_write_and_read_tables_alike() {
    use keel::ReadableTable;
    type Keys = Vec<Vec<u8>>;
    fn summary(t: &impl ReadableTable) -> (Option<Vec<u8>>, Keys, Keys) {
        let fwd = t
            .range(b"b".as_slice()..b"e".as_slice())
            .unwrap()
            .map(|kv| kv.unwrap().0)
            .collect();
        let back = t.range(..).unwrap().rev().map(|kv| kv.unwrap().0).collect();
        (t.get(b"c").unwrap(), fwd, back)
    }
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), small()).unwrap();
    let tx = s.write().unwrap();
    let mut t = tx.table("t").unwrap();
    for k in ["a", "b", "c", "d", "e"] {
        t.insert(k.as_bytes(), b"v").unwrap();
    }
    let in_write = summary(&t);
    assert_eq!(in_write.0.as_deref(), Some(b"v".as_slice()));
    assert_eq!(
        in_write.1,
        vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
    );
    assert_eq!(in_write.2.len(), 5);
    tx.commit().unwrap();
    let r = s.read().unwrap();
    assert_eq!(summary(&r.table("t").unwrap()), in_write);
}

/// Ascending keys below a fixed greatest key split the rightmost leaf again and again, in its
/// middle (not the append fast path: the greatest key stays last), and each split makes its
/// new right half a page copy of the leaf before it, itself a copy not yet written: a chain of
/// copies as long as the splits between two writes (every leaf waits for the next), or as
/// the pool's `max_copy_chain` (32) allows. A checkpoint must still write every page. (The
/// flush followed such chains 64 levels deep and no further; the checkpoint then left the
/// chain dirty, and a writer at the synchronous checkpoint point spun on it for good: a
/// `keel-tpcc` load with a pool-sized log hung so. Before the bound, this test made a chain of
/// about 200 and left 215 pages dirty; `keel-buffer-pool`'s
/// `a_chain_of_copies_longer_than_any_bound_is_written_deepest_first` now keeps the deep
/// case, with the bound lifted.)
#[test]
fn a_long_chain_of_split_copies_is_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        page_size: 4096,
        pool_size: 8 << 20,
        log_file_size: 16 << 20,
        durability: Durability::Lazy,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        ..Config::default()
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    let tx = store.write().unwrap();
    tx.table("t")
        .unwrap()
        .insert(&u32::MAX.to_be_bytes(), b"greatest")
        .unwrap();
    tx.commit().unwrap();
    for i in 0..1500u32 {
        let tx = store.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&i.to_be_bytes(), &[i as u8; 300])
            .unwrap();
        tx.commit().unwrap();
    }
    let s = store.stats();
    assert!(s.pool.page_copies > 100, "{} copies", s.pool.page_copies);
    store.checkpoint().unwrap();
    assert_eq!(store.stats().pool.dirty_pages, 0, "the whole chain written");
    store.close().unwrap();
    let store = Store::open(dir.path(), Config::for_store(dir.path()).unwrap()).unwrap();
    let r = store.read().unwrap();
    assert_eq!(r.table("t").unwrap().range(..).unwrap().count(), 1501);
}

/// `Config::inline_maintenance`: no page cleaner and no checkpointer thread — the checkpoints
/// are taken by the writers that find the log past `checkpoint_log_fraction` (preallocated and
/// growing logs), before their transaction begins, so the log never fills; pages reach the data
/// file through checkpoints and eviction (a pool a quarter of the data); every row is there after
/// a reopen; and nothing wakes on a timer.
#[test]
fn inline_maintenance_checkpoints_in_the_writers_and_starts_no_threads() {
    for files in [keel::LogFileMode::Preallocated, keel::LogFileMode::Growing] {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            inline_maintenance: true,
            log_files: files,
            durability: Durability::Sync,
            pool_size: 64 * 4096,
            ..tiny_log(1)
        };
        let store = Store::open(dir.path(), config.clone()).unwrap();
        for i in 0..3000u32 {
            insert_one(&store, i);
        }
        let s = store.stats();
        assert!(
            s.checkpoints > 1,
            "{files:?}: no checkpoint by the writers: {s:?}"
        );
        assert_eq!(
            s.checkpointer_wakeups, 0,
            "{files:?}: a checkpointer thread ran"
        );
        assert_eq!(s.pool.cleaner_rounds, 0, "{files:?}: a cleaner thread ran");
        assert_eq!(
            s.sync_checkpoint_waits, 0,
            "{files:?}: a writer reached the sync point"
        );
        // A checkpoint interval of 1 ms is not used: nothing happens while the store is idle.
        let before = store.stats().checkpoints;
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            store.stats().checkpoints,
            before,
            "{files:?}: a timed checkpoint"
        );
        store.close().unwrap();
        let store = Store::open(dir.path(), config).unwrap();
        let r = store.read().unwrap();
        assert_eq!(r.table("t").unwrap().len().unwrap(), 3000, "{files:?}");
    }
}

/// Closing one clone of a store leaves the others working in full: the background
/// checkpointer goes on for them and stops with the last handle (it stopped at the first
/// close, and the other clones went on without checkpoints or page cleaning: a tester).
#[test]
fn closing_one_clone_leaves_the_others_their_background_threads() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        checkpoint_interval: std::time::Duration::from_millis(20),
        ..small()
    };
    let a = Store::open(dir.path(), config).unwrap();
    let b = a.clone();
    a.close().unwrap();
    let put = |i: u32| {
        let tx = b.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&i.to_be_bytes(), b"v")
            .unwrap();
        tx.commit().unwrap();
    };
    put(0);
    let before = b.stats().checkpoints;
    let t0 = std::time::Instant::now();
    let mut i = 1;
    while b.stats().checkpoints == before {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "no background checkpoint ran after another clone's close"
        );
        put(i);
        i += 1;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    b.close().unwrap();
}
