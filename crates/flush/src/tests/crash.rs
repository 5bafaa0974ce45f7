//! Crash tests on SimFs (docs/design.md's fault model): random batches of page versions, a crash at a
//! random point of the last batch with unsynced writes kept, lost, torn at 512-byte or 4 KiB
//! sectors and reordered, then recovery and a check of every page.
//!
//! What must hold after `recover_doublewrite`:
//! * Doublewrite: every page verifies and holds the version of the last durable batch or the
//!   version of the batch in flight (pages whose newest write skipped the doublewrite because
//!   redo can rebuild them may be reported as corruption, or restored to an older image still in
//!   the area — redo replays them from their init record, which is newer: redo's job, not ours).
//! * Atomic: the same, with no repair needed: never torn.
//! * None / FullPageWrites: a page either holds one of those versions or is reported as
//!   corruption — never returned as wrong data.
//! * Every page on disk has an LSN the log had made durable (WAL rule).
//!
//! The invariants are also broken on purpose (in-place before the area sync; slot reuse before
//! the data sync; no log flush) to show these checks catch it.

use super::*;
use crate::scheme::Knobs;
use crate::{FlushError, FlushPage, PageWriter, PageWriterConfig, TornPageProtection};
use keel_io::{CrashPolicy, Fault, SimConfig, SimFs};
use keel_page::{Checksum, PageState};
use std::collections::BTreeMap;

const NPAGES: u64 = 20;

#[derive(Clone, Copy, Debug)]
struct Run {
    seed: u64,
    ps: PageSize,
    sector: u32,
    protection: TornPageProtection,
    knobs: Knobs,
    /// Out of 8: how many pages of a batch are rebuildable from redo.
    rebuildable_in_8: u64,
    /// Crash at a random point of the last batch (else after it).
    crash_mid_batch: bool,
    /// Possibly fail a sync of the last batch.
    sync_fault: bool,
    /// `None`: the crash policy drawn from the seed.
    policy: Option<CrashPolicy>,
    /// Atomic-write limits of the simulated device.
    atomic: AtomicWriteLimits,
    rounds: u64,
    /// The page checksum the writer verifies pages with.
    checksum: Checksum,
}

impl Run {
    fn new(seed: u64, ps: PageSize, sector: u32, protection: TornPageProtection) -> Run {
        Run {
            seed,
            ps,
            sector,
            protection,
            knobs: Knobs::default(),
            rebuildable_in_8: 0,
            crash_mid_batch: true,
            sync_fault: false,
            policy: None,
            atomic: keel_io::sim::XFS_LIKE_ATOMIC,
            rounds: 5,
            checksum: Checksum::Crc32c,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Version {
    v: u64,
    rebuildable: bool,
}

#[derive(Debug, Default)]
struct Outcome {
    /// A page returned as valid data that is not an allowed version: never acceptable.
    wrong_data: Vec<String>,
    /// Pages reported as corruption whose newest write was protected.
    unrepaired: Vec<u64>,
    /// Pages reported as corruption whose newest write skipped protection (redo rebuilds them).
    unrepaired_rebuildable: Vec<u64>,
    /// Pages on disk with an LSN above the log's durable LSN.
    wal_ahead: Vec<String>,
    restored: u64,
    torn_writes: u64,
    atomic_writes: u64,
}

fn run(r: Run) -> Outcome {
    let sim = SimFs::new(
        SimConfig::seeded(r.seed)
            .sector_size(r.sector)
            .atomic(r.atomic),
    );
    let shared = Shared::new();
    let fs = RecFs::new(Arc::new(sim.clone()), shared.clone());
    let dir = Path::new("/db");
    let config = PageWriterConfig {
        checksum: r.checksum,
        ..PageWriterConfig::new(r.ps, r.protection)
    };
    let mut w = PageWriter::open(fs, dir, config, FakeLog(shared.clone())).unwrap();
    w.recover_doublewrite().unwrap();
    w.set_knobs(r.knobs);
    let mut rng = Rng::new(r.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
    // Every version of each page that was ever handed to the writer, and the newest that was
    // durable (write_pages returned Ok).
    let mut written: BTreeMap<u64, Vec<Version>> = BTreeMap::new();
    let mut durable: BTreeMap<u64, u64> = BTreeMap::new();
    let mut inflight: BTreeMap<u64, Version> = BTreeMap::new();
    let mut lsn = 0;
    let mut atomic_writes = 0;
    for round in 0..r.rounds {
        let last = round + 1 == r.rounds;
        let n = 1 + rng.next() % 12;
        let mut ids: Vec<u64> = Vec::new();
        while (ids.len() as u64) < n {
            let id = rng.next() % NPAGES;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let version = round + 1;
        let mut images = Vec::new();
        let mut meta = Vec::new();
        for &id in &ids {
            lsn += 1 + rng.next() % 3;
            images.push(make_page(r.ps, id, lsn, version));
            meta.push((id, lsn, rng.next() % 8 < r.rebuildable_in_8));
        }
        let pages: Vec<FlushPage<'_>> = meta
            .iter()
            .zip(&images)
            .map(|(&(id, l, rb), img)| FlushPage {
                page_id: PageId(id),
                image: img,
                lsn: Lsn(l),
                rebuildable_from_redo: rb,
            })
            .collect();
        if last && r.crash_mid_batch {
            shared.crash_after((rng.next() % (3 * n + 8)) as i64);
        }
        if last && r.sync_fault && rng.coin() {
            sim.inject(Fault::SyncFailsNth(1 + rng.next() % 3));
        }
        for &(id, _, rb) in &meta {
            written.entry(id).or_default().push(Version {
                v: version,
                rebuildable: rb,
            });
        }
        let res = w.write_pages(&pages);
        atomic_writes = w.stats().atomic_writes;
        match res {
            Ok(()) => {
                for &(id, _, _) in &meta {
                    durable.insert(id, version);
                }
            }
            Err(_) => {
                for &(id, _, rb) in &meta {
                    inflight.insert(
                        id,
                        Version {
                            v: version,
                            rebuildable: rb,
                        },
                    );
                }
                break;
            }
        }
    }
    drop(w);
    let after = match r.policy {
        Some(p) => sim.crash_with(p),
        None => sim.crash(),
    };
    let torn_writes = after.last_crash().map_or(0, |c| c.writes_torn);
    // First as a read-only open does it: recovery in memory, nothing written. Every page must
    // read exactly as it will after the real recovery below (compared page by page there), and
    // the files must be untouched.
    let files_before = durable_image(&after);
    let in_memory = {
        let ro = PageWriter::open(
            Arc::new(keel_io::ReadOnlyFs::new(Arc::new(after.clone()))),
            dir,
            PageWriterConfig {
                protection: TornPageProtection::None,
                ..config
            },
            FakeLog(shared.clone()),
        )
        .unwrap();
        ro.recover_doublewrite_in_memory(Lsn::ZERO).ok().map(|rec| {
            (
                (0..NPAGES)
                    .map(|id| read_outcome(&ro, r.ps, id))
                    .collect::<Vec<_>>(),
                rec,
            )
        })
    };
    assert!(
        durable_image(&after) == files_before,
        "in-memory doublewrite recovery changed the files (seed {})",
        r.seed
    );
    let w = PageWriter::open(
        Arc::new(after.clone()),
        dir,
        config,
        FakeLog(shared.clone()),
    )
    .unwrap();
    let log_durable = Lsn(shared.durable.load(Ordering::SeqCst));
    // Odd seeds recover as a store's read-write open does: in memory first (reads served from
    // the images, nothing written — checked against the read-only pass), then the images
    // written home and the area readied (`finish_doublewrite_recovery`). Even seeds in one
    // call. Either way the same pages are restored, durably.
    let staged = r.seed % 2 == 1;
    let recovered = if staged {
        w.recover_doublewrite_in_memory(Lsn::ZERO).and_then(|rec| {
            if let Some((pages, _)) = &in_memory {
                for (id, want) in (0..NPAGES).zip(pages) {
                    assert_eq!(
                        &read_outcome(&w, r.ps, id),
                        want,
                        "page {id}: the read-write in-memory recovery reads differently (seed {})",
                        r.seed
                    );
                }
            }
            assert!(
                durable_image(&after) == files_before,
                "the read-write in-memory recovery wrote before its finish (seed {})",
                r.seed
            );
            w.finish_doublewrite_recovery().map(|()| rec)
        })
    } else {
        w.recover_doublewrite()
    };
    if staged {
        if let Ok(rec) = &recovered {
            // Written home and synced: the durable data file holds each restored image, and
            // reads (the overlay ended) come from it.
            let data = durable_image(&after)
                .into_iter()
                .find(|(p, _)| p.ends_with(crate::DATA_FILE_NAME))
                .map(|(_, b)| b)
                .unwrap_or_default();
            let ps = r.ps.bytes();
            for p in &rec.restored {
                let at = p.page_id.0 as usize * ps;
                let (_, mem) = read_outcome(&w, r.ps, p.page_id.0)
                    .unwrap_or_else(|e| panic!("page {}: {e} (seed {})", p.page_id, r.seed));
                assert!(
                    data.get(at..at + ps) == Some(&mem[..]),
                    "page {}: restored in memory but not durably home after the finish (seed {})",
                    p.page_id,
                    r.seed
                );
            }
        }
    }
    let rec = match recovered {
        Ok(rec) => rec,
        // The writer's own read-side WAL check: an image above the durable log is refused.
        Err(FlushError::PageLsnInFuture {
            page_id, page_lsn, ..
        }) => {
            return Outcome {
                wal_ahead: vec![format!(
                    "doublewrite image of {page_id} has {page_lsn} but the log is durable only to {log_durable}"
                )],
                torn_writes,
                atomic_writes,
                ..Outcome::default()
            };
        }
        Err(e) => panic!("doublewrite recovery failed: {e}"),
    };
    if let Some((pages, mem_rec)) = in_memory {
        assert_eq!(mem_rec.restored, rec.restored, "seed {}", r.seed);
        for (id, got) in (0..NPAGES).zip(pages) {
            assert_eq!(
                got,
                read_outcome(&w, r.ps, id),
                "page {id}: in-memory recovery reads differently from recovery (seed {})",
                r.seed
            );
        }
    }
    let broken = r.knobs.defer_data_sync || r.knobs.in_place_before_doublewrite_sync;
    let mut out = Outcome {
        restored: rec.restored_pages,
        torn_writes,
        atomic_writes,
        ..Outcome::default()
    };
    let mut buf = keel_io::AlignedBuf::page(r.ps.bytes());
    for id in 0..NPAGES {
        let versions = written.get(&id).cloned().unwrap_or_default();
        // Allowed: the last durable version or anything newer that was handed over. With a
        // broken order, "durable" means nothing: any version written.
        let floor = if broken {
            0
        } else {
            durable.get(&id).copied().unwrap_or(0)
        };
        let allowed: Vec<u64> = versions
            .iter()
            .map(|x| x.v)
            .filter(|&v| v >= floor)
            .collect();
        let newest_rebuildable = versions.last().is_some_and(|x| x.rebuildable)
            || inflight.get(&id).is_some_and(|x| x.rebuildable);
        match w.read_page(PageId(id), &mut buf) {
            Ok(PageState::Valid(h)) => {
                if h.lsn > log_durable {
                    out.wal_ahead.push(format!(
                        "page {id} on disk has {} but the log is durable only to {log_durable}",
                        h.lsn
                    ));
                }
                let restored = rec.restored.iter().any(|p| p.page_id == PageId(id));
                match version_of(&buf, id) {
                    Some(v) if allowed.contains(&v) => {}
                    // The newest write skipped the doublewrite and was torn; recovery restored an
                    // older image still in the area (slots keep their images until reused).
                    // Harmless: redo replays from the page's init record, which is newer than
                    // that image. Redo's job, like a page reported as corruption.
                    Some(v)
                        if newest_rebuildable && restored && versions.iter().any(|x| x.v == v) =>
                    {
                        out.unrepaired_rebuildable.push(id);
                    }
                    v => out.wrong_data.push(format!(
                        "page {id}: valid page holds version {v:?}, allowed {allowed:?}; written \
                         {versions:?}, in flight {:?}, restored {:?} (seed {})",
                        inflight.get(&id),
                        rec.restored.iter().find(|p| p.page_id == PageId(id)),
                        r.seed
                    )),
                }
            }
            Ok(PageState::Unwritten) => {
                if floor > 0 {
                    out.wrong_data.push(format!(
                        "page {id}: unwritten, but version {floor} was durable (seed {})",
                        r.seed
                    ));
                }
            }
            Err(FlushError::PageLsnInFuture { page_lsn, .. }) => {
                out.wal_ahead.push(format!(
                    "page {id} on disk has {page_lsn} but the log is durable only to {log_durable} (refused on read)"
                ));
            }
            Err(FlushError::Corruption(_)) => {
                if newest_rebuildable {
                    out.unrepaired_rebuildable.push(id);
                } else {
                    out.unrepaired.push(id);
                }
            }
            Err(e) => panic!("page {id}: unexpected error {e} (seed {})", r.seed),
        }
    }
    if staged {
        // A restored page written again reads as written: the in-memory images ended with the
        // restore (else the old image would still be served in place of the new page).
        if let Some(p) = rec.restored.first() {
            let img = make_page(r.ps, p.page_id.0, log_durable.0, u64::MAX);
            let page = FlushPage {
                page_id: p.page_id,
                image: &img,
                lsn: log_durable,
                rebuildable_from_redo: false,
            };
            w.write_pages(&[page])
                .unwrap_or_else(|e| panic!("rewrite of {}: {e} (seed {})", p.page_id, r.seed));
            let st = w.read_page(p.page_id, &mut buf);
            assert!(
                matches!(st, Ok(PageState::Valid(_)))
                    && version_of(&buf, p.page_id.0) == Some(u64::MAX),
                "page {} written after its restore reads {st:?}, version {:?} (seed {})",
                p.page_id,
                version_of(&buf, p.page_id.0),
                r.seed
            );
        }
    }
    out
}

/// What reading page `id` gives: the state and bytes, or the error's text.
fn read_outcome(w: &PageWriter, ps: PageSize, id: u64) -> Result<(String, Vec<u8>), String> {
    let mut buf = keel_io::AlignedBuf::page(ps.bytes());
    w.read_page(PageId(id), &mut buf)
        .map(|st| (format!("{st:?}"), buf.to_vec()))
        .map_err(|e| e.to_string())
}

/// Every durable file of `fs` with its bytes.
fn durable_image(fs: &SimFs) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = fs
        .durable_files()
        .unwrap()
        .into_iter()
        .map(|p| {
            let b = fs.durable_contents(&p).unwrap();
            (p, b)
        })
        .collect();
    out.sort();
    out
}

/// Runs `seeds` and sums up; panics with the first seed that returned wrong data.
fn sweep(seeds: std::ops::Range<u64>, mk: impl Fn(u64) -> Run) -> Outcome {
    let mut total = Outcome::default();
    for seed in seeds {
        let o = run(mk(seed));
        assert!(o.wrong_data.is_empty(), "{:?}", o.wrong_data);
        total
            .unrepaired
            .extend(o.unrepaired.iter().map(|p| seed * 1000 + p));
        total
            .unrepaired_rebuildable
            .extend(o.unrepaired_rebuildable.iter().map(|p| seed * 1000 + p));
        total.wal_ahead.extend(o.wal_ahead);
        total.restored += o.restored;
        total.torn_writes += o.torn_writes;
        total.atomic_writes += o.atomic_writes;
    }
    total
}

const GEOMETRIES: [(PageSize, u32); 3] = [
    (PageSize::K4, 512),
    (PageSize::K16, 4096),
    (PageSize::K16, 512),
];

const DW: TornPageProtection = TornPageProtection::Doublewrite { batch_pages: 4 };

#[test]
fn doublewrite_crash_always_repairs() {
    for (ps, sector) in GEOMETRIES {
        let t = sweep(0..120, |seed| Run::new(seed, ps, sector, DW));
        assert!(t.unrepaired.is_empty(), "{ps} {sector}: {:?}", t.unrepaired);
        assert!(t.wal_ahead.is_empty(), "{:?}", t.wal_ahead);
        assert!(t.torn_writes > 0, "the crashes must tear something");
        assert!(t.restored > 0, "recovery must have had something to do");
    }
}

/// Without a page checksum a page torn between its first and last sector passes every check
/// (header and trailer LSN agree): the doublewrite recovery must still tell it from the image of
/// the same LSN and restore it. It kept such a page (found by the whole-store crash matrix once
/// it ran without checksums); this test fails without the byte comparison.
#[test]
fn doublewrite_without_a_checksum_repairs_pages_torn_in_the_middle() {
    for (ps, sector) in GEOMETRIES {
        for checksum in [Checksum::None, Checksum::Legacy] {
            let t = sweep(0..120, |seed| Run {
                checksum,
                policy: Some(CrashPolicy::tear_all()),
                ..Run::new(seed, ps, sector, DW)
            });
            assert!(t.unrepaired.is_empty(), "{ps} {sector}: {:?}", t.unrepaired);
            assert!(t.wal_ahead.is_empty(), "{:?}", t.wal_ahead);
            assert!(t.restored > 0, "recovery must have had something to do");
        }
    }
}

/// Same under tear-everything crashes (no reordering, every tearable pending write torn).
#[test]
fn doublewrite_crash_repairs_when_every_pending_write_is_torn() {
    for (ps, sector) in GEOMETRIES {
        let t = sweep(0..60, |seed| Run {
            policy: Some(CrashPolicy::tear_all()),
            ..Run::new(seed, ps, sector, DW)
        });
        assert!(t.unrepaired.is_empty(), "{ps} {sector}: {:?}", t.unrepaired);
        assert!(t.restored > 0);
    }
}

/// With the init-on-flush skip, only pages whose newest write skipped the doublewrite may be
/// left for redo to rebuild.
#[test]
fn doublewrite_crash_leaves_only_rebuildable_pages_for_redo() {
    let t = sweep(0..120, |seed| Run {
        rebuildable_in_8: 3,
        ..Run::new(seed, PageSize::K4, 512, DW)
    });
    assert!(t.unrepaired.is_empty(), "{:?}", t.unrepaired);
    assert!(
        !t.unrepaired_rebuildable.is_empty(),
        "skipped pages must have been torn at least once"
    );
}

/// A failed sync in the last batch (SimFs drops or tears what it had pending, as Linux does)
/// poisons the writer; after a crash, recovery still repairs every page.
#[test]
fn doublewrite_crash_after_a_failed_sync_repairs() {
    let t = sweep(0..120, |seed| Run {
        sync_fault: true,
        ..Run::new(seed, PageSize::K16, 512, DW)
    });
    assert!(t.unrepaired.is_empty(), "{:?}", t.unrepaired);
}

/// Invariant 2 broken on purpose: pages written in place before the area is synced. Some crash
/// leaves a page that cannot be repaired; with the right order (same seeds) none does.
#[test]
fn doublewrite_in_place_before_area_sync_breaks_repair() {
    for (ps, sector) in [(PageSize::K4, 512), (PageSize::K16, 4096)] {
        let broken = |policy| {
            sweep(0..150, |seed| Run {
                knobs: Knobs {
                    in_place_before_doublewrite_sync: true,
                    ..Knobs::default()
                },
                policy,
                ..Run::new(seed, ps, sector, DW)
            })
        };
        let t = broken(None);
        let t2 = broken(Some(CrashPolicy::tear_all()));
        assert!(
            !t.unrepaired.is_empty() || !t2.unrepaired.is_empty(),
            "{ps} {sector}: the broken order was never caught"
        );
        let ok = sweep(0..150, |seed| Run {
            policy: Some(CrashPolicy::tear_all()),
            ..Run::new(seed, ps, sector, DW)
        });
        assert!(ok.unrepaired.is_empty());
    }
}

/// Invariant 2 broken on purpose: slots freed right after their in-place writes were issued
/// (no pending state, the data file never synced), so with enough batches (12 rounds of up to 3
/// groups each, against `DOUBLEWRITE_SLOTS` slots) slots are reused while the in-place writes
/// of their batch are volatile. A page torn or lost in an early batch whose slot was overwritten
/// cannot be repaired. With the right order (same seeds, where slots are reused after a data
/// sync) every page is repaired.
#[test]
fn doublewrite_early_slot_reuse_breaks_repair() {
    for (ps, sector) in [(PageSize::K4, 512), (PageSize::K16, 4096)] {
        let mk = |knobs| {
            move |seed| Run {
                knobs,
                crash_mid_batch: false,
                rounds: 12,
                ..Run::new(seed, ps, sector, DW)
            }
        };
        let t = sweep(
            0..150,
            mk(Knobs {
                defer_data_sync: true,
                ..Knobs::default()
            }),
        );
        assert!(
            t.unrepaired.len() >= 10,
            "{ps} {sector}: early slot reuse was caught only {} times",
            t.unrepaired.len()
        );
        let ok = sweep(0..150, mk(Knobs::default()));
        assert!(ok.unrepaired.is_empty(), "{:?}", ok.unrepaired);
    }
}

/// None and FullPageWrites (whose repair is redo's full page image): torn pages are reported as
/// corruption, never returned as data.
#[test]
fn none_mode_crash_reports_torn_pages_never_returns_them() {
    for protection in [TornPageProtection::None, TornPageProtection::FullPageWrites] {
        for (ps, sector) in GEOMETRIES {
            let t = sweep(0..100, |seed| Run::new(seed, ps, sector, protection));
            assert!(
                !t.unrepaired.is_empty(),
                "{protection:?} {ps} {sector}: a torn page must have been seen"
            );
            assert_eq!(t.restored, 0);
            assert!(t.wal_ahead.is_empty(), "{:?}", t.wal_ahead);
        }
    }
}

/// Atomic on SimFs (its atomic writes are all-or-nothing): never torn, nothing to repair.
#[test]
fn atomic_mode_crash_never_tears() {
    for (ps, sector) in GEOMETRIES {
        let t = sweep(0..100, |seed| {
            Run::new(seed, ps, sector, TornPageProtection::Atomic)
        });
        assert!(t.unrepaired.is_empty(), "{ps} {sector}: {:?}", t.unrepaired);
        assert!(t.atomic_writes > 0);
        assert_eq!(t.restored, 0);
    }
    // Hardware-backed atomic writes: Auto picks them.
    let t = sweep(0..40, |seed| Run {
        atomic: AtomicWriteLimits {
            unit_max_opt: 1 << 20,
            ..keel_io::sim::XFS_LIKE_ATOMIC
        },
        ..Run::new(seed, PageSize::K16, 512, TornPageProtection::Auto)
    });
    assert!(t.unrepaired.is_empty());
    assert!(t.atomic_writes > 0, "auto must have picked atomic writes");
}

/// Invariant 1 broken on purpose (no log flush, no check): after a crash, pages on disk carry
/// LSNs the log never made durable — the check above catches it. With the rule, never.
#[test]
fn wal_rule_broken_shows_after_a_crash() {
    for protection in [DW, TornPageProtection::None] {
        let broken = sweep(0..20, |seed| Run {
            knobs: Knobs {
                skip_wal_flush: true,
                skip_wal_check: true,
                ..Knobs::default()
            },
            ..Run::new(seed, PageSize::K4, 512, protection)
        });
        assert!(!broken.wal_ahead.is_empty(), "{protection:?}");
        let ok = sweep(0..20, |seed| Run::new(seed, PageSize::K4, 512, protection));
        assert!(ok.wal_ahead.is_empty(), "{:?}", ok.wal_ahead);
    }
}

/// Atomic where the device has no atomic unit is a clear error naming what the probe found;
/// Auto falls back to doublewrite.
#[test]
fn atomic_without_an_atomic_unit_is_a_clear_error() {
    let sim = SimFs::new(SimConfig::seeded(1).atomic(AtomicWriteLimits::NONE));
    let err = PageWriter::open(
        Arc::new(sim.clone()),
        Path::new("/db"),
        PageWriterConfig::new(PageSize::K16, TornPageProtection::Atomic),
        FakeLog(Shared::new()),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, FlushError::AtomicUnavailable { .. }), "{msg}");
    assert!(
        msg.contains("simfs") && msg.contains("unit_max = 0"),
        "{msg}"
    );
    assert!(msg.contains("16 KiB"), "{msg}");
    let w = PageWriter::open(
        Arc::new(sim),
        Path::new("/db"),
        PageWriterConfig::new(PageSize::K16, TornPageProtection::Auto),
        FakeLog(Shared::new()),
    )
    .unwrap();
    assert_eq!(
        w.resolved().mode,
        crate::ResolvedMode::Doublewrite { batch_pages: 128 }
    );
    // 64 KiB pages above a 32 KiB atomic unit: also an error, naming the range.
    let sim = SimFs::new(SimConfig::seeded(1).atomic(AtomicWriteLimits {
        unit_max: 32768,
        ..keel_io::sim::XFS_LIKE_ATOMIC
    }));
    let err = PageWriter::open(
        Arc::new(sim),
        Path::new("/db"),
        PageWriterConfig::new(PageSize::K64, TornPageProtection::Atomic),
        FakeLog(Shared::new()),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("outside the atomic unit range"),
        "{err}"
    );
}

/// What [`run_hot`] saw.
#[derive(Debug, Default)]
struct HotOutcome {
    /// Pages returned as valid data that are not an allowed version, or unwritten pages that had
    /// a durable version, or pages reported as corruption (every write here is protected).
    wrong: Vec<String>,
    /// Most distinct LSNs of one hot page among the valid images in the area after the crash.
    max_hot_images: usize,
    /// Data syncs issued to free slots before the crash.
    reuse_syncs: u64,
    restored: u64,
}

/// Pages 0 and 1 are in every batch (so several slots hold images of them with different LSNs);
/// 1..=6 more pages of 16 join each batch; `rounds` batches of up to 8 pages through doublewrite
/// batches of 4; the machine stops after a random number of write/sync operations anywhere in
/// the run (or not at all), then crashes with `policy` (or one drawn from the seed), and the
/// writer reopens and recovers. Every page must hold the newest version whose `write_pages`
/// returned, or a later one handed over; nothing is left to redo here.
fn run_hot(seed: u64, ps: PageSize, knobs: Knobs, policy: Option<CrashPolicy>) -> HotOutcome {
    const PAGES: u64 = 16;
    let rounds = 3 * crate::DOUBLEWRITE_SLOTS as u64;
    let sim = SimFs::new(SimConfig::seeded(seed));
    let shared = Shared::new();
    let fs = RecFs::new(Arc::new(sim.clone()), shared.clone());
    let dir = Path::new("/db");
    let config = PageWriterConfig::new(ps, TornPageProtection::Doublewrite { batch_pages: 4 });
    let mut w = PageWriter::open(fs, dir, config, FakeLog(shared.clone())).unwrap();
    w.recover_doublewrite().unwrap();
    w.set_knobs(knobs);
    let mut rng = Rng::new(seed ^ 0x00C0_FFEE);
    // About 5 operations per batch: stop anywhere in the run, or never (1 in 8).
    if !rng.next().is_multiple_of(8) {
        shared.crash_after((rng.next() % (5 * rounds)) as i64);
    }
    let mut written: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut durable: BTreeMap<u64, u64> = BTreeMap::new();
    let mut lsn = 0;
    for round in 0..rounds {
        let mut ids = vec![0u64, 1];
        let extra = 1 + rng.next() % 6;
        while (ids.len() as u64) < 2 + extra {
            let id = 2 + rng.next() % (PAGES - 2);
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let version = round + 1;
        let images: Vec<(u64, u64, Vec<u8>)> = ids
            .iter()
            .map(|&id| {
                lsn += 1;
                (id, lsn, make_page(ps, id, lsn, version))
            })
            .collect();
        let pages: Vec<FlushPage<'_>> = images
            .iter()
            .map(|(id, l, img)| FlushPage {
                page_id: PageId(*id),
                image: img,
                lsn: Lsn(*l),
                rebuildable_from_redo: false,
            })
            .collect();
        for &id in &ids {
            written.entry(id).or_default().push(version);
        }
        if w.write_pages(&pages).is_err() {
            break;
        }
        for &id in &ids {
            durable.insert(id, version);
        }
    }
    let reuse_syncs = w.stats().doublewrite_reuse_syncs;
    drop(w);
    let after = match policy {
        Some(p) => sim.crash_with(p),
        None => sim.crash(),
    };
    // What the area holds after the crash, before recovery touches anything.
    let max_hot_images = {
        let file = after
            .open(
                &dir.join(crate::DOUBLEWRITE_FILE_NAME),
                &OpenOptions::new(FileClass::Doublewrite),
            )
            .unwrap();
        let area = crate::area::DoublewriteArea::open(file, None, 0).unwrap();
        let scan = area.scan(keel_page::Checksum::Crc32c, ps).unwrap();
        (0..2u64)
            .map(|hot| {
                let lsns: std::collections::BTreeSet<Lsn> = scan
                    .candidates
                    .iter()
                    .filter(|c| c.page_id == PageId(hot))
                    .map(|c| c.lsn)
                    .collect();
                lsns.len()
            })
            .max()
            .unwrap_or(0)
    };
    let w = PageWriter::open(Arc::new(after), dir, config, FakeLog(shared.clone())).unwrap();
    let rec = w.recover_doublewrite().unwrap();
    let mut out = HotOutcome {
        max_hot_images,
        reuse_syncs,
        restored: rec.restored_pages,
        ..HotOutcome::default()
    };
    let mut buf = keel_io::AlignedBuf::page(ps.bytes());
    for id in 0..PAGES {
        let floor = durable.get(&id).copied().unwrap_or(0);
        let versions = written.get(&id).cloned().unwrap_or_default();
        let allowed: Vec<u64> = versions.iter().copied().filter(|&v| v >= floor).collect();
        match w.read_page(PageId(id), &mut buf) {
            Ok(PageState::Valid(_)) => match version_of(&buf, id) {
                Some(v) if allowed.contains(&v) => {}
                v => out.wrong.push(format!(
                    "page {id}: holds version {v:?}, newest durable {floor}, allowed {allowed:?} \
                     (seed {seed})"
                )),
            },
            Ok(PageState::Unwritten) if floor == 0 => {}
            Ok(PageState::Unwritten) => out.wrong.push(format!(
                "page {id}: unwritten, but version {floor} was durable (seed {seed})"
            )),
            Err(e) => out.wrong.push(format!(
                "page {id}: {e} (newest durable {floor}, seed {seed})"
            )),
        }
    }
    out
}

/// Deferred data syncs under crashes anywhere: the same pages in every batch, so several slots
/// hold images of them with different LSNs while the in-place writes of up to
/// `DOUBLEWRITE_SLOTS` batches are unsynced; slots are reused after data syncs. After a crash
/// (writes since the last sync kept, lost, torn or reordered) and recovery, every page holds the
/// newest version whose `write_pages` returned, or a later one. Broken on purpose with
/// `defer_data_sync` (slots reused with no data sync): some page loses a version that was
/// reported durable.
#[test]
fn doublewrite_hot_pages_in_many_batches_survive_crashes_anywhere() {
    for ps in [PageSize::K4, PageSize::K16] {
        let (mut reuse, mut restored, mut most_images) = (0, 0, 0);
        for seed in 0..80u64 {
            let policy = seed.is_multiple_of(4).then(CrashPolicy::lose_all);
            let o = run_hot(seed, ps, Knobs::default(), policy);
            assert!(o.wrong.is_empty(), "{ps}: {:?}", o.wrong);
            reuse += o.reuse_syncs;
            restored += o.restored;
            most_images = most_images.max(o.max_hot_images);
        }
        assert!(reuse > 0, "{ps}: slots must have been reused");
        assert!(restored > 0, "{ps}: recovery must have had something to do");
        assert!(
            most_images >= 3,
            "{ps}: several slots must have held images of a hot page ({most_images})"
        );
        let broken: Vec<String> = (0..80u64)
            .flat_map(|seed| {
                let policy = seed.is_multiple_of(2).then(CrashPolicy::lose_all);
                let knobs = Knobs {
                    defer_data_sync: true,
                    ..Knobs::default()
                };
                run_hot(seed, ps, knobs, policy).wrong
            })
            .collect();
        assert!(
            !broken.is_empty(),
            "{ps}: slot reuse without a data sync was never caught"
        );
    }
}

/// A data sync that fails when a batch needs a slot (every slot pending) poisons the writer:
/// that batch writes nothing, every later write and `sync_data` is refused; SimFs drops or
/// tears the unsynced in-place writes of the earlier batches, as Linux may after a failed
/// fsync. After a crash and reopen, recovery restores every page of the earlier batches from
/// their slots.
#[test]
fn a_failed_sync_at_slot_reuse_poisons_and_recovery_restores_the_earlier_batches() {
    let slots = crate::DOUBLEWRITE_SLOTS as u64;
    for seed in 0..20u64 {
        let sim = SimFs::new(
            SimConfig::seeded(seed).failed_sync(if seed.is_multiple_of(2) {
                keel_io::Fates::LoseAll
            } else {
                keel_io::Fates::TearAll
            }),
        );
        let shared = Shared::new();
        let dir = Path::new("/db");
        let ps = PageSize::K4;
        let config = PageWriterConfig::new(ps, TornPageProtection::Doublewrite { batch_pages: 4 });
        let w =
            PageWriter::open(Arc::new(sim.clone()), dir, config, FakeLog(shared.clone())).unwrap();
        w.recover_doublewrite().unwrap();
        let write = |round: u64| {
            // Batch k: pages 3k, 3k+1, 3k+2 and page 100 (in every batch), version k + 1.
            let ids = [3 * round, 3 * round + 1, 3 * round + 2, 100];
            let imgs: Vec<Vec<u8>> = ids
                .iter()
                .enumerate()
                .map(|(i, &id)| make_page(ps, id, 10 * round + i as u64 + 1, round + 1))
                .collect();
            let pages: Vec<FlushPage<'_>> = ids
                .iter()
                .zip(&imgs)
                .map(|(&id, img)| FlushPage {
                    page_id: PageId(id),
                    image: img,
                    lsn: PageHeader::read(img).unwrap().lsn,
                    rebuildable_from_redo: false,
                })
                .collect();
            w.write_pages(&pages)
        };
        for round in 0..slots {
            write(round).unwrap();
        }
        let st = w.stats();
        assert_eq!(st.syncs, st.doublewrite_syncs, "no data sync yet");
        sim.inject(Fault::SyncFailsNth(1));
        let err = write(slots).unwrap_err();
        assert!(
            matches!(&err, FlushError::Poisoned { cause } if cause.error.is_sync_failure()),
            "{err}"
        );
        assert!(err.to_string().contains("data.keel"), "{err}");
        assert!(w.is_poisoned());
        assert_eq!(
            w.stats().doublewrite_writes,
            slots,
            "the batch wrote nothing"
        );
        assert!(matches!(write(slots + 1), Err(FlushError::Poisoned { .. })));
        assert!(matches!(w.sync_data(), Err(FlushError::Poisoned { .. })));
        drop(w);
        let after = sim.crash_with(CrashPolicy::lose_all());
        let w = PageWriter::open(Arc::new(after), dir, config, FakeLog(shared)).unwrap();
        let rec = w.recover_doublewrite().unwrap();
        assert!(rec.restored_pages > 0, "seed {seed}: {rec:?}");
        let mut buf = keel_io::AlignedBuf::page(ps.bytes());
        for round in 0..slots {
            for id in [3 * round, 3 * round + 1, 3 * round + 2] {
                assert!(
                    matches!(w.read_page(PageId(id), &mut buf), Ok(PageState::Valid(_))),
                    "seed {seed}: page {id}"
                );
                assert_eq!(
                    version_of(&buf, id),
                    Some(round + 1),
                    "seed {seed}: page {id}"
                );
            }
        }
        assert!(matches!(
            w.read_page(PageId(100), &mut buf),
            Ok(PageState::Valid(_))
        ));
        assert_eq!(version_of(&buf, 100), Some(slots), "seed {seed}: page 100");
    }
}

/// A clean stop (the writer dropped, no `sync_data`, no power loss) leaves the in-place writes of
/// pending slots unsynced. After a reopen every slot is free again, so recovery must sync the
/// data file before any slot is overwritten — even when nothing needed restoring. Then a power
/// loss after the new run has rewritten every slot loses nothing the first run reported
/// durable. (Broken on purpose by hand, without that recovery sync, this test fails.)
#[test]
fn a_clean_stop_then_slot_reuse_then_power_loss_loses_nothing() {
    let slots = crate::DOUBLEWRITE_SLOTS as u64;
    for seed in 0..10u64 {
        let sim = SimFs::new(SimConfig::seeded(seed));
        let shared = Shared::new();
        let dir = Path::new("/db");
        let ps = PageSize::K4;
        let config = PageWriterConfig::new(ps, TornPageProtection::Doublewrite { batch_pages: 4 });
        let open = || {
            let w = PageWriter::open(Arc::new(sim.clone()), dir, config, FakeLog(shared.clone()))
                .unwrap();
            w.recover_doublewrite().unwrap();
            w
        };
        let write = |w: &PageWriter, ids: &[u64], lsn: u64, v: u64| {
            write_versions(w, ps, ids, lsn, v, false).unwrap();
        };
        let w = open();
        for k in 0..slots {
            write(&w, &[2 * k, 2 * k + 1], 10 + 10 * k, 1);
        }
        drop(w); // a clean stop: pending slots, unsynced in-place writes
        let w = open();
        // Every slot overwritten, none reused yet (so no data sync of this run's own).
        for k in 0..slots {
            write(&w, &[100 + k], 1000 + 10 * k, 2);
        }
        let st = w.stats();
        assert_eq!(st.doublewrite_reuse_syncs, 0);
        drop(w);
        let w = PageWriter::open(
            Arc::new(sim.crash_with(CrashPolicy::lose_all())),
            dir,
            config,
            FakeLog(shared.clone()),
        )
        .unwrap();
        w.recover_doublewrite().unwrap();
        let mut buf = keel_io::AlignedBuf::page(ps.bytes());
        for id in 0..2 * slots {
            let st = w.read_page(PageId(id), &mut buf);
            assert!(
                matches!(st, Ok(PageState::Valid(_))),
                "seed {seed}: page {id}: {st:?}"
            );
            assert_eq!(version_of(&buf, id), Some(1), "seed {seed}: page {id}");
        }
    }
}

/// Opening with another batch size recovers the area with its old geometry, then formats it
/// anew (`DoublewriteArea::format`). Power lost at any call of that — writes since the last
/// sync kept, lost, torn or reordered — must leave an area the next open reads: never a zeroed
/// header beside the old slots' bytes, which recovery refuses as a damaged header hiding images
/// (the whole-store crash matrix found that state once it reopened with other batch sizes; the
/// store could not be opened again). The format now empties the file durably first.
#[test]
fn reformatting_the_area_for_another_batch_survives_a_power_loss() {
    let ps = PageSize::K4;
    let dir = Path::new("/db");
    let config =
        |batch_pages| PageWriterConfig::new(ps, TornPageProtection::Doublewrite { batch_pages });
    let mut crashed = 0;
    for seed in 0..24u64 {
        for k in 1..=40u64 {
            let sim = SimFs::new(SimConfig::seeded(seed * 100 + k).sector_size(512));
            let shared = Shared::durable_to(Lsn(1_000_000));
            // From 8 pages a batch to 1 (the file shrinks) or to 16 (it grows).
            let (old, new) = if seed % 2 == 0 { (8, 1) } else { (8, 16) };
            let w = PageWriter::open(
                Arc::new(sim.clone()),
                dir,
                config(old),
                FakeLog(shared.clone()),
            )
            .unwrap();
            w.recover_doublewrite().unwrap();
            for v in 1..=3u64 {
                write_versions(&w, ps, &[1, 2, 3, 4], 10 * v, v, false).unwrap();
            }
            drop(w);
            sim.crash_at_call(k, Some(CrashPolicy::random(1, 1, 1).reordering(true)));
            let attempt = PageWriter::open(
                Arc::new(sim.clone()),
                dir,
                config(new),
                FakeLog(shared.clone()),
            )
            .and_then(|w| w.recover_doublewrite().map(|_| w));
            let after = sim.crash_or_crashed_into();
            crashed += u32::from(attempt.is_err());
            drop(attempt);
            let w = PageWriter::open(Arc::new(after), dir, config(new), FakeLog(shared))
                .unwrap_or_else(|e| panic!("seed {seed}, call {k}: {e}"));
            w.recover_doublewrite()
                .unwrap_or_else(|e| panic!("seed {seed}, call {k}: {e}"));
            let mut buf = keel_io::AlignedBuf::page(ps.bytes());
            for id in 1..=4u64 {
                assert!(
                    matches!(w.read_page(PageId(id), &mut buf), Ok(PageState::Valid(_)))
                        && version_of(&buf, id) == Some(3),
                    "seed {seed}, call {k}: page {id}"
                );
            }
        }
    }
    assert!(crashed > 50, "{crashed} opens lost power");
}
