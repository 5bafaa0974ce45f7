//! When is a sync of an [`OsFile`] reported as done? Only when the system call succeeded and no
//! earlier sync of the same handle failed.
//!
//! Invariant 3 of the module (test: `a_failed_sync_stays_failed`): a failed sync is sticky.
//! Linux may report a writeback error only once, to one `fsync`; a later `fsync` that returns 0
//! would turn data lost at the first failure into success. So after one `fsync`/`fdatasync` of a
//! handle failed, every later sync of that handle fails with [`IoError::SyncFailed`] too.

use super::OsFile;
use crate::{IoError, Result};
use std::fs;
use std::sync::atomic::Ordering;

impl OsFile {
    /// Runs one sync (`what` names it) unless an earlier one of this handle failed; a failure
    /// is remembered (sticky) and reported as [`IoError::SyncFailed`]; a success is counted.
    pub(super) fn sync_with(
        &self,
        what: &'static str,
        f: impl FnOnce(&fs::File) -> std::io::Result<()>,
    ) -> Result<()> {
        self.not_forked()?;
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
mod tests {
    use super::*;
    use crate::os::backends;
    use crate::{AtomicWriteLimits, DirectIoAlignment, File, FileClass, FileSystem, OpenOptions};
    use std::sync::atomic::AtomicBool;

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
                born: crate::os::fork::generation(),
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
}
