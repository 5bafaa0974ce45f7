//! How a store is created, locked and opened (issue 11, items 2, 4 and 5): one opener at a time,
//! atomic creation that is recognised and redone when interrupted, a directory holding any part
//! of a store never initialised again, `create = false`, and read-only opens.

#[path = "common/files.rs"]
mod files;

use files::{assert_unchanged, snapshot};
use keel::layout::CREATING_FILE;
use keel::{Config, Error, Store, TornPage, LOG_DIR};
use keel_io::{FileClass, FileSystem, OpenOptions, SimConfig, SimFs};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

fn small() -> Config {
    Config {
        page_size: 4096,
        pool_size: 1 << 20,
        log_file_size: 256 << 10,
        ..Config::default()
    }
}

fn fill(store: &Store, n: u32) {
    for i in 0..n {
        let tx = store.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&i.to_be_bytes(), &[i as u8; 300])
            .unwrap();
        tx.commit().unwrap();
    }
}

fn count(store: &Store) -> usize {
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    t.range(..).unwrap().count()
}

// ---------------------------------------------------------------------------------------------
// Item 2: one opener.

#[test]
fn a_second_open_in_the_same_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), small()).unwrap();
    match Store::open(dir.path(), small()) {
        Err(Error::AlreadyOpen { dir: d, pid, .. }) => {
            assert_eq!(d, dir.path());
            assert_eq!(pid, Some(std::process::id()));
        }
        other => panic!("a second open must be refused, got {other:?}"),
    }
    // A read-only open conflicts with the writer too.
    let ro = Config {
        read_only: true,
        ..small()
    };
    assert!(matches!(
        Store::open(dir.path(), ro.clone()),
        Err(Error::AlreadyOpen { .. })
    ));
    // Released on close (and on drop of the last clone).
    let clone = a.clone();
    fill(&a, 3);
    drop(a);
    assert!(matches!(
        Store::open(dir.path(), small()),
        Err(Error::AlreadyOpen { .. })
    ));
    clone.close().unwrap();
    let b = Store::open(dir.path(), small()).unwrap();
    assert_eq!(count(&b), 3);
    // A snapshot outlives its store and keeps it open (it may still read): the refusal says
    // so, rather than naming this process's id as if it were another's.
    let snapshot = b.read().unwrap();
    drop(b);
    match Store::open(dir.path(), small()) {
        Err(e @ Error::AlreadyOpen { .. }) => {
            assert!(e.to_string().contains("ReadTxn that outlives"), "{e}")
        }
        other => panic!("open beside a live snapshot: {other:?}"),
    }
    assert_eq!(snapshot.table("t").unwrap().range(..).unwrap().count(), 3);
    drop(snapshot);
    let b = Store::open(dir.path(), small()).unwrap();
    drop(b);
    // Read-only opens share.
    let r1 = Store::open(dir.path(), ro.clone()).unwrap();
    let r2 = Store::open(dir.path(), ro).unwrap();
    assert_eq!(count(&r1), 3);
    assert_eq!(count(&r2), 3);
    assert!(matches!(
        Store::open(dir.path(), small()),
        Err(Error::AlreadyOpen { .. })
    ));
}

/// The lock is the store directory's, not only its lock file's: deleting `LOCK`, or renaming
/// another file over it, while a store holds it let a second writer lock the new file and open
/// the same store — both wrote, and acknowledged commits were lost without an error (a tester).
/// A writer refused by read-only openers is told so (it named a long-gone writer's pid, even
/// this process's: "a Store of it ... is still alive"); a read-only open creates no lock file.
#[test]
fn the_lock_file_swapped_under_a_writer_lets_no_second_writer_in() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join(keel::layout::LOCK_FILE);
    let a = Store::open(dir.path(), small()).unwrap();
    fill(&a, 2);
    std::fs::remove_file(&lock).unwrap();
    assert!(
        matches!(
            Store::open(dir.path(), small()),
            Err(Error::AlreadyOpen { .. })
        ),
        "a second writer after LOCK was deleted"
    );
    let other = dir.path().join("LOCK.other");
    std::fs::write(&other, b"").unwrap();
    std::fs::rename(&other, &lock).unwrap();
    assert!(
        matches!(
            Store::open(dir.path(), small()),
            Err(Error::AlreadyOpen { .. })
        ),
        "a second writer after LOCK was replaced"
    );
    a.close().unwrap();
    let ro = Config {
        read_only: true,
        ..small()
    };
    let reader = Store::open(dir.path(), ro.clone()).unwrap();
    assert_eq!(count(&reader), 2);
    match Store::open(dir.path(), small()) {
        Err(
            e @ Error::AlreadyOpen {
                readers: true,
                pid: None,
                ..
            },
        ) => {
            assert!(e.to_string().contains("read-only"), "{e}")
        }
        other => panic!("a writer beside a reader: {other:?}"),
    }
    drop(reader);
    std::fs::remove_file(&lock).unwrap();
    let reader = Store::open(dir.path(), ro).unwrap();
    assert_eq!(count(&reader), 2);
    assert!(!lock.exists(), "a read-only open created the lock file");
    drop(reader);
    let b = Store::open(dir.path(), small()).unwrap();
    assert_eq!(count(&b), 2);
}

#[test]
fn the_lock_holds_on_simfs_and_a_crash_releases_it() {
    let fs = SimFs::new(SimConfig::seeded(3));
    let s = Store::open_with_fs(Arc::new(fs.clone()), "/db", small()).unwrap();
    fill(&s, 2);
    assert!(matches!(
        Store::open_with_fs(Arc::new(fs.clone()), "/db", small()),
        Err(Error::AlreadyOpen { .. })
    ));
    let after = fs.crash();
    drop(s);
    let s = Store::open_with_fs(Arc::new(after), "/db", small()).unwrap();
    assert_eq!(count(&s), 2);
}

/// Child side of the cross-process test: holds the store until stdin closes.
#[test]
fn lock_holder_child() {
    let Some(dir) = std::env::var_os("KEEL_LOCK_CHILD_DIR") else {
        return;
    };
    let s = Store::open(&dir, small()).unwrap();
    fill(&s, 1);
    println!("holding");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(s);
}

#[test]
fn a_second_process_is_refused_with_the_holders_pid() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_holder_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KEEL_LOCK_CHILD_DIR", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("holding") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
    }
    match Store::open(dir.path(), small()) {
        Err(e @ Error::AlreadyOpen { .. }) => {
            let Error::AlreadyOpen { pid, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*pid, Some(child.id()), "{e}");
            assert!(e.to_string().contains(&child.id().to_string()), "{e}");
        }
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let s = Store::open(dir.path(), small()).unwrap();
    assert_eq!(count(&s), 1);
}

/// Run in a process of its own by `a_forked_child_cannot_write_the_parents_store` (a fork is
/// safe only where no other test's threads run): opens a store, forks, and has the child
/// commit through the parent's `Store`.
#[test]
fn fork_child() {
    let Some(dir) = std::env::var_os("KEEL_FORK_CHILD_DIR") else {
        return;
    };
    let s = Store::open(&dir, small()).unwrap();
    fill(&s, 10);
    // SAFETY: the child only commits through the store (its threads' locks were free at the
    // fork: no transaction ran), reports through its exit code, and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: a timer for this process; SIGALRM's default action ends a hung child.
        unsafe { libc::alarm(20) };
        let put = || -> keel::Result<()> {
            let tx = s.write()?;
            tx.table("t")?.insert(b"forked child", &[9; 300])?;
            tx.commit()
        };
        let code = match put() {
            Ok(()) => 1,
            Err(e) if e.to_string().contains("fork") => 0,
            Err(_) => 2,
        };
        // SAFETY: ends the child without running the parent's exit handlers or destructors.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    // SAFETY: waits for our own child with a live status slot.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let child = if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => "refused".to_string(),
            1 => "committed".to_string(),
            c => format!("failed with another error (exit {c})"),
        }
    } else {
        format!(
            "died of signal {} (a hang ends with 14)",
            libc::WTERMSIG(status)
        )
    };
    // Forked while another thread holds the writer lock (an exclusive transaction open): in
    // the child that lock is held for good, so a write that took it would wait forever (a
    // tester's child hung so on the log's lock). Refused before any lock, and dropping the
    // store in the child returns.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let s = s.clone();
        std::thread::spawn(move || {
            let tx = s.write().unwrap();
            tx.table("t").unwrap().insert(b"holder", b"h").unwrap();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            tx.commit().unwrap();
        })
    };
    held_rx.recv().unwrap();
    // SAFETY: the child only calls the store (refused before any lock), drops its handle and
    // leaves with `_exit`; an alarm ends it if anything waits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: a timer for this process; SIGALRM's default action ends a hung child.
        unsafe { libc::alarm(20) };
        let refused = |r: keel::Result<()>| r.is_err_and(|e| e.to_string().contains("fork"));
        let all = refused(s.write().map(drop))
            && refused(s.read().map(drop))
            && refused(s.checkpoint().map(drop));
        drop(s);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(if all { 0 } else { 1 }) }
    }
    let mut status = 0;
    // SAFETY: waits for our own child with a live status slot.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let held = if libc::WIFEXITED(status) {
        format!("exit {}", libc::WEXITSTATUS(status))
    } else {
        format!("signal {}", libc::WTERMSIG(status))
    };
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    // The parent goes on, and every one of its commits is there after a reopen.
    fill(&s, 50);
    s.close().unwrap();
    let s = Store::open(&dir, small()).unwrap();
    let r = s.read().unwrap();
    let forked = r.table("t").unwrap().get(b"forked child").unwrap();
    println!(
        "child: {child}; parent: {} rows; child's row: {}; child under a held lock: {held}",
        count(&s),
        forked.is_some()
    );
}

/// Runs this test binary's test `name` alone in a process of its own (with `var` set to
/// `value`), asserts it passed, and returns what it printed.
fn run_in_own_process(name: &str, var: &str, value: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(var, value)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn a_forked_child_cannot_write_the_parents_store() {
    let dir = tempfile::tempdir().unwrap();
    let text = run_in_own_process("fork_child", "KEEL_FORK_CHILD_DIR", dir.path());
    assert!(
        text.contains(
            "child: refused; parent: 51 rows; child's row: false; child under a held lock: exit 0"
        ),
        "{text}"
    );
}

/// Run in a process of its own by `a_forked_child_cannot_use_handles_made_before_the_fork`:
/// forks, again and again, while two threads of the parent commit and scan, each time holding
/// a read transaction, a concurrent write transaction with a pending write, a range and a
/// cursor part-way through, all made before the fork. The child uses each (every use must be
/// refused, naming the fork: before, reads succeeded through the parent's pool), asks for
/// `stats()`, and drops them all — within its alarm (before, 2-4% of children hung on a lock a
/// parent thread held at the fork: the versions registry in a snapshot's drop or `stats()`, a
/// frame latch in a read: a tester). Prints one line per outcome.
#[test]
fn fork_child_handles() {
    let Some(dir) = std::env::var_os("KEEL_FORK_HANDLES_DIR") else {
        return;
    };
    let forks: u32 = std::env::var("KEEL_FORK_HANDLES_FORKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let s = Store::open(&dir, small()).unwrap();
    fill(&s, 40);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|w| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if w == 0 {
                        let tx = s.write().unwrap();
                        let key = format!("busy{}", i % 200);
                        tx.table("t")
                            .unwrap()
                            .insert(key.as_bytes(), &[1; 200])
                            .unwrap();
                        tx.commit().unwrap();
                    } else {
                        let r = s.read().unwrap();
                        let _ = r.table("t").unwrap().range(..).unwrap().count();
                        let _ = s.stats();
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let (mut refused, mut hung, mut other) = (0, 0, Vec::new());
    for _ in 0..forks {
        let r = s.read().unwrap();
        let w = s.write_concurrent().unwrap();
        w.table("t").unwrap().insert(b"pending", b"p").unwrap();
        let t = r.table("t").unwrap();
        let mut rows = t.range(..).unwrap();
        rows.next().unwrap().unwrap();
        let mut cur = t.cursor(..).unwrap();
        cur.next().unwrap();
        // SAFETY: the child uses only the store's handles (each must be refused before any
        // lock), drops them, and leaves with `_exit`; an alarm ends it if anything waits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: a timer for this process; SIGALRM's default action ends a hung child.
            unsafe { libc::alarm(5) };
            let fork = |e: Error| e.to_string().contains("fork");
            let checks = [
                r.table("t").is_err_and(fork),
                r.list_tables().is_err_and(fork),
                t.get(b"pending").is_err_and(fork),
                t.len().is_err_and(fork),
                // Rows already read from a leaf may still come; the next page is refused.
                rows.by_ref().find_map(|x| x.err()).is_some_and(fork),
                loop {
                    match cur.next() {
                        Ok(Some(_)) => {}
                        Ok(None) => break false,
                        Err(e) => break fork(e),
                    }
                },
                w.table("t").is_err_and(fork),
                w.list_tables().is_err_and(fork),
            ];
            // Exit 0 if every use was refused, else 1 + the first that was not.
            let code = checks.iter().position(|ok| !ok).map_or(0, |i| 1 + i as i32);
            let _ = s.stats();
            drop(cur);
            drop(rows);
            drop(w);
            drop(r);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        let mut status = 0;
        // SAFETY: waits for our own child with a live status slot.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => refused += 1,
            (true, c) => other.push(c),
            _ => hung += 1,
        }
        drop(cur);
        drop(rows);
        w.abort();
        drop(r);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
    s.close().unwrap();
    println!(
        "children: {refused} refused every use, {} did not (first use not refused: {:?}), \
         {hung} hung",
        other.len(),
        &other[..other.len().min(5)]
    );
}

#[test]
fn a_forked_child_cannot_use_handles_made_before_the_fork() {
    let dir = tempfile::tempdir().unwrap();
    let text = run_in_own_process("fork_child_handles", "KEEL_FORK_HANDLES_DIR", dir.path());
    let line = text.lines().find(|l| l.contains("children:"));
    assert!(
        line.is_some_and(|l| l.contains(" 0 did not") && l.ends_with(" 0 hung")),
        "{text}"
    );
    println!("{}", line.unwrap_or_default());
}

/// Run in a process of its own by `a_forked_child_drops_orphans_and_futures_without_harm`:
/// forks while a read transaction is the only holder of a second store (its `Store` dropped)
/// and a commit's future is made but not yet resolved; the child drops the read transaction
/// (its teardown joined the parent's threads, which do not exist there: an abort) and drives
/// the future to its end (it waited for good: no flusher wakes it there). Prints how each
/// child ended.
#[test]
fn fork_child_orphans() {
    let Some(dir) = std::env::var_os("KEEL_FORK_ORPHANS_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    // The default log (its files preallocated, synced as configured by default): each
    // commit's future is still pending when the child takes it.
    let s = Store::open(
        dir.join("main"),
        Config {
            page_size: 4096,
            pool_size: 256 * 4096,
            ..Config::default()
        },
    )
    .unwrap();
    fill(&s, 10);
    let (mut ok, mut failed) = (0, Vec::new());
    for i in 0..20u32 {
        let other = Store::open(dir.join(format!("other{i}")), small()).unwrap();
        fill(&other, 3);
        let orphan = other.read().unwrap();
        drop(other);
        // Commits in quick succession: the newest futures are still pending at the fork.
        let futs: Vec<_> = (0..30u32)
            .map(|j| {
                let tx = s.write().unwrap();
                tx.table("t")
                    .unwrap()
                    .insert(&j.to_be_bytes(), &[1; 100])
                    .unwrap();
                tx.commit_async()
            })
            .collect();
        let fut = async move {
            let mut all = Ok(());
            for f in futs {
                all = all.and(f.await);
            }
            all
        };
        // SAFETY: the child drops a read transaction, drives one future on a runtime of its
        // own and leaves with `_exit`; an alarm ends it if anything waits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: a timer for this process; SIGALRM's default action ends a hung child.
            unsafe { libc::alarm(5) };
            let done = tokio::runtime::Builder::new_current_thread()
                .build()
                .map(|rt| rt.block_on(fut));
            drop(orphan);
            let code = match done {
                Ok(Ok(())) | Ok(Err(_)) => 0,
                Err(_) => 3,
            };
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        let mut status = 0;
        // SAFETY: waits for our own child with a live status slot.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            ok += 1;
        } else if libc::WIFEXITED(status) {
            failed.push(format!("exit {}", libc::WEXITSTATUS(status)));
        } else {
            failed.push(format!("signal {}", libc::WTERMSIG(status)));
        }
        drop(orphan);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(fut)
            .unwrap();
    }
    println!("orphan children: {ok} ended cleanly, others: {failed:?}");
}

#[test]
fn a_forked_child_drops_orphans_and_futures_without_harm() {
    let dir = tempfile::tempdir().unwrap();
    let text = run_in_own_process("fork_child_orphans", "KEEL_FORK_ORPHANS_DIR", dir.path());
    assert!(
        text.contains("orphan children: 20 ended cleanly, others: []"),
        "{text}"
    );
}

/// Run as user `nobody` by `a_store_under_a_parent_that_cannot_be_opened_opens`: creates,
/// commits to and reopens the store in `KEEL_XONLY_DIR`, whose parent it cannot open.
#[test]
fn xonly_parent_child() {
    let Some(dir) = std::env::var_os("KEEL_XONLY_DIR") else {
        return;
    };
    for round in 0..2 {
        let s = Store::open(&dir, small()).unwrap();
        fill(&s, 5);
        s.close().unwrap();
        println!("round {round} ok");
    }
}

/// Every read-write open syncs the store's directory and the directories above it; one the
/// process may pass through or write but not open (mode 0711 or a spool-style 1733, another
/// owner) is no reason to refuse the store — neither its creation (`create_dir_all` refused it
/// the first time and the same open was accepted on retry: the last review) nor a reopen. Root
/// passes every permission check, so the store is opened by a child running as `nobody`.
#[test]
fn a_store_under_a_parent_that_cannot_be_opened_opens() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/sbin/runuser").exists() {
        println!("SKIPPED: needs root and runuser to run a child as another user");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // (parent mode, whether root makes the store's directory for nobody first)
    for (mode, premade) in [(0o711, true), (0o1733, false)] {
        let parent = base.path().join(format!("p{mode:o}"));
        let store = parent.join("db");
        std::fs::create_dir_all(&parent).unwrap();
        if premade {
            std::fs::create_dir_all(&store).unwrap();
            let chown = Command::new("chown")
                .args(["nobody", store.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(chown.success());
        }
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(mode)).unwrap();
        let exe = std::env::current_exe().unwrap();
        let out = Command::new("/usr/sbin/runuser")
            .args(["-u", "nobody", "--"])
            .arg(&exe)
            .args([
                "--exact",
                "xonly_parent_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("KEEL_XONLY_DIR", &store)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() && text.is_empty() {
            // The test binary itself is out of nobody's reach (a private target directory).
            println!(
                "SKIPPED: nobody cannot run the test binary: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        assert!(
            out.status.success() && text.contains("round 1 ok"),
            "parent mode {mode:o}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Run in a process of its own by `a_store_opened_by_a_relative_path_survives_a_chdir` (the
/// working directory is the process's): opens a store as a relative path, changes the working
/// directory, and commits until its growing log has made new files.
#[test]
fn relative_dir_child() {
    let Some(base) = std::env::var_os("KEEL_RELATIVE_DIR_BASE") else {
        return;
    };
    std::env::set_current_dir(&base).unwrap();
    let cfg = Config {
        log_files: keel::LogFileMode::Growing,
        log_file_size: 64 << 10,
        ..small()
    };
    let s = Store::open("db", cfg.clone()).unwrap();
    fill(&s, 5);
    // Elsewhere, beside a directory of the same name: the store's files stay its own.
    let other = Path::new(&base).join("elsewhere");
    std::fs::create_dir_all(other.join("db")).unwrap();
    std::env::set_current_dir(&other).unwrap();
    let files = |d: &Path| std::fs::read_dir(d.join(LOG_DIR)).unwrap().count();
    let before = files(&Path::new(&base).join("db"));
    fill(&s, 400);
    let after = files(&Path::new(&base).join("db"));
    s.close().unwrap();
    assert!(after > before, "no new log file: {before} -> {after}");
    std::env::set_current_dir(&base).unwrap();
    let s = Store::open("db", cfg).unwrap();
    println!("rows after the chdir: {}", count(&s));
}

#[test]
fn a_store_opened_by_a_relative_path_survives_a_chdir() {
    let base = tempfile::tempdir().unwrap();
    let text = run_in_own_process("relative_dir_child", "KEEL_RELATIVE_DIR_BASE", base.path());
    assert!(text.contains("rows after the chdir: 400"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Item 4: missing or zeroed metadata never re-creates a store.

fn closed_store(n: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small()).unwrap();
    fill(&s, n);
    s.close().unwrap();
    dir
}

#[test]
fn a_zeroed_meta_page_is_refused_and_nothing_is_overwritten() {
    // No doublewrite copy of page 0 either: the area emptied, or gone.
    for area_gone in [false, true] {
        let dir = closed_store(40);
        let data = dir.path().join("data.keel");
        let original = std::fs::read(&data).unwrap();
        let mut bytes = original.clone();
        bytes[..4096].fill(0);
        std::fs::write(&data, &bytes).unwrap();
        let area = dir.path().join("doublewrite.keel");
        let original_area = std::fs::read(&area).unwrap();
        if area_gone {
            std::fs::remove_file(&area).unwrap();
        } else {
            std::fs::write(&area, []).unwrap();
        }
        let before = snapshot(dir.path());
        let e = Store::open(dir.path(), small()).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        assert!(e.to_string().contains("page 0"), "{e}");
        // Nothing at all written, the log and the area included: the log's start (a new
        // incarnation at the recovered end) and the area's format or creation wait for the
        // meta page's check, so the store opens whole once page 0 is back.
        assert_unchanged(dir.path(), &before, "the refused open wrote");
        std::fs::write(&data, &original).unwrap();
        std::fs::write(&area, &original_area).unwrap();
        let s = Store::open(dir.path(), small()).unwrap();
        assert_eq!(count(&s), 40);
    }
}

/// Copies every file of directory `from` into `to` (one level: the log directory is its own).
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A data file restored from an older copy beside the current log lacks changes the log no
/// longer replays (they were checkpointed). It used to open and show the old table silently
/// (found by `bad_bytes.rs`' stale copies); page 0 now records the checkpoint it was written
/// for, so the open refuses it, naming the file and both LSNs, and writes nothing.
#[test]
fn a_data_file_older_than_the_log_is_refused() {
    let dir = closed_store(10);
    let data = dir.path().join("data.keel");
    let old = std::fs::read(&data).unwrap();
    let s = Store::open(dir.path(), small()).unwrap();
    fill(&s, 200);
    s.close().unwrap();
    std::fs::write(&data, &old).unwrap();
    for read_only in [true, false] {
        let e = Store::open(
            dir.path(),
            Config {
                read_only,
                ..small()
            },
        )
        .unwrap_err();
        assert!(matches!(e, Error::Recovery { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("data.keel") && msg.contains("older than the log"),
            "{msg}"
        );
    }
    assert!(
        std::fs::read(&data).unwrap() == old,
        "the data file was written"
    );
}

/// The mirror case: a log restored from an older copy beside a data file written after it. The
/// data file's checkpoint lies past the old log's end, so the commits between are gone from the
/// log; refused rather than opened over a data file that no longer matches it.
#[test]
fn a_log_older_than_the_data_file_is_refused() {
    let dir = closed_store(10);
    let log = dir.path().join(LOG_DIR);
    let saved = tempfile::tempdir().unwrap();
    copy_files(&log, saved.path());
    let s = Store::open(dir.path(), small()).unwrap();
    fill(&s, 200);
    s.close().unwrap();
    std::fs::remove_dir_all(&log).unwrap();
    copy_files(saved.path(), &log);
    let e = Store::open(dir.path(), small()).unwrap_err();
    assert!(matches!(e, Error::Recovery { .. }), "{e}");
    assert!(e.to_string().contains("past the end of the log"), "{e}");
}

#[test]
fn a_deleted_log_header_or_log_is_refused() {
    let dir = closed_store(10);
    std::fs::remove_file(dir.path().join(LOG_DIR).join("log.header")).unwrap();
    let e = Store::open(dir.path(), small()).unwrap_err();
    assert!(matches!(e, Error::IncompleteStore { .. }), "{e}");
    assert!(e.to_string().contains("log header"), "{e}");
    assert!(!dir.path().join(LOG_DIR).join("log.header").exists());

    let dir = closed_store(10);
    std::fs::remove_dir_all(dir.path().join(LOG_DIR)).unwrap();
    let e = Store::open(dir.path(), small()).unwrap_err();
    assert!(matches!(e, Error::IncompleteStore { .. }), "{e}");
    assert!(!dir.path().join(LOG_DIR).exists(), "a new log was created");
}

#[test]
fn a_deleted_identity_or_data_file_is_refused() {
    let dir = closed_store(10);
    std::fs::remove_file(dir.path().join("store.keel")).unwrap();
    let e = Store::open(dir.path(), small()).unwrap_err();
    assert!(matches!(e, Error::IncompleteStore { .. }), "{e}");
    assert!(e.to_string().contains("store.keel"), "{e}");
    assert!(
        !dir.path().join("store.keel").exists(),
        "store.keel re-created"
    );

    let dir = closed_store(10);
    std::fs::remove_file(dir.path().join("data.keel")).unwrap();
    let e = Store::open(dir.path(), small()).unwrap_err();
    assert!(matches!(e, Error::IncompleteStore { .. }), "{e}");
    assert!(
        !dir.path().join("data.keel").exists(),
        "data file re-created"
    );
}

/// A crash at every mutating I/O call of creation: the next open creates the store cleanly
/// (an interrupted creation is recognised and redone) and it then works; never a permanent
/// failure, never a half-made store taken for a store.
#[test]
fn a_crash_at_every_step_of_creation_is_redone() {
    // How many mutating calls does a creation make?
    let probe = SimFs::new(SimConfig::seeded(1));
    let before = probe.generation();
    let mut calls = 0;
    for n in 1..2_000u64 {
        let fs = SimFs::new(SimConfig::seeded(n));
        fs.crash_at_call(n, None);
        let r = Store::open_with_fs(Arc::new(fs.clone()), "/db", small());
        let crashed = fs.is_crashed();
        drop(r);
        if !crashed {
            calls = n;
            break;
        }
        let after = fs.crashed_into().expect("a crashed fs");
        let s = Store::open_with_fs(Arc::new(after.clone()), "/db", small())
            .unwrap_or_else(|e| panic!("open after a crash at call {n} of creation: {e}"));
        fill(&s, 2);
        assert_eq!(count(&s), 2);
        assert!(s.recovery().created || n > 0);
        drop(s);
        let s = Store::open_with_fs(Arc::new(after), "/db", small()).unwrap();
        assert_eq!(count(&s), 2, "crash at call {n}");
    }
    assert_eq!(before, 0);
    assert!(calls > 10, "creation made only {calls} mutating calls?");
    println!(
        "creation: crashed at each of {} mutating calls, every one redone",
        calls - 1
    );
}

#[test]
fn an_empty_identity_left_by_an_interrupted_creation_is_redone() {
    let fs = SimFs::new(SimConfig::seeded(4));
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    // What creation leaves when stopped right after its first step.
    fs.open(
        &dir.join(CREATING_FILE),
        &OpenOptions::new(FileClass::Other).create(true),
    )
    .unwrap();
    fs.open(
        &dir.join("data.keel"),
        &OpenOptions::new(FileClass::Data).create(true),
    )
    .unwrap();
    let s = Store::open_with_fs(Arc::new(fs.clone()), dir, small()).unwrap();
    assert!(s.recovery().created);
    assert!(!fs.exists(&dir.join(CREATING_FILE)).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Item 5: opens that never create, and read-only opens.

#[test]
fn create_false_on_a_directory_without_a_store_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("user-file.txt"), b"mine").unwrap();
    let cfg = Config {
        create: false,
        ..small()
    };
    let e = Store::open(dir.path(), cfg.clone()).unwrap_err();
    assert!(matches!(e, Error::NotAStore { .. }), "{e}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("user-file.txt")]);
    let missing = dir.path().join("nope");
    assert!(matches!(
        Store::open(&missing, cfg.clone()),
        Err(Error::NotAStore { .. })
    ));
    assert!(!missing.exists());
    // An existing store opens.
    let store_dir = closed_store(5);
    let s = Store::open(store_dir.path(), cfg).unwrap();
    assert_eq!(count(&s), 5);
}

#[test]
fn a_read_only_open_reads_and_writes_nothing() {
    let dir = closed_store(30);
    let before = snapshot(dir.path());
    let ro = Config {
        read_only: true,
        ..small()
    };
    let s = Store::open(dir.path(), ro).unwrap();
    assert!(s.is_read_only());
    assert_eq!(count(&s), 30);
    assert!(matches!(s.write(), Err(Error::ReadOnly { .. })));
    assert!(matches!(s.checkpoint(), Err(Error::ReadOnly { .. })));
    s.close().unwrap();
    assert_unchanged(dir.path(), &before, "a read-only open changed the store");
}

/// A read-only open of a store that needs recovery recovers in memory: it reads every commit,
/// writes nothing, and says so in its recovery report. With a pool too small to hold the
/// recovered pages it is refused, saying what to do.
#[test]
fn a_read_only_open_of_a_store_that_needs_recovery_recovers_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(dir.path(), small()).unwrap();
        fill(&s, 5);
        // Dropped without close: the commits are only in the log.
    }
    let before = snapshot(dir.path());
    let ro = Config {
        read_only: true,
        ..small()
    };
    let s = Store::open(dir.path(), ro.clone()).unwrap();
    assert_eq!(count(&s), 5);
    assert!(s.recovery().in_memory);
    assert!(s.recovery().groups_replayed >= 5, "{:?}", s.recovery());
    assert!(s.check().unwrap().is_ok());
    s.close().unwrap();
    assert_unchanged(dir.path(), &before, "a read-only open changed the store");
    // More pages to recover than 3/4 of a 16-page pool, in small transactions (each fits the
    // pool; together they do not): refused, nothing changed.
    let big = tempfile::tempdir().unwrap();
    {
        let s = Store::open(big.path(), small()).unwrap();
        for i in 0..200u32 {
            let tx = s.write().unwrap();
            tx.table("t")
                .unwrap()
                .insert(&i.to_be_bytes(), &[1u8; 300])
                .unwrap();
            tx.commit().unwrap();
        }
    }
    let big_before = snapshot(big.path());
    let tiny = Config {
        pool_size: 16 * 4096,
        ..ro.clone()
    };
    let e = Store::open(big.path(), tiny).unwrap_err();
    assert!(matches!(e, Error::NeedsRecovery { .. }), "{e}");
    assert!(e.to_string().contains("read-write"), "{e}");
    assert!(snapshot(big.path()) == big_before);
    drop(Store::open(dir.path(), small()).unwrap());
    // Recovered (and checkpointed) by the read-write open: nothing left to do in memory.
    let s = Store::open(dir.path(), ro).unwrap();
    assert_eq!(count(&s), 5);
    assert!(!s.recovery().in_memory);
}

/// On a read-only mount (a loop-mounted ext4 image, as root).
#[test]
fn a_read_only_open_works_on_a_read_only_mount() {
    let run = |cmd: &str, args: &[&str]| -> bool {
        Command::new(cmd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    if String::from_utf8_lossy(&uid).trim() != "0" {
        println!("SKIPPED: a_read_only_open_works_on_a_read_only_mount needs root (loop mount)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("ro.img");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    if !(run("truncate", &["-s", "64M", img_s])
        && run("mkfs.ext4", &["-q", "-F", img_s])
        && run("mount", &["-o", "loop", img_s, mnt_s]))
    {
        println!("SKIPPED: a_read_only_open_works_on_a_read_only_mount: cannot make or mount an ext4 loop image");
        return;
    }
    struct Unmount(String);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt_s.to_string());
    let dir = mnt.join("store");
    let s = Store::open(&dir, small()).unwrap();
    fill(&s, 20);
    s.close().unwrap();
    assert!(
        run("mount", &["-o", "remount,ro", mnt_s]),
        "remount read-only"
    );
    let ro = Config {
        read_only: true,
        ..small()
    };
    let s = Store::open(&dir, ro).unwrap();
    assert_eq!(count(&s), 20);
    drop(s);
    // A read-write open on the read-only mount fails with an error, creating nothing.
    assert!(Store::open(&dir, small()).is_err());
    assert!(matches!(
        Store::open(
            mnt.join("other"),
            Config {
                create: false,
                ..small()
            }
        ),
        Err(Error::NotAStore { .. })
    ));
}

/// What versions before the creation marker left when killed during creation (an empty
/// `store.keel`, an empty data file): every later open failed with "short read". Now it is
/// recognised as an interrupted creation and redone.
#[test]
fn an_empty_identity_from_an_older_interrupted_creation_is_redone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("store.keel"), []).unwrap();
    std::fs::write(dir.path().join("data.keel"), []).unwrap();
    let s = Store::open(dir.path(), small()).unwrap();
    assert!(s.recovery().created);
    fill(&s, 3);
    s.close().unwrap();
    let s = Store::open(dir.path(), small()).unwrap();
    assert_eq!(count(&s), 3);
    // A short identity beside a data file that holds pages is damage, not a creation.
    drop(s);
    std::fs::write(dir.path().join("store.keel"), [1, 2, 3]).unwrap();
    let e = Store::open(dir.path(), small()).unwrap_err();
    assert!(e.is_corruption(), "{e}");
}

/// The same two files — a short `store.keel`, an empty or missing data file — beside a log
/// holding commits are damage, not an older interrupted creation: the open refuses and keeps
/// the log. Before, it removed the log and the doublewrite area and created an empty store,
/// and every acknowledged commit (all of them in the log: no checkpoint had run) was gone.
#[test]
fn a_short_identity_beside_a_log_with_commits_is_refused_not_recreated() {
    for (identity, data) in [(0usize, "deleted"), (10, "empty")] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            checkpoint_interval: std::time::Duration::from_secs(3600),
            ..small()
        };
        let s = Store::open(dir.path(), cfg.clone()).unwrap();
        fill(&s, 50);
        drop(s);
        let ident = dir.path().join("store.keel");
        let bytes = std::fs::read(&ident).unwrap();
        std::fs::write(&ident, &bytes[..identity]).unwrap();
        let data_file = dir.path().join("data.keel");
        if data == "deleted" {
            std::fs::remove_file(&data_file).unwrap();
        } else {
            std::fs::write(&data_file, []).unwrap();
        }
        let log = dir.path().join(keel::LOG_DIR);
        let before = files::snapshot(&log);
        let e = Store::open(dir.path(), cfg.clone())
            .err()
            .unwrap_or_else(|| panic!("identity {identity} bytes, data {data}: opened"));
        assert!(e.is_corruption(), "{e}");
        files::assert_unchanged(&log, &before, "the refused open");
        // The identity put back, the data file is what is missing: refused as before.
        std::fs::write(&ident, &bytes).unwrap();
        assert!(Store::open(dir.path(), cfg).is_err());
    }
}

/// A transaction as large as a pool lets one hold, committed and then crashed (a process
/// kill), replays in a pool of the same size — for every pool of 16 to 40 frames; and a pool
/// too small is refused naming a pool_size that then opens. The run's limit and the replay's
/// were rounded apart (`n * 75 / 100` against `n / 4 * 3`): pools of 18, 19, 22, 23, ...
/// frames committed transactions they refused to replay, and the size the refusal named could
/// be refused again (found by a session's adversarial test of the pool; the crash matrix runs
/// pools of 16 and 24 frames, where the two agree).
#[test]
fn a_transaction_a_pool_committed_replays_in_that_pool() {
    use keel_io::{SimConfig, SimFs};
    use std::sync::Arc;
    let cfg = |frames: usize| Config {
        page_size: 4096,
        pool_size: frames * 4096,
        log_file_size: 4 << 20,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        inline_maintenance: true,
        ..Config::default()
    };
    let dir = std::path::Path::new("/db");
    // A store of `frames` frames that committed the largest value one of its transactions can,
    // then was killed: the file system the next process sees, and the value's length.
    let crashed = |frames: usize| {
        let fs = SimFs::new(SimConfig::seeded(7));
        let store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg(frames)).unwrap();
        store.checkpoint().unwrap();
        let (mut lo, mut hi, mut best) = (1usize, frames * 4096, 0usize);
        while lo <= hi {
            let mid = (lo + hi) / 2;
            let tx = store.write().unwrap();
            match tx.table("t").unwrap().insert(b"probe", &vec![7u8; mid]) {
                Ok(_) => {
                    best = mid;
                    lo = mid + 1;
                }
                Err(e) => {
                    assert!(e.is_too_large(), "{e}");
                    hi = mid - 1;
                }
            }
            tx.abort();
        }
        let tx = store.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(b"big", &vec![9u8; best])
            .unwrap();
        tx.commit().unwrap();
        let post = fs.process_crash();
        drop(store);
        (post, best)
    };
    let replays = |fs: SimFs, c: Config, best: usize| -> Result<(), String> {
        let s = Store::open_with_fs(Arc::new(fs), dir, c).map_err(|e| e.to_string())?;
        let r = s.read().map_err(|e| e.to_string())?;
        let got = r.table("t").and_then(|t| t.get(b"big"));
        match got {
            Ok(Some(v)) if v.len() == best => Ok(()),
            other => Err(format!("read {:?}", other.map(|v| v.map(|v| v.len())))),
        }
    };
    for frames in 16..=40usize {
        let (post, best) = crashed(frames);
        if frames >= 24 {
            // A pool of 16 frames is too small for it (refused, writing nothing): the refusal
            // names one that replays it.
            let e = Store::open_with_fs(Arc::new(post.clone()), dir, cfg(16))
                .err()
                .unwrap_or_else(|| {
                    panic!("{frames} frames: a 16-frame pool replayed {best} bytes")
                });
            let need: usize = e
                .to_string()
                .rsplit("at least ")
                .next()
                .and_then(|t| t.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no pool_size in: {e}"));
            let (again, _) = crashed(frames);
            let named = Config {
                pool_size: need,
                ..cfg(16)
            };
            replays(again, named, best).unwrap_or_else(|e| {
                panic!("{frames} frames: the pool_size named ({need}) did not replay: {e}")
            });
        }
        replays(post, cfg(frames), best)
            .unwrap_or_else(|e| panic!("{frames} frames: the same pool did not replay: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// O_DIRECT by default (issue 14, item 1): on where the file system can, a reasoned fallback where
// it cannot, never an error.

#[test]
fn direct_io_is_on_by_default_and_falls_back_with_a_reason() {
    assert!(Config::default().direct_io, "the default is O_DIRECT");
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), small()).unwrap();
    let e = s.effective();
    let probe = e.probe.clone().expect("the probe ran");
    if probe.direct_io.is_some() {
        assert!(e.direct_io, "{}", e.direct_io_reason);
        assert!(
            e.direct_io_reason.contains("O_DIRECT on"),
            "{}",
            e.direct_io_reason
        );
    } else {
        println!(
            "SKIPPED: {} cannot open O_DIRECT files here; checking the fallback instead",
            probe.filesystem
        );
        assert!(!e.direct_io && e.direct_io_reason.contains("fell back"));
    }
    fill(&s, 50);
    s.close().unwrap();

    // Asked off: off, saying so; the data written with O_DIRECT reads back buffered.
    let s = Store::open(
        d.path(),
        Config {
            direct_io: false,
            ..small()
        },
    )
    .unwrap();
    assert!(!s.effective().direct_io);
    assert!(s.effective().direct_io_reason.contains("configured off"));
    assert_eq!(count(&s), 50);
    drop(s);

    // A file system without O_DIRECT (tmpfs) opens buffered with the reason, not an error.
    let shm = Path::new("/dev/shm");
    let on_tmpfs = keel_io::OsFs::default()
        .capabilities(shm)
        .map(|c| c.direct_io.is_none())
        .unwrap_or(false);
    if !on_tmpfs {
        println!("SKIPPED: no tmpfs without O_DIRECT at /dev/shm to test the fallback on");
        return;
    }
    let t = tempfile::tempdir_in(shm).unwrap();
    let s = Store::open(t.path(), small()).unwrap();
    assert!(!s.effective().direct_io);
    assert!(
        s.effective().direct_io_reason.contains("fell back")
            && s.effective().direct_io_reason.contains("tmpfs"),
        "{}",
        s.effective().direct_io_reason
    );
    fill(&s, 10);
    assert_eq!(count(&s), 10);
}

/// Recovery replays a transaction with all its pages in the pool at once. Reopened with a pool
/// too small for the largest transaction in the log, the open is refused at once with what
/// pool it needs (it used to wait 5 s for a frame and fail with "no free frame"); with that
/// pool it recovers everything.
#[test]
fn recovery_with_a_pool_too_small_for_a_logged_transaction_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let big = Config {
        pool_size: 2048 * 4096,
        log_file_size: 16 << 20,
        ..small()
    };
    {
        let s = Store::open(dir.path(), big.clone()).unwrap();
        for batch in 0..8u32 {
            let tx = s.write().unwrap();
            for i in 0..500u32 {
                let k = (batch * 500 + i).wrapping_mul(2654435761).to_be_bytes();
                tx.table("t").unwrap().insert(&k, &[1u8; 100]).unwrap();
            }
            tx.commit().unwrap();
        }
        s.checkpoint().unwrap();
        // One transaction touching many leaves, only in the log.
        let tx = s.write().unwrap();
        for i in 0..4000u32 {
            let k = i.wrapping_mul(2654435761).to_be_bytes();
            tx.table("t").unwrap().insert(&k, &[2u8; 100]).unwrap();
        }
        tx.commit().unwrap();
        // Dropped without close.
    }
    let tiny = Config {
        pool_size: 16 * 4096,
        ..big.clone()
    };
    let t0 = std::time::Instant::now();
    let e = Store::open(dir.path(), tiny).unwrap_err();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t0.elapsed()
    );
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("pool_size"), "{e}");
    let s = Store::open(dir.path(), big).unwrap();
    let r = s.read().unwrap();
    let t = r.table("t").unwrap();
    assert_eq!(t.len().unwrap(), 4000);
    assert_eq!(t.get(&0u32.to_be_bytes()).unwrap(), Some(vec![2u8; 100]));
}

// ---------------------------------------------------------------------------------------------
// The log sized to the pool (`log_file_size` 0).

/// `log_file_size` 0 gives a new store a log as large as its pool (split over the files); the
/// size is fixed at creation: reopening with another pool keeps it (a size computed from the
/// new pool would not match the log and the open would fail), and an explicit size must still
/// match the log.
#[test]
fn a_pool_sized_log_is_fixed_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |pool: usize, log_file_size: u64| Config {
        pool_size: pool,
        log_file_size,
        ..Config::default()
    };
    let s = Store::open(dir.path(), cfg(160 << 20, 0)).unwrap();
    assert_eq!(s.effective().config.log_file_size, 80 << 20);
    fill(&s, 10);
    s.close().unwrap();
    let sizes = |dir: &Path| -> Vec<u64> {
        let mut v: Vec<u64> = std::fs::read_dir(dir.join(LOG_DIR))
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy() != "log.header")
            .map(|e| e.metadata().unwrap().len())
            .collect();
        v.sort();
        v
    };
    assert_eq!(sizes(dir.path()), vec![80 << 20, 80 << 20]);

    let s = Store::open(dir.path(), cfg(16 << 20, 0)).unwrap();
    assert_eq!(s.effective().config.log_file_size, 80 << 20);
    assert_eq!(count(&s), 10);
    fill(&s, 1);
    s.close().unwrap();
    assert_eq!(sizes(dir.path()), vec![80 << 20, 80 << 20]);

    let Err(e) = Store::open(dir.path(), cfg(16 << 20, 64 << 20)) else {
        panic!("an explicit size that differs from the log's is refused");
    };
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("log_file_size"),
        "{e}"
    );
    // Every setting fixed at creation is a configuration error naming its `Config` key (the
    // log's were `Error::Log` naming its own fields: a tester).
    for (key, config) in [
        (
            "log_block_size",
            Config {
                log_block_size: 512,
                ..cfg(16 << 20, 0)
            },
        ),
        (
            "log_file_count",
            Config {
                log_file_count: 3,
                ..cfg(16 << 20, 0)
            },
        ),
        (
            "log_files",
            Config {
                log_files: keel::LogFileMode::Growing,
                ..cfg(16 << 20, 0)
            },
        ),
    ] {
        for read_only in [false, true] {
            let Err(e) = Store::open(
                dir.path(),
                Config {
                    read_only,
                    ..config.clone()
                },
            ) else {
                panic!("{key} that differs from the store's was accepted");
            };
            assert!(
                matches!(e, Error::Config(_)) && e.to_string().contains(key),
                "{key}: {e}"
            );
        }
    }
}

/// Two stores with the same history — the same configuration and the same transactions, so the
/// same LSNs and checkpoints — differ only in their values (twins: a fleet provisioned by one
/// script, a test and its copy). The data file of one beside the log of the other agrees with it
/// in every LSN, so only an identity of the store tells them apart: the open refuses it, naming
/// the file, and writes nothing. Each of the three pieces that recovery combines (the data
/// file, the log, the doublewrite area) is swapped in turn.
#[test]
fn a_file_of_a_twin_store_is_refused() {
    // A twin closed cleanly, or as a crash leaves it (its files copied while it is open, every
    // commit synced): then recovery has redo to replay and pages to write.
    fn twin(cfg: &Config, byte: u8, crashed: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), cfg.clone()).unwrap();
        for i in 0..200u32 {
            let tx = s.write().unwrap();
            tx.table("t")
                .unwrap()
                .insert(&i.to_be_bytes(), &[byte; 300])
                .unwrap();
            tx.commit().unwrap();
        }
        if crashed {
            let image = tempfile::tempdir().unwrap();
            copy_files(dir.path(), image.path());
            copy_files(&dir.path().join(LOG_DIR), &image.path().join(LOG_DIR));
            drop(s);
            return image;
        }
        s.close().unwrap();
        dir
    }
    for torn_page in [
        TornPage::Doublewrite,
        TornPage::FullPageWrites,
        TornPage::None,
    ] {
        let cfg = Config {
            torn_page,
            ..small()
        };
        let pieces: &[&str] = if torn_page == TornPage::Doublewrite {
            &["data.keel", LOG_DIR, "doublewrite.keel"]
        } else {
            &["data.keel", LOG_DIR]
        };
        for (piece, crashed) in pieces.iter().flat_map(|p| [(p, false), (p, true)]) {
            let a = twin(&cfg, 1, crashed);
            let b = twin(&cfg, 2, false);
            let target = a.path().join(piece);
            if target.is_dir() {
                std::fs::remove_dir_all(&target).unwrap();
                copy_files(&b.path().join(piece), &target);
            } else {
                std::fs::copy(b.path().join(piece), &target).unwrap();
            }
            let before = snapshot(a.path());
            match Store::open(a.path(), cfg.clone()) {
                Ok(s) => {
                    let r = s.read().unwrap();
                    let v = r.table("t").unwrap().get(&0u32.to_be_bytes()).unwrap();
                    panic!(
                        "{torn_page:?}: {piece} of a twin store opened (crashed: {crashed}); row 0 reads {:?}",
                        v.map(|v| v[0])
                    );
                }
                Err(e) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("another store"),
                        "{torn_page:?}: {piece}: {msg}"
                    );
                }
            }
            // Nothing was written: the log was scanned but not started (no new incarnation,
            // no restart block), and the data file and the doublewrite area are as they were.
            let after = snapshot(a.path());
            let changed: Vec<_> = before
                .iter()
                .zip(&after)
                .filter(|(x, y)| x != y)
                .map(|(x, _)| x.0.clone())
                .collect();
            assert!(
                changed.is_empty() && before.len() == after.len(),
                "{torn_page:?}: {piece} (crashed: {crashed}): the open wrote {changed:?}"
            );
        }
    }
}

/// A store made before the meta page recorded its store (bytes 68..72 zero) opens, and its
/// first read-write open records the store: from then on a twin's data file is refused.
#[test]
fn a_store_made_before_the_store_record_adopts_it() {
    let dir = closed_store(50);
    let data = dir.path().join("data.keel");
    let mut bytes = std::fs::read(&data).unwrap();
    assert_ne!(bytes[68..72], [0; 4], "a new store records its store");
    bytes[68..72].fill(0);
    keel_page::seal(&mut bytes[..4096], keel_page::Checksum::Crc32c);
    std::fs::write(&data, &bytes).unwrap();
    let s = Store::open(dir.path(), small()).unwrap();
    assert_eq!(count(&s), 50);
    s.close().unwrap();
    assert_ne!(std::fs::read(&data).unwrap()[68..72], [0; 4], "adopted");
}

/// A growing log with a file missing from its middle (deleted or moved by mistake) or cut short:
/// the commits in the files after it were acknowledged. The open must refuse and leave every
/// remaining file as it was — not end the log at the gap and delete the files after it as a
/// torn tail (which it did, opening with 574 of 600 acknowledged rows: the scan's search for
/// proof that a missing block had been durable stopped at the gap).
#[test]
fn a_growing_log_missing_a_middle_file_is_refused_and_kept() {
    let cfg = Config {
        log_files: keel::LogFileMode::Growing,
        log_file_size: 64 << 10,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        checkpoint_log_fraction: 0.95,
        log_file_count: 64,
        ..small()
    };
    // (file counted from the end, cut to half its length instead of deleted); the last index
    // is the first file, where the scan starts.
    for (gap_from_end, cut) in [
        (1usize, false),
        (2, false),
        (3, false),
        (2, true),
        (usize::MAX, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), cfg.clone()).unwrap();
        fill(&s, 600);
        drop(s); // no clean close: the commits live in the log
        let log = dir.path().join(LOG_DIR);
        let mut files: Vec<_> = std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("log.0")
            })
            .collect();
        files.sort();
        assert!(files.len() >= 5, "{} log files", files.len());
        let gap = files[files.len().saturating_sub(gap_from_end.saturating_add(1))].clone();
        if cut {
            let f = std::fs::OpenOptions::new().write(true).open(&gap).unwrap();
            f.set_len(f.metadata().unwrap().len() / 2).unwrap();
        } else {
            std::fs::remove_file(&gap).unwrap();
        }
        let before = snapshot(dir.path());
        match Store::open(dir.path(), cfg.clone()) {
            Ok(s) => panic!(
                "opened without {} ({} of 600 rows)",
                gap.display(),
                count(&s)
            ),
            Err(e) => assert!(
                e.is_corruption() || matches!(e, Error::Recovery { .. }),
                "{e}"
            ),
        }
        // Nothing added, removed or written: the refused open never started the log.
        assert_unchanged(dir.path(), &before, "the refused open wrote");
    }
}

/// A data file whose page 0 carries an LSN past the log's end (the log lost its durable tail: a
/// growing log's newest file deleted, a log put back from an older copy) is refused before the
/// log starts, so the refusal writes nothing, and once the data file (or the missing log piece)
/// is put back the store opens with every row. The refusal used to come only when the pool
/// read page 0, after the log's start had recorded a new incarnation and a restart block at the
/// recovered end: a lost tail put back then could never be read again (found by `bad_bytes.rs`
/// undoing a deleted growing-log file after the refusal).
#[test]
fn a_page_zero_past_the_end_of_the_log_is_refused_before_the_log_starts() {
    let dir = closed_store(50);
    let path = dir.path().join(keel::layout::DATA_FILE_NAME);
    let original = std::fs::read(&path).unwrap();
    let mut damaged = original.clone();
    let page0 = &mut damaged[..4096];
    keel_page::set_lsn(page0, keel_page::Lsn(1 << 40));
    keel_page::seal(page0, keel_page::Checksum::Crc32c);
    std::fs::write(&path, &damaged).unwrap();
    let before = snapshot(dir.path());
    match Store::open(dir.path(), small()) {
        Ok(_) => panic!("a page 0 past the end of the log opened"),
        Err(e) => assert!(e.to_string().contains("page LSN in the future"), "{e}"),
    }
    assert_unchanged(dir.path(), &before, "the refused open wrote");
    std::fs::write(&path, &original).unwrap();
    let s = Store::open(dir.path(), small()).unwrap();
    assert_eq!(count(&s), 50);
}

/// A path that is a file, not a directory, is refused naming it as such ("Not a directory"),
/// and the file is left as it was (it used to fail as "mkdir ...: File exists").
#[test]
fn a_file_in_place_of_the_directory_is_refused_as_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-dir");
    std::fs::write(&path, b"someone's file").unwrap();
    for read_only in [false, true] {
        let e = Store::open(
            &path,
            Config {
                read_only,
                ..small()
            },
        )
        .map(|_| ())
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("ot a directory") && msg.contains("not-a-dir"),
            "{msg}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"someone's file");
}

/// Atomic writes need O_DIRECT: the data file is opened with it whatever `direct_io` says, and
/// [`keel::Store::effective`] says so (it reported `direct_io: false, "configured off ...: the
/// data file goes through the OS page cache"` for an O_DIRECT file: a tester).
#[test]
fn atomic_writes_report_the_o_direct_they_open_the_data_file_with() {
    let fs = keel_io::SimFs::new(keel_io::SimConfig::seeded(5).hardware_atomic());
    let s = Store::open_with_fs(
        std::sync::Arc::new(fs),
        "/db",
        Config {
            torn_page: keel::TornPage::Atomic,
            direct_io: false,
            page_size: 4096,
            ..Config::default()
        },
    )
    .unwrap();
    let e = s.effective();
    assert!(e.torn_page.contains("Atomic"), "{}", e.torn_page);
    assert!(e.direct_io, "{}", e.direct_io_reason);
    assert!(
        e.direct_io_reason.contains("atomic writes need"),
        "{}",
        e.direct_io_reason
    );
}

/// `Config::for_store` never opens a store unprotected: a store without a doublewrite area
/// (made with full-page writes, atomic writes or none) gets full-page writes, which need no
/// file; one with an area gets doublewrite with the area's batch. (It gave `None`, so a
/// read-write open with it — "whatever settings it was made with" — wrote pages unprotected:
/// a tester.)
#[test]
fn for_store_protects_a_store_without_a_doublewrite_area() {
    for (made, want) in [
        (TornPage::FullPageWrites, TornPage::FullPageWrites),
        (TornPage::None, TornPage::FullPageWrites),
        (TornPage::Doublewrite, TornPage::Doublewrite),
    ] {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(
            d.path(),
            Config {
                torn_page: made,
                doublewrite_batch: 8,
                ..small()
            },
        )
        .unwrap();
        s.close().unwrap();
        let c = Config::for_store(d.path()).unwrap();
        assert_eq!(c.torn_page, want, "made with {made:?}");
        if want == TornPage::Doublewrite {
            assert_eq!(c.doublewrite_batch, 8);
        }
        Store::open(d.path(), c).unwrap().close().unwrap();
    }
}

/// A read-only open that replayed redo in memory keeps the replayed pages dirty in its pool
/// and writes nothing. With many readers in a small pool, a page request found no clean frame
/// and wrote a dirty page itself: refused ("sync refused: opened read-only"), the page writer
/// poisoned, and every later read failed saying data might be lost (a tester: 10 of 10 runs,
/// 12 readers in 16 frames). A read-only pool never writes: it waits for readers' pins.
#[test]
fn a_read_only_store_recovered_in_memory_serves_many_readers_in_a_small_pool() {
    let fs = SimFs::new(SimConfig::seeded(10).sector_size(512));
    let cfg = |pool_pages: usize, read_only: bool| Config {
        page_size: 4096,
        pool_size: pool_pages * 4096,
        log_file_size: 8 << 20,
        direct_io: false,
        read_only,
        ..Config::default()
    };
    let s = Store::open_with_fs(Arc::new(fs.clone()), "/db", cfg(2048, false)).unwrap();
    let w = s.write().unwrap();
    {
        let mut t = w.table("t").unwrap();
        for i in 0u32..20_000 {
            t.insert(&i.to_be_bytes(), &[1u8; 60]).unwrap();
        }
    }
    w.commit().unwrap();
    s.checkpoint().unwrap();
    for j in 0..12u32 {
        let w = s.write().unwrap();
        w.table("t")
            .unwrap()
            .insert(&(j * 1499).to_be_bytes(), &[2u8; 60])
            .unwrap();
        w.commit().unwrap();
    }
    let fs = fs.crash_with(keel_io::CrashPolicy::tear_all());
    drop(s);
    let before = fs.total_bytes();
    let s = Arc::new(Store::open_with_fs(Arc::new(fs.clone()), "/db", cfg(16, true)).unwrap());
    assert!(s.recovery().in_memory);
    let readers: Vec<_> = (0..12u32)
        .map(|th| {
            let s = s.clone();
            std::thread::spawn(move || -> Result<(), String> {
                for round in 0..20u32 {
                    let r = s.read().map_err(|e| e.to_string())?;
                    let t = r.table("t").map_err(|e| e.to_string())?;
                    for i in 0..50u32 {
                        let k = (th * 7919 + round * 101 + i * 397) % 20_000;
                        match t.get(&k.to_be_bytes()) {
                            Ok(Some(_)) => {}
                            other => return Err(format!("key {k}: {other:?}")),
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap().unwrap();
    }
    assert!(!s.is_poisoned());
    assert_eq!(fs.total_bytes(), before, "a read-only store wrote");
}

/// Every row of table "t", in order.
fn rows(store: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    let r = store.read().unwrap();
    let t = r.table("t").unwrap();
    t.range(..).unwrap().map(|kv| kv.unwrap()).collect()
}

/// Writes `n` rows of `byte` over keys 0..n in one transaction per row.
fn overwrite(store: &Store, n: u32, byte: u8) {
    for i in 0..n {
        let tx = store.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&i.to_be_bytes(), &[byte; 300])
            .unwrap();
        tx.commit().unwrap();
    }
}

/// `cp -r from to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn a_copy_given_its_own_identity_refuses_the_originals_files() {
    let root = tempfile::tempdir().unwrap();
    let (orig, copy) = (root.path().join("orig"), root.path().join("copy"));
    let s = Store::open(&orig, small()).unwrap();
    fill(&s, 60);
    s.close().unwrap();
    copy_tree(&orig, &copy);
    let changed = keel::give_new_identity(&copy).unwrap();
    assert_ne!(changed.old, changed.new);
    // The copy is the same store, with every row, and a store of its own.
    let (s, c) = (
        Store::open(&orig, small()).unwrap(),
        Store::open(&copy, small()).unwrap(),
    );
    assert_eq!(rows(&s), rows(&c));
    // Both go on alike in shape (the same LSNs), with other values.
    overwrite(&s, 60, 1);
    overwrite(&c, 60, 2);
    let (want, theirs) = (rows(&s), rows(&c));
    s.close().unwrap();
    c.close().unwrap();
    // Each of the copy's files put in the original (and the data file with its area, a
    // restore of "the data" from a backup): refused, or the original's own rows; never the
    // copy's. Before the copy had its own identity, the data file with its area opened with
    // the copy's rows.
    let log0 = format!("{LOG_DIR}/log.0000000000");
    for names in [
        vec!["data.keel"],
        vec!["doublewrite.keel"],
        vec![log0.as_str()],
        vec!["data.keel", "doublewrite.keel"],
    ] {
        let saved: Vec<_> = names
            .iter()
            .map(|n| std::fs::read(orig.join(n)).unwrap())
            .collect();
        for n in &names {
            std::fs::copy(copy.join(n), orig.join(n)).unwrap();
        }
        match Store::open(&orig, small()) {
            Err(e) => println!("{names:?}: refused: {e}"),
            Ok(s) => {
                let got = rows(&s);
                assert_ne!(
                    got, theirs,
                    "{names:?}: the original opened with the copy's rows"
                );
                assert_eq!(got, want, "{names:?}: the original opened with other rows");
                drop(s);
            }
        }
        for (n, bytes) in names.iter().zip(saved) {
            std::fs::write(orig.join(n), bytes).unwrap();
        }
    }
    // The data file, the file that carries the rows, is refused by name.
    std::fs::copy(copy.join("data.keel"), orig.join("data.keel")).unwrap();
    let e = Store::open(&orig, small())
        .map(drop)
        .expect_err("the copy's data file was opened");
    assert!(e.to_string().contains("another store"), "{e}");
    // A store that was not closed cleanly is refused (its redo may carry the old salt), and
    // left as it was.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "unclean_exit_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KEEL_UNCLEAN_CHILD_DIR", &copy)
        .output()
        .unwrap();
    assert!(out.status.success());
    let before = snapshot(&copy);
    let e = keel::give_new_identity(&copy).unwrap_err();
    assert!(e.to_string().contains("not closed cleanly"), "{e}");
    assert_unchanged(&copy, &before, "a refused new identity");
    let c = Store::open(&copy, small()).unwrap();
    assert_eq!(rows(&c).len(), 60);
    assert!(rows(&c).iter().take(5).all(|(_, v)| v[0] == 3));
}

/// Run by `a_copy_given_its_own_identity_refuses_the_originals_files`: commits to the store in
/// `KEEL_UNCLEAN_CHILD_DIR` and exits without closing it.
#[test]
fn unclean_exit_child() {
    let Some(dir) = std::env::var_os("KEEL_UNCLEAN_CHILD_DIR") else {
        return;
    };
    let s = Store::open(&dir, small()).unwrap();
    overwrite(&s, 5, 3);
    std::process::exit(0);
}

#[test]
fn a_store_directory_moved_while_open_leaves_the_new_store_at_its_path_alone() {
    let growing = || Config {
        page_size: 4096,
        pool_size: 1 << 20,
        log_files: keel::LogFileMode::Growing,
        log_file_size: 64 << 10,
        ..Config::default()
    };
    let put = |s: &Store, k: &str, v: u8| -> keel::Result<()> {
        let tx = s.write()?;
        tx.table("t")?.insert(k.as_bytes(), &[v; 500])?;
        tx.commit()
    };
    let keys = |s: &Store| -> Vec<String> {
        rows(s)
            .into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect()
    };
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let old = Store::open(&a, growing()).unwrap();
    let mut old_acked = Vec::new();
    for i in 0..50 {
        let k = format!("o{i:05}");
        put(&old, &k, 1).unwrap();
        old_acked.push(k);
    }
    // The directory moved under the open store; a new store made at its old path.
    std::fs::rename(&a, &b).unwrap();
    let new = Store::open(&a, growing()).unwrap();
    let new_acked: Vec<String> = (0..50).map(|i| format!("n{i:05}")).collect();
    for k in &new_acked {
        put(&new, k, 2).unwrap();
    }
    // The old store goes on until it needs a file by path: then it refuses, saying why.
    let mut refusal = None;
    for i in 50..1500 {
        let k = format!("o{i:05}");
        match put(&old, &k, 1) {
            Ok(()) => old_acked.push(k),
            Err(e) => {
                refusal = Some(e.to_string());
                break;
            }
        }
    }
    let refusal = refusal.expect("the moved store created files by its old path");
    assert!(refusal.contains("moved"), "{refusal}");
    drop(old);
    new.close().unwrap();
    // Each store opens where it is, with exactly its own acknowledged rows.
    let s = Store::open(&a, growing()).unwrap();
    assert_eq!(keys(&s), new_acked);
    drop(s);
    let s = Store::open(&b, growing()).unwrap();
    assert_eq!(keys(&s), old_acked);
}

/// What a build from before page 0's file-checkpoint record leaves after a store has been
/// back to it (a downgrade): it checkpoints without updating the record (kept stale, as it
/// read it) and writes checkpoint slots without the mark of builds that keep it. Such a store
/// opens, every row there — it was refused for good as "a data file older than the log"
/// (a tester, with builds before 4a1c4d4) — and this build's first checkpoint makes the
/// record and the slot whole again; a slot with the mark still refuses a stale record.
#[test]
fn a_store_an_older_build_checkpointed_opens_and_is_checked_again_after() {
    use keel_redo_log::inspect::{decode_header, Slot, HEADER_BYTES};
    let dir = closed_store(10);
    let (data, header) = (
        dir.path().join("data.keel"),
        dir.path().join(LOG_DIR).join("log.header"),
    );
    let page0 = |path: &Path| std::fs::read(path).unwrap()[..4096].to_vec();
    let stale = keel_page::file_checkpoint(&page0(&data)).expect("page 0 records its checkpoint");
    // The "older build": more commits and a checkpoint, page 0's record put back as it was, the
    // winning slot unmarked.
    let s = Store::open(dir.path(), small()).unwrap();
    fill(&s, 200);
    s.close().unwrap();
    let older_build = || {
        let mut bytes = std::fs::read(&data).unwrap();
        keel_page::set_file_checkpoint(&mut bytes[..4096], stale);
        keel_page::seal(&mut bytes[..4096], keel::Checksum::Crc32c);
        std::fs::write(&data, &bytes).unwrap();
        let mut h = std::fs::read(&header).unwrap();
        let (st, slot) = decode_header(&header, &h[..HEADER_BYTES]).unwrap();
        let unmarked = Slot {
            checkpoint_kept: false,
            ..slot
        };
        let at = Slot::offset(slot.seq) as usize;
        let enc = unmarked.encode(st.salt);
        h[at..at + enc.len()].copy_from_slice(&enc);
        std::fs::write(&header, &h).unwrap();
        assert!(
            !decode_header(&header, &h[..HEADER_BYTES])
                .unwrap()
                .1
                .checkpoint_kept
        );
    };
    older_build();
    for read_only in [true, false] {
        let s = Store::open(
            dir.path(),
            Config {
                read_only,
                ..small()
            },
        )
        .unwrap_or_else(|e| panic!("read_only {read_only}: {e}"));
        assert_eq!(count(&s), 200);
        if !read_only {
            s.close().unwrap();
        }
    }
    // Checkpointed by this build: the record and the mark are back.
    assert!(keel_page::file_checkpoint(&page0(&data)).unwrap() > stale);
    let h = std::fs::read(&header).unwrap();
    assert!(
        decode_header(&header, &h[..HEADER_BYTES])
            .unwrap()
            .1
            .checkpoint_kept
    );
    // A stale record under a marked slot is still an older data file.
    older_build();
    let mut h = std::fs::read(&header).unwrap();
    let (st, slot) = decode_header(&header, &h[..HEADER_BYTES]).unwrap();
    let marked = Slot {
        checkpoint_kept: true,
        ..slot
    };
    let at = Slot::offset(slot.seq) as usize;
    let enc = marked.encode(st.salt);
    h[at..at + enc.len()].copy_from_slice(&enc);
    std::fs::write(&header, &h).unwrap();
    let e = Store::open(dir.path(), small()).map(drop).unwrap_err();
    assert!(e.to_string().contains("older than the log"), "{e}");
}

/// A dangling symbolic link in place of the store's directory is named as such (the open
/// failed with "File exists", from the directory's creation).
#[test]
fn a_dangling_symlink_as_the_store_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("store");
    std::os::unix::fs::symlink(dir.path().join("gone"), &link).unwrap();
    let e = Store::open(&link, small()).map(drop).unwrap_err();
    assert!(
        e.to_string().contains("symbolic link") && e.to_string().contains("gone"),
        "{e}"
    );
}

/// A store another process is still creating (its lock held, the creation marker there) is
/// named as open by that process to a read-only or `create: false` open, not as "only an
/// interrupted creation" (a tester: `keel check` beside a creating process); once the lock is
/// free the same directory is an interrupted creation.
#[test]
fn a_creation_still_running_is_named_as_open_not_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join(keel::layout::CREATING_FILE), b"").unwrap();
    let os = keel_io::OsFs::new(keel_io::Backend::Pwrite);
    let held = keel_io::FileSystem::lock(
        &os,
        &store.join(keel::layout::LOCK_FILE),
        keel_io::LockMode::Exclusive,
    )
    .unwrap();
    for cfg in [
        Config {
            read_only: true,
            ..Config::default()
        },
        Config {
            create: false,
            ..Config::default()
        },
    ] {
        let e = Store::open(&store, cfg).map(drop).unwrap_err();
        assert!(matches!(e, Error::AlreadyOpen { .. }), "{e}");
    }
    drop(held);
    let e = Store::open(
        &store,
        Config {
            read_only: true,
            ..Config::default()
        },
    )
    .map(drop)
    .unwrap_err();
    assert!(e.to_string().contains("interrupted creation"), "{e}");
}
