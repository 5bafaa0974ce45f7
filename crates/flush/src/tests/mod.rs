//! Tests of keel-flush, with the tools they share: a fake redo log and a file-system wrapper that
//! record the order of events, checkers for docs/design.md invariants 1 and 2 over those events, a
//! deterministic PRNG and page builders.

mod area;
mod basic;
mod crash;
mod order;
mod realfs;
mod redo;

use crate::error::WalError;
use crate::WalFlush;
use keel_io::{
    AtomicWriteLimits, Capabilities, File, FileClass, FileSystem, IoCounters, IoError, OpenOptions,
    ReadOp, WriteOp,
};
use keel_page::{Lsn, PageHeader, PageId, PageSize, PageType, PAGE_HEADER_SIZE};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// SplitMix64 (deterministic, local; the workspace does not use `rand`).
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// An unsealed page: header (id, RAW, lsn) and a payload that encodes `(id, version)`, so a page
/// read back can be checked to be exactly one version that was written.
pub(crate) fn make_page(ps: PageSize, id: u64, lsn: u64, version: u64) -> Vec<u8> {
    let mut p = vec![0u8; ps.bytes()];
    PageHeader::init(&mut p, PageId(id), PageType::RAW, Lsn(lsn));
    p[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + 8].copy_from_slice(&version.to_le_bytes());
    let mut r = Rng::new(id.wrapping_mul(1_000_003) ^ version);
    for chunk in p[PAGE_HEADER_SIZE + 8..ps.bytes() - 8].chunks_mut(8) {
        let v = r.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    p
}

/// Writes version `v` of pages `ids` (page size `ps`) at LSN `lsn` (+ index) in one
/// `write_pages` call.
pub(crate) fn write_versions(
    w: &crate::PageWriter,
    ps: PageSize,
    ids: &[u64],
    lsn: u64,
    v: u64,
    rebuildable: bool,
) -> crate::Result<()> {
    let imgs: Vec<Vec<u8>> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| make_page(ps, id, lsn + i as u64, v))
        .collect();
    let pages: Vec<crate::FlushPage<'_>> = ids
        .iter()
        .zip(&imgs)
        .enumerate()
        .map(|(i, (&id, img))| crate::FlushPage {
            page_id: PageId(id),
            image: img,
            lsn: Lsn(lsn + i as u64),
            rebuildable_from_redo: rebuildable,
        })
        .collect();
    w.write_pages(&pages)
}

/// The version a verified page holds, if its payload is exactly what [`make_page`] wrote for it.
pub(crate) fn version_of(page: &[u8], id: u64) -> Option<u64> {
    let mut v = [0u8; 8];
    v.copy_from_slice(&page[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + 8]);
    let version = u64::from_le_bytes(v);
    let h = PageHeader::read(page)?;
    let expect = make_page(PageSize::from_bytes(page.len())?, id, h.lsn.0, version);
    (page[PAGE_HEADER_SIZE..page.len() - 8] == expect[PAGE_HEADER_SIZE..page.len() - 8])
        .then_some(version)
}

/// Something that happened, in order.
#[derive(Clone, Debug)]
pub(crate) enum Event {
    /// The writer asked the log to flush up to `to`.
    LogFlush { to: Lsn },
    /// A write (each op of a batch is one event), with the log's durable LSN at that moment.
    Write {
        class: FileClass,
        offset: u64,
        bytes: Vec<u8>,
        durable: Lsn,
        /// An RWF_ATOMIC write.
        atomic: bool,
    },
    /// A file sync that succeeded.
    Sync { class: FileClass },
}

/// The state a [`FakeLog`] and a [`RecFs`] share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub events: Mutex<Vec<Event>>,
    pub durable: AtomicU64,
    /// `flush_to` returns Ok without making anything durable.
    pub lie: AtomicBool,
    /// `flush_to` fails.
    pub fail: AtomicBool,
    /// Write/sync operations left before the simulated machine stops (negative: unlimited).
    pub budget: AtomicI64,
    /// Fail the next sync of this class.
    pub fail_sync: Mutex<Option<FileClass>>,
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        let s = Shared::default();
        s.budget.store(-1, Ordering::SeqCst);
        Arc::new(s)
    }

    /// A log already durable up to `lsn` (a reopened store's log).
    pub fn durable_to(lsn: Lsn) -> Arc<Shared> {
        let s = Shared::new();
        s.durable.store(lsn.0, Ordering::SeqCst);
        s
    }

    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock())
    }

    /// Allows `n` more write/sync operations, then every later one fails as if the machine had
    /// crashed.
    pub fn crash_after(&self, n: i64) {
        self.budget.store(n, Ordering::SeqCst);
    }

    fn spend(&self, path: &Path) -> keel_io::Result<()> {
        let left = self.budget.load(Ordering::SeqCst);
        if left < 0 {
            return Ok(());
        }
        if left == 0 {
            return Err(IoError::Crashed {
                path: path.to_path_buf(),
            });
        }
        self.budget.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

/// A redo log that only records `flush_to` calls.
#[derive(Clone, Debug)]
pub(crate) struct FakeLog(pub Arc<Shared>);

impl WalFlush for FakeLog {
    fn flush_to(&self, lsn: Lsn) -> Result<(), WalError> {
        if self.0.fail.load(Ordering::SeqCst) {
            return Err(format!("fake log refuses to flush to {lsn}").into());
        }
        self.0.events.lock().push(Event::LogFlush { to: lsn });
        if !self.0.lie.load(Ordering::SeqCst) {
            self.0.durable.fetch_max(lsn.0, Ordering::SeqCst);
        }
        Ok(())
    }

    fn durable_lsn(&self) -> Lsn {
        Lsn(self.0.durable.load(Ordering::SeqCst))
    }
}

/// A file system that records every write and sync of its files as [`Event`]s, can stop after a
/// budget of operations (a crash point) and can fail a sync.
#[derive(Debug)]
pub(crate) struct RecFs {
    pub inner: Arc<dyn FileSystem>,
    pub shared: Arc<Shared>,
    /// Capabilities to report instead of the inner file system's (None: ask it).
    pub caps: Option<Capabilities>,
}

impl RecFs {
    pub fn new(inner: Arc<dyn FileSystem>, shared: Arc<Shared>) -> Arc<RecFs> {
        Arc::new(RecFs {
            inner,
            shared,
            caps: None,
        })
    }
}

#[derive(Debug)]
struct RecFile {
    inner: Arc<dyn File>,
    shared: Arc<Shared>,
}

impl RecFile {
    fn record_write(&self, offset: u64, buf: &[u8], atomic: bool) {
        let durable = Lsn(self.shared.durable.load(Ordering::SeqCst));
        self.shared.events.lock().push(Event::Write {
            class: self.inner.class(),
            offset,
            bytes: buf.to_vec(),
            durable,
            atomic,
        });
    }

    fn sync_with(&self, f: impl FnOnce() -> keel_io::Result<()>) -> keel_io::Result<()> {
        self.shared.spend(self.path())?;
        let fail = {
            let mut fs = self.shared.fail_sync.lock();
            if *fs == Some(self.inner.class()) {
                *fs = None;
                true
            } else {
                false
            }
        };
        if fail {
            return Err(IoError::SyncFailed {
                path: self.path().to_path_buf(),
                source: std::io::Error::from_raw_os_error(libc_eio()),
            });
        }
        f()?;
        self.shared.events.lock().push(Event::Sync {
            class: self.inner.class(),
        });
        Ok(())
    }
}

fn libc_eio() -> i32 {
    5
}

impl File for RecFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn class(&self) -> FileClass {
        self.inner.class()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> keel_io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> keel_io::Result<()> {
        self.shared.spend(self.path())?;
        self.inner.write_all_at(buf, offset)?;
        self.record_write(offset, buf, false);
        Ok(())
    }
    fn write_batch(&self, writes: &[WriteOp<'_>]) -> keel_io::Result<()> {
        for w in writes {
            self.write_all_at(w.buf, w.offset)?;
        }
        Ok(())
    }
    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> keel_io::Result<()> {
        self.inner.read_batch(reads)
    }
    fn write_atomic(&self, buf: &[u8], offset: u64) -> keel_io::Result<()> {
        self.shared.spend(self.path())?;
        self.inner.write_atomic(buf, offset)?;
        self.record_write(offset, buf, true);
        Ok(())
    }
    fn write_atomic_batch(&self, writes: &[WriteOp<'_>]) -> keel_io::Result<()> {
        for w in writes {
            self.write_atomic(w.buf, w.offset)?;
        }
        Ok(())
    }
    fn sync_all(&self) -> keel_io::Result<()> {
        self.sync_with(|| self.inner.sync_all())
    }
    fn sync_data(&self) -> keel_io::Result<()> {
        self.sync_with(|| self.inner.sync_data())
    }
    fn allocate(&self, offset: u64, len: u64) -> keel_io::Result<()> {
        self.inner.allocate(offset, len)
    }
    fn set_len(&self, len: u64) -> keel_io::Result<()> {
        self.shared.spend(self.path())?;
        self.inner.set_len(len)
    }
    fn len(&self) -> keel_io::Result<u64> {
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

impl FileSystem for RecFs {
    fn open(&self, path: &Path, options: &OpenOptions) -> keel_io::Result<Arc<dyn File>> {
        Ok(Arc::new(RecFile {
            inner: self.inner.open(path, options)?,
            shared: self.shared.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> keel_io::Result<bool> {
        self.inner.exists(path)
    }
    fn create_dir_all(&self, path: &Path) -> keel_io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, dir: &Path) -> keel_io::Result<Vec<PathBuf>> {
        self.inner.list_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> keel_io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> keel_io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> keel_io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn capabilities(&self, path: &Path) -> keel_io::Result<Capabilities> {
        match &self.caps {
            Some(c) => Ok(c.clone()),
            None => self.inner.capabilities(path),
        }
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

/// The pages (id, LSN) a recorded write carries: each page-size chunk of a data write; the
/// images of a doublewrite slot write.
pub(crate) fn pages_in_write(class: FileClass, bytes: &[u8], ps: usize) -> Vec<(PageId, Lsn)> {
    let header = |chunk: &[u8]| {
        if chunk.iter().all(|&b| b == 0) {
            None
        } else {
            PageHeader::read(chunk).map(|h| (h.page_id, h.lsn))
        }
    };
    match class {
        FileClass::Data => bytes.chunks(ps).filter_map(header).collect(),
        FileClass::Doublewrite if bytes.starts_with(b"KEELDWSL") => {
            let dir_len = u32::from_le_bytes([bytes[28], bytes[29], bytes[30], bytes[31]]) as usize;
            bytes
                .get(dir_len..)
                .unwrap_or(&[])
                .chunks(ps)
                .filter_map(header)
                .collect()
        }
        _ => Vec::new(),
    }
}

/// docs/design.md invariant 1 over recorded events: every page in every data or doublewrite write
/// has an LSN at most the log's durable LSN at that moment.
pub(crate) fn wal_violations(events: &[Event], ps: usize) -> Vec<String> {
    let mut out = Vec::new();
    for e in events {
        if let Event::Write {
            class,
            offset,
            bytes,
            durable,
            ..
        } = e
        {
            for (id, lsn) in pages_in_write(*class, bytes, ps) {
                if lsn > *durable {
                    out.push(format!(
                        "{class:?} write at {offset}: {id} with {lsn} while the log was durable only to {durable}"
                    ));
                }
            }
        }
    }
    out
}

/// docs/design.md invariant 2 over recorded events: (a) a page that is in a doublewrite slot is
/// written in place only after the area was synced following that slot write; (b) a slot is
/// written again only after every page of its previous batch was written in place and the data
/// file synced afterwards.
pub(crate) fn doublewrite_violations(events: &[Event], ps: usize) -> Vec<String> {
    struct Batch {
        offset: u64,
        pages: Vec<(PageId, Lsn)>,
        area_synced: bool,
        written: HashSet<(PageId, Lsn)>,
        durable: HashSet<(PageId, Lsn)>,
    }
    let mut out = Vec::new();
    let mut batches: Vec<Batch> = Vec::new();
    let mut slot_current: HashMap<u64, usize> = HashMap::new();
    for e in events {
        match e {
            Event::Write {
                class: FileClass::Doublewrite,
                offset,
                bytes,
                ..
            } if bytes.starts_with(b"KEELDWSL") => {
                if let Some(&prev) = slot_current.get(offset) {
                    let b = &batches[prev];
                    let missing: Vec<_> =
                        b.pages.iter().filter(|p| !b.durable.contains(p)).collect();
                    if !missing.is_empty() {
                        out.push(format!(
                            "slot at offset {} reused while pages of its previous batch were not durable in place: {missing:?}",
                            b.offset
                        ));
                    }
                }
                batches.push(Batch {
                    offset: *offset,
                    pages: pages_in_write(FileClass::Doublewrite, bytes, ps),
                    area_synced: false,
                    written: HashSet::new(),
                    durable: HashSet::new(),
                });
                slot_current.insert(*offset, batches.len() - 1);
            }
            Event::Sync {
                class: FileClass::Doublewrite,
            } => batches.iter_mut().for_each(|b| b.area_synced = true),
            Event::Write {
                class: FileClass::Data,
                offset,
                bytes,
                ..
            } => {
                for p in pages_in_write(FileClass::Data, bytes, ps) {
                    if let Some(b) = batches.iter_mut().rev().find(|b| b.pages.contains(&p)) {
                        if !b.area_synced {
                            out.push(format!(
                                "{} ({}) written in place at {offset} before its doublewrite copy was synced",
                                p.0, p.1
                            ));
                        }
                        b.written.insert(p);
                    }
                }
            }
            Event::Sync {
                class: FileClass::Data,
            } => {
                for b in &mut batches {
                    let w: Vec<_> = b.written.iter().copied().collect();
                    b.durable.extend(w);
                }
            }
            _ => {}
        }
    }
    out
}
