//! [`SimFs`]: an in-memory, seeded, fault-injecting implementation of [`FileSystem`] and
//! [`File`] for crash tests. It implements docs/design.md's fault model.
//!
//! # Model
//!
//! Every file has a **durable image** (what is on the platter) and a **latest image** (what the
//! page cache shows, what reads return), plus the list of operations issued since its last
//! successful sync, in issue order: writes (buffered, or [`File::write_atomic`]) and length
//! changes ([`File::set_len`], and [`File::allocate`] when it extends the file).
//!
//! - `sync_all`/`sync_data` make every pending operation of the file durable, and its length
//!   (both behave alike: fdatasync also commits the size needed to read the data back). A sync
//!   covers the file, whichever handle issued the writes.
//! - A write-through file (`O_DSYNC`) write is durable when it returns, together with the file's
//!   current length; earlier pending length changes become durable with it, and the bytes it
//!   overwrote in earlier pending writes are cut out of them (they are now durably the new
//!   bytes). Other pending writes stay pending.
//! - Truncation (`set_len` below the length) cuts the truncated bytes out of earlier pending
//!   writes: the page cache dropped them, they can never reach the disk.
//! - Requests are checked against the pre-I/O contract [`crate::OsFs`] uses too (the crate's
//!   `contract` module), before any effect: a request ending past `i64::MAX` is
//!   [`IoError::OutOfRange`]; direct files enforce [`SimConfig::direct_alignment`] on offset,
//!   length and buffer address ([`IoError::Misaligned`]); atomic writes need a direct file and
//!   pass [`AtomicWriteLimits::check`] against [`SimConfig::atomic`], else
//!   [`IoError::AtomicUnsupported`] / [`IoError::AtomicRejected`].
//!
//! ## Crash
//!
//! [`SimFs::crash`] (random policy drawn from the seed) or [`SimFs::crash_with`] returns a new
//! `SimFs` holding the post-crash state; every handle of the old one, and the old `SimFs` itself,
//! return [`IoError::Crashed`] from then on (threads still running included). Per file:
//!
//! - the post-crash contents start from the durable image;
//! - each pending write independently is **kept**, **lost**, or **torn**: a torn write keeps a
//!   random non-empty proper subset of the sectors it touches ([`SimConfig::sector_size`]
//!   bytes, boundaries at absolute file offsets that are multiples of it; a partially covered
//!   sector keeps or loses the write's bytes in it). A write touching one sector cannot tear
//!   (it is kept or lost by a seeded coin); neither can an atomic write;
//! - with reordering, the surviving writes between two length changes are applied in a random
//!   order, so an older write may end up on top of a newer one; length changes are kept or lost
//!   as a whole and stay ordering points;
//! - the length is the durable length, changed only by surviving length changes and by surviving
//!   sectors of writes that reach past it: a lost write (or a lost tail of a torn one) does not
//!   extend the file. **Holes** — bytes past the durable length that no surviving write covers,
//!   below a surviving piece further out — read as zeros (as an unwritten extent does);
//! - a file survives under each name that is durable in its directory (see below); a file
//!   without a durable name is gone. A file reachable under two durable names (a rename whose
//!   source directory was not synced) becomes one file with two names.
//!
//! A crash can also be armed to happen *at* a given call: [`SimFs::crash_at_call`] makes the
//! Nth mutating call from now crash the machine before it has any effect (the call returns
//! `Crashed`); the post-crash file system is then [`SimFs::crashed_into`]. This puts a crash
//! between any two I/O calls of code under test without wrapping the traits.
//!
//! Each crash draws from a generator derived from the seed and the crash's generation number,
//! in path order, so the same seed and the same operations give the same post-crash bytes
//! (reads and other run-time randomness do not disturb it). [`SimFs::last_crash`] tells what
//! the crash that made a file system did ([`CrashReport`]).
//!
//! ## Namespace
//!
//! Creating, renaming and removing entries changes the directory at once, and is durable once
//! the directory is synced ([`FileSystem::sync_dir`]). Like [`crate::OsFs`], `open` with create
//! of a new file, `rename`, `remove_file` and `create_dir_all` sync the directories they change
//! themselves, so they are durable when they return Ok; only a failed directory sync (an
//! injected fault) leaves an entry that a crash forgets. Directories cannot be removed or
//! renamed. Paths are normalised (`.` components and repeated separators dropped; `..` is not
//! resolved); `/` and `.` are roots that always exist; a file can only be created in an existing
//! directory.
//!
//! ## Faults ([`Fault`], injected at run time with [`SimFs::inject`], thread-safe)
//!
//! - ENOSPC on a write: the Nth write request from now, every write to a path, or any write
//!   that grows the total size of all files past a limit: [`IoError::NoSpace`], no effect.
//! - EIO on a sync: the Nth file sync from now, or every sync of a path (file or directory):
//!   [`IoError::SyncFailed`]. Linux after a failed fsync marks the dirty pages clean: whatever
//!   had not reached the disk never will, although reads may still return it. SimFs does the
//!   same: at the failed sync each pending operation of the file is decided at once (kept, lost
//!   or torn, by [`SimConfig::failed_sync`] from the run-time generator) and applied to the
//!   durable image, the pending list is emptied, and reads keep showing the latest image. A
//!   later successful sync makes only operations issued after the failure durable: the dropped
//!   bytes stay lost, and a crash shows them lost (or torn as decided) even after that sync.
//! - Bit flips on read: a given bit of a given byte of a file in every read covering it, or one
//!   random bit per read request with a probability. The stored data is unchanged.
//!
//! # Invariants (each has a test that breaks it on purpose, see `sim::tests::sabotage_*`)
//!
//! 1. **Synced is kept**: bytes durable before a crash (synced, or written through) are there
//!    after it unless a pending operation issued later covers them.
//! 2. **Atomic writes are never torn**: after a crash the range of an atomic write holds all its
//!    bytes or none of them (unless another pending write overlaps it).
//! 3. **No invented bytes**: every byte after a crash is a durable byte, a byte of a pending
//!    write covering it, or a zero of a hole; [`FileSnapshot::check_crash_outcome`] checks this
//!    (and 1, 2 and the length rule) and is public so crash tests elsewhere can use it.
//! 4. **Old handles are dead**: after `crash()`, every operation through the old file system or
//!    any of its handles returns [`IoError::Crashed`] and has no effect.
//! 5. **Misaligned direct I/O has no effect** (crate invariant 1).
//! 6. **A failed sync is not undone by a later one**: writes a failed sync dropped are not made
//!    durable by a later successful sync.
//!
//! # Cost
//!
//! Images are sparse, in 4 KiB copy-on-write chunks shared between the durable and the latest
//! image; all-zero writes into unallocated chunks allocate nothing (a zero-filled preallocated
//! log costs no memory). A sync or a crash costs time proportional to the data written since
//! the last sync (plus one pointer per 4 KiB chunk of the file at a crash). A `SimFs` is an
//! `Arc`: cloning is cheap and clones share everything. Each file has its own lock, so threads
//! writing different files do not wait for each other.

mod crash;
mod fault;
mod image;
mod oracle;
mod rng;
mod state;
#[cfg(test)]
mod tests;

pub use crash::{CrashPolicy, CrashReport, Fates};
pub use fault::{Fault, FaultStats};
pub use oracle::{FileSnapshot, PendingWrite};

use crate::contract::{self, Contract};
use crate::{
    AtomicWriteLimits, Capabilities, DirectIoAlignment, File, FileClass, FileSystem, IoCounters,
    IoError, OpenOptions, ReadOp, Result, WriteOp,
};
use fault::Faults;
use parking_lot::Mutex;
pub use rng::SplitMix64;
use state::{FileState, Op};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Atomic-write limits like XFS on this machine's loop image with the software fallback:
/// 4 KiB ..= 1 MiB, one segment, no hardware-backed size.
pub const XFS_LIKE_ATOMIC: AtomicWriteLimits = AtomicWriteLimits {
    unit_min: 4096,
    unit_max: 1 << 20,
    segments_max: 1,
    unit_max_opt: 0,
};

/// Configuration of a [`SimFs`].
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Seed of every random choice (crashes, failed-sync fates, random bit flips).
    pub seed: u64,
    /// Tearing granularity and reported physical block size: a power of two ≥ 512 (512 and 4096
    /// are the devices modelled).
    pub sector_size: u32,
    /// Atomic-write limits of direct files ([`XFS_LIKE_ATOMIC`] by default; set `unit_max_opt`
    /// to model hardware-backed atomic writes, or [`AtomicWriteLimits::NONE`] for none).
    pub atomic: AtomicWriteLimits,
    /// Alignment direct I/O needs for offsets, lengths and buffer addresses (power of two,
    /// default 512); also the reported logical block size.
    pub direct_alignment: u32,
    /// How pending writes fare when a sync fails (see the module docs).
    pub failed_sync: Fates,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            seed: 0,
            sector_size: 512,
            atomic: XFS_LIKE_ATOMIC,
            direct_alignment: 512,
            failed_sync: Fates::Random {
                keep: 1,
                lose: 1,
                tear: 1,
            },
        }
    }
}

impl SimConfig {
    /// The default configuration with `seed`.
    pub fn seeded(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            ..SimConfig::default()
        }
    }

    /// Sets `sector_size`.
    pub fn sector_size(mut self, bytes: u32) -> SimConfig {
        self.sector_size = bytes;
        self
    }

    /// Sets `atomic`.
    pub fn atomic(mut self, limits: AtomicWriteLimits) -> SimConfig {
        self.atomic = limits;
        self
    }

    /// Makes every atomic write size hardware-backed (`unit_max_opt = unit_max`).
    pub fn hardware_atomic(mut self) -> SimConfig {
        self.atomic.unit_max_opt = self.atomic.unit_max;
        self
    }

    /// Sets `direct_alignment`.
    pub fn direct_alignment(mut self, bytes: u32) -> SimConfig {
        self.direct_alignment = bytes;
        self
    }

    /// Sets `failed_sync`.
    pub fn failed_sync(mut self, fates: Fates) -> SimConfig {
        self.failed_sync = fates;
        self
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if !self.sector_size.is_power_of_two() || self.sector_size < 512 {
            return Err(format!(
                "sector_size {} is not a power of two ≥ 512",
                self.sector_size
            ));
        }
        if !self.direct_alignment.is_power_of_two() {
            return Err(format!(
                "direct_alignment {} is not a power of two",
                self.direct_alignment
            ));
        }
        Ok(())
    }
}

/// Guarantees that unit tests switch off on purpose, to show that the checks catch the breakage.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sabotage {
    /// A crash zeroes the first sector of every durable image.
    pub(crate) lose_synced: bool,
    /// Atomic writes may tear.
    pub(crate) tear_atomic: bool,
    /// A lost write leaves 0xA5 bytes in its first sector.
    pub(crate) invent_bytes: bool,
    /// A crash leaves the old file system and its handles working.
    pub(crate) old_handles_live: bool,
    /// Direct I/O alignment is not checked.
    pub(crate) skip_alignment: bool,
    /// A failed sync drops nothing: a later sync makes everything durable.
    pub(crate) failed_sync_keeps_pending: bool,
}

#[derive(Debug)]
struct Inode {
    id: u64,
    state: Mutex<FileState>,
}

#[derive(Debug, Default)]
struct Namespace {
    files: BTreeMap<PathBuf, Arc<Inode>>,
    durable_files: BTreeMap<PathBuf, Arc<Inode>>,
    dirs: BTreeSet<PathBuf>,
    durable_dirs: BTreeSet<PathBuf>,
}

fn is_root(p: &Path) -> bool {
    p == Path::new("/") || p == Path::new(".")
}

impl Namespace {
    fn is_dir(&self, p: &Path) -> bool {
        is_root(p) || self.dirs.contains(p)
    }

    /// Whether some live name other than `except` refers to inode `id`.
    fn linked_elsewhere(&self, id: u64, except: &Path) -> bool {
        self.files
            .iter()
            .any(|(p, i)| i.id == id && p.as_path() != except)
    }
}

#[derive(Debug)]
struct Machine {
    config: SimConfig,
    generation: u64,
    crashed: AtomicBool,
    ns: Mutex<Namespace>,
    faults: Mutex<Faults>,
    faults_armed: AtomicBool,
    counters: Arc<IoCounters>,
    total_len: AtomicU64,
    next_inode: AtomicU64,
    report: Option<CrashReport>,
    sabotage: Sabotage,
    /// Mutating calls left before an armed crash point fires (0: none armed; [`FIRED`]: it
    /// fired).
    crash_countdown: AtomicU64,
    crash_point_policy: Mutex<Option<CrashPolicy>>,
    /// The file system this one crashed into.
    after: Mutex<Option<SimFs>>,
    /// Held locks by path: (exclusive, holders). Not part of the durable state: a crash (a
    /// reboot) releases every lock.
    locks: Mutex<std::collections::HashMap<PathBuf, (bool, usize)>>,
}

/// `Machine::crash_countdown` once its crash point fired.
const FIRED: u64 = u64::MAX;

/// The simulated file system. Cheap to clone (an `Arc`); thread-safe. See the module docs.
#[derive(Clone)]
pub struct SimFs {
    m: Arc<Machine>,
}

impl fmt::Debug for SimFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFs")
            .field("seed", &self.m.config.seed)
            .field("generation", &self.m.generation)
            .field("crashed", &self.m.crashed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for SimFs {
    fn default() -> SimFs {
        SimFs::new(SimConfig::default())
    }
}

/// Normalises a path: drops `.` components and repeated separators; empty becomes `.`.
fn norm(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        if c != Component::CurDir {
            out.push(c.as_os_str());
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// The directory holding a (normalised) path.
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        Some(_) => PathBuf::from("."),
        None => path.to_path_buf(),
    }
}

fn os_err(op: &'static str, path: &Path, errno: i32) -> IoError {
    IoError::Os {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::from_raw_os_error(errno),
    }
}

fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EIO)
}

impl Machine {
    fn new(
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
            after: Mutex::new(None),
            locks: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Counts one mutating call towards an armed crash point; at the chosen call, crashes the
    /// machine (before the call has any effect) and returns `Crashed`.
    fn tick(self: &Arc<Machine>, path: &Path) -> Result<()> {
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
            let _ = SimFs { m: self.clone() }.crash_inner(policy);
        }
        self.alive(path)
    }

    fn alive(&self, path: &Path) -> Result<()> {
        if self.crashed.load(Ordering::SeqCst) {
            Err(IoError::Crashed {
                path: path.to_path_buf(),
            })
        } else {
            Ok(())
        }
    }

    fn sector(&self) -> u64 {
        u64::from(self.config.sector_size)
    }

    /// Makes the entries of `dir` durable, unless an injected fault fails the sync.
    fn sync_dir_locked(&self, ns: &mut Namespace, dir: &Path) -> Result<()> {
        if self.faults_armed.load(Ordering::Relaxed) {
            let mut f = self.faults.lock();
            let fail = f.sync_fails(dir, false);
            self.faults_armed.store(f.armed(), Ordering::Relaxed);
            if fail {
                return Err(IoError::SyncFailed {
                    path: dir.to_path_buf(),
                    source: eio(),
                });
            }
        }
        let in_dir = |p: &Path| parent_of(p) == dir && !is_root(p);
        ns.durable_files.retain(|p, _| !in_dir(p));
        let live: Vec<(PathBuf, Arc<Inode>)> = ns
            .files
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), i.clone()))
            .collect();
        ns.durable_files.extend(live);
        ns.durable_dirs.retain(|p| !in_dir(p));
        let dirs: Vec<PathBuf> = ns.dirs.iter().filter(|p| in_dir(p)).cloned().collect();
        ns.durable_dirs.extend(dirs);
        Ok(())
    }

    /// A file's name went away: if no other live name refers to it, its length stops counting
    /// towards the space limit.
    fn unlinked(&self, ns: &Namespace, inode: &Inode, name: &Path) {
        if ns.linked_elsewhere(inode.id, name) {
            return;
        }
        let mut st = inode.state.lock();
        if st.linked {
            st.linked = false;
            let len = st.current.len();
            let _ = self
                .total_len
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                    Some(t.saturating_sub(len))
                });
        }
    }
}

impl SimFs {
    /// A new, empty file system (only the roots `/` and `.` exist).
    ///
    /// # Panics
    /// If the configuration is invalid (sector size not a power of two ≥ 512, direct alignment
    /// not a power of two): a bug in the test that builds it.
    pub fn new(config: SimConfig) -> SimFs {
        SimFs::build(config, Sabotage::default())
    }

    /// A new, empty file system with the default configuration and `seed`.
    pub fn with_seed(seed: u64) -> SimFs {
        SimFs::new(SimConfig::seeded(seed))
    }

    fn build(config: SimConfig, sabotage: Sabotage) -> SimFs {
        if let Err(e) = config.validate() {
            panic!("invalid SimConfig: {e}");
        }
        SimFs {
            m: Arc::new(Machine::new(
                config,
                0,
                Namespace::default(),
                None,
                sabotage,
            )),
        }
    }

    #[cfg(test)]
    pub(crate) fn sabotaged(config: SimConfig, sabotage: Sabotage) -> SimFs {
        SimFs::build(config, sabotage)
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.m.config
    }

    /// How many crashes led to this file system (0 for a new one).
    pub fn generation(&self) -> u64 {
        self.m.generation
    }

    /// Whether this file system has crashed (its handles return [`IoError::Crashed`]).
    pub fn is_crashed(&self) -> bool {
        self.m.crashed.load(Ordering::SeqCst)
    }

    /// What the crash that produced this file system did (`None` for a new one).
    pub fn last_crash(&self) -> Option<&CrashReport> {
        self.m.report.as_ref()
    }

    /// Crashes with a policy drawn from the seed (random fate weights, reordering or not) and
    /// returns the file system after the reboot. See the module docs.
    ///
    /// # Panics
    /// If this file system already crashed (crash the one crash returned, or take it from
    /// [`SimFs::crashed_into`]).
    pub fn crash(&self) -> SimFs {
        self.crash_inner(None).unwrap_or_else(|| {
            panic!(
                "SimFs::crash on a file system that already crashed; crash the one it crashed into"
            )
        })
    }

    /// Crashes with `policy` and returns the file system after the reboot.
    ///
    /// # Panics
    /// If this file system already crashed.
    pub fn crash_with(&self, policy: CrashPolicy) -> SimFs {
        self.crash_inner(Some(policy)).unwrap_or_else(|| {
            panic!("SimFs::crash_with on a file system that already crashed; crash the one it crashed into")
        })
    }

    /// Arms a crash point: the `n`th mutating call from now (1: the next one) crashes the
    /// machine before it has any effect, with `policy` (`None`: drawn from the seed, as
    /// [`SimFs::crash`]). That call and every later one return [`IoError::Crashed`]; the
    /// post-crash file system is then [`SimFs::crashed_into`]. Mutating calls: each write request
    /// (each op of a batch), file syncs, `set_len`, `allocate`, and `open` with create, `rename`,
    /// `remove_file`, `create_dir_all`, `sync_dir`. Reads, `len` and `exists` do not count.
    /// `n == 0` disarms.
    pub fn crash_at_call(&self, n: u64, policy: Option<CrashPolicy>) {
        *self.m.crash_point_policy.lock() = policy;
        self.m.crash_countdown.store(n, Ordering::SeqCst);
    }

    /// The file system this one crashed into (by [`SimFs::crash`], [`SimFs::crash_with`] or a
    /// crash point), if it crashed.
    pub fn crashed_into(&self) -> Option<SimFs> {
        self.m.after.lock().clone()
    }

    /// Crashes unless already crashed (`None` then).
    fn crash_inner(&self, policy: Option<CrashPolicy>) -> Option<SimFs> {
        let m = &self.m;
        let ns = m.ns.lock();
        let live_on = m.sabotage.old_handles_live;
        if !live_on && m.crashed.swap(true, Ordering::SeqCst) {
            return None;
        }
        let generation = m.generation + 1;
        let mut rng = SplitMix64::derive(m.config.seed, generation);
        let policy = policy.unwrap_or_else(|| CrashPolicy::drawn(&mut rng));
        let mut report = CrashReport {
            generation,
            policy: Some(policy),
            ..CrashReport::default()
        };
        // Directories whose every ancestor is durable.
        let mut dirs = BTreeSet::new();
        for d in &ns.durable_dirs {
            let p = parent_of(d);
            if is_root(&p) || dirs.contains(&p) {
                dirs.insert(d.clone());
            }
        }
        let mut done: HashMap<u64, Arc<Inode>> = HashMap::new();
        let mut files = BTreeMap::new();
        for (path, inode) in &ns.durable_files {
            let p = parent_of(path);
            if !(is_root(&p) || dirs.contains(&p)) {
                continue;
            }
            let new = match done.get(&inode.id) {
                Some(n) => n.clone(),
                None => {
                    let mut st = inode.state.lock();
                    // The old machine is dead: take its state (cost ∝ pending data), unless a
                    // sabotage test keeps it alive.
                    let mut copy = if live_on {
                        FileState {
                            current: Image::default(),
                            durable: st.durable.clone(),
                            pending: st.pending.clone(),
                            limbo: false,
                            linked: true,
                        }
                    } else {
                        std::mem::take(&mut *st)
                    };
                    drop(st);
                    let img = crash::crash_file(
                        &mut copy,
                        &policy,
                        &mut rng,
                        m.sector(),
                        &mut report,
                        m.sabotage,
                    );
                    report.files += 1;
                    let n = Arc::new(Inode {
                        id: inode.id,
                        state: Mutex::new(FileState::clean(img)),
                    });
                    done.insert(inode.id, n.clone());
                    n
                }
            };
            files.insert(path.clone(), new);
        }
        let mut lost = BTreeSet::new();
        for inode in ns.files.values() {
            if !done.contains_key(&inode.id) && lost.insert(inode.id) && !live_on {
                *inode.state.lock() = FileState::default();
            }
        }
        report.files_lost = lost.len() as u64;
        let new_ns = Namespace {
            durable_files: files.clone(),
            files,
            durable_dirs: dirs.clone(),
            dirs,
        };
        let after = SimFs {
            m: Arc::new(Machine::new(
                m.config.clone(),
                generation,
                new_ns,
                Some(report),
                m.sabotage,
            )),
        };
        drop(ns);
        *m.after.lock() = Some(after.clone());
        Some(after)
    }

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

    /// Every file with a live name, sorted.
    pub fn files(&self) -> Result<Vec<PathBuf>> {
        let ns = self.m.ns.lock();
        self.m.alive(Path::new("/"))?;
        Ok(ns.files.keys().cloned().collect())
    }

    /// Every file whose name is durable (would survive a crash), sorted.
    pub fn durable_files(&self) -> Result<Vec<PathBuf>> {
        let ns = self.m.ns.lock();
        self.m.alive(Path::new("/"))?;
        Ok(ns.durable_files.keys().cloned().collect())
    }

    /// The sum of the lengths of all files (what [`Fault::NoSpaceAbove`] compares).
    pub fn total_bytes(&self) -> u64 {
        self.m.total_len.load(Ordering::Relaxed)
    }

    fn with_file<T>(&self, path: &Path, f: impl FnOnce(&FileState) -> T) -> Result<T> {
        let path = norm(path);
        let ns = self.m.ns.lock();
        self.m.alive(&path)?;
        let inode = ns
            .files
            .get(&path)
            .ok_or_else(|| IoError::NotFound { path: path.clone() })?;
        let st = inode.state.lock();
        Ok(f(&st))
    }

    /// The latest contents of a file (what reads see).
    pub fn contents(&self, path: &Path) -> Result<Vec<u8>> {
        self.with_file(path, |st| st.current.to_vec())
    }

    /// The durable contents of a file: what a crash losing every pending write would leave.
    pub fn durable_contents(&self, path: &Path) -> Result<Vec<u8>> {
        self.with_file(path, |st| st.durable.to_vec())
    }

    /// Bytes of memory the latest image of a file holds (4 KiB per written, non-zero chunk).
    pub fn allocated_bytes(&self, path: &Path) -> Result<u64> {
        self.with_file(path, |st| st.current.allocated_bytes())
    }

    /// The writes issued to a file since its last successful sync (or failed one), in order.
    pub fn pending_writes(&self, path: &Path) -> Result<Vec<PendingWrite>> {
        self.with_file(path, |st| pending_of(st).0)
    }

    /// Everything a crash of this file may draw from; check the post-crash contents with
    /// [`FileSnapshot::check_crash_outcome`].
    pub fn snapshot(&self, path: &Path) -> Result<FileSnapshot> {
        let sector_size = self.m.config.sector_size;
        let p = norm(path);
        self.with_file(path, |st| {
            let (writes, set_lens) = pending_of(st);
            FileSnapshot {
                path: p,
                sector_size,
                durable: st.durable.to_vec(),
                current: st.current.to_vec(),
                writes,
                set_lens,
            }
        })
    }
}

fn pending_of(st: &FileState) -> (Vec<PendingWrite>, Vec<u64>) {
    let mut writes = Vec::new();
    let mut lens = Vec::new();
    for op in &st.pending {
        match op {
            Op::Write {
                offset,
                data,
                atomic,
            } => writes.push(PendingWrite {
                offset: *offset,
                data: data.to_vec(),
                atomic: *atomic,
            }),
            Op::SetLen { len, .. } => lens.push(*len),
        }
    }
    (writes, lens)
}

use image::Image;

/// A file opened on a [`SimFs`].
pub struct SimFile {
    m: Arc<Machine>,
    inode: Arc<Inode>,
    path: PathBuf,
    options: OpenOptions,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish()
    }
}

impl SimFile {
    /// The pre-I/O contract of this file (see the crate's `contract` module): the configured
    /// alignment for memory and offsets alike (none under the `skip_alignment` sabotage) and
    /// atomic limits.
    fn contract(&self) -> Contract {
        let a = if self.m.sabotage.skip_alignment {
            1
        } else {
            self.m.config.direct_alignment
        };
        Contract {
            direct: self.options.direct,
            align: DirectIoAlignment {
                memory: a,
                offset: a,
            },
            atomic: self.m.config.atomic,
        }
    }

    /// One write request, already validated.
    fn write_one(&self, buf: &[u8], offset: u64, atomic: bool) -> Result<()> {
        let end = contract::end_of(&self.path, offset, buf.len() as u64)?;
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        let growth = end.saturating_sub(st.current.len());
        if self.m.faults_armed.load(Ordering::Relaxed) {
            let total_after = self.m.total_len.load(Ordering::Relaxed) + growth;
            let mut f = self.m.faults.lock();
            let fail = f.write_fails(&self.path, growth, total_after, true);
            self.m.faults_armed.store(f.armed(), Ordering::Relaxed);
            if fail {
                return Err(IoError::NoSpace {
                    path: self.path.clone(),
                    offset,
                    len: buf.len(),
                });
            }
        }
        if self.options.write_through {
            st.write_through(offset, buf);
        } else {
            st.write(offset, buf, atomic);
        }
        if st.linked && growth > 0 {
            self.m.total_len.fetch_add(growth, Ordering::Relaxed);
        }
        drop(st);
        if atomic {
            self.m.counters.atomic_write(self.options.class, buf.len());
        } else {
            self.m.counters.write(self.options.class, buf.len());
        }
        Ok(())
    }

    fn sync_impl(&self) -> Result<()> {
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        if self.m.faults_armed.load(Ordering::Relaxed) {
            let mut f = self.m.faults.lock();
            let fail = f.sync_fails(&self.path, true);
            self.m.faults_armed.store(f.armed(), Ordering::Relaxed);
            if fail {
                if !self.m.sabotage.failed_sync_keeps_pending {
                    let policy = CrashPolicy {
                        fates: self.m.config.failed_sync,
                        reorder: false,
                    };
                    let dropped = st.fail_sync(&policy, &mut f.rng, self.m.sector());
                    f.stats.writes_dropped_by_failed_sync += dropped;
                }
                return Err(IoError::SyncFailed {
                    path: self.path.clone(),
                    source: eio(),
                });
            }
        }
        st.sync();
        drop(st);
        self.m.counters.sync(self.options.class);
        Ok(())
    }

    /// Changes the length (the caller holds the file's lock and checked `alive`).
    fn resize(&self, st: &mut FileState, len: u64) {
        let old = st.current.len();
        st.set_len(len);
        if st.linked {
            if len > old {
                self.m.total_len.fetch_add(len - old, Ordering::Relaxed);
            } else {
                let d = old - len;
                let _ = self
                    .m
                    .total_len
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                        Some(t.saturating_sub(d))
                    });
            }
        }
    }
}

impl File for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn class(&self) -> FileClass {
        self.options.class
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_read(&self.path, buf, offset)?;
        {
            let st = self.inode.state.lock();
            self.m.alive(&self.path)?;
            let len = st.current.len();
            let end = contract::end_of(&self.path, offset, buf.len() as u64)?;
            if end > len {
                let got = len.saturating_sub(offset).min(buf.len() as u64) as usize;
                st.current.read(offset, &mut buf[..got]);
                return Err(IoError::ShortRead {
                    path: self.path.clone(),
                    offset,
                    wanted: buf.len(),
                    got,
                });
            }
            st.current.read(offset, buf);
        }
        if self.m.faults_armed.load(Ordering::Relaxed) {
            self.m.faults.lock().on_read(&self.path, offset, buf);
        }
        self.m.counters.read(self.options.class, buf.len());
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_write(&self.path, buf, offset)?;
        self.write_one(buf, offset, false)
    }

    fn write_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_writes(&self.path, writes)?;
        for w in writes {
            self.write_one(w.buf, w.offset, false)?;
        }
        Ok(())
    }

    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_reads(&self.path, reads)?;
        for r in reads.iter_mut() {
            self.read_exact_at(r.buf, r.offset)?;
        }
        Ok(())
    }

    fn write_atomic(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_atomic(&self.path, buf, offset)?;
        self.write_one(buf, offset, true)
    }

    fn write_atomic_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_atomic_writes(&self.path, writes)?;
        for w in writes {
            self.write_one(w.buf, w.offset, true)?;
        }
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        self.sync_impl()
    }

    fn sync_data(&self) -> Result<()> {
        self.sync_impl()
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        let end = contract::end_of(&self.path, offset, len)?;
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        let growth = end.saturating_sub(st.current.len());
        if self.m.faults_armed.load(Ordering::Relaxed) {
            let total_after = self.m.total_len.load(Ordering::Relaxed) + growth;
            let mut f = self.m.faults.lock();
            let fail = f.write_fails(&self.path, growth, total_after, false);
            self.m.faults_armed.store(f.armed(), Ordering::Relaxed);
            if fail {
                return Err(IoError::NoSpace {
                    path: self.path.clone(),
                    offset,
                    len: len as usize,
                });
            }
        }
        if growth > 0 {
            self.resize(&mut st, end);
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        contract::end_of(&self.path, 0, len)?;
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        self.resize(&mut st, len);
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        let st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        Ok(st.current.len())
    }

    fn atomic_write_limits(&self) -> AtomicWriteLimits {
        if self.options.direct {
            self.m.config.atomic
        } else {
            AtomicWriteLimits::NONE
        }
    }

    fn is_direct(&self) -> bool {
        self.options.direct
    }
}

impl FileSystem for SimFs {
    fn open(&self, path: &Path, options: &OpenOptions) -> Result<Arc<dyn File>> {
        let path = norm(path);
        if options.create {
            self.m.tick(&path)?;
        }
        let mut ns = self.m.ns.lock();
        self.m.alive(&path)?;
        if ns.is_dir(&path) {
            return Err(os_err("open", &path, libc::EISDIR));
        }
        let inode = match ns.files.get(&path) {
            Some(i) => i.clone(),
            None => {
                if !options.create {
                    return Err(IoError::NotFound { path });
                }
                let parent = parent_of(&path);
                if !ns.is_dir(&parent) {
                    return Err(IoError::NotFound { path });
                }
                let id = self.m.next_inode.fetch_add(1, Ordering::Relaxed);
                let inode = Arc::new(Inode {
                    id,
                    state: Mutex::new(FileState::clean(Image::default())),
                });
                ns.files.insert(path.clone(), inode.clone());
                self.m.sync_dir_locked(&mut ns, &parent)?;
                inode
            }
        };
        Ok(Arc::new(SimFile {
            m: self.m.clone(),
            inode,
            path,
            options: *options,
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        let path = norm(path);
        let ns = self.m.ns.lock();
        self.m.alive(&path)?;
        Ok(ns.is_dir(&path) || ns.files.contains_key(&path))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let path = norm(path);
        self.m.tick(&path)?;
        let mut ns = self.m.ns.lock();
        self.m.alive(&path)?;
        let mut missing = Vec::new();
        let mut p = path.clone();
        while !ns.is_dir(&p) {
            if ns.files.contains_key(&p) {
                return Err(os_err("mkdir", &p, libc::ENOTDIR));
            }
            missing.push(p.clone());
            let up = parent_of(&p);
            if up == p {
                break;
            }
            p = up;
        }
        for d in missing.into_iter().rev() {
            ns.dirs.insert(d.clone());
            self.m.sync_dir_locked(&mut ns, &parent_of(&d))?;
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let dir = norm(dir);
        let ns = self.m.ns.lock();
        self.m.alive(&dir)?;
        if !ns.is_dir(&dir) {
            if ns.files.contains_key(&dir) {
                return Err(os_err("readdir", &dir, libc::ENOTDIR));
            }
            return Err(IoError::NotFound { path: dir });
        }
        let mut out: Vec<PathBuf> = ns
            .files
            .keys()
            .chain(ns.dirs.iter())
            .filter(|p| parent_of(p) == dir && !is_root(p))
            .cloned()
            .collect();
        out.sort();
        Ok(out)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let path = norm(path);
        self.m.tick(&path)?;
        let mut ns = self.m.ns.lock();
        self.m.alive(&path)?;
        if ns.is_dir(&path) {
            return Err(os_err("unlink", &path, libc::EISDIR));
        }
        let inode = ns
            .files
            .remove(&path)
            .ok_or_else(|| IoError::NotFound { path: path.clone() })?;
        self.m.unlinked(&ns, &inode, &path);
        self.m.sync_dir_locked(&mut ns, &parent_of(&path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let (from, to) = (norm(from), norm(to));
        self.m.tick(&from)?;
        let mut ns = self.m.ns.lock();
        self.m.alive(&from)?;
        if ns.is_dir(&from) {
            return Err(os_err(
                "rename (directories are not supported)",
                &from,
                libc::EISDIR,
            ));
        }
        if ns.is_dir(&to) {
            return Err(os_err("rename", &to, libc::EISDIR));
        }
        let Some(inode) = ns.files.get(&from).cloned() else {
            return Err(IoError::NotFound { path: from });
        };
        if !ns.is_dir(&parent_of(&to)) {
            return Err(IoError::NotFound { path: to });
        }
        if from == to {
            return Ok(());
        }
        if let Some(old) = ns.files.remove(&to) {
            if old.id != inode.id {
                self.m.unlinked(&ns, &old, &to);
            }
        }
        ns.files.remove(&from);
        ns.files.insert(to.clone(), inode);
        let (a, b) = (parent_of(&from), parent_of(&to));
        self.m.sync_dir_locked(&mut ns, &b)?;
        if a != b {
            self.m.sync_dir_locked(&mut ns, &a)?;
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let dir = norm(dir);
        self.m.tick(&dir)?;
        let mut ns = self.m.ns.lock();
        self.m.alive(&dir)?;
        if !ns.is_dir(&dir) {
            return Err(IoError::NotFound { path: dir });
        }
        self.m.sync_dir_locked(&mut ns, &dir)
    }

    fn capabilities(&self, path: &Path) -> Result<Capabilities> {
        let path = norm(path);
        {
            let ns = self.m.ns.lock();
            self.m.alive(&path)?;
            if !ns.is_dir(&path) && !ns.files.contains_key(&path) {
                return Err(IoError::NotFound { path });
            }
        }
        let c = &self.m.config;
        Ok(Capabilities {
            path,
            filesystem: String::from("simfs"),
            direct_io: Some(DirectIoAlignment {
                memory: c.direct_alignment,
                offset: c.direct_alignment,
            }),
            logical_block_size: c.direct_alignment,
            physical_block_size: c.sector_size,
            atomic: c.atomic,
            io_uring: false,
        })
    }

    fn counters(&self) -> Arc<IoCounters> {
        self.m.counters.clone()
    }

    fn lock(&self, path: &Path, mode: crate::LockMode) -> Result<Box<dyn crate::LockGuard>> {
        let path = norm(path);
        let exclusive = mode == crate::LockMode::Exclusive;
        let mut locks = self.m.locks.lock();
        match locks.get_mut(&path) {
            None => {
                locks.insert(path.clone(), (exclusive, 1));
            }
            Some((false, n)) if !exclusive => *n += 1,
            Some(_) => {
                return Err(IoError::Locked {
                    path,
                    holder: Some(std::process::id()),
                })
            }
        }
        Ok(Box::new(SimLock {
            m: self.m.clone(),
            path,
        }))
    }
}

/// A lock held in a [`SimFs`]'s lock table.
struct SimLock {
    m: Arc<Machine>,
    path: PathBuf,
}

impl fmt::Debug for SimLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLock").field("path", &self.path).finish()
    }
}

impl crate::LockGuard for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut locks = self.m.locks.lock();
        if let Some((_, n)) = locks.get_mut(&self.path) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                locks.remove(&self.path);
            }
        }
    }
}
