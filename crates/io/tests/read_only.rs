//! `ReadOnlyFs`: no call through it changes a byte, a name or a length below it (its module
//! invariant), and reads still work.

use keel_io::{
    FileClass, FileSystem, IoError, LockMode, OpenOptions, ReadOnlyFs, SimConfig, SimFs, WriteOp,
};
use std::path::Path;
use std::sync::Arc;

#[test]
fn nothing_changes_through_a_read_only_view() {
    let sim = SimFs::new(SimConfig::seeded(1));
    let dir = Path::new("/d");
    sim.create_dir_all(dir).unwrap();
    let f = sim
        .open(
            &dir.join("a"),
            &OpenOptions::new(FileClass::Data).create(true),
        )
        .unwrap();
    f.write_all_at(b"hello world", 0).unwrap();
    f.sync_all().unwrap();
    let before = sim.contents(&dir.join("a")).unwrap();
    let ro = ReadOnlyFs::new(Arc::new(sim.clone()));
    let refused = |r: keel_io::Result<()>, what: &str| match r {
        Err(IoError::ReadOnly { .. }) => {}
        other => panic!("{what}: expected ReadOnly, got {other:?}"),
    };
    // Reads work.
    let g = ro
        .open(&dir.join("a"), &OpenOptions::new(FileClass::Data))
        .unwrap();
    let mut buf = [0u8; 5];
    g.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"hello");
    assert_eq!(g.len().unwrap(), 11);
    // Every mutation is refused.
    refused(g.write_all_at(b"X", 0), "write");
    refused(
        g.write_batch(&[WriteOp {
            offset: 0,
            buf: b"X",
        }]),
        "write batch",
    );
    refused(g.sync_all(), "sync");
    refused(g.sync_data(), "sync data");
    refused(g.set_len(0), "truncate");
    refused(g.allocate(0, 4096), "allocate");
    refused(ro.remove_file(&dir.join("a")), "remove");
    refused(ro.rename(&dir.join("a"), &dir.join("b")), "rename");
    refused(ro.create_dir_all(&dir.join("sub")), "mkdir");
    assert!(matches!(
        ro.open(
            &dir.join("new"),
            &OpenOptions::new(FileClass::Data).create(true)
        ),
        Err(IoError::ReadOnly { .. })
    ));
    // Opening an existing file "with create" opens it read-only.
    let h = ro
        .open(
            &dir.join("a"),
            &OpenOptions::new(FileClass::Data).create(true),
        )
        .unwrap();
    refused(h.write_all_at(b"Y", 3), "write after open-with-create");
    // Locks are shared: two read-only views share, an exclusive holder is refused.
    let l1 = ro.lock(&dir.join("LOCK"), LockMode::Exclusive).unwrap();
    let _l2 = ro.lock(&dir.join("LOCK"), LockMode::Exclusive).unwrap();
    assert!(matches!(
        sim.lock(&dir.join("LOCK"), LockMode::Exclusive),
        Err(IoError::Locked { .. })
    ));
    drop(l1);
    assert_eq!(sim.contents(&dir.join("a")).unwrap(), before);
    assert!(!sim.exists(&dir.join("new")).unwrap());
    assert!(!sim.exists(&dir.join("b")).unwrap());
    assert!(!sim.exists(&dir.join("sub")).unwrap());
}

#[test]
fn os_locks_conflict_within_one_process_and_record_the_pid() {
    let dir = tempfile::tempdir().unwrap();
    let fs = keel_io::OsFs::default();
    let p = dir.path().join("LOCK");
    let a = fs.lock(&p, LockMode::Exclusive).unwrap();
    match fs.lock(&p, LockMode::Exclusive) {
        Err(IoError::Locked { holder, .. }) => assert_eq!(holder, Some(std::process::id())),
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(matches!(
        fs.lock(&p, LockMode::Shared),
        Err(IoError::Locked { .. })
    ));
    drop(a);
    let s1 = fs.lock(&p, LockMode::Shared).unwrap();
    let s2 = fs.lock(&p, LockMode::Shared).unwrap();
    assert!(fs.lock(&p, LockMode::Exclusive).is_err());
    drop((s1, s2));
    fs.lock(&p, LockMode::Exclusive).unwrap();
}

/// A lock released a moment after the open tried it (as when a child being spawned still holds
/// a copy of its file description until exec) is taken, not reported as held; one held for
/// good is still refused, after the short grace.
#[test]
fn a_lock_released_within_the_grace_is_taken_and_one_held_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fs = keel_io::OsFs::default();
    let p = dir.path().join("LOCK");
    let held = fs.lock(&p, LockMode::Exclusive).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(30));
        drop(held);
    });
    let t0 = std::time::Instant::now();
    let got = fs.lock(&p, LockMode::Exclusive);
    release.join().unwrap();
    assert!(got.is_ok(), "{got:?}");
    assert!(t0.elapsed() >= std::time::Duration::from_millis(20));
    drop(got);
    let _forever = fs.lock(&p, LockMode::Exclusive).unwrap();
    let t0 = std::time::Instant::now();
    assert!(matches!(
        fs.lock(&p, LockMode::Shared),
        Err(IoError::Locked { .. })
    ));
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "refused after the grace only"
    );
}

/// The probe (`FileSystem::capabilities`, which every open runs) asks an existing file of the
/// directory, read-only, before it would create a scratch file: so a read-only open writes
/// nothing, and a full disk, which refuses the scratch file with ENOSPC, can still be opened
/// (found by `crates/keel/tests/fs_full.rs`: a read-only open of a store on a full disk failed
/// with "create probe file ... No space left on device"). A directory's mtime moves with any
/// entry made or removed in it.
#[test]
fn probing_a_directory_that_holds_a_file_writes_nothing() {
    let fs = keel_io::OsFs::default();
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("data"), vec![0u8; 8192]).unwrap();
    let before = std::fs::metadata(&dir).unwrap().modified().unwrap();
    // Coarse timestamps: make any change visible.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs.capabilities(&dir).unwrap();
    let after = std::fs::metadata(&dir).unwrap().modified().unwrap();
    assert_eq!(
        before, after,
        "probing a directory that holds a file changed the directory"
    );
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("data")]);
}
