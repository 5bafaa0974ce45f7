//! How does a copy of a log get a salt of its own? A log's salt (random at creation, mixed into
//! every block checksum) is its store's identity: the data file's meta page and the doublewrite
//! area record it, and a file recording another salt is refused. A byte-for-byte copy (a backup,
//! `cp -r`) shares it, so files swapped between a store and its copy passed that check and gave
//! the other copy's rows (a tester: 15 of 58 data-file swaps). [`change_salt`] gives a copied
//! log a new salt: every block that verifies under the old salt is sealed again under the new
//! one (its bytes otherwise unchanged), then the header's static block and every valid
//! checkpoint slot are written with the new salt.
//!
//! Invariants: a block valid under the old salt before is valid under the new one after, with
//! the same bytes up to its checksum; a block that did not verify before still does not
//! (test `a_changed_salt_keeps_every_block_and_refuses_the_old_one`). The caller holds the
//! store's exclusive lock and knows the log is at rest (nothing is written meanwhile). Not
//! crash-atomic: the files are synced before the header, and a crash in between leaves blocks
//! the header's salt does not verify — a log refused at open, never a silently different one.

use crate::block::{block_crc, BLOCK_TRAILER};
use crate::error::{LogError, Result};
use crate::header::{decode_header, Slot, StaticHeader, HEADER_BYTES, HEADER_FILE};
use keel_io::{FileClass, FileSystem, OpenOptions};
use std::path::Path;

/// What [`change_salt`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaltChange {
    /// The salt the log had.
    pub old: u32,
    /// The salt it has now.
    pub new: u32,
    /// Blocks sealed again under the new salt.
    pub blocks: u64,
}

/// A new salt for the log in `log_dir` (random: time, process and path mixed; bit 0 set, so
/// never 0), different from `old`.
pub fn fresh_salt(log_dir: &Path, old: u32) -> u32 {
    let new = crate::log::salt_now(log_dir);
    if new == old {
        new.wrapping_add(2)
    } else {
        new
    }
}

/// Gives the log in `log_dir` the salt `new` (see the module docs; [`fresh_salt`] makes one).
///
/// # Errors
///
/// The header does not decode ([`LogError::CorruptHeader`]), `new` is the log's salt already
/// or has bit 0 clear ([`LogError::InvalidConfig`]), a log file cannot be read or written, or a
/// sync fails.
pub fn change_salt(fs: &dyn FileSystem, log_dir: &Path, new: u32) -> Result<SaltChange> {
    let hpath = log_dir.join(HEADER_FILE);
    let header = fs.open(&hpath, &OpenOptions::new(FileClass::Log))?;
    let mut bytes = vec![0u8; HEADER_BYTES];
    header.read_exact_at(&mut bytes, 0)?;
    let (st, _) = decode_header(&hpath, &bytes)?;
    let old = st.salt;
    if new == old || new & 1 == 0 {
        return Err(LogError::InvalidConfig {
            reason: format!("salt {new:#010x}: a new salt differs from the log's ({old:#010x}) and has bit 0 set"),
        });
    }
    let b = st.block_size as usize;
    let mut blocks = 0u64;
    for path in fs.list_dir(log_dir)? {
        let is_log_file = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(crate::files::parse_name)
            .is_some();
        if !is_log_file {
            continue;
        }
        let f = fs.open(&path, &OpenOptions::new(FileClass::Log))?;
        let len = f.len()?;
        let whole = usize::try_from(len / b as u64).map_err(|_| LogError::BadFile {
            path: path.clone(),
            reason: format!("{len} bytes do not fit in memory"),
        })?;
        let mut file = vec![0u8; whole * b];
        f.read_exact_at(&mut file, 0)?;
        for block in file.chunks_exact_mut(b) {
            let n = b - BLOCK_TRAILER;
            let stored = u32::from_le_bytes([block[n], block[n + 1], block[n + 2], block[n + 3]]);
            if stored == block_crc(old, &block[..n]) {
                let crc = block_crc(new, &block[..n]);
                block[n..].copy_from_slice(&crc.to_le_bytes());
                blocks += 1;
            }
        }
        f.write_all_at(&file, 0)?;
        f.sync_data()?;
    }
    let renewed = StaticHeader { salt: new, ..st };
    bytes[..renewed.encode().len()].copy_from_slice(&renewed.encode());
    for seq in [1u64, 2] {
        let at = Slot::offset(seq) as usize;
        let end = at + crate::header::SLOT_BYTES;
        if let Ok(slot) = Slot::decode(&bytes[at..end], old) {
            let enc = slot.encode(new);
            bytes[at..at + enc.len()].copy_from_slice(&enc);
        }
    }
    header.write_all_at(&bytes, 0)?;
    header.sync_data()?;
    Ok(SaltChange { old, new, blocks })
}
