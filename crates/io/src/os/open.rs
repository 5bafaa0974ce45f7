//! How are files opened, and directory changes made durable? [`FileSystem`] for [`OsFs`]: `open`
//! sets O_DIRECT / O_DSYNC / O_RDONLY from the [`OpenOptions`] and probes a direct file's
//! alignment and atomic limits; creating, renaming and removing entries sync the directories they
//! change.
//!
//! Every file is opened with [`open_without_waiting`]: a FIFO is refused rather than waited on
//! (test `a_fifo_in_place_of_a_file_is_refused_without_blocking`).
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
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

impl FileSystem for OsFs {
    fn open(&self, path: &Path, options: &OpenOptions) -> Result<Arc<dyn File>> {
        self.pins.check(path)?;
        let existed = path.exists();
        let mut flags = 0;
        if options.direct {
            flags |= libc::O_DIRECT;
        }
        if options.write_through {
            flags |= libc::O_DSYNC;
        }
        let file = open_without_waiting(
            path,
            fs::OpenOptions::new()
                .read(true)
                .write(!options.read_only)
                .create(options.create && !options.read_only),
            flags,
        )
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
        self.pins.check(path)?;
        path.try_exists().map_err(|e| IoError::os("stat", path, e))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.pins.check(path)?;
        // One look at what is there: asked twice ("a directory?", then "anything?"), a
        // directory another thread or process made in between was called "Not a directory"
        // (two openers creating one store: a tester).
        match fs::metadata(path) {
            Ok(m) if m.is_dir() => return Ok(()),
            // A file in the way is named as such ("Not a directory"), not as a failed mkdir of
            // something that exists.
            Ok(_) => {
                return Err(IoError::os(
                    "mkdir",
                    path,
                    std::io::Error::from_raw_os_error(libc::ENOTDIR),
                ))
            }
            Err(_) => {}
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
        match self.sync_dir(&parent_of(path)) {
            // A parent that cannot be synced at all (`IoError::cannot_sync_dir`: a spool-style
            // 1733 directory this process may write but not open, a file system that does not
            // sync directories): the new name is as durable as the file system makes it.
            // Refused here, the same open was accepted on retry (the directory then existed):
            // a tester. Keel's open treats such a directory the same way.
            Err(e) if e.cannot_sync_dir() => {
                tracing::warn!(dir = %parent_of(path).display(), error = %e, "cannot sync a new name's directory");
                Ok(())
            }
            r => r,
        }
    }

    fn list_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.pins.check(dir)?;
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| IoError::os("readdir", dir, e))? {
            out.push(entry.map_err(|e| IoError::os("readdir", dir, e))?.path());
        }
        out.sort();
        Ok(out)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        self.pins.check(path)?;
        fs::remove_file(path).map_err(|e| IoError::os("unlink", path, e))?;
        self.sync_dir(&parent_of(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.pins.check(from)?;
        self.pins.check(to)?;
        fs::rename(from, to).map_err(|e| IoError::os("rename", from, e))?;
        let (a, b) = (parent_of(from), parent_of(to));
        self.sync_dir(&b)?;
        if a != b {
            self.sync_dir(&a)?;
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.pins.check(dir)?;
        let d = fs::File::open(dir).map_err(|e| IoError::os("open dir", dir, e))?;
        d.sync_all().map_err(|source| IoError::SyncFailed {
            path: dir.to_path_buf(),
            source,
        })
    }

    fn capabilities(&self, path: &Path) -> Result<Capabilities> {
        self.pins.check(path)?;
        probe(path)
    }

    fn lock(&self, path: &Path, mode: crate::LockMode) -> Result<Box<dyn crate::LockGuard>> {
        self.pins.check(path)?;
        lock_file(path, mode, &self.pins)
    }

    fn counters(&self) -> Arc<IoCounters> {
        self.counters.clone()
    }
}

/// Opens `path` with `options` plus the open flags `flags`, never waiting in `open(2)`: a FIFO
/// put in place of a store's file made the tools and read-only opens hang (a FIFO opened for
/// reading waits for a writer: a tester), so a FIFO is refused. The file is opened
/// `O_NONBLOCK`, checked with `fstat`, then set blocking again (a regular file's I/O ignores
/// the flag, but io_uring would return `EAGAIN` instead of waiting).
///
/// # Errors
///
/// The open, `fstat` or `fcntl` failed; or the file is a FIFO (`InvalidInput`).
pub fn open_without_waiting(
    path: &Path,
    options: &mut fs::OpenOptions,
    flags: i32,
) -> std::io::Result<fs::File> {
    // Looked at first too: `open` itself may fail on such a file for another reason (O_DIRECT
    // on a FIFO is EINVAL), which would name the wrong cause.
    if let Ok(meta) = fs::metadata(path) {
        not_fifo(meta.file_type())?;
    }
    let file = options.custom_flags(flags | libc::O_NONBLOCK).open(path)?;
    not_fifo(file.metadata()?.file_type())?;
    let fd = file.as_raw_fd();
    // SAFETY: `fcntl` on a descriptor we own, with integer arguments only.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// `InvalidInput` if `kind` is a FIFO. Devices and directories are left to the system calls
/// (a directory fails `open` for writing with `EISDIR` and every read; `/dev/full` is how the
/// conformance tests get a real `ENOSPC`).
fn not_fifo(kind: fs::FileType) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a FIFO, not a file a store can use",
        ));
    }
    Ok(())
}

/// [`open_without_waiting`] for reading only.
///
/// # Errors
///
/// As [`open_without_waiting`].
pub fn open_without_waiting_read(path: &Path) -> std::io::Result<fs::File> {
    open_without_waiting(path, fs::OpenOptions::new().read(true), 0)
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Runs `f` on a thread; `None` if it has not returned within 10 s (it hangs).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10)).ok()
    }

    #[test]
    fn a_fifo_in_place_of_a_file_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("data.keel");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            println!("SKIPPED: mkfifo is not available");
            return;
        }
        for read_only in [true, false] {
            let p = fifo.clone();
            let r = within_10s(move || {
                let opts = OpenOptions::new(crate::FileClass::Data).read_only(read_only);
                OsFs::auto().open(&p, &opts).map(|_| ())
            })
            .unwrap_or_else(|| panic!("open (read_only {read_only}) of a FIFO hung"));
            let e = r.expect_err("a FIFO was opened as a store file");
            assert!(e.to_string().contains("FIFO"), "{e}");
            assert!(e.to_string().contains("data.keel"), "{e}");
        }
        let p = fifo.clone();
        let r = within_10s(move || open_without_waiting_read(&p).map(|_| ())).expect("hung");
        assert!(r.unwrap_err().to_string().contains("FIFO"));
        // A regular file opens, and is blocking again (io_uring would say EAGAIN otherwise).
        let f = dir.path().join("f");
        fs::write(&f, b"x").unwrap();
        let file = open_without_waiting_read(&f).unwrap();
        // SAFETY: `fcntl` on a descriptor we own, integer arguments only.
        let fl = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(fl & libc::O_NONBLOCK, 0, "the file was left non-blocking");
    }
}
