//! What a store directory holds, how a new store is created, and how a directory is told apart:
//! a store, an empty directory, an interrupted creation, or a damaged store.
//!
//! # Creation protocol (see `docs/format.md`, "How a store is created, locked and opened")
//!
//! 1. `store.keel.creating` (the creation marker) is created and its directory synced.
//! 2. The log, the data file and the doublewrite area are created; the meta page and the catalog
//!    root are committed, flushed and checkpointed.
//! 3. The identity is written to `store.keel.tmp`, synced, and renamed to `store.keel` (the
//!    rename syncs the directory): **the store exists from this step on**.
//! 4. The marker is removed.
//!
//! # Invariants (tested in `tests/open.rs`)
//!
//! - A directory with `store.keel` is a store: every piece must be there (data file, log header
//!   and files, a usable meta page), or the open is refused naming what is missing. It is never
//!   initialised again.
//! - A short `store.keel` beside an empty or missing data file and a log holding no byte is a
//!   creation interrupted by a version before the marker; with a byte in the log it is damage
//!   (refused).
//! - A directory without `store.keel` but with the marker is an interrupted creation (a crash
//!   before step 3): exactly the pieces creation writes are removed and creation starts over.
//! - A directory without `store.keel` and without the marker that holds any other piece of a
//!   store (data file, doublewrite area, log) is refused ([`Error::IncompleteStore`]): something
//!   deleted the identity of a store that held data.
//! - A directory holding [`BACKUP_STAGING_DIR`] (without `store.keel`) is an interrupted
//!   `keel backup`, refused the same way (a backup killed early left an empty-looking
//!   directory in which the next open created a new, empty store: a tester).
//! - Anything else (no Keel piece) is empty: a store may be created there; files that are not
//!   Keel's are left alone.

pub use crate::meta::IDENTITY_FILE;
use crate::{Error, Result, LOG_DIR};
pub use keel_flush::{DATA_FILE_NAME, DOUBLEWRITE_FILE_NAME};
use keel_io::FileSystem;
use std::path::{Path, PathBuf};

/// The lock file: `flock`ed for the life of an open store (exclusive; shared when read-only).
pub const LOCK_FILE: &str = "LOCK";
/// The creation marker (present only while a store is being created).
pub const CREATING_FILE: &str = "store.keel.creating";
/// The identity's temporary name during creation.
pub const IDENTITY_TMP_FILE: &str = "store.keel.tmp";
/// Where `keel backup DIR DEST` builds the copy, inside DEST, until it is done (then its
/// entries move up into DEST, the identity last): a directory holding it is an interrupted
/// backup, never an empty directory a store may be created in.
pub const BACKUP_STAGING_DIR: &str = "backup.partial";

/// What a directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DirState {
    /// No directory at all.
    Missing,
    /// No Keel piece.
    Empty,
    /// `store.keel` is there (`creating`: the marker too, left by a creation that published the
    /// store but was stopped before removing it).
    Store { creating: bool },
    /// The marker without `store.keel`: creation was interrupted.
    InterruptedCreation,
    /// Pieces of a store without its identity.
    Incomplete { found: Vec<String> },
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Looks at `dir`.
pub(crate) fn classify(fs: &dyn FileSystem, dir: &Path) -> Result<DirState> {
    if !fs.exists(dir)? {
        return Ok(DirState::Missing);
    }
    let entries = fs.list_dir(dir)?;
    let names: Vec<String> = entries.iter().map(|p| name(p)).collect();
    let has = |n: &str| names.iter().any(|x| x == n);
    let creating = has(CREATING_FILE);
    if has(IDENTITY_FILE) {
        // A short identity next to an empty or missing data file is what versions before the
        // creation marker left when killed while creating: nothing was ever stored — unless the
        // log holds a byte, which only redo written after the creation puts there (its files
        // are created zero-filled or empty). Then it is damage to a store whose commits may all
        // be in the log, and the open refuses it (the identity does not decode) instead of
        // removing the log with them.
        let short = file_len(fs, &dir.join(IDENTITY_FILE))? < crate::meta::IDENTITY_LEN as u64;
        if short
            && file_len(fs, &dir.join(DATA_FILE_NAME))? == 0
            && !log_holds_bytes(fs, &dir.join(LOG_DIR))?
        {
            return Ok(DirState::InterruptedCreation);
        }
        return Ok(DirState::Store { creating });
    }
    if creating {
        return Ok(DirState::InterruptedCreation);
    }
    let mut found: Vec<String> = [IDENTITY_TMP_FILE, DATA_FILE_NAME, DOUBLEWRITE_FILE_NAME]
        .iter()
        .filter(|n| has(n))
        .map(|n| n.to_string())
        .collect();
    if has(BACKUP_STAGING_DIR) {
        found.push(format!(
            "{BACKUP_STAGING_DIR}/ (a `keel backup` into this directory was interrupted: remove \
             the directory and run the backup again)"
        ));
    }
    if has(LOG_DIR) {
        let log = fs.list_dir(&dir.join(LOG_DIR)).unwrap_or_default();
        if !log.is_empty() {
            found.push(format!("{LOG_DIR}/ ({} files)", log.len()));
        }
    }
    Ok(if found.is_empty() {
        DirState::Empty
    } else {
        DirState::Incomplete { found }
    })
}

/// Whether a log file in `log` (its header aside) holds any byte other than zero. Read in
/// 1 MiB pieces: only the legacy interrupted creation asks, once.
fn log_holds_bytes(fs: &dyn FileSystem, log: &Path) -> Result<bool> {
    if !fs.exists(log)? {
        return Ok(false);
    }
    let mut buf = vec![0u8; 1 << 20];
    for p in fs.list_dir(log)? {
        if name(&p) == keel_redo_log::inspect::HEADER_FILE {
            continue;
        }
        let f = fs.open(
            &p,
            &keel_io::OpenOptions::new(keel_io::FileClass::Other).read_only(true),
        )?;
        let len = f.len()?;
        let mut at = 0u64;
        while at < len {
            let n = usize::try_from((len - at).min(buf.len() as u64)).unwrap_or(buf.len());
            let piece = &mut buf[..n];
            f.read_exact_at(piece, at)?;
            if piece.iter().any(|&b| b != 0) {
                return Ok(true);
            }
            at += n as u64;
        }
    }
    Ok(false)
}

fn file_len(fs: &dyn FileSystem, path: &Path) -> Result<u64> {
    if !fs.exists(path)? {
        return Ok(0);
    }
    let f = fs.open(
        path,
        &keel_io::OpenOptions::new(keel_io::FileClass::Other).read_only(true),
    )?;
    Ok(f.len()?)
}

/// Removes exactly what an interrupted creation may have written (never the lock file, never
/// files that are not Keel's).
pub(crate) fn clear_interrupted_creation(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    for n in [
        IDENTITY_TMP_FILE,
        DATA_FILE_NAME,
        DOUBLEWRITE_FILE_NAME,
        IDENTITY_FILE,
    ] {
        let p = dir.join(n);
        if fs.exists(&p)? {
            fs.remove_file(&p)?;
        }
    }
    let log = dir.join(LOG_DIR);
    if fs.exists(&log)? {
        for p in fs.list_dir(&log)? {
            fs.remove_file(&p)?;
        }
    }
    Ok(())
}

/// Step 1: the creation marker, durable before anything else is written.
pub(crate) fn mark_creating(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    let f = fs.open(
        &dir.join(CREATING_FILE),
        &keel_io::OpenOptions::new(keel_io::FileClass::Other).create(true),
    )?;
    f.sync_all()?;
    fs.sync_dir(dir)?;
    Ok(())
}

/// Step 4: the marker goes.
pub(crate) fn unmark_creating(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    let p = dir.join(CREATING_FILE);
    if fs.exists(&p)? {
        fs.remove_file(&p)?;
    }
    Ok(())
}

/// The error for a directory whose pieces are there without the identity.
pub(crate) fn incomplete(dir: &Path, missing: &str, found: &[String]) -> Error {
    Error::IncompleteStore {
        dir: dir.to_path_buf(),
        missing: missing.to_string(),
        found: if found.is_empty() {
            "nothing else".to_string()
        } else {
            found.join(", ")
        },
    }
}

/// The pieces of an existing store that are present (for messages).
pub(crate) fn present(fs: &dyn FileSystem, dir: &Path) -> Vec<String> {
    fs.list_dir(dir)
        .unwrap_or_default()
        .iter()
        .map(|p| name(p))
        .filter(|n| n != LOCK_FILE)
        .collect()
}

/// The lock file's path.
pub(crate) fn lock_path(dir: &Path) -> PathBuf {
    dir.join(LOCK_FILE)
}

/// Takes the store's lock in `dir` (`mode`: shared for a read-only open); held by someone else,
/// [`Error::AlreadyOpen`] naming the holder.
pub(crate) fn lock(
    fs: &dyn FileSystem,
    dir: &Path,
    mode: keel_io::LockMode,
) -> Result<Box<dyn keel_io::LockGuard>> {
    fs.lock(&lock_path(dir), mode).map_err(|e| match e {
        keel_io::IoError::Locked {
            holder, readers, ..
        } => Error::AlreadyOpen {
            dir: dir.to_path_buf(),
            pid: holder,
            readers,
        },
        other => Error::Io(other),
    })
}
