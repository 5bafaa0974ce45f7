//! [`OsFs`]: real files through the OS.
//!
//! This first cut has the plain `pread`/`pwrite` backend; io_uring, the statx probe and
//! RWF_ATOMIC are added on top of it.

use crate::{
    AtomicWriteLimits, Capabilities, File, FileClass, FileSystem, IoCounters, IoError, OpenOptions,
    ReadOp, Result, WriteOp,
};
use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Which system calls [`OsFs`] uses for data I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// One `pread`/`pwrite` system call per request.
    #[default]
    Pwrite,
}

/// Real files.
#[derive(Debug, Clone)]
pub struct OsFs {
    backend: Backend,
    counters: Arc<IoCounters>,
}

impl Default for OsFs {
    fn default() -> Self {
        OsFs::new(Backend::default())
    }
}

impl OsFs {
    /// A file system using `backend`.
    pub fn new(backend: Backend) -> OsFs {
        OsFs {
            backend,
            counters: Arc::new(IoCounters::default()),
        }
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }
}

/// A file opened by [`OsFs`].
#[derive(Debug)]
pub struct OsFile {
    file: fs::File,
    path: PathBuf,
    options: OpenOptions,
    counters: Arc<IoCounters>,
    atomic: AtomicWriteLimits,
}

const DIRECT_ALIGN: usize = 512;

impl OsFile {
    fn check_direct(&self, offset: u64, len: usize, addr: usize) -> Result<()> {
        if self.options.direct
            && (offset % DIRECT_ALIGN as u64 != 0
                || len % DIRECT_ALIGN != 0
                || addr % DIRECT_ALIGN != 0)
        {
            return Err(IoError::Misaligned {
                path: self.path.clone(),
                offset,
                len,
                addr,
                align: DIRECT_ALIGN,
            });
        }
        Ok(())
    }

    fn map_write_err(&self, e: std::io::Error, offset: u64, len: usize) -> IoError {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            IoError::NoSpace {
                path: self.path.clone(),
                offset,
                len,
            }
        } else {
            IoError::os("pwrite", &self.path, e)
        }
    }
}

impl File for OsFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn class(&self) -> FileClass {
        self.options.class
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.check_direct(offset, buf.len(), buf.as_ptr() as usize)?;
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    return Err(IoError::ShortRead {
                        path: self.path.clone(),
                        offset,
                        wanted: buf.len(),
                        got: done,
                    })
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(IoError::os("pread", &self.path, e)),
            }
        }
        self.counters.read(self.options.class, buf.len());
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check_direct(offset, buf.len(), buf.as_ptr() as usize)?;
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| self.map_write_err(e, offset, buf.len()))?;
        self.counters.write(self.options.class, buf.len());
        Ok(())
    }

    fn write_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        for w in writes {
            self.write_all_at(w.buf, w.offset)?;
        }
        Ok(())
    }

    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> Result<()> {
        for r in reads.iter_mut() {
            self.read_exact_at(r.buf, r.offset)?;
        }
        Ok(())
    }

    fn write_atomic(&self, buf: &[u8], offset: u64) -> Result<()> {
        Err(IoError::AtomicUnsupported {
            path: self.path.clone(),
            reason: format!(
                "not probed yet (limits {:?}), {offset} {}",
                self.atomic,
                buf.len()
            ),
        })
    }

    fn write_atomic_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        for w in writes {
            self.write_atomic(w.buf, w.offset)?;
        }
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        self.file.sync_all().map_err(|source| IoError::SyncFailed {
            path: self.path.clone(),
            source,
        })?;
        self.counters.sync(self.options.class);
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|source| IoError::SyncFailed {
                path: self.path.clone(),
                source,
            })?;
        self.counters.sync(self.options.class);
        Ok(())
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on a file descriptor we own; no memory is passed.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        match rc {
            0 => Ok(()),
            libc::ENOSPC => Err(IoError::NoSpace {
                path: self.path.clone(),
                offset,
                len: len as usize,
            }),
            e => Err(IoError::os(
                "posix_fallocate",
                &self.path,
                std::io::Error::from_raw_os_error(e),
            )),
        }
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| IoError::os("ftruncate", &self.path, e))
    }

    fn len(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| IoError::os("fstat", &self.path, e))?
            .len())
    }

    fn atomic_write_limits(&self) -> AtomicWriteLimits {
        self.atomic
    }

    fn is_direct(&self) -> bool {
        self.options.direct
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

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
            .write(true)
            .create(options.create)
            .custom_flags(flags)
            .open(path)
            .map_err(|e| IoError::os("open", path, e))?;
        if options.create && !existed {
            self.sync_dir(&parent_of(path))?;
        }
        Ok(Arc::new(OsFile {
            file,
            path: path.to_path_buf(),
            options: *options,
            counters: self.counters.clone(),
            atomic: AtomicWriteLimits::NONE,
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        path.try_exists().map_err(|e| IoError::os("stat", path, e))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        if path.is_dir() {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                self.create_dir_all(parent)?;
            }
        }
        fs::create_dir(path).map_err(|e| IoError::os("mkdir", path, e))?;
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
        Ok(Capabilities {
            path: path.to_path_buf(),
            filesystem: String::from("unknown"),
            direct_io: None,
            logical_block_size: 512,
            physical_block_size: 4096,
            atomic: AtomicWriteLimits::NONE,
            io_uring: false,
        })
    }

    fn counters(&self) -> Arc<IoCounters> {
        self.counters.clone()
    }
}
