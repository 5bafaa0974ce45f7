//! How is a lock file held? With `flock` on an open file description of its own, so that two
//! holders conflict across processes and within one process alike; an exclusive holder records
//! its process id in the file for the next opener's error message.
//!
//! Invariants: a conflicting lock is refused at once with [`IoError::Locked`] (never waited for);
//! the lock lives exactly as long as the returned guard; on a read-only mount a shared lock is
//! taken on an existing lock file, and none is needed where no lock file can exist.

use crate::{IoError, Result};
use std::fs;
use std::path::Path;

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

/// Takes the lock [`FileSystem::lock`](crate::FileSystem::lock) describes on `path` with `flock`.
pub(super) fn lock_file(path: &Path, mode: crate::LockMode) -> Result<Box<dyn crate::LockGuard>> {
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
