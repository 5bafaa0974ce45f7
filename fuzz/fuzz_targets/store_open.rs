//! A whole store opened from a damaged directory image never panics, hangs or returns wrong
//! data silently: opening it (identity file, log header and blocks, redo replay onto pages,
//! doublewrite restore, meta page, free-list trunks, catalog) either fails with an error or
//! gives a store whose check, reads and a new commit all return values or errors.
//!
//! The base image is built once: a 4 KiB-page store on SimFs with three tables (one with
//! overflow values, one dropped so the free list has entries), a checkpoint, then more commits
//! that only the log holds, then a power loss, so every open replays redo. Input: patches of
//! `[file index, offset (3 bytes, little endian), length, bytes...]` applied to the base image's
//! files (offsets wrap at the file's length).
#![no_main]

use keel::{Config, Store};
use keel_io::{CrashPolicy, FileClass, FileSystem, OpenOptions, SimConfig, SimFs};
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const DIR: &str = "/db";

fn config() -> Config {
    Config {
        page_size: 4096,
        pool_size: 64 * 4096,
        log_file_size: 32 * 4096,
        // Small, so an open does not spend its time zeroing an 8 MiB buffer.
        log_buffer_size: 64 * 1024,
        checkpoint_interval: Duration::from_secs(3600),
        doublewrite_batch: 8,
        ..Config::default()
    }
}

/// The base image: every file of the crashed store and its durable bytes.
fn base() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static BASE: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    BASE.get_or_init(|| {
        let fs = SimFs::new(SimConfig::seeded(7));
        let dir = Path::new(DIR);
        let store = Store::open_with_fs(Arc::new(fs.clone()), dir, config()).expect("create");
        for (name, rows) in [("a", 150u32), ("b", 40), ("gone", 120)] {
            let tx = store.write().expect("write");
            let mut t = tx.table(name).expect("table");
            for i in 0..rows {
                let v = if i % 50 == 0 {
                    vec![1u8; 6000]
                } else {
                    vec![2u8; 40]
                };
                t.insert(&i.to_be_bytes(), &v).expect("insert");
            }
            tx.commit().expect("commit");
        }
        let mut tx = store.write().expect("write");
        tx.drop_table("gone").expect("drop");
        tx.commit().expect("commit");
        store.checkpoint().expect("checkpoint");
        for i in 0..20u32 {
            let tx = store.write().expect("write");
            tx.table("a")
                .expect("table")
                .insert(&(10_000 + i).to_be_bytes(), b"after the checkpoint")
                .expect("insert");
            tx.commit().expect("commit");
        }
        let post = fs.crash_with(CrashPolicy::keep_all());
        drop(store);
        let mut files = Vec::new();
        for p in post.durable_files().expect("files") {
            let bytes = post.durable_contents(&p).expect("contents");
            files.push((p, bytes));
        }
        files.sort();
        files
    })
}

fn image(data: &[u8]) -> Option<SimFs> {
    let mut files = base().clone();
    let mut rest = data;
    while rest.len() >= 5 && !files.is_empty() {
        let idx = rest[0] as usize % files.len();
        let off = u32::from_le_bytes([rest[1], rest[2], rest[3], 0]) as usize;
        let n = (rest[4] as usize).min(rest.len() - 5);
        let file = &mut files[idx].1;
        if !file.is_empty() {
            for (i, b) in rest[5..5 + n].iter().enumerate() {
                let at = (off + i) % file.len();
                file[at] = *b;
            }
        }
        rest = &rest[5 + n..];
    }
    let fs = SimFs::new(SimConfig::seeded(11));
    for (p, bytes) in &files {
        let parent = p.parent()?;
        fs.create_dir_all(parent).ok()?;
        let f = fs
            .open(p, &OpenOptions::new(FileClass::Other).create(true))
            .ok()?;
        f.write_all_at(bytes, 0).ok()?;
        f.sync_all().ok()?;
        fs.sync_dir(parent).ok()?;
    }
    Some(fs)
}

fuzz_target!(|data: &[u8]| {
    let Some(fs) = image(data) else {
        return;
    };
    let Ok(store) = Store::open_with_fs(Arc::new(fs), Path::new(DIR), config()) else {
        return;
    };
    let _ = store.check();
    if let Ok(r) = store.read() {
        if let Ok(names) = r.list_tables() {
            for n in names {
                if let Ok(t) = r.table(&n) {
                    let _ = t.len();
                    let _ = t.get(&5u32.to_be_bytes());
                    if let Ok(rows) = t.range(..) {
                        let _ = rows.take(2000).count();
                    }
                    if let Ok(rows) = t.range(..) {
                        let _ = rows.rev().take(2000).count();
                    }
                }
            }
        }
    }
    if let Ok(mut tx) = store.write() {
        if let Ok(mut t) = tx.table("a") {
            let _ = t.insert(b"fuzz", b"value");
        }
        let _ = tx.drop_table("b");
        let _ = tx.commit();
    }
    let _ = store.close();
});
