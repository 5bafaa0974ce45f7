//! What does one boot of the simulated machine hold, and how does every call check that it has not
//! crashed? [`Machine`] holds the configuration, the namespace, the armed faults, the counters, the
//! lock table and the crash-point countdown that a [`SimFs`] and all its handles share.
//!
//! Invariants: once `crashed` is set, `alive` fails every call with [`IoError::Crashed`]
//! (module invariant 4); `tick` counts each mutating call once towards an armed crash point and
//! crashes the machine *before* the call that fires it has any effect; after it fired, every
//! later call fails, even while the crash is still being made.

use super::crash::{CrashPolicy, CrashReport};
use super::fault::Faults;
use super::namespace::Namespace;
use super::rng::SplitMix64;
use super::state::FileState;
use super::{Sabotage, SimConfig, SimFs};
use crate::{IoCounters, IoError, Result};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One file: its identity (shared by all its names) and its state, under its own lock.
#[derive(Debug)]
pub(super) struct Inode {
    pub(super) id: u64,
    pub(super) state: Mutex<FileState>,
}

/// One boot of the simulated machine: everything a [`SimFs`] and its handles share.
#[derive(Debug)]
pub(super) struct Machine {
    pub(super) config: SimConfig,
    pub(super) generation: u64,
    pub(super) crashed: AtomicBool,
    pub(super) ns: Mutex<Namespace>,
    pub(super) faults: Mutex<Faults>,
    pub(super) faults_armed: AtomicBool,
    pub(super) counters: Arc<IoCounters>,
    pub(super) total_len: AtomicU64,
    pub(super) next_inode: AtomicU64,
    pub(super) report: Option<CrashReport>,
    pub(super) sabotage: Sabotage,
    /// Mutating calls left before an armed crash point fires (0: none armed; [`FIRED`]: it
    /// fired).
    pub(super) crash_countdown: AtomicU64,
    pub(super) crash_point_policy: Mutex<Option<CrashPolicy>>,
    /// The armed crash point kills the process ([`SimFs::process_crash`]) instead of failing
    /// the power ([`SimFs::kill_at_call`]).
    pub(super) crash_point_kills: std::sync::atomic::AtomicBool,
    /// The file system this one crashed into.
    pub(super) after: Mutex<Option<SimFs>>,
    /// Held locks by path: (exclusive, holders). Not part of the durable state: a crash (a
    /// reboot) releases every lock.
    pub(super) locks: Mutex<std::collections::HashMap<PathBuf, (bool, usize)>>,
    /// The mutating calls so far: their number and a hash of their paths in order
    /// ([`SimFs::call_trace`]).
    pub(super) calls: Mutex<(u64, u64)>,
}

/// `Machine::crash_countdown` once its crash point fired.
const FIRED: u64 = u64::MAX;

/// An OS-style error with `errno`, as the kernel would return it.
pub(super) fn os_err(op: &'static str, path: &Path, errno: i32) -> IoError {
    IoError::Os {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::from_raw_os_error(errno),
    }
}

/// EIO, what a failed sync reports.
pub(super) fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EIO)
}

impl Machine {
    pub(super) fn new(
        config: SimConfig,
        generation: u64,
        ns: Namespace,
        report: Option<CrashReport>,
        sabotage: Sabotage,
    ) -> Machine {
        let total: u64 = {
            let mut seen = std::collections::HashSet::new();
            ns.files
                .values()
                .filter(|i| seen.insert(i.id))
                .map(|i| i.state.lock().current.len())
                .sum()
        };
        let next = ns.files.values().map(|i| i.id + 1).max().unwrap_or(1);
        let rng = SplitMix64::derive(config.seed, generation.wrapping_add(1 << 32));
        Machine {
            config,
            generation,
            crashed: AtomicBool::new(false),
            ns: Mutex::new(ns),
            faults: Mutex::new(Faults::new(rng)),
            faults_armed: AtomicBool::new(false),
            counters: Arc::new(IoCounters::default()),
            total_len: AtomicU64::new(total),
            next_inode: AtomicU64::new(next),
            report,
            sabotage,
            crash_countdown: AtomicU64::new(0),
            crash_point_policy: Mutex::new(None),
            crash_point_kills: std::sync::atomic::AtomicBool::new(false),
            after: Mutex::new(None),
            locks: Mutex::new(std::collections::HashMap::new()),
            calls: Mutex::new((0, 0xcbf2_9ce4_8422_2325)),
        }
    }

    /// Counts one mutating call towards an armed crash point; at the chosen call, crashes the
    /// machine (before the call has any effect) and returns `Crashed`.
    pub(super) fn tick(self: &Arc<Machine>, path: &Path) -> Result<()> {
        {
            // FNV-1a over the path's bytes, then a separator: the order of the calls' files.
            let mut c = self.calls.lock();
            c.0 = c.0.wrapping_add(1);
            for b in path.as_os_str().as_encoded_bytes().iter().chain(&[0xff]) {
                c.1 = (c.1 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        if self.crash_countdown.load(Ordering::Relaxed) == 0 {
            return self.alive(path);
        }
        // The firing call leaves `FIRED` behind, atomically with taking the last count, so a
        // call counted after it fails even while the crash is still being made (a countdown
        // that merely reached 0 would look disarmed for that moment).
        let prev =
            self.crash_countdown
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                    0 | FIRED => None,
                    1 => Some(FIRED),
                    n => Some(n - 1),
                });
        if prev == Err(FIRED) {
            return Err(IoError::Crashed {
                path: path.to_path_buf(),
            });
        }
        let fire = prev == Ok(1);
        if fire {
            let policy = *self.crash_point_policy.lock();
            // No lock of this machine is held here, so crashing cannot deadlock.
            let fs = SimFs { m: self.clone() };
            if self.crash_point_kills.load(Ordering::SeqCst) {
                let _ = fs.process_crash();
            } else {
                let _ = fs.crash_inner(policy);
            }
        }
        self.alive(path)
    }

    /// Whether an armed crash point fired (its crash may still be being built).
    pub(super) fn crash_point_fired(&self) -> bool {
        self.crash_countdown.load(Ordering::SeqCst) == FIRED
    }

    /// [`Fault::NamespaceFailsNth`](super::Fault::NamespaceFailsNth): fails the call `op` on
    /// `path` with `errno` if it is the armed one.
    pub(super) fn namespace_fault(&self, op: &'static str, path: &Path, errno: i32) -> Result<()> {
        if self.faults_armed.load(Ordering::Relaxed) && self.faults.lock().namespace_fails() {
            return Err(os_err(op, path, errno));
        }
        Ok(())
    }

    pub(super) fn alive(&self, path: &Path) -> Result<()> {
        if self.crashed.load(Ordering::SeqCst) {
            Err(IoError::Crashed {
                path: path.to_path_buf(),
            })
        } else {
            Ok(())
        }
    }

    pub(super) fn sector(&self) -> u64 {
        u64::from(self.config.sector_size)
    }
}
