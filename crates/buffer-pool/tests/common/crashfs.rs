//! A `FileSystem` wrapper over `SimFs` that crashes the machine between two I/O calls: the
//! N-th mutating call (write, sync, length change), or the first call a predicate picks.
#![allow(dead_code)]

use keel_io::sim::{CrashPolicy, SimFs};
use keel_io::{
    AtomicWriteLimits, Capabilities, File, FileClass, FileSystem, IoCounters, ReadOp, Result,
    WriteOp,
};
use parking_lot::Mutex;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

/// The kind of a mutating call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Write,
    AtomicWrite,
    Sync,
    SetLen,
}

type Pick = Box<dyn Fn(OpKind, FileClass) -> bool + Send + Sync>;
type Hook = Box<dyn Fn() + Send + Sync>;

/// Decides when to crash, performs the crash once, and keeps the post-crash file system.
pub struct Trigger {
    sim: SimFs,
    remaining: AtomicI64,
    pick: Mutex<Option<Pick>>,
    policy: Mutex<Option<CrashPolicy>>,
    fired: AtomicBool,
    after: Mutex<Option<SimFs>>,
    on_crash: Mutex<Vec<Hook>>,
    /// Every mutating call in order (for order checks).
    pub trace: Mutex<Vec<(OpKind, FileClass, u64, usize)>>,
}

impl Trigger {
    pub fn new(sim: SimFs) -> Arc<Trigger> {
        Arc::new(Trigger {
            sim,
            remaining: AtomicI64::new(i64::MAX),
            pick: Mutex::new(None),
            policy: Mutex::new(None),
            fired: AtomicBool::new(false),
            after: Mutex::new(None),
            on_crash: Mutex::new(Vec::new()),
            trace: Mutex::new(Vec::new()),
        })
    }

    /// Crash at the `n`-th mutating call from now (1 = the next one), before it takes effect.
    pub fn arm_after(&self, n: i64, policy: Option<CrashPolicy>) {
        *self.policy.lock() = policy;
        self.remaining.store(n, Ordering::SeqCst);
    }

    /// Crash at the first mutating call `pick` chooses.
    pub fn arm_when(
        &self,
        pick: impl Fn(OpKind, FileClass) -> bool + Send + Sync + 'static,
        policy: Option<CrashPolicy>,
    ) {
        *self.policy.lock() = policy;
        *self.pick.lock() = Some(Box::new(pick));
    }

    pub fn disarm(&self) {
        self.remaining.store(i64::MAX, Ordering::SeqCst);
        *self.pick.lock() = None;
    }

    /// Runs `f` at the moment of the crash (e.g. to freeze a model log).
    pub fn on_crash(&self, f: impl Fn() + Send + Sync + 'static) {
        self.on_crash.lock().push(Box::new(f));
    }

    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Crashes now (if it has not yet) and returns the file system after the reboot.
    pub fn crash_now(&self) -> SimFs {
        self.fire();
        self.after.lock().clone().expect("crashed")
    }

    fn fire(&self) {
        // Under the `after` lock: whoever comes second waits until the crash is complete.
        let mut after = self.after.lock();
        if after.is_some() {
            return;
        }
        self.fired.store(true, Ordering::SeqCst);
        for h in self.on_crash.lock().iter() {
            h();
        }
        let post = match *self.policy.lock() {
            Some(p) => self.sim.crash_with(p),
            None => self.sim.crash(),
        };
        *after = Some(post);
    }

    fn tick(&self, kind: OpKind, class: FileClass, offset: u64, len: usize) {
        if self.fired() {
            return;
        }
        let picked = self.pick.lock().as_ref().is_some_and(|p| p(kind, class));
        if picked || self.remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.fire();
            return;
        }
        self.trace.lock().push((kind, class, offset, len));
    }
}

/// The wrapper file system.
#[derive(Clone)]
pub struct CrashFs {
    pub inner: SimFs,
    pub trigger: Arc<Trigger>,
}

impl fmt::Debug for CrashFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CrashFs")
    }
}

impl CrashFs {
    pub fn new(sim: SimFs) -> CrashFs {
        CrashFs {
            trigger: Trigger::new(sim.clone()),
            inner: sim,
        }
    }
}

struct CrashFile {
    inner: Arc<dyn File>,
    trigger: Arc<Trigger>,
}

impl fmt::Debug for CrashFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CrashFile({})", self.inner.path().display())
    }
}

impl File for CrashFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn class(&self) -> FileClass {
        self.inner.class()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.trigger
            .tick(OpKind::Write, self.class(), offset, buf.len());
        self.inner.write_all_at(buf, offset)
    }
    fn write_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        // One call per write, so a crash can fall between the writes of a batch.
        for w in writes {
            self.write_all_at(w.buf, w.offset)?;
        }
        Ok(())
    }
    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> Result<()> {
        self.inner.read_batch(reads)
    }
    fn write_atomic(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.trigger
            .tick(OpKind::AtomicWrite, self.class(), offset, buf.len());
        self.inner.write_atomic(buf, offset)
    }
    fn write_atomic_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        for w in writes {
            self.write_atomic(w.buf, w.offset)?;
        }
        Ok(())
    }
    fn sync_all(&self) -> Result<()> {
        self.trigger.tick(OpKind::Sync, self.class(), 0, 0);
        self.inner.sync_all()
    }
    fn sync_data(&self) -> Result<()> {
        self.trigger.tick(OpKind::Sync, self.class(), 0, 0);
        self.inner.sync_data()
    }
    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.trigger
            .tick(OpKind::SetLen, self.class(), offset, len as usize);
        self.inner.allocate(offset, len)
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.trigger.tick(OpKind::SetLen, self.class(), len, 0);
        self.inner.set_len(len)
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn atomic_write_limits(&self) -> AtomicWriteLimits {
        self.inner.atomic_write_limits()
    }
    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }
    fn drop_cache(&self) -> keel_io::Result<()> {
        self.inner.drop_cache()
    }
}

impl FileSystem for CrashFs {
    fn open(&self, path: &Path, options: &keel_io::OpenOptions) -> Result<Arc<dyn File>> {
        let f = self.inner.open(path, options)?;
        Ok(Arc::new(CrashFile {
            inner: f,
            trigger: self.trigger.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.inner.list_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.inner.sync_dir(dir)
    }
    fn capabilities(&self, path: &Path) -> Result<Capabilities> {
        self.inner.capabilities(path)
    }
    fn counters(&self) -> Arc<IoCounters> {
        self.inner.counters()
    }
    fn lock(
        &self,
        path: &Path,
        mode: keel_io::LockMode,
    ) -> keel_io::Result<Box<dyn keel_io::LockGuard>> {
        self.inner.lock(path, mode)
    }
}
