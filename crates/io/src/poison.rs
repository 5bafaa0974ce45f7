//! Poisoning: the one type every layer uses to stop after a write or sync failed ([`Poison`]),
//! keeping the first failure whole ([`PoisonCause`]).
//!
//! After a failed `fsync` the kernel may have dropped the dirty pages it could not write and
//! cleared the error, so a retry that "succeeds" proves nothing (PostgreSQL's fsyncgate). A layer
//! whose write or sync failed therefore refuses every later write; reopening recovers from what is
//! durable. The redo log, the page writer and the store each hold a [`Poison`].
//!
//! Invariants (tests break each):
//! 1. The first cause wins: a later [`Poison::poison`] never replaces it, and every caller is
//!    told the first one.
//! 2. Once [`Poison::is_poisoned`] is true it stays true, and [`Poison::cause`] is then `Some`
//!    (the cause is stored before the flag is raised).
//! 3. The cause keeps the original [`IoError`] (so `is_no_space` still answers), the operation
//!    and the file: nothing is reduced to "a sync failed".

use crate::IoError;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The failure that poisoned a layer.
#[derive(Clone, Debug)]
pub struct PoisonCause {
    /// What failed (`"write"`, `"sync"`, `"in-place write"`, ...).
    pub op: &'static str,
    /// The file it failed on.
    pub path: PathBuf,
    /// The original error.
    pub error: Arc<IoError>,
    /// What the failure means for the data, when the layer knows more than the error says.
    pub consequence: Option<&'static str>,
}

impl PoisonCause {
    /// A cause for `op` on `path` failing with `error`.
    pub fn new(op: &'static str, path: impl Into<PathBuf>, error: IoError) -> PoisonCause {
        PoisonCause {
            op,
            path: path.into(),
            error: Arc::new(error),
            consequence: None,
        }
    }

    /// This cause with a note on what it means for the data.
    pub fn with_consequence(mut self, consequence: &'static str) -> PoisonCause {
        self.consequence = Some(consequence);
        self
    }

    /// Whether the device was full (`ENOSPC`/`EDQUOT`): freeing space and reopening may help.
    pub fn is_no_space(&self) -> bool {
        self.error.is_no_space()
    }
}

impl fmt::Display for PoisonCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The error usually names the file, and a failed sync names the operation too: each is
        // said once ("sync of X failed: sync of X failed: ..." was how a poisoned store read).
        let error = self.error.to_string();
        let path = self.path.display().to_string();
        if error.starts_with(&format!("{} of {path}", self.op)) {
            write!(f, "{error}")?;
        } else if error.contains(&path) {
            write!(f, "{} failed: {error}", self.op)?;
        } else {
            write!(f, "{} of {path} failed: {error}", self.op)?;
        }
        if let Some(c) = self.consequence {
            write!(f, " ({c})")?;
        }
        Ok(())
    }
}

impl std::error::Error for PoisonCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

/// A poison flag with its first cause: set once, never cleared.
#[derive(Debug, Default)]
pub struct Poison {
    cause: OnceLock<PoisonCause>,
    raised: AtomicBool,
}

impl Poison {
    /// A clean (unpoisoned) flag.
    pub fn new() -> Poison {
        Poison::default()
    }

    /// Poisons with `cause` unless already poisoned, and returns the cause that holds (the first
    /// one). The first call logs the failure.
    pub fn poison(&self, cause: PoisonCause) -> PoisonCause {
        let mut first = false;
        let held = self.cause.get_or_init(|| {
            first = true;
            cause
        });
        if first {
            tracing::error!(op = held.op, path = %held.path.display(), error = %held.error,
                "poisoned: no further writes");
        }
        // Raised after the cause is stored, so a reader that sees the flag finds the cause.
        self.raised.store(true, Ordering::SeqCst);
        held.clone()
    }

    /// Whether poisoned (sequentially consistent, for wake-up protocols that check it).
    pub fn is_poisoned(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }

    /// The first cause, once poisoned.
    pub fn cause(&self) -> Option<&PoisonCause> {
        if self.is_poisoned() {
            self.cause.get()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(path: &str) -> IoError {
        IoError::NoSpace {
            path: PathBuf::from(path),
            offset: 0,
            len: 4096,
        }
    }

    fn eio(path: &str) -> IoError {
        IoError::SyncFailed {
            path: PathBuf::from(path),
            source: std::io::Error::from_raw_os_error(libc::EIO),
        }
    }

    #[test]
    fn the_first_cause_wins_and_stays() {
        let p = Poison::new();
        assert!(!p.is_poisoned());
        assert!(p.cause().is_none());
        let first = p.poison(PoisonCause::new("write", "/d/log.0", full("/d/log.0")));
        assert!(first.is_no_space());
        let second = p.poison(
            PoisonCause::new("sync", "/d/data", eio("/d/data")).with_consequence("pages lost"),
        );
        // Invariant 1: the second caller is told the first cause.
        assert_eq!(second.op, "write");
        assert!(second.is_no_space());
        // Invariant 2.
        assert!(p.is_poisoned());
        let c = p.cause().unwrap();
        assert_eq!(c.path, PathBuf::from("/d/log.0"));
        // Invariant 3: op, file and the original error all in the text.
        let text = c.to_string();
        assert!(
            text.contains("write failed: /d/log.0: no space left"),
            "{text}"
        );
        assert!(text.contains("log.0"), "{text}");
    }

    #[test]
    fn a_cause_names_its_operation_and_file_once() {
        let count = |text: &str, what: &str| text.matches(what).count();
        // A failed sync's error names both: said once.
        let sync = PoisonCause::new("sync", "/d/data", eio("/d/data")).to_string();
        assert_eq!(count(&sync, "/d/data"), 1, "{sync}");
        assert_eq!(count(&sync, "sync of"), 1, "{sync}");
        assert!(sync.contains("Input/output error"), "{sync}");
        // Another operation on the file the error names keeps the operation.
        let write = PoisonCause::new("in-place write", "/d/data", full("/d/data")).to_string();
        assert_eq!(count(&write, "/d/data"), 1, "{write}");
        assert!(
            write.starts_with("in-place write failed: /d/data"),
            "{write}"
        );
        // An error that does not name the file gets it from the cause.
        let other = PoisonCause::new(
            "sync",
            "/d/dir",
            IoError::SyncFailed {
                path: PathBuf::from("/e/x"),
                source: std::io::Error::from_raw_os_error(libc::EIO),
            },
        )
        .to_string();
        assert!(
            other.starts_with("sync of /d/dir failed: sync of /e/x"),
            "{other}"
        );
    }

    #[test]
    fn racing_poisoners_agree_on_one_cause() {
        let p = Arc::new(Poison::new());
        let seen: Vec<_> = (0..8)
            .map(|i| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let path = format!("/d/f{i}");
                    p.poison(PoisonCause::new("sync", path.clone(), eio(&path)))
                        .path
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let held = p.cause().unwrap().path.clone();
        assert!(seen.iter().all(|s| *s == held), "{seen:?} vs {held:?}");
    }
}
