//! How do names and directories change, and when are they durable? [`FileSystem`] for
//! [`SimFs`]: creating, renaming and removing entries changes the live namespace at once and is
//! durable once the directory is synced, which every such call does itself (see the module docs'
//! *Namespace*); also the lock table ([`FileSystem::lock`]).
//!
//! Invariants: paths are normalised (`norm`) before any lookup; a file can only be created in an
//! existing directory; a failed directory sync (an injected fault) leaves the durable entries of
//! that directory as they were; a file's length counts towards the space limit while some live
//! name refers to it; a crash (a new machine) releases every lock.

use super::file::SimFile;
use super::image::Image;
use super::machine::{eio, os_err, Inode, Machine};
use super::state::FileState;
use super::SimFs;
use crate::{
    Capabilities, DirectIoAlignment, File, FileSystem, IoCounters, IoError, OpenOptions, Result,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The names of a machine: live files and directories, and those durable in their directory.
#[derive(Debug, Default)]
pub(super) struct Namespace {
    pub(super) files: BTreeMap<PathBuf, Arc<Inode>>,
    pub(super) durable_files: BTreeMap<PathBuf, Arc<Inode>>,
    pub(super) dirs: BTreeSet<PathBuf>,
    pub(super) durable_dirs: BTreeSet<PathBuf>,
}

/// Whether `p` is one of the roots `/` and `.` (which always exist).
pub(super) fn is_root(p: &Path) -> bool {
    p == Path::new("/") || p == Path::new(".")
}

impl Namespace {
    pub(super) fn is_dir(&self, p: &Path) -> bool {
        is_root(p) || self.dirs.contains(p)
    }

    /// Whether some live name other than `except` refers to inode `id`.
    pub(super) fn linked_elsewhere(&self, id: u64, except: &Path) -> bool {
        self.files
            .iter()
            .any(|(p, i)| i.id == id && p.as_path() != except)
    }
}

/// Normalises a path: drops `.` components and repeated separators; empty becomes `.`.
pub(super) fn norm(path: &Path) -> PathBuf {
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
pub(super) fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        Some(_) => PathBuf::from("."),
        None => path.to_path_buf(),
    }
}

impl Machine {
    /// Makes the entries of `dir` durable, unless an injected fault fails the sync.
    pub(super) fn sync_dir_locked(&self, ns: &mut Namespace, dir: &Path) -> Result<()> {
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
    pub(super) fn unlinked(&self, ns: &Namespace, inode: &Inode, name: &Path) {
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

impl FileSystem for SimFs {
    fn open(&self, path: &Path, options: &OpenOptions) -> Result<Arc<dyn File>> {
        let path = norm(path);
        if options.create {
            self.m.tick(&path)?;
        }
        self.m.alive(&path)?;
        self.m.namespace_fault("open", &path, libc::EMFILE)?;
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
        self.m.alive(&path)?;
        self.m.namespace_fault("mkdir", &path, libc::EIO)?;
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
        self.m.alive(&dir)?;
        self.m.namespace_fault("readdir", &dir, libc::EIO)?;
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
        self.m.alive(&path)?;
        self.m.namespace_fault("unlink", &path, libc::EIO)?;
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
        self.m.alive(&from)?;
        self.m.namespace_fault("rename", &from, libc::EIO)?;
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
            free_bytes: self
                .m
                .faults
                .lock()
                .space_limit()
                .map(|l| l.saturating_sub(self.total_bytes())),
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
                    readers: false,
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
