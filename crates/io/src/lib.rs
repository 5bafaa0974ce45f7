//! keel-io: the only crate in Keel that talks to the OS about files.
//!
//! It offers a small VFS in the spirit of SQLite's: a [`FileSystem`] opens [`File`]s, which do
//! positional reads and writes, batches of writes, syncs, preallocation, and atomic writes
//! (`RWF_ATOMIC`). Two real backends share the traits — io_uring and plain `pread`/`pwrite`
//! ([`OsFs`] with [`Backend`]) — and `SimFs` (module `sim`, built only with the test-only `sim`
//! feature or in this crate's own tests) is an in-memory, seeded, fault-injecting implementation
//! for crash tests (docs/design.md's fault model).
//!
//! # Features
//!
//! - `sim`: the simulator (`SimFs`, `SimConfig`, `Fault`, `CrashPolicy`, `FileSnapshot`,
//!   `SplitMix64`, ...). Test-only: enable it from `[dev-dependencies]` only, never from
//!   `[dependencies]`, so that no normal or release build carries it.
//!
//! # Invariants this crate keeps (each tested by breaking it on purpose)
//!
//! 1. O_DIRECT requests whose offset, length or buffer address is not aligned are rejected with
//!    [`IoError::Misaligned`] before any I/O (by both [`OsFs`] and `SimFs`).
//! 2. An atomic write whose length or alignment the probe says cannot be atomic is rejected with
//!    [`IoError::AtomicRejected`] before any I/O; on a file without atomic support,
//!    [`IoError::AtomicUnsupported`].
//! 3. A request whose end (`offset + len`) overflows or passes `i64::MAX` is rejected with
//!    [`IoError::OutOfRange`] before any I/O.
//!
//!    Rules 1 to 3 are the pre-I/O contract: one implementation (module `contract`) that every
//!    backend calls, checking a whole batch before issuing any of it.
//! 4. A failed sync is reported as [`IoError::SyncFailed`] and is never turned into success.
//! 5. In `SimFs`, data synced before a crash is always there after it; atomic writes are
//!    all-or-nothing.

mod aligned;
mod caps;
mod contract;
mod counters;
mod error;
pub mod os;
mod poison;
mod read_only;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
mod threads;

pub use aligned::{AlignedBuf, HUGE_PAGE, PAGE_ALIGN};
pub use caps::{AtomicSupport, AtomicWriteLimits, Capabilities, DirectIoAlignment};
pub use counters::{ClassStats, FileClass, IoCounters, IoStats};
pub use error::{IoError, Result};
pub use os::{Backend, OsFs};
pub use poison::{Poison, PoisonCause};
pub use read_only::ReadOnlyFs;
#[cfg(any(test, feature = "sim"))]
pub use sim::SplitMix64;
#[cfg(any(test, feature = "sim"))]
pub use sim::{
    CrashPolicy, CrashReport, Fates, Fault, FaultStats, FileSnapshot, PendingWrite, SimConfig,
    SimFile, SimFs,
};
pub use threads::join_unless_current;

use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// O_DIRECT: bypass the page cache. Offsets, lengths and buffer addresses must be aligned
    /// (use [`AlignedBuf`]).
    pub direct: bool,
    /// O_DSYNC: every write returns only once its data is durable.
    pub write_through: bool,
    /// What the file is for (selects its counters).
    pub class: FileClass,
    /// Open for reading only (O_RDONLY): writes and syncs of the handle fail. Needed on a
    /// read-only mount, where opening for writing fails.
    pub read_only: bool,
}

impl OpenOptions {
    /// Open an existing file of `class`, buffered, not write-through.
    pub fn new(class: FileClass) -> OpenOptions {
        OpenOptions {
            create: false,
            direct: false,
            write_through: false,
            class,
            read_only: false,
        }
    }

    /// Sets `read_only` (O_RDONLY).
    pub fn read_only(mut self, yes: bool) -> OpenOptions {
        self.read_only = yes;
        self
    }

    /// Sets `create`.
    pub fn create(mut self, yes: bool) -> OpenOptions {
        self.create = yes;
        self
    }

    /// Sets `direct` (O_DIRECT).
    pub fn direct(mut self, yes: bool) -> OpenOptions {
        self.direct = yes;
        self
    }

    /// Sets `write_through` (O_DSYNC).
    pub fn write_through(mut self, yes: bool) -> OpenOptions {
        self.write_through = yes;
        self
    }

    /// Sets the open flags a [`SyncMethod`] needs (O_DSYNC for `ODsync`, O_DIRECT for `ODirect`).
    pub fn for_sync_method(mut self, method: SyncMethod) -> OpenOptions {
        self.write_through = method == SyncMethod::ODsync;
        self.direct = method == SyncMethod::ODirect;
        self
    }
}

/// How written data is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMethod {
    /// `fsync` after writing: data and all metadata.
    Fsync,
    /// `fdatasync` after writing: data and the metadata needed to read it back (file size).
    #[default]
    Fdatasync,
    /// Open with O_DSYNC: each write is durable when it returns; no explicit sync.
    ODsync,
    /// Open with O_DIRECT (bypass the page cache), then `fdatasync`.
    ODirect,
}

impl SyncMethod {
    /// Every method.
    pub const ALL: [SyncMethod; 4] = [
        SyncMethod::Fsync,
        SyncMethod::Fdatasync,
        SyncMethod::ODsync,
        SyncMethod::ODirect,
    ];

    /// Whether a sync call is needed after writes (false for `ODsync`).
    pub fn needs_sync_call(self) -> bool {
        self != SyncMethod::ODsync
    }
}

/// How a file's space is set up when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preallocation {
    /// Write zeros over the whole size and sync: later overwrites + fdatasync need no metadata
    /// commit (PostgreSQL `wal_init_zero`).
    #[default]
    Zeroed,
    /// `posix_fallocate`: space reserved as unwritten extents; the first write to each extent
    /// still commits metadata.
    Fallocate,
    /// Nothing: the file grows as it is appended to.
    Grow,
}

/// One write of a batch.
#[derive(Clone, Copy, Debug)]
pub struct WriteOp<'a> {
    /// File offset.
    pub offset: u64,
    /// Bytes to write.
    pub buf: &'a [u8],
}

/// One read of a batch.
#[derive(Debug)]
pub struct ReadOp<'a> {
    /// File offset.
    pub offset: u64,
    /// Buffer to fill completely.
    pub buf: &'a mut [u8],
}

/// An open file. All I/O is positional; handles are shared between threads.
pub trait File: Send + Sync + Debug {
    /// The path it was opened at.
    fn path(&self) -> &Path;

    /// The class its counters go to.
    fn class(&self) -> FileClass;

    /// Fills `buf` from `offset`; [`IoError::ShortRead`] if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;

    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()>;

    /// Writes every op; the io_uring backend submits them together. On error, any subset of the
    /// ops may have been written.
    fn write_batch(&self, writes: &[WriteOp<'_>]) -> Result<()>;

    /// Performs every read; the io_uring backend submits them together.
    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> Result<()>;

    /// One `RWF_ATOMIC` write: after a crash the range holds either all old or all new bytes.
    /// Needs a file opened with `direct`; rejected before I/O if the length or alignment breaks
    /// the probed [`AtomicWriteLimits`]. Atomicity is not durability: sync afterwards.
    fn write_atomic(&self, buf: &[u8], offset: u64) -> Result<()>;

    /// Several atomic writes submitted together (each is atomic on its own).
    fn write_atomic_batch(&self, writes: &[WriteOp<'_>]) -> Result<()>;

    /// `fsync`.
    fn sync_all(&self) -> Result<()>;

    /// `fdatasync`.
    fn sync_data(&self) -> Result<()>;

    /// Makes written data durable the way `method` says (`ODsync`: nothing to do, writes were
    /// durable when they returned — the file must have been opened write-through).
    fn sync(&self, method: SyncMethod) -> Result<()> {
        match method {
            SyncMethod::Fsync => self.sync_all(),
            SyncMethod::Fdatasync | SyncMethod::ODirect => self.sync_data(),
            SyncMethod::ODsync => Ok(()),
        }
    }

    /// `posix_fallocate(offset, len)`.
    fn allocate(&self, offset: u64, len: u64) -> Result<()>;

    /// Truncates or extends (with zeros) to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;

    /// Current length in bytes.
    fn len(&self) -> Result<u64>;

    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The atomic-write limits of this file (all zero unless opened `direct` on a file system
    /// that supports them).
    fn atomic_write_limits(&self) -> AtomicWriteLimits;

    /// Whether the file was opened with O_DIRECT.
    fn is_direct(&self) -> bool;

    /// Drops the page cache's clean copies of this file's pages (`posix_fadvise(DONTNEED)`), so
    /// that the next reads come from the device; dirty pages are written back, not dropped.
    ///
    /// Recovery calls it before it reads a file an earlier opening wrote. After a failed sync,
    /// Linux keeps the pages whose writeback failed in the cache, clean and showing bytes the
    /// device never got; on ext4 a later write of those bytes through the same cached pages
    /// does not reach the disk either (a block allocated for the failed write stays an
    /// unwritten extent, and the rewrite's writeback does not convert it), although its sync
    /// succeeds. Only pages read afresh from the device are safe to build on. Best effort: the
    /// kernel keeps pages that are mapped, locked or under writeback.
    ///
    /// # Errors
    /// The call failed ([`IoError::Os`]).
    fn drop_cache(&self) -> Result<()>;
}

/// A set of files in directories.
pub trait FileSystem: Send + Sync + Debug {
    /// Opens (or creates) a file.
    fn open(&self, path: &Path, options: &OpenOptions) -> Result<Arc<dyn File>>;

    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> Result<bool>;

    /// Creates a directory and its parents, syncing each parent that gained an entry.
    fn create_dir_all(&self, path: &Path) -> Result<()>;

    /// The entries of a directory (full paths), sorted.
    fn list_dir(&self, dir: &Path) -> Result<Vec<PathBuf>>;

    /// Removes a file and syncs its directory.
    fn remove_file(&self, path: &Path) -> Result<()>;

    /// Renames a file (replacing `to`) and syncs the directories involved.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;

    /// Syncs a directory, making creations, renames and removals in it durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;

    /// Probes what the file system holding `path` (an existing file or directory) can do.
    fn capabilities(&self, path: &Path) -> Result<Capabilities>;

    /// The counters every file of this file system reports to.
    fn counters(&self) -> Arc<IoCounters>;

    /// Takes an advisory lock on the lock file `path` without waiting, creating the file if it
    /// is missing (an exclusive lock also records this process's id in it). The lock is held
    /// until the returned guard drops. Locks conflict across processes *and* between two
    /// holders in one process (each lock is its own open file description, as with `flock`).
    ///
    /// # Errors
    /// [`IoError::Locked`] (naming the holder's pid where the lock file records it) when a
    /// conflicting lock is held; I/O errors creating or opening the file.
    fn lock(&self, path: &Path, mode: LockMode) -> Result<Box<dyn LockGuard>>;
}

/// How [`FileSystem::lock`] holds a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// One holder, no shared holders (a store opened for writing).
    Exclusive,
    /// Any number of shared holders, no exclusive one (read-only opens).
    Shared,
}

/// A held lock (see [`FileSystem::lock`]); dropping it releases the lock.
pub trait LockGuard: Send + Sync + Debug {}

/// Sets up `len` bytes of `file` the way `how` says (see [`Preallocation`]), then syncs it with
/// `fsync` so size and extents are durable.
///
/// `Zeroed` writes zeros in 1 MiB page-aligned chunks (works on direct files too).
pub fn preallocate(file: &dyn File, len: u64, how: Preallocation) -> Result<()> {
    match how {
        Preallocation::Zeroed => {
            const CHUNK: u64 = 1 << 20;
            let zeros = AlignedBuf::page(CHUNK as usize);
            let mut off = 0;
            while off < len {
                let n = (len - off).min(CHUNK) as usize;
                file.write_all_at(&zeros[..n], off)?;
                off += n as u64;
            }
            file.sync_all()
        }
        Preallocation::Fallocate => {
            file.allocate(0, len)?;
            file.sync_all()
        }
        Preallocation::Grow => Ok(()),
    }
}
