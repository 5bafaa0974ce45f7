//! The error type of keel-io.

use std::path::PathBuf;

/// Result with [`IoError`].
pub type Result<T, E = IoError> = std::result::Result<T, E>;

/// Everything that can go wrong talking to a file. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The OS refused an operation.
    #[error("{op} {path}: {source}")]
    Os {
        /// The operation (`"open"`, `"pwrite"`, ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A write failed because the device is full (ENOSPC). Nothing is claimed written.
    #[error("{path}: no space left on device writing {len} bytes at offset {offset}")]
    NoSpace {
        /// The file.
        path: PathBuf,
        /// Offset of the failed write.
        offset: u64,
        /// Length of the failed write.
        len: usize,
    },
    /// A sync failed (e.g. EIO). Data written since the last successful sync may be lost;
    /// callers must never retry the sync as if it had worked (the store poisons itself).
    #[error(
        "sync of {path} failed: {source}; data written since the last successful sync may be lost"
    )]
    SyncFailed {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A read reached the end of the file before filling the buffer.
    #[error("short read from {path}: wanted {wanted} bytes at offset {offset}, got {got}")]
    ShortRead {
        /// The file.
        path: PathBuf,
        /// Offset of the read.
        offset: u64,
        /// Bytes asked for.
        wanted: usize,
        /// Bytes available.
        got: usize,
    },
    /// An O_DIRECT request whose offset, length or buffer address is not aligned.
    #[error("{path}: direct I/O needs {align}-byte alignment of offset, length and buffer; got offset {offset}, length {len}, buffer address {addr:#x}")]
    Misaligned {
        /// The file.
        path: PathBuf,
        /// Offset of the request.
        offset: u64,
        /// Length of the request.
        len: usize,
        /// Address of the buffer.
        addr: usize,
        /// The alignment needed.
        align: usize,
    },
    /// A request whose end (`offset + len`) overflows or passes the largest file offset,
    /// `i64::MAX` (Linux refuses such reads and writes). Rejected before any I/O.
    #[error("{path}: a {len}-byte request at offset {offset} ends past the largest file offset {max}", max = i64::MAX)]
    OutOfRange {
        /// The file.
        path: PathBuf,
        /// Offset of the request.
        offset: u64,
        /// Length of the request.
        len: u64,
    },
    /// The file cannot do atomic writes at all (file system, device or buffered I/O).
    #[error("{path}: atomic writes are not supported: {reason}")]
    AtomicUnsupported {
        /// The file.
        path: PathBuf,
        /// What the probe found.
        reason: String,
    },
    /// This write cannot be atomic (length or alignment outside what the probe reported).
    /// Rejected before any I/O was issued.
    #[error("{path}: a {len}-byte write at offset {offset} cannot be atomic: {reason}")]
    AtomicRejected {
        /// The file.
        path: PathBuf,
        /// Offset of the write.
        offset: u64,
        /// Length of the write.
        len: usize,
        /// Which rule it breaks.
        reason: String,
    },
    /// A `SimFs` handle (test-only `sim` feature) used after the simulated machine crashed.
    #[error(
        "{path}: the simulated machine crashed; reopen on the file system returned by crash()"
    )]
    Crashed {
        /// The file.
        path: PathBuf,
    },
    /// A request on a file opened before this process was forked from the one that opened it:
    /// a store does not cross `fork` (its memory, descriptors and rings are the parent's; a
    /// write through the copy would overwrite the parent's log and pages). Open the store again
    /// in the child once the parent has released it.
    #[error(
        "{path}: this process is a fork of the one that opened the file; a store does not \
         cross fork (open it again in this process once the parent has released it)"
    )]
    Forked {
        /// The file.
        path: PathBuf,
    },
    /// A path under a store's directory whose path no longer names the directory the store
    /// locked (moved, renamed or replaced while open): files are never created, opened or
    /// removed by the old path, which may now hold another store.
    #[error(
        "{path}: the store directory {dir} was moved or replaced while the store was open; \
         refusing to reach its files by the old path (reopen the store where it now is)"
    )]
    Moved {
        /// The directory the store locked, by the path it was opened with.
        dir: PathBuf,
        /// The path of the refused call.
        path: PathBuf,
    },
    /// The file does not exist.
    #[error("{path}: no such file")]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// A lock file is locked by another holder (another process, or another open in this one).
    #[error("{path} is locked by {}", if *readers { "read-only openers".to_string() } else { holder.map_or_else(|| "another opener".to_string(), |p| format!("process {p}")) })]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The holder's process id, where the lock file records it.
        holder: Option<u32>,
        /// The holders are shared (read-only) openers, which record no pid.
        readers: bool,
    },
    /// A write, sync, creation or removal was attempted through a read-only file system or
    /// handle ([`crate::ReadOnlyFs`], or a file opened read-only).
    #[error("{path}: {op} refused: opened read-only")]
    ReadOnly {
        /// The file or directory.
        path: PathBuf,
        /// The operation.
        op: &'static str,
    },
}

impl IoError {
    /// Wraps an OS error, mapping ENOSPC to [`IoError::NoSpace`] and ENOENT to
    /// [`IoError::NotFound`].
    pub fn os(op: &'static str, path: &std::path::Path, source: std::io::Error) -> IoError {
        match source.raw_os_error() {
            Some(libc::ENOENT) => IoError::NotFound {
                path: path.to_path_buf(),
            },
            _ => IoError::Os {
                op,
                path: path.to_path_buf(),
                source,
            },
        }
    }

    /// True when the device (or the user's quota) was full: [`IoError::NoSpace`], or any other
    /// variant whose OS error is `ENOSPC` or `EDQUOT` (an `open` that could not create a file,
    /// a sync that could not allocate the blocks of delayed writes).
    pub fn is_no_space(&self) -> bool {
        match self {
            IoError::NoSpace { .. } => true,
            IoError::Os { source, .. } | IoError::SyncFailed { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            }
            _ => false,
        }
    }

    /// True when a directory sync ([`crate::FileSystem::sync_dir`]) failed because the
    /// directory cannot be synced at all, not because the sync failed: a directory this process
    /// may pass through or write but not open (mode 0711 or 1733, another owner), or a file
    /// system that does not sync directories (`EINVAL`, `EBADF`: PostgreSQL's `fsync_fname`
    /// ignores the same two for directories). Its names are then as durable as the file system
    /// makes them. Any other failure (`EIO`) is a failed sync.
    pub fn cannot_sync_dir(&self) -> bool {
        match self {
            IoError::Os { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
            IoError::SyncFailed { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EINVAL | libc::EBADF))
            }
            _ => false,
        }
    }

    /// True for [`IoError::SyncFailed`].
    pub fn is_sync_failure(&self) -> bool {
        matches!(self, IoError::SyncFailed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory that cannot be synced at all is told from a failed sync: the first is passed
    /// over by the opens that sync the store's path, the second refuses them.
    #[test]
    fn a_directory_that_cannot_be_synced_is_not_a_failed_sync() {
        let os = |code| IoError::Os {
            op: "open dir",
            path: PathBuf::from("/d"),
            source: std::io::Error::from_raw_os_error(code),
        };
        let sync = |code| IoError::SyncFailed {
            path: PathBuf::from("/d"),
            source: std::io::Error::from_raw_os_error(code),
        };
        assert!(os(libc::EACCES).cannot_sync_dir());
        assert!(sync(libc::EINVAL).cannot_sync_dir());
        assert!(sync(libc::EBADF).cannot_sync_dir());
        assert!(!sync(libc::EIO).cannot_sync_dir());
        assert!(!sync(libc::ENOSPC).cannot_sync_dir());
        assert!(!os(libc::ENOENT).cannot_sync_dir());
    }
}
