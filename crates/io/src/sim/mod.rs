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
//! - EIO on a write (the Nth write request from now; no effect) or on every read of a path
//!   (a failing disk).
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
//!
//! # Files (one question each)
//!
//! - `mod.rs`: what is a [`SimFs`] (this model, the handle, its constructors)?
//! - `config.rs`: how is a simulated machine configured ([`SimConfig`])?
//! - `machine.rs`: what does one boot of the simulated machine hold, and how does every call check
//!   that it has not crashed and count towards an armed crash point?
//! - `file.rs`: how does a [`SimFile`] carry out a request (the pre-I/O contract, faults, the
//!   file's state, counters)?
//! - `namespace.rs`: how do names and directories change and become durable ([`FileSystem`] for
//!   [`SimFs`], locks)?
//! - `reboot.rs`: how does a crash turn one machine into the next (which names survive; crash
//!   points)?
//! - `crash.rs`: what does a crash do to one file's pending writes ([`CrashPolicy`])?
//! - `fault.rs`: which faults can be injected, and when do they fire ([`Fault`])?
//! - `state.rs`, `image.rs`: one file's durable and latest images and its pending operations.
//! - `inspect.rs`: what can a test see of the simulated state ([`SimFs::contents`],
//!   [`SimFs::snapshot`], ...)?
//! - `oracle.rs`: is a post-crash file one the fault model allows ([`FileSnapshot`])?
//! - `rng.rs`: the seeded generator behind every random choice ([`SplitMix64`]).

mod config;
mod crash;
mod fault;
mod file;
mod image;
mod inspect;
mod machine;
mod namespace;
mod oracle;
mod reboot;
mod rng;
mod state;
#[cfg(test)]
mod tests;

pub use config::{SimConfig, XFS_LIKE_ATOMIC};
pub use crash::{CrashPolicy, CrashReport, Fates};
pub use fault::{Fault, FaultStats};
pub use file::SimFile;
pub use oracle::{FileSnapshot, PendingWrite};
pub use rng::SplitMix64;

#[cfg(doc)] // names the module docs link to
use crate::{AtomicWriteLimits, File, FileSystem, IoError};
use machine::Machine;
use namespace::Namespace;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

    /// Whether this file system has crashed (its handles return [`IoError::Crashed`]) — from
    /// the moment an armed crash point fired, while the firing call may still be building the
    /// crash: calls on other threads already fail then, and a harness that sees such a failure
    /// must find the machine crashed (the crash matrix once took one for a failure before the
    /// power failed).
    pub fn is_crashed(&self) -> bool {
        self.m.crashed.load(Ordering::SeqCst) || self.m.crash_point_fired()
    }

    /// What the crash that produced this file system did (`None` for a new one).
    pub fn last_crash(&self) -> Option<&CrashReport> {
        self.m.report.as_ref()
    }
}
