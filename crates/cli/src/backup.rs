//! `keel backup DIR DEST`: a hot, consistent copy of a store that another process may have open
//! and be writing, in the manner of XtraBackup: a fuzzy copy of the data file repaired by the
//! redo log.
//!
//! 1. Read the log header: the checkpoint `C0` and its scan start `S0`. Every page change after
//!    `C0` is in the log from `S0` on; every change before it is in the data file.
//! 2. Copy the identity file, then the data file page by page (up to its length at this
//!    moment: a page created later is rebuilt from redo). Each page is verified (checksum, page
//!    id, torn trailer); one that fails is read again, up to [`REREADS`] times (a page caught
//!    mid-write settles), and a page that stays damaged fails the backup. The copy is fuzzy:
//!    pages come from different moments, each at most as new as the log.
//! 3. Copy the log files, then scan the copy from `S0`. The copy must reach every page LSN of
//!    the data copy (the WAL rule puts those in the log before the pages) and the log end seen
//!    at step 1 (so the backup holds every commit acknowledged before it began). A torn read of
//!    the log's tail block, being rewritten, ends the scan early: the log is copied again. A
//!    log that moved past `S0` meanwhile (wrapped, or a growing log's file removed) cannot
//!    repair the copy: the backup fails and says so.
//! 4. Write the copy's log header with one more checkpoint slot pointing at `C0`, so recovery of
//!    the copy replays from there, then open the copy read-write (recovery brings every page to
//!    the log's end: a consistent state, a prefix of the commits), check it (`Store::check`), and
//!    close it. The doublewrite area is not copied: every data page of the copy is verified, and
//!    the copy gets its own area.
//!
//! Invariant: DEST holds exactly the commits up to one point of the source's history, at or
//! after the backup's start (test `a_hot_backup_under_a_writing_process_is_consistent`).

use crate::log_files;
use keel::{Config, Store};
use keel_page::{verify, Checksum, PageId, PageState};
use keel_redo_log::inspect::{
    decode_header, scan_images, Slot, StaticHeader, HEADER_BYTES, HEADER_FILE,
};
use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Times a page that fails verification is read again before the backup fails.
const REREADS: u32 = 100;
/// Times the log is copied again when the copy does not yet reach what it must.
const LOG_COPIES: u32 = 50;
/// Pages read per data-file read.
const CHUNK_PAGES: u64 = 64;

/// What a backup did.
#[derive(Debug, Default, Serialize)]
struct Report {
    source: PathBuf,
    dest: PathBuf,
    /// The source checkpoint the copy recovers from.
    checkpoint_lsn: u64,
    /// Pages copied from the data file.
    pages: u64,
    /// Page reads repeated because a page failed verification (caught mid-write).
    pages_reread: u64,
    /// Highest page LSN in the data copy.
    max_page_lsn: u64,
    /// Log end at the start of the backup.
    start_log_end: u64,
    /// Times the log was copied.
    log_copies: u32,
    /// The copy's consistent point: the LSN its recovery reached.
    consistent_lsn: u64,
    /// Transactions the copy's recovery replayed.
    groups_replayed: u64,
    /// Problems `Store::check` found in the copy (none in a good backup).
    check_problems: Vec<String>,
    seconds: f64,
}

/// Runs the backup; exit status 0 when DEST is a checked, consistent store.
pub fn run(dir: &Path, dest: &Path, json: bool) -> ExitCode {
    let t0 = Instant::now();
    let mut report = Report {
        source: dir.to_path_buf(),
        dest: dest.to_path_buf(),
        ..Report::default()
    };
    let result = backup(dir, dest, &mut report);
    report.seconds = t0.elapsed().as_secs_f64();
    let ok = result.is_ok() && report.check_problems.is_empty();
    if json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        if let Err(e) = &result {
            v["error"] = serde_json::Value::String(e.clone());
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        match &result {
            Ok(()) => println!(
                "backup of {} to {}: {} pages ({} re-read), log from checkpoint LSN {} copied {} time(s); consistent at LSN {} ({} transactions replayed); check: {}; {:.2} s",
                dir.display(),
                dest.display(),
                report.pages,
                report.pages_reread,
                report.checkpoint_lsn,
                report.log_copies,
                report.consistent_lsn,
                report.groups_replayed,
                if report.check_problems.is_empty() { "OK".to_string() } else { report.check_problems.join("; ") },
                report.seconds
            ),
            Err(e) => eprintln!("keel backup: {e}"),
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn io(path: &Path, what: &str, e: std::io::Error) -> String {
    format!("{}: {what}: {e}", path.display())
}

/// The log header file's static block and winning checkpoint slot.
fn read_log_header(log_dir: &Path) -> Result<(Vec<u8>, StaticHeader, Slot), String> {
    let path = log_dir.join(HEADER_FILE);
    let bytes = std::fs::read(&path).map_err(|e| io(&path, "read", e))?;
    let (st, slot) = decode_header(&path, &bytes).map_err(|e| e.to_string())?;
    Ok((bytes, st, slot))
}

/// Where the recovery scan of the log `files` from `slot` ends.
fn scan_end(
    st: &StaticHeader,
    slot: &Slot,
    files: &[(usize, String, Vec<u8>)],
) -> Result<u64, String> {
    let refs = log_files::indexed(files);
    scan_images(
        st.geometry(),
        &refs,
        slot.scan_start,
        slot.checkpoint_lsn,
        slot.incarnation,
    )
    .map(|s| s.end)
    .map_err(|e| e.to_string())
}

fn backup(dir: &Path, dest: &Path, report: &mut Report) -> Result<(), String> {
    let identity = keel::read_identity(dir).map_err(|e| e.to_string())?;
    if dest.exists()
        && std::fs::read_dir(dest)
            .map_err(|e| io(dest, "list", e))?
            .next()
            .is_some()
    {
        return Err(format!(
            "{}: the destination exists and is not empty",
            dest.display()
        ));
    }
    let log_dir = dir.join(keel::LOG_DIR);
    // Step 1: the checkpoint the copy recovers from, and the log end now.
    let (_, st0, slot0) = read_log_header(&log_dir)?;
    report.checkpoint_lsn = slot0.checkpoint_lsn;
    report.start_log_end = scan_end(&st0, &slot0, &log_files::read(&log_dir, &st0)?)?;
    std::fs::create_dir_all(dest.join(keel::LOG_DIR)).map_err(|e| io(dest, "create", e))?;
    // Step 2: identity, then the data file.
    copy_file(
        &dir.join(keel::layout::IDENTITY_FILE),
        &dest.join(keel::layout::IDENTITY_FILE),
    )?;
    copy_data(dir, dest, identity.page_size, identity.checksum, report)?;
    // Step 3: the log, until the copy reaches what it must.
    let must_reach = report.start_log_end.max(report.max_page_lsn);
    let dest_log = dest.join(keel::LOG_DIR);
    let (header, st, slot) = loop {
        report.log_copies += 1;
        let (header, st, slot) = read_log_header(&log_dir)?;
        if st != st0 {
            return Err(format!(
                "{}: the log's layout changed during the backup",
                log_dir.display()
            ));
        }
        let files = log_files::read(&log_dir, &st)?;
        let from_c0 = Slot {
            checkpoint_lsn: slot0.checkpoint_lsn,
            scan_start: slot0.scan_start,
            ..slot
        };
        let end = scan_end(&st, &from_c0, &files)?;
        if end >= must_reach {
            for (_, name, bytes) in &files {
                write_file(&dest_log.join(name), bytes)?;
            }
            break (header, st, slot);
        }
        if report.log_copies >= LOG_COPIES {
            return Err(format!(
                "{}: the log no longer holds the redo from the backup's start checkpoint (LSN {}) \
                 up to LSN {must_reach} (the copy's scan ends at {end}): the writer moved the \
                 log past it during the copy; retry, or give the store larger log files",
                log_dir.display(),
                slot0.checkpoint_lsn
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Step 4: the copy's header replays from C0.
    let mut header = header;
    header.resize(HEADER_BYTES, 0);
    let ours = Slot {
        seq: slot.seq.saturating_add(1),
        checkpoint_lsn: slot0.checkpoint_lsn,
        scan_start: slot0.scan_start,
        ..slot
    };
    let at = usize::try_from(Slot::offset(ours.seq)).map_err(|e| e.to_string())?;
    let enc = ours.encode(st.salt);
    header
        .get_mut(at..at + enc.len())
        .ok_or("log header slot offset out of range")?
        .copy_from_slice(&enc);
    write_file(&dest_log.join(HEADER_FILE), &header)?;
    sync_dir(&dest_log)?;
    sync_dir(dest)?;
    // Recover and check the copy.
    let config = Config::for_store(dest).map_err(|e| e.to_string())?;
    let store = Store::open(dest, config).map_err(|e| {
        let e = e.to_string();
        // A split's right half is replayed from its left half (a page copy): the source store
        // writes the copy before any later version of the left half, but a fuzzy copy of the
        // data file can read the right half before that write and the left half after its own.
        // Recovery then refuses the copy rather than guess (the known limit of hot backups
        // with page copies: docs/design.md).
        let hint = if e.contains("was made a copy of") {
            "; a page split was written while the data file was being copied (the copy read the \
             new page before, and its source after, their writes): run the backup again"
        } else {
            ""
        };
        format!("recovery of the copy: {e}{hint}")
    })?;
    report.consistent_lsn = store.recovery().end_lsn.0;
    report.groups_replayed = store.recovery().groups_replayed;
    let check = store
        .check()
        .map_err(|e| format!("check of the copy: {e}"))?;
    report.check_problems = check.problems;
    store
        .close()
        .map_err(|e| format!("close of the copy: {e}"))?;
    Ok(())
}

/// Copies the data file page by page, each verified (re-read while it fails), into DEST.
fn copy_data(
    dir: &Path,
    dest: &Path,
    page_size: usize,
    checksum: Checksum,
    report: &mut Report,
) -> Result<(), String> {
    let src_path = dir.join(keel::layout::DATA_FILE_NAME);
    let dst_path = dest.join(keel::layout::DATA_FILE_NAME);
    let src = File::open(&src_path).map_err(|e| io(&src_path, "open", e))?;
    let len = src.metadata().map_err(|e| io(&src_path, "stat", e))?.len();
    let ps = page_size as u64;
    let pages = len / ps;
    let mut dst = File::create(&dst_path).map_err(|e| io(&dst_path, "create", e))?;
    let mut chunk = vec![0u8; (CHUNK_PAGES * ps) as usize];
    let mut first = 0u64;
    while first < pages {
        let n = CHUNK_PAGES.min(pages - first);
        let buf = &mut chunk[..(n * ps) as usize];
        src.read_exact_at(buf, first * ps)
            .map_err(|e| io(&src_path, "read", e))?;
        for (i, page) in buf.chunks_mut(page_size).enumerate() {
            let id = PageId(first + i as u64);
            let mut tries = 0;
            loop {
                match verify(page, id, checksum, &src_path) {
                    Ok(PageState::Valid(h)) => {
                        report.max_page_lsn = report.max_page_lsn.max(h.lsn.0);
                        break;
                    }
                    Ok(PageState::Unwritten) => break,
                    Err(e) => {
                        tries += 1;
                        if tries > REREADS {
                            return Err(format!(
                                "page {} stays damaged in the source after {REREADS} re-reads: {e}",
                                id.0
                            ));
                        }
                        report.pages_reread += 1;
                        std::thread::sleep(Duration::from_millis(1));
                        src.read_exact_at(page, id.0 * ps)
                            .map_err(|e| io(&src_path, "read", e))?;
                    }
                }
            }
        }
        dst.write_all(buf).map_err(|e| io(&dst_path, "write", e))?;
        first += n;
    }
    report.pages = pages;
    dst.flush().map_err(|e| io(&dst_path, "write", e))?;
    dst.sync_all().map_err(|e| io(&dst_path, "sync", e))
}

fn copy_file(from: &Path, to: &Path) -> Result<(), String> {
    let bytes = std::fs::read(from).map_err(|e| io(from, "read", e))?;
    write_file(to, &bytes)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut f = File::create(path).map_err(|e| io(path, "create", e))?;
    f.write_all(bytes).map_err(|e| io(path, "write", e))?;
    f.sync_all().map_err(|e| io(path, "sync", e))
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, "sync", e))
}
