//! The page writer with the real keel-redo-log: the WAL rule forces it, and full page writes
//! (images logged as `Record::PageImage`) repair torn pages after a crash on SimFs.

use super::*;
use crate::{full_page_image_record, FlushError, FlushPage, PageWriter, PageWriterConfig};
use crate::{ResolvedMode, TornPageProtection};
use keel_io::{SimConfig, SimFs};
use keel_page::{seal, set_lsn, Checksum, PageState};
use keel_redo_log::{LogConfig, Record, RedoLog};
use std::collections::BTreeMap;

const PS: PageSize = PageSize::K4;

#[test]
fn the_real_log_is_durable_before_any_page_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(keel_io::OsFs::default());
    let (log, _) =
        RedoLog::open(fs.clone(), &dir.path().join("log"), LogConfig::default()).unwrap();
    let w = PageWriter::open(
        fs,
        &dir.path().join("data"),
        PageWriterConfig::new(PS, TornPageProtection::Doublewrite { batch_pages: 8 }),
        log.clone(),
    )
    .unwrap();
    w.recover_doublewrite().unwrap();
    for round in 0..20u64 {
        let lsn = log
            .append(&[Record::PageWrite {
                page_id: PageId(round % 5),
                offset: 64,
                bytes: vec![round as u8; 100].into(),
            }])
            .unwrap();
        let img = make_page(PS, round % 5, lsn.0, round);
        w.write_pages(&[FlushPage {
            page_id: PageId(round % 5),
            image: &img,
            lsn,
            rebuildable_from_redo: false,
        }])
        .unwrap();
        assert!(log.durable_lsn() >= lsn);
    }
    let st = w.stats();
    assert!(st.forced_log_flushes <= 20);
    assert_eq!(st.data_pages_written, 20);
}

/// FullPageWrites end to end at this layer: each change of a page logs its full image
/// (`full_page_image_record`), pages go in place without protection, a crash tears some; replaying
/// the recovered log's images (as the buffer pool does) repairs every page, and the page writer
/// itself never returns a torn page as data.
#[test]
fn full_page_writes_with_the_real_log_repair_torn_pages_after_a_crash() {
    let mut torn_seen = 0;
    for seed in 0..40u64 {
        let sim = SimFs::new(SimConfig::seeded(seed).sector_size(512));
        let shared = Shared::new();
        let page_fs = RecFs::new(Arc::new(sim.clone()), shared.clone());
        let log_dir = Path::new("/db/log");
        let data_dir = Path::new("/db/data");
        let (log, _) = RedoLog::open(Arc::new(sim.clone()), log_dir, LogConfig::default()).unwrap();
        let config = PageWriterConfig::new(PS, TornPageProtection::FullPageWrites);
        let w = PageWriter::open(page_fs, data_dir, config, log.clone()).unwrap();
        assert_eq!(w.resolved().mode, ResolvedMode::FullPageWrites);
        let mut rng = Rng::new(seed ^ 0xF00D);
        let mut durable: BTreeMap<u64, u64> = BTreeMap::new();
        let mut written: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let rounds = 4;
        for round in 0..rounds {
            let version = round + 1;
            let mut ids: Vec<u64> = Vec::new();
            while ids.len() < 6 {
                let id = rng.next() % 12;
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            // One transaction per page: its redo is the page's full image.
            let mut images = Vec::new();
            for &id in &ids {
                assert!(w.should_log_full_page_image(false));
                let mut img = make_page(PS, id, 0, version);
                let rec = full_page_image_record(PageId(id), &img).unwrap();
                let lsn = log.append(&[rec]).unwrap();
                w.count_full_page_image(PS.bytes());
                set_lsn(&mut img, lsn);
                images.push((id, lsn, img));
                written.entry(id).or_default().push(version);
            }
            if round + 1 == rounds {
                shared.crash_after((rng.next() % 10) as i64);
            }
            let pages: Vec<FlushPage<'_>> = images
                .iter()
                .map(|(id, lsn, img)| FlushPage {
                    page_id: PageId(*id),
                    image: img,
                    lsn: *lsn,
                    rebuildable_from_redo: false,
                })
                .collect();
            if w.write_pages(&pages).is_ok() {
                for &id in &ids {
                    durable.insert(id, version);
                }
            }
        }
        assert_eq!(w.stats().full_page_images, 6 * rounds);
        drop(w);
        drop(log);
        let after = sim.crash();
        let (log, recovered) =
            RedoLog::open(Arc::new(after.clone()), log_dir, LogConfig::default()).unwrap();
        let w = PageWriter::open(Arc::new(after.clone()), data_dir, config, log.clone()).unwrap();
        assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
        // Before replay: torn pages are reported, never returned.
        let mut buf = vec![0u8; PS.bytes()];
        let mut torn = Vec::new();
        for id in 0..12u64 {
            match w.read_page(PageId(id), &mut buf) {
                Ok(PageState::Valid(_)) => {
                    let v = version_of(&buf, id).expect("a valid page holds a version written");
                    assert!(written[&id].contains(&v));
                }
                Ok(PageState::Unwritten) => {}
                Err(FlushError::Corruption(_)) => torn.push(id),
                Err(e) => panic!("{e}"),
            }
        }
        torn_seen += torn.len();
        // Replay the images (what the buffer pool's recovery does): install where the page is
        // torn or older than the record.
        for g in &recovered.groups {
            for r in &g.records {
                let Record::PageImage { page_id, image } = r else {
                    continue;
                };
                let older = match w.read_page(*page_id, &mut buf) {
                    Ok(PageState::Valid(h)) => h.lsn < g.end_lsn,
                    Ok(PageState::Unwritten) | Err(FlushError::Corruption(_)) => true,
                    Err(e) => panic!("{e}"),
                };
                if older {
                    let mut img = image.clone();
                    set_lsn(&mut img, g.end_lsn);
                    seal(&mut img, Checksum::Crc32c);
                    w.write_pages(&[FlushPage {
                        page_id: *page_id,
                        image: &img,
                        lsn: g.end_lsn,
                        rebuildable_from_redo: false,
                    }])
                    .unwrap();
                }
            }
        }
        for id in 0..12u64 {
            match w.read_page(PageId(id), &mut buf).unwrap() {
                PageState::Valid(h) => {
                    assert!(h.lsn <= log.durable_lsn(), "WAL rule: page {id} {}", h.lsn);
                    let v = version_of(&buf, id).unwrap();
                    let floor = durable.get(&id).copied().unwrap_or(0);
                    assert!(v >= floor && written[&id].contains(&v), "page {id}: {v}");
                }
                PageState::Unwritten => assert!(!durable.contains_key(&id), "page {id} lost"),
            }
        }
    }
    assert!(torn_seen > 0, "some crash must have torn a page");
}
