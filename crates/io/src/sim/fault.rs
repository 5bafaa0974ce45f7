//! Which faults can be injected, and when do they fire? [`Fault`], armed on a live machine with
//! [`SimFs::inject`] (for every thread at once) and disarmed with [`SimFs::clear_faults`];
//! [`FaultStats`] counts the ones that fired.
//!
//! Invariant: a fault fires before its call has any effect (a write refused with ENOSPC changed
//! nothing), and paths in faults are normalised like every other path.

use super::namespace::norm;
use super::rng::SplitMix64;
use super::SimFs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// A fault to inject into a live [`super::SimFs`] with [`super::SimFs::inject`].
///
/// Faults are checked after argument validation (alignment, atomic limits) and before any effect:
/// a write that fails with [`crate::IoError::NoSpace`] changed nothing. Faults do not survive a
/// crash (the post-crash file system starts with none).
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// ENOSPC on the `n`th write request from now (1: the next one; each op of a batch is one
    /// request); fires once. Injecting it again replaces the countdown.
    NoSpaceOnNthWrite(u64),
    /// ENOSPC on every write (and `allocate`) to the file opened at this path, until cleared.
    NoSpaceOnPath(PathBuf),
    /// ENOSPC on every write (and `allocate`) that would make the sum of the lengths of all
    /// files exceed this many bytes (overwrites inside a file's length always succeed).
    NoSpaceAbove(u64),
    /// EIO on the `n`th file sync (`sync_all`/`sync_data`) from now (1: the next); fires once.
    /// Directory syncs do not count.
    SyncFailsNth(u64),
    /// EIO on every sync of the file opened at this path, or of this directory (`sync_dir`, and
    /// the directory syncs that `open` with create, `rename`, `remove_file` and
    /// `create_dir_all` do), until cleared.
    SyncFailsOnPath(PathBuf),
    /// EIO on the `n`th write request from now (1: the next; each op of a batch is one request);
    /// fires once. Like [`Fault::NoSpaceOnNthWrite`] the write changes nothing.
    WriteFailsNth(u64),
    /// EIO on every read of the file opened at this path (a failing disk), until cleared.
    ReadFailsOnPath(PathBuf),
    /// The `n`th call from now (1: the next) that names a file or directory — `open` (with or
    /// without create), `create_dir_all`, `remove_file`, `rename`, `list_dir` — fails and
    /// changes nothing: `open` with EMFILE (the process is out of file descriptors, which an
    /// embedding application can cause at any moment), the others with EIO. Fires once.
    NamespaceFailsNth(u64),
    /// The `n`th buffered write request from now (1: the next; requests of files opened
    /// `direct`, `write_through` or atomic do not count) returns success but is lost in
    /// writeback, as the kernel's write-back of a page cache page to a failing device is: it
    /// changes nothing (reads return the bytes as they were, as once the page cache dropped the
    /// failed page, which it holds clean), and the next file sync of that file fails with EIO
    /// (Linux reports a write-back error to the next `fsync`). Fires once.
    WritebackFailsNth(u64),
    /// Every read that covers byte `offset` of the file opened at `path` returns it with bit
    /// `bit` (0..=7) flipped; the stored byte is unchanged. Until cleared.
    FlipBit {
        /// The file.
        path: PathBuf,
        /// Byte offset in the file.
        offset: u64,
        /// Bit number, 0 (least significant) ..= 7.
        bit: u8,
    },
    /// Each non-empty read request, with this probability, returns one random bit of its buffer
    /// flipped (drawn from the file system's seeded generator). Until cleared.
    RandomFlips {
        /// Probability per read request, 0.0..=1.0.
        probability: f64,
    },
}

/// How many injected faults fired since the file system was created (or crashed into being).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Writes (and allocations) refused with ENOSPC.
    pub no_space: u64,
    /// Syncs (file or directory) that failed with EIO.
    pub sync_failed: u64,
    /// Pending writes that a failed file sync lost or tore for good.
    pub writes_dropped_by_failed_sync: u64,
    /// Bits flipped in data returned by reads.
    pub bits_flipped: u64,
    /// Writes refused with EIO.
    pub write_failed: u64,
    /// Reads refused with EIO.
    pub read_failed: u64,
    /// Namespace calls refused ([`Fault::NamespaceFailsNth`]).
    pub namespace_failed: u64,
    /// Buffered writes lost in write-back ([`Fault::WritebackFailsNth`]).
    pub writeback_lost: u64,
}

/// The armed faults of one file system.
#[derive(Debug)]
pub(crate) struct Faults {
    nth_write: Option<u64>,
    no_space_paths: Vec<PathBuf>,
    space_limit: Option<u64>,
    nth_sync: Option<u64>,
    sync_paths: Vec<PathBuf>,
    flips: Vec<(PathBuf, u64, u8)>,
    random_flips: f64,
    nth_write_eio: Option<u64>,
    read_fail_paths: Vec<PathBuf>,
    nth_namespace: Option<u64>,
    nth_writeback: Option<u64>,
    /// Files with a write lost in write-back that no sync has reported yet.
    writeback_errors: Vec<PathBuf>,
    /// The generator for run-time randomness (random flips, failed-sync fates).
    pub(crate) rng: SplitMix64,
    pub(crate) stats: FaultStats,
}

impl Faults {
    pub(crate) fn new(rng: SplitMix64) -> Faults {
        Faults {
            nth_write: None,
            no_space_paths: Vec::new(),
            space_limit: None,
            nth_sync: None,
            sync_paths: Vec::new(),
            flips: Vec::new(),
            random_flips: 0.0,
            nth_write_eio: None,
            read_fail_paths: Vec::new(),
            nth_namespace: None,
            nth_writeback: None,
            writeback_errors: Vec::new(),
            rng,
            stats: FaultStats::default(),
        }
    }

    /// Whether any fault is armed (fast path for the I/O calls).
    pub(crate) fn armed(&self) -> bool {
        self.nth_write.is_some()
            || !self.no_space_paths.is_empty()
            || self.space_limit.is_some()
            || self.nth_sync.is_some()
            || !self.sync_paths.is_empty()
            || !self.flips.is_empty()
            || self.random_flips > 0.0
            || self.nth_write_eio.is_some()
            || !self.read_fail_paths.is_empty()
            || self.nth_namespace.is_some()
            || self.nth_writeback.is_some()
            || !self.writeback_errors.is_empty()
    }

    /// The armed [`Fault::NoSpaceAbove`] limit.
    pub(crate) fn space_limit(&self) -> Option<u64> {
        self.space_limit
    }

    pub(crate) fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::NoSpaceOnNthWrite(n) => self.nth_write = Some(n.max(1)),
            Fault::NoSpaceOnPath(p) => self.no_space_paths.push(p),
            Fault::NoSpaceAbove(n) => self.space_limit = Some(n),
            Fault::SyncFailsNth(n) => self.nth_sync = Some(n.max(1)),
            Fault::SyncFailsOnPath(p) => self.sync_paths.push(p),
            Fault::FlipBit { path, offset, bit } => self.flips.push((path, offset, bit & 7)),
            Fault::RandomFlips { probability } => self.random_flips = probability,
            Fault::WriteFailsNth(n) => self.nth_write_eio = Some(n.max(1)),
            Fault::ReadFailsOnPath(p) => self.read_fail_paths.push(p),
            Fault::NamespaceFailsNth(n) => self.nth_namespace = Some(n.max(1)),
            Fault::WritebackFailsNth(n) => self.nth_writeback = Some(n.max(1)),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.nth_write = None;
        self.no_space_paths.clear();
        self.space_limit = None;
        self.nth_sync = None;
        self.sync_paths.clear();
        self.flips.clear();
        self.random_flips = 0.0;
        self.nth_write_eio = None;
        self.read_fail_paths.clear();
        self.nth_namespace = None;
        self.nth_writeback = None;
        self.writeback_errors.clear();
    }

    /// Whether a write request to `path` that grows the total file size to `total_after` fails
    /// (`counts`: a write request, which counts towards `NoSpaceOnNthWrite`).
    pub(crate) fn write_fails(
        &mut self,
        path: &Path,
        growth: u64,
        total_after: u64,
        counts: bool,
    ) -> bool {
        let mut fail = counts && counted_down(&mut self.nth_write);
        if self.no_space_paths.iter().any(|p| p == path) {
            fail = true;
        }
        if let Some(limit) = self.space_limit {
            if growth > 0 && total_after > limit {
                fail = true;
            }
        }
        if fail {
            self.stats.no_space += 1;
        }
        fail
    }

    /// Whether a write request fails with EIO ([`Fault::WriteFailsNth`]; every write request
    /// counts).
    pub(crate) fn write_eio(&mut self) -> bool {
        let fail = counted_down(&mut self.nth_write_eio);
        self.stats.write_failed += u64::from(fail);
        fail
    }

    /// Whether a buffered write request to `path` is lost in write-back
    /// ([`Fault::WritebackFailsNth`]); if so, the next sync of `path` fails.
    pub(crate) fn writeback_lost(&mut self, path: &Path) -> bool {
        let lost = counted_down(&mut self.nth_writeback);
        if lost {
            self.stats.writeback_lost += 1;
            self.writeback_errors.push(path.to_path_buf());
        }
        lost
    }

    /// Whether a namespace call fails ([`Fault::NamespaceFailsNth`]; every such call counts).
    pub(crate) fn namespace_fails(&mut self) -> bool {
        let fail = counted_down(&mut self.nth_namespace);
        self.stats.namespace_failed += u64::from(fail);
        fail
    }

    /// Whether a read of `path` fails with EIO ([`Fault::ReadFailsOnPath`]).
    pub(crate) fn read_eio(&mut self, path: &Path) -> bool {
        let fail = self.read_fail_paths.iter().any(|p| p == path);
        if fail {
            self.stats.read_failed += 1;
        }
        fail
    }

    /// Whether a sync of `path` fails (`file`: a file sync, which counts towards `SyncFailsNth`).
    pub(crate) fn sync_fails(&mut self, path: &Path, file: bool) -> bool {
        let mut fail = file && counted_down(&mut self.nth_sync);
        if self.sync_paths.iter().any(|p| p == path) {
            fail = true;
        }
        if file {
            if let Some(i) = self.writeback_errors.iter().position(|p| p == path) {
                self.writeback_errors.swap_remove(i);
                fail = true;
            }
        }
        if fail {
            self.stats.sync_failed += 1;
        }
        fail
    }

    /// Applies read faults to `buf`, just read from `offset` of `path`.
    pub(crate) fn on_read(&mut self, path: &Path, offset: u64, buf: &mut [u8]) {
        let end = offset + buf.len() as u64;
        for (p, at, bit) in &self.flips {
            if p == path && *at >= offset && *at < end {
                buf[(*at - offset) as usize] ^= 1 << bit;
                self.stats.bits_flipped += 1;
            }
        }
        if !buf.is_empty() && self.random_flips > 0.0 && self.rng.chance(self.random_flips) {
            let bit = self.rng.below(buf.len() as u64 * 8);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.stats.bits_flipped += 1;
        }
    }
}

/// One call counted against an armed "fail the `n`th" fault (`NoSpaceOnNthWrite`,
/// `SyncFailsNth`, `WriteFailsNth`, `NamespaceFailsNth`, `WritebackFailsNth`): whether this call is the `n`th, which
/// disarms it.
fn counted_down(nth: &mut Option<u64>) -> bool {
    match *nth {
        None => false,
        Some(n) if n <= 1 => {
            *nth = None;
            true
        }
        Some(n) => {
            *nth = Some(n - 1);
            false
        }
    }
}

impl SimFs {
    /// Arms a fault (see [`Fault`]); it takes effect for every thread at once.
    pub fn inject(&self, fault: Fault) {
        let fault = match fault {
            Fault::NoSpaceOnPath(p) => Fault::NoSpaceOnPath(norm(&p)),
            Fault::SyncFailsOnPath(p) => Fault::SyncFailsOnPath(norm(&p)),
            Fault::FlipBit { path, offset, bit } => Fault::FlipBit {
                path: norm(&path),
                offset,
                bit,
            },
            other => other,
        };
        let mut f = self.m.faults.lock();
        f.inject(fault);
        self.m.faults_armed.store(f.armed(), Ordering::Relaxed);
    }

    /// Disarms every fault (counts in [`SimFs::fault_stats`] stay).
    pub fn clear_faults(&self) {
        let mut f = self.m.faults.lock();
        f.clear();
        self.m.faults_armed.store(false, Ordering::Relaxed);
    }

    /// How many injected faults fired.
    pub fn fault_stats(&self) -> FaultStats {
        self.m.faults.lock().stats
    }
}
