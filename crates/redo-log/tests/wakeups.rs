//! Group commit wakeups: many threads making many small commits all return (no lost wakeup),
//! each as soon as a sync covers it; without the hand-off of the writer to a queued waiter
//! they do not; poisoning wakes every blocked committer.

mod common;

use common::group;
use keel_io::{FileSystem, OsFs, SimFs, SyncMethod};
use keel_page::Lsn;
use keel_redo_log::{LogBlockSize, LogConfig, LogFiles, RedoLog, TestSwitches};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(waiter_flush: bool, spin: Duration) -> LogConfig {
    LogConfig {
        block_size: LogBlockSize::B512,
        files: LogFiles::Preallocated {
            file_size: 4 << 20,
            files: 2,
        },
        sync_method: SyncMethod::Fdatasync,
        buffer_size: 256 << 10,
        waiter_flush,
        spin_before_sleep: spin,
        // The flusher's periodic sync must not rescue a stranded waiter.
        flush_interval: Duration::from_secs(3600),
        ..LogConfig::default()
    }
}

/// How a committer waits.
#[derive(Clone, Copy, Debug)]
enum Wait {
    Durable,
    /// `flush_to` a random LSN up to the end (often someone else's).
    FlushTo,
    /// The `Durable` future, polled by a one-thread runtime.
    Future,
}

/// `threads` committers make `commits` tiny commits each (rotating through the ways of waiting)
/// while a checkpointer recycles the log. Returns `Err` if no commit returned for `stall`
/// (the stranded commits are then released by a flush from this thread).
fn stress(log: &RedoLog, threads: u64, commits: u64, stall: Duration) -> Result<u64, String> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for t in 0..threads {
        let (log, done, stop) = (log.clone(), done.clone(), stop.clone());
        hs.push(std::thread::spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| e.to_string())?;
            let ways = [Wait::Durable, Wait::FlushTo, Wait::Future];
            for i in 0..commits {
                if stop.load(SeqCst) {
                    break;
                }
                let tag = t * 1_000_000 + i;
                let lsn = log
                    .append(&group(tag, 8 + (i % 5) as usize * 20))
                    .map_err(|e| e.to_string())?;
                let way = ways[((t + i) % 3) as usize];
                let covered = match way {
                    Wait::Durable => log.wait_durable(lsn).map(|_| lsn),
                    Wait::FlushTo => {
                        let end = log.end_lsn().0;
                        let target = Lsn(lsn.0 + (tag * 7919) % (end - lsn.0 + 1));
                        log.flush_to(target).map(|_| target)
                    }
                    Wait::Future => rt.block_on(log.durable(lsn)).map(|_| lsn),
                }
                .map_err(|e| format!("{way:?}: {e}"))?;
                if log.durable_lsn() < covered {
                    return Err(format!(
                        "{way:?} returned at durable {:?} before {covered:?}",
                        log.durable_lsn()
                    ));
                }
                done.fetch_add(1, SeqCst);
            }
            Ok(())
        }));
    }
    let ck = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            let cap = log.capacity().unwrap_or(u64::MAX);
            while !stop.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
                if log.space_used() > cap / 2 {
                    let _ = log.checkpoint(log.durable_lsn());
                }
            }
        })
    };
    let total = threads * commits;
    let mut last = (0, Instant::now());
    let mut verdict = Ok(total);
    while hs.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(5));
        let n = done.load(SeqCst);
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > stall {
            verdict = Err(format!(
                "no commit returned for {stall:?} after {n} of {total}"
            ));
            stop.store(true, SeqCst);
            // Release whoever is stranded: this thread finds the writer free and syncs all.
            let _ = log.flush_to(log.end_lsn());
            break;
        }
    }
    stop.store(true, SeqCst);
    for h in hs {
        h.join().map_err(|_| "committer panicked".to_string())??;
    }
    let _ = ck.join();
    verdict
}

#[test]
fn many_threads_many_small_commits_all_return() {
    for (waiter_flush, spin) in [
        (true, Duration::ZERO),
        (true, Duration::from_micros(50)),
        (false, Duration::ZERO),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn FileSystem> = Arc::new(OsFs::default());
        let (log, _) = RedoLog::open(fs, dir.path(), config(waiter_flush, spin)).unwrap();
        let t0 = Instant::now();
        let n = stress(&log, 24, 150, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("waiter_flush {waiter_flush}, spin {spin:?}: {e}"));
        let s = log.stats();
        assert_eq!(s.groups_appended, n);
        eprintln!(
            "waiter_flush {waiter_flush}, spin {spin:?}: {n} commits in {:?}, {} syncs, commits/sync p50 {} max {}",
            t0.elapsed(),
            s.syncs,
            s.commits_per_sync.p50,
            s.commits_per_sync.max
        );
        log.close().unwrap();
    }
}

#[test]
fn without_the_handoff_waiters_are_stranded() {
    // The check that catches a lost wakeup (the stall detector of `stress`) does catch one:
    // with the hand-off switched off, a thread that queued behind a sync not covering it
    // sleeps until someone else leads, and soon nobody does.
    // (The last commits of a run are stranded almost always; it stops at the first stall. Five
    // tries missed once in a CI run on a quiet machine, and once under load: twenty.)
    let switches = TestSwitches {
        no_handoff: true,
        ..TestSwitches::default()
    };
    let mut stalls = Vec::new();
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn FileSystem> = Arc::new(OsFs::default());
        let (log, _) =
            RedoLog::open_with(fs, dir.path(), config(true, Duration::ZERO), switches).unwrap();
        if let Err(e) = stress(&log, 16, 2000, Duration::from_secs(2)) {
            stalls.push(e);
        }
        log.close().unwrap();
        if !stalls.is_empty() {
            break;
        }
    }
    assert!(
        !stalls.is_empty(),
        "without the hand-off some commit must be stranded"
    );
    eprintln!("without the hand-off: {}", stalls[0]);
}

#[test]
fn poison_wakes_every_blocked_committer() {
    for waiter_flush in [true, false] {
        let sim = SimFs::with_seed(11);
        let fs: Arc<dyn FileSystem> = Arc::new(sim.clone());
        let (log, _) =
            RedoLog::open(fs, Path::new("/log"), config(waiter_flush, Duration::ZERO)).unwrap();
        sim.inject(keel_io::Fault::SyncFailsNth(40));
        let mut hs = Vec::new();
        for t in 0..16u64 {
            let log = log.clone();
            hs.push(std::thread::spawn(move || {
                for i in 0..10_000u64 {
                    let lsn = match log.append(&group(t * 100_000 + i, 16)) {
                        Ok(l) => l,
                        Err(e) => return (i, e),
                    };
                    if let Err(e) = log.wait_durable(lsn) {
                        return (i, e);
                    }
                }
                panic!("10000 commits and no poison");
            }));
        }
        let t0 = Instant::now();
        while hs.iter().any(|h| !h.is_finished()) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "waiter_flush {waiter_flush}: a committer is still blocked after the poison"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        for h in hs {
            let (_, e) = h.join().unwrap();
            assert!(e.is_poisoned(), "{e}");
        }
        assert!(log.is_poisoned());
        assert_eq!(
            sim.fault_stats().sync_failed,
            1,
            "the failed sync is never retried"
        );
    }
}

/// An idle log's flusher sleeps (it once woke every `flush_interval` to find nothing to do:
/// an embedded store should not wake a core while idle), and a commit that does not wait
/// (`Durability::Lazy`) still wakes it and is durable about one interval later.
#[test]
fn an_idle_flusher_sleeps_and_a_lazy_commit_wakes_it() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(OsFs::default());
    let cfg = LogConfig {
        durability: keel_redo_log::Durability::Lazy,
        flush_interval: Duration::from_millis(20),
        ..config(false, Duration::ZERO)
    };
    let (log, _) = RedoLog::open(fs, dir.path(), cfg).unwrap();
    let idle = |what: &str| {
        let before = log.stats().flusher_wakeups;
        std::thread::sleep(Duration::from_millis(400));
        let woke = log.stats().flusher_wakeups - before;
        assert_eq!(woke, 0, "{what}: the flusher woke {woke} times in 400 ms");
    };
    idle("after open");
    for round in 0..3u64 {
        let lsn = log.append(&group(round + 1, 100)).unwrap();
        let t0 = Instant::now();
        while log.durable_lsn() < lsn {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "round {round}: a lazy commit never became durable"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Durable; the flusher's last timed wait ends within an interval, then it parks.
        std::thread::sleep(Duration::from_millis(100));
        idle("after a lazy commit became durable");
    }
    log.close().unwrap();
}

/// A future's waker runs the executor's code on the log's thread, which may drop the task that
/// holds the last handle of the log (an executor whose waker owns its task, dropped while the
/// task waits): the log's teardown then runs on the flusher itself. It used to wait for the
/// flusher, which held the writer while it woke futures (`Buffered`: a hang), or join the
/// flusher from itself (`Sync`: a panic, `EDEADLK`). Wakers now run after the writer is
/// released, and the teardown does not join the thread it runs on.
#[test]
fn a_waker_that_drops_the_last_handle_on_the_flusher_thread_neither_hangs_nor_panics() {
    use keel_redo_log::Durability;
    use std::future::Future;
    use std::sync::Mutex;
    use std::task::{Context, Wake, Waker};

    type Task = (RedoLog, keel_redo_log::Durable);
    /// The waker owns the task: waking drops it (and with it the log's last handle).
    struct Owner {
        task: Mutex<Option<Task>>,
        done: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    }
    impl Wake for Owner {
        fn wake(self: Arc<Self>) {
            let task = self.task.lock().ok().and_then(|mut t| t.take());
            drop(task);
            if let Some(tx) = self.done.lock().ok().and_then(|mut d| d.take()) {
                tx.send(()).ok();
            }
        }
    }
    for durability in [Durability::Sync, Durability::Buffered] {
        let fs = SimFs::with_seed(3);
        let dir = Path::new("/log");
        let cfg = LogConfig {
            durability,
            flush_interval: Duration::from_millis(5),
            ..config(true, Duration::ZERO)
        };
        let (log, _) = RedoLog::open(Arc::new(fs.clone()), dir, cfg.clone()).unwrap();
        let end = log.append(&group(1, 300)).unwrap();
        let fut = if durability == Durability::Sync {
            log.durable(end)
        } else {
            log.committed(end)
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let owner = Arc::new(Owner {
            task: Mutex::new(None),
            done: Mutex::new(Some(tx)),
        });
        let waker = Waker::from(owner.clone());
        let mut task: Task = (log, fut);
        let polled = std::pin::Pin::new(&mut task.1).poll(&mut Context::from_waker(&waker));
        if polled.is_ready() {
            // Already there (a fast flusher): nothing to test this round.
            eprintln!("SKIPPED: {durability:?}: the future was ready at once");
            continue;
        }
        *owner.task.lock().unwrap() = Some(task);
        drop(waker);
        drop(owner);
        // The flusher's sync wakes the future: the task, and the log's last handle, drop there.
        assert!(
            rx.recv_timeout(Duration::from_secs(20)).is_ok(),
            "{durability:?}: the teardown on the flusher thread hung"
        );
        // The directory is free again and the group is there.
        let (again, rec) = RedoLog::open(Arc::new(fs.clone()), dir, cfg).unwrap();
        assert!(
            rec.end_lsn >= end,
            "{durability:?}: {:?} < {end:?}",
            rec.end_lsn
        );
        drop(again);
    }
}
