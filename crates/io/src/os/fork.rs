//! Is this process a fork of the one that opened a file? A process that forks (without exec)
//! while it holds a store gives the child a copy of everything: the store's memory (the pool's
//! pages, the log's buffer and positions), its descriptors (the same open file descriptions, so
//! the same flocks) and its io_uring rings (shared with the parent). The child's copy is stale
//! the instant the parent commits again; a commit through it wrote over the parent's log and
//! pages at positions the parent also used, returned Ok, and was lost (a tester, s42). So every
//! data request and sync of an [`OsFile`](super::OsFile) opened before a fork is refused in the
//! child with [`IoError::Forked`]: the store poisons itself there (in the child's memory only)
//! and the parent goes on untouched. Opening the store anew in the child (after the parent
//! released it) works: that open's files are born in the child.
//!
//! How: `pthread_atfork` (registered once, at the first open) runs [`in_child`] in every child,
//! which bumps the process's fork generation; a file keeps the generation it was opened in
//! ([`generation`]) and [`check`] compares the two: one relaxed atomic load per request, no
//! system call.
//!
//! Invariant: a file opened in generation g does no I/O in a process whose generation is not
//! g. Test: `a_forked_child_is_refused_every_request` (the check skipped, the child's write
//! reaches the file).

use crate::{IoError, Result};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// How many forks lie between the process that first opened a file and this one.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Registers [`in_child`] once per process.
static REGISTER: Once = Once::new();

/// Runs in the child after every `fork` (async-signal-safe: one atomic add).
extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The current fork generation, registering the fork handler on first use. A file records it
/// when it is opened.
pub fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: `pthread_atfork` stores three function pointers (two null); `in_child` is an
        // `extern "C" fn()` with static lifetime that only does an atomic add, which is
        // async-signal-safe as a fork child handler must be.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        // ENOMEM is the only error; without the handler the check cannot see forks, which is
        // what every build before it did: carry on rather than refuse every open.
        debug_assert_eq!(rc, 0, "pthread_atfork failed");
    });
    GENERATION.load(Ordering::Relaxed)
}

/// Whether this process is a fork of the one whose [`generation`] was `born` (for the layers
/// above, which refuse a store's operations in a forked child before they take any lock: a lock
/// another thread of the parent held at the fork stays held in the child for good).
pub fn forked_since(born: u64) -> bool {
    GENERATION.load(Ordering::Relaxed) != born
}

/// Refuses a request on `path` (opened in generation `born`) if this process is a fork since.
pub(crate) fn check(born: u64, path: &Path) -> Result<()> {
    #[cfg(test)]
    if SKIP.load(Ordering::Relaxed) {
        return Ok(());
    }
    if forked_since(born) {
        Err(IoError::Forked {
            path: path.to_path_buf(),
        })
    } else {
        Ok(())
    }
}

/// Test switch (unit tests only): skip the check, to show the child's write would land.
#[cfg(test)]
pub(crate) static SKIP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::backends;
    use crate::{File, FileClass, FileSystem, OpenOptions};

    /// One request a child tries on the parent's file.
    type Request = fn(&dyn File) -> Result<()>;

    /// Serialises the tests: a child inherits [`SKIP`] as it is at the fork.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Forks; the child runs `f` on `file` and exits 0 if it was refused with
    /// [`IoError::Forked`], 1 if it succeeded, 2 on any other error. Returns the child's status.
    fn in_a_child(file: &dyn File, f: Request) -> i32 {
        child_status(|| match f(file) {
            Err(IoError::Forked { .. }) => 0,
            Ok(()) => 1,
            Err(_) => 2,
        })
    }

    /// Forks; the child runs `f` and exits with its code. Returns the child's exit status.
    fn child_status(f: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child only runs `f` (file I/O through an already open descriptor, an
        // allocation for an error) and leaves with `_exit`, never returning into the test
        // harness; glibc's allocator is fork-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = f();
            // SAFETY: ends the child at once, without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        let mut status = 0;
        // SAFETY: waits for our own child with a live status slot.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(libc::WIFEXITED(status), "child died: {status}");
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn a_forked_child_is_refused_every_request() {
        let _one = ONE_AT_A_TIME.lock().unwrap();
        let requests: [(&str, Request); 7] = [
            ("write", |f| f.write_all_at(b"child", 0)),
            ("write_batch", |f| {
                f.write_batch(&[
                    crate::WriteOp {
                        offset: 0,
                        buf: b"child",
                    },
                    crate::WriteOp {
                        offset: 8,
                        buf: b"child",
                    },
                ])
            }),
            ("read", |f| f.read_exact_at(&mut [0; 4], 0)),
            ("sync", |f| f.sync_data()),
            ("set_len", |f| f.set_len(1)),
            ("allocate", |f| f.allocate(0, 1 << 20)),
            ("drop_cache", |f| f.drop_cache()),
        ];
        for fs in backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            let f = fs
                .open(&path, &OpenOptions::new(FileClass::Log).create(true))
                .unwrap();
            f.write_all_at(b"parent", 0).unwrap();
            for (what, req) in requests {
                assert_eq!(
                    in_a_child(&*f, req),
                    0,
                    "{what} in a forked child was not refused"
                );
            }
            // The parent goes on: its file is untouched and still works.
            assert_eq!(f.len().unwrap(), 6);
            let mut buf = [0; 6];
            f.read_exact_at(&mut buf, 0).unwrap();
            assert_eq!(&buf, b"parent");
            f.write_all_at(b"PARENT", 0).unwrap();
            f.sync_data().unwrap();
            // A file opened in the child is its own: it works there.
            let own = dir.path().join("own");
            let status = child_status(|| {
                let ok = fs
                    .open(&own, &OpenOptions::new(FileClass::Log).create(true))
                    .and_then(|f| f.write_all_at(b"own", 0).and_then(|()| f.sync_data()));
                i32::from(ok.is_err())
            });
            assert_eq!(status, 0, "a file the child opened itself is usable there");
            assert_eq!(std::fs::read(&own).unwrap(), b"own");
        }
    }

    #[test]
    fn without_the_check_a_forked_child_writes_the_parents_file() {
        let _one = ONE_AT_A_TIME.lock().unwrap();
        let fs = crate::OsFs::auto();
        let dir = tempfile::tempdir().unwrap();
        let f = fs
            .open(
                &dir.path().join("f"),
                &OpenOptions::new(FileClass::Log).create(true),
            )
            .unwrap();
        f.write_all_at(b"parent", 0).unwrap();
        // Break the invariant on purpose: the child's write lands in the parent's file.
        SKIP.store(true, Ordering::Relaxed);
        let status = in_a_child(&*f, |f| f.write_all_at(b"child!", 0));
        SKIP.store(false, Ordering::Relaxed);
        assert_eq!(status, 1, "the child's write should have succeeded");
        let mut buf = [0; 6];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"child!");
    }
}
