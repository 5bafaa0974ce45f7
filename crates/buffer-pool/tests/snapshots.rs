//! Snapshot reads (module `versions`): a reader at a snapshot sees every page exactly as the
//! commits up to its snapshot left it — never an uncommitted change, never a later commit —
//! while a writer changes, frees and re-uses pages, aborts, and the pool evicts and writes
//! pages under it. The model is replayed from a seed; a knob that skips the writer's copy of
//! the committed image breaks it on purpose.

mod common;

use common::*;
use keel_buffer_pool::{BufferPool, MemLog, PoolError, RedoSink, Snapshot};
use keel_page::{PageId, PageType, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const P: usize = PAGE_HEADER_SIZE + 8;
const PAGES: u64 = 48;

/// What a page holds at a point in time: its payload (every byte between header and trailer),
/// or freed.
type State = HashMap<u64, Option<Vec<u8>>>;

fn marker(page: &[u8]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m.copy_from_slice(&page[P..P + 16]);
    m
}

fn payload(page: &[u8]) -> &[u8] {
    &page[PAGE_HEADER_SIZE..page.len() - PAGE_TRAILER_SIZE]
}

/// Every live page of `want` read at `snap` holds exactly its payload. Returns the first
/// mismatch.
fn check(pool: &BufferPool, snap: &Snapshot, want: &State, what: &str) -> Result<(), String> {
    for (&id, m) in want {
        let Some(m) = m else { continue };
        match pool.read_at(PageId(id), snap) {
            Ok(g) => {
                if payload(&g) != &m[..] {
                    let at = payload(&g).iter().zip(m).position(|(a, b)| a != b);
                    return Err(format!(
                        "{what}: page {id} at snapshot {}: payload differs first at byte {at:?}",
                        snap.lsn(),
                    ));
                }
            }
            Err(PoolError::SnapshotTooOld { .. }) => return Ok(()),
            Err(e) => return Err(format!("{what}: page {id}: {e}")),
        }
    }
    Ok(())
}

/// What a run breaks on purpose.
#[derive(Clone, Copy, Default)]
struct Broken {
    /// The writer keeps no committed image (invariant 1).
    skip_copy: bool,
    /// A commit publishes its undo-kept versions unrebuilt while snapshots are registered
    /// (invariant 5).
    publish_undo: bool,
}

/// One seeded run: transactions that write ranges, move bytes, free and re-use pages, commit
/// or abort, with snapshots taken and checked at random points (also between the changes of
/// a transaction). Half the transactions start with no snapshot registered, so they keep
/// their versions as undo (module `versions`, invariant 5), and snapshots taken while they
/// run rebuild pages from it.
fn run(seed: u64, broken: Broken, budget: u64) -> Result<(u64, u64), String> {
    let (pool, store) = mem_pool_with(16, |c| c.version_budget = budget);
    pool.knobs()
        .skip_version_copy
        .store(broken.skip_copy, Ordering::Relaxed);
    pool.knobs()
        .publish_undo_versions
        .store(broken.publish_undo, Ordering::Relaxed);
    seed_pages(&*store);
    let log = MemLog::new();
    let mut rng = Rng(seed);
    let mut committed: State = (0..PAGES)
        .map(|id| {
            let img = page_image(4096, id, 0, keel_page::Lsn(1));
            (id, Some(payload(&img).to_vec()))
        })
        .collect();
    let len = 4096 - PAGE_HEADER_SIZE - PAGE_TRAILER_SIZE;
    let mut snaps: Vec<(Snapshot, State)> = Vec::new();
    let mut checks = 0u64;
    for round in 0..60u32 {
        if rng.below(2) == 0 {
            // No snapshot while the transaction takes its first pages: undo versions.
            snaps.clear();
        } else if rng.below(3) == 0 || snaps.is_empty() {
            snaps.push((pool.snapshot(), committed.clone()));
        }
        if rng.below(4) == 0 && !snaps.is_empty() {
            let i = rng.below(snaps.len() as u64) as usize;
            snaps.swap_remove(i);
        }
        let txn = pool.begin();
        let mut next = committed.clone();
        for _ in 0..1 + rng.below(8) {
            let id = rng.below(PAGES);
            match (next[&id].is_some(), rng.below(6)) {
                (true, 0) => {
                    txn.free_page(PageId(id)).map_err(|e| e.to_string())?;
                    next.insert(id, None);
                }
                (true, k) => {
                    let mut g = txn.write(PageId(id)).map_err(|e| e.to_string())?;
                    let page = next.get_mut(&id).and_then(|p| p.as_mut()).ok_or("page")?;
                    // Several changes, some overlapping: undo must run them back newest first.
                    // Sometimes so many that the page's undo passes a page and it keeps a
                    // copy instead (module `versions::txn_undo`, invariant 4).
                    let changes = if rng.below(10) == 0 { 1000 } else { 1 + k % 3 };
                    for _ in 0..changes {
                        let n = 1 + rng.below(64) as usize;
                        let at = rng.below((len - n) as u64) as usize;
                        if rng.below(3) == 0 {
                            let to = rng.below((len - n) as u64) as usize;
                            g.move_within(PAGE_HEADER_SIZE + at, PAGE_HEADER_SIZE + to, n)
                                .map_err(|e| e.to_string())?;
                            page.copy_within(at..at + n, to);
                        } else {
                            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                            g.write(PAGE_HEADER_SIZE + at, &bytes)
                                .map_err(|e| e.to_string())?;
                            page[at..at + n].copy_from_slice(&bytes);
                        }
                    }
                }
                (false, _) => {
                    // Re-use a freed page (possibly freed by this same transaction).
                    let mut g = txn
                        .new_page(PageId(id), PageType::RAW)
                        .map_err(|e| e.to_string())?;
                    let m = [(round as u8).wrapping_mul(7) ^ rng.next() as u8; 16];
                    g.write(P, &m).map_err(|e| e.to_string())?;
                    let mut page = vec![0u8; len];
                    page[P - PAGE_HEADER_SIZE..P - PAGE_HEADER_SIZE + 16].copy_from_slice(&m);
                    next.insert(id, Some(page));
                }
            }
            if rng.below(4) == 0 {
                // A snapshot taken between two changes reads the committed state.
                snaps.push((pool.snapshot(), committed.clone()));
            }
        }
        // Mid-transaction: no snapshot sees the uncommitted changes; a snapshot taken now
        // sees the committed state.
        // (Not always: reading every page rebuilds every undo version, and the commit's own
        // rebuild must be tested too.)
        let now = pool.snapshot();
        if rng.below(3) == 0 {
            check(
                &pool,
                &now,
                &committed,
                &format!("round {round} mid-txn, new"),
            )?;
        }
        // Each snapshot is read at some points only: a page a snapshot first reads rounds
        // after it was changed must still read right.
        for (s, want) in &snaps {
            if rng.below(2) == 0 {
                check(&pool, s, want, &format!("round {round} mid-txn"))?;
                checks += 1;
            }
        }
        drop(now);
        if rng.below(4) == 0 {
            drop(txn);
        } else {
            txn.commit(&log).map_err(|e| e.to_string())?;
            committed = next;
        }
        if rng.below(3) == 0 {
            // Write dirty pages back so later reads of evicted pages come from the store.
            pool.flush_up_to(log.end_lsn()).map_err(|e| e.to_string())?;
        }
        for (s, want) in &snaps {
            if rng.below(3) == 0 {
                check(&pool, s, want, &format!("round {round} after"))?;
                checks += 1;
            }
        }
        // The pool itself holds the newest commit (aborts restored every byte).
        let latest = pool.snapshot();
        check(&pool, &latest, &committed, &format!("round {round} latest"))?;
    }
    for (s, want) in &snaps {
        check(&pool, s, want, "at the end")?;
        checks += 1;
    }
    let refused = pool.version_counts().refused;
    drop(snaps);
    let c = pool.version_counts();
    if c.kept != 0 || c.bytes != 0 || c.snapshots != 0 {
        return Err(format!("versions left with no snapshot: {c:?}"));
    }
    Ok((checks, refused))
}

fn seed_pages(store: &dyn keel_buffer_pool::PageStore) {
    seed(store, PAGES);
}

#[test]
fn a_reader_never_sees_an_uncommitted_change() {
    let mut total = 0;
    for s in 0..40 {
        let (checks, refused) =
            run(s, Broken::default(), 64 << 20).unwrap_or_else(|e| panic!("seed {s}: {e}"));
        assert_eq!(refused, 0, "a budget of 64 MiB refuses nothing here");
        total += checks;
    }
    assert!(total > 1000, "{total} snapshot checks");
}

/// How many of 40 seeds of the model, run with `broken`, fail.
fn seeds_caught(broken: Broken) -> usize {
    (0..40)
        .filter(|&s| run(s, broken, 64 << 20).is_err())
        .count()
}

#[test]
fn skipping_the_writers_copy_is_caught() {
    // Knob: the writer changes pages without keeping their committed image (invariant 1
    // broken). Some seed must show a snapshot reading a change it must not see.
    let broken = Broken {
        skip_copy: true,
        ..Broken::default()
    };
    assert!(
        seeds_caught(broken) > 0,
        "the model did not catch the missing copy"
    );
}

#[test]
fn publishing_undo_versions_unrebuilt_is_caught() {
    // Knob: a commit publishes while a snapshot is registered without rebuilding the versions
    // it kept as undo (invariant 5 broken). The snapshot later rebuilds from a frame that has
    // been stamped and changed since: some seed must show a wrong page.
    let broken = Broken {
        publish_undo: true,
        ..Broken::default()
    };
    assert!(
        seeds_caught(broken) > 0,
        "the model did not catch unrebuilt undo versions"
    );
}

#[test]
fn a_small_budget_refuses_old_snapshots_but_never_lies() {
    // 3 pages of versions: old snapshots are refused (SnapshotTooOld), and a refused one never
    // returns a page (check() accepts only the right marker or the refusal).
    let mut refused = 0;
    for s in 0..40 {
        let (_, r) =
            run(s, Broken::default(), 3 * 4096).unwrap_or_else(|e| panic!("seed {s}: {e}"));
        refused += r;
    }
    assert!(refused > 0, "the budget never bit");
}

#[test]
fn snapshots_move_between_threads() {
    let (pool, store) = mem_pool(16);
    seed_pages(&*store);
    let log = MemLog::new();
    let snap = pool.snapshot();
    let before = marker(&pool.read_at(PageId(3), &snap).unwrap());
    let txn = pool.begin();
    txn.write(PageId(3)).unwrap().write(P, &[9u8; 16]).unwrap();
    txn.commit(&log).unwrap();
    let pool2: Arc<BufferPool> = pool.clone();
    let seen = std::thread::spawn(move || marker(&pool2.read_at(PageId(3), &snap).unwrap()))
        .join()
        .unwrap();
    assert_eq!(seen, before);
    assert_eq!(marker(&pool.read(PageId(3)).unwrap()), [9u8; 16]);
}

/// Threads: a writer commits transactions that each stamp the same number on 8 pages (and
/// aborts some), while two readers take, read and drop snapshots as fast as they can (every
/// drop collects versions, concurrently with the writer's seals and publishes). Every
/// snapshot must see one stamp on all 8 pages — a whole commit or none — and never a stamp
/// older than the newest commit published before it began.
#[test]
fn readers_on_threads_see_whole_commits() {
    let (pool, store) = mem_pool(32);
    seed_pages(&*store);
    let log = MemLog::new();
    let pages: Vec<PageId> = (0..8).map(|i| PageId(i * 5)).collect();
    let stamp = |n: u64| {
        let mut m = [0u8; 16];
        m[..8].copy_from_slice(&n.to_le_bytes());
        m
    };
    {
        let txn = pool.begin();
        for &p in &pages {
            txn.write(p).unwrap().write(P, &stamp(0)).unwrap();
        }
        txn.commit(&log).unwrap();
    }
    let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (pool, pages, published, stop) =
                (pool.clone(), pages.clone(), published.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let floor = published.load(Ordering::SeqCst);
                    let snap = pool.snapshot();
                    let seen: Vec<[u8; 16]> = pages
                        .iter()
                        .map(|&p| marker(&pool.read_at(p, &snap).unwrap()))
                        .collect();
                    assert!(
                        seen.iter().all(|m| *m == seen[0]),
                        "a torn commit: {seen:?}"
                    );
                    let s = u64::from_le_bytes(seen[0][..8].try_into().unwrap());
                    assert!(
                        s >= floor,
                        "snapshot saw stamp {s}, older than published {floor}"
                    );
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut rng = Rng(5);
    for k in 1..=3000u64 {
        let txn = pool.begin();
        for &p in &pages {
            txn.write(p).unwrap().write(P, &stamp(k)).unwrap();
        }
        if rng.below(5) == 0 {
            drop(txn);
            continue;
        }
        txn.commit(&log).unwrap();
        published.store(k, Ordering::SeqCst);
        if k % 500 == 0 {
            pool.flush_up_to(log.end_lsn()).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(reads > 0);
    let c = pool.version_counts();
    assert_eq!((c.kept, c.snapshots), (0, 0), "{c:?}");
}

/// Module `versions`, invariant 5, step by step: a transaction that starts with no snapshot
/// keeps undo, not a copy; a snapshot taken while it runs rebuilds the page from it; one
/// registered at its commit makes the commit rebuild the image before it publishes, so a
/// later change of the page (by the next transaction) cannot reach that snapshot. The knob
/// `publish_undo_versions` (publish without rebuilding) breaks the last step.
fn undo_versions_step_by_step(publish_undo: bool) -> Result<(), String> {
    let (pool, store) = mem_pool(16);
    pool.knobs()
        .publish_undo_versions
        .store(publish_undo, Ordering::Relaxed);
    seed_pages(&*store);
    let log = MemLog::new();
    let e = |e: PoolError| e.to_string();
    let original = |id: u64| -> Result<Vec<u8>, String> {
        Ok(payload(&pool.read(PageId(id)).map_err(e)?).to_vec())
    };
    let (seven, eight) = (original(7)?, original(8)?);
    let copied = pool.version_counts().copied;
    let txn = pool.begin();
    for id in [7, 8] {
        txn.write(PageId(id))
            .and_then(|mut g| g.write(P, &[1u8; 16]))
            .map_err(e)?;
    }
    if pool.version_counts().copied != copied {
        return Err("a transaction with no snapshot registered copied its pages".into());
    }
    // Page 7 is rebuilt by a reader mid-transaction; page 8 is left to the commit.
    let during = pool.snapshot();
    if payload(&pool.read_at(PageId(7), &during).map_err(e)?) != &seven[..] {
        return Err("a snapshot taken mid-transaction did not rebuild the page".into());
    }
    txn.write(PageId(8))
        .and_then(|mut g| g.write(P + 100, &[2u8; 16]))
        .map_err(e)?;
    txn.commit(&log).map_err(e)?;
    // The next transaction changes page 8 where the first did not.
    let txn = pool.begin();
    txn.write(PageId(8))
        .and_then(|mut g| g.write(P + 200, &[3u8; 16]))
        .map_err(e)?;
    txn.commit(&log).map_err(e)?;
    for (id, want) in [(7, &seven), (8, &eight)] {
        if payload(&pool.read_at(PageId(id), &during).map_err(e)?) != &want[..] {
            return Err(format!(
                "page {id}: a snapshot older than two commits read a changed page"
            ));
        }
    }
    Ok(())
}

#[test]
fn undo_versions_are_rebuilt_for_registered_snapshots() {
    undo_versions_step_by_step(false).unwrap();
    assert!(
        undo_versions_step_by_step(true).is_err(),
        "publishing undo versions unrebuilt went unnoticed"
    );
}

/// Readers of one page at a snapshot while a commit frees the page (its frame dropped
/// unwritten, its image kept as the snapshot's version): a reader that looked for a version
/// before the free, then waited for the page's latch, found the frame gone and read the disk,
/// where the page had never been — and returned "page N was never written" for a page its
/// snapshot could read (thousands of 5,000 rounds; found by a session's adversarial test of
/// the pool under pressure). Every read must give the snapshot's bytes.
#[test]
fn a_page_freed_while_a_snapshot_reads_it_is_read_from_its_version() {
    let store = Arc::new(keel_buffer_pool::MemStore::new(keel_page::PageSize::K4));
    let pool = Arc::new(
        BufferPool::new(
            keel_buffer_pool::PoolConfig {
                page_size: keel_page::PageSize::K4,
                pool_bytes: 64 * 4096,
                ..keel_buffer_pool::PoolConfig::default()
            },
            store,
        )
        .unwrap(),
    );
    let log = MemLog::new();
    // The page the readers read now, and the snapshot they read it at.
    type Target = Option<(PageId, Arc<Snapshot>)>;
    let shared: Arc<parking_lot::Mutex<Target>> = Arc::new(parking_lot::Mutex::new(None));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let first_error = Arc::new(parking_lot::Mutex::new(None::<String>));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (pool, shared, stop, errors, reads, first_error) = (
                pool.clone(),
                shared.clone(),
                stop.clone(),
                errors.clone(),
                reads.clone(),
                first_error.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some((p, s)) = shared.lock().clone() else {
                        std::hint::spin_loop();
                        continue;
                    };
                    match pool.read_at(p, &s) {
                        Ok(g) => {
                            assert_eq!(g[PAGE_HEADER_SIZE], 0xAB, "wrong bytes at snapshot");
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(PoolError::SnapshotTooOld { .. }) => {}
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            // The same read again, at once: the snapshot's version is there.
                            let again = match pool.read_at(p, &s) {
                                Ok(g) => format!("ok, byte {:#x}", g[PAGE_HEADER_SIZE]),
                                Err(e) => format!("{e}"),
                            };
                            first_error
                                .lock()
                                .get_or_insert(format!("{e}; read again: {again}"));
                        }
                    }
                }
            })
        })
        .collect();
    let iters = 5_000u64;
    for i in 0..iters {
        let p = PageId(100 + i);
        let t = pool.begin();
        let mut g = t.new_page(p, PageType::RAW).unwrap();
        g.write(PAGE_HEADER_SIZE, &[0xAB; 64]).unwrap();
        drop(g);
        t.commit(&log).unwrap();
        let s = Arc::new(pool.snapshot());
        *shared.lock() = Some((p, s));
        for _ in 0..200 {
            std::hint::spin_loop();
        }
        let t = pool.begin();
        t.free_page(p).unwrap();
        t.commit(&log).unwrap();
        for _ in 0..200 {
            std::hint::spin_loop();
        }
        *shared.lock() = None;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    println!(
        "reads {} errors {} first {:?}",
        reads.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        first_error.lock()
    );
    assert_eq!(
        errors.load(Ordering::Relaxed),
        0,
        "{:?}",
        first_error.lock()
    );
}

/// A page started afresh (`new_page`) while a snapshot older than the newest commit can read
/// it: resident when the transaction looks, the page keeps its image through the frame it
/// takes — unless another thread evicts it in between, when it was then started in a blank
/// frame with no version kept, and the snapshot read the new bytes as its own. The knob
/// `evict_before_blank` makes that eviction happen at that instant; the transaction's pin
/// across the window refuses it.
#[test]
fn a_page_evicted_while_it_is_started_afresh_keeps_its_version() {
    let store = Arc::new(keel_buffer_pool::MemStore::new(keel_page::PageSize::K4));
    let pool = BufferPool::new(
        keel_buffer_pool::PoolConfig {
            page_size: keel_page::PageSize::K4,
            pool_bytes: 64 * 4096,
            ..keel_buffer_pool::PoolConfig::default()
        },
        store,
    )
    .unwrap();
    let log = MemLog::new();
    let (p, q) = (PageId(10), PageId(11));
    let t = pool.begin();
    t.new_page(p, PageType::RAW)
        .unwrap()
        .write(PAGE_HEADER_SIZE, &[0xAB; 64])
        .unwrap();
    t.commit(&log).unwrap();
    pool.flush_all().unwrap();
    let s = pool.snapshot();
    // A later commit: the snapshot is now older than the newest.
    let t = pool.begin();
    t.new_page(q, PageType::RAW).unwrap();
    t.commit(&log).unwrap();
    assert!(pool.contains(p));
    pool.knobs()
        .evict_before_blank
        .store(true, Ordering::Relaxed);
    let t = pool.begin();
    t.new_page(p, PageType::RAW)
        .unwrap()
        .write(PAGE_HEADER_SIZE, &[0xCD; 64])
        .unwrap();
    let read = |when: &str| {
        let g = pool.read_at(p, &s).unwrap();
        assert_eq!(g[PAGE_HEADER_SIZE], 0xAB, "the snapshot's page {when}");
    };
    read("before the commit");
    t.commit(&log).unwrap();
    read("after the commit");
}
