//! How does a crash turn one machine into the next? [`SimFs::crash`], [`SimFs::crash_with`] and
//! crash points ([`SimFs::crash_at_call`]) mark the machine crashed and build the post-crash one:
//! the directories and names durable in durable directories, each surviving file's contents
//! decided by `crash::crash_file`, and a [`CrashReport`].
//!
//! Invariants: a machine crashes at most once (a second crash of the same one is a test bug and
//! panics); every crash draws from a generator derived from the seed and the crash's generation
//! only, visiting files in path order, so the same seed and operations give the same post-crash
//! state; a file reachable under two durable names becomes one file with two names; the old
//! machine's file states are taken, not copied (cost ∝ pending data).

use super::crash::{self, CrashPolicy, CrashReport};
use super::image::Image;
use super::machine::{Inode, Machine};
use super::namespace::{is_root, parent_of, Namespace};
use super::rng::SplitMix64;
use super::state::FileState;
use super::SimFs;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl SimFs {
    /// A process crash (`kill -9`): the process dies, the machine and its page cache live on.
    /// Every write the process made stays as it was — what was synced durable, what was not still
    /// pending, so a later power loss ([`SimFs::crash`]) can lose it yet. The process's handles
    /// fail from now on ([`IoError::Crashed`](crate::IoError::Crashed)) and its locks are
    /// released. Returns the file system as the next process sees it (also
    /// [`SimFs::crashed_into`]).
    ///
    /// # Panics
    /// If this file system already crashed.
    pub fn process_crash(&self) -> SimFs {
        let m = &self.m;
        let ns = m.ns.lock();
        assert!(
            !m.crashed.swap(true, Ordering::SeqCst),
            "SimFs::process_crash on a file system that already crashed"
        );
        // The file states move to new inodes (the old handles keep the old, emptied ones, so a
        // write of the dead process that was under way lands nowhere).
        let mut done: HashMap<u64, Arc<Inode>> = HashMap::new();
        let mut carry = |inode: &Arc<Inode>| -> Arc<Inode> {
            done.entry(inode.id)
                .or_insert_with(|| {
                    Arc::new(Inode {
                        id: inode.id,
                        state: Mutex::new(std::mem::take(&mut *inode.state.lock())),
                    })
                })
                .clone()
        };
        let files: BTreeMap<_, _> = ns
            .files
            .iter()
            .map(|(p, i)| (p.clone(), carry(i)))
            .collect();
        let durable_files: BTreeMap<_, _> = ns
            .durable_files
            .iter()
            .map(|(p, i)| (p.clone(), carry(i)))
            .collect();
        let new_ns = Namespace {
            files,
            durable_files,
            dirs: ns.dirs.clone(),
            durable_dirs: ns.durable_dirs.clone(),
        };
        let after = SimFs {
            m: Arc::new(Machine::new(
                m.config.clone(),
                m.generation + 1,
                new_ns,
                None,
                m.sabotage,
            )),
        };
        drop(ns);
        *m.after.lock() = Some(after.clone());
        after
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
    /// [`SimFs::crash`]). That call and every later one return [`IoError::Crashed`](crate::IoError::Crashed); the
    /// post-crash file system is then [`SimFs::crashed_into`]. Mutating calls: each write request
    /// (each op of a batch), file syncs, `set_len`, `allocate`, and `open` with create, `rename`,
    /// `remove_file`, `create_dir_all`, `sync_dir`. Reads, `len` and `exists` do not count.
    /// `n == 0` disarms.
    pub fn crash_at_call(&self, n: u64, policy: Option<CrashPolicy>) {
        *self.m.crash_point_policy.lock() = policy;
        self.m.crash_point_kills.store(false, Ordering::SeqCst);
        self.m.crash_countdown.store(n, Ordering::SeqCst);
    }

    /// Arms a kill point: the `n`th mutating call from now kills the process
    /// ([`SimFs::process_crash`]) before the call has any effect — in the middle of whatever it
    /// was doing (a batch written to the doublewrite area and not yet synced, say), where a
    /// kill between calls of the caller never lands. Counted and disarmed as
    /// [`SimFs::crash_at_call`]; the file system the process crashed into is then
    /// [`SimFs::crashed_into`], its page cache holding every write made before.
    pub fn kill_at_call(&self, n: u64) {
        *self.m.crash_point_policy.lock() = None;
        self.m.crash_point_kills.store(true, Ordering::SeqCst);
        self.m.crash_countdown.store(n, Ordering::SeqCst);
    }

    /// The post-crash file system, never a panic: this one crashed now, or — if it crashed
    /// already, also by a crash point firing on another thread at this very moment — the one
    /// it crashed into (waiting for that crash to finish building it). For harnesses whose
    /// background threads may fire an armed crash point while they crash the machine: checking
    /// [`SimFs::is_crashed`] and then calling [`SimFs::crash`] races with such a thread. A crash
    /// point still armed is disarmed first (the power fails now, not at a later call).
    pub fn crash_or_crashed_into(&self) -> SimFs {
        self.crash_at_call(0, None);
        loop {
            if let Some(p) = self.crashed_into() {
                return p;
            }
            if let Some(p) = self.crash_inner(None) {
                return p;
            }
            // Crashed by another thread, which is still building the post-crash machine.
            std::thread::yield_now();
        }
    }

    /// The mutating calls made on this file system (not the one it crashed into) so far: how
    /// many, and a hash of the path each touched, in order — the same for two runs that made the
    /// same calls in the same order, whatever bytes they wrote (a log's salt comes from the
    /// clock). For tests that a seeded run replays exactly.
    pub fn call_trace(&self) -> (u64, u64) {
        *self.m.calls.lock()
    }

    /// The file system this one crashed into (by [`SimFs::crash`], [`SimFs::crash_with`] or a
    /// crash point), if it crashed.
    pub fn crashed_into(&self) -> Option<SimFs> {
        self.m.after.lock().clone()
    }

    /// Crashes unless already crashed (`None` then).
    pub(super) fn crash_inner(&self, policy: Option<CrashPolicy>) -> Option<SimFs> {
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
                            stale: Vec::new(),
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
}
