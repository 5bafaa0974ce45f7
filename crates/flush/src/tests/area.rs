//! The doublewrite area on its own: format round trip, torn slot writes never yield an image
//! that was not written, and a damaged header is never mistaken for an empty area.

use super::*;
use crate::area::{encode_directory, DoublewriteArea, Geometry, AREA_HEADER_LEN};
use keel_io::{AlignedBuf, OsFs};
use keel_page::{seal, Checksum};

const PS: PageSize = PageSize::K4;
const G: Geometry = Geometry {
    page_size: 4096,
    capacity: 4,
    slots: 2,
};

/// The bytes of a slot write: directory then sealed images of `pages` (id, lsn, version).
fn slot_bytes(slot: usize, seq: u64, pages: &[(u64, u64, u64)]) -> Vec<u8> {
    let ps = PS.bytes();
    let mut buf = vec![0u8; G.dir_len() + pages.len() * ps];
    for (i, &(id, lsn, v)) in pages.iter().enumerate() {
        let img = &mut buf[G.dir_len() + i * ps..G.dir_len() + (i + 1) * ps];
        img.copy_from_slice(&make_page(PS, id, lsn, v));
        seal(img, Checksum::Crc32c);
    }
    let entries: Vec<(PageId, Lsn)> = pages
        .iter()
        .map(|&(id, l, _)| (PageId(id), Lsn(l)))
        .collect();
    let (dir, images) = buf.split_at_mut(G.dir_len());
    encode_directory(dir, slot, seq, ps, &entries, images, Checksum::Crc32c);
    buf
}

/// A fresh area file `dir/name` on OsFs, formatted for `store`, with the given slot 0 contents
/// (and nothing else).
fn area_file(dir: &Path, name: &str, store: u32, slot0: &[u8]) -> Arc<dyn File> {
    let fs = OsFs::default();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let f = fs
        .open(
            &path,
            &OpenOptions::new(FileClass::Doublewrite).create(true),
        )
        .unwrap();
    // Format through the real code path (a new area is formatted when recovery ends), then
    // put the slot bytes in place.
    let fresh = DoublewriteArea::open(f.clone(), Some(G), store).unwrap();
    fresh.finish_recovery(0).unwrap();
    drop(fresh);
    f.write_all_at(slot0, G.slot_offset(0)).unwrap();
    f
}

/// [`area_file`] `dw` of no store, opened.
fn area_with(dir: &Path, slot0: &[u8]) -> DoublewriteArea {
    DoublewriteArea::open(area_file(dir, "dw", 0, slot0), Some(G), 0).unwrap()
}

#[test]
fn a_slot_round_trips_and_every_image_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let pages = [(1, 10, 1), (7, 11, 1), (3, 12, 1)];
    let area = area_with(dir.path(), &slot_bytes(0, 42, &pages));
    let scan = area.scan(Checksum::Crc32c, PS).unwrap();
    assert_eq!(scan.slots_valid, 1);
    assert_eq!(scan.images_valid, 3);
    assert_eq!(scan.images_invalid, 0);
    assert_eq!(scan.max_seq, 42);
    for (c, &(id, lsn, v)) in scan.candidates.iter().zip(&pages) {
        assert_eq!((c.page_id, c.lsn, c.seq), (PageId(id), Lsn(lsn), 42));
        assert_eq!(version_of(&c.image, id), Some(v));
    }
}

/// Invariant "the area is valid on its own", broken on purpose: a slot write torn at 512-byte or
/// 4 KiB sectors over an older batch, in every mix. Recovery may only ever see images that were
/// written whole — each candidate equals exactly the old or the new image of its page.
#[test]
fn torn_slot_writes_are_never_restored() {
    let dir = tempfile::tempdir().unwrap();
    let old = slot_bytes(0, 5, &[(1, 10, 1), (2, 11, 1), (3, 12, 1), (4, 13, 1)]);
    let new = slot_bytes(0, 9, &[(1, 50, 2), (2, 51, 2), (9, 52, 2)]);
    let (mut saw_valid, mut saw_rejected) = (0, 0);
    let mut rng = Rng::new(7);
    for sector in [512usize, 4096] {
        for _ in 0..60 {
            let mut mixed = old.clone();
            for s in (0..new.len()).step_by(sector) {
                if rng.coin() {
                    mixed[s..s + sector].copy_from_slice(&new[s..s + sector]);
                }
            }
            let area = area_with(dir.path(), &mixed);
            let scan = area.scan(Checksum::Crc32c, PS).unwrap();
            for c in &scan.candidates {
                let ok_old = c.seq == 5
                    && [(1, 10), (2, 11), (3, 12), (4, 13)].contains(&(c.page_id.0, c.lsn.0));
                let ok_new =
                    c.seq == 9 && [(1, 50), (2, 51), (9, 52)].contains(&(c.page_id.0, c.lsn.0));
                assert!(
                    ok_old || ok_new,
                    "{:?} {:?} seq {}",
                    c.page_id,
                    c.lsn,
                    c.seq
                );
                let v = version_of(&c.image, c.page_id.0);
                assert_eq!(v, Some(if ok_old { 1 } else { 2 }));
            }
            saw_valid += scan.images_valid;
            saw_rejected += scan.images_invalid + (scan.slots_scanned - scan.slots_valid);
        }
    }
    assert!(
        saw_valid > 0 && saw_rejected > 0,
        "{saw_valid} {saw_rejected}"
    );
}

/// The two halves of a torn slot write, deterministically: old directory over new images, and
/// new directory over old images. Neither restores anything.
#[test]
fn mismatched_directory_and_images_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let old = slot_bytes(0, 5, &[(1, 10, 1), (2, 11, 1)]);
    let new = slot_bytes(0, 7, &[(1, 90, 3), (2, 91, 3)]);
    let d = G.dir_len();
    for (dir_from, images_from) in [(&old, &new), (&new, &old)] {
        let mut mixed = images_from.clone();
        mixed[..d].copy_from_slice(&dir_from[..d]);
        let scan = area_with(dir.path(), &mixed)
            .scan(Checksum::Crc32c, PS)
            .unwrap();
        assert_eq!(scan.slots_valid, 1);
        assert_eq!(scan.images_valid, 0);
        assert_eq!(scan.images_invalid, 2);
    }
    // One flipped bit in a directory entry invalidates the whole directory.
    let mut flipped = new.clone();
    flipped[64 + 32 + 3] ^= 4;
    let scan = area_with(dir.path(), &flipped)
        .scan(Checksum::Crc32c, PS)
        .unwrap();
    assert_eq!((scan.slots_valid, scan.images_valid), (0, 0));
}

/// Invariant 3 of the area, broken on purpose: a damaged header over slots that hold data is an
/// error naming the file, never an empty area. A damaged header over zero slots (a crash while
/// the area was being created) is an empty area.
#[test]
fn a_corrupt_header_over_data_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let fs = OsFs::default();
    let path = dir.path().join("dw");
    let f = fs
        .open(
            &path,
            &OpenOptions::new(FileClass::Doublewrite).create(true),
        )
        .unwrap();
    drop(DoublewriteArea::open(f.clone(), Some(G), 0).unwrap());
    f.write_all_at(&[0xFF; 16], 100).unwrap(); // corrupt the header
    let area = DoublewriteArea::open(f.clone(), Some(G), 0).unwrap();
    assert!(area
        .scan(Checksum::Crc32c, PS)
        .unwrap()
        .candidates
        .is_empty());
    f.write_all_at(&slot_bytes(0, 1, &[(1, 1, 1)]), G.slot_offset(0))
        .unwrap();
    let area = DoublewriteArea::open(f, Some(G), 0).unwrap();
    let err = area.scan(Checksum::Crc32c, PS).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("header checksum mismatch"), "{msg}");
    assert!(msg.contains("dw"), "{msg}");
    assert!(msg.contains("refusing"), "{msg}");
}

#[test]
fn geometry_header_round_trips_and_sizes_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let fs = OsFs::default();
    let f = fs
        .open(
            &dir.path().join("dw"),
            &OpenOptions::new(FileClass::Doublewrite).create(true),
        )
        .unwrap();
    let g = Geometry {
        page_size: 16384,
        capacity: 128,
        slots: 2,
    };
    let fresh = DoublewriteArea::open(f.clone(), Some(g), 0).unwrap();
    // Opening writes nothing; a new area is formatted when its (empty) recovery ends.
    assert_eq!(f.len().unwrap(), 0);
    fresh.finish_recovery(0).unwrap();
    drop(fresh);
    assert_eq!(g.dir_len(), 8192); // 64 + 32 × 128 = 4160 → two 4 KiB blocks
    assert_eq!(f.len().unwrap(), 4096 + 2 * (8192 + 128 * 16384));
    let mut h = AlignedBuf::page(AREA_HEADER_LEN);
    f.read_exact_at(&mut h, 0).unwrap();
    assert_eq!(&h[0..8], b"KEELDWA1");
    let area = DoublewriteArea::open(f, Some(g), 0).unwrap();
    let scan = area.scan(Checksum::Crc32c, PageSize::K16).unwrap();
    assert_eq!((scan.slots_scanned, scan.slots_valid), (2, 0));
    // Recovering it for a store of another page size is an error, never a misplaced restore.
    let err = area.scan(Checksum::Crc32c, PageSize::K4).unwrap_err();
    assert!(err.to_string().contains("16 KiB page images"), "{err}");
}

/// The image CRC taken from a CRC-32C seal equals the one recovery computes over the bytes, for
/// every page size; other algorithms compute it directly.
#[test]
fn the_image_crc_shortcut_equals_the_full_computation() {
    use crate::area::{image_crc, image_crc_of_sealed};
    for ps in PageSize::ALL {
        for algo in Checksum::ALL {
            let mut p = make_page(ps, 77, 123, 4);
            seal(&mut p, algo);
            assert_eq!(
                image_crc_of_sealed(9, PageId(77), Lsn(123), &p, algo),
                image_crc(9, PageId(77), Lsn(123), &p),
                "{ps} {algo:?}"
            );
        }
    }
    // A page whose stored checksum does not match its bytes gives another CRC: the shortcut
    // trusts only the seal it just made.
    let mut p = make_page(PageSize::K4, 1, 1, 1);
    seal(&mut p, Checksum::Crc32c);
    p[100] ^= 1;
    assert_ne!(
        image_crc_of_sealed(1, PageId(1), Lsn(1), &p, Checksum::Crc32c),
        image_crc(1, PageId(1), Lsn(1), &p)
    );
}

/// An area written with another slot count (2, before deferred data syncs raised it to
/// `DOUBLEWRITE_SLOTS`) is recovered with the geometry in its header — an image in its last slot
/// is restored — and then reformatted with the writer's geometry; batches then use every slot.
#[test]
fn an_area_with_another_slot_count_is_recovered_then_reformatted() {
    use crate::{PageWriter, PageWriterConfig, TornPageProtection, DOUBLEWRITE_SLOTS};
    assert_ne!(G.slots, DOUBLEWRITE_SLOTS);
    let dir = tempfile::tempdir().unwrap();
    let fs = OsFs::default();
    let area_path = dir.path().join(crate::DOUBLEWRITE_FILE_NAME);
    let f = fs
        .open(
            &area_path,
            &OpenOptions::new(FileClass::Doublewrite).create(true),
        )
        .unwrap();
    let fresh = DoublewriteArea::open(f.clone(), Some(G), 0).unwrap();
    fresh.finish_recovery(0).unwrap();
    drop(fresh);
    f.write_all_at(
        &slot_bytes(1, 3, &[(5, 20, 2), (6, 21, 2)]),
        G.slot_offset(1),
    )
    .unwrap();
    f.sync_data().unwrap();
    drop(f);
    // Page 5's home is torn (half of version 2 over nothing), page 6 was never written.
    let data = fs
        .open(
            &dir.path().join(crate::DATA_FILE_NAME),
            &OpenOptions::new(FileClass::Data).create(true),
        )
        .unwrap();
    data.write_all_at(&make_page(PS, 5, 20, 2)[..2048], 5 * 4096)
        .unwrap();
    drop(data);
    let config = PageWriterConfig::new(PS, TornPageProtection::Doublewrite { batch_pages: 4 });
    let open = || {
        PageWriter::open(
            Arc::new(OsFs::default()),
            dir.path(),
            config,
            // The log these images came from is durable past them.
            FakeLog(Shared::durable_to(Lsn(1000))),
        )
        .unwrap()
    };
    let w = open();
    let rec = w.recover_doublewrite().unwrap();
    assert_eq!((rec.slots_scanned, rec.slots_valid), (2, 1), "{rec:?}");
    assert_eq!(rec.restored_pages, 2, "{rec:?}");
    let new = Geometry {
        slots: DOUBLEWRITE_SLOTS,
        ..G
    };
    assert_eq!(std::fs::metadata(&area_path).unwrap().len(), new.file_len());
    let mut buf = vec![0u8; PS.bytes()];
    for id in [5, 6] {
        assert!(matches!(
            w.read_page(PageId(id), &mut buf),
            Ok(keel_page::PageState::Valid(_))
        ));
        assert_eq!(version_of(&buf, id), Some(2));
    }
    // Every slot of the new geometry is written, the first ones twice.
    let imgs: Vec<Vec<u8>> = (0..DOUBLEWRITE_SLOTS as u64 + 2)
        .map(|i| make_page(PS, 100 + i, 100 + i, 3))
        .collect();
    for (i, img) in imgs.iter().enumerate() {
        w.write_pages(&[crate::FlushPage {
            page_id: PageId(100 + i as u64),
            image: img,
            lsn: Lsn(100 + i as u64),
            rebuildable_from_redo: false,
        }])
        .unwrap();
    }
    drop(w);
    let w = open();
    let rec = w.recover_doublewrite().unwrap();
    assert_eq!(
        (rec.slots_scanned, rec.slots_valid),
        (DOUBLEWRITE_SLOTS, DOUBLEWRITE_SLOTS)
    );
    for i in 0..DOUBLEWRITE_SLOTS as u64 + 2 {
        w.read_page(PageId(100 + i), &mut buf).unwrap();
        assert_eq!(version_of(&buf, 100 + i), Some(3));
    }
}

/// The area records the store it belongs to (the log's salt) and refuses, at recovery, to hand
/// out another store's images: a doublewrite file copied from another store directory would
/// otherwise restore that store's pages over this store's torn ones. An area from before the
/// field (store 0) is read, and formatted with the store once recovered.
#[test]
fn an_area_of_another_store_is_refused_and_an_unmarked_one_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let slot0 = slot_bytes(0, 7, &[(1, 10, 1)]);
    let f = area_file(dir.path(), "dw", 0xAAAA, &slot0);
    // Its own store reads the image.
    let own = DoublewriteArea::open(f.clone(), Some(G), 0xAAAA).unwrap();
    assert_eq!(own.scan(Checksum::Crc32c, PS).unwrap().images_valid, 1);
    // Another store refuses the area, naming it and both stores.
    let other = DoublewriteArea::open(f.clone(), Some(G), 0xBBBB).unwrap();
    let msg = other.scan(Checksum::Crc32c, PS).unwrap_err().to_string();
    assert!(msg.contains("another store") && msg.contains("dw"), "{msg}");
    assert!(
        msg.contains("0x0000aaaa") && msg.contains("0x0000bbbb"),
        "{msg}"
    );
    // A writer that knows no store (0) reads any area.
    let unknown = DoublewriteArea::open(f, Some(G), 0).unwrap();
    assert_eq!(unknown.scan(Checksum::Crc32c, PS).unwrap().images_valid, 1);

    // An area with no store recorded (made before the field) is read by any store, and
    // formatted with that store's mark once recovered.
    let f2 = area_file(dir.path(), "dw2", 0, &slot0);
    let adopted = DoublewriteArea::open(f2.clone(), Some(G), 0xCCCC).unwrap();
    assert_eq!(adopted.scan(Checksum::Crc32c, PS).unwrap().images_valid, 1);
    adopted.finish_recovery(7).unwrap();
    let mut h = AlignedBuf::page(AREA_HEADER_LEN);
    f2.read_exact_at(&mut h, 0).unwrap();
    assert_eq!(u32::from_le_bytes(h[28..32].try_into().unwrap()), 0xCCCC);
}
