//! `keel backup DIR DEST`: a hot, consistent copy of a store that another process may have open
//! and be writing, in the manner of XtraBackup: a fuzzy copy of the data file repaired by the
//! redo log.
//!
//! 1. Read the log header: the checkpoint `C0` and its scan start `S0`. Every page change after
//!    `C0` is in the log from `S0` on; every change before it is in the data file.
//! 2. Copy the identity file, then the data file page by page (up to its length at this
//!    moment: a page created later is rebuilt from redo). Each page is verified (checksum, page
//!    id, torn trailer); one that fails is read again, up to [`REREADS`] times (a page caught
//!    mid-write settles), and a page that stays damaged fails the backup. Without a page
//!    checksum a page caught mid-write can pass every check, so each page is read until two
//!    reads in a row agree (test `without_a_checksum_a_page_read_mid_write_is_read_again`). The copy is fuzzy:
//!    pages come from different moments, each at most as new as the log.
//! 3. Copy the log files, then scan the copy from `S0`. The copy must reach every page LSN of
//!    the data copy (the WAL rule puts those in the log before the pages) and the log end seen
//!    at step 1 (so the backup holds every commit acknowledged before it began — under
//!    `Durability::Sync` or `Buffered`: a `Lazy` commit is acknowledged before it reaches the
//!    log, and one not yet written when step 1 reads it is not in the copy). Step 1 reads the
//!    header and the files again, up to [`START_READS`] times, when a small log moved a whole
//!    lap past the checkpoint between the two reads, and then says so. A torn read of
//!    the log's tail block, being rewritten, ends the scan early: the log is copied again. A
//!    preallocated log that wrapped past `S0` meanwhile cannot repair the copy: the backup fails
//!    and says so. A growing log's files are held open from before step 1 (and each new one
//!    within a millisecond of its creation, `log_files::HeldFiles`), so the files the source
//!    removes behind its checkpoints during the backup are still read (found by the hot-backup
//!    test run on a growing log of 64 KiB files: every backup failed).
//!
//!    A split's right half is logged as a copy of its left half (a page-copy record): replay
//!    makes it from the left half as it was at that point of the log. The source store writes
//!    the right half before any later version of the left half, but the fuzzy copy can read
//!    the right half before that write and the left half after its own; recovery of the copy
//!    would then refuse it. So the scanned log is searched for such pairs (a copy older than
//!    its copy record whose source is at or past it, with no later init, image or free of the
//!    copy), each such page is read again from the source (its write now precedes the read),
//!    and the log is copied again to cover the pages' new LSNs, for up to [`COPY_ROUNDS`]
//!    rounds.
//! 4. Write the copy's log header with one more checkpoint slot pointing at `C0`, so recovery of
//!    the copy replays from there, then open the copy read-write (recovery brings every page to
//!    the log's end: a consistent state, a prefix of the commits), check it (`Store::check`), and
//!    close it. The doublewrite area is not copied: every data page of the copy is verified, and
//!    the copy gets its own area.
//!
//!    A store nobody has open is at rest: the backup then holds its lock (shared) throughout, so
//!    nobody writes it meanwhile. Its torn pages are what a crash left — pages the store itself
//!    repairs at its next open, from its doublewrite area or from redo — and stay torn however
//!    often they are read: they are copied as they are, with the doublewrite area, and the
//!    copy's recovery repairs them as the source's would (or fails as it would). Before this a
//!    backup taken after a crash and before any reopen failed, naming the source damaged, for
//!    15 of 80 power-loss images of a store that opened with every acknowledged row (test
//!    `a_backup_of_a_crashed_store_repairs_its_torn_pages_as_the_store_would`).
//!
//! 5. Give the copy an identity of its own (`keel::give_new_identity`: a new salt in its log,
//!    meta page and doublewrite area). A copy sharing the source's salt passed for it: files
//!    swapped between a store and its backup opened with the other's rows (a tester: 15 of 58
//!    data-file swaps, 10 of 25 doublewrite areas). Now such a file is refused (test
//!    `a_backup_is_a_store_of_its_own`).
//! 6. Move the copy up into DEST: steps 2 to 5 build it in `DEST/backup.partial`
//!    ([`keel::layout::BACKUP_STAGING_DIR`]), which every open refuses as an interrupted
//!    backup (a backup killed early left an empty-looking DEST in which the next open made a
//!    new, empty store; one killed during step 5 left files refused as "copied here by
//!    mistake": a tester). The identity moves last. A move that fails part of the way removes
//!    what was moved and the staging directory, leaving DEST as the backup found it; a backup
//!    killed during the moves leaves the staging directory beside part of the copy, which the
//!    next run names as an unfinished backup ([`unfinished_backup`]). Then sync the directory DEST was created in (and each directory above it the backup created),
//!    so that DEST's own name survives a power loss after "backup OK" (test
//!    `a_backup_syncs_the_directories_it_created`).
//!
//! Invariant: DEST holds exactly the commits up to one point of the source's history, at or
//! after the backup's start (test `a_hot_backup_under_a_writing_process_is_consistent`), even
//! when the data copy read a split out of order (test
//! `a_split_read_out_of_order_is_read_again`).

use crate::log_files::{self, HeldFiles};
use keel::{Config, Store};
use keel_page::{verify, Checksum, PageId, PageState};
use keel_redo_log::inspect::{
    decode_header, scan_images, ScanSummary, Slot, StaticHeader, HEADER_BYTES, HEADER_FILE,
};
use keel_redo_log::{Record, RecoveredGroup};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};
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
/// Rounds of re-reading pages a split wrote after the data copy read them.
const COPY_ROUNDS: u32 = 20;

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
    /// Pages read again because the data copy read them before a split wrote them (a split's
    /// right half, made a copy of its left half, read before its write while the left half was
    /// read after its own).
    split_pages_reread: u64,
    /// Highest page LSN in the data copy.
    max_page_lsn: u64,
    /// Log end at the start of the backup.
    start_log_end: u64,
    /// Times the log was copied.
    log_copies: u32,
    /// Log files the source removed during the backup (a growing log's, behind its
    /// checkpoints) whose redo the copy read from the files held open since step 1.
    log_files_removed: usize,
    /// The copy's consistent point: the LSN its recovery reached.
    consistent_lsn: u64,
    /// Transactions the copy's recovery replayed.
    groups_replayed: u64,
    /// Problems `Store::check` found in the copy (none in a good backup).
    check_problems: Vec<String>,
    /// Nobody had the source open: the backup held its lock, and copied its doublewrite area.
    at_rest: bool,
    /// Pages of a source at rest that failed verification (torn by a crash), copied as they
    /// were for the copy's recovery to repair.
    torn_pages_left_for_recovery: Vec<u64>,
    /// The copy's own identity (the salt of its log, meta page and doublewrite area), given
    /// after its recovery so that its files and the source's never pass for each other.
    identity: Option<keel::NewIdentity>,
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
                "backup of {} to {}{}: {} pages ({} re-read, {} read again after a split{}), log from checkpoint LSN {} copied {} time(s); consistent at LSN {} ({} transactions replayed); check: {}; identity {}; {:.2} s",
                dir.display(),
                dest.display(),
                if report.at_rest { " (not open: held at rest)" } else { "" },
                report.pages,
                report.pages_reread,
                report.split_pages_reread,
                if report.torn_pages_left_for_recovery.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", torn pages {:?} left for recovery to repair",
                        report.torn_pages_left_for_recovery
                    )
                },
                report.checkpoint_lsn,
                report.log_copies,
                report.consistent_lsn,
                report.groups_replayed,
                if report.check_problems.is_empty() { "OK".to_string() } else { report.check_problems.join("; ") },
                report.identity.map_or_else(String::new, |i| format!("{:#010x} (the source's {:#010x})", i.new, i.old)),
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
    let bytes = log_files::read_header_bytes(&path).map_err(|e| io(&path, "read", e))?;
    let (st, slot) = decode_header(&path, &bytes).map_err(|e| e.to_string())?;
    Ok((bytes, st, slot))
}

/// How many times step 1 reads the log header and files before it gives up on a log that
/// moves past its checkpoint in between.
const START_READS: u32 = 5;

/// Where the recovery scan of the log `files` from `slot` ends.
fn scan_end(
    st: &StaticHeader,
    slot: &Slot,
    files: &[(usize, String, Vec<u8>)],
) -> Result<u64, String> {
    scan(st, slot, files).map(|s| s.end)
}

/// The recovery scan of the log `files` from `slot`.
fn scan(
    st: &StaticHeader,
    slot: &Slot,
    files: &[(usize, String, Vec<u8>)],
) -> Result<ScanSummary, String> {
    let refs = log_files::indexed(files);
    scan_images(
        st.geometry(),
        &refs,
        slot.scan_start,
        slot.checkpoint_lsn,
        slot.incarnation,
    )
    .map_err(|e| e.to_string())
}

fn backup(dir: &Path, dest: &Path, report: &mut Report) -> Result<(), String> {
    let identity = keel::read_identity(dir).map_err(|e| e.to_string())?;
    if dest.exists() {
        let names = std::fs::read_dir(dest)
            .map_err(|e| io(dest, "list", e))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io(dest, "list", e))?;
        unfinished_backup(dest, &names)?;
        if !names.is_empty() {
            return Err(format!(
                "{}: the destination exists and is not empty",
                dest.display()
            ));
        }
    }
    // Nobody has the store open: it stays at rest while the lock is held (dropped at the end).
    let at_rest = keel_io::FileSystem::lock(
        &keel_io::OsFs::new(keel_io::Backend::Pwrite),
        &dir.join(keel::layout::LOCK_FILE),
        keel_io::LockMode::Shared,
    )
    .ok();
    report.at_rest = at_rest.is_some();
    let log_dir = dir.join(keel::LOG_DIR);
    // Step 1: the log files held open (before the checkpoint is read: every file from its scan
    // start on is then held or made later), the checkpoint the copy recovers from, and the log
    // end now.
    let (_, layout, _) = read_log_header(&log_dir)?;
    let held = HeldFiles::hold(&log_dir, &layout)?;
    // The header and the files are read one after the other: a writer can move the log a whole
    // lap past the checkpoint between the two (a small preallocated log), and the scan then
    // finds the checkpoint's block overwritten. Read both again, a few times, before saying so.
    let mut attempt = 0;
    let (st0, slot0, start_end) = loop {
        attempt += 1;
        let (_, st0, slot0) = read_log_header(&log_dir)?;
        if st0 != layout {
            return Err(format!(
                "{}: the log's layout changed during the backup",
                log_dir.display()
            ));
        }
        match scan_end(&st0, &slot0, &held.read()?) {
            Ok(end) => break (st0, slot0, end),
            // Nobody writes a store at rest: its log is damaged, not outrun (the message blamed
            // a fast writer and advised retrying: a tester).
            Err(e) if report.at_rest => {
                return Err(format!(
                    "{}: the log cannot be read from its checkpoint, and nobody has the store \
                     open (no writer moved it): it is damaged ({e}); `keel check` names the block",
                    log_dir.display()
                ))
            }
            Err(e) if attempt >= START_READS => {
                return Err(format!(
                    "{}: the log moved past its checkpoint while the backup read it, {START_READS} times \
                     (the scan of the files read after the header: {e}): the writer fills the log \
                     faster than the backup can start; retry, or give the store larger log files",
                    log_dir.display()
                ))
            }
            Err(_) => {}
        }
    };
    report.checkpoint_lsn = slot0.checkpoint_lsn;
    report.start_log_end = start_end;
    let created = missing_dirs(dest);
    // The copy is built in a staging directory inside DEST and moved up once it is recovered,
    // checked and given its own identity (step 6): a backup stopped before that leaves a
    // directory every open refuses as an interrupted backup (`keel::layout::BACKUP_STAGING_DIR`).
    let staging = dest.join(keel::layout::BACKUP_STAGING_DIR);
    let start = Start {
        dir,
        identity,
        held,
        st0,
        slot0,
    };
    if let Err(e) = build(&start, &staging, report) {
        // A failed build leaves DEST as it found it: the copy so far goes (a backup that failed
        // on a full destination left it there, holding the room, and the same command run
        // again was refused as "not empty": a tester).
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    publish(&staging, dest)?;
    // The entries of the directories the backup made: without this sync a power loss after
    // "backup OK" may lose DEST's own name on a file system that does not order a new
    // directory's entry before later fsyncs (ext4 and XFS do; the standard does not promise it).
    for d in &created {
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Refuses a destination that holds the staging directory of a backup that did not finish,
/// naming it: alone (killed while it built its copy), or beside part of the copy (killed while
/// [`publish`] moved it up). Both were refused only as "not empty" (a tester could not tell
/// them from a store of their own).
///
/// # Errors
///
/// The message, when `names` (DEST's entries) hold the staging directory.
fn unfinished_backup(dest: &Path, names: &[std::ffi::OsString]) -> Result<(), String> {
    let staging = keel::layout::BACKUP_STAGING_DIR;
    if !names.iter().any(|n| n == staging) {
        return Ok(());
    }
    let identity = keel::layout::IDENTITY_FILE;
    let staging_empty = std::fs::read_dir(dest.join(staging)).is_ok_and(|mut d| d.next().is_none());
    Err(if names.iter().any(|n| n == identity) && staging_empty {
        // Killed after the identity moved up, before the empty staging directory went: the
        // copy is complete and opens (it was named as one that did not finish: a tester).
        format!(
            "{}: holds a finished backup (a store) and the empty {staging} its move left: \
             the destination is not empty",
            dest.display()
        )
    } else if names.len() == 1 {
        format!(
            "{}: holds only {staging}, the copy of a backup that did not finish: remove it and \
             run the backup again",
            dest.display()
        )
    } else {
        format!(
            "{}: holds {staging} and {} other entries, a backup that did not finish (stopped \
             while it moved its copy into place): remove them all and run the backup again",
            dest.display(),
            names.len() - 1
        )
    })
}

/// Moves the finished copy up from `staging` into `dest`, the identity last (until it is there
/// the directory is no store), then removes `staging` and syncs `dest`. A failure part of the
/// way removes what was moved and the staging directory, so that DEST is left as the backup
/// found it (empty) and the same command runs again once the cause is gone; before, DEST was
/// left half filled and the rerun was refused as "not empty".
///
/// # Errors
///
/// A listing, rename, removal or directory sync that fails, with what the cleanup did.
fn publish(staging: &Path, dest: &Path) -> Result<(), String> {
    publish_by(staging, dest, &|from, to| std::fs::rename(from, to))
}

/// [`publish`] with the rename given (a test makes one fail).
fn publish_by(
    staging: &Path,
    dest: &Path,
    rename: &dyn Fn(&Path, &Path) -> std::io::Result<()>,
) -> Result<(), String> {
    let mut moved = Vec::new();
    let Err(e) = move_up(staging, dest, rename, &mut moved) else {
        return Ok(());
    };
    let mut left = Vec::new();
    for name in &moved {
        let path = dest.join(name);
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = gone {
            left.push(io(&path, "remove", e));
        }
    }
    if staging.exists() {
        if let Err(e) = std::fs::remove_dir_all(staging) {
            left.push(io(staging, "remove", e));
        }
    }
    Err(if left.is_empty() {
        format!(
            "{e} (while moving the finished copy into place: what was moved is removed, and {} \
             is as the backup found it)",
            dest.display()
        )
    } else {
        format!(
            "{e} (while moving the finished copy into place; the cleanup failed too: {}; remove \
             the contents of {} before running the backup again)",
            left.join("; "),
            dest.display()
        )
    })
}

/// The moves of [`publish_by`], each entry's name pushed to `moved` once it is in `dest`.
fn move_up(
    staging: &Path,
    dest: &Path,
    rename: &dyn Fn(&Path, &Path) -> std::io::Result<()>,
    moved: &mut Vec<std::ffi::OsString>,
) -> Result<(), String> {
    let identity = keel::layout::IDENTITY_FILE;
    for e in std::fs::read_dir(staging).map_err(|e| io(staging, "list", e))? {
        let e = e.map_err(|e| io(staging, "list", e))?;
        if e.file_name() != identity {
            let to = dest.join(e.file_name());
            rename(&e.path(), &to).map_err(|e| io(&to, "rename", e))?;
            moved.push(e.file_name());
        }
    }
    sync_dir(dest)?;
    let to = dest.join(identity);
    rename(&staging.join(identity), &to).map_err(|e| io(&to, "rename", e))?;
    moved.push(identity.into());
    std::fs::remove_dir(staging).map_err(|e| io(staging, "remove", e))?;
    sync_dir(dest)
}

/// The source as step 1 found it: what steps 2 to 5 copy and repair the copy from.
struct Start<'a> {
    /// The source store's directory.
    dir: &'a Path,
    /// Its identity (page size and checksum kind).
    identity: keel::StoreIdentity,
    /// Its log files, held open from before the checkpoint was read.
    held: HeldFiles,
    /// Its log's layout.
    st0: StaticHeader,
    /// The checkpoint `C0` the copy recovers from.
    slot0: Slot,
}

/// Steps 2 to 5 into `dest` (the staging directory).
fn build(start: &Start<'_>, dest: &Path, report: &mut Report) -> Result<(), String> {
    let (dir, identity) = (start.dir, &start.identity);
    std::fs::create_dir_all(dest.join(keel::LOG_DIR)).map_err(|e| io(dest, "create", e))?;
    // Step 2: identity, then the data file.
    copy_file(
        &dir.join(keel::layout::IDENTITY_FILE),
        &dest.join(keel::layout::IDENTITY_FILE),
    )?;
    copy_data(dir, dest, identity.page_size, identity.checksum, report)?;
    if report.at_rest {
        // The area a crash left repairs the torn pages copied as they were, as in the source.
        let area = dir.join(keel::layout::DOUBLEWRITE_FILE_NAME);
        if area.exists() {
            copy_file(&area, &dest.join(keel::layout::DOUBLEWRITE_FILE_NAME))?;
        }
    }
    finish(start, dest, report)
}

/// `dir` and those of its ancestors that do not exist, deepest first: what `create_dir_all`
/// makes of it.
fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect()
}

/// Steps 3 and 4, after the data copy: the log, the copy's header, its recovery and check.
fn finish(start: &Start<'_>, dest: &Path, report: &mut Report) -> Result<(), String> {
    let Start {
        dir,
        identity,
        held,
        slot0,
        ..
    } = start;
    // Step 3: the log, until the copy reaches what it must and no split was read out of order.
    let dest_log = dest.join(keel::LOG_DIR);
    let mut rounds = 0u32;
    let (header, st, slot) = loop {
        let LogCopy {
            header,
            st,
            slot,
            files,
            scanned,
        } = copy_log(start, report)?;
        // A source at rest was copied at one moment: nothing read out of order (and its torn
        // pages, left for recovery, have no LSN to compare).
        let late = if report.at_rest {
            Vec::new()
        } else {
            copies_read_early(dest, &scanned.groups, identity.page_size, identity.checksum)?
        };
        if late.is_empty() {
            report.log_files_removed = held.removed();
            for (_, name, bytes) in &files {
                write_file(&dest_log.join(name), bytes)?;
            }
            break (header, st, slot);
        }
        rounds += 1;
        if rounds > COPY_ROUNDS {
            return Err(format!(
                "{}: after {COPY_ROUNDS} rounds, page splits are still being written faster than \
                 the backup can re-read them (pages {late:?} still read before their splits); \
                 run the backup again",
                dir.display()
            ));
        }
        reread_pages(
            dir,
            dest,
            &late,
            identity.page_size,
            identity.checksum,
            report,
        )?;
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
    let store = Store::open(dest, config).map_err(|e| format!("recovery of the copy: {e}"))?;
    report.consistent_lsn = store.recovery().end_lsn.0;
    report.groups_replayed = store.recovery().groups_replayed;
    let check = store
        .check()
        .map_err(|e| format!("check of the copy: {e}"))?;
    report.check_problems = check.problems;
    store
        .close()
        .map_err(|e| format!("close of the copy: {e}"))?;
    // Step 5: the copy's own identity.
    report.identity =
        Some(keel::give_new_identity(dest).map_err(|e| format!("new identity of the copy: {e}"))?);
    Ok(())
}

/// A copy of the source log, in memory.
struct LogCopy {
    /// The header file's bytes.
    header: Vec<u8>,
    /// Its static block.
    st: StaticHeader,
    /// Its winning checkpoint slot.
    slot: Slot,
    /// The log files: number, name, bytes.
    files: Vec<(usize, String, Vec<u8>)>,
    /// The scan from the backup's start checkpoint.
    scanned: ScanSummary,
}

/// Copies the source log (not yet into DEST) until its scan from the backup's start checkpoint
/// reaches the log end seen at step 1 and every page LSN of the data copy.
fn copy_log(start: &Start<'_>, report: &mut Report) -> Result<LogCopy, String> {
    let Start {
        held, st0, slot0, ..
    } = start;
    let log_dir = start.dir.join(keel::LOG_DIR);
    let must_reach = report.start_log_end.max(report.max_page_lsn);
    let mut copies = 0u32;
    loop {
        copies += 1;
        report.log_copies += 1;
        let (header, st, slot) = read_log_header(&log_dir)?;
        if st != *st0 {
            return Err(format!(
                "{}: the log's layout changed during the backup",
                log_dir.display()
            ));
        }
        let files = held.read()?;
        let from_c0 = Slot {
            checkpoint_lsn: slot0.checkpoint_lsn,
            scan_start: slot0.scan_start,
            ..slot
        };
        let scanned = scan(&st, &from_c0, &files).map_err(|e| {
            format!(
                "{}: the log no longer holds the redo from the backup's start checkpoint (LSN {}): \
                 the writer moved the log past it during the copy ({e}); retry, or give the store \
                 larger log files",
                log_dir.display(),
                slot0.checkpoint_lsn
            )
        })?;
        if scanned.end >= must_reach {
            return Ok(LogCopy {
                header,
                st,
                slot,
                files,
                scanned,
            });
        }
        if copies >= LOG_COPIES {
            return Err(format!(
                "{}: the log no longer holds the redo from the backup's start checkpoint (LSN {}) \
                 up to LSN {must_reach} (the copy's scan ends at {}): the writer moved the \
                 log past it during the copy; retry, or give the store larger log files",
                log_dir.display(),
                slot0.checkpoint_lsn,
                scanned.end
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pages of the data copy that recovery could not rebuild because the copy read them
/// before a split wrote them: a page made a copy of another (a split's right half, [the page
/// copy record](keel_redo_log::Record::PageCopy)) at LSN `at` whose data copy is older than
/// `at`, while its source's data copy is already at or past `at` (so replay cannot make the
/// copy from the source as it was), and no later init, image or free of the page in the log
/// makes its content dead. The rule recovery applies (`keel_buffer_pool` recovery's page
/// copies).
///
/// The source store writes a copy before any version of its source past the copy, so a page
/// found here was written in the source before its source's data copy was read: reading it
/// again now finds it at or past `at`.
fn copies_read_early(
    dest: &Path,
    groups: &[RecoveredGroup],
    page_size: usize,
    checksum: Checksum,
) -> Result<Vec<PageId>, String> {
    let path = dest.join(keel::layout::DATA_FILE_NAME);
    let file = keel_io::os::open_without_waiting_read(&path).map_err(|e| io(&path, "open", e))?;
    let len = file.metadata().map_err(|e| io(&path, "stat", e))?.len();
    let mut lsns: HashMap<PageId, u64> = HashMap::new();
    let mut lsn_of = |id: PageId| -> Result<u64, String> {
        if let Some(l) = lsns.get(&id) {
            return Ok(*l);
        }
        let l = page_lsn(&file, &path, len, id, page_size, checksum)?;
        lsns.insert(id, l);
        Ok(l)
    };
    let mut rebuilt_later: HashSet<PageId> = HashSet::new();
    let mut late = BTreeSet::new();
    for g in groups.iter().rev() {
        for r in g.records.iter().rev() {
            match r {
                Record::PageCopy { page_id, from } => {
                    let at = g.end_lsn.0;
                    if !rebuilt_later.contains(page_id)
                        && lsn_of(*page_id)? < at
                        && lsn_of(*from)? >= at
                    {
                        late.insert(*page_id);
                    }
                }
                Record::PageInit { page_id, .. }
                | Record::PageImage { page_id, .. }
                | Record::PageFree { page_id } => {
                    rebuilt_later.insert(*page_id);
                }
                _ => {}
            }
        }
    }
    Ok(late.into_iter().collect())
}

/// The LSN of page `id` in the data file `file` of `len` bytes: 0 for a page past its end or
/// never written.
///
/// # Errors
/// A read error, or a page that fails verification (the data copy verified every page).
fn page_lsn(
    file: &File,
    path: &Path,
    len: u64,
    id: PageId,
    page_size: usize,
    checksum: Checksum,
) -> Result<u64, String> {
    let ps = page_size as u64;
    let off =
        id.0.checked_mul(ps)
            .ok_or_else(|| format!("{}: page {} is past any file", path.display(), id.0))?;
    if off.saturating_add(ps) > len {
        return Ok(0);
    }
    let mut page = vec![0u8; page_size];
    file.read_exact_at(&mut page, off)
        .map_err(|e| io(path, "read", e))?;
    match verify(&page, id, checksum, path).map_err(|e| e.to_string())? {
        PageState::Valid(h) => Ok(h.lsn.0),
        PageState::Unwritten => Ok(0),
    }
}

/// Reads `pages` again from the source data file (each verified, re-read while it fails) and
/// writes them into DEST's data copy, raising the copy's highest page LSN.
fn reread_pages(
    dir: &Path,
    dest: &Path,
    pages: &[PageId],
    page_size: usize,
    checksum: Checksum,
    report: &mut Report,
) -> Result<(), String> {
    let (src_path, src, dst_path) = open_data(dir, dest)?;
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .open(&dst_path)
        .map_err(|e| io(&dst_path, "open", e))?;
    let ps = page_size as u64;
    let mut page = vec![0u8; page_size];
    for &id in pages {
        let off =
            id.0.checked_mul(ps)
                .ok_or_else(|| format!("{}: page {} is past any file", src_path.display(), id.0))?;
        src.read_exact_at(&mut page, off)
            .map_err(|e| io(&src_path, &format!("read page {}", id.0), e))?;
        verified(&src, &src_path, &mut page, id, checksum, report)?;
        dst.write_all_at(&page, off)
            .map_err(|e| io(&dst_path, "write", e))?;
        report.split_pages_reread += 1;
    }
    dst.sync_all().map_err(|e| io(&dst_path, "sync", e))
}

/// Verifies page `id` read from the source into `page`, reading it again while it fails (a page
/// caught mid-write settles), and notes its LSN in the report.
///
/// # Errors
/// A read error, or a page still damaged after [`REREADS`] reads.
fn verified(
    src: &File,
    src_path: &Path,
    page: &mut [u8],
    id: PageId,
    checksum: Checksum,
    report: &mut Report,
) -> Result<(), String> {
    let mut tries = 0;
    let off = id.0.saturating_mul(page.len() as u64);
    let mut again = Vec::new();
    loop {
        match verify(page, id, checksum, src_path) {
            Ok(PageState::Valid(h)) => {
                // Without a checksum a page read while it is being written can pass for whole
                // (its header and trailer new, a middle sector old), and the copy has no
                // doublewrite area to repair it: such a page counts only once a second read
                // gives the same bytes (no write changed it in between).
                if checksum == Checksum::None {
                    again.resize(page.len(), 0);
                    src.read_exact_at(&mut again, off)
                        .map_err(|e| io(src_path, "read", e))?;
                    if again != page {
                        one_more_read(&mut tries, report, || {
                            format!(
                                "page {} changes between every two reads of the source ({REREADS} tries)",
                                id.0
                            )
                        })?;
                        page.copy_from_slice(&again);
                        continue;
                    }
                }
                report.max_page_lsn = report.max_page_lsn.max(h.lsn.0);
                return Ok(());
            }
            Ok(PageState::Unwritten) => return Ok(()),
            Err(_) if report.at_rest => {
                // No writer: rereading changes nothing. Recovery of the copy repairs it, or
                // fails as the source's would.
                report.torn_pages_left_for_recovery.push(id.0);
                return Ok(());
            }
            Err(e) => {
                one_more_read(&mut tries, report, || {
                    format!(
                        "page {} stays damaged in the source after {REREADS} re-reads: {e}",
                        id.0
                    )
                })?;
                std::thread::sleep(Duration::from_millis(1));
                src.read_exact_at(page, off)
                    .map_err(|e| io(src_path, "read", e))?;
            }
        }
    }
}

/// Counts one more read of a page (in `tries` and the report), or fails with `why` once there
/// were [`REREADS`].
fn one_more_read(
    tries: &mut u32,
    report: &mut Report,
    why: impl FnOnce() -> String,
) -> Result<(), String> {
    *tries += 1;
    if *tries > REREADS {
        return Err(why());
    }
    report.pages_reread += 1;
    Ok(())
}

/// The source data file's path, the file opened to read, and DEST's data file path.
fn open_data(dir: &Path, dest: &Path) -> Result<(PathBuf, File, PathBuf), String> {
    let src_path = dir.join(keel::layout::DATA_FILE_NAME);
    let src =
        keel_io::os::open_without_waiting_read(&src_path).map_err(|e| io(&src_path, "open", e))?;
    Ok((src_path, src, dest.join(keel::layout::DATA_FILE_NAME)))
}

/// Copies the data file page by page, each verified (re-read while it fails), into DEST.
fn copy_data(
    dir: &Path,
    dest: &Path,
    page_size: usize,
    checksum: Checksum,
    report: &mut Report,
) -> Result<(), String> {
    let (src_path, src, dst_path) = open_data(dir, dest)?;
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
            verified(
                &src,
                &src_path,
                page,
                PageId(first + i as u64),
                checksum,
                report,
            )?;
        }
        dst.write_all(buf).map_err(|e| io(&dst_path, "write", e))?;
        first += n;
    }
    report.pages = pages;
    dst.flush().map_err(|e| io(&dst_path, "write", e))?;
    dst.sync_all().map_err(|e| io(&dst_path, "sync", e))
}

fn copy_file(from: &Path, to: &Path) -> Result<(), String> {
    let mut bytes = Vec::new();
    keel_io::os::open_without_waiting_read(from)
        .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut bytes))
        .map_err(|e| io(from, "read", e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A staging directory laid out as `build` leaves it: identity, data file, log files.
    fn staged(root: &Path) -> (PathBuf, PathBuf) {
        let dest = root.join("dest");
        let staging = dest.join(keel::layout::BACKUP_STAGING_DIR);
        std::fs::create_dir_all(staging.join(keel::LOG_DIR)).unwrap();
        std::fs::write(staging.join(keel::layout::IDENTITY_FILE), b"id").unwrap();
        std::fs::write(staging.join(keel::layout::DATA_FILE_NAME), b"data").unwrap();
        std::fs::write(staging.join(keel::LOG_DIR).join(HEADER_FILE), b"log").unwrap();
        (dest, staging)
    }

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        let mut n: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        n.sort();
        n
    }

    /// A publish whose rename fails at any of its moves leaves DEST empty, as the backup found
    /// it, so the rerun is not refused; before, DEST kept what had been moved up and the
    /// staging directory, and the rerun was refused as "not empty".
    #[test]
    fn a_publish_that_fails_part_way_leaves_the_destination_as_it_found_it() {
        for fail_at in 0..3 {
            let root = tempfile::tempdir().unwrap();
            let (dest, staging) = staged(root.path());
            let calls = std::cell::Cell::new(0);
            let rename = |from: &Path, to: &Path| {
                calls.set(calls.get() + 1);
                if calls.get() > fail_at {
                    return Err(std::io::Error::other("injected"));
                }
                std::fs::rename(from, to)
            };
            let e = publish_by(&staging, &dest, &rename).expect_err("a failed rename published");
            assert!(e.contains("as the backup found it"), "{fail_at}: {e}");
            assert!(
                names(&dest).is_empty(),
                "{fail_at}: left {:?}",
                names(&dest)
            );
            assert_eq!(unfinished_backup(&dest, &names(&dest)), Ok(()));
        }
        // With no failure, the copy is up and the staging directory gone.
        let root = tempfile::tempdir().unwrap();
        let (dest, staging) = staged(root.path());
        publish(&staging, &dest).unwrap();
        let mut want: Vec<std::ffi::OsString> = [
            keel::layout::DATA_FILE_NAME,
            keel::LOG_DIR,
            keel::layout::IDENTITY_FILE,
        ]
        .iter()
        .map(Into::into)
        .collect();
        want.sort();
        assert_eq!(names(&dest), want);
    }

    /// A backup killed while it moved its copy up leaves part of it beside the staging
    /// directory: the rerun names it as an unfinished backup, not just "not empty".
    #[test]
    fn a_backup_killed_while_it_moved_its_copy_up_is_named() {
        let root = tempfile::tempdir().unwrap();
        let (dest, staging) = staged(root.path());
        std::fs::rename(
            staging.join(keel::layout::DATA_FILE_NAME),
            dest.join(keel::layout::DATA_FILE_NAME),
        )
        .unwrap();
        let e = unfinished_backup(&dest, &names(&dest)).expect_err("accepted");
        assert!(
            e.contains("did not finish") && e.contains("1 other entries"),
            "{e}"
        );
        std::fs::remove_file(dest.join(keel::layout::DATA_FILE_NAME)).unwrap();
        let e = unfinished_backup(&dest, &names(&dest)).expect_err("accepted");
        assert!(e.contains("holds only"), "{e}");
        // Killed after the identity moved up: a finished copy beside the empty staging dir.
        let root = tempfile::tempdir().unwrap();
        let (dest, staging) = staged(root.path());
        for n in [
            keel::layout::DATA_FILE_NAME,
            keel::LOG_DIR,
            keel::layout::IDENTITY_FILE,
        ] {
            std::fs::rename(staging.join(n), dest.join(n)).unwrap();
        }
        let e = unfinished_backup(&dest, &names(&dest)).expect_err("accepted");
        assert!(e.contains("finished backup"), "{e}");
    }

    /// Without a checksum, a page read while it was being written (header and trailer of the
    /// new version, a middle sector of the old) passes verification: the copy keeps it only
    /// once a second read agrees, so here it ends with the page as the source file holds it.
    /// Without the second read the torn bytes were copied.
    #[test]
    fn without_a_checksum_a_page_read_mid_write_is_read_again() {
        use keel_page::{seal, PageHeader, PageType};
        let ps = 4096;
        let page = |fill: u8| {
            let mut p = vec![fill; ps];
            PageHeader::init(&mut p, PageId(1), PageType::RAW, keel_page::Lsn(50));
            seal(&mut p, Checksum::None);
            p
        };
        let (new, old) = (page(7), page(3));
        let mut torn = new.clone();
        torn[1024..2048].copy_from_slice(&old[1024..2048]);
        assert!(matches!(
            verify(&torn, PageId(1), Checksum::None, Path::new("x")),
            Ok(PageState::Valid(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.keel");
        let mut bytes = vec![0u8; ps];
        bytes.extend_from_slice(&new);
        std::fs::write(&path, &bytes).unwrap();
        let src = File::open(&path).unwrap();
        // What `verified` leaves in the buffer given `read`, and how many re-reads it counted.
        let copy = |read: &[u8]| {
            let mut report = Report::default();
            let mut buf = read.to_vec();
            verified(
                &src,
                &path,
                &mut buf,
                PageId(1),
                Checksum::None,
                &mut report,
            )
            .unwrap();
            (buf, report.pages_reread)
        };
        let (buf, rereads) = copy(&torn);
        assert!(buf == new, "the torn read was kept");
        assert_eq!(rereads, 1);
        // A page read whole is kept at the second read (not counted as read again).
        assert_eq!(copy(&new), (new.clone(), 0));
    }

    fn key(i: u32) -> [u8; 8] {
        let mut k = [0u8; 8];
        k[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
        k[4..].copy_from_slice(&i.to_be_bytes());
        k
    }

    fn value(i: u32) -> Vec<u8> {
        vec![(i % 251) as u8; 60 + (i as usize * 13) % 200]
    }

    fn insert(store: &Store, rows: std::ops::Range<u32>) {
        for chunk in rows.collect::<Vec<_>>().chunks(50) {
            let tx = store.write().unwrap();
            {
                let mut t = tx.table("rows").unwrap();
                for &i in chunk {
                    t.insert(&key(i), &value(i)).unwrap();
                }
            }
            tx.commit().unwrap();
        }
    }

    /// A source store (4 KiB pages, a 4 MiB pool, no timed checkpoints) with its log in
    /// `files` of `file_size` bytes, rows 0..2,000 written and checkpointed.
    fn source(files: keel::LogFileMode, file_size: u64) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            page_size: 4096,
            pool_size: 4 << 20,
            log_files: files,
            log_file_size: file_size,
            checkpoint_interval: Duration::from_secs(3600),
            ..Config::default()
        };
        let store = Store::open(dir.path(), config).unwrap();
        insert(&store, 0..2_000);
        store.checkpoint().unwrap();
        (dir, store)
    }

    /// What step 1 of a backup of `dir` leaves: its log files held, the checkpoint C0 and the
    /// report with the log end now.
    struct Step1<'a> {
        start: Start<'a>,
        report: Report,
    }

    /// Step 1 as [`backup`] does it, on the store in `dir`.
    fn step1(dir: &Path) -> Step1<'_> {
        let log_dir = dir.join(keel::LOG_DIR);
        let (_, st0, slot0) = read_log_header(&log_dir).unwrap();
        let held = HeldFiles::hold(&log_dir, &st0).unwrap();
        let report = Report {
            checkpoint_lsn: slot0.checkpoint_lsn,
            start_log_end: scan_end(&st0, &slot0, &held.read().unwrap()).unwrap(),
            ..Report::default()
        };
        Step1 {
            start: Start {
                dir,
                identity: keel::read_identity(dir).unwrap(),
                held,
                st0,
                slot0,
            },
            report,
        }
    }

    impl Step1<'_> {
        /// Steps 3 and 4 into `dest` (its data copied) from `dir`'s log; the copy must check
        /// clean and hold rows 0..6,000, each with its value. Returns the report.
        fn finish(mut self, dest: &Path) -> Report {
            finish(&self.start, dest, &mut self.report).unwrap();
            assert!(self.report.check_problems.is_empty(), "{:?}", self.report);
            assert_rows(dest, 0..6_000);
            self.report
        }
    }

    /// A destination with its log directory and the identity file of the store in `dir`.
    fn new_dest(dir: &Path) -> tempfile::TempDir {
        let dest = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dest.path().join(keel::LOG_DIR)).unwrap();
        copy_file(
            &dir.join(keel::layout::IDENTITY_FILE),
            &dest.path().join(keel::layout::IDENTITY_FILE),
        )
        .unwrap();
        dest
    }

    /// The store in `dest` holds row `i` of table `rows`, with its value, for each `i`.
    fn assert_rows(dest: &Path, rows: std::ops::Range<u32>) {
        let copy = Store::open(dest, Config::for_store(dest).unwrap()).unwrap();
        let r = copy.read().unwrap();
        let t = r.table("rows").unwrap();
        for i in rows {
            assert_eq!(t.get(&key(i)).unwrap(), Some(value(i)), "row {i}");
        }
    }

    /// The fuzzy data copy reads every split's right half before the split wrote it (the pages
    /// the source added after the backup's start checkpoint are past the file's end when the
    /// copy reads its length) and every left half after its own write (the source flushed all
    /// pages before the copy): recovery of such a copy refuses the splits' page copies unless
    /// the backup reads those pages again. Breaking it on purpose: with `copies_read_early`
    /// answering nothing, `finish` fails with "was made a copy of".
    #[test]
    fn a_split_read_out_of_order_is_read_again() {
        let (dir, store) = source(keel::LogFileMode::Preallocated, 16 << 20);
        // Step 1 as the backup would see it now: the checkpoint C0 and the log end.
        let mut step = step1(dir.path());
        let data = dir.path().join(keel::layout::DATA_FILE_NAME);
        let len0 = std::fs::metadata(&data).unwrap().len();
        // The source goes on: splits made as page copies, every page written.
        let copies0 = store.stats().pool.page_copies;
        insert(&store, 2_000..6_000);
        store.checkpoint().unwrap();
        assert!(
            store.stats().pool.page_copies > copies0 + 10,
            "the load made no page copies: the test tests nothing"
        );
        // Step 2 as a slow data copy could have done it: the file's length read at the start,
        // the pages read after the source wrote them all.
        let dest = new_dest(dir.path());
        let identity = keel::read_identity(dir.path()).unwrap();
        let mut bytes = std::fs::read(&data).unwrap();
        bytes.truncate(len0 as usize);
        for (i, page) in bytes.chunks(identity.page_size).enumerate() {
            if let Ok(PageState::Valid(h)) =
                verify(page, PageId(i as u64), identity.checksum, &data)
            {
                step.report.max_page_lsn = step.report.max_page_lsn.max(h.lsn.0);
            }
        }
        write_file(&dest.path().join(keel::layout::DATA_FILE_NAME), &bytes).unwrap();
        let report = step.finish(dest.path());
        assert!(report.split_pages_reread > 0, "{report:?}");
    }

    /// A growing log removes its files behind each checkpoint: a backup whose source went on
    /// after step 1 (rows written, checkpoints taken, the files holding the backup's start
    /// checkpoint removed) still copies the redo from that checkpoint, read from the files held
    /// open since step 1, and the copy holds every row. Breaking it on purpose: with the log
    /// read by name again (`log_files::read` in `copy_log`), `finish` fails with "the log no
    /// longer holds the redo from the backup's start checkpoint".
    #[test]
    fn a_growing_log_s_files_removed_during_the_backup_are_read_from_the_held_files() {
        let (dir, store) = source(keel::LogFileMode::Growing, 64 << 10);
        // Step 1 as `backup` does it.
        let mut step = step1(dir.path());
        // The source goes on: its checkpoints remove the files the backup starts from.
        for round in 0..4 {
            insert(&store, 2_000 + round * 1_000..3_000 + round * 1_000);
            store.checkpoint().unwrap();
        }
        assert!(
            step.start.held.removed() > 0,
            "the source removed no log file: the test tests nothing"
        );
        let dest = new_dest(dir.path());
        let identity = keel::read_identity(dir.path()).unwrap();
        copy_data(
            dir.path(),
            dest.path(),
            identity.page_size,
            identity.checksum,
            &mut step.report,
        )
        .unwrap();
        let report = step.finish(dest.path());
        assert!(report.log_files_removed > 0, "{report:?}");
    }
}
