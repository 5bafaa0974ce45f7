//! The error enum says what happened (issue 11, item 7): one corruption predicate that covers
//! every damaged-data variant at any depth, key and value limits as their own variants, and a
//! poisoned store that names its real cause (a full device is not "a failed sync").

use keel::{BTreeError, Config, Error, FlushError, LogError, PoolError, Store};
use keel_io::{Fault, SimConfig, SimFs};
use keel_page::{Lsn, PageId};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn small() -> Config {
    Config {
        page_size: 4096,
        pool_size: 64 * 4096,
        log_file_size: 256 * 1024,
        log_file_count: 2,
        ..Config::default()
    }
}

#[test]
fn every_damaged_data_variant_is_corruption() {
    let file = PathBuf::from("/db/data");
    let damaged: Vec<Error> = vec![
        Error::from(BTreeError::Corrupt {
            page_id: PageId(7),
            detail: "slot 3 points outside the page".into(),
        }),
        Error::from(LogError::Corrupt {
            path: file.clone(),
            lsn: Lsn(4096),
            reason: "checksum mismatch".into(),
        }),
        Error::from(LogError::CorruptHeader {
            path: file.clone(),
            reason: "both slots fail their checksums".into(),
        }),
        Error::from(LogError::BadFile {
            path: file.clone(),
            reason: "preallocated log file is missing".into(),
        }),
        Error::from(FlushError::DoublewriteArea {
            file: file.clone(),
            reason: "header unreadable".into(),
        }),
        Error::from(PoolError::BadRedo {
            page_id: PageId(3),
            lsn: Lsn(100),
            reason: "offset past the page".into(),
        }),
        Error::from(PoolError::Unrecoverable {
            file: file.clone(),
            page_id: PageId(3),
            reason: "torn, no image".into(),
        }),
        Error::from(PoolError::store(FlushError::DoublewriteArea {
            file: file.clone(),
            reason: "header unreadable".into(),
        })),
        Error::from(BTreeError::Storage(Box::new(PoolError::BadRedo {
            page_id: PageId(3),
            lsn: Lsn(100),
            reason: "x".into(),
        }))),
    ];
    for e in &damaged {
        assert!(e.is_corruption(), "not reported as corruption: {e:?}");
    }
    let not_damaged: Vec<Error> = vec![
        Error::Config("x".into()),
        Error::TableNotFound("t".into()),
        Error::from(BTreeError::KeyTooLarge { len: 5000, max: 10 }),
        Error::from(LogError::InvalidConfig { reason: "x".into() }),
    ];
    for e in &not_damaged {
        assert!(!e.is_corruption(), "reported as corruption: {e:?}");
    }
}

#[test]
fn key_and_value_limits_are_their_own_variants() {
    assert_eq!(keel::max_key_len(4096), 976);
    assert_eq!(keel::max_key_len(8192), 2000);
    assert_eq!(keel::max_key_len(16384), 4048);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small()).unwrap();
    let tx = store.write().unwrap();
    let mut t = tx.table("t").unwrap();
    let max = keel::max_key_len(4096);
    t.insert(&vec![b'k'; max], b"fits").unwrap();
    match t.insert(&vec![b'k'; max + 1], b"v") {
        Err(Error::KeyTooLarge { len, max: m }) => {
            assert_eq!((len, m), (max + 1, max));
        }
        other => panic!("expected KeyTooLarge, got {other:?}"),
    }
    let e = Error::from(BTreeError::ValueTooLarge { len: 1 << 33 });
    assert!(
        matches!(e, Error::ValueTooLarge { len, max } if len == 1 << 33 && max == keel::MAX_VALUE_LEN)
    );
    tx.commit().unwrap();
}

/// `is_no_space` finds a full disk however it is wrapped: the io variant or an OS error of
/// ENOSPC (an `open` that could not create a log file), directly or under the log's, the page
/// writer's or the pool's error, or as a poison cause. Found by `tests/fs_full.rs`: a growing
/// log's new file and the recovery of a full store each said "no space" and were not.
#[test]
fn a_full_disk_is_no_space_at_any_depth() {
    // 0: the io crate's own variant, 1: ENOSPC from the OS, 2: EIO (not a full disk).
    let make = |kind: u8| match kind {
        0 => keel_io::IoError::NoSpace {
            path: PathBuf::from("/x"),
            offset: 0,
            len: 4096,
        },
        _ => keel_io::IoError::Os {
            op: "open",
            path: PathBuf::from("/x"),
            source: std::io::Error::from_raw_os_error(if kind == 1 { 28 } else { 5 }),
        },
    };
    for kind in 0..3u8 {
        let full = kind < 2;
        let cases = [
            Error::Io(make(kind)),
            Error::Log(LogError::Io(make(kind))),
            Error::Flush(FlushError::Io(make(kind))),
            Error::Log(LogError::Poisoned {
                cause: keel_io::PoisonCause::new("create", "/x", make(kind)),
            }),
        ];
        for e in cases {
            assert_eq!(e.is_no_space(), full, "{e:?}");
        }
    }
}

#[test]
fn a_full_device_poisons_with_its_own_cause() {
    let fs = SimFs::new(SimConfig::seeded(9));
    let dir = Path::new("/db");
    let store = Store::open_with_fs(Arc::new(fs.clone()), dir, small()).unwrap();
    for i in 0..5u32 {
        let tx = store.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&i.to_be_bytes(), b"acked")
            .unwrap();
        tx.commit().unwrap();
    }
    fs.inject(Fault::NoSpaceOnNthWrite(1));
    let mut first = None;
    for i in 5..50u32 {
        let r = store.write().and_then(|tx| {
            tx.table("t")?.insert(&i.to_be_bytes(), &[7u8; 100])?;
            tx.commit()
        });
        if let Err(e) = r {
            first = Some(e);
            break;
        }
    }
    let first = first.expect("an injected ENOSPC must surface");
    assert!(
        first.is_no_space(),
        "the failed commit hides ENOSPC: {first}"
    );
    let later = store
        .write()
        .err()
        .expect("a poisoned store takes no writes");
    assert!(later.is_poisoned(), "{later:?}");
    assert!(later.is_no_space(), "the poisoning lost its cause: {later}");
    let msg = later.to_string();
    assert!(
        !msg.contains("failed sync") && msg.contains("no space"),
        "a full device reported as: {msg}"
    );
}

/// A page write that finds the device full poisons the page writer; the store must then take
/// no further write or commit, whichever path met the failure, also one whose error reached no
/// caller of the store (here: the eviction inside an insert, whose caller drops the error). Found
/// by `tests/fs_full.rs` on real file systems: after an eviction's ENOSPC a new transaction still
/// committed, and a commit whose log write then failed was visible to readers.
#[test]
fn a_full_data_file_refuses_every_later_write() {
    let fs = SimFs::new(SimConfig::seeded(11));
    let dir = Path::new("/db");
    let store = Store::open_with_fs(Arc::new(fs.clone()), dir, small()).unwrap();
    let tx = store.write().unwrap();
    tx.table("t").unwrap().insert(b"first", b"acked").unwrap();
    tx.commit().unwrap();
    // Begun before the failure, committed after it.
    let early = store.write_concurrent().unwrap();
    early.table("t").unwrap().insert(b"early", b"x").unwrap();
    fs.inject(Fault::NoSpaceOnPath(dir.join("data.keel")));
    // Small transactions until one meets the full data file: once the pool's frames are dirty,
    // a page read or a new page evicts (writes) one. The error is dropped, as a caller may.
    let mut failed = None;
    for n in 0..2_000u32 {
        let r = store.write().and_then(|tx| {
            {
                let mut t = tx.table("t")?;
                for i in 0..50u32 {
                    t.insert(&(n * 50 + i).to_be_bytes(), &[5u8; 200])?;
                }
            }
            tx.commit()
        });
        if let Err(e) = r {
            failed = Some(e);
            break;
        }
    }
    let failed = failed.expect("a page write meets the full data file");
    assert!(failed.is_no_space(), "{failed}");
    let later = store
        .write()
        .err()
        .expect("no write after the page writer's failure");
    assert!(later.is_poisoned() && later.is_no_space(), "{later}");
    let err = early
        .commit()
        .expect_err("no commit after the page writer's failure");
    assert!(err.is_poisoned(), "{err}");
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    assert_eq!(t.get(b"first").unwrap().as_deref(), Some(&b"acked"[..]));
    assert_eq!(t.get(b"early").unwrap(), None);
}

/// An insert that fails part-way (its split or its value's overflow pages need more frames than
/// the pool lets one transaction hold) leaves the transaction failed: every later use of it and
/// its commit are refused naming what failed, nothing of it is committed, and the store stays
/// as its last commit left it, every page accounted for. An error before any change (a value
/// too large) leaves the transaction usable. Before, the commit went through and made the
/// half-done insert durable: committed rows were lost and pages leaked.
#[test]
fn a_transaction_an_operation_failed_part_way_through_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        pool_size: 24 * 4096,
        ..small()
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let (mut failed, mut committed) = (0, 0);
    for round in 0..40 {
        let tx = store.write().unwrap();
        let mut t = tx.table("t").unwrap();
        let mut wrote = Vec::new();
        let mut error = None;
        // A value too large changes nothing: the transaction goes on.
        assert!(matches!(
            t.insert(b"k", &vec![0; keel::MAX_VALUE_LEN + 1]),
            Err(Error::ValueTooLarge { .. })
        ));
        for _ in 0..1 + round % 30 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = format!("key{:05}", x % 3000).into_bytes();
            let len = if x.is_multiple_of(5) {
                3000 + x % 5000
            } else {
                100 + x % 300
            };
            let v = vec![(x >> 8) as u8; len as usize];
            match t.insert(&k, &v) {
                Ok(_) => wrote.push((k, v)),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        match error {
            None => {
                drop(t);
                tx.commit().unwrap();
                model.extend(wrote);
                committed += 1;
            }
            Some(e) => {
                assert!(e.is_too_large(), "{e}");
                assert!(!e.is_corruption() && !e.is_poisoned(), "{e}");
                for later in [t.get(b"key00001").err(), t.remove(b"key00002").err()] {
                    let later = later.map(|e| e.to_string()).unwrap_or_default();
                    assert!(
                        later.contains("failed part-way") && later.contains("an insert failed"),
                        "a use after the failure: {later:?}"
                    );
                }
                drop(t);
                match tx.commit() {
                    Err(c) => {
                        assert!(c.is_txn_failed(), "{c}");
                        assert!(c.to_string().contains("can only be rolled back"), "{c}");
                        // The commit's error still says why: a caller that retries smaller
                        // on `is_too_large` must see it here too.
                        assert!(c.is_too_large(), "{c}");
                    }
                    Ok(()) => panic!("round {round}: a transaction that failed committed"),
                }
                failed += 1;
            }
        }
        let r = store.read().unwrap();
        let got: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = match r.table("t") {
            Ok(t) => t.range(..).unwrap().collect::<Result<_, _>>().unwrap(),
            Err(Error::TableNotFound(_)) => Default::default(),
            Err(e) => panic!("{e}"),
        };
        assert!(
            got == model,
            "round {round}: {} rows, want {}",
            got.len(),
            model.len()
        );
        let c = store.check().unwrap();
        assert!(c.is_ok(), "round {round}: {:?}", c.problems);
    }
    assert!(
        failed > 5 && committed > 5,
        "{failed} failed, {committed} committed"
    );
    // A new transaction after a failed one works.
    let tx = store.write().unwrap();
    tx.table("t").unwrap().insert(b"after", b"ok").unwrap();
    tx.commit().unwrap();
}

/// A value whose overflow pages alone are more than the pool lets one transaction hold can
/// never be inserted: it is refused before anything is done (`ValueTooLargeForPool`, naming
/// the pages it needs and the limit; `is_too_large`), and the transaction goes on — its earlier
/// rows commit — in the exclusive writer and in a concurrent transaction alike.
/// Before, the exclusive insert allocated the chain until the pool refused, which failed the
/// whole transaction: everything it had done was lost, though the value's size alone said so.
#[test]
fn a_value_the_pool_cannot_hold_is_refused_and_the_transaction_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        pool_size: 24 * 4096,
        ..small()
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    let limits = keel_btree::Limits::new(4096);
    // 24 frames, three quarters of them for one transaction.
    let limit = 18;
    // The shortest value whose chain and leaf are more than the limit.
    let refused = limit * limits.overflow_capacity() + 1;
    assert_eq!(limits.overflow_pages(1, refused) + 1, limit + 2);
    // (A chain of `limit - 1` pages passes the check but fails part-way: allocating also
    // changes the meta page. The check is a lower bound, never a refusal of what fits.)
    let fits = (limit - 2) * limits.overflow_capacity();
    assert_eq!(limits.overflow_pages(1, fits) + 1, limit - 1);
    for concurrent in [false, true] {
        let tx = if concurrent {
            store.write_concurrent().unwrap()
        } else {
            store.write().unwrap()
        };
        let mut t = tx.table("t").unwrap();
        t.insert(b"a", b"before").unwrap();
        for len in [refused, refused + 7 * 4096, 10 << 20] {
            match t.insert(b"k", &vec![7u8; len]) {
                Err(Error::ValueTooLargeForPool {
                    len: l,
                    pages,
                    limit: m,
                }) => {
                    assert_eq!((l, m), (len, limit), "concurrent {concurrent}");
                    assert_eq!(pages, limits.overflow_pages(1, len) + 1);
                }
                other => panic!("concurrent {concurrent}: a value of {len} bytes: {other:?}"),
            }
        }
        let e = t.insert(b"k", &vec![7u8; refused]).unwrap_err();
        assert!(e.is_too_large() && !e.is_txn_failed(), "{e}");
        t.insert(b"b", b"after").unwrap();
        drop(t);
        tx.commit().unwrap();
        let r = store.read().unwrap();
        let t = r.table("t").unwrap();
        assert_eq!(t.get(b"a").unwrap().as_deref(), Some(&b"before"[..]));
        assert_eq!(t.get(b"b").unwrap().as_deref(), Some(&b"after"[..]));
        assert_eq!(t.get(b"k").unwrap(), None);
    }
    // The longest value the limit allows is not refused by the check.
    let tx = store.write().unwrap();
    tx.table("t")
        .unwrap()
        .insert(b"k", &vec![9u8; fits])
        .unwrap();
    tx.commit().unwrap();
    let r = store.read().unwrap();
    assert_eq!(
        r.table("t").unwrap().get(b"k").unwrap().map(|v| v.len()),
        Some(fits)
    );
    assert!(store.check().unwrap().is_ok());
}

/// A transaction that is `mem::forget`-ed leaves its thread's mark behind; a store opened
/// afterwards (possibly at the same address) must not inherit it. Found by CI: a reopened
/// store refused its first read as `WouldDeadlock` when the allocator reused the address.
#[test]
fn a_forgotten_transaction_does_not_follow_a_reopen() {
    let fs = SimFs::new(SimConfig::seeded(2));
    for round in 0..64u32 {
        let s = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/a"), small()).unwrap();
        let tx = s.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&round.to_be_bytes(), b"kept")
            .unwrap();
        tx.commit().unwrap();
        let tx = s.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&round.to_be_bytes(), b"lost")
            .unwrap();
        std::mem::forget(tx);
        drop(s);
        let s = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/a"), small()).unwrap();
        let r = s.read().unwrap_or_else(|e| panic!("round {round}: {e}"));
        let got = r.table("t").unwrap().get(&round.to_be_bytes()).unwrap();
        assert_eq!(got.as_deref(), Some(&b"kept"[..]), "round {round}");
        drop(r);
        drop(s);
    }
}

/// A thread never waits for itself (issue 13): a write or checkpoint while it holds a read
/// transaction, or anything while it holds a write transaction, is `WouldDeadlock` at once
/// (these used to hang forever). Other threads still wait as before, two read transactions on
/// one thread are fine, and another store is not affected. Run under a watchdog, so a
/// regression fails instead of hanging the suite.
#[test]
fn a_thread_never_waits_for_itself() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let fs = SimFs::new(SimConfig::seeded(1));
        let s = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/a"), small()).unwrap();
        let other = Store::open_with_fs(Arc::new(fs), Path::new("/b"), small()).unwrap();
        let would = |r: Result<(), Error>| matches!(r, Err(Error::WouldDeadlock { .. }));
        {
            // A read transaction is a snapshot: writing and checkpointing on the same thread
            // while it is open neither waits nor is refused, and it keeps its view.
            let r = s.read().unwrap();
            let tx = s.write().unwrap();
            tx.table("t").unwrap().insert(b"k", b"v").unwrap();
            // Reading while holding the write transaction does not wait either.
            assert!(matches!(
                s.read().unwrap().table("t"),
                Err(Error::TableNotFound(_))
            ));
            tx.commit().unwrap();
            s.checkpoint().unwrap();
            assert!(matches!(r.table("t"), Err(Error::TableNotFound(_))));
            let r2 = s.read().unwrap();
            assert_eq!(
                r2.table("t").unwrap().get(b"k").unwrap(),
                Some(b"v".to_vec())
            );
            // Another store on the same thread is not held.
            let tx = other.write().unwrap();
            tx.commit().unwrap();
            // Another thread writes while this one holds both snapshots.
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    let tx = s.write().unwrap();
                    tx.table("t").unwrap().insert(b"k2", b"v2").unwrap();
                    tx.commit().unwrap();
                })
                .join()
                .unwrap();
            });
            assert_eq!(r2.table("t").unwrap().get(b"k2").unwrap(), None);
            drop((r, r2));
        }
        {
            let tx = s.write().unwrap();
            assert!(would(s.write().map(drop)));
            assert!(would(s.checkpoint().map(drop)));
            let e = s.write().map(drop).unwrap_err();
            assert!(e.to_string().contains("write transaction"), "{e}");
            tx.commit().unwrap();
        }
        // After the commit (and after an abort) the thread holds nothing.
        assert_eq!(
            s.read().unwrap().table("t").unwrap().get(b"k").unwrap(),
            Some(b"v".to_vec())
        );
        s.write().unwrap().abort();
        s.checkpoint().unwrap();
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("a thread waited for itself (hang)");
}

/// A pool larger than the machine can map is a configuration error naming what to lower; it
/// used to abort the process in the allocator (no error, no unwinding). The sizes are past any
/// memory and address space this runs on (4 TiB, and about 128 TiB with 64 KiB pages), but
/// within the pool's frame limit, so the refusal is the allocation's.
#[test]
fn a_pool_the_machine_cannot_map_is_refused_not_an_abort() {
    for (page_size, pool_size) in [
        (4096usize, 4usize << 40),
        (65536, (u32::MAX as usize / 2) << 16),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            page_size,
            pool_size,
            log_file_size: 1 << 20,
            ..Config::default()
        };
        match Store::open(dir.path(), config) {
            Err(e) => assert!(e.to_string().contains("cannot allocate"), "{e}"),
            Ok(_) => panic!("a pool of {pool_size} bytes was allocated"),
        }
    }
}

/// [`small`] with a growing log of 32 KiB files (a new file every few commits) and no
/// background threads (each checkpoint is the test's).
fn small_growing_log() -> Config {
    Config {
        log_files: keel::LogFileMode::Growing,
        log_file_size: 32 * 1024,
        inline_maintenance: true,
        ..small()
    }
}

/// A growing log's file behind the checkpoint that cannot be unlinked (EIO from `unlink`)
/// costs disk space, not durability: the checkpoint (durable before the unlink) succeeds, the
/// failure is counted, and the next checkpoint removes the file. Before, the checkpoint
/// returned the error, and the log forgot the file, which stayed on disk until the next open.
#[test]
fn a_log_file_that_cannot_be_unlinked_is_kept_and_removed_by_a_later_checkpoint() {
    let fs = SimFs::new(SimConfig::seeded(3));
    let dir = Path::new("/db");
    let cfg = small_growing_log();
    let store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone()).unwrap();
    let put = |store: &Store, from: u32| {
        for i in from..from + 50 {
            let tx = store.write().unwrap();
            let key = format!("k{i:05}");
            tx.table("t")
                .unwrap()
                .insert(key.as_bytes(), &[7u8; 300])
                .unwrap();
            tx.commit().unwrap();
        }
    };
    let logs = |fs: &SimFs| -> Vec<PathBuf> {
        keel_io::FileSystem::list_dir(fs, &dir.join(keel::LOG_DIR))
            .unwrap()
            .into_iter()
            .filter(|p| !p.ends_with("log.header"))
            .collect()
    };
    // Commits until a checkpoint has a file to remove behind its scan start (which lies in a
    // written block, sometimes the previous file's last: session 45), its unlink failing.
    let mut from = 0;
    let oldest = loop {
        put(&store, from);
        from += 50;
        let oldest = logs(&fs)[0].clone();
        fs.inject(Fault::NamespaceFailsNth(1));
        store
            .checkpoint()
            .expect("the checkpoint itself is durable");
        fs.clear_faults();
        if fs.fault_stats().namespace_failed == 1 {
            break oldest;
        }
        assert!(from < 500, "no checkpoint removed a log file");
    };
    assert_eq!(fs.fault_stats().namespace_failed, 1);
    assert_eq!(store.stats().log.unlink_failures, 1);
    assert!(!store.is_poisoned());
    put(&store, from);
    store.checkpoint().unwrap();
    assert!(
        !logs(&fs).contains(&oldest),
        "a later checkpoint removes it: {:?}",
        logs(&fs)
    );
    store.close().unwrap();
    let store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg).unwrap();
    let r = store.read().unwrap();
    assert_eq!(r.table("t").unwrap().len().unwrap(), from as u64 + 50);
}

/// An open never fails for an unlink: a growing log's file behind the scan start (left by a
/// crash between a checkpoint and its unlink) that cannot be removed is kept for the first
/// checkpoint. Each namespace call of the open fails in turn; an open may fail for any of the
/// others (they name files it needs), never for the unlink.
#[test]
fn an_open_whose_unlink_of_an_old_log_file_fails_still_opens() {
    let dir = Path::new("/db");
    let cfg = small_growing_log();
    // A closed store with 20 rows, and a file behind its scan start.
    let build = || {
        let fs = SimFs::new(SimConfig::seeded(4));
        let store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone()).unwrap();
        for i in 0..20u32 {
            let tx = store.write().unwrap();
            tx.table("t")
                .unwrap()
                .insert(&i.to_be_bytes(), &[1u8; 100])
                .unwrap();
            tx.commit().unwrap();
        }
        store.close().unwrap();
        let old = dir.join(keel::LOG_DIR).join("log.0000000000");
        let f = keel_io::FileSystem::open(
            &fs,
            &old,
            &keel_io::OpenOptions::new(keel_io::FileClass::Log).create(true),
        )
        .unwrap();
        f.sync_all().unwrap();
        fs
    };
    let mut kept = 0;
    for n in 1..=30 {
        let fs = build();
        fs.inject(Fault::NamespaceFailsNth(n));
        match Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone()) {
            Ok(store) => {
                kept += store.stats().log.unlink_failures;
                let r = store.read().unwrap();
                assert_eq!(r.table("t").unwrap().len().unwrap(), 20, "call {n}");
            }
            Err(e) => assert!(
                !e.to_string().contains("unlink"),
                "call {n}: an open refused for an unlink: {e}"
            ),
        }
    }
    assert_eq!(
        kept, 1,
        "exactly one of the calls was the old file's unlink"
    );
}

/// A transaction whose insert met the page writer's failure (an eviction's write) commits
/// nothing, and its commit says the store is poisoned, as `WriteTxn::commit`'s docs promise
/// (it said `TxnFailed`, `is_poisoned()` false: a tester).
#[test]
fn the_commit_of_a_transaction_a_failed_eviction_broke_says_poisoned() {
    let fs = SimFs::new(SimConfig::seeded(93));
    let config = Config {
        pool_size: 32 * 4096,
        log_file_size: 1 << 20,
        inline_maintenance: true,
        ..small()
    };
    let store = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/db"), config).unwrap();
    // More committed dirty pages than frames.
    for b in 0..10u32 {
        let tx = store.write().unwrap();
        let mut t = tx.table("t").unwrap();
        for i in 0..40u32 {
            t.insert(&(b * 40 + i).to_be_bytes(), &[1u8; 300]).unwrap();
        }
        drop(t);
        tx.commit().unwrap();
    }
    fs.inject(Fault::WriteFailsNth(1));
    // Rewriting every row needs frames: an eviction writes a dirty page, and fails.
    let tx = store.write().unwrap();
    let mut met = None;
    for i in 0..400u32 {
        let r = tx
            .table("t")
            .and_then(|mut t| t.insert(&i.to_be_bytes(), &[2u8; 300]));
        if let Err(e) = r {
            met = Some(e);
            break;
        }
    }
    let met = met.expect("an eviction met the failed write");
    assert!(met.is_poisoned(), "{met}");
    let e = tx.commit().expect_err("a broken transaction committed");
    assert!(e.is_poisoned(), "{e}");
    assert!(store.is_poisoned());
}

/// A failure in a background thread (the log's flusher syncing `Buffered` commits) poisons the
/// store as far as `is_poisoned` tells, before any write has met it; `close` then says so
/// instead of Ok without its final checkpoint (both were not so: a tester).
#[test]
fn a_background_failure_is_reported_by_is_poisoned_and_close() {
    let fs = SimFs::new(SimConfig::seeded(13));
    let config = Config {
        durability: keel::Durability::Buffered,
        flush_interval: std::time::Duration::from_millis(20),
        ..small()
    };
    let store = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/db"), config).unwrap();
    let put = |k: &[u8]| -> keel::Result<()> {
        let tx = store.write()?;
        tx.table("t")?.insert(k, b"v")?;
        tx.commit()
    };
    put(b"a").unwrap();
    fs.inject(Fault::SyncFailsNth(1));
    put(b"b").unwrap();
    let t0 = std::time::Instant::now();
    while !store.is_poisoned() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "the flusher's failed sync never showed in is_poisoned"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let e = store
        .close()
        .expect_err("close of a poisoned store said Ok");
    assert!(e.is_poisoned(), "{e}");
}

/// Every store file missing or cut is corruption, the log's files too (a missing or short
/// preallocated log file was `BadFile` with `is_corruption()` false: a tester; the list above
/// named the variants by hand and left it out).
#[test]
fn a_missing_or_cut_log_file_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        direct_io: false,
        ..small()
    };
    let s = Store::open(dir.path(), config.clone()).unwrap();
    let tx = s.write().unwrap();
    tx.table("t").unwrap().insert(b"k", b"v").unwrap();
    tx.commit().unwrap();
    s.close().unwrap();
    let f = dir.path().join(keel::LOG_DIR).join("log.0000000001");
    let saved = std::fs::read(&f).unwrap();
    for damage in ["missing", "short", "long"] {
        match damage {
            "missing" => std::fs::remove_file(&f).unwrap(),
            "short" => std::fs::write(&f, &saved[..saved.len() / 2]).unwrap(),
            _ => std::fs::write(&f, [&saved[..], &[0u8; 4096]].concat()).unwrap(),
        }
        for read_only in [false, true] {
            let c = Config {
                read_only,
                ..config.clone()
            };
            let e = Store::open(dir.path(), c).map(drop).expect_err(damage);
            assert!(e.is_corruption(), "{damage}, read_only {read_only}: {e}");
        }
        std::fs::write(&f, &saved).unwrap();
    }
    Store::open(dir.path(), config).unwrap();
}
