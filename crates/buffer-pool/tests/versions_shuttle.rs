//! Deterministic concurrency tests of the version store (module `versions`) under
//! [shuttle](https://docs.rs/shuttle): a writer thread and two reader threads drive
//! [`Versions`] directly — snapshots registered and dropped, pending versions stored before a
//! page changes, sealed at the commit LSN `C`, `C` published, versions collected and, past the
//! budget, snapshots revoked — while shuttle's random and PCT schedulers explore their
//! interleavings, each from a fixed seed (so a run is reproducible; a failure prints the
//! schedule to replay).
//!
//! The page in the pool is a shared image under a shuttle mutex that stands in for the page
//! latch; the writer stores the page's pending version under it before it changes the page, the
//! way a write transaction does (`txn.rs`), and a reader reads the way `BufferPool::read_at`
//! does (lookup, latch, lookup again, then the revoked check). Every read must give, for each
//! page, the image that the commits up to the snapshot's LSN left — the version or the page in
//! the pool — never a newer or uncommitted page; only `SnapshotTooOld` may replace it.
//! Invariants of module `versions` exercised: 1 (version before change), 2 (seal before
//! publish), 3 (the collect bound is min(oldest snapshot, newest published), under the
//! registry lock) and 4 (the revoked flag is set before the versions go).
//!
//! Built only with `RUSTFLAGS="--cfg keel_shuttle"`, which swaps `versions`' mutex and atomics
//! for shuttle's (module `sync`); in any other build this file is empty. Run it as `.ci/test.sh`
//! does:
//!
//! ```text
//! RUSTFLAGS="--cfg keel_shuttle" CARGO_TARGET_DIR=target/shuttle \
//!     cargo test -p keel-buffer-pool --test versions_shuttle
//! ```
//!
//! `KEEL_SHUTTLE_ITERATIONS` (per test) and `KEEL_SHUTTLE_SEED` override the defaults.
//!
//! The writer keeps a page's version as undo when no snapshot is registered as it takes the
//! page (invariant 5): a reader rebuilds the image from the page under its latch, and the
//! commit either publishes in the same hold of the registry lock that finds no snapshot, or
//! rebuilds its undo versions before it publishes.
//!
//! Each test fails against a mutant of the invariant it is about (checked by hand, each within
//! ~150 of its 3,000 iterations on every seed tried):
//!
//! - collect with no snapshot registered drops every sealed version instead of stopping at the
//!   newest published commit (a snapshot's drop collects between a commit's seal and its
//!   publish): all four tests;
//! - `commit` below publishes before it seals: all four tests;
//! - the revoked flags are set after the versions are dropped: the two
//!   `a_revoked_snapshot_never_reads_a_newer_page_*` tests;
//! - a commit that finds a snapshot registered publishes without rebuilding its undo versions
//!   (invariant 5; each transaction changes one half of a page, so a later frame with an
//!   earlier undo would be a wrong image too): all four tests, within 61 iterations (checked
//!   2026-11-26).
//!
//! (Dropping only `.min(reg.latest)` from the bound is no mutant: every registered snapshot is
//! at or below the newest published commit, so the oldest one already is the bound.)
#![cfg(keel_shuttle)]

use keel_buffer_pool::versions::{Snapshot, Versions};
use keel_buffer_pool::PoolError;
use keel_page::{Lsn, PageId};
use shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
use shuttle::sync::Mutex;
use shuttle::{thread, Config, Runner};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of every page image (and so of every version).
const IMAGE: usize = 64;
/// Schedules explored by each test unless `KEEL_SHUTTLE_ITERATIONS` says otherwise.
const ITERATIONS: usize = 3000;

/// One write transaction of a scenario: the pages it changes and its commit LSN (`None`: it
/// aborts).
struct Txn {
    id: u64,
    pages: &'static [u64],
    commit: Option<u64>,
}

/// A scenario: what the single writer does, in order (commits in LSN order, as the pool's
/// writer lock makes them), what the two readers do, and the budget.
struct Scenario {
    txns: &'static [Txn],
    pages: u64,
    budget: u64,
    /// The two readers: how many rounds each reads every page, and whether it holds one
    /// snapshot for all of them (else each round takes a snapshot and drops it after).
    readers: [(usize, bool); 2],
}

impl Scenario {
    /// The commit whose image page `page` holds at snapshot `lsn`: the newest commit at or
    /// below `lsn` that changed it (0: the initial image).
    /// Each half of the page separately: transaction `t` changes half `t.id % 2` only.
    fn expected(&self, page: u64, lsn: u64) -> (u64, u64) {
        let half = |h: u64| {
            self.txns
                .iter()
                .filter(|t| t.id % 2 == h)
                .filter_map(|t| t.commit.filter(|&c| c <= lsn && t.pages.contains(&page)))
                .max()
                .unwrap_or(0)
        };
        (half(0), half(1))
    }
}

/// Seals, then publishes, as `PageTxn::commit` does (module `versions`, invariant 2).
fn commit(v: &Versions, txn: u64, pages: &[PageId], c: Lsn) {
    v.shuttle_seal(txn, pages, c);
    v.shuttle_publish(c);
}

/// The image a commit at `c` leaves (an uncommitted change is `0xEE`).
fn image(c: u64) -> Vec<u8> {
    vec![u8::try_from(c).expect("small LSNs"); IMAGE]
}

/// The commits each half of an image comes from.
fn tag(img: &[u8]) -> (u64, u64) {
    let (lo, hi) = img.split_at(IMAGE / 2);
    assert!(lo.iter().all(|&b| b == lo[0]), "a torn image: {img:?}");
    assert!(hi.iter().all(|&b| b == hi[0]), "a torn image: {img:?}");
    (u64::from(lo[0]), u64::from(hi[0]))
}

/// The half of a page transaction `t` changes.
fn half(t: &Txn) -> std::ops::Range<usize> {
    let h = (t.id % 2) as usize * IMAGE / 2;
    h..h + IMAGE / 2
}

/// The pool as far as the version store sees it: each page's image under its latch.
struct World {
    v: Arc<Versions>,
    /// Page `i + 1`'s image; the mutex is the page latch.
    pages: Vec<Mutex<Vec<u8>>>,
}

impl World {
    fn page(&self, id: u64) -> &Mutex<Vec<u8>> {
        &self.pages[(id - 1) as usize]
    }

    /// The writer: each transaction stores each page's committed image as its pending version
    /// under the latch — a copy, or with no snapshot registered the undo of its change
    /// (invariant 5) — then changes the page; then it commits (seal, publish; undo versions
    /// rebuilt first if a snapshot is registered then) or aborts (restores the pages, then
    /// discards its versions).
    fn write(&self, sc: &Scenario) {
        for t in sc.txns {
            let ids: Vec<PageId> = t.pages.iter().map(|&p| PageId(p)).collect();
            let mut before = Vec::new();
            let mut undo = Vec::new();
            let mut undo_txn = None;
            for &p in t.pages {
                let mut g = self.page(p).lock().unwrap();
                if self.v.shuttle_any_registered() {
                    self.v.shuttle_add_pending(PageId(p), t.id, &g);
                } else {
                    let ut = undo_txn.get_or_insert_with(|| self.v.shuttle_begin_undo());
                    let slot = ut.shuttle_add_page(PageId(p), IMAGE);
                    ut.shuttle_push(slot, half(t).start, &g[half(t)]);
                    undo.push((p, slot));
                }
                before.push(g.clone());
                g[half(t)].copy_from_slice(&image(t.commit.unwrap_or(0xEE))[..IMAGE / 2]);
            }
            // The pages kept in the store (as copies), not as undo.
            let copied: Vec<PageId> = ids
                .iter()
                .copied()
                .filter(|id| undo.iter().all(|(p, _)| PageId(*p) != *id))
                .collect();
            match (t.commit, undo_txn) {
                (Some(c), Some(ut)) => {
                    self.v.shuttle_seal(t.id, &copied, Lsn(c));
                    self.v.shuttle_seal_undo(&ut, Lsn(c));
                    if !self.v.shuttle_publish_if_unregistered(Lsn(c)) {
                        let mut kept = Vec::new();
                        for &(p, slot) in &undo {
                            let g = self.page(p).lock().unwrap();
                            self.v.shuttle_keep_rebuilt(PageId(p), t.id, &g, &ut, slot);
                            kept.push(PageId(p));
                        }
                        self.v.shuttle_seal(t.id, &kept, Lsn(c));
                        self.v.shuttle_publish(Lsn(c));
                    }
                    self.v.shuttle_end_undo(ut);
                }
                (Some(c), None) => commit(&self.v, t.id, &ids, Lsn(c)),
                (None, ut) => {
                    for (&p, img) in t.pages.iter().zip(before) {
                        let mut g = self.page(p).lock().unwrap();
                        match (&ut, undo.iter().find(|(q, _)| *q == p)) {
                            // Restored and marked so under the latch, as the pool's rollback.
                            (Some(ut), Some(&(_, slot))) => ut.shuttle_roll_back(slot, &mut g),
                            _ => *g = img,
                        }
                    }
                    self.v.shuttle_discard(t.id, &copied);
                    if let Some(ut) = ut {
                        self.v.shuttle_end_undo(ut);
                    }
                }
            }
        }
    }

    /// Page `id` at `snap`, as `BufferPool::read_at` reads it.
    fn read_at(&self, id: u64, snap: &Snapshot) -> Result<Vec<u8>, PoolError> {
        if let Some(v) = snap.shuttle_find(PageId(id)) {
            snap.check()?;
            return Ok(v.to_vec());
        }
        let g = self.page(id).lock().unwrap();
        let found = snap.shuttle_find_latched(PageId(id), &g);
        snap.check()?;
        Ok(match found {
            Some(v) => v.to_vec(),
            None => g.clone(),
        })
    }

    /// A reader: `rounds` snapshots, each reading every page, or with `hold` one snapshot
    /// taken at the start and read `rounds` times (an old snapshot, until it is revoked).
    fn read(&self, sc: &Scenario, (rounds, hold): (usize, bool), seen: &Seen) {
        let held = hold.then(|| self.v.snapshot());
        for _ in 0..rounds {
            let fresh = held.is_none().then(|| self.v.snapshot());
            let snap = held.as_ref().or(fresh.as_ref()).unwrap();
            let lsn = snap.lsn().0;
            for p in 1..=sc.pages {
                match self.read_at(p, snap) {
                    Ok(img) => {
                        let (got, want) = (tag(&img), sc.expected(p, lsn));
                        assert_eq!(
                            got,
                            want,
                            "page {p} read at snapshot {lsn} holds commits {got:?} (one per \
                             half), not {want:?} (iteration {})",
                            seen.iteration.load(Ordering::Relaxed)
                        );
                        if got != sc.expected(p, u64::MAX) {
                            // A read that needed an old image (from a version, or from the
                            // page before the writer changed it).
                            seen.old.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(PoolError::SnapshotTooOld { lsn: l, .. }) => {
                        assert_eq!(l.0, lsn);
                        seen.too_old.fetch_add(1, Ordering::Relaxed);
                        if hold {
                            return;
                        }
                        break;
                    }
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
        }
    }
}

/// What the runs of one test saw, over all their iterations (so a test that never reaches the
/// state it is about fails instead of passing vacuously).
#[derive(Default)]
struct Seen {
    iteration: AtomicU64,
    /// Reads that needed an image older than the newest commit.
    old: AtomicU64,
    /// Reads refused with `SnapshotTooOld`.
    too_old: AtomicU64,
}

/// One execution: a writer and two readers over a fresh store and pool; at the end, with every
/// snapshot gone and every transaction finished, nothing is kept.
fn execution(sc: &'static Scenario, seen: &Arc<Seen>) {
    seen.iteration.fetch_add(1, Ordering::Relaxed);
    let w = Arc::new(World {
        v: Arc::new(Versions::new(sc.budget)),
        pages: (0..sc.pages).map(|_| Mutex::new(image(0))).collect(),
    });
    let readers: Vec<_> = sc
        .readers
        .iter()
        .map(|&reader| {
            let (w, seen) = (w.clone(), seen.clone());
            thread::spawn(move || w.read(sc, reader, &seen))
        })
        .collect();
    w.write(sc);
    for r in readers {
        r.join().unwrap();
    }
    let counts = w.v.counts();
    assert_eq!(
        (counts.kept, counts.bytes, counts.snapshots),
        (0, 0, 0),
        "everything is collected once no snapshot is left"
    );
}

fn iterations() -> usize {
    std::env::var("KEEL_SHUTTLE_ITERATIONS").map_or(ITERATIONS, |s| {
        s.parse().expect("KEEL_SHUTTLE_ITERATIONS: a number")
    })
}

fn seed(default: u64) -> u64 {
    std::env::var("KEEL_SHUTTLE_SEED")
        .map_or(default, |s| s.parse().expect("KEEL_SHUTTLE_SEED: a number"))
}

/// Runs `sc` under `scheduler` and returns what its executions saw.
fn run(sc: &'static Scenario, scheduler: impl Scheduler + 'static) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let mut config = Config::new();
    // Shuttle treats every atomic as SeqCst (the store's orderings are Acquire/Release or
    // stronger where it matters, and Relaxed only for counters).
    config.silence_warnings = true;
    let s = seen.clone();
    let n = Runner::new(scheduler, config).run(move || execution(sc, &s));
    assert_eq!(n, iterations());
    seen
}

/// Invariants 1–3: a writer commits pages (one transaction aborts) while two readers take,
/// use and drop snapshots; the drops collect between seals and publishes.
static COMMITS: Scenario = Scenario {
    txns: &[
        Txn {
            id: 1,
            pages: &[1, 2],
            commit: Some(10),
        },
        Txn {
            id: 2,
            pages: &[1],
            commit: Some(20),
        },
        Txn {
            id: 3,
            pages: &[2],
            commit: None,
        },
        Txn {
            id: 4,
            pages: &[2],
            commit: Some(30),
        },
    ],
    pages: 2,
    budget: 1 << 20,
    readers: [(3, false), (3, false)],
};

/// Invariant 4: one reader holds an old snapshot while the writer's versions pass a budget of
/// one and a half versions; the other takes and drops snapshots (each drop collects).
static BUDGET: Scenario = Scenario {
    txns: &[
        Txn {
            id: 1,
            pages: &[1],
            commit: Some(10),
        },
        Txn {
            id: 2,
            pages: &[2],
            commit: Some(20),
        },
        Txn {
            id: 3,
            pages: &[1],
            commit: Some(30),
        },
    ],
    pages: 2,
    budget: (IMAGE + IMAGE / 2) as u64,
    readers: [(4, true), (2, false)],
};

#[test]
fn every_snapshot_reads_its_commits_random() {
    let seen = run(
        &COMMITS,
        RandomScheduler::new_from_seed(seed(0x6b65_656c), iterations()),
    );
    assert!(
        seen.old.load(Ordering::Relaxed) > 0,
        "no read needed an old image"
    );
    assert_eq!(seen.too_old.load(Ordering::Relaxed), 0, "within the budget");
}

#[test]
fn every_snapshot_reads_its_commits_pct() {
    let seen = run(
        &COMMITS,
        PctScheduler::new_from_seed(seed(0x6b65_656d), 3, iterations()),
    );
    assert!(
        seen.old.load(Ordering::Relaxed) > 0,
        "no read needed an old image"
    );
}

#[test]
fn a_revoked_snapshot_never_reads_a_newer_page_random() {
    let seen = run(
        &BUDGET,
        RandomScheduler::new_from_seed(seed(0x6b65_656e), iterations()),
    );
    assert!(
        seen.old.load(Ordering::Relaxed) > 0,
        "no read needed an old image"
    );
    assert!(
        seen.too_old.load(Ordering::Relaxed) > 0,
        "no snapshot was revoked"
    );
}

#[test]
fn a_revoked_snapshot_never_reads_a_newer_page_pct() {
    let seen = run(
        &BUDGET,
        PctScheduler::new_from_seed(seed(0x6b65_656f), 3, iterations()),
    );
    assert!(
        seen.too_old.load(Ordering::Relaxed) > 0,
        "no snapshot was revoked"
    );
}
