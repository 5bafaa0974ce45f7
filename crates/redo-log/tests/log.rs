//! Functional tests of the redo log on real files (OsFs in a temp dir) and on SimFs where a
//! fault or a device property has to be injected.

mod common;

use common::{group, Rng};
use keel_io::{FileSystem, OsFs, SimConfig, SimFs, SyncMethod};
use keel_page::{Lsn, PageId};
use keel_redo_log::inspect::{self, Geometry};
use keel_redo_log::{
    Durability, LogBlockSize, LogConfig, LogError, LogFiles, Record, RedoLog, TailPolicy,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn os() -> Arc<dyn FileSystem> {
    Arc::new(OsFs::default())
}

fn cfg(block: LogBlockSize, files: LogFiles, sync: SyncMethod) -> LogConfig {
    LogConfig {
        block_size: block,
        files,
        sync_method: sync,
        buffer_size: 256 << 10,
        ..LogConfig::default()
    }
}

fn prealloc(size: u64, files: u32) -> LogFiles {
    LogFiles::Preallocated {
        file_size: size,
        files,
    }
}

fn payload(b: LogBlockSize) -> u64 {
    inspect::payload_size(b.bytes()) as u64
}

/// Appends `n` groups (some larger than a block), waiting for each; returns (range, records).
fn fill(log: &RedoLog, first_tag: u64, n: u64) -> Vec<(std::ops::Range<Lsn>, Vec<Record>)> {
    let mut out = Vec::new();
    for t in first_tag..first_tag + n {
        let size = [10usize, 300, 700, 5000, 40][(t % 5) as usize];
        let recs = group(t, size);
        let r = log.append_range(&recs).unwrap();
        log.wait_durable(r.end).unwrap();
        out.push((r, recs));
    }
    out
}

fn same(
    recovered: &[keel_redo_log::RecoveredGroup],
    expect: &[(std::ops::Range<Lsn>, Vec<Record>)],
) {
    assert_eq!(recovered.len(), expect.len(), "number of groups");
    for (g, (r, recs)) in recovered.iter().zip(expect) {
        assert_eq!((g.start_lsn, g.end_lsn), (r.start, r.end));
        assert_eq!(&g.records, recs);
    }
}

#[test]
fn append_close_reopen_recovers_every_group() {
    for block in LogBlockSize::ALL {
        for files in [
            prealloc(256 << 10, 2),
            LogFiles::Growing {
                file_size: 64 << 10,
            },
        ] {
            for sync in SyncMethod::ALL {
                let dir = tempfile::tempdir().unwrap();
                let c = cfg(block, files, sync);
                let (log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
                assert!(rec.groups.is_empty());
                assert_eq!(rec.incarnation, 1);
                let written = fill(&log, 1, 40);
                log.close().unwrap();
                assert!(matches!(log.append(&[]), Err(LogError::Closed { .. })));
                drop(log);
                let (log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
                same(&rec.groups, &written);
                assert_eq!(rec.discarded_bytes, 0, "{:?}", rec.discard_reason);
                assert_eq!(rec.incarnation, 2);
                assert!(rec.end_lsn >= written.last().unwrap().0.end);
                // The log continues after recovery, and a second reopen sees both parts.
                let more = fill(&log, 100, 10);
                assert!(more[0].0.start >= rec.end_lsn);
                drop(log);
                let (_log, rec2) = RedoLog::open(os(), dir.path(), c).unwrap();
                let all: Vec<_> = written.into_iter().chain(more).collect();
                same(&rec2.groups, &all);
            }
        }
    }
}

/// Every byte of every file under `dir`, by path.
fn files_of(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// An existing log opened unstarted writes nothing on any file — preallocated, and growing
/// with a file past the recovered end that the start removes — and takes no append or
/// checkpoint until `start`; then it continues where the scan ended, and a reopen recovers
/// both opens' groups. A log dropped unstarted leaves every file as it was.
#[test]
fn an_unstarted_log_writes_nothing_until_it_starts() {
    for files in [
        prealloc(64 << 10, 3),
        LogFiles::Growing {
            file_size: 16 << 10,
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(LogBlockSize::B4096, files, SyncMethod::Fdatasync);
        let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        let first = fill(&log, 0, 12);
        log.close().unwrap();
        drop(log);
        if matches!(files, LogFiles::Growing { .. }) {
            // A stray file past the end, as a crash can leave: the next one, created (its
            // name durable) but none of its blocks.
            let next = std::fs::read_dir(dir.path())
                .unwrap()
                .filter_map(|e| {
                    keel_redo_log::inspect::parse_file_name(e.unwrap().file_name().to_str()?)
                })
                .max()
                .map_or(0, |n| n + 1);
            std::fs::write(dir.path().join(format!("log.{next:010}")), vec![0u8; 4096]).unwrap();
        }
        let before = files_of(dir.path());
        let unstarted = || {
            RedoLog::open_unstarted(
                os(),
                dir.path(),
                c.clone(),
                keel_redo_log::LogOpenMode::Existing,
                false,
            )
            .unwrap()
        };
        for _ in 0..2 {
            let (log, rec) = unstarted();
            same(&rec.groups, &first);
            assert!(matches!(
                log.append(&group(99, 10)),
                Err(LogError::Closed { .. })
            ));
            assert!(log.checkpoint(first[3].0.end).is_err());
            drop(log);
            assert!(files_of(dir.path()) == before, "an unstarted log wrote");
        }
        let (log, rec) = unstarted();
        log.start().unwrap();
        log.start().unwrap();
        assert!(files_of(dir.path()) != before, "the start wrote");
        assert_eq!(rec.end_lsn, log.end_lsn());
        let second = fill(&log, 100, 5);
        log.close().unwrap();
        drop(log);
        let (_log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        let all: Vec<_> = first.iter().chain(&second).cloned().collect();
        same(&rec.groups, &all);
    }
}

#[test]
fn reopening_many_times_keeps_every_group_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(
        LogBlockSize::B512,
        prealloc(128 << 10, 2),
        SyncMethod::Fdatasync,
    );
    let mut all = Vec::new();
    for round in 0..8u64 {
        let (log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        assert_eq!(rec.incarnation, round as u32 + 1);
        same(&rec.groups, &all);
        all.extend(fill(&log, round * 10, 3 + round % 3));
    }
}

#[test]
fn opening_with_another_layout_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(
        LogBlockSize::B512,
        prealloc(64 << 10, 2),
        SyncMethod::Fdatasync,
    );
    drop(RedoLog::open(os(), dir.path(), c.clone()).unwrap());
    let other = LogConfig {
        block_size: LogBlockSize::B4096,
        ..c.clone()
    };
    let e = RedoLog::open(os(), dir.path(), other).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, LogError::ConfigMismatch { .. }), "{msg}");
    assert!(
        msg.contains("log block size") && msg.contains("512") && msg.contains("4096"),
        "{msg}"
    );
    assert!(msg.contains("log.header"), "{msg}");
    let other = LogConfig {
        files: LogFiles::Growing {
            file_size: 64 << 10,
        },
        ..c.clone()
    };
    assert!(matches!(
        RedoLog::open(os(), dir.path(), other),
        Err(LogError::ConfigMismatch {
            field: "log files",
            ..
        })
    ));
    let other = LogConfig {
        files: prealloc(128 << 10, 2),
        ..c
    };
    assert!(matches!(
        RedoLog::open(os(), dir.path(), other),
        Err(LogError::ConfigMismatch { .. })
    ));
}

#[test]
fn invalid_configurations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = cfg(
        LogBlockSize::B4096,
        prealloc(64 << 10, 2),
        SyncMethod::Fdatasync,
    );
    for bad in [
        LogConfig {
            write_ahead_size: 512,
            ..base.clone()
        },
        LogConfig {
            write_ahead_size: 6000,
            ..base.clone()
        },
        LogConfig {
            buffer_size: 1000,
            ..base.clone()
        },
        LogConfig {
            files: prealloc(10_000, 2),
            ..base.clone()
        },
        LogConfig {
            files: prealloc(8192, 1),
            ..base.clone()
        },
        LogConfig {
            flush_interval: Duration::ZERO,
            ..base.clone()
        },
    ] {
        assert!(matches!(
            RedoLog::open(os(), dir.path(), bad),
            Err(LogError::InvalidConfig { .. })
        ));
    }
}

#[test]
fn odirect_refuses_blocks_below_the_device_block() {
    // A device with 4 KiB logical blocks (SimFs models the alignment direct I/O needs).
    let fs = SimFs::new(
        SimConfig::seeded(1)
            .direct_alignment(4096)
            .sector_size(4096),
    );
    let fs: Arc<dyn FileSystem> = Arc::new(fs);
    let c = cfg(
        LogBlockSize::B512,
        prealloc(64 << 10, 2),
        SyncMethod::ODirect,
    );
    let e = RedoLog::open(fs.clone(), Path::new("/log"), c.clone()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, LogError::BlockBelowDeviceBlock { .. }), "{msg}");
    assert!(
        msg.contains("4096") && msg.contains("512") && msg.contains("/log"),
        "{msg}"
    );
    // 4 KiB blocks are fine, and every direct write is aligned (SimFs refuses misaligned ones).
    let c = LogConfig {
        block_size: LogBlockSize::B4096,
        ..c
    };
    let (log, _) = RedoLog::open(fs.clone(), Path::new("/log"), c.clone()).unwrap();
    let written = fill(&log, 1, 20);
    drop(log);
    let (_log, rec) = RedoLog::open(fs, Path::new("/log"), c).unwrap();
    same(&rec.groups, &written);
}

#[test]
fn padding_is_counted_apart_from_payload() {
    for (block, was, pad_expected) in [
        (LogBlockSize::B512, 4096usize, 4096 - 512),
        (LogBlockSize::B512, 512, 0),
        (LogBlockSize::B4096, 4096, 0),
        (LogBlockSize::B4096, 16384, 16384 - 4096),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let c = LogConfig {
            write_ahead_size: was,
            tail_policy: TailPolicy::RewriteInPlace,
            ..cfg(block, prealloc(256 << 10, 2), SyncMethod::Fdatasync)
        };
        let (log, _) = RedoLog::open(os(), dir.path(), c).unwrap();
        let s0 = log.stats();
        // Opening wrote the empty restart block 0, padded.
        assert_eq!(s0.bytes_written, block.bytes() as u64 + pad_expected as u64);
        assert_eq!(s0.padding_bytes, pad_expected as u64);
        let recs = vec![Record::PageFree { page_id: PageId(1) }];
        let l1 = log.append(&recs).unwrap();
        log.wait_durable(l1).unwrap();
        let s1 = log.stats();
        assert_eq!(s1.bytes_appended, 27);
        assert_eq!(s1.payload_bytes_written - s0.payload_bytes_written, 27);
        assert_eq!(s1.padding_bytes - s0.padding_bytes, pad_expected as u64);
        assert_eq!(
            s1.bytes_written - s0.bytes_written,
            block.bytes() as u64 + pad_expected as u64
        );
        // The first write rewrote the (empty) restart block.
        assert_eq!(s1.tail_rewrites - s0.tail_rewrites, 1);
        assert_eq!(s1.tail_rewrite_bytes - s0.tail_rewrite_bytes, 0);
        let l2 = log.append(&recs).unwrap();
        log.wait_durable(l2).unwrap();
        let s2 = log.stats();
        // The tail block is rewritten as it fills: its 27 old bytes are written again.
        assert_eq!(s2.tail_rewrites - s1.tail_rewrites, 1);
        assert_eq!(s2.tail_rewrite_bytes - s1.tail_rewrite_bytes, 27);
        assert_eq!(s2.writes - s1.writes, 1);
        assert_eq!(s2.syncs - s1.syncs, 1);
        assert_eq!(s2.commits_per_sync.max, 1);
        let io = os().counters();
        let _ = io; // OsFs counters are per instance; the log's own counters are checked above.
    }
}

#[test]
fn seal_on_sync_never_rewrites_a_synced_block() {
    let dir = tempfile::tempdir().unwrap();
    let c = LogConfig {
        tail_policy: TailPolicy::SealOnSync,
        ..cfg(
            LogBlockSize::B4096,
            prealloc(1 << 20, 2),
            SyncMethod::Fdatasync,
        )
    };
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    assert!(log.seals_tail());
    let p = payload(LogBlockSize::B4096);
    let s0 = log.stats();
    let written = fill(&log, 1, 30);
    assert_eq!(log.durable_lsn().0 % p, 0, "durable end is block aligned");
    let s = log.stats();
    assert!(s.filler_bytes > 0);
    // Only the empty restart block is written again (once).
    assert_eq!(s.tail_rewrites - s0.tail_rewrites, 1);
    assert_eq!(s.tail_rewrite_bytes - s0.tail_rewrite_bytes, 0);
    drop(log);
    let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
    same(&rec.groups, &written);
}

#[test]
fn failed_sync_poisons_every_waiter_and_append() {
    let sim = SimFs::with_seed(3);
    let fs: Arc<dyn FileSystem> = Arc::new(sim.clone());
    let c = cfg(
        LogBlockSize::B512,
        prealloc(64 << 10, 2),
        SyncMethod::Fdatasync,
    );
    let (log, _) = RedoLog::open(fs.clone(), Path::new("/log"), c).unwrap();
    let ok = log.append(&group(1, 10)).unwrap();
    log.wait_durable(ok).unwrap();
    sim.inject(keel_io::Fault::SyncFailsNth(1));
    let lsn = log.append(&group(2, 10)).unwrap();
    // A second thread waits on the same LSN.
    let l2 = log.clone();
    let other = std::thread::spawn(move || l2.wait_durable(lsn));
    let e = log.wait_durable(lsn).unwrap_err();
    let msg = e.to_string();
    assert!(e.is_poisoned(), "{msg}");
    assert!(
        msg.contains("/log/log.0000000000") && msg.contains("sync"),
        "{msg}"
    );
    assert!(other.join().unwrap().unwrap_err().is_poisoned());
    assert!(log.is_poisoned());
    let syncs = fs.counters();
    let before = format!("{:?}", syncs);
    // Every later call fails, and nothing retries the sync.
    assert!(log.append(&group(3, 10)).unwrap_err().is_poisoned());
    assert!(log.wait_durable(lsn).unwrap_err().is_poisoned());
    assert!(log.flush_to(lsn).unwrap_err().is_poisoned());
    assert!(log.checkpoint(ok).unwrap_err().is_poisoned());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert!(rt.block_on(log.durable(lsn)).unwrap_err().is_poisoned());
    assert!(
        log.close().unwrap_err().is_poisoned(),
        "close reports the poison"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        before,
        format!("{:?}", fs.counters()),
        "no I/O after poisoning"
    );
    assert!(sim.fault_stats().sync_failed == 1);
}

#[test]
fn full_log_waits_for_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(
        LogBlockSize::B512,
        prealloc(16 << 10, 2),
        SyncMethod::Fdatasync,
    );
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    let cap = log.capacity().unwrap();
    assert_eq!(cap, (64 - 9) * payload(LogBlockSize::B512));
    let mut written = Vec::new();
    let mut t = 0;
    // Fill until the next group would not fit.
    loop {
        let recs = group(t, 200);
        let len = inspect::group_len(&recs);
        if log.space_used() + len > cap - payload(LogBlockSize::B512) {
            break;
        }
        let r = log.append_range(&recs).unwrap();
        log.wait_durable(r.end).unwrap();
        written.push((r, recs));
        t += 1;
    }
    // This one has to wait for a checkpoint.
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = log.clone();
    let big = group(1000, 2000);
    let big2 = big.clone();
    let h = std::thread::spawn(move || {
        let r = l2.append_range(&big2);
        tx.send(()).unwrap();
        r
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the append must wait while the log is full"
    );
    assert!(log.stats().space_waits >= 1);
    // A checkpoint in the middle of a group keeps that group.
    let keep_from = written.len() - 3;
    let mid = Lsn(written[keep_from].0.start.0 + 5);
    log.checkpoint(mid).unwrap();
    assert_eq!(log.checkpoint_lsn(), mid);
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the append goes through after the checkpoint");
    let r = h.join().unwrap().unwrap();
    log.wait_durable(r.end).unwrap();
    drop(log);
    let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
    assert_eq!(rec.checkpoint_lsn, mid);
    assert_eq!(rec.scan_start_lsn, written[keep_from].0.start);
    let mut expect: Vec<_> = written[keep_from..].to_vec();
    expect.push((r, big));
    same(&rec.groups, &expect);
}

#[test]
fn checkpoint_at_a_group_end_drops_that_group_and_survives_reopen() {
    for files in [
        prealloc(64 << 10, 2),
        LogFiles::Growing { file_size: 8 << 10 },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(LogBlockSize::B512, files, SyncMethod::Fdatasync);
        let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        let w = fill(&log, 1, 30);
        assert!(matches!(
            log.checkpoint(Lsn(log.end_lsn().0 + 1)),
            Err(LogError::CheckpointBeyondEnd { .. })
        ));
        log.checkpoint(w[19].0.end).unwrap();
        log.checkpoint(w[5].0.end).unwrap(); // lower: ignored
        assert_eq!(log.checkpoint_lsn(), w[19].0.end);
        assert_eq!(log.stats().checkpoints, 1);
        let more = fill(&log, 100, 5);
        drop(log);
        let (log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        let expect: Vec<_> = w[20..].iter().cloned().chain(more.clone()).collect();
        same(&rec.groups, &expect);
        // A checkpoint at the very end: nothing to recover, even across a reopen.
        log.checkpoint(log.end_lsn()).unwrap();
        drop(log);
        let (log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        assert!(rec.groups.is_empty());
        if let LogFiles::Growing { .. } = files {
            // Files wholly before the checkpoint are gone.
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.starts_with("log.0"))
                .collect();
            assert!(names.len() <= 2, "{names:?}");
            assert!(!names.contains(&"log.0000000000".to_string()), "{names:?}");
        }
        drop(log);
    }
}

#[test]
fn growing_log_starts_new_files() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(
        LogBlockSize::B4096,
        LogFiles::Growing {
            file_size: 16 << 10,
        },
        SyncMethod::Fdatasync,
    );
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    let w = fill(&log, 1, 30);
    let n = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("log.0")
        })
        .count();
    assert!(n >= 3, "{n} files");
    assert_eq!(log.capacity(), None);
    drop(log);
    let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
    same(&rec.groups, &w);
}

#[test]
fn torn_tail_group_is_discarded_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let block = LogBlockSize::B512;
    let c = cfg(block, prealloc(256 << 10, 1), SyncMethod::Fdatasync);
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    let w = fill(&log, 1, 10);
    let big = group(77, 3000);
    let r = log.append_range(&big).unwrap();
    log.wait_durable(r.end).unwrap();
    drop(log);
    // Tear the last block of the big group (first lap: block n is at n * 512).
    let p = payload(block);
    let b = (r.end.0 - 1) / p;
    let path = dir.path().join("log.0000000000");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(b * 512 + 100) as usize] ^= 0x5A;
    std::fs::write(&path, &bytes).unwrap();
    let (log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    // Only the big group is lost.
    same(&rec.groups, &w);
    assert!(rec.discarded_bytes > 0);
    let why = rec.discard_reason.clone().unwrap();
    assert!(why.contains("checksum mismatch"), "{why}");
    assert!(why.contains(&format!("LSN {}", r.start.0)), "{why}");
    // The log continues, and a later reopen sees old and new groups (the torn group stays
    // abandoned).
    let more = fill(&log, 200, 4);
    drop(log);
    let (_l, rec2) = RedoLog::open(os(), dir.path(), c).unwrap();
    assert_eq!(rec2.groups.len(), 14);
    assert_eq!(&rec2.groups[..10], &rec.groups[..]);
    same(&rec2.groups[10..], &more);
    assert!(
        rec2.discarded_bytes > 0,
        "the abandoned group is skipped again"
    );
}

#[test]
fn concurrent_appenders_share_syncs() {
    for waiter_flush in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let c = LogConfig {
            waiter_flush,
            ..cfg(
                LogBlockSize::B4096,
                prealloc(4 << 20, 2),
                SyncMethod::Fdatasync,
            )
        };
        let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        let mut hs = Vec::new();
        for th in 0..8u64 {
            let log = log.clone();
            hs.push(std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..60u64 {
                    let recs = group(th * 1000 + i, 50 + (i as usize % 7) * 60);
                    let r = log.append_range(&recs).unwrap();
                    log.wait_durable(r.end).unwrap();
                    assert!(log.durable_lsn() >= r.end);
                    mine.push((r, recs));
                }
                mine
            }));
        }
        let mut all: Vec<_> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_by_key(|(r, _)| r.start);
        let s = log.stats();
        assert_eq!(s.groups_appended, 480);
        assert_eq!(
            s.commits_per_sync
                .buckets
                .iter()
                .map(|(v, c)| v * c)
                .sum::<u64>(),
            480
        );
        eprintln!(
            "waiter_flush={waiter_flush}: {} syncs for 480 commits, commits/sync p50 {} max {}",
            s.syncs, s.commits_per_sync.p50, s.commits_per_sync.max
        );
        drop(log);
        let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
        same(&rec.groups, &all);
    }
}

#[test]
fn appender_waits_for_ring_space() {
    let dir = tempfile::tempdir().unwrap();
    let c = LogConfig {
        buffer_size: 64 << 10,
        ..cfg(
            LogBlockSize::B4096,
            prealloc(4 << 20, 1),
            SyncMethod::Fdatasync,
        )
    };
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    let mut hs = Vec::new();
    for th in 0..3u64 {
        let log = log.clone();
        hs.push(std::thread::spawn(move || {
            let mut mine = Vec::new();
            for i in 0..6u64 {
                // Groups up to 5x the buffer.
                let recs = group(th * 100 + i, [100usize, 150_000, 320_000][(i % 3) as usize]);
                let r = log.append_range(&recs).unwrap();
                if i % 2 == 0 {
                    log.wait_durable(r.end).unwrap();
                }
                mine.push((r, recs));
            }
            mine
        }));
    }
    let mut all: Vec<_> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
    all.sort_by_key(|(r, _)| r.start);
    assert!(log.stats().buffer_waits > 0);
    log.close().unwrap();
    drop(log);
    let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
    same(&rec.groups, &all);
}

/// The ring invariant broken on purpose: appenders that do not wait for room overwrite bytes
/// the flusher has not written yet, and what is recovered is no longer what was appended.
#[test]
fn ring_overwrite_corrupts_the_log() {
    let run = |switches: keel_redo_log::TestSwitches| {
        let dir = tempfile::tempdir().unwrap();
        let c = LogConfig {
            buffer_size: 64 << 10,
            waiter_flush: false,
            durability: Durability::Lazy,
            flush_interval: Duration::from_millis(200),
            ..cfg(
                LogBlockSize::B4096,
                prealloc(4 << 20, 1),
                SyncMethod::Fdatasync,
            )
        };
        let (log, _) = RedoLog::open_with(os(), dir.path(), c.clone(), switches).unwrap();
        // Appended faster than the (lazy) flusher writes: 300 KiB through a 64 KiB buffer.
        let all: Vec<_> = (0..30u64)
            .map(|t| {
                let recs = group(t, 10_000);
                (log.append_range(&recs).unwrap(), recs)
            })
            .collect();
        log.close().unwrap();
        drop(log);
        let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
        let intact = rec.groups.len() == all.len()
            && rec
                .groups
                .iter()
                .zip(&all)
                .all(|(g, (r, recs))| g.start_lsn == r.start && &g.records == recs);
        intact
    };
    assert!(run(keel_redo_log::TestSwitches::default()));
    assert!(!run(keel_redo_log::TestSwitches {
        no_ring_wait: true,
        ..Default::default()
    }));
}

#[test]
fn group_larger_than_the_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(
        LogBlockSize::B512,
        prealloc(16 << 10, 2),
        SyncMethod::Fdatasync,
    );
    let (log, _) = RedoLog::open(os(), dir.path(), c).unwrap();
    let e = log.append(&group(1, 40_000)).unwrap_err();
    assert!(matches!(e, LogError::GroupTooLarge { .. }), "{e}");
}

#[test]
fn durable_future_resolves_without_blocking_tokio() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(
        LogBlockSize::B4096,
        prealloc(1 << 20, 2),
        SyncMethod::Fdatasync,
    );
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    // One runtime thread: if a future blocked it, the ticker could not run meanwhile.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let all = rt.block_on(async {
        let t2 = ticks.clone();
        let d2 = done.clone();
        let ticker = tokio::spawn(async move {
            while !d2.load(std::sync::atomic::Ordering::SeqCst) {
                t2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        });
        let mut tasks = Vec::new();
        for i in 0..32u64 {
            let log = log.clone();
            let ticks = ticks.clone();
            tasks.push(tokio::spawn(async move {
                let recs = group(i, 100);
                let r = log.append_range(&recs).unwrap();
                let before = ticks.load(std::sync::atomic::Ordering::SeqCst);
                log.durable(r.end).await.unwrap();
                assert!(log.durable_lsn() >= r.end);
                let after = ticks.load(std::sync::atomic::Ordering::SeqCst);
                (r, recs, after > before)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        ticker.await.unwrap();
        out
    });
    assert!(
        all.iter().any(|(_, _, ticked)| *ticked),
        "other tasks ran while commits waited for durability"
    );
    // A multi-threaded runtime too.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut all: Vec<_> = all.into_iter().map(|(r, recs, _)| (r, recs)).collect();
    let more = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 100..164u64 {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let recs = group(i, 60);
                let r = log.append_range(&recs).unwrap();
                log.durable(r.end).await.unwrap();
                (r, recs)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    all.extend(more);
    all.sort_by_key(|(r, _)| r.start);
    drop(log);
    let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
    same(&rec.groups, &all);
}

#[test]
fn buffered_and_lazy_durability() {
    for durability in [Durability::Buffered, Durability::Lazy] {
        let dir = tempfile::tempdir().unwrap();
        let c = LogConfig {
            durability,
            flush_interval: Duration::from_millis(30),
            ..cfg(
                LogBlockSize::B512,
                prealloc(1 << 20, 2),
                SyncMethod::Fdatasync,
            )
        };
        let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
        let start = log.durable_lsn();
        let r = log.append_range(&group(1, 100)).unwrap();
        log.wait_committed(r.end).unwrap();
        if durability == Durability::Buffered {
            assert!(log.written_lsn() >= r.end, "written to the OS at commit");
        }
        // Synced by the flusher within a few intervals, without anyone waiting.
        let t0 = std::time::Instant::now();
        while log.durable_lsn() < r.end && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(log.durable_lsn() >= r.end && log.durable_lsn() > start);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let r2 = log.append_range(&group(2, 100)).unwrap();
        rt.block_on(log.committed(r2.end)).unwrap();
        log.flush_to(r2.end).unwrap();
        assert!(log.durable_lsn() >= r2.end);
    }
}

#[test]
fn group_commit_delay_still_commits() {
    let dir = tempfile::tempdir().unwrap();
    let c = LogConfig {
        group_commit_delay: Duration::from_micros(200),
        ..cfg(
            LogBlockSize::B4096,
            prealloc(1 << 20, 2),
            SyncMethod::Fdatasync,
        )
    };
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    let w = fill(&log, 1, 5);
    drop(log);
    let (_l, rec) = RedoLog::open(os(), dir.path(), c).unwrap();
    same(&rec.groups, &w);
}

#[test]
fn stats_serialize_to_json() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(
        LogBlockSize::B4096,
        prealloc(1 << 20, 2),
        SyncMethod::Fdatasync,
    );
    let (log, _) = RedoLog::open(os(), dir.path(), c).unwrap();
    fill(&log, 1, 3);
    let s = log.stats();
    let j = serde_json::to_string(&s).unwrap();
    assert!(
        j.contains("\"bytes_appended\"") && j.contains("\"commits_per_sync\""),
        "{j}"
    );
    let back: keel_redo_log::LogStats = serde_json::from_str(&j).unwrap();
    assert_eq!(back, s);
    // Stats written before a counter existed still read (the counter as 0).
    let mut v: serde_json::Value = serde_json::from_str(&j).unwrap();
    v.as_object_mut().unwrap().remove("unlink_failures");
    let older: keel_redo_log::LogStats = serde_json::from_value(v).unwrap();
    assert_eq!(older.unlink_failures, 0);
}

/// Scans real log images after random damage, plus pure noise: never a panic, and any group
/// returned is one that was appended.
#[test]
fn random_bytes_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let block = LogBlockSize::B512;
    let c = cfg(block, prealloc(32 << 10, 2), SyncMethod::Fdatasync);
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    let w = fill(&log, 1, 25);
    drop(log);
    let files: Vec<Vec<u8>> = (0..2)
        .map(|i| std::fs::read(dir.path().join(format!("log.{i:010}"))).unwrap())
        .collect();
    let header = std::fs::read(dir.path().join("log.header")).unwrap();
    let (st, slot) = inspect::decode_header(Path::new("h"), &header).unwrap();
    let geo = Geometry {
        block: 512,
        payload: inspect::payload_size(512),
        preallocated: true,
        blocks_per_file: (32 << 10) / 512,
        files: 2,
        salt: st.salt,
    };
    let refs: Vec<&[u8]> = files.iter().map(|f| &f[..]).collect();
    let clean = inspect::scan_images(geo, &refs, slot.scan_start, 0, slot.incarnation).unwrap();
    same(&clean.groups, &w);
    let mut rng = Rng(42);
    for _ in 0..300 {
        let mut dam = files.clone();
        for _ in 0..1 + rng.below(4) {
            let f = rng.below(2) as usize;
            let at = rng.below(dam[f].len() as u64) as usize;
            match rng.below(3) {
                0 => dam[f][at] ^= 1 << rng.below(8),
                1 => {
                    let n = (rng.below(600) as usize).min(dam[f].len() - at);
                    for x in &mut dam[f][at..at + n] {
                        *x = 0;
                    }
                }
                _ => {
                    let n = (rng.below(600) as usize).min(dam[f].len() - at);
                    let noise = rng.bytes(n);
                    dam[f][at..at + n].copy_from_slice(&noise);
                }
            }
        }
        let refs: Vec<&[u8]> = dam.iter().map(|f| &f[..]).collect();
        if let Ok(s) = inspect::scan_images(geo, &refs, slot.scan_start, 0, slot.incarnation) {
            // Whatever survives is a prefix of what was appended.
            assert!(s.groups.len() <= w.len());
            same(&s.groups, &w[..s.groups.len()]);
        }
        let noise = rng.bytes(512);
        let _ = inspect::check_block(&noise, st.salt, rng.next(), rng.next() as u32, true);
        let _ = inspect::check_block(&noise, st.salt, rng.next(), rng.next() as u32, false);
        let _ = inspect::decode_group(&noise[..rng.below(512) as usize]);
        let noise_files = [rng.bytes(4096), rng.bytes(1000)];
        let refs: Vec<&[u8]> = noise_files.iter().map(|f| &f[..]).collect();
        let _ = inspect::scan_images(geo, &refs, rng.below(20_000), rng.next(), rng.next() as u32);
    }
}

/// Like the `log_scan` fuzz target's re-seal mode: blocks with valid numbers, epochs and
/// checksums but random structure-aware payloads (group tags, fillers, lengths, restart flags,
/// incarnations). Never a panic; groups come out in order without overlaps.
#[test]
fn resealed_random_blocks_never_panic() {
    let mut rng = Rng(7);
    for _ in 0..3000 {
        let b = if rng.below(2) == 0 { 512usize } else { 4096 };
        let p = inspect::payload_size(b);
        let bpf = 1 + rng.below(8);
        let files = 1 + rng.below(2) as u32;
        let geo = Geometry {
            block: b,
            payload: p,
            preallocated: true,
            blocks_per_file: bpf,
            files,
            salt: rng.next() as u32,
        };
        let lap = bpf * files as u64;
        let mut images = vec![vec![0u8; bpf as usize * b]; files as usize];
        for (fi, img) in images.iter_mut().enumerate() {
            for (bi, blk) in img.chunks_exact_mut(b).enumerate() {
                let n = fi as u64 * bpf + bi as u64;
                blk[0..8].copy_from_slice(&n.to_le_bytes());
                blk[8..12].copy_from_slice(&((n / lap + 1) as u32).to_le_bytes());
                blk[12..16].copy_from_slice(&(rng.below(3) as u32).to_le_bytes());
                let used = if rng.below(3) == 0 {
                    rng.below(p as u64 + 1)
                } else {
                    p as u64
                };
                blk[16..18].copy_from_slice(&(used as u16).to_le_bytes());
                let fg = if rng.below(3) == 0 {
                    0xFFFF
                } else {
                    rng.below(used.max(1)) as u16
                };
                blk[18..20].copy_from_slice(&fg.to_le_bytes());
                blk[20] = (rng.below(4) == 0) as u8;
                // Payload: a mix of plausible group headers, fillers and noise.
                let mut o = 24;
                while o < 24 + used as usize {
                    match rng.below(4) {
                        0 => {
                            blk[o] = 0x47;
                            let len = rng.below(2 * p as u64) as u32;
                            let end = (o + 5).min(24 + used as usize);
                            let lb = len.to_le_bytes();
                            blk[o + 1..end].copy_from_slice(&lb[..end - o - 1]);
                            o = end;
                        }
                        1 => {
                            blk[o] = 0;
                            o += 1;
                        }
                        _ => {
                            blk[o] = rng.next() as u8;
                            o += 1;
                        }
                    }
                }
                let crc = inspect::block_crc(geo.salt, &blk[..b - 4]);
                blk[b - 4..].copy_from_slice(&crc.to_le_bytes());
            }
        }
        let refs: Vec<&[u8]> = images.iter().map(|f| &f[..]).collect();
        let start = rng.below(lap) * p as u64 + rng.below(p as u64);
        if let Ok(s) = inspect::scan_images(geo, &refs, start, start, 3) {
            let mut prev = start;
            for g in &s.groups {
                assert!(g.start_lsn.0 >= prev && g.end_lsn.0 > g.start_lsn.0);
                prev = g.end_lsn.0;
            }
            assert!(s.end >= prev);
        }
    }
}

/// A preallocated log larger than the file system's free room is refused before anything is
/// written (it used to zero-fill up to a full device, then fail, leaving it full); one whose
/// creation fails part-way (the device fills meanwhile) removes the files it made.
#[test]
fn a_preallocated_log_that_cannot_fit_is_refused_and_leaves_no_files() {
    let dir = Path::new("/log");
    let c = cfg(
        LogBlockSize::B4096,
        prealloc(1 << 20, 4),
        SyncMethod::Fdatasync,
    );
    let log_files = |fs: &SimFs| common::log_files(fs).len();
    // Known to be short of room: refused with nothing written.
    let fs = SimFs::new(SimConfig::seeded(3));
    fs.inject(keel_io::Fault::NoSpaceAbove(3 << 20));
    match RedoLog::open(Arc::new(fs.clone()), dir, c.clone()) {
        Err(LogError::Io(e)) => assert!(e.is_no_space(), "{e}"),
        Err(e) => panic!("expected no space, got {e}"),
        Ok(_) => panic!("a 4 MiB log opened with 3 MiB of room"),
    }
    assert_eq!(log_files(&fs), 0, "the refused creation wrote log files");
    assert_eq!(fs.total_bytes(), 0);
    // Full part-way (the room is not known beforehand): the files made are removed.
    let fs = SimFs::new(SimConfig::seeded(3));
    fs.inject(keel_io::Fault::NoSpaceOnPath(dir.join("log.0000000002")));
    match RedoLog::open(Arc::new(fs.clone()), dir, c.clone()) {
        Err(e) => assert!(format!("{e}").contains("no space"), "{e}"),
        Ok(_) => panic!("the creation of the third file was to fail"),
    }
    assert_eq!(log_files(&fs), 0, "a failed creation left its files");
    // With room, the same configuration creates and opens — also over the files of an
    // interrupted creation, whose room counts as free once they are removed.
    let fs = SimFs::new(SimConfig::seeded(3));
    fs.inject(keel_io::Fault::NoSpaceAbove(5 << 20));
    fs.create_dir_all(dir).unwrap();
    for i in 0..4 {
        let f = fs
            .open(
                &dir.join(format!("log.{i:010}")),
                &keel_io::OpenOptions::new(keel_io::FileClass::Log).create(true),
            )
            .unwrap();
        f.write_all_at(&vec![0u8; 1 << 20], 0).unwrap();
    }
    let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c).unwrap();
    drop(log);
    assert_eq!(log_files(&fs), 4);
}

/// Intervals at the edge of their range: a flush interval of `Duration::MAX` (never due) left
/// the flusher thread to panic on `Instant + Duration` the first time a commit waited for it,
/// so lazy commits were then written only at close; a group-commit delay that would stall every
/// commit (above one second) is refused as a configuration error.
#[test]
fn intervals_at_the_edge_of_their_range_neither_panic_nor_stall() {
    static PANICKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some("keel-log-flusher") {
            PANICKED.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        previous(info);
    }));
    let dir = tempfile::tempdir().unwrap();
    let c = LogConfig {
        flush_interval: Duration::MAX,
        durability: Durability::Lazy,
        ..cfg(
            LogBlockSize::B4096,
            prealloc(256 << 10, 2),
            SyncMethod::Fdatasync,
        )
    };
    let (log, _) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    for t in 0..20 {
        log.append_range(&group(t, 100)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let end = log.end_lsn();
    log.wait_durable(end).unwrap();
    log.close().unwrap();
    drop(log);
    assert!(
        !PANICKED.load(std::sync::atomic::Ordering::SeqCst),
        "the flusher thread panicked"
    );
    let (_log, rec) = RedoLog::open(os(), dir.path(), c.clone()).unwrap();
    assert_eq!(rec.groups.len(), 20);
    let slow = LogConfig {
        group_commit_delay: Duration::from_secs(2),
        ..c
    };
    let dir = tempfile::tempdir().unwrap();
    match RedoLog::open(os(), dir.path(), slow) {
        Err(LogError::InvalidConfig { reason }) => {
            assert!(reason.contains("group_commit_delay"), "{reason}")
        }
        Err(e) => panic!("expected a configuration error, got {e}"),
        Ok(_) => panic!("a two-second group-commit delay was taken"),
    }
}

/// A start whose header sync fails poisons the log: a second start returns that failure and
/// writes nothing (it used to write and sync the slot again, as if the first sync's failure
/// had not happened); a new open recovers every group.
#[test]
fn a_start_whose_header_sync_failed_is_not_retried() {
    let fs = SimFs::new(SimConfig::seeded(5));
    let dir = Path::new("/log");
    let c = cfg(
        LogBlockSize::B4096,
        prealloc(64 << 10, 2),
        SyncMethod::Fdatasync,
    );
    let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, c.clone()).unwrap();
    let groups = fill(&log, 0, 5);
    log.close().unwrap();
    drop(log);
    let (log, rec) = RedoLog::open_unstarted(
        Arc::new(fs.clone()),
        dir,
        c.clone(),
        keel_redo_log::LogOpenMode::Existing,
        false,
    )
    .unwrap();
    same(&rec.groups, &groups);
    fs.inject(keel_io::Fault::SyncFailsOnPath(dir.join("log.header")));
    assert!(log.start().is_err(), "the header sync was to fail");
    fs.clear_faults();
    let header = fs.contents(&dir.join("log.header")).unwrap();
    match log.start() {
        Err(e) => assert!(e.to_string().contains("log.header"), "{e}"),
        Ok(()) => panic!("a start after a failed header sync went on"),
    }
    assert_eq!(
        fs.contents(&dir.join("log.header")).unwrap(),
        header,
        "the second start wrote the header"
    );
    assert!(log.append(&group(99, 10)).is_err());
    drop(log);
    let (_log, rec) = RedoLog::open(Arc::new(fs.clone()), dir, c).unwrap();
    same(&rec.groups, &groups);
}

/// A preallocated log filled to its limit with a 512-byte write-ahead (or `ODirect`), closed,
/// and reopened with a 4 KiB write-ahead and `fdatasync`: the larger setting keeps more blocks
/// in reserve, so the healthy log ended past what it would have let appends reach, and the
/// open refused it as corrupt until the old setting came back (found by a session's
/// adversarial test of the log). It opens with every group; appends wait for a checkpoint.
#[test]
fn a_full_log_reopens_with_a_larger_write_ahead() {
    for first_method in [SyncMethod::Fdatasync, SyncMethod::ODirect] {
        let cfg = |write_ahead_size, sync_method| LogConfig {
            block_size: LogBlockSize::B512,
            write_ahead_size,
            sync_method,
            files: LogFiles::Preallocated {
                file_size: 16 << 10,
                files: 2,
            },
            buffer_size: 64 << 10,
            ..LogConfig::default()
        };
        let sim = SimFs::new(SimConfig::seeded(11));
        let dir = Path::new("/db/log");
        let (log, _) = RedoLog::open(Arc::new(sim.clone()), dir, cfg(512, first_method)).unwrap();
        let cap = log.capacity().unwrap();
        let mut acked = Vec::new();
        for tag in 0.. {
            if log.space_used() + 150 > cap {
                break;
            }
            let r = log.append_range(&group(tag, 60)).unwrap();
            log.wait_durable(r.end).unwrap();
            acked.push(r);
        }
        log.close().unwrap();
        drop(log);
        let (log, rec) =
            RedoLog::open(Arc::new(sim.clone()), dir, cfg(4096, SyncMethod::Fdatasync))
                .unwrap_or_else(|e| panic!("{first_method:?}: a full, healthy log refused: {e}"));
        let got: Vec<_> = rec.groups.iter().map(|g| g.start_lsn..g.end_lsn).collect();
        assert_eq!(got, acked, "{first_method:?}");
        // Once checkpointed, it takes appends again.
        log.checkpoint(log.end_lsn()).unwrap();
        let r = log.append_range(&group(99_999, 60)).unwrap();
        log.wait_durable(r.end).unwrap();
    }
}

/// Under `Durability::Lazy` the future of a commit answers as `wait_committed` does: a log
/// poisoned since the append is an error (the future said Ok while `commit` said `Poisoned`).
#[test]
fn a_lazy_commit_future_reports_a_poisoned_log_as_wait_committed_does() {
    let sim = SimFs::with_seed(9);
    let c = keel_redo_log::LogConfig {
        durability: keel_redo_log::Durability::Lazy,
        ..cfg(
            LogBlockSize::B512,
            prealloc(64 << 10, 2),
            SyncMethod::Fdatasync,
        )
    };
    let (log, _) = RedoLog::open(Arc::new(sim.clone()), Path::new("/log"), c).unwrap();
    let lsn = log.append(&group(1, 10)).unwrap();
    let mut before = std::pin::pin!(log.committed(lsn));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(matches!(
        std::future::Future::poll(before.as_mut(), &mut cx),
        std::task::Poll::Ready(Ok(()))
    ));
    sim.inject(keel_io::Fault::SyncFailsNth(1));
    assert!(log.wait_durable(lsn).unwrap_err().is_poisoned());
    let sync = log.wait_committed(lsn).unwrap_err();
    let mut after = std::pin::pin!(log.committed(lsn));
    match std::future::Future::poll(after.as_mut(), &mut cx) {
        std::task::Poll::Ready(Err(e)) => assert!(e.is_poisoned(), "{e} / {sync}"),
        other => panic!("the future answered {other:?} where wait_committed said {sync}"),
    }
}

/// Copies every file of `from` into `to` (created).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for (p, bytes) in files_of(from) {
        std::fs::write(to.join(p.file_name().unwrap()), bytes).unwrap();
    }
}

#[test]
fn a_changed_salt_keeps_every_block_and_refuses_the_old_one() {
    for block in LogBlockSize::ALL {
        for files in [
            prealloc(256 << 10, 2),
            LogFiles::Growing {
                file_size: 64 << 10,
            },
        ] {
            let c = cfg(block, files, SyncMethod::Fdatasync);
            let dir = tempfile::tempdir().unwrap();
            let (a, b) = (dir.path().join("a"), dir.path().join("b"));
            let (log, _) = RedoLog::open(os(), &a, c.clone()).unwrap();
            let written = fill(&log, 1, 40);
            log.close().unwrap();
            drop(log);
            copy_dir(&a, &b);
            let salt_of = |d: &Path| {
                let bytes = std::fs::read(d.join(inspect::HEADER_FILE)).unwrap();
                inspect::decode_header(d, &bytes).unwrap().0.salt
            };
            let old = salt_of(&a);
            let new = keel_redo_log::fresh_salt(&b, old);
            let change = keel_redo_log::change_salt(&OsFs::default(), &b, new).unwrap();
            assert_eq!(change.old, old);
            assert_ne!(change.new, old);
            assert_eq!(salt_of(&b), change.new);
            assert!(change.blocks > 0);
            // The copy recovers every group, and goes on.
            let (log, rec) = RedoLog::open(os(), &b, c.clone()).unwrap();
            same(&rec.groups, &written);
            fill(&log, 100, 3);
            drop(log);
            // A file of the copy put back into the original is not the original's.
            let first = std::fs::read_dir(&b)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    inspect::parse_file_name(p.file_name().unwrap().to_str().unwrap()).is_some()
                })
                .min()
                .unwrap();
            std::fs::copy(&first, a.join(first.file_name().unwrap())).unwrap();
            match RedoLog::open(os(), &a, c.clone()) {
                Err(_) => {}
                Ok((_, rec)) => assert!(
                    rec.groups.len() < written.len(),
                    "{block:?} {files:?}: the original read the copy's file as its own"
                ),
            }
        }
    }
}
