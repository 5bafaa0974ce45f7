//! The peer engines (SQLite, redb) keep the engine trait's invariants — atomicity, one writer at a
//! time, snapshot reads, scan order and bounds, missing tables read as empty, persistence, a
//! check-only open that creates nothing — and run the TPC-C workload to a consistent state. The
//! same generic checks run on both; each breaks its property on purpose where it can (an aborted
//! change must not be seen, a second writer must wait).

use keel_tpcc::check::check;
use keel_tpcc::config::StoreConfig;
use keel_tpcc::driver::{run_workload, RunOptions};
use keel_tpcc::engine::{Direction, Engine, Flow, ReadTx, ReadTxExt, WriteTx};
use keel_tpcc::load::{load, LoadOptions};
use keel_tpcc::{RedbEngine, SqliteEngine};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn config() -> StoreConfig {
    let mut c = StoreConfig::default();
    c.set("pool_size=16MiB").unwrap();
    c
}

fn atomicity<E: Engine>() {
    let d = tempfile::tempdir().unwrap();
    let e = E::open(d.path(), &config()).unwrap();
    let mut tx = e.write().unwrap();
    assert_eq!(tx.insert("t", b"a", b"1").unwrap(), None);
    tx.insert("t", b"b", b"2").unwrap();
    tx.commit().unwrap();
    {
        let mut tx = e.write().unwrap();
        assert_eq!(tx.insert("t", b"a", b"x").unwrap(), Some(b"1".to_vec()));
        assert_eq!(tx.remove("t", b"b").unwrap(), Some(b"2".to_vec()));
        tx.insert("t", b"c", b"3").unwrap();
        tx.insert("fresh", b"k", b"v").unwrap();
        // Reads see the transaction's own writes.
        assert_eq!(tx.get("t", b"a").unwrap(), Some(b"x".to_vec()));
        assert_eq!(tx.get("t", b"b").unwrap(), None);
        assert_eq!(tx.get("fresh", b"k").unwrap(), Some(b"v".to_vec()));
        // Dropped: rolled back.
    }
    let mut tx = e.write().unwrap();
    tx.insert("t", b"a", b"y").unwrap();
    tx.abort();
    let mut r = e.read().unwrap();
    assert_eq!(
        r.get("t", b"a").unwrap(),
        Some(b"1".to_vec()),
        "{}",
        E::LABEL
    );
    assert_eq!(r.get("t", b"b").unwrap(), Some(b"2".to_vec()));
    assert_eq!(r.get("t", b"c").unwrap(), None);
    assert_eq!(
        r.get("fresh", b"k").unwrap(),
        None,
        "a table created by a rolled-back transaction is gone"
    );
    drop(r);
    // A table a rolled-back transaction created can be created again.
    let mut tx = e.write().unwrap();
    tx.insert("fresh", b"k", b"w").unwrap();
    tx.commit().unwrap();
    assert_eq!(
        e.read().unwrap().get("fresh", b"k").unwrap(),
        Some(b"w".to_vec())
    );
    let s = e.stats();
    assert_eq!((s.commits, s.aborts), (2, 2), "{}", E::LABEL);
}

fn scans<E: Engine>() {
    let d = tempfile::tempdir().unwrap();
    let e = E::open(d.path(), &config()).unwrap();
    let mut tx = e.write().unwrap();
    for i in 0u8..20 {
        tx.insert("s", &[i], &[i, i]).unwrap();
    }
    tx.commit().unwrap();
    let mut r = e.read().unwrap();
    let keys = |r: &mut E::Read<'_>, lo: &[u8], hi: &[u8], dir| {
        let mut v = Vec::new();
        r.scan("s", lo, hi, dir, &mut |k, val| {
            assert_eq!(val, [k[0], k[0]]);
            v.push(k[0]);
            Ok(Flow::Continue)
        })
        .unwrap();
        v
    };
    assert_eq!(keys(&mut r, &[3], &[7], Direction::Forward), [3, 4, 5, 6]);
    assert_eq!(keys(&mut r, &[3], &[7], Direction::Reverse), [6, 5, 4, 3]);
    assert!(keys(&mut r, &[7], &[7], Direction::Forward).is_empty());
    assert!(keys(&mut r, &[9], &[2], Direction::Reverse).is_empty());
    // Stop ends the scan.
    let mut n = 0;
    r.scan("s", &[0], &[255], Direction::Forward, &mut |_, _| {
        n += 1;
        Ok(if n == 5 { Flow::Stop } else { Flow::Continue })
    })
    .unwrap();
    assert_eq!(n, 5);
    // A table that never existed reads as empty.
    assert_eq!(r.get("never", b"x").unwrap(), None);
    assert!(r.collect("never", &[0], &[255]).unwrap().is_empty());
    assert_eq!(
        r.first("s", &[0], &[255], Direction::Reverse)
            .unwrap()
            .map(|kv| kv.0),
        Some(vec![19])
    );
}

fn one_writer_and_snapshots<E: Engine>() {
    let d = tempfile::tempdir().unwrap();
    let e = E::open(d.path(), &config()).unwrap();
    let mut tx = e.write().unwrap();
    tx.insert("t", b"k", b"0").unwrap();
    tx.commit().unwrap();

    let mut snapshot = e.read().unwrap();
    assert_eq!(snapshot.get("t", b"k").unwrap(), Some(b"0".to_vec()));
    let second_started = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut first = e.write().unwrap();
        first.insert("t", b"k", b"1").unwrap();
        let h = s.spawn(|| {
            let mut second = e.write().unwrap();
            second_started.store(true, Ordering::SeqCst);
            // The first writer committed before this one could start.
            assert_eq!(second.get("t", b"k").unwrap(), Some(b"1".to_vec()));
            second.insert("t", b"k", b"2").unwrap();
            second.commit().unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !second_started.load(Ordering::SeqCst),
            "{}: a second writer started while the first was open",
            E::LABEL
        );
        first.commit().unwrap();
        h.join().unwrap();
    });
    // The snapshot taken before both commits still sees the old value.
    assert_eq!(
        snapshot.get("t", b"k").unwrap(),
        Some(b"0".to_vec()),
        "{}",
        E::LABEL
    );
    drop(snapshot);
    assert_eq!(
        e.read().unwrap().get("t", b"k").unwrap(),
        Some(b"2".to_vec())
    );
}

fn persistence_and_open_existing<E: Engine>() {
    let d = tempfile::tempdir().unwrap();
    {
        let e = E::open(d.path(), &config()).unwrap();
        let mut tx = e.write().unwrap();
        tx.insert("p", b"k", b"v").unwrap();
        tx.commit().unwrap();
        e.checkpoint().unwrap();
    }
    let e = E::open_existing(d.path(), &config()).unwrap();
    assert_eq!(
        e.read().unwrap().get("p", b"k").unwrap(),
        Some(b"v".to_vec())
    );
    drop(e);

    let empty = tempfile::tempdir().unwrap();
    let Err(err) = E::open_existing(empty.path(), &config()) else {
        panic!("{}: opened a directory without a database", E::LABEL)
    };
    assert!(err.to_string().contains("nothing was created"), "{err}");
    assert_eq!(
        std::fs::read_dir(empty.path()).unwrap().count(),
        0,
        "{}: a check-only open created files",
        E::LABEL
    );
}

fn tpcc_runs_consistently<E: Engine>() {
    let d = tempfile::tempdir().unwrap();
    let e = E::open(d.path(), &config()).unwrap();
    let mut lo = LoadOptions::new(1);
    lo.items = 1000;
    lo.seed = 3;
    load(&e, &lo).unwrap();
    let c = check(&e).unwrap();
    assert!(c.all_passed(), "{}: {}", E::LABEL, c.render());
    let ro = RunOptions {
        terminals: 3,
        warmup: Duration::ZERO,
        interval: Duration::from_secs(1),
        max_transactions: Some(120),
        print: false,
        device_dir: Some(d.path().to_path_buf()),
        ..RunOptions::default()
    };
    let r = run_workload(&e, &ro).unwrap();
    assert!(r.new_orders_committed > 0, "{}", E::LABEL);
    assert_eq!(r.engine, E::LABEL);
    assert!(!r.meta.effective.lines.is_empty());
    let c = check(&e).unwrap();
    assert!(c.all_passed(), "{}: {}", E::LABEL, c.render());
}

#[test]
fn sqlite_keeps_the_engine_invariants() {
    atomicity::<SqliteEngine>();
    scans::<SqliteEngine>();
    one_writer_and_snapshots::<SqliteEngine>();
    persistence_and_open_existing::<SqliteEngine>();
}

#[test]
fn redb_keeps_the_engine_invariants() {
    atomicity::<RedbEngine>();
    scans::<RedbEngine>();
    one_writer_and_snapshots::<RedbEngine>();
    persistence_and_open_existing::<RedbEngine>();
}

#[test]
fn sqlite_runs_tpcc_consistently() {
    tpcc_runs_consistently::<SqliteEngine>();
}

#[test]
fn redb_runs_tpcc_consistently() {
    tpcc_runs_consistently::<RedbEngine>();
}

#[test]
fn peer_labels_state_their_durability() {
    assert!(SqliteEngine::LABEL.contains("synchronous=FULL"));
    assert!(RedbEngine::LABEL.contains("Immediate"));
    const { assert!(SqliteEngine::DURABLE && RedbEngine::DURABLE) };
}
