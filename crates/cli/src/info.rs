//! `keel info DIR`: what a store is: identity, checkpoint and log range, tables, files.

use crate::open::open_read_only;
use keel::{MetaInfo, StoreIdentity, TableCheck};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One file of the store directory.
#[derive(Serialize)]
struct FileInfo {
    path: PathBuf,
    bytes: u64,
}

/// The JSON form of `keel info`.
#[derive(Serialize)]
struct Info {
    dir: PathBuf,
    identity: Option<StoreIdentity>,
    /// Why the store could not be opened read-only (e.g. it needs recovery).
    open_error: Option<String>,
    meta: Option<MetaInfo>,
    /// The checkpoint the log is replayed from.
    checkpoint_lsn: Option<u64>,
    /// Where the log ends.
    log_end_lsn: Option<u64>,
    /// Why the log scan stopped there.
    log_end_reason: Option<String>,
    /// What recovery does to this store: computed by the read-only open, which recovers in
    /// memory and writes nothing (`in_memory` true when there was anything to do).
    recovery: Option<keel::RecoveryReport>,
    tables: Vec<TableCheck>,
    /// What the store's check found wrong (`keel check` says the same): none in a sound store.
    problems: Vec<String>,
    /// Bytes of the data file held by free pages (reused before the file grows).
    free_bytes: Option<u64>,
    files: Vec<FileInfo>,
}

/// The files under `dir` (one level of subdirectories, e.g. `log/`), sorted by path.
fn files(dir: &Path) -> Vec<FileInfo> {
    let mut out = Vec::new();
    let mut dirs = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() && depth == 0 {
                dirs.push((e.path(), depth + 1));
            } else if md.is_file() {
                let path = e.path();
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                out.push(FileInfo {
                    path: rel,
                    bytes: md.len(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Gathers and prints what the store is. Exit status 0 when it could be opened and its check
/// found nothing wrong, 1 otherwise (the identity and the files are still printed, and the
/// problems: a damaged store was described as sound, its damaged table left out, exit 0: a
/// tester).
pub fn run(dir: &Path, json: bool) -> ExitCode {
    let mut info = Info {
        dir: dir.to_path_buf(),
        identity: keel::read_identity(dir).ok(),
        open_error: None,
        meta: None,
        checkpoint_lsn: None,
        log_end_lsn: None,
        log_end_reason: None,
        recovery: None,
        tables: Vec::new(),
        problems: Vec::new(),
        free_bytes: None,
        files: files(dir),
    };
    match open_read_only(dir) {
        Err(e) => info.open_error = Some(e.to_string()),
        Ok((store, id)) => {
            let rec = store.recovery();
            info.checkpoint_lsn = Some(rec.checkpoint_lsn.0);
            info.log_end_lsn = Some(rec.end_lsn.0);
            info.log_end_reason = Some(rec.log_end_reason.clone());
            info.recovery = Some(rec.clone());
            match store.meta() {
                Ok(m) => info.meta = Some(m),
                Err(e) => info.open_error = Some(e.to_string()),
            }
            match store.check() {
                Ok(r) => {
                    info.free_bytes = r.free_pages.checked_mul(id.page_size as u64);
                    info.tables = r.tables;
                    info.problems = r.problems;
                }
                Err(e) => info.open_error = Some(e.to_string()),
            }
        }
    }
    if json {
        match serde_json::to_string_pretty(&info) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("keel info: cannot encode: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print_text(&info);
    }
    if info.open_error.is_none() && info.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_text(info: &Info) {
    println!("store:      {}", info.dir.display());
    match &info.identity {
        Some(id) => println!(
            "identity:   format {}, page size {}, checksum {:?}",
            id.format_version, id.page_size, id.checksum
        ),
        None => println!("identity:   (unreadable)"),
    }
    if let Some(e) = &info.open_error {
        println!("not opened: {e}");
    }
    if let (Some(c), Some(e)) = (info.checkpoint_lsn, info.log_end_lsn) {
        println!(
            "log:        checkpoint at LSN {c}, ends at LSN {e} ({} bytes of redo after the checkpoint)",
            e.saturating_sub(c)
        );
    }
    if let Some(d) = info.recovery.as_ref().and_then(|r| r.data_file_checkpoint) {
        println!("data file:  records the checkpoint at {d} (page 0)");
    }
    if let Some(r) = &info.recovery {
        if r.in_memory {
            println!(
                "recovery:   needed (computed in memory, nothing applied): replay {} transactions \
                 ({} records applied, {} skipped as already on disk, {} pages read, {} rebuilt \
                 from redo alone), restore {} pages from the doublewrite area",
                r.groups_replayed,
                r.redo.records_applied,
                r.redo.records_skipped,
                r.redo.pages_read,
                r.redo.unusable_pages_rebuilt.len(),
                r.doublewrite_restored
            );
        } else {
            println!("recovery:   not needed");
        }
        if r.log_bytes_discarded > 0 {
            println!(
                "            {} bytes of log past its end are discarded: {}",
                r.log_bytes_discarded,
                r.discard_reason.as_deref().unwrap_or("torn tail")
            );
        }
    }
    if let Some(m) = &info.meta {
        println!(
            "pages:      {} allocated, {} free ids in the meta page, newest free-list trunk {}, catalog root {}",
            m.page_count, m.free_count, m.trunk_head.0, m.catalog_root.0
        );
    }
    if let Some(f) = info.free_bytes {
        println!("free space: {} in free pages", keel::human::format_size(f));
    }
    if !info.tables.is_empty() {
        println!("tables:");
        println!(
            "  {:<24} {:>12} {:>8} {:>6} {:>10}",
            "name", "rows", "pages", "depth", "overflow"
        );
        for t in &info.tables {
            println!(
                "  {:<24} {:>12} {:>8} {:>6} {:>10}",
                printable(&t.name),
                t.rows,
                t.leaves + t.inners + t.overflow_pages,
                t.depth,
                t.overflow_pages
            );
        }
    }
    if !info.problems.is_empty() {
        println!(
            "DAMAGED:    {} problem(s) found (`keel check` names them the same way):",
            info.problems.len()
        );
        for p in &info.problems {
            println!("  {p}");
        }
    }
    println!("files:");
    for f in &info.files {
        println!("  {:<40} {:>14} bytes", f.path.display(), f.bytes);
    }
}

/// A table name as the terminal should show it: as is, or quoted with escapes when it holds a
/// control character (a name is any string the embedding program chose; printed raw, an escape
/// sequence in it would drive the terminal).
fn printable(name: &str) -> String {
    if name.chars().any(char::is_control) {
        format!("{name:?}")
    } else {
        name.to_string()
    }
}
