//! Real atomic writes (`RWF_ATOMIC`) on a loop-mounted XFS with reflink, and their absence on ext4
//! and tmpfs.
//!
//! Needs `KEEL_XFS_DIR` (a directory on XFS with reflink) and `KEEL_EXT4_DIR` (on ext4); both are
//! set by `.ci/test.sh` from `.ci/xfs-image.sh setup DIR`. Without them each test prints
//! `SKIPPED: <reason>` and returns.

mod common;

use common::{aligned_pattern, delta};
use keel_io::os::io_uring_status;
use keel_io::{
    AlignedBuf, AtomicSupport, Backend, ClassStats, FileClass, FileSystem, IoError, OpenOptions,
    OsFs, WriteOp,
};
use std::path::PathBuf;

fn env_dir(var: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(d) if !d.is_empty() => {
            let dir = PathBuf::from(d);
            if dir.is_dir() {
                Some(dir)
            } else {
                println!("SKIPPED: {var}={} is not a directory", dir.display());
                None
            }
        }
        _ => {
            println!(
                "SKIPPED: {var} is not set (needs {what}; run as root via .ci/test.sh, which \
                 mounts it with .ci/xfs-image.sh)"
            );
            None
        }
    }
}

fn backends() -> Vec<OsFs> {
    let mut v = vec![OsFs::new(Backend::Pwrite)];
    match io_uring_status() {
        Ok(()) => v.push(OsFs::new(Backend::IoUring)),
        Err(why) => println!("SKIPPED: io_uring backend: {why}"),
    }
    v
}

/// A fresh empty directory under `base` for one test and backend.
fn scratch(base: &std::path::Path, name: &str, fs: &OsFs) -> PathBuf {
    let dir = base.join(format!("{name}-{}-{}", fs.backend(), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    fs.create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn xfs_probe_reports_atomic_write_limits() {
    let Some(base) = env_dir("KEEL_XFS_DIR", "a mounted XFS with reflink") else {
        return;
    };
    let fs = OsFs::auto();
    let dir = scratch(&base, "probe", &fs);
    let caps = fs.capabilities(&dir).unwrap();
    println!("XFS capabilities: {caps:?}");
    assert_eq!(caps.filesystem, "xfs");
    let a = caps.atomic;
    assert_eq!(a.unit_min, 4096, "{a:?}");
    assert!(a.unit_max >= 16384, "{a:?}");
    assert!(a.unit_max.is_power_of_two(), "{a:?}");
    assert!(a.segments_max >= 1, "{a:?}");
    // unit_max_opt is reported (Linux 6.16); on a loop device without hardware atomic units it
    // is 0 or below 16 KiB, so 16 KiB atomic writes are XFS's software fallback.
    println!(
        "unit_max_opt = {} (16 KiB: {:?})",
        a.unit_max_opt,
        caps.atomic_support(16384)
    );
    assert!(a.unit_max_opt <= a.unit_max, "{a:?}");
    assert_ne!(
        std::mem::discriminant(&caps.atomic_support(16384)),
        std::mem::discriminant(&AtomicSupport::Unsupported {
            reason: String::new()
        })
    );
    assert!(caps.direct_io.is_some());
    // A direct file carries the same limits; a buffered one reports none.
    let direct = fs
        .open(
            &dir.join("d"),
            &OpenOptions::new(FileClass::Data).create(true).direct(true),
        )
        .unwrap();
    assert_eq!(direct.atomic_write_limits(), a);
    let buffered = fs
        .open(
            &dir.join("b"),
            &OpenOptions::new(FileClass::Data).create(true),
        )
        .unwrap();
    assert!(!buffered.atomic_write_limits().supported());
    // The probe on the file itself agrees with the one on its directory.
    assert_eq!(fs.capabilities(&dir.join("d")).unwrap().atomic, a);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn xfs_atomic_writes_succeed_and_read_back_on_both_backends() {
    let Some(base) = env_dir("KEEL_XFS_DIR", "a mounted XFS with reflink") else {
        return;
    };
    for fs in backends() {
        let dir = scratch(&base, "atomic", &fs);
        let f = fs
            .open(
                &dir.join("pages"),
                &OpenOptions::new(FileClass::Data).create(true).direct(true),
            )
            .unwrap();
        let before = fs.counters().snapshot();
        // One 16 KiB naturally aligned write.
        let one = aligned_pattern(1, 16384);
        f.write_atomic(&one, 16384).unwrap();
        // A batch of 64 (one submission with io_uring), plus the smallest and a larger unit.
        let pages: Vec<AlignedBuf> = (0..64).map(|i| aligned_pattern(100 + i, 16384)).collect();
        let writes: Vec<WriteOp<'_>> = pages
            .iter()
            .enumerate()
            .map(|(i, p)| WriteOp {
                offset: (2 + i as u64) * 16384,
                buf: p,
            })
            .collect();
        f.write_atomic_batch(&writes).unwrap();
        let small = aligned_pattern(2, 4096);
        f.write_atomic(&small, 4096).unwrap();
        let big = aligned_pattern(3, 65536);
        f.write_atomic(&big, 65536 * 32).unwrap();
        f.sync_data().unwrap();
        let d = delta(&fs, &before, FileClass::Data);
        assert_eq!(d.atomic_writes, 67, "{}: {d:?}", fs.backend());
        assert_eq!(d.writes, 67, "{}: {d:?}", fs.backend());
        assert_eq!(d.write_bytes, 65 * 16384 + 4096 + 65536);
        assert_eq!(d.syncs, 1);
        let mut back = AlignedBuf::page(16384);
        f.read_exact_at(&mut back, 16384).unwrap();
        assert!(back[..] == one[..], "{}: 16 KiB page", fs.backend());
        for (i, p) in pages.iter().enumerate() {
            f.read_exact_at(&mut back, (2 + i as u64) * 16384).unwrap();
            assert!(back[..] == p[..], "{}: page {i}", fs.backend());
        }
        let mut back4 = AlignedBuf::page(4096);
        f.read_exact_at(&mut back4, 4096).unwrap();
        assert!(back4[..] == small[..], "4 KiB atomic write");
        let mut back64 = AlignedBuf::page(65536);
        f.read_exact_at(&mut back64, 65536 * 32).unwrap();
        assert!(back64[..] == big[..], "64 KiB atomic write");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn xfs_misaligned_atomic_writes_are_rejected_before_io() {
    let Some(base) = env_dir("KEEL_XFS_DIR", "a mounted XFS with reflink") else {
        return;
    };
    for fs in backends() {
        let dir = scratch(&base, "reject", &fs);
        let f = fs
            .open(
                &dir.join("pages"),
                &OpenOptions::new(FileClass::Data).create(true).direct(true),
            )
            .unwrap();
        let limits = f.atomic_write_limits();
        assert!(limits.supported(), "{limits:?}");
        let page = aligned_pattern(5, 16384);
        let before = fs.counters().snapshot();
        // 16 KiB at 4096: not naturally aligned (the kernel would say EINVAL).
        match f.write_atomic(&page, 4096) {
            Err(IoError::AtomicRejected {
                offset: 4096,
                len: 16384,
                reason,
                ..
            }) => assert!(reason.contains("aligned"), "{reason}"),
            other => panic!("{}: expected AtomicRejected, got {other:?}", fs.backend()),
        }
        // Not a power of two; below unit_min; above unit_max.
        assert!(matches!(
            f.write_atomic(&page[..12288], 0),
            Err(IoError::AtomicRejected { .. })
        ));
        assert!(matches!(
            f.write_atomic(&page[..2048], 0),
            Err(IoError::AtomicRejected { .. })
        ));
        let huge = AlignedBuf::page(limits.unit_max as usize * 2);
        assert!(matches!(
            f.write_atomic(&huge, 0),
            Err(IoError::AtomicRejected { .. })
        ));
        // A batch with one bad write: nothing of it is issued.
        let batch = [
            WriteOp {
                offset: 0,
                buf: &page,
            },
            WriteOp {
                offset: 16384 + 4096,
                buf: &page,
            },
        ];
        assert!(matches!(
            f.write_atomic_batch(&batch),
            Err(IoError::AtomicRejected { .. })
        ));
        // Atomic but misaligned buffer address for direct I/O.
        let unaligned = AlignedBuf::page(16384 + 512);
        assert!(matches!(
            f.write_atomic(&unaligned[1..16385], 0),
            Err(IoError::Misaligned { .. })
        ));
        assert_eq!(delta(&fs, &before, FileClass::Data), ClassStats::default());
        assert_eq!(f.len().unwrap(), 0, "nothing reached the file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A directory whose atomic support must be absent: capabilities say so, and `write_atomic`
/// on a direct file there is `AtomicUnsupported`.
fn assert_no_atomic_support(base: &std::path::Path, expected_fs: &str) {
    for fs in backends() {
        let dir = scratch(base, "no-atomic", &fs);
        let caps = fs.capabilities(&dir).unwrap();
        println!("{expected_fs} capabilities: {caps:?}");
        assert_eq!(caps.filesystem, expected_fs);
        assert!(!caps.atomic.supported(), "{caps:?}");
        assert!(matches!(
            caps.atomic_support(16384),
            AtomicSupport::Unsupported { .. }
        ));
        let page = aligned_pattern(6, 16384);
        let opened = fs.open(
            &dir.join("d"),
            &OpenOptions::new(FileClass::Data).create(true).direct(true),
        );
        let f = match opened {
            Ok(f) => f,
            Err(e) => {
                // No O_DIRECT here at all: a buffered file must refuse atomic writes too.
                println!("{expected_fs}: O_DIRECT open failed ({e}); checking a buffered file");
                fs.open(
                    &dir.join("d"),
                    &OpenOptions::new(FileClass::Data).create(true),
                )
                .unwrap()
            }
        };
        assert!(!f.atomic_write_limits().supported());
        match f.write_atomic(&page, 0) {
            Err(IoError::AtomicUnsupported { .. }) => {}
            other => panic!("{expected_fs}: expected AtomicUnsupported, got {other:?}"),
        }
        assert!(matches!(
            f.write_atomic_batch(&[WriteOp {
                offset: 0,
                buf: &page
            }]),
            Err(IoError::AtomicUnsupported { .. })
        ));
        assert_eq!(f.len().unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn ext4_reports_no_atomic_support() {
    let Some(base) = env_dir("KEEL_EXT4_DIR", "a mounted ext4") else {
        return;
    };
    assert_no_atomic_support(&base, "ext4");
}

#[test]
fn tmpfs_reports_no_atomic_support() {
    let shm = PathBuf::from("/dev/shm");
    let fs = OsFs::auto();
    match fs.capabilities(&shm) {
        Ok(c) if c.filesystem == "tmpfs" => assert_no_atomic_support(&shm, "tmpfs"),
        Ok(c) => println!(
            "SKIPPED: /dev/shm is {}, not tmpfs; no tmpfs path to check",
            c.filesystem
        ),
        Err(e) => println!("SKIPPED: /dev/shm cannot be probed: {e}"),
    }
}
