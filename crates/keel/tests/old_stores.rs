//! Stores written by older builds of Keel open with every row, in every format version the log
//! header says this build reads, and go on working: the inputs no other test gives are files
//! that an earlier build wrote. Every other test makes its store with this build, so a change
//! that reads an old store differently (a field older builds left zero, a flag they never set,
//! a record type they wrote another way) passes all of them; real stores are made by old builds.
//!
//! `tests/fixtures/old_stores.tar.gz` holds sixteen store directories made by four builds (the
//! last commit before each log format change, and the last before session 37's header record):
//! log format 1 (`046e936`), 2 (`5d6a3ed`), 3 (`eb6f91d`) and 4 (`90f4fb0`); each closed cleanly
//! (`clean`), left by a process that exited without closing after commits the data file does
//! not hold (`crashed`: an open must replay the old build's redo), the same with growing log
//! files (`crashed-growing`), and the durable files of the old build's simulated machine after a
//! power loss during page writes (`powerloss`: pages torn, repaired from the old build's
//! doublewrite area, which has no store mark; the commits acknowledged are in its `acked`).
//! How they were made — the program and the commands — is in `tests/fixtures/README.md`; the
//! rows are [`expected`] and [`after_powerloss`].
//!
//! Each is opened read-only first (every row, nothing written), then read-write (every row,
//! `Store::check` clean, a crashed one replayed), written to (an insert, an update, a remove, a
//! new table, an overflow value), closed, and opened again with the new rows — in the old
//! build's log format, which this build keeps writing.

#[path = "common/files.rs"]
mod files;

use keel::{Config, LogFileMode, Store};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

type Tables = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

fn key(t: u8, i: u32) -> Vec<u8> {
    format!("{}{:06}", t as char, i).into_bytes()
}

/// The fixture program's values: every 40th from 7 on an overflow chain of 9,000–13,000 bytes.
fn value(t: u8, i: u32) -> Vec<u8> {
    let len = if i % 40 == 7 {
        9000 + (i as usize % 5) * 1000
    } else {
        10 + (i as usize * 37) % 200
    };
    (0..len)
        .map(|j| {
            (j as u32)
                .wrapping_mul(31)
                .wrapping_add(i)
                .wrapping_add(t as u32) as u8
        })
        .collect()
}

/// What every fixture holds: `a` rows 0..200 (0..60 updated after the checkpoint), `b` the rows
/// of 0..200 with i % 3 == 0, `c` rows 0..30.
fn expected() -> Tables {
    let mut t = Tables::new();
    let a = t.entry("a".into()).or_default();
    for i in 0..200 {
        let v = if i < 60 {
            value(b'A', i)
        } else {
            value(b'a', i)
        };
        a.insert(key(b'a', i), v);
    }
    let b = t.entry("b".into()).or_default();
    for i in (0..200).filter(|i| i % 3 == 0) {
        b.insert(key(b'b', i), value(b'b', i));
    }
    let c = t.entry("c".into()).or_default();
    for i in 0..30 {
        c.insert(key(b'c', i), value(b'c', i));
    }
    t
}

/// What a power-loss fixture holds after `k` commits of its second phase: `a` rows 0..7k
/// updated, `b` as in [`expected`], `c` rows 0..k.
fn after_powerloss(k: u32) -> Tables {
    let mut t = expected();
    let a = t.get_mut("a").unwrap();
    for i in 0..200 {
        let v = if i < 7 * k {
            value(b'A', i)
        } else {
            value(b'a', i)
        };
        a.insert(key(b'a', i), v);
    }
    let c = t.get_mut("c").unwrap();
    c.clear();
    for i in 0..k {
        c.insert(key(b'c', i), value(b'c', i));
    }
    t
}

/// Every table of `store` with its rows, by a forward scan, checked against a reverse scan
/// and a get of every key.
fn contents(store: &Store) -> Tables {
    let r = store.read().unwrap();
    let mut out = Tables::new();
    for name in r.list_tables().unwrap() {
        let t = r.table(&name).unwrap();
        let rows: BTreeMap<Vec<u8>, Vec<u8>> = t.range(..).unwrap().map(|x| x.unwrap()).collect();
        let mut back: Vec<(Vec<u8>, Vec<u8>)> =
            t.range(..).unwrap().rev().map(|x| x.unwrap()).collect();
        back.reverse();
        assert!(
            back.iter().cloned().eq(rows.clone()),
            "table {name}: reverse scan differs"
        );
        for (k, v) in &rows {
            assert_eq!(t.get(k).unwrap().as_ref(), Some(v), "table {name}: get");
        }
        out.insert(name, rows);
    }
    out
}

/// The files of `tests/fixtures/old_stores.tar.gz` (a ustar archive, gzipped): path → bytes.
fn archive() -> BTreeMap<PathBuf, Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/old_stores.tar.gz");
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut tar)
        .unwrap();
    let mut files = BTreeMap::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        let field = |r: std::ops::Range<usize>| {
            let f = &h[r];
            let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
            String::from_utf8(f[..end].to_vec()).unwrap()
        };
        let name = format!(
            "{}{}",
            match field(345..500) {
                p if p.is_empty() => String::new(),
                p => format!("{p}/"),
            },
            field(0..100)
        );
        let size = usize::from_str_radix(field(124..136).trim(), 8).unwrap();
        let data = at + 512;
        if h[156] == b'0' || h[156] == 0 {
            files.insert(PathBuf::from(name), tar[data..data + size].to_vec());
        }
        at = data + size.div_ceil(512) * 512;
    }
    files
}

/// The configuration this build opens fixture `name` with: the fixture program's, with the
/// log file size left to the store (0: read from its header).
fn config(name: &str) -> Config {
    Config {
        page_size: 4096,
        pool_size: 64 * 4096,
        doublewrite_batch: 4,
        log_files: if name.ends_with("growing") {
            LogFileMode::Growing
        } else {
            LogFileMode::Preallocated
        },
        log_file_size: 0,
        log_file_count: 2,
        ..Config::default()
    }
}

/// The log format version in `dir`'s log header.
fn log_version(dir: &Path) -> u32 {
    let h = std::fs::read(dir.join(keel::LOG_DIR).join("log.header")).unwrap();
    u32::from_le_bytes(h[8..12].try_into().unwrap())
}

#[test]
fn stores_written_by_older_builds_open_with_every_row_and_go_on() {
    let files = archive();
    let mut fixtures: BTreeMap<String, Vec<(PathBuf, &Vec<u8>)>> = BTreeMap::new();
    for (p, bytes) in &files {
        let mut parts = p.components();
        let top = parts
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        fixtures
            .entry(top)
            .or_default()
            .push((parts.as_path().to_path_buf(), bytes));
    }
    assert_eq!(fixtures.len(), 16, "fixtures: {:?}", fixtures.keys());
    let mut versions = std::collections::BTreeSet::new();
    for (name, entries) in &fixtures {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(name);
        // A power-loss fixture: the commits of its second phase acknowledged before the power
        // failed (the one in flight may have been made durable too).
        let acked: Option<u32> = entries
            .iter()
            .find(|(rel, _)| rel == Path::new("acked"))
            .map(|(_, b)| String::from_utf8_lossy(b).trim().parse().unwrap());
        let allowed: Vec<(u32, Tables)> = match acked {
            Some(k) => vec![(k, after_powerloss(k)), (k + 1, after_powerloss(k + 1))],
            None => vec![(0, expected())],
        };
        let which = |got: &Tables| allowed.iter().find(|(_, t)| t == got).map(|(k, _)| *k);
        for (rel, bytes) in entries {
            if rel == Path::new("acked") {
                continue;
            }
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
        }
        let version = log_version(&dir);
        assert_eq!(
            format!("v{version}"),
            name[..2],
            "{name}: the log header says format {version}"
        );
        versions.insert(version);
        let crashed = name.contains("crashed");

        // Read-only: every row, nothing written (a crashed one recovered in memory).
        let before = files::snapshot(&dir);
        let ro = Store::open(
            &dir,
            Config {
                read_only: true,
                ..config(name)
            },
        )
        .unwrap_or_else(|e| panic!("{name}: read-only open: {e}"));
        let seen = which(&contents(&ro));
        assert!(seen.is_some(), "{name}: read-only open: rows differ");
        assert_eq!(
            ro.recovery().in_memory,
            crashed || acked.is_some(),
            "{name}: {:?}",
            ro.recovery()
        );
        ro.close().unwrap();
        files::assert_unchanged(&dir, &before, &format!("{name}: the read-only open"));

        // Read-write: every row, the old redo replayed, the store sound.
        let store = Store::open(&dir, config(name)).unwrap_or_else(|e| panic!("{name}: open: {e}"));
        let rec = store.recovery().clone();
        assert!(!rec.created, "{name}: created anew");
        if crashed || acked.is_some() {
            assert!(rec.groups_replayed > 0, "{name}: nothing replayed: {rec:?}");
        }
        if acked.is_some() {
            // Chosen so: pages torn by the power loss, repaired from the old build's area.
            assert!(
                rec.doublewrite_restored > 0,
                "{name}: nothing restored: {rec:?}"
            );
        }
        let k = which(&contents(&store));
        assert!(k.is_some(), "{name}: rows differ after recovery");
        assert_eq!(
            k, seen,
            "{name}: the read-only open saw another commit point"
        );
        let want = allowed
            .iter()
            .find(|(n, _)| Some(*n) == k)
            .map(|(_, t)| t.clone())
            .unwrap();
        let check = store.check().unwrap();
        assert!(check.is_ok(), "{name}: {:?}", check.problems);

        // It goes on: writes in the old log format, a close and an open.
        let mut now = want.clone();
        let tx = store.write().unwrap();
        {
            let mut a = tx.table("a").unwrap();
            a.insert(&key(b'a', 500), b"new").unwrap();
            a.insert(&key(b'a', 100), &value(b'N', 100)).unwrap();
            a.remove(&key(b'a', 7)).unwrap();
            let mut d = tx.table("d").unwrap();
            d.insert(b"big", &value(b'd', 47)).unwrap();
        }
        tx.commit().unwrap();
        let a = now.get_mut("a").unwrap();
        a.insert(key(b'a', 500), b"new".to_vec());
        a.insert(key(b'a', 100), value(b'N', 100));
        a.remove(&key(b'a', 7));
        now.entry("d".into())
            .or_default()
            .insert(b"big".to_vec(), value(b'd', 47));
        store.checkpoint().unwrap();
        let tx = store.write().unwrap();
        tx.table("c")
            .unwrap()
            .insert(b"after", b"checkpoint")
            .unwrap();
        tx.commit().unwrap();
        now.get_mut("c")
            .unwrap()
            .insert(b"after".to_vec(), b"checkpoint".to_vec());
        store.close().unwrap();
        assert_eq!(
            log_version(&dir),
            version,
            "{name}: the log's format changed"
        );
        let store = Store::open(&dir, config(name)).unwrap();
        assert!(
            contents(&store) == now,
            "{name}: rows differ after writes and a reopen"
        );
        let check = store.check().unwrap();
        assert!(check.is_ok(), "{name}: {:?}", check.problems);
        store.close().unwrap();
        eprintln!(
            "{name}: log format {version}, {} groups replayed, {} doublewrite pages restored: ok",
            rec.groups_replayed, rec.doublewrite_restored
        );
    }
    assert_eq!(versions.into_iter().collect::<Vec<_>>(), vec![1, 2, 3, 4]);
}
