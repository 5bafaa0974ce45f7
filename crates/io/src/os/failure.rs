//! How does a failed request become the [`IoError`] both backends report? The engines return a
//! [`Failure`] (an errno, a short transfer, a failed `io_uring_enter`); [`OsFile`] turns it into
//! an error naming the file, the same way for pwrite and io_uring.
//!
//! Invariant (tested on both backends by `errno_mapping_is_shared_by_both_backends`): `ENOSPC`
//! on a write → [`IoError::NoSpace`]; `ENOENT` → [`IoError::NotFound`]; end of file on a read →
//! [`IoError::ShortRead`]; on an atomic write `EOPNOTSUPP` → [`IoError::AtomicUnsupported`] and
//! `EINVAL` → [`IoError::AtomicRejected`]; anything else → [`IoError::Os`] naming the system call.

use super::{Kind, OsFile};
use crate::IoError;

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

impl OsFile {
    /// The system call (or io_uring operation) a request of `kind` is made with.
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
    pub(super) fn error(&self, kind: Kind, offset: u64, len: usize, failure: Failure) -> IoError {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::backends;
    use crate::{AtomicWriteLimits, DirectIoAlignment, FileClass, FileSystem, OpenOptions};
    use std::fs;
    use std::sync::atomic::AtomicBool;

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
                born: crate::os::fork::generation(),
            };
            check_mapping(&os);
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
