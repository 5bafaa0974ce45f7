//! Is a store's directory still where its path says? Files are created, opened, renamed and
//! removed by path (the store's directory joined with a name). A store directory renamed
//! while open — and a new store created at the old path — made the old store's growing log
//! create its next files in, and remove its old files from, the new store's directory: both
//! stores became unopenable (a tester, s42). So a lock taken through [`OsFs`](super::OsFs)
//! *pins* the directory it locks (its device and inode, read from the locked descriptor), and
//! every call of the file system naming a path under a pinned directory first checks that the
//! directory's path still resolves to that directory; if not, the call fails with
//! [`IoError::Moved`] before touching anything. A store whose directory was moved thus poisons
//! itself at its next file creation (its open files, reached by descriptor, stay its own), and
//! the directory now at the old path is left alone.
//!
//! Invariant: no call of [`OsFs`](super::OsFs) creates, opens, renames, removes, lists or syncs
//! an entry by a path under a pinned directory whose path resolves to another directory (or to
//! nothing). Test: `a_moved_directory_is_refused_by_path` (and `keel/tests/open.rs`
//! `a_store_directory_moved_while_open_leaves_the_new_store_at_its_path_alone`).

use crate::{IoError, Result};
use parking_lot::Mutex;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One pinned directory.
#[derive(Debug)]
struct Pin {
    /// Which lock pinned it (a lock removes its own pin).
    id: u64,
    /// The directory's path as the lock named it.
    dir: PathBuf,
    /// Its device and inode at the lock.
    dev: u64,
    ino: u64,
}

/// The directories locked through one [`OsFs`](super::OsFs).
#[derive(Debug, Default)]
pub(crate) struct Pins {
    pins: Mutex<(u64, Vec<Pin>)>,
}

impl Pins {
    /// Pins `dir`, whose open descriptor is `file`; returns the pin's id for [`unpin`].
    pub(crate) fn pin(&self, dir: &Path, file: &std::fs::File) -> Result<u64> {
        let m = file.metadata().map_err(|e| IoError::os("fstat", dir, e))?;
        let mut p = self.pins.lock();
        p.0 += 1;
        let id = p.0;
        p.1.push(Pin {
            id,
            dir: dir.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
        });
        Ok(id)
    }

    /// Removes the pin `id`.
    pub(crate) fn unpin(&self, id: u64) {
        self.pins.lock().1.retain(|p| p.id != id);
    }

    /// Refuses `path` if it lies under a pinned directory whose path no longer resolves to it.
    pub(crate) fn check(&self, path: &Path) -> Result<()> {
        let p = self.pins.lock();
        for pin in p.1.iter().filter(|pin| path.starts_with(&pin.dir)) {
            let same =
                std::fs::metadata(&pin.dir).is_ok_and(|m| m.dev() == pin.dev && m.ino() == pin.ino);
            if !same {
                return Err(IoError::Moved {
                    dir: pin.dir.clone(),
                    path: path.to_path_buf(),
                });
            }
        }
        Ok(())
    }
}

/// A lock's pin, removed when the lock is dropped.
#[derive(Debug)]
pub(crate) struct PinGuard {
    pub(crate) pins: Arc<Pins>,
    pub(crate) id: u64,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        self.pins.unpin(self.id);
    }
}

#[cfg(test)]
mod tests {
    use crate::{FileClass, FileSystem, IoError, LockMode, OpenOptions, OsFs};

    #[test]
    fn a_moved_directory_is_refused_by_path() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        let fs = OsFs::auto();
        let lock = fs.lock(&a.join("LOCK"), LockMode::Exclusive).unwrap();
        let f = fs
            .open(&a.join("f"), &OpenOptions::new(FileClass::Log).create(true))
            .unwrap();
        // Moved, and another directory made at the old path.
        std::fs::rename(&a, &b).unwrap();
        std::fs::create_dir(&a).unwrap();
        std::fs::write(a.join("theirs"), b"theirs").unwrap();
        let moved = |r: crate::Result<()>| matches!(r, Err(IoError::Moved { .. }));
        let create = OpenOptions::new(FileClass::Log).create(true);
        assert!(moved(fs.open(&a.join("g"), &create).map(drop)));
        assert!(moved(fs.remove_file(&a.join("theirs"))));
        assert!(moved(fs.rename(&a.join("theirs"), &a.join("x"))));
        assert!(moved(fs.create_dir_all(&a.join("log"))));
        assert!(moved(fs.list_dir(&a).map(drop)));
        assert!(moved(fs.sync_dir(&a)));
        assert!(moved(fs.exists(&a.join("theirs")).map(drop)));
        let e = fs.open(&a.join("g"), &create).map(drop).unwrap_err();
        assert!(e.to_string().contains("moved"), "{e}");
        // Nothing was touched at the old path; the open file is still the moved one's.
        assert!(a.join("theirs").exists() && !a.join("g").exists() && !a.join("log").exists());
        f.write_all_at(b"ours", 0).unwrap();
        assert_eq!(std::fs::read(b.join("f")).unwrap(), b"ours");
        // Paths outside the pinned directory, and after the lock is gone, are not checked.
        assert!(fs.exists(&root.path().join("elsewhere")).is_ok());
        drop(lock);
        assert!(fs.exists(&a.join("theirs")).unwrap());
        // Break it on purpose: a file system that pinned nothing creates at the old path.
        let unpinned = OsFs::auto();
        unpinned.open(&a.join("g"), &create).unwrap();
        assert!(a.join("g").exists());
    }
}
