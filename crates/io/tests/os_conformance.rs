//! `OsFs` passes the shared conformance suite with each backend (and `SimFs` the same suite, one
//! line: `conformance_simfs`), plus checks only a real OS can answer: the open flags each sync method sets, ENOSPC from a real device, the automatic backend
//! choice, and many threads sharing the io_uring ring pool.

mod common;

use keel_io::os::io_uring_status;
use keel_io::{
    AlignedBuf, Backend, File, FileClass, FileSystem, IoError, OpenOptions, OsFs, ReadOp,
    SyncMethod, WriteOp,
};
use std::path::Path;
use std::sync::Arc;

/// The backends to run, printing a SKIPPED line for io_uring when it cannot be set up here.
fn backends() -> Vec<OsFs> {
    let mut v = vec![OsFs::new(Backend::Pwrite)];
    match io_uring_status() {
        Ok(()) => v.push(OsFs::new(Backend::IoUring)),
        Err(why) => println!("SKIPPED: io_uring backend: {why}"),
    }
    v
}

fn uring() -> Option<OsFs> {
    match io_uring_status() {
        Ok(()) => Some(OsFs::new(Backend::IoUring)),
        Err(why) => {
            println!("SKIPPED: io_uring backend: {why}");
            None
        }
    }
}

#[test]
fn conformance_pwrite() {
    let dir = tempfile::tempdir().unwrap();
    let fs = OsFs::new(Backend::Pwrite);
    assert_eq!(fs.backend(), Backend::Pwrite);
    common::conformance(&fs, dir.path());
}

#[test]
fn conformance_io_uring() {
    let Some(fs) = uring() else { return };
    assert_eq!(fs.backend(), Backend::IoUring);
    let dir = tempfile::tempdir().unwrap();
    common::conformance(&fs, dir.path());
}

#[test]
fn conformance_simfs() {
    common::conformance(&keel_io::SimFs::with_seed(7), Path::new("/sim/conformance"));
}

#[test]
fn auto_picks_io_uring_when_a_ring_can_be_set_up() {
    let fs = OsFs::auto();
    let expected = if io_uring_status().is_ok() {
        Backend::IoUring
    } else {
        Backend::Pwrite
    };
    assert_eq!(fs.backend(), expected);
    assert_eq!(OsFs::default().backend(), expected);
    assert_eq!(OsFs::new(Backend::Auto).backend(), expected);
    assert_eq!(Backend::Auto.resolve(), expected);
    assert_eq!("io_uring".parse::<Backend>().unwrap(), Backend::IoUring);
    assert_eq!("pwrite".parse::<Backend>().unwrap(), Backend::Pwrite);
    assert!("aio".parse::<Backend>().is_err());
    assert_eq!(Backend::IoUring.to_string(), "io_uring");
    let caps = fs
        .capabilities(tempfile::tempdir().unwrap().path())
        .unwrap();
    assert_eq!(caps.io_uring, io_uring_status().is_ok());
}

/// The `flags:` line of /proc/self/fdinfo for the descriptor open on `path` (octal).
fn open_flags(path: &Path) -> Option<i32> {
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        if std::fs::read_link(entry.path()).ok().as_deref() == Some(path) {
            let fd = entry.file_name();
            let info = std::fs::read_to_string(Path::new("/proc/self/fdinfo").join(&fd)).ok()?;
            let line = info.lines().find(|l| l.starts_with("flags:"))?;
            return i32::from_str_radix(line.trim_start_matches("flags:").trim(), 8).ok();
        }
    }
    None
}

#[test]
fn each_sync_method_opens_with_its_flags() {
    for fs in backends() {
        let dir = tempfile::tempdir().unwrap();
        for method in SyncMethod::ALL {
            let path = dir.path().join(format!("{method:?}"));
            let f = fs
                .open(
                    &path,
                    &OpenOptions::new(FileClass::Log)
                        .create(true)
                        .for_sync_method(method),
                )
                .unwrap();
            let Some(flags) = open_flags(&path) else {
                println!("SKIPPED: /proc/self/fdinfo unreadable; cannot check open flags");
                return;
            };
            assert_eq!(
                flags & libc::O_DSYNC != 0,
                method == SyncMethod::ODsync,
                "{method:?}: O_DSYNC in flags {flags:o}"
            );
            assert_eq!(
                flags & libc::O_DIRECT != 0,
                method == SyncMethod::ODirect,
                "{method:?}: O_DIRECT in flags {flags:o}"
            );
            drop(f);
        }
    }
}

#[test]
fn enospc_is_no_space_on_both_backends() {
    // /dev/full fails every write with ENOSPC: a real errno from the kernel, through each backend.
    if !Path::new("/dev/full").exists() {
        println!("SKIPPED: no /dev/full to produce ENOSPC");
        return;
    }
    for fs in backends() {
        let f = fs
            .open(Path::new("/dev/full"), &OpenOptions::new(FileClass::Log))
            .unwrap();
        let before = fs.counters().snapshot();
        match f.write_all_at(&[1u8; 4096], 0) {
            Err(IoError::NoSpace {
                offset: 0,
                len: 4096,
                ..
            }) => {}
            other => panic!("{}: expected NoSpace, got {other:?}", fs.backend()),
        }
        let buf = [2u8; 512];
        let batch = [
            WriteOp {
                offset: 0,
                buf: &buf,
            },
            WriteOp {
                offset: 512,
                buf: &buf,
            },
        ];
        let e = f.write_batch(&batch).unwrap_err();
        assert!(e.is_no_space(), "{}: {e}", fs.backend());
        assert!(e.to_string().contains("no space"), "{e}");
        assert_eq!(fs.counters().snapshot().log.writes, before.log.writes);
        // Reads of /dev/full succeed (zeros) and are counted.
        let mut r = [7u8; 100];
        f.read_exact_at(&mut r, 0).unwrap();
        assert_eq!(r, [0u8; 100]);
        assert_eq!(fs.counters().snapshot().log.reads, before.log.reads + 1);
    }
}

#[test]
fn other_errors_name_the_system_call_and_file() {
    for fs in backends() {
        let dir = tempfile::tempdir().unwrap();
        // A directory opened read-write fails at open with EISDIR.
        let e = fs
            .open(dir.path(), &OpenOptions::new(FileClass::Data))
            .unwrap_err();
        match &e {
            IoError::Os { op, path, source } => {
                assert_eq!(*op, "open");
                assert_eq!(path, dir.path());
                assert_eq!(source.raw_os_error(), Some(libc::EISDIR));
            }
            other => panic!("expected Os, got {other:?}"),
        }
        assert!(e.to_string().contains(&dir.path().display().to_string()));
    }
}

#[test]
fn many_threads_share_the_ring_pool() {
    let Some(fs) = uring() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f: Arc<dyn File> = fs
        .open(
            &dir.path().join("shared"),
            &OpenOptions::new(FileClass::Data).create(true).direct(true),
        )
        .unwrap();
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 20;
    const PER_BATCH: u64 = 16;
    let before = fs.counters().snapshot();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let f = f.clone();
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let pages: Vec<AlignedBuf> = (0..PER_BATCH)
                        .map(|i| common::aligned_pattern(t << 32 | round << 16 | i, 4096))
                        .collect();
                    let slot = |i: u64| (t * PER_BATCH + i) * 4096;
                    let writes: Vec<WriteOp<'_>> = pages
                        .iter()
                        .enumerate()
                        .map(|(i, p)| WriteOp {
                            offset: slot(i as u64),
                            buf: p,
                        })
                        .collect();
                    f.write_batch(&writes).unwrap();
                    let mut back: Vec<AlignedBuf> =
                        (0..PER_BATCH).map(|_| AlignedBuf::page(4096)).collect();
                    let mut reads: Vec<ReadOp<'_>> = back
                        .iter_mut()
                        .enumerate()
                        .map(|(i, b)| ReadOp {
                            offset: slot(i as u64),
                            buf: &mut b[..],
                        })
                        .collect();
                    f.read_batch(&mut reads).unwrap();
                    for (p, b) in pages.iter().zip(&back) {
                        assert!(p[..] == b[..], "thread {t} round {round}");
                    }
                }
            });
        }
    });
    let d = fs.counters().snapshot().since(&before);
    assert_eq!(d.data.writes, THREADS * ROUNDS * PER_BATCH);
    assert_eq!(d.data.reads, THREADS * ROUNDS * PER_BATCH);
    assert_eq!(f.len().unwrap(), THREADS * PER_BATCH * 4096);
}

/// Threads creating one new directory (and a new parent) at once all succeed: each asked
/// "a directory?" and then "anything?", and one whose first look came before another's mkdir
/// and second after it said "Not a directory" (two openers creating one store: a tester, 2 to 4
/// rounds in 1,000). The race is short: a few hundred rounds of eight threads.
#[test]
fn threads_creating_one_directory_all_succeed() {
    let fs = Arc::new(OsFs::new(Backend::Pwrite));
    let root = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for round in 0..400 {
        let path = root.path().join(format!("r{round}")).join("store");
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (fs, path, barrier) = (fs.clone(), path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    fs.create_dir_all(&path).map_err(|e| e.to_string())
                })
            })
            .collect();
        for t in threads {
            if let Err(e) = t.join().unwrap() {
                failures.push(format!("round {round}: {e}"));
            }
        }
        assert!(path.is_dir());
    }
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // A file in the way is still "Not a directory".
    let file = root.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = fs.create_dir_all(&file).unwrap_err();
    assert!(e.to_string().contains("Not a directory"), "{e}");
}
