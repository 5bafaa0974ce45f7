//! The memory reference engine keeps the engine trait's invariants (atomicity, isolation, scan
//! order) and its snapshot is all-or-nothing. Each test breaks one on purpose.

use keel_tpcc::config::StoreConfig;
use keel_tpcc::engine::{Direction, Engine, Flow, ReadTx, ReadTxExt, WriteTx};
use keel_tpcc::memory::SNAPSHOT_FILE;
use keel_tpcc::MemoryEngine;
use std::sync::atomic::{AtomicBool, Ordering};

fn open(dir: &std::path::Path) -> MemoryEngine {
    MemoryEngine::open(dir, &StoreConfig::default()).unwrap()
}

#[test]
fn dropped_and_aborted_transactions_leave_no_trace() {
    let d = tempfile::tempdir().unwrap();
    let e = open(d.path());
    let mut tx = e.write().unwrap();
    tx.insert("t", b"a", b"1").unwrap();
    tx.insert("t", b"b", b"2").unwrap();
    tx.commit().unwrap();

    // Drop without commit: insert, overwrite and remove are all undone.
    {
        let mut tx = e.write().unwrap();
        assert_eq!(
            tx.insert("t", b"a", b"changed").unwrap(),
            Some(b"1".to_vec())
        );
        assert_eq!(tx.remove("t", b"b").unwrap(), Some(b"2".to_vec()));
        tx.insert("t", b"c", b"3").unwrap();
        tx.insert("u", b"x", b"y").unwrap();
        // Reads see the transaction's own writes.
        assert_eq!(tx.get("t", b"a").unwrap(), Some(b"changed".to_vec()));
        assert_eq!(tx.get("t", b"b").unwrap(), None);
    }
    let mut r = e.read().unwrap();
    assert_eq!(r.get("t", b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(r.get("t", b"b").unwrap(), Some(b"2".to_vec()));
    assert_eq!(r.get("t", b"c").unwrap(), None);
    assert_eq!(r.get("u", b"x").unwrap(), None);
    drop(r);

    // Explicit abort, with the same key changed twice.
    let mut tx = e.write().unwrap();
    tx.insert("t", b"a", b"x1").unwrap();
    tx.insert("t", b"a", b"x2").unwrap();
    tx.remove("t", b"a").unwrap();
    tx.abort();
    assert_eq!(
        e.read().unwrap().get("t", b"a").unwrap(),
        Some(b"1".to_vec())
    );
    let s = e.stats();
    assert_eq!((s.commits, s.aborts), (1, 2));
}

#[test]
fn one_writer_at_a_time_and_readers_see_committed_data_only() {
    let d = tempfile::tempdir().unwrap();
    let e = open(d.path());
    let committing = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut tx = e.write().unwrap();
        tx.insert("t", b"k", b"first").unwrap();
        let h = s.spawn(|| {
            // Blocks until the first writer is done; then sees its commit.
            let mut tx2 = e.write().unwrap();
            assert!(
                committing.load(Ordering::SeqCst),
                "second writer ran alongside the first"
            );
            assert_eq!(tx2.get("t", b"k").unwrap(), Some(b"first".to_vec()));
            tx2.insert("t", b"k", b"second").unwrap();
            tx2.commit().unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        committing.store(true, Ordering::SeqCst);
        tx.commit().unwrap();
        h.join().unwrap();
    });
    assert_eq!(
        e.read().unwrap().get("t", b"k").unwrap(),
        Some(b"second".to_vec())
    );
}

#[test]
fn scans_are_ordered_bounded_and_reversible() {
    let d = tempfile::tempdir().unwrap();
    let e = open(d.path());
    let mut tx = e.write().unwrap();
    for k in [5u8, 1, 9, 3, 7] {
        tx.insert("t", &[k], &[k * 2]).unwrap();
    }
    tx.commit().unwrap();
    let mut r = e.read().unwrap();
    let keys = |r: &mut keel_tpcc::memory::MemRead<'_>, s: u8, en: u8, dir| {
        let mut v = Vec::new();
        r.scan("t", &[s], &[en], dir, &mut |k, val| {
            assert_eq!(val[0], k[0] * 2);
            v.push(k[0]);
            Ok(Flow::Continue)
        })
        .unwrap();
        v
    };
    assert_eq!(
        keys(&mut r, 0, 255, Direction::Forward),
        vec![1, 3, 5, 7, 9]
    );
    assert_eq!(keys(&mut r, 3, 9, Direction::Forward), vec![3, 5, 7]); // end excluded
    assert_eq!(keys(&mut r, 3, 9, Direction::Reverse), vec![7, 5, 3]);
    assert_eq!(keys(&mut r, 9, 3, Direction::Forward), Vec::<u8>::new()); // empty, no panic
    assert_eq!(keys(&mut r, 4, 4, Direction::Forward), Vec::<u8>::new());
    assert_eq!(
        r.first("t", &[2], &[255], Direction::Forward)
            .unwrap()
            .unwrap()
            .0,
        vec![3]
    );
    assert_eq!(
        r.first("missing", &[0], &[255], Direction::Forward)
            .unwrap(),
        None
    );
    // Stop ends the scan early.
    let mut n = 0;
    r.scan("t", &[0], &[255], Direction::Forward, &mut |_, _| {
        n += 1;
        Ok(if n == 2 { Flow::Stop } else { Flow::Continue })
    })
    .unwrap();
    assert_eq!(n, 2);
}

#[test]
fn snapshot_round_trips_and_uncheckpointed_commits_are_lost() {
    let d = tempfile::tempdir().unwrap();
    {
        let e = open(d.path());
        let mut tx = e.write().unwrap();
        tx.insert("t", b"kept", b"1").unwrap();
        tx.insert("other", b"", b"empty key").unwrap();
        tx.commit().unwrap();
        e.checkpoint().unwrap();
        let mut tx = e.write().unwrap();
        tx.insert("t", b"lost", b"2").unwrap();
        tx.commit().unwrap();
    }
    let e = open(d.path());
    let mut r = e.read().unwrap();
    assert_eq!(r.get("t", b"kept").unwrap(), Some(b"1".to_vec()));
    assert_eq!(r.get("other", b"").unwrap(), Some(b"empty key".to_vec()));
    assert_eq!(
        r.get("t", b"lost").unwrap(),
        None,
        "memory engine is not durable"
    );
    const { assert!(!<MemoryEngine as Engine>::DURABLE) };
}

#[test]
fn corrupt_or_truncated_snapshots_are_refused_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    {
        let e = open(d.path());
        let mut tx = e.write().unwrap();
        for i in 0..100u32 {
            tx.insert("t", &i.to_be_bytes(), b"value").unwrap();
        }
        tx.commit().unwrap();
        e.checkpoint().unwrap();
    }
    let path = d.path().join(SNAPSHOT_FILE);
    let good = std::fs::read(&path).unwrap();
    // A flipped bit anywhere.
    for pos in [0, 13, good.len() / 2, good.len() - 1] {
        let mut bad = good.clone();
        bad[pos] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let err = MemoryEngine::open(d.path(), &StoreConfig::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(SNAPSHOT_FILE), "{err}");
        assert!(err.contains("CRC") || err.contains("magic"), "{err}");
    }
    // Truncation.
    std::fs::write(&path, &good[..good.len() - 9]).unwrap();
    assert!(MemoryEngine::open(d.path(), &StoreConfig::default()).is_err());
    std::fs::write(&path, &good[..5]).unwrap();
    let err = MemoryEngine::open(d.path(), &StoreConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("too short"), "{err}");
    // A length field pointing past the end, with a valid CRC: refused, not a panic.
    let mut bad = good[..good.len() - 4].to_vec();
    let name_len_at = 12 + 4;
    bad[name_len_at] = 0xFF;
    bad[name_len_at + 1] = 0xFF;
    let crc = crc32c::crc32c(&bad);
    bad.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bad).unwrap();
    let err = MemoryEngine::open(d.path(), &StoreConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("runs past the end"), "{err}");
    // The good one still loads.
    std::fs::write(&path, &good).unwrap();
    assert_eq!(open(d.path()).row_count("t"), 100);
}
