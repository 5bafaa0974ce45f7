//! How does a copy of a store get an identity of its own? A store's identity is its log's salt
//! (random at creation): the data file's meta page and the doublewrite area record it, and a
//! file recording another store's is refused at the open (invariant 10). A byte-for-byte copy —
//! `keel backup`'s, or `cp -r` of a closed store — shares it, so files swapped between a store
//! and its copy passed that check and opened with the other copy's rows (a tester, session 42:
//! 15 of 58 data-file swaps between a store and its backup gave wrong rows; a doublewrite area
//! 10 of 25, the damage made permanent by the first open). [`give_new_identity`] gives a closed
//! copy a new salt in every file that records it, after which a file of one put in the other is
//! refused at the open.
//!
//! Steps: (1) a read-only open proves the store closed cleanly (recovery replays nothing and
//! repairs nothing: no redo after the checkpoint, so no page image with the old salt is ever
//! replayed into the meta page); (2) the store's exclusive lock is taken and the log header is
//! read again: unchanged, so nobody opened it read-write in between (every opening writes a
//! checkpoint slot); (3) the log gets the new salt (`keel_redo_log::change_salt`: every block
//! sealed again), then the meta page (sealed again, synced), then the doublewrite area (formatted: its
//! images, all of pages already home, would be restored over the changed meta page);
//! (4) a read-only open checks the result.
//!
//! Invariant: every file of the store records the new salt when this returns Ok, and its rows
//! are unchanged (test `keel/tests/open.rs`
//! `a_copy_given_its_own_identity_refuses_the_originals_files`). Not crash-atomic: a crash
//! between the steps of (3) leaves files recording two salts, which the open refuses (never a
//! store that opens with other rows); run it again on a fresh copy.

use crate::layout;
use crate::meta::{identity, M_STORE};
use crate::{Config, Error, Result, Store, LOG_DIR};
use keel_flush::{DATA_FILE_NAME, DOUBLEWRITE_FILE_NAME};
use keel_io::{FileClass, FileSystem, LockMode, OpenOptions, OsFs};
use keel_page::PageId;
use std::path::Path;

/// What [`give_new_identity`] changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NewIdentity {
    /// The salt the store had (shared with the store it was copied from).
    pub old: u32,
    /// The salt it has now.
    pub new: u32,
}

/// Gives the closed store in `dir` (a copy of another) an identity of its own: a new salt in
/// its log, its meta page and its doublewrite area (see the module docs).
///
/// ```
/// # fn main() -> keel::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = keel::Store::open(dir.path(), keel::Config::default())?;
/// store.close()?;
/// let changed = keel::give_new_identity(dir.path())?;
/// assert_ne!(changed.old, changed.new);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::AlreadyOpen`] if the store is open; [`Error::Format`] if it was not closed cleanly
/// (open and close it first) or was opened read-write during the call; any error of reading or
/// writing its files.
pub fn give_new_identity(dir: impl AsRef<Path>) -> Result<NewIdentity> {
    let dir = dir.as_ref();
    let fs = OsFs::new(keel_io::Backend::Pwrite);
    let header = || crate::config::log_header_bytes(&fs, dir);
    let not_clean = |detail: String| Error::Format {
        path: dir.to_path_buf(),
        detail,
    };
    // (1) Closed cleanly: nothing to replay, nothing to repair.
    let (header_path, before) = header()?;
    let config = Config {
        read_only: true,
        ..Config::for_store(dir)?
    };
    {
        let store = Store::open(dir, config.clone())?;
        let r = store.recovery();
        if r.groups_replayed != 0 || r.doublewrite_restored != 0 || r.log_loss.is_some() {
            return Err(not_clean(format!(
                "the store was not closed cleanly ({} groups to replay, {} torn pages): open \
                 it read-write and close it first",
                r.groups_replayed, r.doublewrite_restored
            )));
        }
    }
    // (2) Held, and nobody opened it read-write since (1).
    let _lock = layout::lock(&fs, dir, LockMode::Exclusive)?;
    if header()?.1 != before {
        return Err(not_clean(
            "the store was opened read-write while it was being given a new identity".into(),
        ));
    }
    let id = identity(&fs, dir)?;
    let log_dir = dir.join(LOG_DIR);
    let (st, _) = keel_redo_log::inspect::decode_header(&header_path, &before)?;
    let old = st.salt;
    let new = keel_redo_log::fresh_salt(&log_dir, old);
    // (3) The log, the meta page, the doublewrite area.
    keel_redo_log::change_salt(&fs, &log_dir, new)?;
    let data_path = dir.join(DATA_FILE_NAME);
    let data = fs.open(&data_path, &OpenOptions::new(FileClass::Data))?;
    let mut page = keel_io::AlignedBuf::page(id.page_size);
    data.read_exact_at(&mut page, 0)?;
    keel_page::verify(&page, PageId(0), id.checksum, &data_path).map_err(|e| Error::Format {
        path: data_path.clone(),
        detail: format!("the meta page: {e}"),
    })?;
    crate::meta::check_store(crate::meta::recorded_store(&page), old, &data_path)?;
    page[M_STORE..M_STORE + 4].copy_from_slice(&new.to_le_bytes());
    keel_page::seal(&mut page, id.checksum);
    data.write_all_at(&page, 0)?;
    data.sync_data()?;
    let area = dir.join(DOUBLEWRITE_FILE_NAME);
    if fs.exists(&area)? {
        keel_flush::reformat_area(&fs, &area, old, new)?;
    }
    drop(_lock);
    // (4) It opens, as itself.
    Store::open(dir, config)?;
    Ok(NewIdentity { old, new })
}
