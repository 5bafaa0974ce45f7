//! [`OsFs`]: real files through the OS, with two backends behind the same traits.
//!
//! - [`Backend::Pwrite`]: one `pread`/`pwrite` per request; atomic writes with
//!   `pwritev2(.., RWF_ATOMIC)`. Batches are done one request after the other.
//! - [`Backend::IoUring`]: every data request goes through an io_uring ring; a batch
//!   (`write_batch`, `read_batch`, `write_atomic_batch`) is submitted together in one
//!   `io_uring_enter` (up to 128 requests in flight), atomic writes carry `RWF_ATOMIC` in the SQE's
//!   `rw_flags`. Rings come from a small pool per file system (see the `uring` module docs for why
//!   that is safe with many threads). Syncs, `fallocate` and `ftruncate` are plain system calls in
//!   both backends.
//! - [`Backend::Auto`] (the default, also [`OsFs::auto`]): io_uring when a ring can be set up here
//!   ([`io_uring_status`]), else pwrite. [`OsFs::backend`] tells which one was chosen.
//!
//! Both backends map errors the same way: `ENOSPC` → [`IoError::NoSpace`], `ENOENT` →
//! [`IoError::NotFound`], a read past end-of-file → [`IoError::ShortRead`], an atomic write the
//! kernel refuses with `EOPNOTSUPP` → [`IoError::AtomicUnsupported`] and with `EINVAL` →
//! [`IoError::AtomicRejected`], anything else → [`IoError::Os`] naming the system call.
//!
//! # Probing
//!
//! [`FileSystem::capabilities`] reports the file system's name (`statfs` `f_type`), the direct-I/O
//! alignment and the atomic-write limits (`statx` with `STATX_DIOALIGN | STATX_WRITE_ATOMIC` on a
//! scratch file opened with O_DIRECT: buffered files report no atomic writes), the logical and
//! physical block size of the device (`/sys/dev/block/MAJ:MIN/queue`, see [`device_info`]; when no
//! block device backs the file system, as on tmpfs, the direct-I/O offset alignment or 512 and the
//! file's `st_blksize`) and whether io_uring works. A file opened `direct` is probed the same way
//! at open and carries its limits ([`File::atomic_write_limits`]) and its alignment.
//!
//! # Invariants (each has a test that breaks it on purpose)
//!
//! 1. A direct-I/O request whose offset or length is not a multiple of the file's
//!    `stx_dio_offset_align`, or whose buffer address is not a multiple of `stx_dio_mem_align`
//!    (512 for both when the kernel reports none), is rejected with [`IoError::Misaligned`] before
//!    any I/O — for a batch, before any request of the batch is issued. So is a request ending
//!    past `i64::MAX` ([`IoError::OutOfRange`]). These checks, and those of invariant 2, are the
//!    pre-I/O contract that SimFs shares (the crate's `contract` module).
//!    Tests: `direct_misalignment_is_rejected_before_io`, `requests_ending_past_the_largest_offset_are_rejected_before_io`
//!    (conformance suite), `contract::tests`.
//! 2. An atomic write is issued only on a direct file with probed atomic limits
//!    ([`IoError::AtomicUnsupported`] otherwise) and only if [`AtomicWriteLimits::check`] accepts
//!    its length and offset ([`IoError::AtomicRejected`] otherwise), checked for every request of
//!    a batch before any is issued. Tests: `atomic_writes_are_refused_before_io_*`, the XFS tests.
//! 3. A failed sync is sticky: after one `fsync`/`fdatasync` of a handle failed, every later sync
//!    of that handle fails too (Linux may report a writeback error only once; a retry that
//!    "succeeds" would turn lost data into success). Test: `a_failed_sync_stays_failed`.
//! 4. Counters count each request once, when it completes: a batch whose request N failed counts
//!    exactly the requests that completed. Tests: the conformance suite's counter checks,
//!    `uring::tests::an_error_mid_batch_still_reaps_every_completion`.

mod device;
mod pwrite;
pub mod statx;
mod uring;

pub use device::{device_info, filesystem_name, DeviceInfo};
pub use uring::io_uring_status;

use crate::contract::{self, Contract};
use crate::{
    AtomicWriteLimits, Capabilities, DirectIoAlignment, File, FileClass, FileSystem, IoCounters,
    IoError, OpenOptions, ReadOp, Result, WriteOp,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use uring::RingPool;

/// `RWF_ATOMIC` (`include/uapi/linux/fs.h`, Linux 6.11): the write is all-or-nothing.
pub const RWF_ATOMIC: i32 = 0x40;

/// The direct-I/O alignment assumed when the kernel does not report `STATX_DIOALIGN`.
const DEFAULT_DIRECT_ALIGN: u32 = 512;

/// Which system calls [`OsFs`] uses for data I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// One `pread`/`pwrite`/`pwritev2` system call per request.
    Pwrite,
    /// io_uring: batches submitted together.
    IoUring,
    /// io_uring if a ring can be set up on this machine, else pwrite. Resolved when the
    /// [`OsFs`] is created.
    #[default]
    Auto,
}

impl Backend {
    /// The concrete backend this one stands for here (`Auto` resolved).
    pub fn resolve(self) -> Backend {
        match self {
            Backend::Auto if io_uring_status().is_ok() => Backend::IoUring,
            Backend::Auto => Backend::Pwrite,
            b => b,
        }
    }

    /// The name used in configs and reports: `pwrite`, `io_uring`, `auto`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Pwrite => "pwrite",
            Backend::IoUring => "io_uring",
            Backend::Auto => "auto",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Backend, String> {
        match s {
            "pwrite" => Ok(Backend::Pwrite),
            "io_uring" | "io-uring" | "uring" => Ok(Backend::IoUring),
            "auto" => Ok(Backend::Auto),
            _ => Err(format!(
                "unknown I/O backend {s:?} (expected pwrite, io_uring or auto)"
            )),
        }
    }
}

/// Real files.
#[derive(Debug, Clone)]
pub struct OsFs {
    backend: Backend,
    counters: Arc<IoCounters>,
    rings: Option<Arc<RingPool>>,
}

impl Default for OsFs {
    fn default() -> Self {
        OsFs::auto()
    }
}

impl OsFs {
    /// A file system using `backend` (`Auto` is resolved now). With [`Backend::IoUring`] on a
    /// machine where no ring can be set up, every data request fails with an
    /// [`IoError::Os`] for `io_uring_setup`; check [`io_uring_status`] or use `Auto`.
    pub fn new(backend: Backend) -> OsFs {
        let backend = backend.resolve();
        OsFs {
            backend,
            counters: Arc::new(IoCounters::default()),
            rings: (backend == Backend::IoUring).then(|| Arc::new(RingPool::new())),
        }
    }

    /// io_uring when it works here, else pwrite.
    pub fn auto() -> OsFs {
        OsFs::new(Backend::Auto)
    }

    /// The backend in use (never `Auto`).
    pub fn backend(&self) -> Backend {
        self.backend
    }
}

/// What kind of data request an [`Op`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
    AtomicWrite,
}

/// One data request for the io_uring engine: a raw view of a caller's buffer, borrowed for `'a`.
#[derive(Debug)]
pub(crate) struct Op<'a> {
    kind: Kind,
    offset: u64,
    ptr: *mut u8,
    len: usize,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> Op<'a> {
    /// A write (plain or atomic) of `buf` at `offset`. The kernel only reads through `ptr`.
    pub(crate) fn write(buf: &'a [u8], offset: u64, kind: Kind) -> Op<'a> {
        Op {
            kind,
            offset,
            ptr: buf.as_ptr() as *mut u8,
            len: buf.len(),
            _buf: PhantomData,
        }
    }

    /// A read into `buf` from `offset`.
    pub(crate) fn read(buf: &'a mut [u8], offset: u64) -> Op<'a> {
        Op {
            kind: Kind::Read,
            offset,
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _buf: PhantomData,
        }
    }
}

/// How one request failed, before it is turned into an [`IoError`] naming the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The kernel returned this errno.
    Errno(i32),
    /// End of file after `got` bytes.
    ShortRead { got: usize },
    /// A write transferred nothing after `done` bytes.
    WriteZero { done: usize },
    /// An atomic write transferred only `got` bytes.
    ShortAtomic { got: usize },
    /// `io_uring_enter` itself failed with this errno.
    Enter(i32),
}

/// A file opened by [`OsFs`].
#[derive(Debug)]
pub struct OsFile {
    file: fs::File,
    path: PathBuf,
    options: OpenOptions,
    counters: Arc<IoCounters>,
    atomic: AtomicWriteLimits,
    align: DirectIoAlignment,
    rings: Option<Arc<RingPool>>,
    sync_failed: AtomicBool,
}

impl OsFile {
    /// The direct-I/O alignment enforced on this file (probed at open; meaningful when direct).
    pub fn direct_io_alignment(&self) -> DirectIoAlignment {
        self.align
    }

    /// The pre-I/O contract of this file (see the `contract` module).
    fn contract(&self) -> Contract {
        Contract {
            direct: self.options.direct,
            align: self.align,
            atomic: self.atomic,
        }
    }

    fn op_name(&self, kind: Kind) -> &'static str {
        match (self.rings.is_some(), kind) {
            (false, Kind::Read) => "pread",
            (false, Kind::Write) => "pwrite",
            (false, Kind::AtomicWrite) => "pwritev2(RWF_ATOMIC)",
            (true, Kind::Read) => "io_uring read",
            (true, Kind::Write) => "io_uring write",
            (true, Kind::AtomicWrite) => "io_uring write(RWF_ATOMIC)",
        }
    }

    /// Turns a failed request into the error both backends report for it.
    fn error(&self, kind: Kind, offset: u64, len: usize, failure: Failure) -> IoError {
        let op = self.op_name(kind);
        let path = self.path.clone();
        match failure {
            Failure::ShortRead { got } => IoError::ShortRead {
                path,
                offset,
                wanted: len,
                got,
            },
            Failure::WriteZero { done } => IoError::Os {
                op,
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("wrote nothing after {done} of {len} bytes at offset {offset}"),
                ),
            },
            Failure::ShortAtomic { got } => IoError::Os {
                op,
                path,
                source: std::io::Error::other(format!(
                    "atomic write of {len} bytes at offset {offset} transferred only {got} bytes"
                )),
            },
            Failure::Enter(errno) => IoError::os(
                "io_uring_enter",
                &path,
                std::io::Error::from_raw_os_error(errno),
            ),
            Failure::Errno(libc::ENOSPC) if kind != Kind::Read => {
                IoError::NoSpace { path, offset, len }
            }
            Failure::Errno(libc::EOPNOTSUPP) if kind == Kind::AtomicWrite => {
                IoError::AtomicUnsupported {
                    path,
                    reason: "the kernel refused RWF_ATOMIC on this file (EOPNOTSUPP)".into(),
                }
            }
            Failure::Errno(libc::EINVAL) if kind == Kind::AtomicWrite => IoError::AtomicRejected {
                path,
                offset,
                len,
                reason: "the kernel refused it (EINVAL) although the probed limits allow it".into(),
            },
            Failure::Errno(errno) => {
                IoError::os(op, &path, std::io::Error::from_raw_os_error(errno))
            }
        }
    }

    fn count(&self, kind: Kind, len: usize) {
        let class = self.options.class;
        match kind {
            Kind::Read => self.counters.read(class, len),
            Kind::Write => self.counters.write(class, len),
            Kind::AtomicWrite => self.counters.atomic_write(class, len),
        }
    }

    /// Runs `ops` through an io_uring ring of the pool, counting each completed one.
    fn ring_run(&self, pool: &RingPool, ops: &[Op<'_>]) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut ring = pool
            .take()
            .map_err(|e| IoError::os("io_uring_setup", &self.path, e))?;
        ring.run(self.file.as_raw_fd(), ops, |i| {
            if let Some(op) = ops.get(i) {
                self.count(op.kind, op.len);
            }
        })
        .map_err(|(i, failure)| match ops.get(i) {
            Some(op) => self.error(op.kind, op.offset, op.len, failure),
            None => self.error(Kind::Write, 0, 0, failure),
        })
    }

    /// Writes (plain or atomic) with the pwrite backend, one after the other.
    fn pwrite_each(&self, writes: &[WriteOp<'_>], kind: Kind) -> Result<()> {
        for w in writes {
            let r = match kind {
                Kind::AtomicWrite => pwrite::write_atomic(&self.file, w.buf, w.offset),
                _ => pwrite::write_all(&self.file, w.buf, w.offset),
            };
            r.map_err(|f| self.error(kind, w.offset, w.buf.len(), f))?;
            self.count(kind, w.buf.len());
        }
        Ok(())
    }

    fn write_ops(&self, writes: &[WriteOp<'_>], kind: Kind) -> Result<()> {
        match &self.rings {
            Some(pool) => {
                let ops: Vec<Op<'_>> = writes
                    .iter()
                    .map(|w| Op::write(w.buf, w.offset, kind))
                    .collect();
                self.ring_run(pool, &ops)
            }
            None => self.pwrite_each(writes, kind),
        }
    }

    fn sync_with(
        &self,
        what: &'static str,
        f: impl FnOnce(&fs::File) -> std::io::Result<()>,
    ) -> Result<()> {
        if self.sync_failed.load(Ordering::Acquire) {
            return Err(IoError::SyncFailed {
                path: self.path.clone(),
                source: std::io::Error::other(format!(
                    "an earlier sync of this handle failed; refusing to report {what} as \
                     successful"
                )),
            });
        }
        if let Err(source) = f(&self.file) {
            self.sync_failed.store(true, Ordering::Release);
            return Err(IoError::SyncFailed {
                path: self.path.clone(),
                source,
            });
        }
        self.counters.sync(self.options.class);
        Ok(())
    }
}

#[cfg(test)]
impl OsFile {
    /// An `OsFile` over an already open `file` whose direct flag, alignment and atomic limits are
    /// taken as given instead of probed: for tests that need limits this machine's file system
    /// does not have (the I/O itself goes to `file` as it was opened).
    pub(crate) fn faked(
        fs: &OsFs,
        file: fs::File,
        path: PathBuf,
        options: OpenOptions,
        align: DirectIoAlignment,
        atomic: AtomicWriteLimits,
    ) -> OsFile {
        OsFile {
            file,
            path,
            options,
            counters: fs.counters.clone(),
            atomic,
            align,
            rings: fs.rings.clone(),
            sync_failed: AtomicBool::new(false),
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
        self.contract().check_read(&self.path, buf, offset)?;
        let len = buf.len();
        match &self.rings {
            Some(pool) => self.ring_run(pool, &[Op::read(buf, offset)]),
            None => {
                pwrite::read_exact(&self.file, buf, offset)
                    .map_err(|f| self.error(Kind::Read, offset, len, f))?;
                self.count(Kind::Read, len);
                Ok(())
            }
        }
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.contract().check_write(&self.path, buf, offset)?;
        self.write_ops(&[WriteOp { offset, buf }], Kind::Write)
    }

    fn write_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        self.contract().check_writes(&self.path, writes)?;
        self.write_ops(writes, Kind::Write)
    }

    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> Result<()> {
        self.contract().check_reads(&self.path, reads)?;
        match &self.rings {
            Some(pool) => {
                let ops: Vec<Op<'_>> = reads
                    .iter_mut()
                    .map(|r| Op::read(r.buf, r.offset))
                    .collect();
                self.ring_run(pool, &ops)
            }
            None => {
                for r in reads.iter_mut() {
                    let len = r.buf.len();
                    pwrite::read_exact(&self.file, r.buf, r.offset)
                        .map_err(|f| self.error(Kind::Read, r.offset, len, f))?;
                    self.count(Kind::Read, len);
                }
                Ok(())
            }
        }
    }

    fn write_atomic(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.contract().check_atomic(&self.path, buf, offset)?;
        self.write_ops(&[WriteOp { offset, buf }], Kind::AtomicWrite)
    }

    fn write_atomic_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        self.contract().check_atomic_writes(&self.path, writes)?;
        self.write_ops(writes, Kind::AtomicWrite)
    }

    fn sync_all(&self) -> Result<()> {
        self.sync_with("fsync", |f| f.sync_all())
    }

    fn sync_data(&self) -> Result<()> {
        self.sync_with("fdatasync", |f| f.sync_data())
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        contract::end_of(&self.path, offset, len)?;
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
        contract::end_of(&self.path, 0, len)?;
        self.file.set_len(len).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC) => IoError::NoSpace {
                path: self.path.clone(),
                offset: len,
                len: 0,
            },
            _ => IoError::os("ftruncate", &self.path, e),
        })
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

/// What statx says about an open file's direct I/O and atomic writes.
fn probe_open_file(file: &fs::File) -> (Option<DirectIoAlignment>, AtomicWriteLimits, u32) {
    match statx::statx_fd(
        file.as_raw_fd(),
        statx::STATX_DIOALIGN | statx::STATX_WRITE_ATOMIC,
    ) {
        Ok(s) => (s.direct_io(), s.atomic_limits(), s.stx_blksize),
        Err(_) => (None, AtomicWriteLimits::NONE, 0),
    }
}

/// The block device holding `path` (see [`device_info`]).
pub fn probe_device(path: &Path) -> Result<DeviceInfo> {
    let md = fs::metadata(path).map_err(|e| IoError::os("stat", path, e))?;
    Ok(device_info(libc::major(md.dev()), libc::minor(md.dev())))
}

static PROBE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Direct-I/O alignment and atomic limits for files under `path`: `path` itself if it is a file
/// (opened read-only with O_DIRECT), else a scratch file created in the directory with O_DIRECT
/// and removed again. `None` when O_DIRECT cannot be opened there.
fn probe_direct(path: &Path) -> Result<Option<(Option<DirectIoAlignment>, AtomicWriteLimits)>> {
    let md = fs::metadata(path).map_err(|e| IoError::os("stat", path, e))?;
    if md.is_file() {
        return Ok(fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()
            .map(|f| {
                let (d, a, _) = probe_open_file(&f);
                (d, a)
            }));
    }
    let dir = device::probe_dir(path);
    let scratch = dir.join(format!(
        ".keel-probe-{}-{}",
        std::process::id(),
        PROBE_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let opened = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(&scratch);
    let out = match opened {
        Ok(f) => {
            let (d, a, _) = probe_open_file(&f);
            Some((d, a))
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
        // A read-only mount: probe an existing file of the directory, read-only, instead.
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {
            return Ok(fs::read_dir(&dir).ok().and_then(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file())
                    .find_map(|p| {
                        fs::OpenOptions::new()
                            .read(true)
                            .custom_flags(libc::O_DIRECT)
                            .open(p)
                            .ok()
                    })
                    .map(|f| {
                        let (d, a, _) = probe_open_file(&f);
                        (d, a)
                    })
            }));
        }
        Err(e) => return Err(IoError::os("create probe file", &scratch, e)),
    };
    match fs::remove_file(&scratch) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(IoError::os("unlink probe file", &scratch, e)),
    }
    Ok(out)
}

/// Probes the file system holding `path` (an existing file or directory); see the module docs.
pub fn probe(path: &Path) -> Result<Capabilities> {
    let handle = fs::File::open(path).map_err(|e| IoError::os("open", path, e))?;
    let f_type =
        device::statfs_type(handle.as_raw_fd()).map_err(|e| IoError::os("fstatfs", path, e))?;
    let blksize = handle
        .metadata()
        .map_err(|e| IoError::os("fstat", path, e))?
        .blksize() as u32;
    let device = probe_device(path)?;
    let (direct_io, atomic) = probe_direct(path)?.unwrap_or((None, AtomicWriteLimits::NONE));
    let logical = device
        .logical_block_size
        .or(direct_io.map(|d| d.offset))
        .unwrap_or(DEFAULT_DIRECT_ALIGN);
    let physical = device.physical_block_size.unwrap_or(blksize.max(logical));
    Ok(Capabilities {
        path: path.to_path_buf(),
        filesystem: filesystem_name(f_type),
        direct_io,
        logical_block_size: logical,
        physical_block_size: physical,
        atomic,
        io_uring: io_uring_status().is_ok(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AlignedBuf, FileClass};

    fn backends() -> Vec<OsFs> {
        let mut v = vec![OsFs::new(Backend::Pwrite)];
        match io_uring_status() {
            Ok(()) => v.push(OsFs::new(Backend::IoUring)),
            Err(why) => println!("SKIPPED: io_uring backend: {why}"),
        }
        v
    }

    #[test]
    fn a_failed_sync_stays_failed() {
        for fs in backends() {
            let dir = tempfile::tempdir().unwrap();
            let opts = OpenOptions::new(FileClass::Log).create(true);
            let f = fs.open(&dir.path().join("log"), &opts).unwrap();
            f.write_all_at(b"abc", 0).unwrap();
            f.sync_data().unwrap();
            // Break it on purpose: a sync failure as the kernel would report it once.
            let os = OsFile {
                file: fs::File::open("/dev/null").unwrap(),
                path: dir.path().join("log"),
                options: opts,
                counters: fs.counters(),
                atomic: AtomicWriteLimits::NONE,
                align: DirectIoAlignment::default(),
                rings: None,
                sync_failed: AtomicBool::new(false),
            };
            let eio = os.sync_with("fsync", |_| {
                Err(std::io::Error::from_raw_os_error(libc::EIO))
            });
            assert!(eio.unwrap_err().is_sync_failure());
            // The next sync would succeed at the OS level (fsync of /dev/null works), but the
            // handle remembers: it is never reported as success.
            let again = os.sync_all();
            assert!(
                matches!(again, Err(IoError::SyncFailed { .. })),
                "{again:?}"
            );
            assert!(os.sync_data().unwrap_err().is_sync_failure());
            assert!(matches!(
                os.sync(crate::SyncMethod::Fsync),
                Err(IoError::SyncFailed { .. })
            ));
        }
    }

    #[test]
    fn atomic_writes_are_refused_before_io_on_buffered_and_unsupported_files() {
        for fs in backends() {
            let dir = tempfile::tempdir().unwrap();
            let buffered = fs
                .open(
                    &dir.path().join("b"),
                    &OpenOptions::new(FileClass::Data).create(true),
                )
                .unwrap();
            let page = AlignedBuf::page(16384);
            let before = fs.counters().snapshot();
            let e = buffered.write_atomic(&page, 0).unwrap_err();
            assert!(matches!(e, IoError::AtomicUnsupported { .. }), "{e}");
            assert!(e.to_string().contains("direct"), "{e}");
            // Break the rule on purpose: a file with no probed unit, opened direct.
            let direct = OsFile {
                file: fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(dir.path().join("b"))
                    .unwrap(),
                path: dir.path().join("b"),
                options: OpenOptions::new(FileClass::Data).direct(true),
                counters: fs.counters(),
                atomic: AtomicWriteLimits::NONE,
                align: DirectIoAlignment {
                    memory: 512,
                    offset: 512,
                },
                rings: None,
                sync_failed: AtomicBool::new(false),
            };
            let e = direct.write_atomic(&page, 0).unwrap_err();
            assert!(matches!(e, IoError::AtomicUnsupported { .. }), "{e}");
            // Pretend limits that the write breaks: rejected with the broken rule, no I/O.
            let limited = OsFile {
                atomic: AtomicWriteLimits {
                    unit_min: 4096,
                    unit_max: 65536,
                    segments_max: 1,
                    unit_max_opt: 0,
                },
                ..direct
            };
            let e = limited.write_atomic(&page, 4096).unwrap_err();
            assert!(matches!(e, IoError::AtomicRejected { .. }), "{e}");
            let e = limited
                .write_atomic_batch(&[
                    WriteOp {
                        offset: 0,
                        buf: &page,
                    },
                    WriteOp {
                        offset: 16384,
                        buf: &page[..12288],
                    },
                ])
                .unwrap_err();
            assert!(e.to_string().contains("power of two"), "{e}");
            assert_eq!(fs.counters().snapshot(), before);
            assert_eq!(buffered.len().unwrap(), 0, "nothing was written");
        }
    }

    #[test]
    fn errno_mapping_is_shared_by_both_backends() {
        let dir = tempfile::tempdir().unwrap();
        for fs in backends() {
            let os = OsFile {
                file: fs::File::open("/dev/null").unwrap(),
                path: dir.path().join("m"),
                options: OpenOptions::new(FileClass::Data),
                counters: fs.counters(),
                atomic: AtomicWriteLimits::NONE,
                align: DirectIoAlignment::default(),
                rings: fs.rings.clone(),
                sync_failed: AtomicBool::new(false),
            };
            check_mapping(&os);
        }
    }

    fn direct_file(dir: &Path) -> fs::File {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.join("raw"))
            .unwrap()
    }

    /// The kernel's answer to a raw RWF_ATOMIC write through each backend, bypassing Keel's own
    /// checks: proves the flag really reaches the kernel (a plain write would succeed).
    fn raw_atomic(file: &fs::File, buf: &[u8], offset: u64) -> [Result<(), Failure>; 2] {
        let by_pwrite = pwrite::write_atomic(file, buf, offset);
        let by_uring = match io_uring_status() {
            Ok(()) => {
                let pool = RingPool::new();
                let mut ring = pool.take().unwrap();
                ring.run(
                    file.as_raw_fd(),
                    &[Op::write(buf, offset, Kind::AtomicWrite)],
                    |_| {},
                )
                .map_err(|(_, f)| f)
            }
            Err(_) => by_pwrite.clone(),
        };
        [by_pwrite, by_uring]
    }

    #[test]
    fn rwf_atomic_reaches_the_kernel_on_xfs() {
        let Some(base) = std::env::var_os("KEEL_XFS_DIR") else {
            println!("SKIPPED: KEEL_XFS_DIR is not set (needs a mounted XFS with reflink)");
            return;
        };
        let dir = tempfile::tempdir_in(base).unwrap();
        let file = direct_file(dir.path());
        let page = AlignedBuf::page(16384);
        // Naturally aligned: accepted. 16 KiB at 4096: the kernel refuses (EINVAL) — only
        // because RWF_ATOMIC was passed, since a plain O_DIRECT write there is fine.
        for r in raw_atomic(&file, &page, 16384) {
            assert_eq!(r, Ok(()));
        }
        for r in raw_atomic(&file, &page, 4096) {
            assert_eq!(r, Err(Failure::Errno(libc::EINVAL)));
        }
        pwrite::write_all(&file, &page, 4096).unwrap();
    }

    #[test]
    fn rwf_atomic_is_refused_by_the_kernel_without_atomic_support() {
        let Some(base) = std::env::var_os("KEEL_EXT4_DIR") else {
            println!("SKIPPED: KEEL_EXT4_DIR is not set (needs a mounted ext4)");
            return;
        };
        let dir = tempfile::tempdir_in(base).unwrap();
        let file = direct_file(dir.path());
        let page = AlignedBuf::page(16384);
        for r in raw_atomic(&file, &page, 0) {
            assert_eq!(r, Err(Failure::Errno(libc::EOPNOTSUPP)));
        }
        // The same error through OsFile becomes AtomicUnsupported on both backends.
        for fs in backends() {
            let os = OsFile {
                file: file.try_clone().unwrap(),
                path: dir.path().join("raw"),
                options: OpenOptions::new(FileClass::Data).direct(true),
                counters: fs.counters(),
                // Pretend the probe had claimed support, so the write reaches the kernel.
                atomic: AtomicWriteLimits {
                    unit_min: 4096,
                    unit_max: 65536,
                    segments_max: 1,
                    unit_max_opt: 0,
                },
                align: DirectIoAlignment {
                    memory: 512,
                    offset: 512,
                },
                rings: fs.rings.clone(),
                sync_failed: AtomicBool::new(false),
            };
            let e = os.write_atomic(&page, 0).unwrap_err();
            assert!(matches!(e, IoError::AtomicUnsupported { .. }), "{e}");
            assert!(e.to_string().contains("EOPNOTSUPP"), "{e}");
        }
    }

    fn check_mapping(os: &OsFile) {
        assert!(os
            .error(Kind::Write, 0, 4096, Failure::Errno(libc::ENOSPC))
            .is_no_space());
        assert!(os
            .error(Kind::AtomicWrite, 0, 4096, Failure::Errno(libc::ENOSPC))
            .is_no_space());
        assert!(matches!(
            os.error(Kind::AtomicWrite, 0, 4096, Failure::Errno(libc::EOPNOTSUPP)),
            IoError::AtomicUnsupported { .. }
        ));
        assert!(matches!(
            os.error(Kind::AtomicWrite, 4096, 16384, Failure::Errno(libc::EINVAL)),
            IoError::AtomicRejected {
                offset: 4096,
                len: 16384,
                ..
            }
        ));
        assert!(matches!(
            os.error(Kind::Read, 0, 10, Failure::Errno(libc::ENOENT)),
            IoError::NotFound { .. }
        ));
        assert!(matches!(
            os.error(Kind::Read, 8, 10, Failure::ShortRead { got: 3 }),
            IoError::ShortRead {
                offset: 8,
                wanted: 10,
                got: 3,
                ..
            }
        ));
        match os.error(Kind::Write, 0, 4096, Failure::Errno(libc::EIO)) {
            IoError::Os { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
            other => panic!("EIO mapped to {other:?}"),
        }
    }
}

/// A lock held with `flock` on an open file description; closing the file releases it.
#[derive(Debug)]
struct FlockGuard {
    _file: fs::File,
}

impl crate::LockGuard for FlockGuard {}

/// No lock could be taken because none is needed (see `lock_file`).
#[derive(Debug)]
struct NoLock;

impl crate::LockGuard for NoLock {}

fn lock_file(path: &Path, mode: crate::LockMode) -> Result<Box<dyn crate::LockGuard>> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let exclusive = mode == crate::LockMode::Exclusive;
    let opened = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path);
    let mut file = match opened {
        Ok(f) => f,
        // A read-only mount: a shared lock can still be taken on an existing lock file.
        Err(e) if !exclusive && e.raw_os_error() == Some(libc::EROFS) => match fs::File::open(path)
        {
            Ok(f) => f,
            // No lock file on a read-only mount: nothing can write there, so there is no writer
            // to exclude.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Box::new(NoLock));
            }
            Err(e) => return Err(IoError::os("open lock file", path, e)),
        },
        Err(e) => return Err(IoError::os("open lock file", path, e)),
    };
    // std's flock-based file locks (one lock per open file description, so two opens in one
    // process conflict too).
    let taken = if exclusive {
        file.try_lock()
    } else {
        file.try_lock_shared()
    };
    match taken {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let holder = file
                .read_to_string(&mut text)
                .ok()
                .and_then(|_| text.trim().parse::<u32>().ok());
            return Err(IoError::Locked {
                path: path.to_path_buf(),
                holder,
            });
        }
        Err(fs::TryLockError::Error(e)) => return Err(IoError::os("flock", path, e)),
    }
    if exclusive {
        // Record the holder for the next opener's message (best effort: the lock itself is the
        // flock, not these bytes).
        let pid = format!("{}\n", std::process::id());
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(pid.as_bytes()));
    }
    Ok(Box::new(FlockGuard { _file: file }))
}
