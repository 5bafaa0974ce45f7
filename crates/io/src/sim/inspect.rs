//! What can a test see of the simulated state? The names ([`SimFs::files`],
//! [`SimFs::durable_files`]), a file's latest and durable contents, its pending writes, the memory
//! it holds, and a [`FileSnapshot`] of everything a crash of it may draw from.
//!
//! Invariant: looking never changes anything (no crash point is counted, no fault fires, no
//! random number is drawn), and fails with `Crashed` on a crashed machine like every other call.

use super::namespace::norm;
use super::oracle::{FileSnapshot, PendingWrite};
use super::state::{FileState, Op};
use super::SimFs;
use crate::{IoError, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

impl SimFs {
    /// Every file with a live name, sorted.
    pub fn files(&self) -> Result<Vec<PathBuf>> {
        let ns = self.m.ns.lock();
        self.m.alive(Path::new("/"))?;
        Ok(ns.files.keys().cloned().collect())
    }

    /// Every file whose name is durable (would survive a crash), sorted.
    pub fn durable_files(&self) -> Result<Vec<PathBuf>> {
        let ns = self.m.ns.lock();
        self.m.alive(Path::new("/"))?;
        Ok(ns.durable_files.keys().cloned().collect())
    }

    /// The sum of the lengths of all files (what [`Fault::NoSpaceAbove`](super::Fault::NoSpaceAbove) compares).
    pub fn total_bytes(&self) -> u64 {
        self.m.total_len.load(Ordering::Relaxed)
    }

    fn with_file<T>(&self, path: &Path, f: impl FnOnce(&FileState) -> T) -> Result<T> {
        let path = norm(path);
        let ns = self.m.ns.lock();
        self.m.alive(&path)?;
        let inode = ns
            .files
            .get(&path)
            .ok_or_else(|| IoError::NotFound { path: path.clone() })?;
        let st = inode.state.lock();
        Ok(f(&st))
    }

    /// The latest contents of a file (what reads see).
    pub fn contents(&self, path: &Path) -> Result<Vec<u8>> {
        self.with_file(path, |st| st.current.to_vec())
    }

    /// The durable contents of a file: what a crash losing every pending write would leave.
    pub fn durable_contents(&self, path: &Path) -> Result<Vec<u8>> {
        self.with_file(path, |st| st.durable.to_vec())
    }

    /// Bytes of memory the latest image of a file holds (4 KiB per written, non-zero chunk).
    pub fn allocated_bytes(&self, path: &Path) -> Result<u64> {
        self.with_file(path, |st| st.current.allocated_bytes())
    }

    /// The writes issued to a file since its last successful sync (or failed one), in order.
    pub fn pending_writes(&self, path: &Path) -> Result<Vec<PendingWrite>> {
        self.with_file(path, |st| pending_of(st).0)
    }

    /// Everything a crash of this file may draw from; check the post-crash contents with
    /// [`FileSnapshot::check_crash_outcome`].
    pub fn snapshot(&self, path: &Path) -> Result<FileSnapshot> {
        let sector_size = self.m.config.sector_size;
        let p = norm(path);
        self.with_file(path, |st| {
            let (writes, set_lens) = pending_of(st);
            FileSnapshot {
                path: p,
                sector_size,
                durable: st.durable.to_vec(),
                current: st.current.to_vec(),
                writes,
                set_lens,
            }
        })
    }
}

fn pending_of(st: &FileState) -> (Vec<PendingWrite>, Vec<u64>) {
    let mut writes = Vec::new();
    let mut lens = Vec::new();
    for op in &st.pending {
        match op {
            Op::Write {
                offset,
                data,
                atomic,
                ..
            } => writes.push(PendingWrite {
                offset: *offset,
                data: data.to_vec(),
                atomic: *atomic,
            }),
            Op::SetLen { len, .. } => lens.push(*len),
        }
    }
    (writes, lens)
}
