//! Redo application: the LSN rule, images first, pages defined by redo alone, torn pages rebuilt
//! from a later PageInit or reported (naming file and page), frees, bad records; and the E2
//! init-on-flush effect through keel-flush's page writer.

mod common;

use common::*;
use keel_buffer_pool::{
    BufferPool, MemLog, MemStore, PoolConfig, PoolError, Record, RecoveredGroup,
};
use keel_page::{Lsn, PageHeader, PageId, PageSize, PageType, PAGE_HEADER_SIZE};
use std::sync::Arc;

const P: usize = PAGE_HEADER_SIZE + 8;

fn group(start: u64, end: u64, records: Vec<Record>) -> RecoveredGroup {
    RecoveredGroup {
        start_lsn: Lsn(start),
        end_lsn: Lsn(end),
        records,
    }
}

fn write(id: u64, off: usize, bytes: &[u8]) -> Record {
    Record::PageWrite {
        page_id: PageId(id),
        offset: off as u32,
        bytes: bytes.to_vec().into(),
    }
}

fn init(id: u64) -> Record {
    Record::PageInit {
        page_id: PageId(id),
        page_type: PageType::RAW,
    }
}

fn pool_over(store: &Arc<MemStore>) -> BufferPool {
    let cfg = PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: 16 * 4096,
        ..Default::default()
    };
    BufferPool::new(cfg, store.clone()).unwrap()
}

#[test]
fn records_apply_only_where_the_page_lsn_is_older() {
    let store = Arc::new(MemStore::new(PageSize::K4));
    // Page 1 on disk at LSN 200 (it holds the effect of the group ending at 200).
    let mut img = page_image(4096, 1, 0, Lsn(200));
    img[P..P + 3].copy_from_slice(b"new");
    store.put_raw(PageId(1), {
        keel_page::seal(&mut img, keel_page::Checksum::Crc32c);
        img
    });
    let pool = pool_over(&store);
    let rep = pool
        .apply_redo(
            Lsn(50),
            &[
                group(100, 150, vec![write(1, P, b"old")]),
                group(150, 200, vec![write(1, P, b"new")]),
                group(200, 250, vec![write(1, P + 3, b"+later")]),
            ],
        )
        .unwrap();
    assert_eq!(rep.records_skipped, 2);
    assert_eq!(rep.records_applied, 1);
    assert_eq!(rep.pages_read, 1);
    let g = pool.read(PageId(1)).unwrap();
    assert_eq!(&g[P..P + 9], b"new+later");
    assert_eq!(g.lsn(), Lsn(250));
    drop(g);
    // The recovered page is dirty from the first group it was replayed for, skipped ones
    // included: the copy that made them skip may have been read from the page cache only, so
    // the checkpoint may not pass them before the page is written again (`finish_skipped`).
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(100)));
    pool.flush_all().unwrap();
    assert_eq!(store.max_written_lsn(), Lsn(250));
}

#[test]
fn a_page_defined_by_redo_is_not_read_and_images_go_first() {
    let store = Arc::new(MemStore::new(PageSize::K4));
    seed(&*store, 4);
    // Page 2 is torn on disk; its redo since the checkpoint starts with an image.
    let mut torn = store.stored(PageId(2)).unwrap();
    torn[2000] ^= 0xFF;
    store.put_raw(PageId(2), torn);
    let mut image = page_image(4096, 2, 5, Lsn(90));
    image[P..P + 5].copy_from_slice(b"IMAGE");
    let pool = pool_over(&store);
    let rep = pool
        .apply_redo(
            Lsn(100),
            &[group(
                100,
                160,
                vec![
                    Record::PageImage {
                        page_id: PageId(2),
                        image: image.clone(),
                    },
                    write(2, P + 5, b"-then-write"),
                    init(9),
                    write(9, P, b"fresh"),
                ],
            )],
        )
        .unwrap();
    assert_eq!(rep.pages_read, 0, "neither page needed its disk copy");
    assert_eq!(rep.pages_from_redo, 2);
    assert_eq!(rep.images_installed, 1);
    let g = pool.read(PageId(2)).unwrap();
    assert_eq!(&g[P..P + 16], b"IMAGE-then-write");
    assert_eq!(g.lsn(), Lsn(160));
    let g9 = pool.read(PageId(9)).unwrap();
    assert_eq!(&g9[P..P + 5], b"fresh");
    assert_eq!(g9.page_type(), PageType::RAW);
    assert_eq!(PageHeader::read(&g9).unwrap().page_id, PageId(9));
}

#[test]
fn a_torn_page_is_rebuilt_from_a_later_init_or_reported() {
    let store = Arc::new(MemStore::new(PageSize::K4));
    seed(&*store, 4);
    let mut torn = store.stored(PageId(3)).unwrap();
    torn[3000] ^= 1;
    store.put_raw(PageId(3), torn);
    // Its redo starts with a plain write, but a later PageInit rebuilds it.
    let pool = pool_over(&store);
    let rep = pool
        .apply_redo(
            Lsn(100),
            &[
                group(100, 150, vec![write(3, P, b"superseded")]),
                group(150, 200, vec![init(3), write(3, P, b"rebuilt")]),
            ],
        )
        .unwrap();
    assert_eq!(rep.unusable_pages_rebuilt, vec![PageId(3)]);
    assert_eq!(rep.records_superseded, 1);
    let g = pool.read(PageId(3)).unwrap();
    assert_eq!(&g[P..P + 10], b"rebuilt\0\0\0");
    drop(g);
    // Without the PageInit the page cannot be rebuilt: an error naming file and page, and the
    // page is not in the pool.
    let pool = pool_over(&store);
    let err = pool
        .apply_redo(Lsn(100), &[group(100, 150, vec![write(3, P, b"x")])])
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            PoolError::Unrecoverable {
                page_id: PageId(3),
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("mem:data") && msg.contains("page 3"), "{msg}");
    assert!(msg.contains("checksum"), "the cause is named: {msg}");
    assert!(!pool.contains(PageId(3)));
    assert!(pool.read(PageId(3)).unwrap_err().is_corruption());
}

#[test]
fn redo_for_a_page_never_written_without_an_init_is_reported() {
    let store = Arc::new(MemStore::new(PageSize::K4));
    let pool = pool_over(&store);
    let err = pool
        .apply_redo(Lsn(0), &[group(10, 50, vec![write(7, P, b"orphan")])])
        .unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::Unrecoverable {
                page_id: PageId(7),
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("never written"), "{err}");
}

#[test]
fn freed_pages_are_dropped_and_bad_records_are_errors() {
    let store = Arc::new(MemStore::new(PageSize::K4));
    seed(&*store, 4);
    let pool = pool_over(&store);
    let rep = pool
        .apply_redo(
            Lsn(0),
            &[
                group(
                    10,
                    50,
                    vec![
                        write(1, P, b"gone"),
                        Record::PageFree { page_id: PageId(1) },
                    ],
                ),
                group(50, 90, vec![Record::PageFree { page_id: PageId(2) }]),
                group(
                    90,
                    99,
                    vec![Record::Logical {
                        kind: 7,
                        bytes: vec![1, 2],
                    }],
                ),
            ],
        )
        .unwrap();
    assert_eq!(rep.pages_freed, 1);
    assert_eq!(rep.logical_records, 1);
    assert!(!pool.contains(PageId(1)) && !pool.contains(PageId(2)));
    assert_eq!(pool.dirty_pages(), 0, "freed pages are not written");
    // A move leaving the payload in a recovered record is an error naming page and LSN.
    let pool = pool_over(&store);
    let err = pool
        .apply_redo(
            Lsn(0),
            &[group(
                10,
                60,
                vec![Record::PageMove {
                    page_id: PageId(3),
                    src: P as u32,
                    dst: 4090,
                    len: 8,
                }],
            )],
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::BadRedo {
                page_id: PageId(3),
                lsn: Lsn(60),
                ..
            }
        ),
        "{err}"
    );
    // A write past the payload in a recovered record is an error naming page and LSN.
    let pool = pool_over(&store);
    let err = pool
        .apply_redo(
            Lsn(0),
            &[group(10, 50, vec![write(0, 4096 - 4, b"12345678")])],
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::BadRedo {
                page_id: PageId(0),
                lsn: Lsn(50),
                ..
            }
        ),
        "{err}"
    );
    let err = pool
        .apply_redo(
            Lsn(0),
            &[group(
                10,
                50,
                vec![Record::PageImage {
                    page_id: PageId(0),
                    image: vec![1; 100],
                }],
            )],
        )
        .unwrap_err();
    assert!(matches!(err, PoolError::BadRedo { .. }), "{err}");
}

/// Live redo replays to the same pages: commit through a MemLog, "lose" the pool, replay.
#[test]
fn replaying_the_log_reproduces_the_pool() {
    let store = Arc::new(MemStore::new(PageSize::K4));
    seed(&*store, 8);
    let pool = pool_over(&store);
    let log = MemLog::new();
    let mut rng = Rng(5);
    for _ in 0..50 {
        let t = pool.begin();
        for _ in 0..3 {
            let id = rng.below(12);
            let mut g = if id >= 8 && !pool.contains(PageId(id)) {
                t.new_page(PageId(id), PageType::BTREE_LEAF).unwrap()
            } else {
                match t.write(PageId(id)) {
                    Ok(g) => g,
                    Err(PoolError::Unwritten { .. }) => {
                        t.new_page(PageId(id), PageType::RAW).unwrap()
                    }
                    Err(PoolError::AlreadyLatched { .. }) => continue,
                    Err(e) => panic!("{e}"),
                }
            };
            let off = P + rng.below(3000) as usize;
            g.write(off, &rng.next().to_le_bytes()).unwrap();
        }
        t.commit(&log).unwrap();
    }
    let live: Vec<Vec<u8>> = (0..12)
        .map(|i| pool.read(PageId(i)).unwrap().to_vec())
        .collect();
    // Nothing was flushed: replay everything onto the seeded store.
    let fresh = pool_over(&store);
    fresh
        .apply_redo(Lsn::ZERO, &log.groups_since(Lsn::ZERO))
        .unwrap();
    for (i, want) in live.iter().enumerate() {
        let g = fresh.read(PageId(i as u64)).unwrap();
        assert_eq!(&g[8..], &want[8..], "page {i}");
    }
}

/// E2 through the pool: N fresh pages (PageInit) flushed with the init-on-flush skip write no
/// doublewrite pages; with the skip off they all go through the doublewrite area.
#[test]
fn fresh_pages_skip_the_doublewrite_e2() {
    use keel_flush::{PageWriter, PageWriterConfig, TornPageProtection};
    use keel_io::sim::SimFs;
    for skip in [true, false] {
        let log = common::modellog::ModelLog::new();
        let mut cfg = PageWriterConfig::new(
            PageSize::K4,
            TornPageProtection::Doublewrite { batch_pages: 32 },
        );
        cfg.init_on_flush_skip = skip;
        let writer = Arc::new(
            PageWriter::open(
                Arc::new(SimFs::with_seed(1)),
                std::path::Path::new("/db"),
                cfg,
                log.clone(),
            )
            .unwrap(),
        );
        let pool = BufferPool::new(
            PoolConfig {
                page_size: PageSize::K4,
                pool_bytes: 256 * 4096,
                ..Default::default()
            },
            writer.clone(),
        )
        .unwrap();
        for chunk in 0..4u64 {
            let t = pool.begin();
            for id in chunk * 32..(chunk + 1) * 32 {
                t.new_page(PageId(id), PageType::RAW)
                    .unwrap()
                    .write(P, b"row")
                    .unwrap();
            }
            t.commit(&log).unwrap();
        }
        assert_eq!(pool.flush_all().unwrap(), 128);
        let s = writer.stats();
        if skip {
            assert_eq!(
                (s.doublewrite_pages, s.pages_skipped_protection),
                (0, 128),
                "{s:?}"
            );
        } else {
            assert_eq!(
                (s.doublewrite_pages, s.pages_skipped_protection),
                (128, 0),
                "{s:?}"
            );
        }
        assert_eq!(s.data_pages_written, 128);
    }
}

/// Errors of the page writer below keep their type: a poisoned writer is recognisable.
#[test]
fn a_page_writer_error_keeps_its_type() {
    use keel_flush::{FlushError, PageWriter, PageWriterConfig, TornPageProtection};
    use keel_io::sim::{Fault, SimFs};
    let fs = SimFs::with_seed(3);
    let log = common::modellog::ModelLog::new();
    let writer = Arc::new(
        PageWriter::open(
            Arc::new(fs.clone()),
            std::path::Path::new("/db"),
            PageWriterConfig::new(PageSize::K4, TornPageProtection::None),
            log.clone(),
        )
        .unwrap(),
    );
    let pool = BufferPool::new(
        PoolConfig {
            page_size: PageSize::K4,
            pool_bytes: 16 * 4096,
            ..Default::default()
        },
        writer,
    )
    .unwrap();
    let t = pool.begin();
    t.new_page(PageId(1), PageType::RAW).unwrap();
    t.commit(&log).unwrap();
    fs.inject(Fault::SyncFailsNth(1));
    let e = pool.flush_all().unwrap_err();
    assert!(e.flush_error().is_some(), "{e}");
    assert_eq!(
        pool.dirty_pages(),
        1,
        "a failed write leaves the page dirty"
    );
    let e = pool.flush_all().unwrap_err();
    assert!(
        matches!(e.flush_error(), Some(FlushError::Poisoned { .. })),
        "{e}"
    );
}

/// Which pages the recovered redo rebuilds by itself (`pages_redo_cannot_rebuild`, what a
/// full-page-writes open decides on): a page whose first record since the checkpoint is an
/// image, an init or a free is rebuilt; one that starts with a change, or with the init of a
/// page made a copy (which needs its source as it was), is not. Later records do not count.
#[test]
fn only_pages_whose_redo_starts_with_a_change_or_a_copy_cannot_be_rebuilt() {
    let image = |id: u64| Record::PageImage {
        page_id: PageId(id),
        image: vec![0; 4096],
    };
    let groups = vec![
        group(
            100,
            150,
            vec![image(1), write(1, P, b"x"), write(2, P, b"y")],
        ),
        group(
            150,
            200,
            vec![
                init(3),
                Record::PageCopy {
                    page_id: PageId(3),
                    from: PageId(1),
                },
            ],
        ),
        group(
            200,
            250,
            vec![Record::PageFree { page_id: PageId(4) }, init(5), image(2)],
        ),
        group(
            250,
            300,
            vec![write(5, P, b"z"), init(6), write(6, P, b"w")],
        ),
    ];
    assert_eq!(
        keel_buffer_pool::recovery::pages_redo_cannot_rebuild(&groups),
        vec![PageId(2), PageId(3)]
    );
    assert!(keel_buffer_pool::recovery::pages_redo_cannot_rebuild(&groups[2..]).is_empty());
}
