//! The `keel` binary end to end: a sound store checks clean, damage gives exit status 1 with
//! a line naming the file and page, nothing is ever created or changed, and `info` describes
//! the store.

use keel::{Config, Store, TornPage};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};

fn keel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .expect("run keel")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A closed store with two tables (no doublewrite, so damage to a page is not repaired from
/// its doublewrite copy at open).
fn build(dir: &Path) {
    let store = Store::open(
        dir,
        Config {
            page_size: 4096,
            pool_size: 1 << 20,
            log_file_size: 4 << 20,
            torn_page: TornPage::None,
            ..Config::default()
        },
    )
    .unwrap();
    let tx = store.write().unwrap();
    let mut t = tx.table("orders").unwrap();
    for i in 0u32..2000 {
        t.insert(&i.to_be_bytes(), &[7u8; 90]).unwrap();
    }
    tx.table("empty").unwrap();
    tx.commit().unwrap();
    store.close().unwrap();
}

/// A store whose `commits` one-row transactions (values of `value_len` bytes) are all in the
/// log after the checkpoint: no checkpoint runs, and the store is dropped without a close.
fn logged_store(dir: &Path, commits: u32, value_len: usize) {
    let store = Store::open(
        dir,
        Config {
            page_size: 4096,
            pool_size: 1 << 20,
            log_file_size: 4 << 20,
            checkpoint_interval: std::time::Duration::from_secs(3600),
            ..Config::default()
        },
    )
    .unwrap();
    for i in 0..commits {
        let tx = store.write().unwrap();
        tx.table("t")
            .unwrap()
            .insert(&i.to_be_bytes(), &vec![i as u8; value_len])
            .unwrap();
        tx.commit().unwrap();
    }
}

#[test]
fn a_sound_store_checks_clean_and_info_describes_it() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let d = dir.path().to_str().unwrap();
    let o = keel(&["check", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(": OK: "), "{}", text(&o));
    assert!(text(&o).contains("2 table(s), 2000 rows"), "{}", text(&o));

    let o = keel(&["check", d, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["report"]["tables"][1]["name"], "orders");
    assert_eq!(v["report"]["tables"][1]["rows"], 2000);

    let o = keel(&["info", d, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["identity"]["page_size"], 4096);
    assert_eq!(v["tables"][1]["rows"], 2000);
    assert!(v["meta"]["page_count"].as_u64().unwrap() > 10);
    assert!(v["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["path"] == "data.keel"));
    // The data file's own record of its checkpoint (design invariant 9): the log's, after a
    // clean close.
    assert_eq!(
        v["recovery"]["data_file_checkpoint"],
        v["checkpoint_lsn"],
        "{}",
        text(&o)
    );
    let o = keel(&["info", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("orders"), "{}", text(&o));
    assert!(
        text(&o).contains("data file:  records the checkpoint at LSN"),
        "{}",
        text(&o)
    );
}

/// Output to a reader that goes away ends the tool quietly (before, every `println!` after
/// the reader left panicked on `EPIPE`), and a table name with a control character is shown
/// escaped, not sent raw to the terminal.
#[test]
fn info_into_a_closed_pipe_ends_quietly_and_names_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let store = Store::open(dir.path(), Config::for_store(dir.path()).unwrap()).unwrap();
    let tx = store.write().unwrap();
    for i in 0..200 {
        tx.table(&format!("t{i:03}")).unwrap();
    }
    tx.table("red\u{1b}[31m").unwrap();
    tx.commit().unwrap();
    store.close().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = keel(&["info", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(r#""red\u{1b}[31m""#), "{}", text(&o));
    assert!(!text(&o).contains('\u{1b}'), "{}", text(&o));
    // The reader closes its end at once: every line of `info` meets a closed pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["info", d])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run keel");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait for keel");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert!(
        o.status.success() || o.status.signal() == Some(13),
        "{:?} {stderr}",
        o.status
    );
}

#[test]
fn a_damaged_page_fails_the_check_naming_file_and_page() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let data = dir.path().join("data.keel");
    let before = std::fs::read(&data).unwrap();
    // Page 3 belongs to the orders table (page 0 is the meta page, 1 the catalog root).
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 3 * 4096 + 2000).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], 3 * 4096 + 2000).unwrap();
    drop(f);
    let o = keel(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("data.keel") && out.contains("page 3"), "{out}");
    assert!(out.contains("checksum"), "{out}");
    // `info` says so too, with the same lines, and fails: it described the store as sound,
    // left the damaged table out and exited 0 (a tester).
    let o = keel(&["info", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let info = text(&o);
    assert!(
        info.contains("DAMAGED") && info.contains("page 3"),
        "{info}"
    );
    let o = keel(&["info", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("\"problems\": ["), "{}", text(&o));
    // Pages past the damaged node are not called leaked.
    assert!(!out.contains("leaked (neither used nor free)"), "{out}");
    // The check wrote nothing.
    let after = std::fs::read(&data).unwrap();
    assert_eq!(
        before.iter().zip(&after).filter(|(a, b)| a != b).count(),
        1,
        "only the byte this test flipped differs"
    );
}

#[test]
fn a_directory_without_a_store_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let o = keel(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("not a Keel store"), "{}", text(&o));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let o = keel(&["info", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn a_store_held_by_a_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let cfg = Config {
        page_size: 4096,
        pool_size: 1 << 20,
        log_file_size: 4 << 20,
        torn_page: TornPage::None,
        ..Config::default()
    };
    // A lock `build` just released may still be held for an instant by a child another test
    // thread is spawning (its copy of the file description lives until exec): keel-io's lock
    // grace covers that.
    let store = Store::open(dir.path(), cfg).unwrap();
    let o = keel(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("open"), "{}", text(&o));
    drop(store);
}

#[test]
fn dump_page_decodes_the_meta_page_a_node_and_a_damaged_page() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let d = dir.path().to_str().unwrap();
    let o = keel(&["dump", "page", d, "0", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verify"], "valid");
    assert_eq!(v["header"]["type_name"], "meta");
    assert!(v["body"]["meta"]["page_count"].as_u64().unwrap() > 3);
    // The file checkpoint an open compares with the log's (a refusal names it).
    assert!(v["header"]["file_checkpoint"].as_u64().is_some(), "{v}");
    assert!(text(&keel(&["dump", "page", d, "0"])).contains("file checkpoint: LSN"));
    // Page 2 is the orders table's root (page 1 is the catalog's): an inner node by now.
    let o = keel(&["dump", "page", d, "2", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let node = &v["body"]["node"];
    assert_eq!(node["leaf"], false, "{v}");
    assert_eq!(
        node["children"].as_array().unwrap().len(),
        node["cells"].as_array().unwrap().len() + 1
    );
    let child = node["children"][0].as_u64().unwrap();
    let o = keel(&["dump", "page", d, &child.to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("node: leaf") && out.contains("[0] key 00000000"),
        "{out}"
    );
    // Damaged: exit 1, the verification names the checksum, the header is still shown.
    let data = dir.path().join("data.keel");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    let at = child * 4096 + 3000;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 1], at).unwrap();
    drop(f);
    let o = keel(&["dump", "page", d, &child.to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("DAMAGED") && text(&o).contains("checksum"),
        "{}",
        text(&o)
    );
    // Past the end of the file: a clear error.
    let o = keel(&["dump", "page", d, "999999"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("cannot read page 999999"), "{}", text(&o));
}

#[test]
fn dump_log_shows_the_groups_recovery_would_replay() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path(), 3, 6);
    let d = dir.path().to_str().unwrap();
    let o = keel(&["dump", "log", d, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["header"]["block_size"], 4096);
    let groups = v["groups"].as_array().unwrap();
    assert!(groups.len() >= 3, "{v}");
    let last = groups.last().unwrap();
    assert!(
        last["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["op"] == "write"),
        "{last}"
    );
    assert_eq!(v["end_lsn"], last["end_lsn"]);
    // --from leaves out the groups ending at or before it.
    let cut = groups[groups.len() - 2]["end_lsn"].as_u64().unwrap();
    let o = keel(&["dump", "log", d, "--from", &cut.to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["groups"].as_array().unwrap().len(), 1, "{v}");
    let o = keel(&["dump", "log", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("end: LSN"), "{}", text(&o));
}

/// A store with the default settings (doublewrite, 16 KiB pages), closed: `keel check` opens it
/// with its own settings, reads the doublewrite area and reports a damaged slot directory.
#[test]
fn a_default_store_checks_clean_and_a_damaged_doublewrite_directory_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), Config::default()).unwrap();
        let tx = store.write().unwrap();
        let mut t = tx.table("t").unwrap();
        for i in 0u32..3000 {
            t.insert(&i.to_be_bytes(), &[3u8; 200]).unwrap();
        }
        tx.commit().unwrap();
        store.close().unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let o = keel(&["check", d, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let dw = &v["report"]["doublewrite"];
    assert_eq!(dw["slots_scanned"], 8, "{v}");
    assert!(dw["slots_valid"].as_u64().unwrap() >= 1, "{v}");
    // Damage the directory of the first slot that holds a batch (docs/format.md: header 4096
    // bytes, then slots of dir_len + batch × page size; 16 KiB pages, batch 128: dir_len 8192).
    let area = dir.path().join("doublewrite.keel");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&area)
        .unwrap();
    let stride = 8192 + 128 * 16384u64;
    let slot = (0..8u64)
        .find(|i| {
            let mut m = [0u8; 8];
            f.read_exact_at(&mut m, 4096 + i * stride).unwrap();
            &m == b"KEELDWSL"
        })
        .expect("a slot holds a batch");
    let at = 4096 + slot * stride + 40; // a reserved byte inside the directory checksum
    f.write_all_at(&[0x5a], at).unwrap();
    drop(f);
    let o = keel(&["check", d]);
    let out = text(&o);
    assert!(
        out.contains("warning:") && out.contains(&format!("slot {slot}")),
        "{out}"
    );
}

/// A damaged log block in the replay range, with later blocks that prove it was durable, is a
/// corrupt middle: the check refuses the store and says so.
#[test]
fn a_damaged_log_block_in_the_replay_range_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path(), 40, 1000);
    let log = dir.path().join("log").join("log.0000000000");
    let bytes = std::fs::read(&log).unwrap();
    let last = (0..bytes.len() / 4096)
        .rev()
        .find(|b| bytes[b * 4096..(b + 1) * 4096].iter().any(|&x| x != 0))
        .unwrap();
    assert!(last >= 6, "the groups fill several blocks ({last})");
    let victim = last - 3;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&log)
        .unwrap();
    let at = (victim * 4096 + 1000) as u64;
    f.write_all_at(&[bytes[victim * 4096 + 1000] ^ 0x20], at)
        .unwrap();
    drop(f);
    let o = keel(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("log.0000000000"), "{out}");
}

/// A store that needs recovery (commits only in the log): `keel info` says so and what
/// recovery would do, computed in memory; `keel check` checks the recovered state; neither
/// changes a byte, and the rows they count are the committed ones.
#[test]
fn a_store_that_needs_recovery_is_recovered_in_memory_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path(), 12, 50);
    let snapshot = |d: &Path| -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        for sub in [d.to_path_buf(), d.join("log")] {
            for e in std::fs::read_dir(&sub).unwrap().flatten() {
                if e.path().is_file() {
                    out.push((e.path(), std::fs::read(e.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    };
    let before = snapshot(dir.path());
    let d = dir.path().to_str().unwrap();
    let o = keel(&["info", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("recovery:   needed (computed in memory, nothing applied): replay 1"),
        "{}",
        text(&o)
    );
    let o = keel(&["info", d, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["recovery"]["in_memory"], true, "{v}");
    assert!(
        v["recovery"]["groups_replayed"].as_u64().unwrap() >= 12,
        "{v}"
    );
    let t = v["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "t")
        .unwrap();
    assert_eq!(t["rows"], 12, "{v}");
    let o = keel(&["check", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(snapshot(dir.path()) == before, "the tool changed the store");
    // After a read-write open has recovered it, nothing is left to do.
    drop(Store::open(dir.path(), Config::for_store(dir.path()).unwrap()).unwrap());
    let o = keel(&["info", d]);
    assert!(text(&o).contains("recovery:   not needed"), "{}", text(&o));
}

/// `keel backup` copies a store this process is writing (another process, as far as the tool
/// is concerned: the store's lock is held here the whole time) while checkpoints and page
/// writes run. Each copy checks clean with `keel check` and holds exactly the commits up to one
/// point: transaction i inserts key i and sets the counter row to i, so a copy with counter n
/// holds keys 0..=n and nothing else, each with its value, and n is at least the commits
/// acknowledged before the backup began. Key i leads with a hash of i, so inserts land all over
/// the tree and leaf splits are made as page copies (asserted), which a fuzzy data copy can
/// read out of order (the backup must read those pages again).
///
/// Five configurations: the default's doublewrite and preallocated log with 4 KiB blocks; 512-byte
/// blocks; full-page writes on 16 KiB pages; the legacy page checksum; a growing log of small
/// files (made and removed behind each checkpoint while the backup copies).
#[test]
fn a_hot_backup_under_a_writing_process_is_consistent() {
    let base = Config {
        page_size: 4096,
        pool_size: 1 << 20,
        log_file_size: 4 << 20,
        checkpoint_interval: std::time::Duration::from_millis(30),
        ..Config::default()
    };
    let (_, copies) = hot_backups(base.clone());
    assert!(
        copies > 0,
        "the writer made no page copies: the backups never met a split made as one"
    );
    hot_backups(Config {
        log_block_size: 512,
        ..base.clone()
    });
    // Full-page writes (the log carries page images) on 16 KiB pages, and the legacy checksum.
    hot_backups(Config {
        page_size: 16384,
        pool_size: 4 << 20,
        torn_page: TornPage::FullPageWrites,
        ..base.clone()
    });
    hot_backups(Config {
        checksum: keel::Checksum::Legacy,
        ..base.clone()
    });
    // Files of 64 KiB, removed behind the checkpoints while the backups copy (every backup
    // failed before the backup held them open; the unit test
    // `a_growing_log_s_files_removed_during_the_backup_are_read_from_the_held_files` makes
    // the removal certain).
    let (removed, _) = hot_backups(Config {
        log_files: keel::LogFileMode::Growing,
        log_file_size: 64 << 10,
        ..base
    });
    eprintln!("hot backups of a growing log: {removed} log files removed during them");
}

/// Three hot backups of a store written meanwhile (see the test above); returns how many log
/// files the source removed during them and how many page copies (splits) the writer made.
fn hot_backups(config: Config) -> (u64, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    eprintln!(
        "hot backups: {:?} log, {}-byte blocks, {:?}, {}-byte pages, {:?} checksum",
        config.log_files,
        config.log_block_size,
        config.torn_page,
        config.page_size,
        config.checksum
    );
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), config).unwrap());
    let value = |i: u32| vec![(i % 251) as u8; 40 + (i as usize * 37) % 1500];
    let key = |i: u32| {
        let mut k = [0u8; 8];
        k[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
        k[4..].copy_from_slice(&i.to_be_bytes());
        k
    };
    let acked = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, acked, stop) = (store.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let tx = store.write().unwrap();
                {
                    let mut t = tx.table("rows").unwrap();
                    t.insert(&key(i), &value(i)).unwrap();
                    t.insert(b"counter", &i.to_be_bytes()).unwrap();
                }
                tx.commit().unwrap();
                acked.store(i + 1, Ordering::SeqCst);
                i += 1;
            }
        })
    };
    while acked.load(Ordering::SeqCst) < 2000 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let backups = tempfile::tempdir().unwrap();
    let mut removed = 0;
    for round in 0..3 {
        let before = acked.load(Ordering::SeqCst);
        let dest = backups.path().join(format!("copy{round}"));
        let o = keel(&[
            "backup",
            dir.path().to_str().unwrap(),
            dest.to_str().unwrap(),
            "--json",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let o = keel(&["check", dest.to_str().unwrap()]);
        assert!(o.status.success(), "backup {round}: {}", text(&o));
        let copy = Store::open(&dest, Config::for_store(&dest).unwrap()).unwrap();
        let r = copy.read().unwrap();
        let t = r.table("rows").unwrap();
        let n = u32::from_be_bytes(t.get(b"counter").unwrap().unwrap().try_into().unwrap());
        assert!(
            n + 1 >= before,
            "backup {round}: counter {n}, {before} acknowledged before it"
        );
        let mut keys = 0u32;
        for row in t.range(..).unwrap() {
            let (k, v) = row.unwrap();
            if k == b"counter" {
                continue;
            }
            let i = u32::from_be_bytes(k[4..].try_into().unwrap());
            assert_eq!(k, key(i), "backup {round}: a key not of the writer's");
            assert!(i <= n, "backup {round}: key {i} past the counter {n}");
            assert_eq!(v, value(i), "backup {round}: key {i}");
            keys += 1;
        }
        assert_eq!(keys, n + 1, "backup {round}: keys 0..={n}");
        eprintln!("backup {round}: counter {n}, {before} acknowledged before; {rep}");
        removed += rep["log_files_removed"].as_u64().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    (removed, store.stats().pool.page_copies)
}

/// `keel backup` syncs the directory it created DEST in, and each directory above that it had to
/// create: without that a power loss after "backup OK" may lose the copy's name on a file system
/// that does not order a new directory's entry before later fsyncs. ext4 and XFS do order it
/// (their journal commits the entry with the copy's first fsync), so no crash image here can
/// fail on it; the system calls show it: under strace, each parent is opened after its child's
/// `mkdir` and that descriptor fsynced before it is closed.
#[test]
fn a_backup_syncs_the_directories_it_created() {
    if Command::new("strace").arg("-V").output().is_err() {
        println!(
            "SKIPPED: a_backup_syncs_the_directories_it_created: strace not found (Debian package strace)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    build(&src);
    // Neither exists: the backup creates both.
    let parent = tmp.path().join("backups");
    let dest = parent.join("copy");
    let trace = tmp.path().join("trace");
    let o = Command::new("strace")
        // One file per thread (`-ff`): a thread's calls in order, none interleaved.
        .args([
            "-ff",
            "-qq",
            "-e",
            "trace=mkdir,mkdirat,openat,fsync,close",
            "-o",
        ])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_keel"))
        .arg("backup")
        .arg(&src)
        .arg(&dest)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let threads: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("trace.")
        })
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(!threads.is_empty(), "no trace written");
    for (dir, child) in [
        (tmp.path(), parent.as_path()),
        (parent.as_path(), dest.as_path()),
    ] {
        assert!(
            threads.iter().any(|t| synced_after_mkdir(t, dir, child)),
            "{} not fsynced after the mkdir of {}",
            dir.display(),
            child.display()
        );
    }
}

/// Whether one thread's strace output `trace` shows `dir` opened after the `mkdir` of `child`,
/// and that descriptor fsynced before it was closed.
fn synced_after_mkdir(trace: &str, dir: &Path, child: &Path) -> bool {
    let quoted = |p: &Path| format!("\"{}\"", p.display());
    let lines: Vec<&str> = trace.lines().collect();
    let Some(made) = lines
        .iter()
        .position(|l| l.contains("mkdir") && l.contains(&quoted(child)))
    else {
        return false;
    };
    lines.iter().enumerate().skip(made).any(|(i, l)| {
        if !(l.contains("openat(") && l.contains(&quoted(dir))) {
            return false;
        }
        let Some(fd) = l
            .rsplit("= ")
            .next()
            .and_then(|x| x.trim().parse::<i32>().ok())
        else {
            return false;
        };
        for m in &lines[i + 1..] {
            if m.contains(&format!("fsync({fd})")) {
                return true;
            }
            if m.contains(&format!("close({fd})")) {
                return false;
            }
        }
        false
    })
}

/// Writes the files of the store at `/db` on `fs` (a SimFs after a crash) into `to`.
fn dump_sim(fs: &keel_io::SimFs, to: &Path) {
    for f in fs.files().unwrap() {
        let rel = f.strip_prefix("/db").unwrap();
        if rel.as_os_str() == keel::layout::LOCK_FILE {
            continue;
        }
        let p = to.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, fs.contents(&f).unwrap()).unwrap();
    }
    std::fs::create_dir_all(to.join(keel::LOG_DIR)).unwrap();
}

/// The rows of table `t` of the store in `dir`, opened read-write (recovered) and checked.
fn rows_after_recovery(dir: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let s = Store::open(dir, Config::for_store(dir).unwrap()).unwrap();
    let r = s.read().unwrap();
    let rows = match r.table("t") {
        Ok(t) => t.range(..).unwrap().map(|kv| kv.unwrap()).collect(),
        Err(keel::Error::TableNotFound(_)) => Vec::new(),
        Err(e) => panic!("{e}"),
    };
    let check = s.check().unwrap();
    assert!(check.is_ok(), "{:?}", check.problems);
    rows
}

/// A store that lost power and was not opened since is at rest: its torn pages stay torn
/// however often they are read, and the store repairs them at its next open (from its
/// doublewrite area or from redo). `keel backup` of it used to fail, naming the source damaged
/// ("page N stays damaged in the source after 100 re-reads"), for a store `keel check` passes
/// and that opens with every acknowledged row (a tester: 15 of 80 power-loss images). It now
/// holds the store's lock, copies the torn pages and the doublewrite area, and the copy's
/// recovery repairs them as the source's would: the copy holds exactly the rows the source
/// recovers to.
#[test]
fn a_backup_of_a_crashed_store_repairs_its_torn_pages_as_the_store_would() {
    use keel_io::{CrashPolicy, SimConfig, SimFs};
    use std::sync::Arc;
    let mut torn_seen = 0;
    for seed in 0..12u64 {
        let cfg = Config {
            page_size: 4096,
            pool_size: 24 * 4096,
            torn_page: if seed % 3 == 2 {
                TornPage::FullPageWrites
            } else {
                TornPage::Doublewrite
            },
            doublewrite_batch: 4,
            log_file_size: 512 * 1024,
            inline_maintenance: true,
            ..Config::default()
        };
        let fs = SimFs::new(SimConfig::seeded(seed).hardware_atomic());
        let store = Store::open_with_fs(Arc::new(fs.clone()), "/db", cfg).unwrap();
        fs.crash_at_call(200 + seed * 7 % 800, Some(CrashPolicy::tear_all()));
        let mut x = seed;
        for i in 0..400u64 {
            let r = (|| {
                let tx = store.write()?;
                {
                    let mut t = tx.table("t")?;
                    for _ in 0..4 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let k = format!("k{:04}", (x >> 33) % 400).into_bytes();
                        t.insert(&k, &vec![i as u8; ((x >> 20) % 900) as usize])?;
                    }
                }
                tx.commit()
            })();
            if r.is_err() {
                break;
            }
        }
        let post = fs.crash_or_crashed_into();
        drop(store);
        let tmp = tempfile::tempdir().unwrap();
        let (src, twin, dest) = (
            tmp.path().join("src"),
            tmp.path().join("twin"),
            tmp.path().join("copy"),
        );
        dump_sim(&post, &src);
        dump_sim(&post, &twin);
        let o = keel(&[
            "backup",
            src.to_str().unwrap(),
            dest.to_str().unwrap(),
            "--json",
        ]);
        assert!(o.status.success(), "seed {seed}: {}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["at_rest"], true, "{v}");
        torn_seen += v["torn_pages_left_for_recovery"]
            .as_array()
            .map_or(0, Vec::len);
        assert_eq!(
            rows_after_recovery(&dest),
            rows_after_recovery(&twin),
            "seed {seed}: the copy differs from the source's own recovery"
        );
    }
    assert!(
        torn_seen > 0,
        "no case left a torn page: the test tests nothing"
    );
}

/// Damage the tools met with the wrong words or with an abort (a tester): a missing log header
/// was reported as a page-size mismatch (the tool fell back to the default page size and
/// blamed it); a damaged checkpoint block of a store nobody has open made `backup` blame a
/// writer filling the log too fast; a log file grown (sparse) to 64 GiB made `dump log` and
/// `backup` allocate 64 GiB, and aborted them.
#[test]
fn damaged_logs_are_named_as_damage_and_never_read_past_the_log() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path(), 12, 50);
    let d = dir.path().to_str().unwrap();
    let log = dir.path().join(keel::LOG_DIR);

    // A log file grown far past the header's file size: read no further than the log.
    let f0 = log.join("log.0000000000");
    let len = std::fs::metadata(&f0).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f0)
        .unwrap()
        .set_len(64 << 30)
        .unwrap();
    let o = keel(&["dump", "log", d]);
    assert!(o.status.success(), "{}", text(&o));
    let dest = dir.path().with_extension("copy");
    let o = keel(&["backup", d, dest.to_str().unwrap()]);
    assert!(!text(&o).contains("memory allocation"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f0)
        .unwrap()
        .set_len(len)
        .unwrap();

    // The checkpoint's block damaged, nobody writing: damage, not a race.
    let header = std::fs::read(log.join("log.header")).unwrap();
    let mut bytes = std::fs::read(&f0).unwrap();
    let saved = bytes.clone();
    let first = 0;
    bytes[first + 200] ^= 1;
    std::fs::write(&f0, &bytes).unwrap();
    let o = keel(&["backup", d, dest.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("damaged") && !text(&o).contains("faster"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::write(&f0, &saved).unwrap();

    // The log header missing: named, not the page size.
    std::fs::remove_file(log.join("log.header")).unwrap();
    for cmd in ["info", "check"] {
        let o = keel(&[cmd, d]);
        assert!(!o.status.success());
        assert!(
            text(&o).contains("log.header") && !text(&o).contains("page_size"),
            "{cmd}: {}",
            text(&o)
        );
    }
    std::fs::write(log.join("log.header"), header).unwrap();
    let o = keel(&["check", d]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Runs `keel args`, killing it after 30 s: `None` if it had to be killed (it hung).
fn keel_within_30s(args: &[&str]) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run keel");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn a_fifo_in_place_of_a_store_file_is_refused_not_waited_on() {
    if !Command::new("mkfifo")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("SKIPPED: mkfifo is not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path(), 12, 50);
    let d = dir.path().to_str().unwrap();
    let files = [
        "store.keel".to_string(),
        "data.keel".to_string(),
        "doublewrite.keel".to_string(),
        "LOCK".to_string(),
        format!("{}/log.header", keel::LOG_DIR),
        format!("{}/log.0000000000", keel::LOG_DIR),
    ];
    for name in &files {
        let path = dir.path().join(name);
        assert!(path.exists(), "{name}");
        let saved = path.with_extension("saved");
        std::fs::rename(&path, &saved).unwrap();
        assert!(Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success());
        let dest = dir.path().with_extension("copy");
        for args in [
            vec!["info", d],
            vec!["check", d],
            vec!["dump", "log", d],
            vec!["dump", "page", d, "0"],
            vec!["backup", d, dest.to_str().unwrap()],
        ] {
            let o = keel_within_30s(&args)
                .unwrap_or_else(|| panic!("keel {args:?} hung on a FIFO as {name}"));
            // LOCK is not read by `dump`; every other file a command reads is refused.
            if o.status.success() {
                assert!(!text(&o).contains("FIFO"), "{args:?}: {}", text(&o));
            } else if !text(&o).contains("FIFO") {
                panic!("keel {args:?} with a FIFO as {name}: {}", text(&o));
            }
            let _ = std::fs::remove_dir_all(&dest);
        }
        // The store itself, read-only and read-write: refused, not hung.
        for read_only in [true, false] {
            let p = dir.path().to_path_buf();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let cfg = Config {
                    read_only,
                    page_size: 4096,
                    pool_size: 1 << 20,
                    log_file_size: 4 << 20,
                    ..Config::default()
                };
                let _ = tx.send(Store::open(&p, cfg).map(drop).map_err(|e| e.to_string()));
            });
            let r = rx
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("Store::open (read_only {read_only}) hung on {name}"));
            let e = r.expect_err("a store with a FIFO for a file opened");
            assert!(e.contains("FIFO"), "{name}: {e}");
        }
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(&saved, &path).unwrap();
    }
    let o = keel(&["check", d]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_backup_is_a_store_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let d = dir.path().to_str().unwrap();
    let dest = dir.path().with_extension("own");
    let o = keel(&["backup", d, dest.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("identity 0x"), "{}", text(&o));
    let salt = |d: &Path| {
        let h = std::fs::read(d.join(keel::LOG_DIR).join("log.header")).unwrap();
        keel_redo_log::inspect::decode_header(d, &h).unwrap().0.salt
    };
    assert_ne!(salt(dir.path()), salt(&dest));
    let cfg = || Config {
        page_size: 4096,
        pool_size: 1 << 20,
        log_file_size: 4 << 20,
        torn_page: TornPage::None,
        ..Config::default()
    };
    // The backup opens with the source's rows; its data file put in the source is refused.
    let rows = |d: &Path| -> Vec<(Vec<u8>, Vec<u8>)> {
        let s = Store::open(d, cfg()).unwrap();
        let r = s.read().unwrap();
        let t = r.table("orders").unwrap();
        t.range(..).unwrap().map(|kv| kv.unwrap()).collect()
    };
    assert_eq!(rows(dir.path()), rows(&dest));
    assert!(!dest.join(keel::layout::BACKUP_STAGING_DIR).exists());
    // A backup stopped before it moved the copy up leaves its staging directory: no open takes
    // that for an empty directory (one made a new, empty store there: a tester).
    let stopped = dir.path().with_extension("stopped");
    let staging = stopped.join(keel::layout::BACKUP_STAGING_DIR);
    std::fs::create_dir_all(staging.join(keel::LOG_DIR)).unwrap();
    std::fs::copy(dest.join("data.keel"), staging.join("data.keel")).unwrap();
    let e = Store::open(&stopped, cfg())
        .map(drop)
        .expect_err("an interrupted backup opened as a new store");
    assert!(e.to_string().contains("interrupted"), "{e}");
    assert!(!stopped.join("store.keel").exists() && !stopped.join("data.keel").exists());
    let _ = std::fs::remove_dir_all(&stopped);
    std::fs::copy(dest.join("data.keel"), dir.path().join("data.keel")).unwrap();
    let e = Store::open(dir.path(), cfg())
        .map(drop)
        .expect_err("the backup's data file was opened");
    assert!(e.to_string().contains("another store"), "{e}");
    let _ = std::fs::remove_dir_all(&dest);
}

/// A backup that fails while it builds its copy (here: the source's data file is a FIFO, read
/// after the staging directory was made) leaves the destination as it found it, so the same
/// command runs again once the cause is gone; a staging directory left by a backup that was
/// killed is named as such (it was refused only as "not empty", and a failed build left it
/// behind, holding room on a full destination: a tester).
#[test]
fn a_failed_backup_leaves_nothing_and_a_killed_ones_copy_is_named() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let d = dir.path().to_str().unwrap();
    let dest = dir.path().with_extension("retry");
    let data = dir.path().join("data.keel");
    let saved = data.with_extension("saved");
    std::fs::rename(&data, &saved).unwrap();
    let fifo = Command::new("mkfifo").arg(&data).status();
    if fifo.is_ok_and(|s| s.success()) {
        let o = keel(&["backup", d, dest.to_str().unwrap()]);
        assert!(!o.status.success(), "{}", text(&o));
        assert!(
            !dest.join(keel::layout::BACKUP_STAGING_DIR).exists(),
            "the failed backup left its copy: {}",
            text(&o)
        );
        std::fs::remove_file(&data).unwrap();
    } else {
        println!("SKIPPED: mkfifo is not available; the failed build is untested");
    }
    std::fs::rename(&saved, &data).unwrap();
    let o = keel(&["backup", d, dest.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    // A killed backup's staging directory, alone in DEST.
    let killed = dir.path().with_extension("killed");
    std::fs::create_dir_all(killed.join(keel::layout::BACKUP_STAGING_DIR)).unwrap();
    let o = keel(&["backup", d, killed.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("did not finish") && text(&o).contains("remove it"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dest);
    let _ = std::fs::remove_dir_all(&killed);
}
