//! How is a store locked? With `flock` on the store's directory itself, then on its lock file,
//! each on an open file description of its own, so that two holders conflict across processes
//! and within one process alike; an exclusive holder records its process id in the lock file for
//! the next opener's error message.
//!
//! Why the directory: a lock on the lock file alone held the file's inode, not its name. Deleting
//! `LOCK`, or renaming another file over it, while a store held it let a second writer lock the
//! new file and open the same store: both wrote, and acknowledged commits were lost without an
//! error (a tester). A directory cannot be swapped under its open descriptor: the name resolves
//! to the same inode through symlinks, `..` and bind mounts, and a lock on it needs no write
//! permission. The lock file is still locked (older builds lock only it) and still holds a
//! writer's pid; a shared opener that cannot open it (a read-only mount, no permission, none
//! there) relies on the directory's lock and creates nothing.
//!
//! Invariants: a conflicting lock is refused with [`IoError::Locked`] after a grace of at most
//! [`LOCK_GRACE`] (never waited for beyond it), naming a writer's pid or saying that the holders
//! are readers; the lock lives exactly as long as the returned guard; a shared lock writes and
//! creates nothing.
//!
//! Why a grace: a flock belongs to the open file description, and a child process being spawned
//! (fork, then exec) holds a copy of every descriptor until its exec closes the close-on-exec
//! ones. A store closed and reopened while any thread of the process spawns a child can find its
//! own just-released lock still held by that copy for an instant. Without the grace such an
//! open failed with "already open" naming its own process (seen in the `keel` tool's tests).

use crate::{IoError, Result};
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a conflicting lock is retried before it is reported: long enough for a child
/// process between fork and exec to close its copy of the lock's file description.
pub(crate) const LOCK_GRACE: Duration = Duration::from_millis(200);

/// A lock held with `flock` on open file descriptions: the store's directory and, where it
/// could be opened, its lock file; closing them releases it.
#[derive(Debug)]
struct FlockGuard {
    _dir: fs::File,
    _file: Option<fs::File>,
    /// The directory's pin (see the `pin` module), removed with the lock.
    _pin: super::pin::PinGuard,
}

impl crate::LockGuard for FlockGuard {}

/// Takes `file`'s flock (exclusive or shared), retrying a conflict for [`LOCK_GRACE`].
fn flock(file: &fs::File, exclusive: bool) -> std::result::Result<(), fs::TryLockError> {
    let try_once = |file: &fs::File| {
        if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        }
    };
    let start = Instant::now();
    let mut taken = try_once(file);
    while matches!(taken, Err(fs::TryLockError::WouldBlock)) && start.elapsed() < LOCK_GRACE {
        std::thread::sleep(Duration::from_millis(5));
        taken = try_once(file);
    }
    taken
}

/// The refusal of a conflicting lock on `path` in `dir`: the holders are readers when a shared
/// lock of the directory can be had now (they record no pid: the lock file's is a past
/// writer's); else the writer the lock file names.
fn refused(path: &Path, dir: &Path, exclusive: bool) -> IoError {
    let readers = exclusive && fs::File::open(dir).is_ok_and(|d| d.try_lock_shared().is_ok());
    let holder = if readers {
        None
    } else {
        fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
    };
    IoError::Locked {
        path: path.to_path_buf(),
        holder,
        readers,
    }
}

/// Takes the lock [`FileSystem::lock`](crate::FileSystem::lock) describes on `path` with
/// `flock`: on the directory holding `path`, then on `path` itself.
pub(super) fn lock_file(
    path: &Path,
    mode: crate::LockMode,
    pins: &Arc<super::pin::Pins>,
) -> Result<Box<dyn crate::LockGuard>> {
    use std::io::{Seek, SeekFrom, Write};
    let exclusive = mode == crate::LockMode::Exclusive;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir_file =
        fs::File::open(dir).map_err(|e| IoError::os("open directory to lock", dir, e))?;
    match flock(&dir_file, exclusive) {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(refused(path, dir, exclusive)),
        Err(fs::TryLockError::Error(e)) => return Err(IoError::os("flock", dir, e)),
    }
    let opened = if exclusive {
        super::open_without_waiting(
            path,
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            0,
        )
    } else {
        super::open_without_waiting_read(path)
    };
    let mut file = match opened {
        Ok(f) => f,
        // A shared opener that cannot open the lock file (a read-only mount, no permission,
        // no lock file) holds the directory's lock only: it creates and writes nothing.
        Err(e)
            if !exclusive
                && (e.kind() == std::io::ErrorKind::NotFound
                    || matches!(
                        e.raw_os_error(),
                        Some(libc::EROFS | libc::EACCES | libc::EPERM)
                    )) =>
        {
            let _pin = pin(pins, dir, &dir_file)?;
            return Ok(Box::new(FlockGuard {
                _dir: dir_file,
                _file: None,
                _pin,
            }));
        }
        Err(e) => return Err(IoError::os("open lock file", path, e)),
    };
    // The lock file too: an older build's opener locks only it.
    match flock(&file, exclusive) {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(refused(path, dir, exclusive)),
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
    let _pin = pin(pins, dir, &dir_file)?;
    Ok(Box::new(FlockGuard {
        _dir: dir_file,
        _file: Some(file),
        _pin,
    }))
}

/// Pins the locked directory `dir` (open as `file`) in `pins`.
fn pin(pins: &Arc<super::pin::Pins>, dir: &Path, file: &fs::File) -> Result<super::pin::PinGuard> {
    Ok(super::pin::PinGuard {
        pins: pins.clone(),
        id: pins.pin(dir, file)?,
    })
}
