//! The crash-test world: a pool over keel-flush's page writer over a crashing SimFs, a model
//! redo log, and a model of every page at every commit.
#![allow(dead_code)]

use super::crashfs::CrashFs;
use super::modellog::ModelLog;
use super::Rng;
use keel_buffer_pool::{BufferPool, PoolConfig, PoolError, Record, RedoApplyReport, RedoSink};
use keel_flush::{
    DoublewriteRecovery, PageWriter, PageWriterConfig, TornPageProtection, WalError, WalFlush,
};
use keel_io::sim::{CrashPolicy, SimConfig, SimFs};
use keel_page::{Lsn, PageId, PageSize, PageType, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use keel_redo_log::{LogBlockSize, LogConfig, LogFiles, RedoLog};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

pub const PS: PageSize = PageSize::K4;

/// The log of a crash world: the model log, or keel-redo-log's real log on the same SimFs.
#[derive(Clone, Debug)]
pub enum TestLog {
    Model(ModelLog),
    Real(RedoLog),
}

impl TestLog {
    /// Makes the log durable up to its end (a commit under `Durability::Sync`).
    pub fn sync(&self) -> Result<(), PoolError> {
        match self {
            TestLog::Model(m) => m.sync(),
            TestLog::Real(r) => r.wait_durable(r.end_lsn()).map_err(PoolError::log),
        }
    }

    pub fn checkpoint(&self, lsn: Lsn) -> Result<(), PoolError> {
        match self {
            TestLog::Model(m) => m.checkpoint(lsn),
            TestLog::Real(r) => r.checkpoint(lsn).map_err(PoolError::log),
        }
    }

    pub fn checkpoint_lsn(&self) -> Lsn {
        match self {
            TestLog::Model(m) => m.checkpoint_lsn(),
            TestLog::Real(r) => r.checkpoint_lsn(),
        }
    }

    pub fn durable(&self) -> Lsn {
        match self {
            TestLog::Model(m) => m.durable(),
            TestLog::Real(r) => r.durable_lsn(),
        }
    }

    pub fn model(&self) -> &ModelLog {
        match self {
            TestLog::Model(m) => m,
            TestLog::Real(_) => panic!("not the model log"),
        }
    }
}

impl RedoSink for TestLog {
    fn end_lsn(&self) -> Lsn {
        match self {
            TestLog::Model(m) => m.end_lsn(),
            TestLog::Real(r) => RedoSink::end_lsn(r),
        }
    }
    fn durable_lsn(&self) -> Lsn {
        match self {
            TestLog::Model(m) => RedoSink::durable_lsn(m),
            TestLog::Real(r) => RedoSink::durable_lsn(r),
        }
    }
    fn append(&self, records: &[Record]) -> Result<Lsn, PoolError> {
        match self {
            TestLog::Model(m) => m.append(records),
            TestLog::Real(r) => RedoSink::append(r, records),
        }
    }
    fn append_range(&self, records: &[Record]) -> Result<std::ops::Range<Lsn>, PoolError> {
        match self {
            TestLog::Model(m) => m.append_range(records),
            TestLog::Real(r) => RedoSink::append_range(r, records),
        }
    }
}

/// keel-flush's `WalFlush` for the test logs (keel-flush does not implement it for `RedoLog`
/// yet).
impl WalFlush for TestLog {
    fn flush_to(&self, lsn: Lsn) -> Result<(), WalError> {
        match self {
            TestLog::Model(m) => m.flush_to(lsn),
            TestLog::Real(r) => r.flush_to(lsn).map_err(|e| Box::new(e) as WalError),
        }
    }
    fn durable_lsn(&self) -> Lsn {
        match self {
            TestLog::Model(m) => WalFlush::durable_lsn(m),
            TestLog::Real(r) => WalFlush::durable_lsn(r),
        }
    }
}

pub fn log_config(block: LogBlockSize) -> LogConfig {
    LogConfig {
        block_size: block,
        files: LogFiles::Preallocated {
            file_size: 4 << 20,
            files: 2,
        },
        buffer_size: 256 << 10,
        ..LogConfig::default()
    }
}
pub const NPAGES: u64 = 40;
pub const FRAMES: usize = 12;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageModel {
    pub ty: PageType,
    pub payload: Vec<u8>,
}

impl PageModel {
    fn blank(ty: PageType) -> PageModel {
        PageModel {
            ty,
            payload: vec![0; PS.bytes() - PAGE_HEADER_SIZE - PAGE_TRAILER_SIZE],
        }
    }
}

pub struct Commit {
    pub end: Lsn,
    pub changes: Vec<(u64, Option<PageModel>)>,
}

/// Why a run of steps stopped.
#[derive(Debug)]
pub struct Crashed;

pub struct World {
    pub mode: TornPageProtection,
    pub sim_config: SimConfig,
    pub fs: CrashFs,
    pub log: TestLog,
    /// Real log: its block size.
    pub real_log: Option<LogBlockSize>,
    /// The highest commit LSN whose sync returned Ok (acknowledged).
    pub acked: Lsn,
    pub writer: Arc<PageWriter>,
    pub pool: Arc<BufferPool>,
    pub commits: Vec<Commit>,
    pub current: HashMap<u64, Option<PageModel>>,
    pub cleaner: Option<keel_buffer_pool::PageCleaner>,
}

/// What one recovery did and found.
#[derive(Debug, Default)]
pub struct Recovery {
    pub doublewrite: DoublewriteRecovery,
    pub redo: RedoApplyReport,
    /// None mode: pages reported torn (by recovery or at read), never returned as data.
    pub torn_reported: Vec<PageId>,
    pub durable: Lsn,
    pub checkpoint: Lsn,
    /// Pages that failed verification on disk after the doublewrite restore, before redo.
    pub torn_on_disk: Vec<PageId>,
}

pub fn pool_config() -> PoolConfig {
    PoolConfig {
        page_size: PS,
        pool_bytes: FRAMES * PS.bytes(),
        cleaner_batch_pages: 8,
        cleaner_interval_ms: 1,
        ..PoolConfig::default()
    }
}

pub fn open_world(
    mode: TornPageProtection,
    fs: CrashFs,
    log: TestLog,
) -> (Arc<PageWriter>, Arc<BufferPool>) {
    let cfg = PageWriterConfig::new(PS, mode);
    let writer = Arc::new(
        PageWriter::open(Arc::new(fs), Path::new("/db"), cfg, log).expect("open page writer"),
    );
    let pool = Arc::new(BufferPool::new(pool_config(), writer.clone()).expect("pool"));
    (writer, pool)
}

impl World {
    pub fn new(mode: TornPageProtection, sim_config: SimConfig) -> World {
        World::with_log(mode, sim_config, None)
    }

    /// A world whose log is the real keel-redo-log (with this block size) on the same SimFs.
    pub fn with_log(
        mode: TornPageProtection,
        sim_config: SimConfig,
        real_log: Option<LogBlockSize>,
    ) -> World {
        let fs = CrashFs::new(SimFs::new(sim_config.clone()));
        let log = match real_log {
            None => {
                let m = ModelLog::new();
                let m2 = m.clone();
                fs.trigger.on_crash(move || m2.freeze());
                TestLog::Model(m)
            }
            Some(block) => {
                let (log, rec) = RedoLog::open(
                    Arc::new(fs.clone()),
                    Path::new("/db/log"),
                    log_config(block),
                )
                .expect("open redo log");
                assert!(rec.groups.is_empty());
                TestLog::Real(log)
            }
        };
        let (writer, pool) = open_world(mode, fs.clone(), log.clone());
        World {
            mode,
            sim_config,
            fs,
            log,
            real_log,
            acked: Lsn::ZERO,
            writer,
            pool,
            commits: Vec::new(),
            current: HashMap::new(),
            cleaner: None,
        }
    }

    /// An error from the pool: a crash in progress stops the run, anything else is a bug.
    fn check<T>(&self, r: Result<T, PoolError>, what: &str) -> Result<T, Crashed> {
        match r {
            Ok(v) => Ok(v),
            Err(_) if self.fs.trigger.fired() => Err(Crashed),
            Err(e) => panic!("{what} failed before any crash: {e}"),
        }
    }

    /// Runs the page cleaner thread (every millisecond) beside the steps.
    pub fn start_cleaner(&mut self) {
        self.cleaner = Some(self.pool.start_cleaner().expect("cleaner thread"));
    }

    /// Diagnostics for a page: its commits in the model and the recovered groups touching it.
    pub fn history(&self, id: u64, groups: &[keel_buffer_pool::RecoveredGroup]) -> String {
        let commits: Vec<String> = self
            .commits
            .iter()
            .filter_map(|c| {
                c.changes.iter().find(|(p, _)| *p == id).map(|(_, pm)| {
                    format!("{}{}", c.end.0, if pm.is_none() { "(free)" } else { "" })
                })
            })
            .collect();
        let recs: Vec<String> = groups
            .iter()
            .filter(|g| g.records.iter().any(|r| r.page_id() == Some(PageId(id))))
            .map(|g| {
                let kinds: Vec<&str> = g
                    .records
                    .iter()
                    .filter(|r| r.page_id() == Some(PageId(id)))
                    .map(|r| match r {
                        Record::PageInit { .. } => "init",
                        Record::PageWrite { .. } => "write",
                        Record::PageImage { .. } => "image",
                        Record::PageFree { .. } => "free",
                        Record::PageMove { .. } => "move",
                        Record::PageCopy { .. } => "copy",
                        Record::Logical { .. } => "logical",
                    })
                    .collect();
                format!("{}..{} {:?}", g.start_lsn.0, g.end_lsn.0, kinds)
            })
            .collect();
        format!(
            "model commits of page {id} (end LSNs): {commits:?}; recovered groups touching it: {recs:?}; all recovered groups: {}..{}",
            groups.first().map_or(0, |g| g.start_lsn.0),
            groups.last().map_or(0, |g| g.end_lsn.0)
        )
    }

    /// The model of the pages after every commit ending at or below `lsn`.
    pub fn model_at(&self, lsn: Lsn) -> HashMap<u64, Option<PageModel>> {
        let mut m = HashMap::new();
        for c in self.commits.iter().take_while(|c| c.end <= lsn) {
            for (id, pm) in &c.changes {
                m.insert(*id, pm.clone());
            }
        }
        m
    }

    fn random_writes(
        rng: &mut Rng,
        g: &mut keel_buffer_pool::PageWriteGuard<'_>,
        pm: &mut PageModel,
        n: u64,
    ) -> Result<(), PoolError> {
        let max = PS.bytes() - PAGE_TRAILER_SIZE;
        for _ in 0..n {
            let len = if rng.below(8) == 0 {
                max - PAGE_HEADER_SIZE
            } else {
                1 + rng.below(300) as usize
            };
            let off =
                PAGE_HEADER_SIZE + rng.below((max - PAGE_HEADER_SIZE - len + 1) as u64) as usize;
            let v = rng.next() as u8;
            let bytes: Vec<u8> = (0..len).map(|i| v.wrapping_add(i as u8)).collect();
            g.write(off, &bytes)?;
            pm.payload[off - PAGE_HEADER_SIZE..off - PAGE_HEADER_SIZE + len]
                .copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// One transaction over 1..=3 random pages; commits (and syncs, mostly) or aborts.
    pub fn txn(&mut self, rng: &mut Rng, abort: bool) -> Result<(), Crashed> {
        let pool = self.pool.clone();
        let t = pool.begin();
        let mut changes: HashMap<u64, Option<PageModel>> = HashMap::new();
        let k = 1 + rng.below(3);
        for _ in 0..k {
            let id = rng.below(NPAGES);
            let cur = match changes.get(&id) {
                Some(c) => c.clone(),
                None => self.current.get(&id).cloned().flatten(),
            };
            let res: Result<Option<PageModel>, PoolError> = (|| match cur {
                None => {
                    let mut g = t.new_page(PageId(id), PageType::RAW)?;
                    let mut pm = PageModel::blank(PageType::RAW);
                    let n = rng.below(3);
                    Self::random_writes(rng, &mut g, &mut pm, n)?;
                    Ok(Some(pm))
                }
                Some(mut pm) => {
                    let r = rng.below(10);
                    if r == 9 {
                        t.free_page(PageId(id))?;
                        return Ok(None);
                    }
                    let mut g = t.write(PageId(id))?;
                    if r >= 7 {
                        let ty = if r == 7 {
                            PageType::BTREE_LEAF
                        } else {
                            PageType::RAW
                        };
                        g.init(ty);
                        pm = PageModel::blank(ty);
                    }
                    let n = 1 + rng.below(3);
                    Self::random_writes(rng, &mut g, &mut pm, n)?;
                    Ok(Some(pm))
                }
            })();
            let pm = self.check(res, "txn page op")?;
            changes.insert(id, pm);
        }
        if abort {
            t.abort();
            return Ok(());
        }
        let end = self.check(t.commit(&self.log), "commit")?;
        for (id, pm) in &changes {
            self.current.insert(*id, pm.clone());
        }
        self.commits.push(Commit {
            end,
            changes: changes.into_iter().collect(),
        });
        if rng.below(10) < 7 {
            self.check(self.log.sync(), "log sync")?;
            self.acked = end;
        }
        Ok(())
    }

    /// Reads some pages and checks them against the current model.
    pub fn reads(&mut self, rng: &mut Rng) -> Result<(), Crashed> {
        for _ in 0..1 + rng.below(6) {
            let id = rng.below(NPAGES);
            let Some(Some(pm)) = self.current.get(&id).cloned() else {
                continue;
            };
            let g = self.check(self.pool.read(PageId(id)), "read")?;
            assert_eq!(g.page_type(), pm.ty, "page {id} type before the crash");
            assert!(
                g[PAGE_HEADER_SIZE..PS.bytes() - PAGE_TRAILER_SIZE] == pm.payload[..],
                "page {id} differs from the model before any crash"
            );
        }
        Ok(())
    }

    pub fn checkpoint(&mut self) -> Result<(), Crashed> {
        let t = self.pool.begin_checkpoint(&self.log);
        self.check(self.pool.flush_up_to(t), "checkpoint flush")?;
        let c = self.pool.checkpoint_lsn(&self.log);
        self.check(self.log.checkpoint(c), "log checkpoint")?;
        Ok(())
    }

    /// One random step.
    pub fn step(&mut self, rng: &mut Rng) -> Result<(), Crashed> {
        match rng.below(20) {
            0..=10 => self.txn(rng, false),
            11 => self.txn(rng, true),
            12..=14 => self.reads(rng),
            15 => {
                let to = if rng.below(2) == 0 {
                    Lsn(u64::MAX)
                } else {
                    Lsn(self.log.durable().0.saturating_sub(rng.below(2000)))
                };
                self.check(self.pool.flush_up_to(to), "flush").map(|_| ())
            }
            16 | 17 => self.checkpoint(),
            _ => {
                let ids: Vec<PageId> = (0..rng.below(10))
                    .map(|_| PageId(rng.below(NPAGES)))
                    .collect();
                self.check(self.pool.prefetch(&ids), "prefetch").map(|_| ())
            }
        }
    }

    /// Crashes (if the trigger has not yet), recovers into a new world state, and checks every
    /// page against the model at the recovered LSN. Err(description) if a page is wrong.
    pub fn crash_and_recover(&mut self, policy: Option<CrashPolicy>) -> Result<Recovery, String> {
        if !self.fs.trigger.fired() {
            self.fs.trigger.arm_after(i64::MAX, policy);
        }
        let post = self.fs.trigger.crash_now();
        let with_cleaner = self.cleaner.take().map(|c| c.stop()).is_some();
        let fs2 = CrashFs::new(post);
        let (log2, rec) = match (&self.log, self.real_log) {
            (TestLog::Model(m), _) => {
                let rec = m.recover();
                let log2 = m.reopen();
                let l2 = log2.clone();
                fs2.trigger.on_crash(move || l2.freeze());
                (TestLog::Model(log2), rec)
            }
            (TestLog::Real(_), Some(block)) => {
                let (log2, r) = RedoLog::open(
                    Arc::new(fs2.clone()),
                    Path::new("/db/log"),
                    log_config(block),
                )
                .map_err(|e| format!("reopening the redo log: {e}"))?;
                let durable = r
                    .groups
                    .last()
                    .map_or(r.checkpoint_lsn, |g| g.end_lsn.max(r.checkpoint_lsn));
                let rec = super::modellog::Recovered {
                    checkpoint: r.checkpoint_lsn,
                    groups: r.groups,
                    durable,
                };
                (TestLog::Real(log2), rec)
            }
            (TestLog::Real(_), None) => unreachable!(),
        };
        if rec.durable < self.acked {
            return Err(format!(
                "acknowledged commit at {} lost: the log recovered only up to {}",
                self.acked, rec.durable
            ));
        }
        let (writer, pool) = open_world(self.mode, fs2.clone(), log2.clone());
        let doublewrite = writer
            .recover_doublewrite()
            .map_err(|e| format!("doublewrite recovery: {e}"))?;
        let mut out = Recovery {
            doublewrite,
            durable: rec.durable,
            checkpoint: rec.checkpoint,
            ..Default::default()
        };
        let mut buf = vec![0u8; PS.bytes()];
        for id in 0..NPAGES {
            if let Err(keel_flush::FlushError::Corruption(_)) =
                writer.read_page(PageId(id), &mut buf)
            {
                out.torn_on_disk.push(PageId(id));
            }
        }
        let none_mode = self.mode == TornPageProtection::None;
        match pool.apply_redo(rec.checkpoint, &rec.groups) {
            Ok(r) => out.redo = r,
            Err(PoolError::Unrecoverable { page_id, .. }) if none_mode => {
                // Reported, never used: check that the disk copy really is unusable.
                let mut buf = vec![0u8; PS.bytes()];
                let r = writer.read_page(page_id, &mut buf);
                if !matches!(
                    r,
                    Err(keel_flush::FlushError::Corruption(_))
                        | Ok(keel_page::PageState::Unwritten)
                ) {
                    return Err(format!(
                        "recovery called {page_id} unrecoverable but it reads as {r:?}"
                    ));
                }
                out.torn_reported.push(page_id);
                return Ok(out);
            }
            Err(e) => return Err(format!("redo application: {e}")),
        }
        let expected = self.model_at(rec.durable);
        for id in 0..NPAGES {
            let r = pool.read(PageId(id));
            match (expected.get(&id), r) {
                (Some(Some(pm)), Ok(g)) => {
                    if g.page_type() != pm.ty
                        || g[PAGE_HEADER_SIZE..PS.bytes() - PAGE_TRAILER_SIZE] != pm.payload[..]
                    {
                        return Err(format!(
                            "page {id} differs from the model at {} (page LSN {}, checkpoint {}); {}",
                            rec.durable,
                            g.lsn(),
                            rec.checkpoint,
                            self.history(id, &rec.groups)
                        ));
                    }
                    if g.lsn() > rec.durable {
                        return Err(format!("page {id} has {} beyond the durable log {}", g.lsn(), rec.durable));
                    }
                }
                (Some(Some(_)), Err(PoolError::Corruption(_))) if none_mode => {
                    out.torn_reported.push(PageId(id));
                }
                (Some(Some(_)), Err(e)) => return Err(format!("page {id}: {e}")),
                (Some(None), _) => {} // freed: its disk copy is stale by design
                (None, Err(PoolError::Unwritten { .. })) => {}
                (None, Ok(g)) => {
                    return Err(format!(
                        "page {id} (LSN {}) is on disk but no durable commit created it (log durable to {})",
                        g.lsn(),
                        rec.durable
                    ))
                }
                (None, Err(e)) => return Err(format!("page {id} (never durably created): {e}")),
            }
        }
        // Continue from the recovered state.
        self.commits.retain(|c| c.end <= rec.durable);
        self.acked = Lsn::ZERO;
        self.current = expected;
        self.fs = fs2;
        self.log = log2;
        self.writer = writer;
        self.pool = pool;
        if with_cleaner {
            self.start_cleaner();
        }
        Ok(out)
    }
}

/// One crash case: `steps` random steps with a crash armed at the `crash_at`-th I/O call, then
/// recovery and checks; twice (the second epoch starts from the recovered state).
pub fn run_case(
    mode: TornPageProtection,
    sim_config: SimConfig,
    seed: u64,
    steps: usize,
    crash_at: i64,
) -> Result<Vec<Recovery>, String> {
    run_case_with(mode, sim_config, seed, steps, crash_at, false, None)
}

/// [`run_case`], optionally with the page cleaner thread running (then the interleaving, and so
/// the outcome of a given seed, is not deterministic; every outcome must still check).
pub fn run_case_with(
    mode: TornPageProtection,
    sim_config: SimConfig,
    seed: u64,
    steps: usize,
    crash_at: i64,
    cleaner: bool,
    real_log: Option<LogBlockSize>,
) -> Result<Vec<Recovery>, String> {
    let mut rng = Rng(seed);
    let mut w = World::with_log(mode, sim_config, real_log);
    if cleaner {
        w.start_cleaner();
    }
    let mut out = Vec::new();
    for _epoch in 0..2 {
        let policy = if rng.below(2) == 0 {
            None
        } else {
            Some(CrashPolicy::random(1, 1, 2))
        };
        w.fs.trigger
            .arm_after(crash_at + rng.below(50) as i64, policy);
        for _ in 0..steps {
            if w.step(&mut rng).is_err() {
                break;
            }
        }
        let r = w.crash_and_recover(policy)?;
        let stop = !r.torn_reported.is_empty();
        out.push(r);
        if stop {
            break;
        }
    }
    Ok(out)
}
