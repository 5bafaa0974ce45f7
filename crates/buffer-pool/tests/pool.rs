//! Pool basics on the in-memory store: hits, misses, CLOCK eviction, pins, transactions
//! (commit, abort, no-steal, size limit), the flush list, checkpoints, full page images,
//! init-on-flush, prefetch, the cleaner and the slow path.

mod common;

use common::*;
use keel_buffer_pool::{MemLog, MemStore, PageOut, PageStore, PoolError, Record, RedoSink, Result};
use keel_page::{Lsn, PageId, PageSize, PageState, PageType, PAGE_HEADER_SIZE};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

const P: usize = PAGE_HEADER_SIZE + 8; // first free payload byte in test pages

#[test]
fn a_data_set_eight_times_the_pool_reads_correctly() {
    let (pool, store) = mem_pool(16);
    seed(&*store, 128);
    for round in 0..3 {
        for id in 0..128u64 {
            let g = pool.read(PageId(id)).unwrap();
            assert_eq!(check_page(&g, id), 0, "round {round}");
            assert_eq!(g.page_id(), PageId(id));
        }
    }
    let s = pool.stats();
    assert_eq!(
        s.misses,
        3 * 128,
        "every read of a cyclic scan 8x the pool misses"
    );
    assert!(s.evictions >= 3 * 128 - 16, "{s:?}");
    // A hot page stays resident: re-reading it hits.
    let before = pool.stats().hits;
    for _ in 0..10 {
        drop(pool.read(PageId(5)).unwrap());
    }
    assert!(pool.stats().hits >= before + 9);
}

#[test]
fn eviction_never_takes_a_pinned_page() {
    let (pool, store) = mem_pool_with(8, |c| c.frame_wait_ms = 20);
    seed(&*store, 20);
    let guards: Vec<_> = (0..8).map(|i| pool.read(PageId(i)).unwrap()).collect();
    // Every frame is pinned: a ninth page cannot get one, and the error says why.
    match pool.read(PageId(8)) {
        Err(PoolError::NoFreeFrame { pinned, frames, .. }) => {
            assert_eq!((pinned, frames), (8, 8));
        }
        other => panic!("expected NoFreeFrame, got {other:?}"),
    }
    for (i, g) in guards.iter().enumerate() {
        assert_eq!(check_page(g, i as u64), 0);
        assert!(pool.contains(PageId(i as u64)));
    }
    drop(guards);
    let g = pool.read(PageId(8)).unwrap();
    assert_eq!(check_page(&g, 8), 0);
}

#[test]
fn unwritten_and_corrupt_pages_are_errors_never_data() {
    let (pool, store) = mem_pool(8);
    seed(&*store, 4);
    match pool.read(PageId(100)) {
        Err(PoolError::Unwritten { page_id, .. }) => assert_eq!(page_id, PageId(100)),
        other => panic!("{other:?}"),
    }
    let mut bad = store.stored(PageId(2)).unwrap();
    bad[1000] ^= 4;
    store.put_raw(PageId(2), bad);
    let err = pool.read(PageId(2)).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains("page 2"), "{err}");
    assert!(
        !pool.contains(PageId(2)),
        "a failed load leaves no frame behind"
    );
    // The frame went back to the pool: the other pages still fit.
    for id in [0, 1, 3] {
        check_page(&pool.read(PageId(id)).unwrap(), id);
    }
}

#[test]
fn commit_gives_pages_the_group_lsn_and_lists_them_dirty() {
    let (pool, store) = mem_pool(8);
    let log = MemLog::new();
    let start = log.end_lsn();
    let txn = pool.begin();
    {
        let mut g = txn.new_page(PageId(3), PageType::RAW).unwrap();
        g.write(P, b"hello").unwrap();
    }
    let end = txn.commit(&log).unwrap();
    assert!(end > start);
    let g = pool.read(PageId(3)).unwrap();
    assert_eq!(g.lsn(), end);
    assert_eq!(&g[P..P + 5], b"hello");
    drop(g);
    assert_eq!(pool.dirty_pages(), 1);
    assert_eq!(pool.oldest_dirty_lsn(), Some(start));
    assert_eq!(
        store.stats().pages_written,
        0,
        "nothing written before a flush"
    );
    assert_eq!(pool.flush_all().unwrap(), 1);
    assert_eq!(pool.dirty_pages(), 0);
    assert_eq!(pool.oldest_dirty_lsn(), None);
    let mut buf = vec![0u8; 4096];
    match store.read_page(PageId(3), &mut buf).unwrap() {
        PageState::Valid(h) => assert_eq!(h.lsn, end),
        s => panic!("{s:?}"),
    }
    assert_eq!(&buf[P..P + 5], b"hello");
    // The group holds exactly the init and the write.
    let groups = log.groups_since(Lsn::ZERO);
    assert_eq!(groups.len(), 1);
    assert!(matches!(groups[0].records[0], Record::PageInit { .. }));
    assert!(matches!(groups[0].records[1], Record::PageWrite { .. }));
}

#[test]
fn a_move_is_one_record_and_replays_to_the_same_page() {
    let (pool, store) = mem_pool(8);
    seed(&*store, 2);
    let log = MemLog::new();
    let txn = pool.begin();
    let mut g = txn.write(PageId(1)).unwrap();
    g.write(P, &(0..=255u8).collect::<Vec<_>>()).unwrap();
    // Overlapping both ways, like a slot array shifted up and down.
    g.move_within(P, P + 4, 200).unwrap();
    g.move_within(P + 100, P + 96, 50).unwrap();
    // A range leaving the payload is refused before anything changes.
    assert!(matches!(
        g.move_within(P, 4096 - 8 - 10, 11),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert!(
        g.move_within(4, P, 10).is_err(),
        "the header is not payload"
    );
    let after = g.to_vec();
    drop(g);
    txn.commit(&log).unwrap();
    let groups = log.groups_since(Lsn::ZERO);
    let moves = groups[0]
        .records
        .iter()
        .filter(|r| {
            matches!(
                r,
                Record::PageMove { len: 200, .. } | Record::PageMove { len: 50, .. }
            )
        })
        .count();
    assert_eq!(moves, 2);
    // Redo of the group onto the page as it was reproduces the page.
    let (pool2, store2) = mem_pool(8);
    seed(&*store2, 2);
    pool2.apply_redo(Lsn::ZERO, &groups).unwrap();
    assert_eq!(
        pool2.read(PageId(1)).unwrap()[P..4096 - 8],
        after[P..4096 - 8]
    );
}

/// Abort restores every page exactly, whichever way the page's image before the transaction is
/// kept: whole (the pending version copied while a snapshot is registered), as the page's own
/// undo (its pending version when no snapshot is registered: module `versions`, invariant 5),
/// or, with versions switched off, as undo in the transaction's arena.
#[test]
fn abort_restores_pages_exactly() {
    for (copies, undo_only) in [(true, false), (false, false), (false, true)] {
        abort_restores_pages_exactly_with(copies, undo_only);
    }
}

fn abort_restores_pages_exactly_with(copies: bool, undo_only: bool) {
    let (pool, store) = mem_pool(8);
    pool.knobs()
        .skip_version_copy
        .store(undo_only, std::sync::atomic::Ordering::Relaxed);
    let _snapshot = copies.then(|| pool.snapshot());
    seed(&*store, 4);
    let before: Vec<Vec<u8>> = (0..4)
        .map(|i| pool.read(PageId(i)).unwrap().to_vec())
        .collect();
    let log = MemLog::new();
    {
        let txn = pool.begin();
        let mut a = txn.write(PageId(0)).unwrap();
        a.write(P, &[9; 100]).unwrap();
        a.modify(P + 200, 50, |b| b.reverse()).unwrap();
        a.move_within(P + 10, P + 40, 300).unwrap();
        let mut b = txn.write(PageId(1)).unwrap();
        b.write(P + 5, b"xyz").unwrap();
        b.init(PageType::BTREE_LEAF);
        b.write(P, b"after init").unwrap();
        drop((a, b));
        let mut c = txn.new_page(PageId(50), PageType::RAW).unwrap();
        c.write(P, b"fresh").unwrap();
        drop(c);
        txn.free_page(PageId(2)).unwrap();
        txn.abort();
    }
    for i in 0..4u64 {
        assert_eq!(
            pool.read(PageId(i)).unwrap().to_vec(),
            before[i as usize],
            "page {i}"
        );
    }
    assert!(
        !pool.contains(PageId(50)),
        "a page created by an aborted txn is dropped"
    );
    assert_eq!(pool.dirty_pages(), 0);
    assert_eq!(log.groups_since(Lsn::ZERO).len(), 0);
    assert_eq!(pool.stats().aborts, 1);
    // Dropping a transaction aborts it too.
    {
        let txn = pool.begin();
        txn.write(PageId(3)).unwrap().write(P, b"dropped").unwrap();
    }
    assert_eq!(pool.read(PageId(3)).unwrap().to_vec(), before[3]);
}

#[test]
fn uncommitted_pages_are_never_written() {
    let (pool, store) = mem_pool(8);
    seed(&*store, 4);
    let log = MemLog::new();
    // Page 0 has committed, unwritten changes; then a second transaction changes it again.
    let t1 = pool.begin();
    t1.write(PageId(0)).unwrap().write(P, b"committed").unwrap();
    t1.commit(&log).unwrap();
    let t2 = pool.begin();
    t2.write(PageId(0))
        .unwrap()
        .write(P, b"UNCOMMITTED")
        .unwrap();
    t2.write(PageId(1))
        .unwrap()
        .write(P, b"UNCOMMITTED")
        .unwrap();
    let written = store.stats().pages_written;
    assert_eq!(
        pool.flush_all().unwrap(),
        0,
        "no-steal: page 0 is held by t2"
    );
    assert_eq!(store.stats().pages_written, written);
    // Fill the pool with other pages: the held pages are never evicted.
    seed(&*store, 30);
    for id in 4..30 {
        match pool.read(PageId(id)) {
            Ok(g) => drop(g),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(pool.contains(PageId(0)) && pool.contains(PageId(1)));
    let mut buf = vec![0u8; 4096];
    store.read_page(PageId(0), &mut buf).unwrap();
    assert_ne!(&buf[P..P + 11], b"UNCOMMITTED");
    t2.commit(&log).unwrap();
    assert_eq!(pool.flush_all().unwrap(), 2);
    store.read_page(PageId(0), &mut buf).unwrap();
    assert_eq!(&buf[P..P + 11], b"UNCOMMITTED");
}

#[test]
fn txn_too_large_changes_nothing() {
    let (pool, store) = mem_pool_with(8, |c| c.max_txn_pct = 50);
    seed(&*store, 10);
    assert_eq!(pool.max_txn_pages(), 4);
    let log = MemLog::new();
    let txn = pool.begin();
    for id in 0..4 {
        txn.write(PageId(id)).unwrap().write(P, b"x").unwrap();
    }
    let records = txn.records();
    match txn.write(PageId(4)) {
        Err(PoolError::TxnTooLarge {
            txn_pages, limit, ..
        }) => assert_eq!((txn_pages, limit), (4, 4)),
        other => panic!("expected TxnTooLarge, got {other:?}"),
    }
    assert!(PoolError::TxnTooLarge {
        txn_pages: 4,
        frames: 8,
        limit: 4
    }
    .to_string()
    .contains("transaction too large for the pool"));
    assert_eq!((txn.pages(), txn.records()), (4, records));
    assert!(!pool.contains(PageId(4)));
    drop(txn);
    for id in 0..5 {
        assert_eq!(check_page(&pool.read(PageId(id)).unwrap(), id), 0);
    }
    assert_eq!(pool.stats().txn_too_large, 1);
    // With the whole pool allowed, running out of frames is reported the same way.
    let (pool, store) = mem_pool_with(8, |c| c.max_txn_pct = 100);
    seed(&*store, 10);
    let txn = pool.begin();
    let _g: Vec<_> = (0..8)
        .map(|id| {
            let mut g = txn.write(PageId(id)).unwrap();
            g.write(P, b"y").unwrap();
            drop(g);
        })
        .collect();
    assert!(matches!(
        txn.write(PageId(8)),
        Err(PoolError::TxnTooLarge { txn_pages: 8, .. })
    ));
    txn.commit(&log).unwrap();
}

/// A page started afresh whose committed image must be kept for a snapshot (here: one older
/// than the newest commit) and is not resident is read first; with no frame left for that
/// read while the transaction holds pages, the transaction is too large for the pool, as when
/// it takes a page itself (it said `NoFreeFrame`: a tester's 20-frame pool).
#[test]
fn no_frame_for_a_kept_image_is_a_transaction_too_large() {
    let (pool, store) = mem_pool_with(8, |c| c.max_txn_pct = 50);
    seed(&*store, 12);
    let log = MemLog::new();
    let snap = pool.snapshot();
    let t = pool.begin();
    t.write(PageId(11)).unwrap().write(P, b"later").unwrap();
    t.commit(&log).unwrap();
    // The transaction holds 3 pages; readers pin the other 5 frames.
    let txn = pool.begin();
    for id in 0..3 {
        txn.write(PageId(id)).unwrap().write(P, b"x").unwrap();
    }
    let pinned: Vec<_> = (3..8).map(|id| pool.read(PageId(id)).unwrap()).collect();
    assert!(!pool.contains(PageId(10)));
    match txn.new_page(PageId(10), PageType::RAW) {
        Err(PoolError::TxnTooLarge { txn_pages: 3, .. }) => {}
        other => panic!("expected TxnTooLarge, got {:?}", other.map(drop)),
    }
    drop(pinned);
    drop(txn);
    drop(snap);
}

/// A transaction that freed as many resident pages as it may hold (a dropped table, then a new
/// one in the same transaction) can still change and make pages: the freed pages it holds
/// unchanged make room. Pages it changed stay held (no-steal).
#[test]
fn freed_pages_held_make_room_for_the_pages_a_transaction_changes() {
    let (pool, store) = mem_pool_with(8, |c| c.max_txn_pct = 50);
    seed(&*store, 10);
    let log = MemLog::new();
    for id in 0..6 {
        drop(pool.read(PageId(id)).unwrap());
    }
    // Aborted: the freed pages are back as they were, the changed one too.
    for commit in [false, true] {
        let txn = pool.begin();
        txn.write(PageId(4)).unwrap().write(P, b"changed").unwrap();
        for id in 0..4 {
            txn.free_page(PageId(id)).unwrap();
        }
        // Without the room the freed pages give, both are TxnTooLarge.
        txn.write(PageId(5)).unwrap().write(P, b"changed").unwrap();
        drop(txn.new_page(PageId(10), PageType::RAW).unwrap());
        assert_eq!(txn.pages(), 7);
        if commit {
            txn.commit(&log).unwrap();
        } else {
            drop(txn);
            for id in 0..4 {
                assert_eq!(check_page(&pool.read(PageId(id)).unwrap(), id), 0);
            }
            for id in [4, 5] {
                let g = pool.read(PageId(id)).unwrap();
                assert_eq!(check_page(&g, id), 0, "page {id} kept an aborted change");
            }
        }
    }
    for id in [4, 5] {
        assert_eq!(&pool.read(PageId(id)).unwrap()[P..P + 7], b"changed");
    }
}

#[test]
fn latch_misuse_is_an_error_not_a_deadlock() {
    let (pool, store) = mem_pool(8);
    seed(&*store, 2);
    let txn = pool.begin();
    let mut g = txn.write(PageId(0)).unwrap();
    assert!(matches!(
        txn.write(PageId(0)),
        Err(PoolError::AlreadyLatched { .. })
    ));
    assert!(matches!(
        txn.read(PageId(0)),
        Err(PoolError::AlreadyLatched { .. })
    ));
    assert!(matches!(
        g.write(4096 - 4, b"12345678"),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert!(matches!(
        g.write(3, b"header"),
        Err(PoolError::OutOfBounds { .. })
    ));
    drop(g);
    // Another transaction cannot take a page with uncommitted changes.
    txn.write(PageId(0)).unwrap().write(P, b"a").unwrap();
    let other = pool.begin();
    assert!(matches!(
        other.write(PageId(0)),
        Err(PoolError::PageBusy { .. })
    ));
}

#[test]
fn flush_list_is_ordered_by_oldest_modification() {
    let (pool, store) = mem_pool(16);
    seed(&*store, 4);
    let log = MemLog::new();
    let mut starts = Vec::new();
    for id in [2u64, 0, 3] {
        starts.push(log.end_lsn());
        let t = pool.begin();
        t.write(PageId(id)).unwrap().write(P, b"v1").unwrap();
        t.commit(&log).unwrap();
    }
    // Changing page 2 again does not move its oldest modification.
    let t = pool.begin();
    t.write(PageId(2)).unwrap().write(P, b"v2").unwrap();
    t.commit(&log).unwrap();
    assert_eq!(pool.oldest_dirty_lsn(), Some(starts[0]));
    // Flushing below the second start writes only page 2.
    assert_eq!(pool.flush_up_to(starts[1]).unwrap(), 1);
    assert_eq!(pool.oldest_dirty_lsn(), Some(starts[1]));
    assert_eq!(pool.dirty_pages(), 2);
    assert_eq!(pool.flush_up_to(Lsn(u64::MAX)).unwrap(), 2);
    assert_eq!(pool.oldest_dirty_lsn(), None);
}

#[test]
fn checkpoint_lsn_never_passes_a_dirty_page() {
    let (pool, store) = mem_pool(16);
    seed(&*store, 4);
    let log = MemLog::new();
    let s0 = log.end_lsn();
    let t = pool.begin();
    t.write(PageId(0)).unwrap().write(P, b"a").unwrap();
    t.commit(&log).unwrap();
    for id in 1..4 {
        let t = pool.begin();
        t.write(PageId(id)).unwrap().write(P, b"b").unwrap();
        t.commit(&log).unwrap();
    }
    assert_eq!(pool.checkpoint_lsn(&log), s0);
    pool.flush_all().unwrap();
    assert_eq!(
        pool.checkpoint_lsn(&log),
        log.end_lsn(),
        "nothing dirty: the log's end"
    );
    // The knob breaks the invariant; the next test file's crash test shows the damage.
    let t = pool.begin();
    t.write(PageId(0)).unwrap().write(P, b"c").unwrap();
    let s1 = log.end_lsn();
    t.commit(&log).unwrap();
    pool.knobs()
        .checkpoint_overreport
        .store(true, Ordering::Relaxed);
    assert!(pool.checkpoint_lsn(&log) > s1, "knob: over-reports");
    pool.knobs()
        .checkpoint_overreport
        .store(false, Ordering::Relaxed);
}

/// Counts full page images per page in the groups of `log`.
fn images(log: &MemLog) -> Vec<(PageId, Vec<u8>)> {
    log.groups_since(Lsn::ZERO)
        .into_iter()
        .flat_map(|g| g.records)
        .filter_map(|r| match r {
            Record::PageImage { page_id, image } => Some((page_id, image)),
            _ => None,
        })
        .collect()
}

/// A 16-frame pool of 4 KiB pages over a memory store in full-page-writes mode.
fn fpw_pool() -> keel_buffer_pool::BufferPool {
    let store = Arc::new(MemStore::new(PageSize::K4).with_full_page_writes(true));
    let cfg = keel_buffer_pool::PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: 16 * 4096,
        ..Default::default()
    };
    keel_buffer_pool::BufferPool::new(cfg, store).unwrap()
}

#[test]
fn full_page_image_logged_once_per_checkpoint() {
    let pool = fpw_pool();
    let log = MemLog::new();
    // A new page starts with PageInit: redo rebuilds it, no image.
    let t = pool.begin();
    t.new_page(PageId(1), PageType::RAW)
        .unwrap()
        .write(P, b"first")
        .unwrap();
    t.commit(&log).unwrap();
    assert_eq!(images(&log).len(), 0);
    // Changes before the next checkpoint: still no image.
    let t = pool.begin();
    t.write(PageId(1)).unwrap().write(P, b"second").unwrap();
    t.commit(&log).unwrap();
    assert_eq!(images(&log).len(), 0);
    let before = pool.read(PageId(1)).unwrap().to_vec();
    let target = pool.begin_checkpoint(&log);
    pool.flush_up_to(target).unwrap();
    assert_eq!(pool.checkpoint_lsn(&log), target);
    // First change after the checkpoint: an image of the page as it was, at the group's start.
    let t = pool.begin();
    t.write(PageId(1)).unwrap().write(P, b"third!").unwrap();
    t.write(PageId(1)).unwrap().write(P + 10, b"more").unwrap();
    t.commit(&log).unwrap();
    let imgs = images(&log);
    assert_eq!(imgs.len(), 1);
    assert_eq!(imgs[0].0, PageId(1));
    assert_eq!(imgs[0].1, before, "the image is the page before the change");
    let last = log.groups_since(target);
    assert!(matches!(last[0].records[0], Record::PageImage { .. }));
    // Later changes before the next checkpoint: no more images.
    let t = pool.begin();
    t.write(PageId(1)).unwrap().write(P, b"fourth").unwrap();
    t.commit(&log).unwrap();
    assert_eq!(images(&log).len(), 1);
    // Next checkpoint, next image.
    let target = pool.begin_checkpoint(&log);
    pool.flush_up_to(target).unwrap();
    let t = pool.begin();
    t.write(PageId(1)).unwrap().write(P, b"fifth").unwrap();
    t.commit(&log).unwrap();
    assert_eq!(images(&log).len(), 2);
    assert_eq!(pool.stats().full_page_images, 2);
    // The knob that skips images is visible here (and caught by the crash test).
    pool.begin_checkpoint(&log);
    pool.knobs()
        .skip_full_page_images
        .store(true, Ordering::Relaxed);
    let t = pool.begin();
    t.write(PageId(1)).unwrap().write(P, b"sixth").unwrap();
    t.commit(&log).unwrap();
    assert_eq!(images(&log).len(), 2);
}

#[test]
fn init_on_flush_state_follows_the_checkpoint() {
    let (pool, store) = mem_pool(16);
    seed(&*store, 4);
    let log = MemLog::new();
    // A fresh page and a changed page.
    let t = pool.begin();
    t.new_page(PageId(10), PageType::RAW).unwrap();
    t.write(PageId(0)).unwrap().write(P, b"x").unwrap();
    t.commit(&log).unwrap();
    pool.flush_all().unwrap();
    assert_eq!(
        store.stats().pages_rebuildable,
        1,
        "only the initialised page"
    );
    // Changed again before a checkpoint passes its init: still rebuildable.
    let t = pool.begin();
    t.write(PageId(10)).unwrap().write(P, b"y").unwrap();
    t.commit(&log).unwrap();
    pool.flush_all().unwrap();
    assert_eq!(store.stats().pages_rebuildable, 2);
    // A checkpoint passes the init: the next write of the page must be protected.
    let c = pool.checkpoint_lsn(&log);
    assert_eq!(c, log.end_lsn());
    let t = pool.begin();
    t.write(PageId(10)).unwrap().write(P, b"z").unwrap();
    t.commit(&log).unwrap();
    pool.flush_all().unwrap();
    assert_eq!(store.stats().pages_rebuildable, 2, "no longer rebuildable");
    // Re-initialising it makes it rebuildable again.
    let t = pool.begin();
    t.write(PageId(10)).unwrap().init(PageType::BTREE_LEAF);
    t.commit(&log).unwrap();
    pool.flush_all().unwrap();
    assert_eq!(store.stats().pages_rebuildable, 3);
    assert_eq!(pool.stats().pages_written_rebuildable, 3);
}

/// A store whose writes wait until the test lets them go.
struct GateStore {
    inner: MemStore,
    entered: Barrier,
    release: Barrier,
    gate: std::sync::atomic::AtomicBool,
}

impl PageStore for GateStore {
    memstore_basics!();
    fn write_pages(&self, pages: &[PageOut<'_>]) -> Result<()> {
        if self.gate.load(Ordering::SeqCst) {
            self.entered.wait();
            self.release.wait();
        }
        self.inner.write_pages(pages)
    }
}

/// Invariant 4: while a page is being written without protection because redo can rebuild it,
/// the checkpoint cannot pass its PageInit (else a torn write could not be rebuilt).
#[test]
fn a_rebuildable_page_in_flight_holds_the_checkpoint_at_its_init() {
    let store = Arc::new(GateStore {
        inner: MemStore::new(PageSize::K4),
        entered: Barrier::new(2),
        release: Barrier::new(2),
        gate: false.into(),
    });
    let cfg = keel_buffer_pool::PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: 16 * 4096,
        ..Default::default()
    };
    let pool = Arc::new(keel_buffer_pool::BufferPool::new(cfg, store.clone()).unwrap());
    let log = Arc::new(MemLog::new());
    let init_start = log.end_lsn();
    let t = pool.begin();
    t.new_page(PageId(7), PageType::RAW).unwrap();
    t.commit(&*log).unwrap();
    pool.flush_all().unwrap();
    // Some other groups, then a plain change of the page: its oldest modification is now
    // well after its init.
    for _ in 0..3 {
        log.append(&[Record::Logical {
            kind: 1,
            bytes: vec![0; 100],
        }])
        .unwrap();
    }
    let change_start = log.end_lsn();
    let t = pool.begin();
    t.write(PageId(7)).unwrap().write(P, b"later").unwrap();
    t.commit(&*log).unwrap();
    assert_eq!(pool.oldest_dirty_lsn(), Some(change_start));
    store.gate.store(true, Ordering::SeqCst);
    let p2 = pool.clone();
    let h = std::thread::spawn(move || p2.flush_all());
    store.entered.wait();
    // The write is in flight, unprotected: the checkpoint must stay at or below the init.
    let c = pool.checkpoint_lsn(&*log);
    assert!(
        c <= init_start,
        "checkpoint {c} passed the PageInit at {init_start} of a page being written unprotected"
    );
    store.release.wait();
    assert_eq!(h.join().unwrap().unwrap(), 1);
    assert_eq!(store.inner.stats().pages_rebuildable, 2);
    assert_eq!(pool.checkpoint_lsn(&*log), log.end_lsn());
}

/// A store that counts batched reads.
struct CountingStore {
    inner: MemStore,
    batches: Mutex<Vec<usize>>,
}

impl PageStore for CountingStore {
    memstore_basics!();
    fn read_pages(&self, reqs: &mut [(PageId, &mut [u8])]) -> Vec<Result<PageState>> {
        self.batches.lock().unwrap().push(reqs.len());
        self.inner.read_pages(reqs)
    }
    fn write_pages(&self, pages: &[PageOut<'_>]) -> Result<()> {
        self.inner.write_pages(pages)
    }
}

#[test]
fn prefetch_reads_many_pages_in_one_batch() {
    let store = Arc::new(CountingStore {
        inner: MemStore::new(PageSize::K4),
        batches: Mutex::new(Vec::new()),
    });
    seed(&store.inner, 40);
    let cfg = keel_buffer_pool::PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: 64 * 4096,
        ..Default::default()
    };
    let pool = keel_buffer_pool::BufferPool::new(cfg, store.clone()).unwrap();
    drop(pool.read(PageId(3)).unwrap());
    let mut ids: Vec<PageId> = (0..12).map(PageId).collect();
    ids.push(PageId(5)); // duplicate
    ids.push(PageId(1000)); // never written
    let rep = pool.prefetch(&ids).unwrap();
    assert_eq!(rep.requested, 13);
    assert_eq!(rep.resident, 1);
    assert_eq!(rep.loaded, 11);
    assert_eq!(rep.failed, 1);
    assert_eq!(*store.batches.lock().unwrap(), vec![12]);
    let misses = pool.stats().misses;
    for id in 0..12 {
        check_page(&pool.read(PageId(id)).unwrap(), id);
    }
    assert_eq!(pool.stats().misses, misses, "prefetched pages hit");
    assert!(!pool.contains(PageId(1000)));
}

/// Pages 0..`n` of `pool` each changed and committed in a transaction of its own: `n` dirty
/// pages (every frame of an `n`-frame pool).
fn dirty_each(pool: &keel_buffer_pool::BufferPool, log: &MemLog, n: u64) {
    for id in 0..n {
        let t = pool.begin();
        t.write(PageId(id)).unwrap().write(P, b"dirty").unwrap();
        t.commit(log).unwrap();
    }
    assert_eq!(pool.dirty_pages(), n as usize);
}

#[test]
fn the_slow_path_is_counted_when_no_clean_frame_exists() {
    let (pool, store) = mem_pool(8);
    seed(&*store, 12);
    let log = MemLog::new();
    dirty_each(&pool, &log, 8);
    check_page(&pool.read(PageId(9)).unwrap(), 9);
    let s = pool.stats();
    assert_eq!(s.single_page_flushes, 1, "{s:?}");
    assert_eq!(pool.dirty_pages(), 7);
}

/// Module `cleaner`: an idle cleaner backs off (before, it woke every interval: ~75 times in
/// this test's 1.5 s), and a commit that leaves the pool past its dirty target wakes it even
/// when its interval is a minute away.
#[test]
fn an_idle_cleaner_backs_off_and_a_commit_past_the_dirty_target_wakes_it() {
    let (pool, store) = mem_pool_with(64, |c| {
        c.cleaner_interval_ms = 20;
    });
    seed(&*store, 64);
    let cleaner = pool.start_cleaner().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let rounds = pool.stats().cleaner_rounds;
    cleaner.stop();
    assert!(
        rounds <= 20,
        "an idle cleaner woke {rounds} times in 1.5 s at a 20 ms interval"
    );

    let (pool, store) = mem_pool_with(64, |c| {
        c.cleaner_interval_ms = 60_000;
        c.dirty_target_pct = 25;
        c.free_reserve = 0;
    });
    seed(&*store, 64);
    let cleaner = pool.start_cleaner().unwrap();
    let log = MemLog::new();
    let t = pool.begin();
    for id in 0..40 {
        t.write(PageId(id)).unwrap().write(P, b"dirty").unwrap();
    }
    t.commit(&log).unwrap();
    let t0 = std::time::Instant::now();
    while pool.dirty_pages() > 64 * 25 / 100 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let dirty = pool.dirty_pages();
    assert!(cleaner.last_error().is_none());
    cleaner.stop();
    assert!(
        dirty <= 64 * 25 / 100,
        "the commit left {dirty} of 64 pages dirty and the cleaner slept on"
    );
}

#[test]
fn the_cleaner_keeps_a_free_reserve_and_writes_cold_pages() {
    let (pool, store) = mem_pool_with(64, |c| {
        c.free_reserve = 8;
        c.cleaner_interval_ms = 1;
        c.dirty_target_pct = 25;
    });
    seed(&*store, 512);
    let cleaner = pool.start_cleaner().unwrap();
    let log = MemLog::new();
    let mut rng = Rng(7);
    for i in 0..2000u64 {
        let id = rng.below(512);
        if i % 3 == 0 {
            let t = pool.begin();
            t.write(PageId(id))
                .unwrap()
                .write(P, &i.to_le_bytes())
                .unwrap();
            t.commit(&log).unwrap();
        } else {
            drop(pool.read(PageId(id)).unwrap());
        }
        if i % 200 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    let s = pool.stats();
    assert!(cleaner.last_error().is_none());
    cleaner.stop();
    assert!(s.cleaner_rounds > 0, "{s:?}");
    assert!(s.cleaner_evictions > 0, "{s:?}");
    assert!(
        s.cleaner_lru_pages + s.flush_list_pages > 0,
        "the cleaner wrote pages: {s:?}"
    );
    assert!(s.dirty_pages as usize <= 64 * 25 / 100 + 1, "{s:?}");
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("single_page_flushes"));
}

/// A store whose first write waits for the test, and which records any page written by two
/// calls at once.
struct OverlapStore {
    inner: MemStore,
    entered: Barrier,
    release: Barrier,
    first: std::sync::atomic::AtomicBool,
    in_flight: Mutex<Vec<PageId>>,
    overlaps: Mutex<Vec<PageId>>,
}

impl PageStore for OverlapStore {
    memstore_basics!();
    fn write_pages(&self, pages: &[PageOut<'_>]) -> Result<()> {
        {
            let mut f = self.in_flight.lock().unwrap();
            for p in pages {
                if f.contains(&p.page_id) {
                    self.overlaps.lock().unwrap().push(p.page_id);
                }
                f.push(p.page_id);
            }
        }
        if self.first.swap(false, Ordering::SeqCst) {
            self.entered.wait();
            self.release.wait();
        }
        let r = self.inner.write_pages(pages);
        let mut f = self.in_flight.lock().unwrap();
        for p in pages {
            if let Some(i) = f.iter().position(|x| *x == p.page_id) {
                f.remove(i);
            }
        }
        r
    }
}

/// Two writes of one page are never in flight together: a page freed while the cleaner writes
/// it keeps its frame until that write is done, so the page re-created in another frame cannot
/// be written concurrently (the older write could land last and overwrite the newer page —
/// found by the crash soak as a page on disk older than the checkpoint).
#[test]
fn a_page_freed_while_being_written_is_not_written_twice_at_once() {
    let store = Arc::new(OverlapStore {
        inner: MemStore::new(PageSize::K4),
        entered: Barrier::new(2),
        release: Barrier::new(2),
        first: false.into(),
        in_flight: Mutex::new(Vec::new()),
        overlaps: Mutex::new(Vec::new()),
    });
    let cfg = keel_buffer_pool::PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: 16 * 4096,
        ..Default::default()
    };
    let pool = Arc::new(keel_buffer_pool::BufferPool::new(cfg, store.clone()).unwrap());
    let log = Arc::new(MemLog::new());
    let t = pool.begin();
    t.new_page(PageId(5), PageType::RAW)
        .unwrap()
        .write(P, b"v1")
        .unwrap();
    t.commit(&*log).unwrap();
    store.first.store(true, Ordering::SeqCst);
    let (p1, s1) = (pool.clone(), store.clone());
    let flusher = std::thread::spawn(move || {
        let r = p1.flush_all();
        drop(s1);
        r
    });
    store.entered.wait(); // v1 of page 5 is being written
    let (p2, l2) = (pool.clone(), log.clone());
    let txn = std::thread::spawn(move || {
        let t = p2.begin();
        t.free_page(PageId(5)).unwrap();
        t.commit(&*l2).unwrap();
        let t = p2.begin();
        t.new_page(PageId(5), PageType::RAW)
            .unwrap()
            .write(P, b"v2")
            .unwrap();
        t.commit(&*l2).unwrap();
        p2.flush_all().unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    store.release.wait();
    flusher.join().unwrap().unwrap();
    txn.join().unwrap();
    assert!(
        store.overlaps.lock().unwrap().is_empty(),
        "page written by two calls at once: {:?}",
        store.overlaps.lock().unwrap()
    );
    let mut buf = vec![0u8; 4096];
    store.inner.read_page(PageId(5), &mut buf).unwrap();
    assert_eq!(&buf[P..P + 2], b"v2");
}

/// Full-page-writes mode: a checkpoint never passes the last full image of a page still to be
/// written. Page 1 logs its image after checkpoint A, is written clean, and is changed again
/// (no new image: its LSN is past A's horizon). When checkpoint B has written only part of what
/// is older than its horizon, recording the oldest dirty page's LSN would put the checkpoint
/// after page 1's image: page 1's next write, if torn, could not be rebuilt. With the knob
/// `fpw_checkpoint_passes_images` (the old rule) the check below fails.
#[test]
fn a_full_page_writes_checkpoint_never_passes_a_dirty_pages_image() {
    for broken in [false, true] {
        let pool = fpw_pool();
        pool.knobs()
            .fpw_checkpoint_passes_images
            .store(broken, Ordering::Relaxed);
        let log = MemLog::new();
        let change = |id: u64, what: &[u8]| {
            let t = pool.begin();
            t.write(PageId(id)).unwrap().write(P, what).unwrap();
            t.commit(&log).unwrap();
        };
        let t = pool.begin();
        for id in [1, 2] {
            t.new_page(PageId(id), PageType::RAW)
                .unwrap()
                .write(P, b"new")
                .unwrap();
        }
        t.commit(&log).unwrap();
        // Checkpoint A.
        let a = pool.begin_checkpoint(&log);
        pool.flush_up_to(a).unwrap();
        assert_eq!(pool.checkpoint_lsn(&log), a);
        // Page 1: image (first change after A), then written clean.
        change(1, b"one");
        pool.flush_up_to(log.end_lsn()).unwrap();
        // Page 2 changes (with its image), then page 1 again: no image this time.
        change(2, b"two");
        let images_before = images(&log).len();
        change(1, b"one again");
        assert_eq!(
            images(&log).len(),
            images_before,
            "page 1 logs no new image"
        );
        // Checkpoint B writes only page 2 (the older of the two dirty pages) so far.
        let b = pool.begin_checkpoint(&log);
        let page1_oldest = log.groups_since(a).last().unwrap().start_lsn;
        pool.flush_up_to(page1_oldest).unwrap();
        let c = pool.checkpoint_lsn(&log);
        // Every dirty page's redo since the checkpoint must hold an image (or init) of it.
        let has_image = log.groups_since(c).iter().any(|g| {
            g.records.iter().any(|r| {
                matches!(r, Record::PageImage { page_id, .. } | Record::PageInit { page_id, .. }
                    if *page_id == PageId(1))
            })
        });
        assert_eq!(
            has_image, !broken,
            "checkpoint {c} (horizon {b}): page 1's redo since it holds an image: {has_image}"
        );
        if !broken {
            // Once everything older than the horizon is written, the checkpoint moves to it.
            pool.flush_up_to(b).unwrap();
            assert_eq!(pool.checkpoint_lsn(&log), b);
        }
    }
}

/// The write guard's two ways to change a page meet one vocabulary (`keel_page::PageOp`): a
/// free-form `rewrite` is logged as exactly the runs that changed (replaying the group's records
/// with `Record::page_op` on the old page gives the new page, header and trailer untouched), and
/// an op that leaves the payload is refused by the one bounds check, recording nothing.
#[test]
fn rewrite_logs_exactly_the_change() {
    let (pool, store) = mem_pool(8);
    seed(&*store, 2);
    let before = pool.read(PageId(0)).unwrap().to_vec();
    let log = MemLog::new();
    let txn = pool.begin();
    let mut g = txn.write(PageId(0)).unwrap();
    let n = g
        .rewrite(|p| {
            p[P..P + 3].copy_from_slice(b"abc");
            p[P + 100] ^= 0xFF;
            p.copy_within(P + 500..P + 900, P + 520);
            7
        })
        .unwrap();
    assert_eq!(n, 7);
    let after = g.to_vec();
    let records = txn.records();
    // Refused by the bounds check: the header, past the trailer, an overflowing move.
    for op in [
        keel_page::PageOp::Write {
            offset: 0,
            bytes: b"x",
        },
        keel_page::PageOp::Write {
            offset: 4096 - 4,
            bytes: b"x",
        },
        keel_page::PageOp::Move {
            src: usize::MAX,
            dst: P,
            len: 2,
        },
    ] {
        assert!(matches!(g.apply(op), Err(PoolError::OutOfBounds { .. })));
    }
    assert_eq!(g.to_vec(), after, "a refused op changed the page");
    assert_eq!(txn.records(), records, "a refused op was logged");
    drop(g);
    txn.commit(&log).unwrap();
    let groups = log.groups_since(Lsn::ZERO);
    let mut replay = before.clone();
    for r in &groups[0].records {
        let (id, op) = r.page_op().expect("only page writes");
        assert_eq!(id, PageId(0));
        op.apply(&mut replay).unwrap();
    }
    let payload = keel_page::payload_range(replay.len());
    assert_eq!(replay[payload.clone()], after[payload]);
    assert_eq!(replay[..PAGE_HEADER_SIZE], before[..PAGE_HEADER_SIZE]);
}

/// The log-space check's bound (`Txn::log_bytes_bound`) covers what the commit appends, in
/// both modes, and charges page images only where the store logs them: in doublewrite-like
/// modes it is exact, so a large transaction is not refused for images it will never log.
#[test]
fn log_bytes_bound_covers_the_commit_and_charges_images_only_when_logged() {
    for fpw in [false, true] {
        let store = Arc::new(MemStore::new(PageSize::K4).with_full_page_writes(fpw));
        let cfg = keel_buffer_pool::PoolConfig {
            page_size: PageSize::K4,
            pool_bytes: 16 * 4096,
            ..Default::default()
        };
        let pool = keel_buffer_pool::BufferPool::new(cfg, store).unwrap();
        let log = MemLog::new();
        let t = pool.begin();
        for id in 1..=4 {
            t.new_page(PageId(id), PageType::RAW)
                .unwrap()
                .write(P, b"first")
                .unwrap();
        }
        t.commit(&log).unwrap();
        let target = pool.begin_checkpoint(&log);
        pool.flush_up_to(target).unwrap();
        // First changes after the checkpoint: in full-page-writes mode each page gets an image.
        let t = pool.begin();
        for id in 1..=4 {
            t.write(PageId(id)).unwrap().write(P, b"second!").unwrap();
        }
        let bound = t.log_bytes_bound();
        let start = log.end_lsn();
        t.commit(&log).unwrap();
        let used = log.end_lsn().0 - start.0;
        assert!(used <= bound, "fpw={fpw}: appended {used} > bound {bound}");
        if fpw {
            assert_eq!(images(&log).len(), 4);
            assert!(bound >= 4 * 4096, "fpw: images are charged");
        } else {
            assert_eq!(images(&log).len(), 0);
            // No images: the bound is the group itself in the plain encoding (the most any log
            // version takes); the log wrote it compactly.
            let g = log.groups_since(start).pop().unwrap();
            assert_eq!(bound, keel_redo_log::inspect::group_len_bound(&g.records));
            assert_eq!(used, keel_redo_log::inspect::group_len(&g.records));
            assert!(bound < 4096, "no images: none charged ({bound})");
        }
    }
}

/// A dirty page that a commit frees leaves the pool unwritten; until the free is durable the
/// checkpoint must not pass the page's oldest change (a crash losing the free would replay the
/// page's later records onto a disk copy that never had the earlier ones). The knob
/// `checkpoint_ignores_unwritten_frees` breaks the rule on purpose.
#[test]
fn a_checkpoint_waits_for_the_free_of_an_unwritten_page_to_be_durable() {
    use common::modellog::ModelLog;
    use keel_flush::WalFlush;
    for knob in [false, true] {
        let (pool, store) = mem_pool(16);
        seed(&*store, 4);
        pool.knobs()
            .checkpoint_ignores_unwritten_frees
            .store(knob, Ordering::Relaxed);
        let log = ModelLog::new();
        let t = pool.begin();
        t.write(PageId(1)).unwrap().write(P, &[7; 8]).unwrap();
        let first = log.end_lsn();
        let end1 = t.commit(&log).unwrap();
        log.flush_to(end1).unwrap();
        let t = pool.begin();
        t.free_page(PageId(1)).unwrap();
        let end2 = t.commit(&log).unwrap();
        assert!(
            RedoSink::durable_lsn(&log) < end2,
            "the free is not durable yet"
        );
        assert_eq!(pool.dirty_pages(), 0, "the freed page left unwritten");
        let c = pool.checkpoint_lsn(&log);
        if knob {
            assert!(
                c > first,
                "the knob lets the checkpoint pass page 1's change"
            );
            continue;
        }
        assert!(
            c <= first,
            "checkpoint {c} passed page 1's change at {first}"
        );
        log.flush_to(end2).unwrap();
        assert_eq!(
            pool.checkpoint_lsn(&log),
            end2,
            "durable free: the checkpoint moves on"
        );
    }
}

/// Module `txn::precopy`: a copy offered to a transaction is used as the page's version and
/// undo only if it is still the page. Page 0 is copied, then changed by a commit; a transaction
/// offered the (now stale) copy changes page 0 and aborts: the page must be the newer commit,
/// and a snapshot taken during the transaction must read the newer commit too. Returns whether
/// both held. With the knob `trust_stale_copies`, the stale copy is used and neither holds.
fn stale_copy_run(trust: bool) -> bool {
    let (pool, store) = mem_pool(8);
    pool.knobs()
        .trust_stale_copies
        .store(trust, Ordering::Relaxed);
    seed(&*store, 2);
    let log = MemLog::new();
    drop(pool.read(PageId(0)).unwrap());
    let copy = pool
        .copy_committed(PageId(0), Lsn(u64::MAX))
        .expect("resident page 0");
    assert_eq!(copy.page_id(), PageId(0));
    let t1 = pool.begin();
    t1.write(PageId(0)).unwrap().write(P, b"newer").unwrap();
    t1.commit(&log).unwrap();
    let committed = pool.read(PageId(0)).unwrap().to_vec();
    let t2 = pool.begin();
    t2.offer_copies([copy]);
    t2.write(PageId(0))
        .unwrap()
        .write(P, b"UNCOMMITTED")
        .unwrap();
    let snap = pool.snapshot();
    let seen = pool.read_at(PageId(0), &snap).unwrap()[P..P + 5].to_vec();
    drop(snap);
    t2.abort();
    let after = pool.read(PageId(0)).unwrap().to_vec();
    let s = pool.stats();
    assert_eq!(s.copies_used + s.copies_stale, 1);
    seen == b"newer" && after == committed
}

#[test]
fn a_stale_copy_is_never_used() {
    assert!(stale_copy_run(false), "a stale copy was used");
    assert!(
        !stale_copy_run(true),
        "the knob trust_stale_copies should make the stale copy the page's version and undo"
    );
}

/// A current copy is used (the transaction copies nothing under its hold), serves snapshots
/// and the abort; a page owned by a transaction is not copied (it may hold uncommitted bytes).
#[test]
fn a_current_copy_is_used_and_an_owned_page_is_not_copied() {
    let (pool, store) = mem_pool(8);
    seed(&*store, 2);
    let log = MemLog::new();
    let before = pool.read(PageId(1)).unwrap().to_vec();
    let copy = pool
        .copy_committed(PageId(1), Lsn(u64::MAX))
        .expect("resident page 1");
    let copied = pool.stats().versions_copied;
    let t = pool.begin();
    t.offer_copies([copy]);
    t.write(PageId(1))
        .unwrap()
        .write(P, b"UNCOMMITTED")
        .unwrap();
    assert_eq!(pool.stats().copies_used, 1);
    assert_eq!(pool.stats().versions_copied, copied + 1);
    assert!(
        pool.copy_committed(PageId(1), Lsn(u64::MAX)).is_none(),
        "an owned page was copied"
    );
    let snap = pool.snapshot();
    assert_eq!(pool.read_at(PageId(1), &snap).unwrap().to_vec(), before);
    drop(snap);
    t.abort();
    assert_eq!(pool.read(PageId(1)).unwrap().to_vec(), before);
    // Not resident: no copy (never a disk read).
    assert!(pool.copy_committed(PageId(40), Lsn(u64::MAX)).is_none());
    // Changed after the bound: no copy.
    let lsn = pool.read(PageId(1)).unwrap().lsn();
    if lsn > Lsn::ZERO {
        assert!(pool.copy_committed(PageId(1), Lsn(lsn.0 - 1)).is_none());
    }
    // Committed through a copy, the page is the transaction's.
    let copy = pool
        .copy_committed(PageId(1), Lsn(u64::MAX))
        .expect("resident page 1");
    let t = pool.begin();
    t.offer_copies([copy]);
    t.write(PageId(1)).unwrap().write(P, b"committed").unwrap();
    t.commit(&log).unwrap();
    assert_eq!(&pool.read(PageId(1)).unwrap()[P..P + 9], b"committed");
    assert_eq!(pool.stats().copies_used, 2);
}

/// A store whose page writes fail, poisoning it, from the first one on.
struct PoisonedStore {
    inner: MemStore,
    poisoned: std::sync::atomic::AtomicBool,
}

impl PageStore for PoisonedStore {
    memstore_basics!();
    fn write_pages(&self, _pages: &[PageOut<'_>]) -> Result<()> {
        self.poisoned.store(true, Ordering::SeqCst);
        Err(keel_buffer_pool::PoolError::Config(
            "the store is poisoned (a test's failed write)".into(),
        ))
    }
    fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }
}

/// Module `residency`: a poisoned store's dirty pages can never be written, so once every frame
/// is dirty no page can come into the pool; reads of pages not resident then read from the data
/// file into a buffer of their own and see what was committed (found by `fs_full.rs`: a full
/// disk met with every frame dirty refused every later read). Resident pages are still read
/// from their frames (their newest committed version may be only there), and a store that is
/// not poisoned still says it has no frame.
#[test]
fn a_poisoned_store_with_every_frame_dirty_still_reads_committed_pages() {
    let store = Arc::new(PoisonedStore {
        inner: MemStore::new(PageSize::K4),
        poisoned: std::sync::atomic::AtomicBool::new(false),
    });
    seed(&store.inner, 12);
    let cfg = keel_buffer_pool::PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: 8 * 4096,
        frame_wait_ms: 50,
        ..Default::default()
    };
    let pool = keel_buffer_pool::BufferPool::new(cfg, store.clone()).unwrap();
    let log = MemLog::new();
    dirty_each(&pool, &log, 8);
    // The slow path's write of a cold dirty page fails and poisons the store; the read goes on
    // outside the pool.
    check_page(&pool.read(PageId(9)).unwrap(), 9);
    assert!(store.is_poisoned());
    check_page(&pool.read(PageId(10)).unwrap(), 10);
    assert!(
        !pool.contains(PageId(10)),
        "the page was read outside the pool"
    );
    // A resident page is its frame, with the committed change.
    let g = pool.read(PageId(3)).unwrap();
    assert_eq!(&g[P..P + 5], b"dirty");
    drop(g);
    // Without the poison, no frame is an error, as before.
    store.poisoned.store(false, Ordering::SeqCst);
    let t = pool.begin();
    assert!(t.write(PageId(11)).is_err());
}
