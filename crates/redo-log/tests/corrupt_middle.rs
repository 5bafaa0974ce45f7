//! A corrupt middle is told from a torn tail (issue 11, item 3), at the log's own level.
//!
//! Every group is made durable before the next is appended, so every block but the tail was
//! covered by a completed sync. A damaged block in the middle is then refused
//! ([`LogError::CorruptMiddle`] naming file, block and LSN) — for 512 and 4096-byte blocks,
//! preallocated and growing files, a flipped bit, a zeroed block or garbage — while damage to the
//! last block (what a torn write leaves) still opens, and `accept_loss` opens and reports.

mod common;

use common::{group, log_files};
use keel_io::{FileClass, FileSystem, OpenOptions, SimConfig, SimFs};
use keel_redo_log::{LogBlockSize, LogConfig, LogError, LogFiles, LogOpenMode, RedoLog};
use std::path::Path;
use std::sync::Arc;

fn cfg(block: LogBlockSize, files: LogFiles) -> LogConfig {
    LogConfig {
        block_size: block,
        files,
        buffer_size: 256 << 10,
        ..LogConfig::default()
    }
}

fn layouts() -> Vec<LogFiles> {
    vec![
        LogFiles::Preallocated {
            file_size: 1 << 20,
            files: 2,
        },
        LogFiles::Growing { file_size: 1 << 20 },
    ]
}

/// Writes `n` groups, each durable before the next; returns the number of blocks used in
/// `log.0000000000`.
fn write(fs: &SimFs, dir: &Path, c: &LogConfig, n: u64) -> u64 {
    let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
    for t in 0..n {
        let r = log.append_range(&group(t, 300)).unwrap();
        log.wait_durable(r.end).unwrap();
    }
    let end = log.end_lsn();
    drop(log);
    let p = keel_redo_log::inspect::payload_size(c.block_size.bytes()) as u64;
    end.0.div_ceil(p)
}

fn damage(fs: &SimFs, dir: &Path, block: u64, bsize: usize, how: &str) {
    let path = dir.join("log.0000000000");
    let f = fs.open(&path, &OpenOptions::new(FileClass::Other)).unwrap();
    let off = block * bsize as u64;
    let mut b = vec![0u8; bsize];
    f.read_exact_at(&mut b, off).unwrap();
    match how {
        "flip" => b[40] ^= 0x04,
        "zero" => b.fill(0),
        _ => b
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = (i as u8).wrapping_mul(37)),
    }
    f.write_all_at(&b, off).unwrap();
    f.sync_all().unwrap();
}

fn open(
    fs: &SimFs,
    dir: &Path,
    c: &LogConfig,
    accept: bool,
) -> keel_redo_log::Result<keel_redo_log::Recovered> {
    RedoLog::open_mode(
        Arc::new(fs.clone()),
        dir,
        c.clone(),
        LogOpenMode::Existing,
        accept,
    )
    .map(|(_, r)| r)
}

#[test]
fn a_damaged_block_in_the_middle_is_refused() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        for files in layouts() {
            for how in ["flip", "zero", "garbage"] {
                let fs = SimFs::new(SimConfig::seeded(7));
                let dir = Path::new("/log");
                let c = cfg(block, files);
                let used = write(&fs, dir, &c, 200);
                assert!(used > 8, "{used}");
                let bad = used / 2;
                damage(&fs, dir, bad, block.bytes(), how);
                let what = format!("{block:?} {files:?} {how}");
                match open(&fs, dir, &c, false) {
                    Err(LogError::CorruptMiddle {
                        path,
                        block: b,
                        lsn,
                        ..
                    }) => {
                        assert!(path.ends_with("log.0000000000"), "{what}");
                        assert_eq!(b, bad, "{what}");
                        assert_eq!(
                            lsn.0,
                            bad * keel_redo_log::inspect::payload_size(block.bytes()) as u64,
                            "{what}"
                        );
                    }
                    Err(e) => panic!("{what}: expected CorruptMiddle, got {e}"),
                    Ok(r) => panic!(
                        "{what}: expected CorruptMiddle, opened with {} groups; end: {}",
                        r.groups.len(),
                        r.end_reason
                    ),
                }
                // Refusing wrote nothing: the same open refuses again.
                assert!(open(&fs, dir, &c, false).is_err(), "{what}");
                // Accepting the loss opens and says what was given up.
                let r = open(&fs, dir, &c, true).unwrap();
                let loss = r.log_loss.expect("the loss is reported");
                assert!(loss.contains(&format!("block {bad}")), "{what}: {loss}");
            }
        }
    }
}

#[test]
fn damage_to_the_last_block_opens_as_a_torn_tail() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        for files in layouts() {
            let fs = SimFs::new(SimConfig::seeded(8));
            let dir = Path::new("/log");
            let c = cfg(block, files);
            let used = write(&fs, dir, &c, 100);
            damage(&fs, dir, used - 1, block.bytes(), "zero");
            let r = open(&fs, dir, &c, false)
                .unwrap_or_else(|e| panic!("{block:?} {files:?}: a torn tail was refused: {e}"));
            assert!(r.log_loss.is_none());
            assert!(!r.groups.is_empty());
        }
    }
}

/// A log created by a build before the durable lag (header version 1) keeps a lag of 0 in every
/// block it is given, so such a build can still read it; new logs are version 4 and claim.
#[test]
fn a_version_1_log_keeps_blocks_without_claims() {
    use keel_redo_log::inspect::{decode_header, HEADER_FILE};
    let fs = SimFs::new(SimConfig::seeded(9));
    let dir = Path::new("/log");
    let c = cfg(LogBlockSize::B512, layouts()[0]);
    write(&fs, dir, &c, 3);
    let hpath = dir.join(HEADER_FILE);
    let h = fs.contents(&hpath).unwrap();
    let (mut st, _) = decode_header(&hpath, &h).unwrap();
    assert_eq!(st.version, 4, "new logs are version 4");
    st.version = 1;
    let f = fs
        .open(&hpath, &OpenOptions::new(FileClass::Other))
        .unwrap();
    f.write_all_at(&st.encode(), 0).unwrap();
    f.sync_all().unwrap();
    let used_before = write(&fs, dir, &c, 0);
    let used = write(&fs, dir, &c, 40);
    let log = fs.contents(&dir.join("log.0000000000")).unwrap();
    for b in used_before..used {
        let o = (b * 512) as usize;
        assert_eq!(
            log[o + 21..o + 24],
            [0, 0, 0],
            "block {b} of a version 1 log claims"
        );
    }
    let (st, _) = decode_header(&hpath, &fs.contents(&hpath).unwrap()).unwrap();
    assert_eq!(st.version, 1);
}

/// An empty log in `/log` on a new SimFs (seeded `seed`) whose header says format `version`
/// (what a build of that version would have created).
fn log_of_version(seed: u64, version: u32) -> (SimFs, LogConfig) {
    use keel_redo_log::inspect::{decode_header, HEADER_FILE};
    let fs = SimFs::new(SimConfig::seeded(seed));
    let dir = Path::new("/log");
    let c = cfg(LogBlockSize::B512, layouts()[0]);
    write(&fs, dir, &c, 0);
    let hpath = dir.join(HEADER_FILE);
    let (mut st, _) = decode_header(&hpath, &fs.contents(&hpath).unwrap()).unwrap();
    st.version = version;
    let f = fs
        .open(&hpath, &OpenOptions::new(FileClass::Other))
        .unwrap();
    f.write_all_at(&st.encode(), 0).unwrap();
    f.sync_all().unwrap();
    (fs, c)
}

/// A log created before page-ops items (header version 2) keeps plain groups, so a build that
/// reads only version 2 can still read it; a version 3 log writes runs of page ops compactly.
/// Told by the LSNs each group takes, which are its encoded bytes.
#[test]
fn a_version_2_log_keeps_plain_groups() {
    use keel_redo_log::inspect::{decode_header, group_len_as, Encoding, HEADER_FILE};
    for (version, enc) in [(2, Encoding::Plain), (3, Encoding::Compact)] {
        let (fs, c) = log_of_version(10, version);
        let dir = Path::new("/log");
        let hpath = dir.join(HEADER_FILE);
        write(&fs, dir, &c, 40);
        let r = open(&fs, dir, &c, false).unwrap();
        assert_eq!(r.groups.len(), 40);
        let mut shorter = 0;
        for g in &r.groups {
            let len = g.end_lsn.0 - g.start_lsn.0;
            assert_eq!(len, group_len_as(&g.records, enc), "version {version}");
            if len < group_len_as(&g.records, Encoding::Plain) {
                shorter += 1;
            }
        }
        // Every fourth group of `common::group` is a write and a move of one page.
        assert_eq!(
            shorter > 0,
            version == 3,
            "version {version}: {shorter} compact groups"
        );
        let (st, _) = decode_header(&hpath, &fs.contents(&hpath).unwrap()).unwrap();
        assert_eq!(st.version, version);
    }
}

/// A log created before page-copy records (header version 3) refuses them at append, so a
/// build that reads only version 3 can still replay it; a version 4 log takes them and gives
/// them back at recovery.
#[test]
fn a_version_3_log_refuses_page_copies() {
    use keel_page::PageId;
    use keel_redo_log::Record;
    let copy = vec![Record::PageCopy {
        page_id: PageId(5),
        from: PageId(4),
    }];
    for version in [3, 4] {
        let (fs, c) = log_of_version(11, version);
        let dir = Path::new("/log");
        let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
        assert_eq!(log.accepts_page_copies(), version >= 4);
        match log.append_range(&copy) {
            Ok(r) => {
                assert_eq!(version, 4, "a version 3 log took a page copy");
                log.wait_durable(r.end).unwrap();
            }
            Err(e) => {
                assert_eq!(version, 3, "a version 4 log refused a page copy: {e}");
                assert!(e.to_string().contains("log format version 4"), "{e}");
            }
        }
        drop(log);
        let r = open(&fs, dir, &c, false).unwrap();
        let copies = r.groups.iter().filter(|g| g.records == copy).count();
        assert_eq!(copies, usize::from(version == 4), "version {version}");
    }
}

/// A growing log's file deleted or cut short while later files exist is a corrupt middle too
/// (files are filled and created in order, so a gap is no torn tail): refused (`Missing` for a
/// deleted file, `CorruptMiddle` for one cut short) naming the first missing block's file, with every file left in place; `accept_loss` opens and reports. The
/// tests above damaged bytes inside one file only, and a deleted middle file used to end the
/// log at the gap silently (the search for proof stopped at the first missing block), after
/// which the open deleted the files past it as a torn tail.
#[test]
fn a_growing_log_missing_or_cutting_short_a_file_is_refused() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        let files = LogFiles::Growing {
            file_size: 64 << 10,
        };
        let c = cfg(block, files);
        for (victim, cut) in [(0u64, false), (1, false), (2, false), (1, true)] {
            let fs = SimFs::new(SimConfig::seeded(9));
            let dir = Path::new("/log");
            write(&fs, dir, &c, 1200);
            let names = log_files;
            let before = names(&fs);
            assert!(before.len() >= 5, "{} files", before.len());
            let path = dir.join(format!("log.{victim:010}"));
            if cut {
                let f = fs.open(&path, &OpenOptions::new(FileClass::Other)).unwrap();
                f.set_len(f.len().unwrap() / 2).unwrap();
                f.sync_all().unwrap();
            } else {
                fs.remove_file(&path).unwrap();
            }
            let left = names(&fs);
            let what = format!(
                "{block:?}, file {victim} {}",
                if cut { "cut" } else { "deleted" }
            );
            match open(&fs, dir, &c, false) {
                // A file cut short is told by its blocks; one deleted by the files around it.
                Err(LogError::CorruptMiddle { path: p, .. }) if cut => {
                    assert_eq!(p, path, "{what}")
                }
                Err(LogError::Missing { path: p, .. }) if !cut => assert_eq!(p, path, "{what}"),
                Err(e) => panic!("{what}: expected CorruptMiddle or Missing, got {e}"),
                Ok(r) => panic!(
                    "{what}: opened with {} groups; end: {}",
                    r.groups.len(),
                    r.end_reason
                ),
            }
            assert_eq!(names(&fs), left, "{what}: the refused open removed files");
            let r = open(&fs, dir, &c, true).unwrap();
            assert!(r.log_loss.is_some(), "{what}");
        }
    }
}

/// A growing log's newest files deleted leave no gap: the files present end cleanly, and the
/// scan ended there, losing every commit the deleted files held without a word (the test
/// above deletes only files with a later one present). The header records the newest file the
/// log had created (slot bytes 44..56) before a commit in it is acknowledged, and a checkpoint
/// records it again, so an open finding none as new refuses, naming the file, and writes
/// nothing — with a checkpoint since or none; `accept_loss` opens and reports; the file put
/// back, the log opens with every group.
#[test]
fn a_growing_log_missing_its_newest_files_is_refused() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        let c = cfg(
            block,
            LogFiles::Growing {
                file_size: 64 << 10,
            },
        );
        for (deleted, checkpointed) in [(1usize, true), (2, true), (1, false), (2, false)] {
            let fs = SimFs::new(SimConfig::seeded(11));
            let dir = Path::new("/log");
            let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
            let mut ends = Vec::new();
            for t in 0..1200 {
                let r = log.append_range(&group(t, 300)).unwrap();
                log.wait_durable(r.end).unwrap();
                ends.push(r.end);
            }
            // A checkpoint after the newest file was created records it too.
            let recovered = if checkpointed {
                log.checkpoint(ends[100]).unwrap();
                1099
            } else {
                1200
            };
            drop(log);
            let files = log_files(&fs);
            assert!(files.len() >= 4, "{} files", files.len());
            let gone: Vec<_> = files[files.len() - deleted..].to_vec();
            let saved: Vec<Vec<u8>> = gone.iter().map(|p| fs.contents(p).unwrap()).collect();
            for p in &gone {
                fs.remove_file(p).unwrap();
            }
            let what = format!("{block:?}, newest {deleted} deleted, checkpointed {checkpointed}");
            let before: Vec<_> = fs
                .files()
                .unwrap()
                .into_iter()
                .map(|p| (fs.contents(&p).unwrap(), p))
                .collect();
            match open(&fs, dir, &c, false) {
                Err(LogError::Missing { path, .. }) => {
                    assert_eq!(&path, &gone[0], "{what}")
                }
                Err(e) => panic!("{what}: expected Missing, got {e}"),
                Ok(r) => panic!(
                    "{what}: opened with {} groups of {recovered}",
                    r.groups.len()
                ),
            }
            let after: Vec<_> = fs
                .files()
                .unwrap()
                .into_iter()
                .map(|p| (fs.contents(&p).unwrap(), p))
                .collect();
            assert!(after == before, "{what}: the refused open wrote");
            // Put back, every group is there.
            for (p, bytes) in gone.iter().zip(&saved) {
                let f = fs
                    .open(p, &OpenOptions::new(FileClass::Other).create(true))
                    .unwrap();
                f.write_all_at(bytes, 0).unwrap();
                f.sync_all().unwrap();
            }
            let r = open(&fs, dir, &c, false).unwrap();
            assert_eq!(r.groups.len(), recovered, "{what}");
            // Deleted again and accepted: opens, and says what was lost.
            for p in &gone {
                fs.remove_file(p).unwrap();
            }
            let r = open(&fs, dir, &c, true).unwrap();
            assert!(
                r.log_loss.as_deref().is_some_and(|l| l.contains("missing")),
                "{what}: {:?}",
                r.log_loss
            );
        }
    }
}

/// A stale `log.header` put back (copied before a later opening recorded its incarnation):
/// the blocks that opening wrote are valid and of an incarnation the header does not know,
/// which is proof the header lost a durable slot (a new incarnation is recorded before any of
/// its blocks is written). The scan ended there quietly, as at a torn tail, so the open lost
/// every commit of the later openings — and then reused their incarnation number. Now it is
/// refused, and accepting the loss opens and says so.
#[test]
fn a_stale_header_is_refused_not_taken_for_a_torn_tail() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        for files in layouts() {
            let fs = SimFs::new(SimConfig::seeded(11));
            let dir = Path::new("/log");
            let c = cfg(block, files);
            write(&fs, dir, &c, 20);
            let header = dir.join("log.header");
            let read_all = |fs: &SimFs| {
                let f = fs
                    .open(&header, &OpenOptions::new(FileClass::Other))
                    .unwrap();
                let mut b = vec![0u8; f.len().unwrap() as usize];
                f.read_exact_at(&mut b, 0).unwrap();
                b
            };
            let old = read_all(&fs);
            // A second opening (incarnation 2) appends 30 more durable groups.
            let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
            for t in 20..50 {
                let r = log.append_range(&group(t, 300)).unwrap();
                log.wait_durable(r.end).unwrap();
            }
            drop(log);
            assert_ne!(read_all(&fs), old);
            let f = fs
                .open(&header, &OpenOptions::new(FileClass::Other))
                .unwrap();
            f.write_all_at(&old, 0).unwrap();
            f.sync_all().unwrap();
            let what = format!("{block:?} {files:?}");
            match open(&fs, dir, &c, false) {
                Err(LogError::CorruptMiddle { evidence, .. }) => {
                    assert!(evidence.contains("newer than"), "{what}: {evidence}");
                }
                Err(e) => panic!("{what}: expected CorruptMiddle, got {e}"),
                Ok(r) => panic!(
                    "{what}: a stale header opened with {} of 50 groups; end: {}",
                    r.groups.len(),
                    r.end_reason
                ),
            }
            let r = open(&fs, dir, &c, true).unwrap();
            assert!(r.log_loss.is_some(), "{what}");
        }
    }
}

/// A damaged block far before the sync that covered it is still refused, whatever buffer the
/// reopening configures. The writer once wrote any distance without a sync — a group larger
/// than its buffer, a burst of `Buffered` commits between two interval syncs — while the scan
/// looks for proof only `max(buffer, 16 MiB)` past a damaged block: 20 MiB of redo in one
/// flush interval took a flipped bit in its first block for a torn tail, opened without every
/// later acknowledged commit and wrote over it. The writer now syncs before it runs more than
/// `UNSYNCED_MAX` (8 MiB) past the durable end; with that cap switched off
/// (`no_unsynced_cap`) the damage opens as a torn tail again.
#[test]
fn a_damaged_block_far_before_its_sync_is_refused_whatever_the_buffer() {
    let run = |switches: keel_redo_log::TestSwitches, group_bytes: usize| {
        let fs = SimFs::new(SimConfig::seeded(11));
        let dir = Path::new("/log");
        let c = LogConfig {
            block_size: LogBlockSize::B4096,
            files: LogFiles::Growing {
                file_size: 64 << 20,
            },
            buffer_size: 256 << 10,
            durability: keel_redo_log::Durability::Buffered,
            flush_interval: std::time::Duration::from_secs(3600),
            ..LogConfig::default()
        };
        let (log, _) = RedoLog::open_with(Arc::new(fs.clone()), dir, c.clone(), switches).unwrap();
        // One synced append first: the header then records the log durable only to there (it
        // records again only at the next file or checkpoint), so the claims the cap makes are
        // what tells the damage below from a torn tail.
        let r = log.append_range(&group(u64::MAX / 2, 300)).unwrap();
        log.wait_durable(r.end).unwrap();
        // 20 MiB appended with nobody waiting for durability, then one synced append.
        let mut t = 0u64;
        while log.end_lsn().0 < 20 << 20 {
            log.append_range(&group(t, group_bytes)).unwrap();
            t += 1;
        }
        let r = log.append_range(&group(t, 300)).unwrap();
        log.wait_durable(r.end).unwrap();
        drop(log);
        let fs = fs.crash_with(keel_io::CrashPolicy::lose_all());
        damage(&fs, dir, 3, 4096, "flip");
        [256 << 10, 64 << 20].map(|buffer_size| {
            open(
                &fs,
                dir,
                &LogConfig {
                    buffer_size,
                    ..c.clone()
                },
                false,
            )
            .map(|r| r.end_reason)
        })
    };
    for group_bytes in [3000, 3 << 20] {
        for r in run(keel_redo_log::TestSwitches::default(), group_bytes) {
            assert!(
                matches!(r, Err(LogError::CorruptMiddle { block: 3, .. })),
                "groups of {group_bytes} bytes: {r:?}"
            );
        }
        let broken = keel_redo_log::TestSwitches {
            no_unsynced_cap: true,
            ..Default::default()
        };
        let [small, _] = run(broken, group_bytes);
        assert!(
            small.is_ok(),
            "without the cap the damage passes for a torn tail (groups of {group_bytes} bytes): {small:?}"
        );
    }
}

/// The cap's sync (never more than 8 MiB written past the durable end) syncs at a block
/// boundary: a block holding acknowledged groups is never written again (invariant 4). It
/// first synced wherever the write stood — mid-block, unsealed — and the next write rewrote
/// that block: a power loss tearing it lost a group `wait_durable` had acknowledged, or left a
/// checkpoint in a block that no longer verified (a tester; 10 of 12 runs lost the group).
#[test]
fn the_capped_sync_never_leaves_a_durable_block_to_be_written_again() {
    use keel_io::CrashPolicy;
    let run = |policy: CrashPolicy, files: LogFiles, seed: u64| -> Result<(), String> {
        let fs = SimFs::new(SimConfig::seeded(seed));
        let dir = Path::new("/log");
        let c = LogConfig {
            block_size: LogBlockSize::B4096,
            files,
            buffer_size: 64 << 20,
            durability: keel_redo_log::Durability::Buffered,
            flush_interval: std::time::Duration::from_secs(3600),
            ..LogConfig::default()
        };
        let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
        assert!(log.seals_tail());
        // Buffered groups, written and not synced, to a little under 8 MiB.
        let mut t = 0u64;
        while log.end_lsn().0 < (8 << 20) - 20_000 {
            let r = log.append_range(&group(t, 3000)).unwrap();
            log.wait_committed(r.end).unwrap();
            t += 1;
        }
        // S, written mid-block; then a group that crosses the cap.
        let s = log.append_range(&group(t, 300)).unwrap();
        log.wait_committed(s.end).unwrap();
        let h = log.append_range(&group(t + 1, 1 << 20)).unwrap();
        log.wait_committed(h.end).unwrap();
        log.wait_durable(s.end).unwrap();
        log.checkpoint(s.end).unwrap();
        let post = fs.crash_with(policy);
        drop(log);
        match RedoLog::open_mode(Arc::new(post), dir, c, LogOpenMode::Existing, false) {
            Ok((_, rec)) if rec.end_lsn >= s.end => Ok(()),
            Ok((_, rec)) => Err(format!(
                "the acknowledged group ending at {:?} was lost: the log ends at {:?} ({})",
                s.end, rec.end_lsn, rec.end_reason
            )),
            Err(e) => Err(format!("refused: {e}")),
        }
    };
    let mut fails = Vec::new();
    for files in [
        LogFiles::Growing {
            file_size: 64 << 20,
        },
        LogFiles::Preallocated {
            file_size: 32 << 20,
            files: 2,
        },
    ] {
        for (name, policy) in [
            ("tear all", CrashPolicy::tear_all()),
            ("random", CrashPolicy::random(1, 1, 2)),
        ] {
            for seed in 0..3 {
                if let Err(e) = run(policy, files, seed) {
                    fails.push(format!("{files:?} {name} seed {seed}: {e}"));
                }
            }
        }
    }
    assert!(fails.is_empty(), "{fails:#?}");
}

/// Writes groups of `size` bytes until the log holds at least `bytes`, making them durable every
/// `sync_every` groups.
fn write_bytes(fs: &SimFs, dir: &Path, c: &LogConfig, bytes: u64, size: usize, sync_every: u64) {
    let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
    let mut t = 0;
    while log.end_lsn().0 < bytes {
        let r = log.append_range(&group(t, size)).unwrap();
        if t % sync_every == 0 {
            log.wait_durable(r.end).unwrap();
        }
        t += 1;
    }
    log.wait_durable(log.end_lsn()).unwrap();
}

/// Overwrites bytes `from..to` of `file` with zeros or garbage.
fn damage_range(fs: &SimFs, file: &Path, from: u64, to: u64, garbage: bool) {
    let f = fs.open(file, &OpenOptions::new(FileClass::Other)).unwrap();
    let b: Vec<u8> = (from..to)
        .map(|i| {
            if garbage {
                (i as u8).wrapping_mul(37) ^ 0x5a
            } else {
                0
            }
        })
        .collect();
    f.write_all_at(&b, from).unwrap();
    f.sync_all().unwrap();
}

fn read_all(fs: &SimFs, file: &Path) -> Vec<u8> {
    let f = fs.open(file, &OpenOptions::new(FileClass::Other)).unwrap();
    let mut b = vec![0u8; f.len().unwrap() as usize];
    f.read_exact_at(&mut b, 0).unwrap();
    b
}

fn write_all(fs: &SimFs, file: &Path, bytes: &[u8]) {
    let f = fs.open(file, &OpenOptions::new(FileClass::Other)).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_all().unwrap();
}

/// Damage as long as a log file or longer, in the middle of a log whose later files hold
/// durable data: a whole file zeroed or filled with garbage, two files swapped, the second
/// half of a file zeroed, a zeroed run just past 64 blocks. Each is refused as a corrupt
/// middle. Before, the search for proof stopped after 64 zeroed blocks (a zeroed file) and at
/// the first valid block numbered for another place (a swapped file, taken for an older lap),
/// and the open took the damage for a torn tail: 254 of 1,800 acknowledged commits recovered,
/// and a growing log's later files deleted (a tester). Every block before the damage was
/// durable, so accepting the loss opens and says so.
#[test]
fn damage_as_long_as_a_file_is_refused() {
    let layouts = [
        LogFiles::Preallocated {
            file_size: 256 << 10,
            files: 6,
        },
        LogFiles::Growing {
            file_size: 256 << 10,
        },
    ];
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        for files in layouts {
            for how in [
                "zero file",
                "garbage file",
                "swap",
                "zero half",
                "zero 65 blocks",
            ] {
                if how == "zero 65 blocks" && block == LogBlockSize::B4096 {
                    continue; // 64 blocks to a file: the whole file, as "zero file"
                }
                let fs = SimFs::new(SimConfig::seeded(11));
                let dir = Path::new("/log");
                let c = cfg(block, files);
                // Into the fourth file, short of a lap.
                write_bytes(&fs, dir, &c, (3 << 18) + (64 << 10), 300, 1);
                let names = log_files(&fs);
                let (f1, f2) = (&names[1], &names[2]);
                let size = 256u64 << 10;
                let bs = block.bytes() as u64;
                match how {
                    "zero file" => damage_range(&fs, f1, 0, size, false),
                    "garbage file" => damage_range(&fs, f1, 0, size, true),
                    "swap" => {
                        let (a, b) = (read_all(&fs, f1), read_all(&fs, f2));
                        write_all(&fs, f1, &b);
                        write_all(&fs, f2, &a);
                    }
                    "zero half" => damage_range(&fs, f1, size / 2, size, false),
                    _ => damage_range(&fs, f1, 8 * bs, (8 + 65) * bs, false),
                }
                let what = format!("{block:?} {files:?} {how}");
                match open(&fs, dir, &c, false) {
                    Err(LogError::CorruptMiddle { path, evidence, .. }) => {
                        assert!(path.ends_with("log.0000000001"), "{what}: {path:?}");
                        println!("{what}: refused: {evidence}");
                    }
                    Err(e) => panic!("{what}: expected CorruptMiddle, got {e}"),
                    Ok(r) => panic!(
                        "{what}: opened with {} groups, as a torn tail: {}",
                        r.groups.len(),
                        r.end_reason
                    ),
                }
                let r = open(&fs, dir, &c, true).unwrap();
                assert!(r.log_loss.is_some(), "{what}");
            }
        }
    }
}

/// Damage longer than the look-ahead (16 MiB: how far a torn tail can reach): most of a 32 MiB
/// growing file filled with garbage, the next file holding durable data. The search for proof
/// stopped at the look-ahead and the open took it for a torn tail (a tester: 314 of 699
/// commits); past it the files are probed.
#[test]
fn damage_longer_than_the_look_ahead_is_refused() {
    let fs = SimFs::new(SimConfig::seeded(12));
    let dir = Path::new("/log");
    let file_size = 32u64 << 20;
    let c = cfg(LogBlockSize::B4096, LogFiles::Growing { file_size });
    write_bytes(&fs, dir, &c, file_size + (1 << 20), 3000, 4);
    let names = log_files(&fs);
    damage_range(&fs, &names[0], 4 << 20, file_size, true);
    match open(&fs, dir, &c, false) {
        Err(LogError::CorruptMiddle { path, evidence, .. }) => {
            assert!(path.ends_with("log.0000000000"), "{path:?}");
            assert!(evidence.contains("log.0000000001"), "{evidence}");
        }
        Err(e) => panic!("expected CorruptMiddle, got {e}"),
        Ok(r) => panic!(
            "opened with {} groups, as a torn tail: {}",
            r.groups.len(),
            r.end_reason
        ),
    }
}

/// After an open that accepted a loss, the blocks the older incarnation left past the restart
/// still claim durability of what the new incarnation has since written over: a torn tail of
/// the new incarnation short of them is a torn tail, not damage with proof (the claims count
/// only from the stream's own incarnation on).
#[test]
fn after_an_accepted_loss_a_torn_tail_still_opens() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        for files in layouts() {
            let fs = SimFs::new(SimConfig::seeded(13));
            let dir = Path::new("/log");
            let c = cfg(block, files);
            let used = write(&fs, dir, &c, 400);
            let bad = used / 4;
            damage(&fs, dir, bad, block.bytes(), "zero");
            let what = format!("{block:?} {files:?}");
            assert!(open(&fs, dir, &c, false).is_err(), "{what}");
            assert!(
                open(&fs, dir, &c, true).unwrap().log_loss.is_some(),
                "{what}"
            );
            // The new incarnation writes a little past the restart, durably; then its last
            // block is torn.
            let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
            for t in 0..5 {
                let r = log.append_range(&group(1000 + t, 300)).unwrap();
                log.wait_durable(r.end).unwrap();
            }
            let p = keel_redo_log::inspect::payload_size(block.bytes()) as u64;
            let last = (log.end_lsn().0 - 1) / p;
            drop(log);
            assert!(last < used, "{what}");
            damage(&fs, dir, last, block.bytes(), "zero");
            let r = open(&fs, dir, &c, false)
                .unwrap_or_else(|e| panic!("{what}: a torn tail after an accepted loss: {e}"));
            assert!(r.log_loss.is_none(), "{what}");
        }
    }
}

/// A growing log's newest file zeroed, filled with garbage or cut to nothing: nothing after it
/// holds a claim, but the header records how far the log had been durable (the first sync into
/// each new file), and the scan ends short of it: refused. Before, the open took it for a torn
/// tail and lost the file's acknowledged commits (the known limit of sessions 43 and 44). The
/// newest file's last block torn still opens (`damage_to_the_last_block_opens_as_a_torn_tail`).
#[test]
fn a_growing_logs_newest_file_lost_is_refused() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        for how in ["zero", "garbage", "empty"] {
            let fs = SimFs::new(SimConfig::seeded(14));
            let dir = Path::new("/log");
            let c = cfg(
                block,
                LogFiles::Growing {
                    file_size: 256 << 10,
                },
            );
            write_bytes(&fs, dir, &c, (3 << 18) + (64 << 10), 300, 1);
            let names = log_files(&fs);
            let newest = names.last().unwrap();
            assert!(newest.ends_with("log.0000000003"), "{newest:?}");
            let len = read_all(&fs, newest).len() as u64;
            match how {
                "zero" => damage_range(&fs, newest, 0, len, false),
                "garbage" => damage_range(&fs, newest, 0, len, true),
                _ => {
                    let f = fs
                        .open(newest, &OpenOptions::new(FileClass::Other))
                        .unwrap();
                    f.set_len(0).unwrap();
                    f.sync_all().unwrap();
                }
            }
            let what = format!("{block:?} {how}");
            match open(&fs, dir, &c, false) {
                Err(LogError::CorruptMiddle { path, evidence, .. }) => {
                    assert!(path.ends_with("log.0000000003"), "{what}: {path:?}");
                    assert!(evidence.contains("header records"), "{what}: {evidence}");
                }
                Err(e) => panic!("{what}: expected CorruptMiddle, got {e}"),
                Ok(r) => panic!(
                    "{what}: opened with {} groups, as a torn tail: {}",
                    r.groups.len(),
                    r.end_reason
                ),
            }
            let r = open(&fs, dir, &c, true).unwrap();
            assert!(r.log_loss.is_some(), "{what}");
            // Once the loss is accepted, the log opens as it now is.
            open(&fs, dir, &c, false).unwrap_or_else(|e| panic!("{what}: after accepting: {e}"));
        }
    }
}

/// A zeroed run of more than 64 blocks followed by a short durable tail (fewer blocks than the
/// probes' stride): the blocks within the look-ahead are read one by one, zeroed or not, so the
/// tail's claims are found. The search switched to probes after 64 zeroed blocks, jumped over
/// the tail, and the open lost 105 of 185 acknowledged groups (a tester).
#[test]
fn a_zeroed_run_before_a_short_durable_tail_is_refused() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        let fs = SimFs::new(SimConfig::seeded(15).sector_size(512));
        let dir = Path::new("/log");
        let c = LogConfig {
            write_ahead_size: block.bytes(),
            tail_policy: keel_redo_log::TailPolicy::SealOnSync,
            ..cfg(
                block,
                LogFiles::Preallocated {
                    file_size: 1 << 20,
                    files: 2,
                },
            )
        };
        // One sealed block per group.
        let used = write(&fs, dir, &c, 185);
        assert!(used >= 185, "{used}");
        let bs = block.bytes() as u64;
        damage_range(&fs, &dir.join("log.0000000000"), 80 * bs, 150 * bs, false);
        match open(&fs, dir, &c, false) {
            Err(LogError::CorruptMiddle { block: b, .. }) => assert_eq!(b, 80, "{block:?}"),
            Err(e) => panic!("{block:?}: expected CorruptMiddle, got {e}"),
            Ok(r) => panic!(
                "{block:?}: opened with {} groups, as a torn tail: {}",
                r.groups.len(),
                r.end_reason
            ),
        }
    }
}

/// What an open of a large preallocated log that has not wrapped yet reads: the look-ahead
/// (16 MiB, every block: the block after the tail is never written) and about 512 probes of 4
/// KiB past it — not the whole log, as the probes did through the reader's 64-block windows
/// (a tester: 128 MiB per open of 2 x 64 MiB). Counted in bytes, not timed.
#[test]
fn an_open_of_a_young_large_log_reads_a_bounded_amount() {
    for block in [LogBlockSize::B512, LogBlockSize::B4096] {
        let sim = SimFs::new(SimConfig::seeded(16).sector_size(512));
        let dir = Path::new("/db/log");
        let c = LogConfig {
            block_size: block,
            write_ahead_size: block.bytes(),
            files: LogFiles::Preallocated {
                file_size: 64 << 20,
                files: 2,
            },
            buffer_size: 8 << 20,
            ..LogConfig::default()
        };
        write(&sim, dir, &c, 200);
        let before = sim.counters().snapshot();
        let r = open(&sim, dir, &c, false).unwrap();
        assert_eq!(r.groups.len(), 200);
        let read = sim
            .counters()
            .snapshot()
            .since(&before)
            .class(FileClass::Log)
            .read_bytes;
        println!("{block:?}: an open read {read} bytes of a 128 MiB log");
        assert!(read < 24 << 20, "{block:?}: {read} bytes read");
    }
}
