//! [`ReadOnlyFs`]: a view of any [`FileSystem`] through which nothing can be modified.
//!
//! Invariant (tested): no call through a `ReadOnlyFs` or a file it opened changes a byte, a
//! name or a length below it. Every open is passed down read-only (O_RDONLY, so it works on a
//! read-only mount); creating a file that does not exist, writing, syncing, preallocating,
//! truncating, renaming, removing and creating directories fail with [`IoError::ReadOnly`]
//! naming the path and the operation. Locks are taken shared.

use crate::{
    AtomicWriteLimits, Capabilities, File, FileClass, FileSystem, IoCounters, IoError, LockGuard,
    LockMode, OpenOptions, ReadOp, Result, WriteOp,
};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A read-only view of a file system (see the module docs).
#[derive(Debug, Clone)]
pub struct ReadOnlyFs {
    inner: Arc<dyn FileSystem>,
}

impl ReadOnlyFs {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn FileSystem>) -> ReadOnlyFs {
        ReadOnlyFs { inner }
    }
}

fn refused(path: &Path, op: &'static str) -> IoError {
    IoError::ReadOnly {
        path: path.to_path_buf(),
        op,
    }
}

impl FileSystem for ReadOnlyFs {
    fn open(&self, path: &Path, options: &OpenOptions) -> Result<Arc<dyn File>> {
        if options.create && !self.inner.exists(path)? {
            return Err(refused(path, "create"));
        }
        let opts = OpenOptions {
            create: false,
            write_through: false,
            read_only: true,
            ..*options
        };
        let file = self.inner.open(path, &opts)?;
        Ok(Arc::new(ReadOnlyFile { inner: file }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        if self.inner.exists(path)? {
            Ok(())
        } else {
            Err(refused(path, "create directory"))
        }
    }

    fn list_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.inner.list_dir(dir)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        Err(refused(path, "remove"))
    }

    fn rename(&self, from: &Path, _to: &Path) -> Result<()> {
        Err(refused(from, "rename"))
    }

    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        // Nothing was changed through this view, so there is nothing to make durable.
        Ok(())
    }

    fn capabilities(&self, path: &Path) -> Result<Capabilities> {
        self.inner.capabilities(path)
    }

    fn counters(&self) -> Arc<IoCounters> {
        self.inner.counters()
    }

    fn lock(&self, path: &Path, _mode: LockMode) -> Result<Box<dyn LockGuard>> {
        self.inner.lock(path, LockMode::Shared)
    }
}

/// A file opened through [`ReadOnlyFs`].
#[derive(Debug)]
struct ReadOnlyFile {
    inner: Arc<dyn File>,
}

impl File for ReadOnlyFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn class(&self) -> FileClass {
        self.inner.class()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, _buf: &[u8], _offset: u64) -> Result<()> {
        Err(refused(self.path(), "write"))
    }

    fn write_batch(&self, _writes: &[WriteOp<'_>]) -> Result<()> {
        Err(refused(self.path(), "write"))
    }

    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> Result<()> {
        self.inner.read_batch(reads)
    }

    fn write_atomic(&self, _buf: &[u8], _offset: u64) -> Result<()> {
        Err(refused(self.path(), "write"))
    }

    fn write_atomic_batch(&self, _writes: &[WriteOp<'_>]) -> Result<()> {
        Err(refused(self.path(), "write"))
    }

    fn sync_all(&self) -> Result<()> {
        Err(refused(self.path(), "sync"))
    }

    fn sync_data(&self) -> Result<()> {
        Err(refused(self.path(), "sync"))
    }

    fn allocate(&self, _offset: u64, _len: u64) -> Result<()> {
        Err(refused(self.path(), "allocate"))
    }

    fn set_len(&self, _len: u64) -> Result<()> {
        Err(refused(self.path(), "truncate"))
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }

    fn atomic_write_limits(&self) -> AtomicWriteLimits {
        self.inner.atomic_write_limits()
    }

    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }

    fn drop_cache(&self) -> Result<()> {
        // Forgetting cached pages writes nothing: the device's bytes are the file's.
        self.inner.drop_cache()
    }
}
