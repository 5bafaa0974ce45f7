//! How are files opened, and directory changes made durable? [`FileSystem`] for [`OsFs`]: `open`
//! sets O_DIRECT / O_DSYNC / O_RDONLY from the [`OpenOptions`] and probes a direct file's
//! alignment and atomic limits; creating, renaming and removing entries sync the directories they
//! change.
//!
//! Invariant: a call that adds, renames or removes a directory entry returns Ok only once every
//! directory it changed was synced (`fsync` of the directory), so the change survives a crash.

use super::lock::lock_file;
use super::probe::{probe, probe_open_file};
use super::{OsFile, OsFs, DEFAULT_DIRECT_ALIGN};
use crate::{
    AtomicWriteLimits, Capabilities, DirectIoAlignment, File, FileSystem, IoCounters, IoError,
    OpenOptions, Result,
};
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

impl FileSystem for OsFs {
    fn open(&self, path: &Path, options: &OpenOptions) -> Result<Arc<dyn File>> {
        let existed = path.exists();
        let mut flags = 0;
        if options.direct {
            flags |= libc::O_DIRECT;
        }
        if options.write_through {
            flags |= libc::O_DSYNC;
        }
        let file = fs::OpenOptions::new()
            .read(true)
            .write(!options.read_only)
            .create(options.create && !options.read_only)
            .custom_flags(flags)
            .open(path)
            .map_err(|e| IoError::os("open", path, e))?;
        if options.create && !existed {
            self.sync_dir(&parent_of(path))?;
        }
        let (align, atomic) = if options.direct {
            let (d, a, _) = probe_open_file(&file);
            let fallback = DirectIoAlignment {
                memory: DEFAULT_DIRECT_ALIGN,
                offset: DEFAULT_DIRECT_ALIGN,
            };
            (d.unwrap_or(fallback), a)
        } else {
            (DirectIoAlignment::default(), AtomicWriteLimits::NONE)
        };
        Ok(Arc::new(OsFile {
            file,
            path: path.to_path_buf(),
            options: *options,
            counters: self.counters.clone(),
            atomic,
            align,
            rings: self.rings.clone(),
            sync_failed: AtomicBool::new(false),
            born: super::fork::generation(),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        path.try_exists().map_err(|e| IoError::os("stat", path, e))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        if path.is_dir() {
            return Ok(());
        }
        // A file in the way is named as such ("Not a directory"), not as a failed mkdir of
        // something that exists.
        if path.exists() {
            return Err(IoError::os(
                "mkdir",
                path,
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            ));
        }
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                self.create_dir_all(parent)?;
            }
        }
        match fs::create_dir(path) {
            Ok(()) => {}
            // Another thread or process created it meanwhile: fine, it is there.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(e) => return Err(IoError::os("mkdir", path, e)),
        }
        self.sync_dir(&parent_of(path))
    }

    fn list_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| IoError::os("readdir", dir, e))? {
            out.push(entry.map_err(|e| IoError::os("readdir", dir, e))?.path());
        }
        out.sort();
        Ok(out)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(|e| IoError::os("unlink", path, e))?;
        self.sync_dir(&parent_of(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).map_err(|e| IoError::os("rename", from, e))?;
        let (a, b) = (parent_of(from), parent_of(to));
        self.sync_dir(&b)?;
        if a != b {
            self.sync_dir(&a)?;
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let d = fs::File::open(dir).map_err(|e| IoError::os("open dir", dir, e))?;
        d.sync_all().map_err(|source| IoError::SyncFailed {
            path: dir.to_path_buf(),
            source,
        })
    }

    fn capabilities(&self, path: &Path) -> Result<Capabilities> {
        probe(path)
    }

    fn lock(&self, path: &Path, mode: crate::LockMode) -> Result<Box<dyn crate::LockGuard>> {
        lock_file(path, mode)
    }

    fn counters(&self) -> Arc<IoCounters> {
        self.counters.clone()
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
