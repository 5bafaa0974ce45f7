//! The conformance suite every [`FileSystem`] implementation of keel-io must pass: `OsFs` with
//! each backend and `SimFs` (tests/os_conformance.rs: one `#[test]` line per implementation).
//!
//! Everything goes through the traits only, with page-aligned 4 KiB buffers for direct I/O, so
//! the same checks hold for a real disk and for a simulated one. Counters are checked as exact
//! deltas: a backend that counts a batch once, counts a rejected request, or forgets a sync fails.
#![allow(dead_code)] // each test binary uses a different part of this module

use keel_io::{
    preallocate, AlignedBuf, ClassStats, File, FileClass, FileSystem, IoError, OpenOptions,
    Preallocation, ReadOp, SyncMethod, WriteOp,
};
use std::path::Path;
use std::sync::Arc;

/// Deterministic bytes (SplitMix64) so that every offset holds a different value.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A page-aligned buffer holding `pattern(seed, len)`.
pub fn aligned_pattern(seed: u64, len: usize) -> AlignedBuf {
    AlignedBuf::from_slice(&pattern(seed, len))
}

/// The counters of `class` since `before`.
pub fn delta(fs: &dyn FileSystem, before: &keel_io::IoStats, class: FileClass) -> ClassStats {
    *fs.counters().snapshot().since(before).class(class)
}

fn create(fs: &dyn FileSystem, path: &Path, options: OpenOptions) -> Arc<dyn File> {
    fs.open(path, &options.create(true))
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

fn read_all(file: &dyn File, len: usize) -> Vec<u8> {
    let mut buf = AlignedBuf::page(len);
    file.read_exact_at(&mut buf, 0)
        .unwrap_or_else(|e| panic!("read back {}: {e}", file.path().display()));
    buf.to_vec()
}

/// Runs every check on `fs`, under `dir` (which must exist, or be creatable, and be empty).
pub fn conformance(fs: &dyn FileSystem, dir: &Path) {
    fs.create_dir_all(dir).expect("create test directory");
    read_write_round_trip(fs, dir);
    short_reads(fs, dir);
    batches(fs, dir);
    set_len_and_allocate(fs, dir);
    directory_operations(fs, dir);
    every_sync_method(fs, dir);
    every_preallocation(fs, dir);
    direct_misalignment_is_rejected_before_io(fs, dir);
    atomic_rules_are_checked_before_io(fs, dir);
    requests_ending_past_the_largest_offset_are_rejected_before_io(fs, dir);
    capabilities_name_the_path(fs, dir);
}

/// Positional writes land where asked, extend the file, and read back exactly; counted once each.
pub fn read_write_round_trip(fs: &dyn FileSystem, dir: &Path) {
    let path = dir.join("rw");
    let f = create(fs, &path, OpenOptions::new(FileClass::Data));
    assert_eq!(f.path(), path);
    assert_eq!(f.class(), FileClass::Data);
    assert!(!f.is_direct());
    assert!(f.is_empty().unwrap());
    let before = fs.counters().snapshot();
    let a = pattern(1, 5000);
    let b = pattern(2, 777);
    f.write_all_at(&a, 0).unwrap();
    f.write_all_at(&b, 10_000).unwrap();
    assert_eq!(f.len().unwrap(), 10_777);
    let mut got = vec![0u8; 5000];
    f.read_exact_at(&mut got, 0).unwrap();
    assert!(got == a, "first write reads back");
    let mut hole = vec![1u8; 5000];
    f.read_exact_at(&mut hole, 5000).unwrap();
    assert!(
        hole.iter().all(|&x| x == 0),
        "the gap between writes reads as zeros"
    );
    let mut got = vec![0u8; 777];
    f.read_exact_at(&mut got, 10_000).unwrap();
    assert!(got == b, "second write reads back");
    // Overwrite in the middle.
    f.write_all_at(b"keel", 4998).unwrap();
    let mut got = vec![0u8; 8];
    f.read_exact_at(&mut got, 4996).unwrap();
    assert_eq!(&got[..2], &a[4996..4998]);
    assert_eq!(&got[2..6], b"keel");
    assert_eq!(&got[6..], &[0, 0]);
    let d = delta(fs, &before, FileClass::Data);
    assert_eq!(d.writes, 3, "{d:?}");
    assert_eq!(d.write_bytes, 5000 + 777 + 4, "{d:?}");
    assert_eq!(d.reads, 4, "{d:?}");
    assert_eq!(d.read_bytes, 5000 + 5000 + 777 + 8, "{d:?}");
    assert_eq!(d.atomic_writes, 0);
    // Reopening without create finds the same bytes.
    let again = fs.open(&path, &OpenOptions::new(FileClass::Data)).unwrap();
    let mut got = vec![0u8; 777];
    again.read_exact_at(&mut got, 10_000).unwrap();
    assert!(got == b, "second write reads back");
}

/// A read past the end is a `ShortRead` naming how much was there; it is not counted.
pub fn short_reads(fs: &dyn FileSystem, dir: &Path) {
    let f = create(fs, &dir.join("short"), OpenOptions::new(FileClass::Log));
    f.write_all_at(&pattern(3, 100), 0).unwrap();
    let before = fs.counters().snapshot();
    let mut buf = vec![0u8; 200];
    match f.read_exact_at(&mut buf, 0) {
        Err(IoError::ShortRead {
            path,
            offset: 0,
            wanted: 200,
            got: 100,
        }) => assert_eq!(path, dir.join("short")),
        other => panic!("expected ShortRead of 100 of 200 bytes, got {other:?}"),
    }
    assert_eq!(
        &buf[..100],
        &pattern(3, 100)[..],
        "the part that exists was read"
    );
    match f.read_exact_at(&mut buf, 1000) {
        Err(IoError::ShortRead { got: 0, .. }) => {}
        other => panic!("expected ShortRead with nothing read, got {other:?}"),
    }
    let mut reads = [
        ReadOp {
            offset: 0,
            buf: &mut [0u8; 50],
        },
        ReadOp {
            offset: 90,
            buf: &mut [0u8; 20],
        },
    ];
    match f.read_batch(&mut reads) {
        Err(IoError::ShortRead {
            offset: 90,
            wanted: 20,
            got: 10,
            ..
        }) => {}
        other => panic!("expected the batch's second read to be short, got {other:?}"),
    }
    let d = delta(fs, &before, FileClass::Log);
    assert!(
        d.reads <= 1,
        "only the complete read of the batch may count: {d:?}"
    );
}

/// Batches write and read every op; each op is counted.
pub fn batches(fs: &dyn FileSystem, dir: &Path) {
    for direct in [false, true] {
        let path = dir.join(if direct { "batch-direct" } else { "batch" });
        let f = create(
            fs,
            &path,
            OpenOptions::new(FileClass::Doublewrite).direct(direct),
        );
        assert_eq!(f.is_direct(), direct);
        let pages: Vec<AlignedBuf> = (0..100u64)
            .map(|i| aligned_pattern(100 + i, 4096))
            .collect();
        // Scattered, not in file order.
        let slot = |i: usize| ((i * 37) % 100) as u64 * 4096;
        let writes: Vec<WriteOp<'_>> = pages
            .iter()
            .enumerate()
            .map(|(i, p)| WriteOp {
                offset: slot(i),
                buf: p,
            })
            .collect();
        let before = fs.counters().snapshot();
        f.write_batch(&writes).unwrap();
        f.write_batch(&[]).unwrap();
        let d = delta(fs, &before, FileClass::Doublewrite);
        assert_eq!((d.writes, d.write_bytes), (100, 100 * 4096), "{d:?}");
        assert_eq!(f.len().unwrap(), 100 * 4096);
        let mut back: Vec<AlignedBuf> = (0..100).map(|_| AlignedBuf::page(4096)).collect();
        let mut reads: Vec<ReadOp<'_>> = back
            .iter_mut()
            .enumerate()
            .map(|(i, b)| ReadOp {
                offset: slot(i),
                buf: &mut b[..],
            })
            .collect();
        let before = fs.counters().snapshot();
        f.read_batch(&mut reads).unwrap();
        let d = delta(fs, &before, FileClass::Doublewrite);
        assert_eq!((d.reads, d.read_bytes), (100, 100 * 4096), "{d:?}");
        for (i, (p, b)) in pages.iter().zip(&back).enumerate() {
            assert!(p[..] == b[..], "page {i} of the batch (direct {direct})");
        }
    }
}

/// `set_len` truncates and extends with zeros; `allocate` gives the file its size.
pub fn set_len_and_allocate(fs: &dyn FileSystem, dir: &Path) {
    let f = create(fs, &dir.join("len"), OpenOptions::new(FileClass::Other));
    f.write_all_at(&pattern(4, 3000), 0).unwrap();
    f.set_len(10_000).unwrap();
    assert_eq!(f.len().unwrap(), 10_000);
    let mut tail = vec![9u8; 7000];
    f.read_exact_at(&mut tail, 3000).unwrap();
    assert!(tail.iter().all(|&x| x == 0), "extension reads as zeros");
    f.set_len(10).unwrap();
    assert_eq!(f.len().unwrap(), 10);
    let mut head = vec![0u8; 10];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head, pattern(4, 10));
    f.set_len(0).unwrap();
    assert!(f.is_empty().unwrap());
    f.allocate(0, 1 << 20).unwrap();
    assert_eq!(f.len().unwrap(), 1 << 20);
    // allocate never shrinks.
    f.allocate(0, 4096).unwrap();
    assert_eq!(f.len().unwrap(), 1 << 20);
}

/// create_dir_all, list_dir (sorted, full paths), rename (replacing), remove_file, exists,
/// sync_dir, and NotFound for a missing file.
pub fn directory_operations(fs: &dyn FileSystem, dir: &Path) {
    let sub = dir.join("d1").join("d2");
    fs.create_dir_all(&sub).unwrap();
    fs.create_dir_all(&sub).unwrap();
    assert!(fs.exists(&sub).unwrap());
    for (name, seed) in [("b", 5), ("a", 6), ("c", 7)] {
        let f = create(fs, &sub.join(name), OpenOptions::new(FileClass::Other));
        f.write_all_at(&pattern(seed, 64), 0).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(
        fs.list_dir(&sub).unwrap(),
        vec![sub.join("a"), sub.join("b"), sub.join("c")]
    );
    fs.rename(&sub.join("a"), &sub.join("c")).unwrap();
    assert!(!fs.exists(&sub.join("a")).unwrap());
    let c = fs
        .open(&sub.join("c"), &OpenOptions::new(FileClass::Other))
        .unwrap();
    let mut got = vec![0u8; 64];
    c.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, pattern(6, 64), "rename replaced the target");
    // Rename across directories.
    fs.rename(&sub.join("b"), &dir.join("d1").join("b2"))
        .unwrap();
    assert_eq!(fs.list_dir(&sub).unwrap(), vec![sub.join("c")]);
    assert!(fs.exists(&dir.join("d1").join("b2")).unwrap());
    fs.remove_file(&sub.join("c")).unwrap();
    assert!(fs.list_dir(&sub).unwrap().is_empty());
    assert!(!fs.exists(&sub.join("c")).unwrap());
    fs.sync_dir(&sub).unwrap();
    match fs.open(&sub.join("missing"), &OpenOptions::new(FileClass::Other)) {
        Err(IoError::NotFound { path }) => assert_eq!(path, sub.join("missing")),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        fs.remove_file(&sub.join("missing")),
        Err(IoError::NotFound { .. })
    ));
}

/// Every sync method: opened with its flags, written with aligned buffers, synced the way it
/// says (ODsync: no sync call, so no sync counted), and readable through a fresh handle.
pub fn every_sync_method(fs: &dyn FileSystem, dir: &Path) {
    // The smallest block direct I/O allows here (512 on a 512 B sector disk): log writes of that
    // size must work with every method.
    let small = fs
        .capabilities(dir)
        .unwrap()
        .direct_io
        .map_or(4096, |d| d.offset as usize)
        .clamp(512, 4096);
    for method in SyncMethod::ALL {
        let path = dir.join(format!("sync-{method:?}"));
        let f = create(
            fs,
            &path,
            OpenOptions::new(FileClass::Log).for_sync_method(method),
        );
        assert_eq!(f.is_direct(), method == SyncMethod::ODirect, "{method:?}");
        let blocks = [aligned_pattern(10, 4096), aligned_pattern(11, small)];
        let before = fs.counters().snapshot();
        f.write_all_at(&blocks[0], 0).unwrap();
        f.write_all_at(&blocks[1], 4096).unwrap();
        f.sync(method).unwrap();
        // Overwrite in place, like a log block rewritten with more records.
        f.write_all_at(&blocks[1], 0).unwrap();
        f.sync(method).unwrap();
        let d = delta(fs, &before, FileClass::Log);
        assert_eq!(d.writes, 3, "{method:?}: {d:?}");
        let syncs = if method.needs_sync_call() { 2 } else { 0 };
        assert_eq!(d.syncs, syncs, "{method:?}: {d:?}");
        let reader = fs.open(&path, &OpenOptions::new(FileClass::Other)).unwrap();
        let got = read_all(reader.as_ref(), 4096 + small);
        assert!(got[..small] == blocks[1][..], "{method:?}");
        assert!(got[small..4096] == blocks[0][small..], "{method:?}");
        assert!(got[4096..] == blocks[1][..], "{method:?}");
        f.sync_all().unwrap();
        f.sync_data().unwrap();
    }
}

/// Zeroed really writes zeros over the whole size (even over old bytes) and syncs; Fallocate
/// gives the size without writing; Grow leaves the file empty.
pub fn every_preallocation(fs: &dyn FileSystem, dir: &Path) {
    const SIZE: u64 = 3 << 20 | 8192; // not a multiple of the 1 MiB chunk
    for direct in [false, true] {
        for how in [
            Preallocation::Zeroed,
            Preallocation::Fallocate,
            Preallocation::Grow,
        ] {
            let path = dir.join(format!("prealloc-{how:?}-{direct}"));
            let f = create(fs, &path, OpenOptions::new(FileClass::Log).direct(direct));
            let before = fs.counters().snapshot();
            preallocate(f.as_ref(), SIZE, how).unwrap();
            let d = delta(fs, &before, FileClass::Log);
            match how {
                Preallocation::Zeroed => {
                    assert_eq!(f.len().unwrap(), SIZE, "{how:?}");
                    assert_eq!(d.write_bytes, SIZE, "{how:?} writes every byte: {d:?}");
                    assert_eq!(d.syncs, 1, "{how:?}: {d:?}");
                    let got = read_all(f.as_ref(), SIZE as usize);
                    assert!(got.iter().all(|&x| x == 0), "{how:?} reads as zeros");
                }
                Preallocation::Fallocate => {
                    assert_eq!(f.len().unwrap(), SIZE, "{how:?}");
                    assert_eq!(d.writes, 0, "{how:?} writes no data: {d:?}");
                    assert_eq!(d.syncs, 1, "{how:?}: {d:?}");
                    let got = read_all(f.as_ref(), SIZE as usize);
                    assert!(got.iter().all(|&x| x == 0), "{how:?} reads as zeros");
                }
                Preallocation::Grow => {
                    assert_eq!(f.len().unwrap(), 0, "{how:?} leaves the file empty");
                    assert_eq!(d, ClassStats::default(), "{how:?} does nothing: {d:?}");
                }
            }
        }
        // Zeroing overwrites old contents.
        let path = dir.join(format!("prealloc-rezero-{direct}"));
        let f = create(fs, &path, OpenOptions::new(FileClass::Log).direct(direct));
        f.write_all_at(&aligned_pattern(12, 8192), 0).unwrap();
        preallocate(f.as_ref(), 8192, Preallocation::Zeroed).unwrap();
        assert!(read_all(f.as_ref(), 8192).iter().all(|&x| x == 0));
    }
}

/// O_DIRECT requests with a misaligned offset, length or buffer are rejected with `Misaligned`
/// before any I/O: nothing written, nothing counted, even when only one op of a batch is bad.
pub fn direct_misalignment_is_rejected_before_io(fs: &dyn FileSystem, dir: &Path) {
    let path = dir.join("direct");
    let f = create(fs, &path, OpenOptions::new(FileClass::Data).direct(true));
    assert!(f.is_direct());
    let good = aligned_pattern(20, 8192);
    f.write_all_at(&good, 0).unwrap();
    let before = fs.counters().snapshot();
    let big = aligned_pattern(21, 8192 + 4096);
    let cases: [(&str, u64, &[u8]); 3] = [
        ("offset", 100, &big[..4096]),
        ("length", 0, &big[..4000]),
        ("buffer address", 0, &big[1..4097]),
    ];
    for (what, offset, buf) in cases {
        match f.write_all_at(buf, offset) {
            Err(IoError::Misaligned {
                path: p, offset: o, ..
            }) => assert_eq!((p, o), (path.clone(), offset), "{what}"),
            other => panic!("misaligned {what}: expected Misaligned, got {other:?}"),
        }
        let mut rbuf = AlignedBuf::page(8192 + 4096);
        let len = buf.len();
        let start = if what == "buffer address" { 1 } else { 0 };
        match f.read_exact_at(&mut rbuf[start..start + len], offset) {
            Err(IoError::Misaligned { .. }) => {}
            other => panic!("misaligned read {what}: expected Misaligned, got {other:?}"),
        }
    }
    // One bad op in a batch: nothing of the batch is written.
    let batch = [
        WriteOp {
            offset: 8192,
            buf: &big[..4096],
        },
        WriteOp {
            offset: 12288 + 512 + 100,
            buf: &big[4096..8192],
        },
        WriteOp {
            offset: 16384,
            buf: &big[8192..],
        },
    ];
    assert!(matches!(
        f.write_batch(&batch),
        Err(IoError::Misaligned { .. })
    ));
    assert_eq!(
        f.len().unwrap(),
        8192,
        "no op of a rejected batch was written"
    );
    let mut a = AlignedBuf::page(4096);
    let mut b = AlignedBuf::page(4096);
    let mut reads = [
        ReadOp {
            offset: 0,
            buf: &mut a[..],
        },
        ReadOp {
            offset: 4096 + 1,
            buf: &mut b[..],
        },
    ];
    assert!(matches!(
        f.read_batch(&mut reads),
        Err(IoError::Misaligned { .. })
    ));
    assert!(a.iter().all(|&x| x == 0), "no read of a rejected batch ran");
    assert_eq!(
        delta(fs, &before, FileClass::Data),
        ClassStats::default(),
        "rejected requests are not counted"
    );
    assert!(
        read_all(f.as_ref(), 8192)[..] == good[..],
        "direct file unchanged"
    );
    // A buffered file accepts any alignment.
    let buffered = create(fs, &dir.join("buffered"), OpenOptions::new(FileClass::Data));
    buffered.write_all_at(&big[1..4000], 100).unwrap();
}

/// Atomic writes: refused on a buffered file (`AtomicUnsupported`); on a direct file either
/// unsupported (no unit probed) or checked against the limits (`AtomicRejected`) — before any
/// I/O in every case.
pub fn atomic_rules_are_checked_before_io(fs: &dyn FileSystem, dir: &Path) {
    let page = aligned_pattern(30, 16384);
    let buffered = create(
        fs,
        &dir.join("atomic-buffered"),
        OpenOptions::new(FileClass::Data),
    );
    assert!(!buffered.atomic_write_limits().supported());
    let before = fs.counters().snapshot();
    assert!(matches!(
        buffered.write_atomic(&page, 0),
        Err(IoError::AtomicUnsupported { .. })
    ));
    let direct = create(
        fs,
        &dir.join("atomic-direct"),
        OpenOptions::new(FileClass::Data).direct(true),
    );
    let limits = direct.atomic_write_limits();
    if limits.supported() {
        // Misaligned (16 KiB at 4096) and not a power of two: rejected by the probe's rules.
        assert!(matches!(
            direct.write_atomic(&page, 4096),
            Err(IoError::AtomicRejected { .. })
        ));
        assert!(matches!(
            direct.write_atomic(&page[..12288], 0),
            Err(IoError::AtomicRejected { .. })
        ));
        let batch = [
            WriteOp {
                offset: 0,
                buf: &page[..],
            },
            WriteOp {
                offset: 4096,
                buf: &page[..],
            },
        ];
        assert!(matches!(
            direct.write_atomic_batch(&batch),
            Err(IoError::AtomicRejected { .. })
        ));
        assert_eq!(direct.len().unwrap(), 0, "nothing of the batch was written");
    } else {
        assert!(matches!(
            direct.write_atomic(&page, 0),
            Err(IoError::AtomicUnsupported { .. })
        ));
        assert!(matches!(
            direct.write_atomic_batch(&[WriteOp {
                offset: 0,
                buf: &page
            }]),
            Err(IoError::AtomicUnsupported { .. })
        ));
    }
    assert_eq!(delta(fs, &before, FileClass::Data), ClassStats::default());
    assert!(buffered.is_empty().unwrap());
}

/// A request whose end (`offset + len`) overflows or passes `i64::MAX` is `OutOfRange`, naming
/// the file and offset, before any I/O: reads, writes, atomic writes, `allocate`, `set_len`, and
/// a batch with one such request (nothing of it written), on buffered and direct files alike.
pub fn requests_ending_past_the_largest_offset_are_rejected_before_io(
    fs: &dyn FileSystem,
    dir: &Path,
) {
    const MAX: u64 = i64::MAX as u64;
    for (name, options) in [
        ("range-buffered", OpenOptions::new(FileClass::Data)),
        (
            "range-direct",
            OpenOptions::new(FileClass::Data).direct(true),
        ),
    ] {
        let path = dir.join(name);
        let f = create(fs, &path, options);
        let page = aligned_pattern(40, 4096);
        f.write_all_at(&page, 0).unwrap();
        let before = fs.counters().snapshot();
        let out_of_range = |what: &str, r: keel_io::Result<()>, offset: u64| match r {
            Err(IoError::OutOfRange {
                path: p, offset: o, ..
            }) => assert_eq!((p, o), (path.clone(), offset), "{name}: {what}"),
            other => panic!("{name}: {what}: expected OutOfRange, got {other:?}"),
        };
        let wrap = u64::MAX - 4095;
        let past = MAX - 4095;
        out_of_range("write", f.write_all_at(&page, wrap), wrap);
        out_of_range("write", f.write_all_at(&page, past), past);
        let mut rbuf = AlignedBuf::page(4096);
        out_of_range("read", f.read_exact_at(&mut rbuf, wrap), wrap);
        out_of_range("atomic write", f.write_atomic(&page, wrap), wrap);
        let batch = [
            WriteOp {
                offset: 4096,
                buf: &page[..],
            },
            WriteOp {
                offset: past,
                buf: &page[..],
            },
        ];
        out_of_range("batch", f.write_batch(&batch), past);
        let mut reads = [ReadOp {
            offset: wrap,
            buf: &mut rbuf[..],
        }];
        out_of_range("read batch", f.read_batch(&mut reads), wrap);
        out_of_range("allocate", f.allocate(MAX, 1), MAX);
        out_of_range("set_len", f.set_len(MAX + 1), 0);
        assert_eq!(f.len().unwrap(), 4096, "{name}: nothing written or resized");
        assert_eq!(
            delta(fs, &before, FileClass::Data),
            ClassStats::default(),
            "{name}: rejected requests are not counted"
        );
        assert!(
            read_all(f.as_ref(), 4096)[..] == page[..],
            "{name}: unchanged"
        );
    }
}

/// `capabilities` answers for the directory it is asked about.
pub fn capabilities_name_the_path(fs: &dyn FileSystem, dir: &Path) {
    let caps = fs.capabilities(dir).unwrap();
    assert_eq!(caps.path, dir);
    assert!(!caps.filesystem.is_empty());
    assert!(caps.logical_block_size.is_power_of_two(), "{caps:?}");
    assert!(
        caps.physical_block_size >= caps.logical_block_size,
        "{caps:?}"
    );
    let f = create(
        fs,
        &dir.join("caps-file"),
        OpenOptions::new(FileClass::Other),
    );
    f.write_all_at(b"x", 0).unwrap();
    assert_eq!(
        fs.capabilities(&dir.join("caps-file")).unwrap().filesystem,
        caps.filesystem
    );
}
