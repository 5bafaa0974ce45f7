//! Atomic mode on real file systems: the loop-mounted XFS image (`KEEL_XFS_DIR`, created by
//! `.ci/xfs-image.sh setup`), where RWF_ATOMIC works through XFS's software fallback, and tmpfs
//! (`/dev/shm`) and ext4 (`KEEL_EXT4_DIR`), where it does not.

use super::*;
use crate::{
    FlushError, FlushPage, PageWriter, PageWriterConfig, ResolvedMode, TornPageProtection,
};
use keel_io::OsFs;
use keel_page::PageState;

fn env_dir(var: &str, test: &str) -> Option<tempfile::TempDir> {
    match std::env::var_os(var) {
        Some(d) => Some(tempfile::tempdir_in(d).unwrap()),
        None => {
            println!("SKIPPED: {test}: {var} is not set (run `bash .ci/xfs-image.sh setup DIR` as root and export what it prints)");
            None
        }
    }
}

#[test]
fn atomic_mode_on_xfs_writes_reads_and_reopens() {
    let Some(dir) = env_dir(
        "KEEL_XFS_DIR",
        "atomic_mode_on_xfs_writes_reads_and_reopens",
    ) else {
        return;
    };
    for ps in [PageSize::K4, PageSize::K16] {
        let shared = Shared::new();
        let sub = dir.path().join(format!("{}", ps.bytes()));
        let fs = RecFs::new(Arc::new(OsFs::default()), shared.clone());
        let w = PageWriter::open(
            fs,
            &sub,
            PageWriterConfig::new(ps, TornPageProtection::Atomic),
            FakeLog(shared.clone()),
        )
        .unwrap();
        assert_eq!(w.resolved().mode, ResolvedMode::Atomic);
        println!("xfs atomic {ps}: {}", w.resolved().reason);
        let ids: Vec<u64> = (0..40).map(|i| (i * 13) % 64).collect();
        for v in 1..=3u64 {
            let imgs: Vec<Vec<u8>> = ids
                .iter()
                .map(|&id| make_page(ps, id, v * 100 + id, v))
                .collect();
            let pages: Vec<FlushPage<'_>> = ids
                .iter()
                .zip(&imgs)
                .map(|(&id, img)| FlushPage {
                    page_id: PageId(id),
                    image: img,
                    lsn: Lsn(v * 100 + id),
                    rebuildable_from_redo: id % 5 == 0,
                })
                .collect();
            w.write_pages(&pages).unwrap();
        }
        let events = shared.take_events();
        let atomic = events
            .iter()
            .filter(|e| matches!(e, Event::Write { atomic: true, .. }))
            .count();
        let skipped = ids.iter().filter(|&&id| id % 5 == 0).count();
        assert_eq!(atomic, 3 * (ids.len() - skipped));
        let st = w.stats();
        assert_eq!(st.atomic_writes as usize, atomic);
        assert_eq!(st.pages_skipped_protection as usize, 3 * skipped);
        drop(w);
        let w = PageWriter::open(
            Arc::new(OsFs::default()),
            &sub,
            PageWriterConfig::new(ps, TornPageProtection::Atomic),
            FakeLog(shared),
        )
        .unwrap();
        assert_eq!(w.recover_doublewrite().unwrap().restored_pages, 0);
        let mut buf = keel_io::AlignedBuf::page(ps.bytes());
        for &id in &ids {
            assert!(matches!(
                w.read_page(PageId(id), &mut buf).unwrap(),
                PageState::Valid(_)
            ));
            assert_eq!(version_of(&buf, id), Some(3));
        }
    }
}

/// XFS on a loop device has no hardware atomic unit: Auto must pick doublewrite and say it was
/// the software fallback.
#[test]
fn auto_on_xfs_picks_doublewrite_over_the_software_fallback() {
    let Some(dir) = env_dir(
        "KEEL_XFS_DIR",
        "auto_on_xfs_picks_doublewrite_over_the_software_fallback",
    ) else {
        return;
    };
    let w = PageWriter::open(
        Arc::new(OsFs::default()),
        dir.path(),
        PageWriterConfig::new(PageSize::K16, TornPageProtection::Auto),
        FakeLog(Shared::new()),
    )
    .unwrap();
    println!("xfs auto: {} — {}", w.resolved().mode, w.resolved().reason);
    assert_eq!(
        w.resolved().mode,
        ResolvedMode::Doublewrite { batch_pages: 128 }
    );
    assert!(
        w.resolved().reason.contains("software fallback"),
        "{}",
        w.resolved().reason
    );
}

/// Where atomic writes are unsupported (tmpfs; ext4 without atomic support), opening in Atomic
/// mode is an error naming what the probe found.
#[test]
fn atomic_mode_where_unsupported_is_a_clear_error() {
    let mut dirs: Vec<(String, tempfile::TempDir)> = Vec::new();
    if Path::new("/dev/shm").is_dir() {
        dirs.push(("tmpfs".into(), tempfile::tempdir_in("/dev/shm").unwrap()));
    } else {
        println!("SKIPPED: atomic_mode_where_unsupported_is_a_clear_error (tmpfs): no /dev/shm");
    }
    if let Some(d) = std::env::var_os("KEEL_EXT4_DIR") {
        dirs.push(("ext4".into(), tempfile::tempdir_in(d).unwrap()));
    }
    for (name, dir) in dirs {
        let err = PageWriter::open(
            Arc::new(OsFs::default()),
            dir.path(),
            PageWriterConfig::new(PageSize::K16, TornPageProtection::Atomic),
            FakeLog(Shared::new()),
        )
        .unwrap_err();
        let msg = err.to_string();
        println!("{name}: {msg}");
        assert!(matches!(err, FlushError::AtomicUnavailable { .. }), "{msg}");
        assert!(msg.contains(&name), "{msg}");
        assert!(msg.contains("16 KiB"), "{msg}");
    }
}
