//! How is a lock file held? With `flock` on an open file description of its own, so that two
//! holders conflict across processes and within one process alike; an exclusive holder records
//! its process id in the file for the next opener's error message.
//!
//! Invariants: a conflicting lock is refused with [`IoError::Locked`] after a grace of at most
//! [`LOCK_GRACE`] (never waited for beyond it); the lock lives exactly as long as the returned
//! guard; on a read-only mount a shared lock is taken on an existing lock file, and none is
//! needed where no lock file can exist.
//!
//! Why a grace: a flock belongs to the open file description, and a child process being spawned
//! (fork, then exec) holds a copy of every descriptor until its exec closes the close-on-exec
//! ones. A store closed and reopened while any thread of the process spawns a child can find its
//! own just-released lock still held by that copy for an instant. Without the grace such an
//! open failed with "already open" naming its own process (seen in the `keel` tool's tests).

use crate::{IoError, Result};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a conflicting lock is retried before it is reported: long enough for a child
/// process between fork and exec to close its copy of the lock's file description.
pub(crate) const LOCK_GRACE: Duration = Duration::from_millis(200);

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
    let try_once = |file: &fs::File| {
        if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        }
    };
    let start = Instant::now();
    let mut taken = try_once(&file);
    while matches!(taken, Err(fs::TryLockError::WouldBlock)) && start.elapsed() < LOCK_GRACE {
        std::thread::sleep(Duration::from_millis(5));
        taken = try_once(&file);
    }
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
