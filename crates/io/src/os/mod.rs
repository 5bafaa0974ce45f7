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
//!    Tests: `direct_misalignment_is_rejected_before_io` and
//!    `requests_ending_past_the_largest_offset_are_rejected_before_io` (conformance suite),
//!    `contract::tests`.
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
//! 5. A file opened before a `fork` does no I/O in the child: every data request, sync,
//!    preallocation, truncation and cache drop there fails with [`IoError::Forked`] before any
//!    system call. Test: `fork::tests::a_forked_child_is_refused_every_request`.
//! 6. A call naming a path under a directory locked through this file system whose path no
//!    longer resolves to that directory (moved or replaced while open) fails with
//!    [`IoError::Moved`] before touching anything. Test: `pin::tests`.
//!
//! # Files (one question each)
//!
//! - `mod.rs`: which backend does an [`OsFs`] use ([`Backend`], [`OsFs`])?
//! - `file.rs`: how does an [`OsFile`] carry out a data request (the pre-I/O contract, the
//!   backend, the counters)?
//! - `request.rs`: what is one data request as the two engines see it?
//! - `failure.rs`: how does a failed request become the [`IoError`] both backends report?
//! - `fork.rs`: is this process a fork of the one that opened a file (invariant 5)?
//! - `sync.rs`: when is a sync of an [`OsFile`] reported as done (invariant 3)?
//! - `open.rs`: how are files opened and directory changes made durable ([`FileSystem`] for
//!   [`OsFs`])?
//! - `probe.rs`: what can the file system holding a path do ([`probe()`], [`probe_device`])?
//! - `lock.rs`: how is a lock file held ([`FileSystem::lock`])?
//! - `pin.rs`: is a locked directory still where its path says (invariant 6)?
//! - `pwrite.rs`, `uring.rs`: the two engines; `statx.rs`, `device.rs`: the kernel interfaces
//!   the probe reads.

mod device;
mod failure;
mod file;
pub mod fork;
mod lock;
mod open;
mod pin;
mod probe;
mod pwrite;
mod request;
pub mod statx;
mod sync;
mod uring;

pub use device::{device_info, filesystem_name, DeviceInfo};
pub use file::OsFile;
pub use open::{open_without_waiting, open_without_waiting_read};
pub use probe::{probe, probe_device};
pub use uring::io_uring_status;

use crate::IoCounters;
#[cfg(doc)] // names the module docs link to
use crate::{AtomicWriteLimits, File, FileSystem, IoError};
use failure::Failure;
use request::{Kind, Op};
use serde::{Deserialize, Serialize};
use std::fmt;
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
    /// The directories locked through this file system (see the `pin` module).
    pins: Arc<pin::Pins>,
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
            pins: Arc::default(),
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

/// The backends to test: pwrite, and io_uring when a ring can be set up here (else a SKIPPED line).
#[cfg(test)]
fn backends() -> Vec<OsFs> {
    let mut v = vec![OsFs::new(Backend::Pwrite)];
    match io_uring_status() {
        Ok(()) => v.push(OsFs::new(Backend::IoUring)),
        Err(why) => println!("SKIPPED: io_uring backend: {why}"),
    }
    v
}
