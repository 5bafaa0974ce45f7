//! docs/design.md invariants 1 (WAL rule) and 2 (doublewrite order), checked over the recorded order
//! of events, each also broken on purpose; and poisoning on a failed sync.

use super::*;
use crate::scheme::Knobs;
use crate::{
    FlushError, FlushPage, PageWriter, PageWriterConfig, TornPageProtection, DOUBLEWRITE_SLOTS,
};
use keel_io::OsFs;

const PS: PageSize = PageSize::K4;

struct Setup {
    _dir: tempfile::TempDir,
    shared: Arc<Shared>,
    writer: PageWriter,
}

fn setup(protection: TornPageProtection, knobs: Knobs) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let fs = RecFs::new(Arc::new(OsFs::default()), shared.clone());
    let mut writer = PageWriter::open(
        fs,
        dir.path(),
        PageWriterConfig::new(PS, protection),
        FakeLog(shared.clone()),
    )
    .unwrap();
    writer.recover_doublewrite().unwrap();
    writer.set_knobs(knobs);
    shared.take_events();
    Setup {
        _dir: dir,
        shared,
        writer,
    }
}

/// Pages `ids` at `lsn + i`, version `v`; `rebuildable` for every `skip_every`-th (0: none).
fn batch(ids: &[u64], lsn: u64, v: u64) -> Vec<Vec<u8>> {
    ids.iter()
        .enumerate()
        .map(|(i, &id)| make_page(PS, id, lsn + i as u64, v))
        .collect()
}

fn flush_pages<'a>(ids: &[u64], images: &'a [Vec<u8>], rebuildable: &[u64]) -> Vec<FlushPage<'a>> {
    ids.iter()
        .zip(images)
        .map(|(&id, img)| FlushPage {
            page_id: PageId(id),
            image: img,
            lsn: PageHeader::read(img).unwrap().lsn,
            rebuildable_from_redo: rebuildable.contains(&id),
        })
        .collect()
}

fn write(s: &Setup, ids: &[u64], lsn: u64, v: u64, rebuildable: &[u64]) -> crate::Result<()> {
    let imgs = batch(ids, lsn, v);
    s.writer.write_pages(&flush_pages(ids, &imgs, rebuildable))
}

const MODES: [TornPageProtection; 3] = [
    TornPageProtection::Doublewrite { batch_pages: 4 },
    TornPageProtection::FullPageWrites,
    TornPageProtection::None,
];

#[test]
fn wal_rule_forces_the_log_before_any_page_byte_in_every_mode() {
    for mode in MODES {
        let s = setup(mode, Knobs::default());
        write(&s, &[3, 1, 2, 9, 7, 5], 100, 1, &[]).unwrap();
        let events = s.shared.take_events();
        let first_write = events
            .iter()
            .position(|e| matches!(e, Event::Write { .. }))
            .unwrap();
        assert!(
            matches!(events[0], Event::LogFlush { to } if to == Lsn(105)),
            "{mode:?}: first event {:?}",
            events[0]
        );
        assert!(first_write > 0);
        assert_eq!(wal_violations(&events, PS.bytes()), Vec::<String>::new());
        assert_eq!(s.writer.stats().forced_log_flushes, 1, "{mode:?}");
        // Older pages: the log is already durable, no forced flush.
        write(&s, &[4], 50, 1, &[]).unwrap();
        assert_eq!(s.writer.stats().forced_log_flushes, 1, "{mode:?}");
        assert!(!s
            .shared
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::LogFlush { .. })));
    }
}

/// Invariant 1 broken on purpose: the writer skips the log flush; its own check refuses the
/// batch before any byte is written.
#[test]
fn wal_rule_skipping_the_flush_is_caught_by_the_check() {
    for mode in MODES {
        let s = setup(
            mode,
            Knobs {
                skip_wal_flush: true,
                ..Knobs::default()
            },
        );
        let err = write(&s, &[1, 2], 200, 1, &[]).unwrap_err();
        match &err {
            FlushError::WalRule {
                needed, durable, ..
            } => {
                assert_eq!(*needed, Lsn(201));
                assert_eq!(*durable, Lsn(0));
            }
            e => panic!("{mode:?}: expected WalRule, got {e}"),
        }
        assert!(err.to_string().contains("LSN 201"), "{err}");
        assert!(
            s.shared.take_events().is_empty(),
            "{mode:?}: nothing may be written"
        );
    }
}

/// Invariant 1 broken on purpose with the check off too: the event checker sees pages reach the
/// disk ahead of the log — so the checker the other tests rely on can fail.
#[test]
fn wal_rule_skipping_flush_and_check_is_caught_by_the_event_checker() {
    for mode in MODES {
        let s = setup(
            mode,
            Knobs {
                skip_wal_flush: true,
                skip_wal_check: true,
                ..Knobs::default()
            },
        );
        write(&s, &[1, 2], 200, 1, &[]).unwrap();
        let v = wal_violations(&s.shared.take_events(), PS.bytes());
        assert!(!v.is_empty(), "{mode:?}");
        assert!(v[0].contains("durable only to LSN 0"), "{v:?}");
    }
}

/// A log whose `flush_to` claims success without making anything durable is caught by the
/// check after it; a log that fails is reported with the LSN.
#[test]
fn wal_rule_a_lying_or_failing_log_stops_the_batch() {
    let s = setup(TornPageProtection::default(), Knobs::default());
    s.shared.lie.store(true, Ordering::SeqCst);
    let err = write(&s, &[1], 300, 1, &[]).unwrap_err();
    assert!(matches!(err, FlushError::WalRule { .. }), "{err}");
    s.shared.lie.store(false, Ordering::SeqCst);
    s.shared.fail.store(true, Ordering::SeqCst);
    let err = write(&s, &[1], 300, 1, &[]).unwrap_err();
    assert!(
        matches!(err, FlushError::Wal { lsn: Lsn(300), .. }),
        "{err}"
    );
    assert!(err.to_string().contains("fake log refuses"), "{err}");
    assert!(!s
        .shared
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::Write { .. })));
    assert!(!s.writer.is_poisoned(), "a refused batch does not poison");
}

#[test]
fn doublewrite_order_holds_for_big_batches_with_skipped_pages() {
    let s = setup(
        TornPageProtection::Doublewrite { batch_pages: 4 },
        Knobs::default(),
    );
    let mut lsn = 10;
    let (mut want_dw_writes, mut want_skipped) = (0, 0);
    for round in 0..5u64 {
        // 11 pages, those ≡ 1 mod 4 rebuildable, the rest in slots of 4.
        let ids: Vec<u64> = (0..11).map(|i| (i * 7 + round) % 40).collect();
        let rebuildable: Vec<u64> = ids.iter().copied().filter(|i| i % 4 == 1).collect();
        want_skipped += rebuildable.len() as u64;
        want_dw_writes += (11 - rebuildable.len() as u64).div_ceil(4);
        write(&s, &ids, lsn, round, &rebuildable).unwrap();
        lsn += 20;
    }
    let events = s.shared.take_events();
    assert_eq!(
        doublewrite_violations(&events, PS.bytes()),
        Vec::<String>::new()
    );
    assert_eq!(wal_violations(&events, PS.bytes()), Vec::<String>::new());
    let st = s.writer.stats();
    assert_eq!(st.data_pages_written, 55);
    assert_eq!(st.pages_skipped_protection, want_skipped);
    assert_eq!(st.doublewrite_pages, 55 - want_skipped);
    assert_eq!(st.doublewrite_writes, want_dw_writes);
    assert_eq!(st.batches, 5);
    // Every slot write was followed by an area sync before its pages went in place.
    let dw_writes = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Write {
                    class: FileClass::Doublewrite,
                    ..
                }
            )
        })
        .count() as u64;
    assert_eq!(dw_writes, st.doublewrite_writes);
}

/// Invariant 2 broken on purpose: pages go in place before the area is synced; the checker
/// catches it.
#[test]
fn doublewrite_in_place_before_area_sync_is_caught() {
    let s = setup(
        TornPageProtection::Doublewrite { batch_pages: 4 },
        Knobs {
            in_place_before_doublewrite_sync: true,
            ..Knobs::default()
        },
    );
    write(&s, &[1, 2, 3], 10, 1, &[]).unwrap();
    let v = doublewrite_violations(&s.shared.take_events(), PS.bytes());
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(
        v[0].contains("before its doublewrite copy was synced"),
        "{v:?}"
    );
}

/// Invariant 2 broken on purpose: slots are freed right after the in-place writes are issued
/// (no pending state, no data sync), so batch `DOUBLEWRITE_SLOTS + 1` overwrites the first
/// batch's slot while its pages are volatile. The same batches with the right order: no
/// violation.
#[test]
fn doublewrite_early_slot_reuse_is_caught() {
    for broken in [true, false] {
        let s = setup(
            TornPageProtection::Doublewrite { batch_pages: 4 },
            Knobs {
                defer_data_sync: broken,
                ..Knobs::default()
            },
        );
        for i in 0..DOUBLEWRITE_SLOTS as u64 + 1 {
            write(&s, &[2 * i + 1, 2 * i + 2], 10 * (i + 1), 1, &[]).unwrap();
        }
        let v = doublewrite_violations(&s.shared.take_events(), PS.bytes());
        if broken {
            assert_eq!(v.len(), 1, "{v:?}");
            assert!(
                v[0].contains("reused while pages of its previous batch"),
                "{v:?}"
            );
            assert_eq!(s.writer.stats().syncs, s.writer.stats().doublewrite_syncs);
        } else {
            assert_eq!(v, Vec::<String>::new());
        }
    }
}

/// Data syncs are deferred to slot reuse (docs/design.md invariant 2 read literally): over many
/// batches from one and from two threads, every slot is rewritten only after a data sync that
/// followed the in-place writes of the batch it held (`doublewrite_violations` (b)), slots are
/// actually rewritten many times, and the data file is synced about once per
/// `DOUBLEWRITE_SLOTS` batches instead of once per batch.
#[test]
fn doublewrite_slot_reuse_waits_for_a_data_sync_after_the_in_place_writes() {
    for threads in [1u64, 2] {
        let s = setup(
            TornPageProtection::Doublewrite { batch_pages: 4 },
            Knobs::default(),
        );
        let rounds = 5 * DOUBLEWRITE_SLOTS as u64;
        std::thread::scope(|scope| {
            for t in 0..threads {
                let s = &s;
                scope.spawn(move || {
                    for round in 0..rounds {
                        // The same pages again and again: several slots hold images of each.
                        let ids: Vec<u64> = (0..4).map(|i| t * 100 + (round + i) % 6).collect();
                        write(s, &ids, 10_000 * t + 10 * round + 1, round, &[]).unwrap();
                    }
                });
            }
        });
        let events = s.shared.take_events();
        assert_eq!(
            doublewrite_violations(&events, PS.bytes()),
            Vec::<String>::new(),
            "{threads} threads"
        );
        let mut slot_writes: HashMap<u64, u64> = HashMap::new();
        for e in &events {
            if let Event::Write {
                class: FileClass::Doublewrite,
                offset,
                ..
            } = e
            {
                *slot_writes.entry(*offset).or_default() += 1;
            }
        }
        assert_eq!(slot_writes.len(), DOUBLEWRITE_SLOTS, "every slot used");
        assert!(
            slot_writes.values().all(|&n| n >= 3),
            "every slot rewritten: {slot_writes:?}"
        );
        let st = s.writer.stats();
        let batches = threads * rounds;
        let data_syncs = st.syncs - st.doublewrite_syncs;
        assert_eq!(st.batches, batches);
        assert_eq!(st.doublewrite_syncs, batches);
        assert_eq!(data_syncs, st.doublewrite_reuse_syncs);
        assert!(
            data_syncs * (DOUBLEWRITE_SLOTS as u64) <= batches + DOUBLEWRITE_SLOTS as u64,
            "{threads} threads: {data_syncs} data syncs for {batches} batches"
        );
        assert!(data_syncs >= batches / DOUBLEWRITE_SLOTS as u64 - 1);
        // An explicit sync frees every pending slot: the next batches need no data sync.
        s.writer.sync_data().unwrap();
        let before = s.writer.stats();
        for i in 0..DOUBLEWRITE_SLOTS as u64 {
            write(&s, &[500 + i], 1_000_000 + i, 1, &[]).unwrap();
        }
        let after = s.writer.stats().since(&before);
        assert_eq!(after.syncs, after.doublewrite_syncs, "{after:?}");
    }
}

#[test]
fn doublewrite_order_holds_with_two_writer_threads() {
    let s = setup(
        TornPageProtection::Doublewrite { batch_pages: 3 },
        Knobs::default(),
    );
    std::thread::scope(|scope| {
        for t in 0..2u64 {
            let s = &s;
            scope.spawn(move || {
                for round in 0..20u64 {
                    let ids: Vec<u64> = (0..5).map(|i| t * 100 + (round + i) % 10).collect();
                    write(s, &ids, 1000 * t + 10 * round + 1, round, &[]).unwrap();
                }
            });
        }
    });
    let events = s.shared.take_events();
    assert_eq!(
        doublewrite_violations(&events, PS.bytes()),
        Vec::<String>::new()
    );
    assert_eq!(wal_violations(&events, PS.bytes()), Vec::<String>::new());
    assert_eq!(s.writer.stats().data_pages_written, 200);
}

/// A failed sync poisons the writer: the failing call reports the sync error naming the file,
/// every later write is refused naming it, and nothing more is written.
#[test]
fn a_failed_sync_poisons() {
    for class in [FileClass::Data, FileClass::Doublewrite] {
        let s = setup(
            TornPageProtection::Doublewrite { batch_pages: 4 },
            Knobs::default(),
        );
        write(&s, &[1, 2], 10, 1, &[]).unwrap();
        *s.shared.fail_sync.lock() = Some(class);
        // The area is synced in every batch; the data file only when a slot is reused: the
        // first batch that finds every slot pending.
        let ok_before_failure = if class == FileClass::Data {
            DOUBLEWRITE_SLOTS as u64 - 1
        } else {
            0
        };
        for i in 0..ok_before_failure {
            write(&s, &[1, 2], 20 + 10 * i, 2, &[]).unwrap();
        }
        let err = write(&s, &[1, 2], 1000, 3, &[]).unwrap_err();
        let file = if class == FileClass::Data {
            "data.keel"
        } else {
            "doublewrite.keel"
        };
        assert!(
            matches!(&err, FlushError::Poisoned { cause } if cause.error.is_sync_failure()),
            "{class:?}: {err}"
        );
        assert!(err.to_string().contains(file), "{err}");
        assert!(s.writer.is_poisoned());
        s.shared.take_events();
        for _ in 0..3 {
            let err = write(&s, &[3], 30, 3, &[]).unwrap_err();
            match &err {
                FlushError::Poisoned { cause } => {
                    assert!(cause.path.ends_with(file), "{cause}");
                    assert!(cause.error.is_sync_failure(), "{cause}");
                }
                e => panic!("expected Poisoned, got {e}"),
            }
        }
        assert!(matches!(
            s.writer.recover_doublewrite(),
            Err(FlushError::Poisoned { .. })
        ));
        assert!(
            !s.shared
                .take_events()
                .iter()
                .any(|e| matches!(e, Event::Write { .. } | Event::Sync { .. })),
            "a poisoned writer writes nothing"
        );
    }
}

/// A write that fails in place (here: the machine stops mid-batch) poisons too.
#[test]
fn a_failed_in_place_write_poisons() {
    let s = setup(TornPageProtection::None, Knobs::default());
    s.shared.crash_after(1);
    let err = write(&s, &[1, 2, 3], 10, 1, &[]).unwrap_err();
    // The call that failed returns the poison, with the original error as its cause.
    assert!(
        matches!(&err, FlushError::Poisoned { cause }
            if matches!(*cause.error, IoError::Crashed { .. }) && cause.op == "in-place write"),
        "{err}"
    );
    s.shared.crash_after(-1);
    assert!(matches!(
        write(&s, &[1], 10, 1, &[]),
        Err(FlushError::Poisoned { .. })
    ));
}

/// E2's counters: fresh pages skip the doublewrite when the skip is on, and go through it when
/// it is off.
#[test]
fn the_init_on_flush_skip_is_counted_and_can_be_switched_off() {
    for skip in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::new();
        let fs = RecFs::new(Arc::new(OsFs::default()), shared.clone());
        let mut config =
            PageWriterConfig::new(PS, TornPageProtection::Doublewrite { batch_pages: 8 });
        config.init_on_flush_skip = skip;
        let w = PageWriter::open(fs, dir.path(), config, FakeLog(shared.clone())).unwrap();
        w.recover_doublewrite().unwrap();
        let ids: Vec<u64> = (0..20).collect();
        let imgs = batch(&ids, 1, 1);
        w.write_pages(&flush_pages(&ids, &imgs, &ids)).unwrap();
        let st = w.stats();
        assert_eq!(st.data_pages_written, 20);
        if skip {
            assert_eq!(st.doublewrite_pages, 0);
            assert_eq!(st.doublewrite_writes, 0);
            assert_eq!(st.pages_skipped_protection, 20);
        } else {
            assert_eq!(st.doublewrite_pages, 20);
            assert_eq!(st.doublewrite_writes, 3);
            assert_eq!(st.pages_skipped_protection, 0);
        }
    }
}

/// Atomic mode (on SimFs, whose atomic writes are all-or-nothing): the log first, then one
/// RWF_ATOMIC write per protected page and plain writes for skipped ones, then one sync.
#[test]
fn atomic_mode_writes_each_protected_page_atomically_after_the_log() {
    let shared = Shared::new();
    let sim = keel_io::SimFs::with_seed(3);
    let fs = RecFs::new(Arc::new(sim), shared.clone());
    let w = PageWriter::open(
        fs,
        Path::new("/db"),
        PageWriterConfig::new(PS, TornPageProtection::Atomic),
        FakeLog(shared.clone()),
    )
    .unwrap();
    assert!(
        w.resolved().reason.contains("software fallback"),
        "{}",
        w.resolved().reason
    );
    shared.take_events();
    let ids = [4u64, 1, 9, 2];
    let imgs = batch(&ids, 10, 1);
    w.write_pages(&flush_pages(&ids, &imgs, &[9])).unwrap();
    let events = shared.take_events();
    assert!(
        matches!(events[0], Event::LogFlush { to: Lsn(13) }),
        "{events:?}"
    );
    assert_eq!(wal_violations(&events, PS.bytes()), Vec::<String>::new());
    let writes: Vec<(u64, bool)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Write { offset, atomic, .. } => Some((offset / PS.bytes() as u64, *atomic)),
            _ => None,
        })
        .collect();
    assert_eq!(writes, vec![(1, true), (2, true), (4, true), (9, false)]);
    assert!(matches!(
        events.last(),
        Some(Event::Sync {
            class: FileClass::Data
        })
    ));
    let st = w.stats();
    assert_eq!((st.atomic_writes, st.pages_skipped_protection), (3, 1));
    assert_eq!(st.doublewrite_writes, 0);
}
