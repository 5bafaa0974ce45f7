//! Round trips, reads, refusals, doublewrite recovery of pages damaged by hand on a real file
//! system, mode resolution, and the full-page-write helpers.

use super::*;
use crate::{
    FlushError, FlushPage, PageWriter, PageWriterConfig, ResolvedMode, TornPageProtection,
    DATA_FILE_NAME, DOUBLEWRITE_FILE_NAME,
};
use keel_io::OsFs;
use keel_page::{seal, Checksum, PageState};
use std::os::unix::fs::FileExt;

const PS: PageSize = PageSize::K4;

fn open_writer(dir: &Path, config: PageWriterConfig, shared: &Arc<Shared>) -> PageWriter {
    PageWriter::open(
        Arc::new(OsFs::default()),
        dir,
        config,
        FakeLog(shared.clone()),
    )
    .unwrap()
}

fn cfg(protection: TornPageProtection) -> PageWriterConfig {
    PageWriterConfig::new(PS, protection)
}

/// Writes version `v` of `ids` at LSN `lsn` (+ index).
fn write_v(w: &PageWriter, ids: &[u64], lsn: u64, v: u64, rebuildable: bool) {
    write_versions(w, PS, ids, lsn, v, rebuildable).unwrap();
}

fn read_version(w: &PageWriter, id: u64) -> crate::Result<Option<u64>> {
    let mut buf = vec![0u8; PS.bytes()];
    Ok(match w.read_page(PageId(id), &mut buf)? {
        PageState::Valid(h) => {
            assert_eq!(h.page_id, PageId(id));
            Some(version_of(&buf, id).expect("a verified page holds a version written"))
        }
        PageState::Unwritten => None,
    })
}

fn sealed(id: u64, lsn: u64, v: u64) -> Vec<u8> {
    let mut p = make_page(PS, id, lsn, v);
    seal(&mut p, Checksum::Crc32c);
    p
}

/// Overwrites bytes of the data file directly (a torn or lost write done by hand).
fn poke(dir: &Path, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(DATA_FILE_NAME))
        .unwrap();
    f.write_all_at(bytes, offset).unwrap();
    f.sync_all().unwrap();
}

/// Page `id` torn: the first half of version `new`, the second half of version `old`.
fn tear(dir: &Path, id: u64, old: &[u8], new: &[u8]) {
    let half = PS.bytes() / 2;
    let mut torn = new.to_vec();
    torn[half..].copy_from_slice(&old[half..]);
    poke(dir, id * PS.bytes() as u64, &torn);
}

#[test]
fn pages_round_trip_in_every_mode_buffered_and_direct() {
    for direct in [false, true] {
        for mode in [
            TornPageProtection::Doublewrite { batch_pages: 4 },
            TornPageProtection::FullPageWrites,
            TornPageProtection::None,
            TornPageProtection::Auto,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let shared = Shared::new();
            let mut config = cfg(mode);
            config.direct_io = direct;
            let w = open_writer(dir.path(), config, &shared);
            w.recover_doublewrite().unwrap();
            write_v(&w, &(0..10).collect::<Vec<_>>(), 10, 1, false);
            write_v(&w, &[2, 4, 6, 8, 12], 100, 2, false);
            for id in 0..13 {
                let want = match id {
                    2 | 4 | 6 | 8 | 12 => Some(2),
                    10 | 11 => None,
                    _ => Some(1),
                };
                assert_eq!(read_version(&w, id).unwrap(), want, "{mode:?} page {id}");
            }
            // Batched reads, with a page beyond the end and a misaligned buffer.
            let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![0xAAu8; PS.bytes() + 1]).collect();
            let mut reqs: Vec<(PageId, &mut [u8])> = bufs
                .iter_mut()
                .zip([3u64, 4, 1000, 11])
                .map(|(b, id)| (PageId(id), &mut b[1..]))
                .collect();
            let res = w.read_pages(&mut reqs);
            assert!(matches!(res[0], Ok(PageState::Valid(_))), "{res:?}");
            assert_eq!(version_of(reqs[0].1, 3), Some(1));
            assert_eq!(version_of(reqs[1].1, 4), Some(2));
            assert!(matches!(res[2], Ok(PageState::Unwritten)), "{res:?}");
            assert!(reqs[2].1.iter().all(|&b| b == 0));
            assert!(matches!(res[3], Ok(PageState::Unwritten)), "{res:?}");
            assert_eq!(w.data_pages().unwrap(), 13);
            let st = w.stats();
            assert_eq!(st.data_pages_written, 15);
            assert_eq!(st.batches, 2);
            assert!(st.syncs >= 2);
        }
    }
}

#[test]
fn bad_reads_and_bad_pages_are_refused_naming_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let w = open_writer(dir.path(), cfg(TornPageProtection::None), &shared);
    let mut small = vec![0u8; 100];
    let err = w.read_page(PageId(3), &mut small).unwrap_err();
    assert!(
        matches!(err, FlushError::BadBuffer { len: 100, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("page 3"), "{err}");

    let p5 = make_page(PS, 5, 10, 1);
    let cases: Vec<(FlushPage<'_>, &str)> = vec![
        (
            FlushPage {
                page_id: PageId(5),
                image: &p5[..100],
                lsn: Lsn(10),
                rebuildable_from_redo: false,
            },
            "100 bytes",
        ),
        (
            FlushPage {
                page_id: PageId(6),
                image: &p5,
                lsn: Lsn(10),
                rebuildable_from_redo: false,
            },
            "misdirected",
        ),
        (
            FlushPage {
                page_id: PageId(5),
                image: &p5,
                lsn: Lsn(11),
                rebuildable_from_redo: false,
            },
            "LSN 10 but the batch says LSN 11",
        ),
    ];
    for (p, want) in cases {
        let err = w.write_pages(&[p]).unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
    }
    let p = FlushPage {
        page_id: PageId(5),
        image: &p5,
        lsn: Lsn(10),
        rebuildable_from_redo: false,
    };
    let err = w.write_pages(&[p, p]).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    assert_eq!(w.stats().data_writes, 0);
    assert_eq!(w.data_pages().unwrap(), 0);
    assert!(!w.is_poisoned());
}

/// Never silent: in `None` mode a torn page is reported as corruption naming file and page, by
/// single and batched reads, before and after a reopen — never returned as data.
#[test]
fn none_mode_torn_page_is_corruption_never_data() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let w = open_writer(dir.path(), cfg(TornPageProtection::None), &shared);
    write_v(&w, &[1, 2, 3], 10, 1, false);
    write_v(&w, &[3], 20, 2, false);
    tear(dir.path(), 3, &sealed(3, 12, 1), &sealed(3, 20, 2));
    let mut buf = vec![0u8; PS.bytes()];
    let err = w.read_page(PageId(3), &mut buf).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, FlushError::Corruption(_)), "{msg}");
    assert!(msg.contains("data.keel") && msg.contains("page 3"), "{msg}");
    assert!(msg.contains("checksum mismatch"), "{msg}");
    drop(w);
    let w = open_writer(dir.path(), cfg(TornPageProtection::None), &shared);
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
    let mut bufs = [vec![0u8; PS.bytes()], vec![0u8; PS.bytes()]];
    let [a, b] = &mut bufs;
    let res = w.read_pages(&mut [(PageId(2), &mut a[..]), (PageId(3), &mut b[..])]);
    assert!(matches!(res[0], Ok(PageState::Valid(_))));
    assert!(matches!(res[1], Err(FlushError::Corruption(_))), "{res:?}");
}

/// Doublewrite recovery restores a torn home page and a home page whose write was lost (older
/// LSN), counts them, reports each, and is idempotent.
#[test]
fn doublewrite_recovery_restores_a_torn_page_and_a_lost_write() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let config = cfg(TornPageProtection::Doublewrite { batch_pages: 4 });
    let w = open_writer(dir.path(), config, &shared);
    write_v(&w, &[1, 2, 3], 10, 1, false);
    write_v(&w, &[1, 2, 3], 20, 2, false);
    drop(w);
    tear(dir.path(), 1, &sealed(1, 10, 1), &sealed(1, 20, 2));
    poke(dir.path(), 2 * PS.bytes() as u64, &sealed(2, 11, 1));
    let w = open_writer(dir.path(), config, &shared);
    assert!(matches!(
        read_version(&w, 1),
        Err(FlushError::Corruption(_))
    ));
    assert_eq!(read_version(&w, 2).unwrap(), Some(1));
    let r = w.recover_doublewrite().unwrap();
    assert_eq!(r.restored_pages, 2, "{r:?}");
    assert_eq!(r.restored[0].page_id, PageId(1));
    assert_eq!(r.restored[0].image_lsn, Lsn(20));
    assert_eq!(r.restored[0].home_lsn, None);
    assert_eq!(r.restored[1].page_id, PageId(2));
    assert_eq!(r.restored[1].home_lsn, Some(Lsn(11)));
    assert_eq!(r.slots_valid, 2);
    assert_eq!(w.stats().restored_pages, 2);
    for id in 1..=3 {
        assert_eq!(read_version(&w, id).unwrap(), Some(2));
    }
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
    drop(w);
    let w = open_writer(dir.path(), config, &shared);
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
}

/// A home page newer than every image (written later, here skipping the doublewrite) is kept.
#[test]
fn recovery_keeps_a_newer_home_page() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let config = cfg(TornPageProtection::Doublewrite { batch_pages: 4 });
    let w = open_writer(dir.path(), config, &shared);
    write_v(&w, &[5], 10, 1, false);
    write_v(&w, &[5], 20, 2, true);
    assert_eq!(w.stats().pages_skipped_protection, 1);
    drop(w);
    let w = open_writer(dir.path(), config, &shared);
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
    assert_eq!(read_version(&w, 5).unwrap(), Some(2));
}

/// The area's images are applied before any slot is overwritten, even if the caller forgot to
/// call `recover_doublewrite`.
#[test]
fn a_write_before_recovery_runs_recovery_first() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let config = cfg(TornPageProtection::Doublewrite { batch_pages: 2 });
    let w = open_writer(dir.path(), config, &shared);
    write_v(&w, &[1, 2], 10, 1, false);
    drop(w);
    tear(dir.path(), 1, &[0u8; 4096], &sealed(1, 10, 1));
    let w = open_writer(dir.path(), config, &shared);
    // Enough batches to overwrite every slot.
    for i in 0..crate::DOUBLEWRITE_SLOTS as u64 + 2 {
        write_v(&w, &[10 + i, 20 + i], 100 + 10 * i, 1, false);
    }
    assert_eq!(w.stats().restored_pages, 1);
    assert_eq!(read_version(&w, 1).unwrap(), Some(1));
}

/// Reopening with another batch size recovers with the layout on disk, then reformats.
#[test]
fn a_new_batch_size_recovers_with_the_old_layout_then_reformats() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let w = open_writer(
        dir.path(),
        cfg(TornPageProtection::Doublewrite { batch_pages: 4 }),
        &shared,
    );
    write_v(&w, &[1, 2, 3], 10, 1, false);
    drop(w);
    tear(dir.path(), 2, &[0u8; 4096], &sealed(2, 11, 1));
    let config = cfg(TornPageProtection::Doublewrite { batch_pages: 16 });
    let w = open_writer(dir.path(), config, &shared);
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 1);
    let len = std::fs::metadata(dir.path().join(DOUBLEWRITE_FILE_NAME))
        .unwrap()
        .len();
    assert_eq!(
        len,
        4096 + crate::DOUBLEWRITE_SLOTS as u64 * (4096 + 16 * 4096)
    );
    write_v(&w, &(0..16).collect::<Vec<_>>(), 100, 2, false);
    assert_eq!(w.stats().doublewrite_writes, 1);
    drop(w);
    let w = open_writer(dir.path(), config, &shared);
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
    assert_eq!(read_version(&w, 2).unwrap(), Some(2));
}

/// Outside doublewrite mode, an area left by an earlier run is recovered from and then emptied:
/// a page torn later (unprotected) is reported, never "repaired" with an older image.
#[test]
fn other_modes_recover_from_an_old_area_then_empty_it() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let w = open_writer(
        dir.path(),
        cfg(TornPageProtection::Doublewrite { batch_pages: 4 }),
        &shared,
    );
    write_v(&w, &[1], 10, 1, false);
    drop(w);
    tear(dir.path(), 1, &[0u8; 4096], &sealed(1, 10, 1));
    let w = open_writer(dir.path(), cfg(TornPageProtection::None), &shared);
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 1);
    let area = dir.path().join(DOUBLEWRITE_FILE_NAME);
    assert_eq!(std::fs::metadata(&area).unwrap().len(), 0);
    write_v(&w, &[1], 20, 2, false);
    drop(w);
    tear(dir.path(), 1, &sealed(1, 10, 1), &sealed(1, 20, 2));
    let w = open_writer(dir.path(), cfg(TornPageProtection::None), &shared);
    assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
    assert!(matches!(
        read_version(&w, 1),
        Err(FlushError::Corruption(_))
    ));
}

#[test]
fn auto_resolves_to_doublewrite_without_hardware_atomics_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let w = open_writer(dir.path(), cfg(TornPageProtection::Auto), &shared);
    let r = w.resolved();
    assert_eq!(r.requested, TornPageProtection::Auto);
    assert_eq!(r.mode, ResolvedMode::Doublewrite { batch_pages: 128 });
    assert!(r.reason.starts_with("auto:"), "{}", r.reason);
    assert!(!w.wants_full_page_images());
}

/// A probe claiming hardware atomics on a file that cannot do them: `Auto` falls back to
/// doublewrite and says so; `Atomic` is an error naming what the data file reported.
#[test]
fn a_probe_the_data_file_contradicts_is_handled() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let mut fs = RecFs {
        inner: Arc::new(OsFs::default()),
        shared: shared.clone(),
        caps: None,
    };
    let mut caps = OsFs::default().capabilities(dir.path()).unwrap();
    caps.atomic = AtomicWriteLimits {
        unit_min: 4096,
        unit_max: 65536,
        segments_max: 1,
        unit_max_opt: 65536,
    };
    fs.caps = Some(caps);
    let fs = Arc::new(fs);
    let w = PageWriter::open(
        fs.clone(),
        dir.path(),
        cfg(TornPageProtection::Auto),
        FakeLog(shared.clone()),
    )
    .unwrap();
    assert_eq!(
        w.resolved().mode,
        ResolvedMode::Doublewrite { batch_pages: 128 }
    );
    assert!(
        w.resolved().reason.contains("data file"),
        "{}",
        w.resolved().reason
    );
    drop(w);
    let err = PageWriter::open(
        fs,
        dir.path(),
        cfg(TornPageProtection::Atomic),
        FakeLog(shared),
    )
    .unwrap_err();
    assert!(matches!(err, FlushError::AtomicUnavailable { .. }), "{err}");
    assert!(err.to_string().contains("data file"), "{err}");
}

#[test]
fn full_page_writes_mode_wants_images_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let w = open_writer(dir.path(), cfg(TornPageProtection::FullPageWrites), &shared);
    assert!(w.wants_full_page_images());
    assert!(w.should_log_full_page_image(false));
    assert!(!w.should_log_full_page_image(true));
    w.count_full_page_image(4096);
    w.count_full_page_image(4096);
    let st = w.stats();
    assert_eq!(st.pages_skipped_protection, 1);
    assert_eq!((st.full_page_images, st.full_page_image_bytes), (2, 8192));
    assert!(w.doublewrite_path().is_none());
    let json = serde_json::to_value(st).unwrap();
    assert_eq!(json["full_page_image_bytes"], 8192);

    let mut config = cfg(TornPageProtection::FullPageWrites);
    config.init_on_flush_skip = false;
    let dir = tempfile::tempdir().unwrap();
    let w = open_writer(dir.path(), config, &shared);
    assert!(w.should_log_full_page_image(true));
    let dir = tempfile::tempdir().unwrap();
    let w = open_writer(dir.path(), cfg(TornPageProtection::None), &shared);
    assert!(!w.wants_full_page_images() && !w.should_log_full_page_image(false));
}

#[test]
fn impossible_batch_sizes_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    for batch_pages in [0, 100_000] {
        let err = PageWriter::open(
            Arc::new(OsFs::default()),
            dir.path(),
            cfg(TornPageProtection::Doublewrite { batch_pages }),
            FakeLog(Shared::new()),
        )
        .unwrap_err();
        assert!(matches!(err, FlushError::Config(_)), "{err}");
    }
}

/// The file checkpoint on page 0: a stamp makes the log durable up to it first, reaches the
/// disk changing nothing but page 0's first 32 bytes, and every later write of page 0 records at
/// least it (invariant broken on purpose: a writer that forgot the floor writes page 0 without a
/// record, which the open would take for a data file older than the log).
#[test]
fn the_file_checkpoint_is_stamped_durably_and_kept_by_later_writes() {
    for mode in [
        TornPageProtection::Doublewrite { batch_pages: 4 },
        TornPageProtection::FullPageWrites,
        TornPageProtection::None,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::new();
        let w = open_writer(dir.path(), cfg(mode), &shared);
        w.recover_doublewrite().unwrap();
        // No floor yet: page 0 is written as given, with no record.
        write_v(&w, &[0, 1], 10, 1, false);
        assert_eq!(w.file_checkpoint_on_disk().unwrap(), None, "{mode:?}");
        let before = std::fs::read(dir.path().join(DATA_FILE_NAME)).unwrap();
        w.set_file_checkpoint_floor(Lsn(10));
        w.stamp_checkpoint(Lsn(40)).unwrap();
        assert!(
            shared.durable.load(Ordering::SeqCst) >= 40,
            "log made durable first"
        );
        assert_eq!(w.file_checkpoint_on_disk().unwrap(), Some(Lsn(40)));
        let after = std::fs::read(dir.path().join(DATA_FILE_NAME)).unwrap();
        let ps = PS.bytes();
        assert_eq!(
            before[32..ps],
            after[32..ps],
            "only the header's first 32 bytes change"
        );
        assert_eq!(before[ps..], after[ps..], "no other page is touched");
        // A stamp at or below the durable one writes nothing.
        let stamps = w.stats().checkpoint_stamps;
        w.stamp_checkpoint(Lsn(30)).unwrap();
        assert_eq!(w.stats().checkpoint_stamps, stamps);
        // A later write of page 0 (whose image carries no record) keeps the stamp.
        write_v(&w, &[0], 50, 2, false);
        assert_eq!(w.file_checkpoint_on_disk().unwrap(), Some(Lsn(40)));
        assert_eq!(read_version(&w, 0).unwrap(), Some(2));
        // On purpose: a writer opened again without the floor drops the record.
        drop(w);
        let w = open_writer(dir.path(), cfg(mode), &shared);
        w.recover_doublewrite().unwrap();
        write_v(&w, &[0], 60, 3, false);
        assert_eq!(w.file_checkpoint_on_disk().unwrap(), None, "{mode:?}");
    }
}

/// Without a page checksum no page skips the protection, rebuildable or not: a torn write of it
/// could pass every check (header and trailer LSN agree), and recovery reads a pending page
/// copy's disk copy rather than rebuilding it. With a checksum, rebuildable pages skip it.
#[test]
fn without_a_checksum_no_page_skips_the_protection() {
    for protection in [
        TornPageProtection::Doublewrite { batch_pages: 4 },
        TornPageProtection::Atomic,
    ] {
        for (checksum, skipped) in [
            (keel_page::Checksum::Crc32c, 1),
            (keel_page::Checksum::Legacy, 1),
            (keel_page::Checksum::None, 0),
        ] {
            let shared = Shared::new();
            let config = PageWriterConfig {
                checksum,
                ..cfg(protection)
            };
            let fs = keel_io::SimFs::new(keel_io::SimConfig::seeded(1).hardware_atomic());
            let w = PageWriter::open(
                Arc::new(fs),
                Path::new("/db"),
                config,
                FakeLog(shared.clone()),
            )
            .unwrap();
            w.recover_doublewrite().unwrap();
            write_v(&w, &[5], 10, 1, true);
            assert_eq!(
                w.stats().pages_skipped_protection,
                skipped,
                "{protection:?} {checksum:?}"
            );
        }
    }
}

/// A buffered in-place write lost in write-back (SimFs `WritebackFailsNth`: the write returns,
/// the block keeps its old bytes) reads back as the old page, valid and checksummed. Module
/// `unsynced` refuses it (`LostWrite`) and poisons the writer, in every mode that writes in
/// place before a data sync (doublewrite defers that sync); without the check the read returns
/// version 1.
#[test]
fn a_page_whose_write_was_lost_in_writeback_is_refused_not_read_old() {
    for protection in [
        TornPageProtection::Doublewrite { batch_pages: 4 },
        TornPageProtection::None,
    ] {
        let shared = Shared::new();
        let fs = keel_io::SimFs::new(keel_io::SimConfig::seeded(3));
        let w = PageWriter::open(
            Arc::new(fs.clone()),
            Path::new("/db"),
            cfg(protection),
            FakeLog(shared.clone()),
        )
        .unwrap();
        w.recover_doublewrite().unwrap();
        write_v(&w, &[5, 6], 10, 1, false);
        w.sync_data().unwrap();
        // The next buffered write request is lost: in doublewrite mode the area's own write
        // comes first (and is synced before the in-place writes), so aim at the in-place one.
        let nth = if matches!(protection, TornPageProtection::Doublewrite { .. }) {
            2
        } else {
            1
        };
        fs.inject(keel_io::Fault::WritebackFailsNth(nth));
        let r = write_versions(&w, PS, &[5], 20, 2, false);
        assert_eq!(fs.fault_stats().writeback_lost, 1, "{protection:?}");
        match read_version(&w, 5) {
            Err(FlushError::LostWrite {
                page_id,
                written,
                read,
                ..
            }) => {
                assert_eq!((page_id, written, read), (PageId(5), Lsn(20), Lsn(10)));
            }
            // None mode syncs at once: the lost write's error comes back from that sync.
            other if r.is_err() => {
                assert!(matches!(protection, TornPageProtection::None), "{other:?}");
                assert!(
                    other.is_err(),
                    "{protection:?}: read after a failed sync: {other:?}"
                );
            }
            other => panic!("{protection:?}: expected LostWrite, got {other:?}"),
        }
        assert!(w.is_poisoned(), "{protection:?}");
        // A page whose write was not lost still reads.
        assert_eq!(read_version(&w, 6).unwrap(), Some(1));
    }
}

/// A page damaged after the checkpoint covered its last write (a flipped bit, not a torn
/// write: no write is torn at or below the checkpoint) is not "repaired" with an area image the
/// checkpoint covered, unless the image is the very version on disk (the damaged page's header
/// names its LSN). Before, an image of the page's previous life was restored — a page started
/// afresh is written home without the area — and served its old rows as the page's, past every
/// check (found by a session's adversarial test: a dropped table's keys in another table).
#[test]
fn a_damaged_page_is_not_repaired_with_an_image_the_checkpoint_covered() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let config = cfg(TornPageProtection::Doublewrite { batch_pages: 2 });
    let flip_middle = |dir: &Path| {
        let off = PS.bytes() as u64 + PS.bytes() as u64 / 2;
        let f = std::fs::File::open(dir.join(DATA_FILE_NAME)).unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, off).unwrap();
        poke(dir, off, &[b[0] ^ 0x10]);
    };
    let w = open_writer(dir.path(), config, &shared);
    // Version 1 of page 1 through the area at LSN 10; then version 2, started afresh
    // (rebuildable from redo), home without the area at LSN 20.
    write_v(&w, &[1], 10, 1, false);
    let through_area = w.stats().doublewrite_writes;
    write_v(&w, &[1], 20, 2, true);
    assert_eq!(
        w.stats().doublewrite_writes,
        through_area,
        "version 2 skipped the area"
    );
    drop(w);
    flip_middle(dir.path());
    // The checkpoint at 20 covers both writes: nothing is restored, the page reads as damaged.
    let w = open_writer(dir.path(), config, &shared);
    let rec = w.recover_doublewrite_in_memory(Lsn(20)).unwrap();
    assert_eq!(rec.restored_pages, 0, "{rec:?}");
    assert!(
        matches!(read_version(&w, 1), Err(FlushError::Corruption(_))),
        "{:?}",
        read_version(&w, 1)
    );
    // Below the checkpoint the image is what a torn write would need (the redo since the
    // checkpoint then supersedes it): restored as before.
    drop(w);
    let w = open_writer(dir.path(), config, &shared);
    assert_eq!(
        w.recover_doublewrite_in_memory(Lsn(5))
            .unwrap()
            .restored_pages,
        1
    );
    drop(w);
    // The same version damaged since: version 3 through the area at LSN 30, a bit flipped,
    // the checkpoint at 30: its header names LSN 30, so the image mends it.
    let w = open_writer(dir.path(), config, &shared);
    w.recover_doublewrite().unwrap();
    write_v(&w, &[1], 30, 3, false);
    drop(w);
    flip_middle(dir.path());
    let w = open_writer(dir.path(), config, &shared);
    assert_eq!(
        w.recover_doublewrite_in_memory(Lsn(30))
            .unwrap()
            .restored_pages,
        1
    );
    assert_eq!(read_version(&w, 1).unwrap(), Some(3));
}
