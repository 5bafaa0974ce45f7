//! [`PageWriter`]: the WAL rule, sealing and handing groups to the torn-page protection scheme.
//! The read path is in `page_writer/read.rs`, doublewrite recovery in
//! `page_writer/recovery.rs`; the schemes themselves in `scheme.rs`, the area in `area.rs`.
//!
//! Contract of [`PageWriter::write_pages`]: it returns when every page is durable — in place, or
//! in a synced doublewrite slot that is not reused before the data file is synced (recovery
//! restores it from there). In doublewrite mode the data file is therefore synced only when a
//! slot must be reused, when a group holds pages that skipped the doublewrite, by
//! [`PageWriter::sync_data`], and by recovery, which syncs it before any slot can be overwritten
//! (a previous run may have stopped with pending slots and unsynced in-place writes).

use crate::area::{Candidate, DoublewriteArea, Geometry, DOUBLEWRITE_SLOTS, MAX_BATCH_PAGES};
use crate::config::{
    resolve, resolve_direct_io, DirectIo, PageWriterConfig, ResolvedMode, ResolvedProtection,
};
use crate::error::{FlushError, Result};
use crate::scheme::{self, Ctx, Group, GroupPage, Knobs, Poison, ProtectionScheme};
use crate::stats::{add, Counters, FlushStats};
use crate::wal::WalFlush;
use keel_io::{AlignedBuf, File, FileClass, FileSystem, IoError, OpenOptions, ReadOp, WriteOp};
use keel_page::{
    file_checkpoint, seal, set_file_checkpoint, verify, Lsn, PageHeader, PageId, PageSize,
    PageState,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

mod read;
mod recovery;

pub use recovery::{DoublewriteInspection, DoublewriteRecovery, RestoredPage};

/// File name of the data file inside the writer's directory.
pub const DATA_FILE_NAME: &str = "data.keel";
/// File name of the doublewrite area inside the writer's directory.
pub const DOUBLEWRITE_FILE_NAME: &str = "doublewrite.keel";

/// Group buffers the writer keeps for reuse (one per concurrent `write_pages` caller is typical:
/// the page cleaner and a user thread).
const SPARE_BUFFERS: usize = 2;
/// The largest group buffer kept for reuse (a doublewrite batch of 128 × 16 KiB pages is 2 MiB
/// + 8 KiB).
const SPARE_BUFFER_MAX: usize = 16 << 20;

/// One page handed to the writer.
#[derive(Clone, Copy, Debug)]
pub struct FlushPage<'a> {
    /// The page (its position in the data file).
    pub page_id: PageId,
    /// The in-memory page: exactly one page of bytes whose header already holds this page id,
    /// the page type and the page LSN. The writer seals (checksum + trailer) its own copy.
    pub image: &'a [u8],
    /// The page's newest modification (must equal the LSN in its header).
    pub lsn: Lsn,
    /// The page's redo since the last checkpoint begins with a whole-page init (or it was freshly
    /// allocated after it): redo alone can rebuild it, so it may skip the doublewrite, the atomic
    /// write or the full page image (MariaDB MDEV-19738).
    pub rebuildable_from_redo: bool,
}

/// The page writer: owns the data file and the doublewrite area, writes batches of dirty pages
/// durably through the configured torn-page protection, reads and verifies pages, and repairs
/// torn pages from the doublewrite area at recovery. `Send + Sync`.
pub struct PageWriter {
    config: PageWriterConfig,
    resolved: ResolvedProtection,
    direct_io: DirectIo,
    data: Arc<dyn File>,
    area: Option<Arc<DoublewriteArea>>,
    scheme: Box<dyn ProtectionScheme>,
    log: Box<dyn WalFlush>,
    counters: Counters,
    poison: Poison,
    recovery: Mutex<()>,
    /// Group buffers kept for the next batches (see [`PageWriter::take_buffer`]).
    spare: Mutex<Vec<AlignedBuf>>,
    knobs: Knobs,
    /// Read-only recovery ([`PageWriter::recover_doublewrite_in_memory`]): the doublewrite
    /// images recovery would restore, served to reads in place of their torn or older home
    /// pages. Empty (and never consulted beyond one atomic load) otherwise.
    overlay: Overlay,
    /// The data file's checkpoint record on page 0; its lock also serialises every write of
    /// page 0 (see [`PageWriter::stamp_checkpoint`]).
    file_ckpt: Mutex<FileCheckpoint>,
    /// Pages written in place that no data sync has covered yet, checked on every read
    /// (module `unsynced`).
    unsynced: crate::unsynced::Unsynced,
    /// The log's checkpoint LSN the doublewrite recovery was given
    /// ([`PageWriter::recover_doublewrite_in_memory`]; 0 until then): an area image at or below
    /// it never repairs a page (module `page_writer::recovery`).
    dw_checkpoint: std::sync::atomic::AtomicU64,
}

/// What the writer knows of the file checkpoint LSN recorded on page 0
/// ([`keel_page::set_file_checkpoint`]).
#[derive(Default)]
struct FileCheckpoint {
    /// Set by [`PageWriter::set_file_checkpoint_floor`]: until then page 0 is written as given.
    known: bool,
    /// The LSN every write of page 0 records: never below what page 0 on disk records, never
    /// above the durable log.
    value: Lsn,
    /// The LSN the last [`PageWriter::stamp_checkpoint`] made durable.
    durable: Lsn,
}

/// Pages served from memory instead of the data file.
#[derive(Default)]
pub(crate) struct Overlay {
    any: std::sync::atomic::AtomicBool,
    pages: parking_lot::RwLock<BTreeMap<PageId, Vec<u8>>>,
}

impl Overlay {
    /// The overlaid image of `id`, copied into `buf`; false when there is none.
    pub(crate) fn read(&self, id: PageId, buf: &mut [u8]) -> bool {
        if !self.any.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        match self.pages.read().get(&id) {
            Some(img) if img.len() == buf.len() => {
                buf.copy_from_slice(img);
                true
            }
            _ => false,
        }
    }

    /// Whether `id` is overlaid.
    pub(crate) fn holds(&self, id: PageId) -> bool {
        self.any.load(std::sync::atomic::Ordering::Acquire) && self.pages.read().contains_key(&id)
    }

    fn install(&self, pages: BTreeMap<PageId, Vec<u8>>) {
        let any = !pages.is_empty();
        *self.pages.write() = pages;
        self.any.store(any, std::sync::atomic::Ordering::Release);
    }
}

impl std::fmt::Debug for PageWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageWriter")
            .field("data", &self.data.path())
            .field("resolved", &self.resolved)
            .field("poisoned", &self.poison.is_set())
            .finish()
    }
}

impl PageWriter {
    /// Opens (creating if needed) the data file `dir/data.keel` and, in doublewrite mode, the
    /// doublewrite area `dir/doublewrite.keel`, resolving `Auto` (and checking `Atomic`) with
    /// [`FileSystem::capabilities`]. In other modes an existing area is kept only to recover from
    /// it (and emptied afterwards). `log` is the redo log (any [`WalFlush`]).
    ///
    /// Errors: [`FlushError::AtomicUnavailable`] for `Atomic` where the probe says pages of this
    /// size cannot be atomic; [`FlushError::Config`] for a batch size of 0 or above 4096.
    pub fn open<L: WalFlush + 'static>(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        config: PageWriterConfig,
        log: L,
    ) -> Result<PageWriter> {
        if let crate::TornPageProtection::Doublewrite { batch_pages } = config.protection {
            if batch_pages == 0 || batch_pages > MAX_BATCH_PAGES {
                return Err(FlushError::Config(format!(
                    "doublewrite batch of {batch_pages} pages; it must be 1..={MAX_BATCH_PAGES}"
                )));
            }
        }
        fs.create_dir_all(dir)?;
        let caps = match fs.capabilities(dir) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "file-system probe failed");
                None
            }
        };
        let filesystem = caps
            .as_ref()
            .map_or_else(|| "unknown".to_string(), |c| c.filesystem.clone());
        let mut resolved =
            resolve(config.protection, config.page_size, caps.as_ref()).map_err(|found| {
                FlushError::AtomicUnavailable {
                    path: dir.to_path_buf(),
                    filesystem: filesystem.clone(),
                    page_size: config.page_size,
                    found,
                }
            })?;
        let mut direct_io = resolve_direct_io(config.direct_io, config.page_size, caps.as_ref());
        let direct = direct_io.in_force;
        let data_path = dir.join(DATA_FILE_NAME);
        let data_options = |direct: bool| {
            OpenOptions::new(FileClass::Data)
                .create(true)
                .direct(direct)
        };
        let mut data = fs.open(
            &data_path,
            &data_options(direct || resolved.mode == ResolvedMode::Atomic),
        )?;
        if resolved.mode == ResolvedMode::Atomic {
            // The file system's probe said yes; the data file itself must agree.
            let limits = data.atomic_write_limits();
            if let Err(found) = limits.check(0, config.page_size.bytes()) {
                let found =
                    format!("the data file opened with O_DIRECT reports {limits:?}: {found}");
                if config.protection != crate::TornPageProtection::Auto {
                    return Err(FlushError::AtomicUnavailable {
                        path: data_path,
                        filesystem,
                        page_size: config.page_size,
                        found,
                    });
                }
                resolved = ResolvedProtection {
                    requested: config.protection,
                    mode: ResolvedMode::Doublewrite {
                        batch_pages: crate::DEFAULT_BATCH_PAGES,
                    },
                    reason: format!("auto: the probe said atomic writes are possible, but {found}"),
                };
                drop(data);
                data = fs.open(&data_path, &data_options(direct))?;
            }
        }
        if resolved.mode == ResolvedMode::Atomic && !direct_io.in_force {
            // What is in force, not what was asked: RWF_ATOMIC needs O_DIRECT.
            direct_io = DirectIo {
                in_force: true,
                reason: format!(
                    "O_DIRECT, which atomic writes need, whatever direct_io says (it alone \
                     would have been: {})",
                    direct_io.reason
                ),
            };
        }
        // Recovery reads what the device holds, not what a failed sync left in the page cache
        // (keel_io::File::drop_cache; test `keel/tests/io_faults.rs`, same-boot reopens).
        data.drop_cache()?;
        let area_path = dir.join(DOUBLEWRITE_FILE_NAME);
        let area_options = OpenOptions::new(FileClass::Doublewrite).direct(direct);
        // The area as the device holds it (its cached pages dropped, as the data file's), where
        // the store has one.
        let existing_area = |g: Option<Geometry>| -> Result<Option<DoublewriteArea>> {
            if !fs.exists(&area_path)? {
                return Ok(None);
            }
            let file = fs.open(&area_path, &area_options)?;
            file.drop_cache()?;
            Ok(Some(DoublewriteArea::open(file, g, config.store)?))
        };
        let (area, scheme): (Option<Arc<DoublewriteArea>>, Box<dyn ProtectionScheme>) =
            match resolved.mode {
                ResolvedMode::Doublewrite { batch_pages } => {
                    let g = Geometry {
                        page_size: config.page_size.bytes(),
                        capacity: batch_pages,
                        slots: DOUBLEWRITE_SLOTS,
                    };
                    // A missing area is created when it is first formatted (after the
                    // store's open checks): a refused open adds no file.
                    let area = Arc::new(match existing_area(Some(g))? {
                        Some(area) => area,
                        None => DoublewriteArea::open_missing(
                            fs.clone(),
                            area_path.clone(),
                            area_options,
                            Some(g),
                            config.store,
                        )?,
                    });
                    let scheme = scheme::Doublewrite {
                        area: area.clone(),
                        checksum: config.checksum,
                        batch_pages,
                        dir_len: g.dir_len(),
                    };
                    (Some(area), Box::new(scheme))
                }
                mode => {
                    let area = existing_area(None)?.map(Arc::new);
                    let scheme: Box<dyn ProtectionScheme> = match mode {
                        ResolvedMode::Atomic => Box::new(scheme::Atomic),
                        ResolvedMode::FullPageWrites => Box::new(scheme::InPlace {
                            full_page_writes: true,
                        }),
                        _ => Box::new(scheme::InPlace {
                            full_page_writes: false,
                        }),
                    };
                    (area, scheme)
                }
            };
        debug_assert_eq!(scheme.mode(), resolved.mode);
        tracing::info!(
            dir = %dir.display(),
            mode = %resolved.mode,
            reason = %resolved.reason,
            direct_io = %direct_io.reason,
            "page writer opened"
        );
        Ok(PageWriter {
            config,
            resolved,
            direct_io,
            data,
            area,
            scheme,
            log: Box::new(log),
            counters: Counters::default(),
            poison: Poison::default(),
            recovery: Mutex::new(()),
            spare: Mutex::new(Vec::new()),
            knobs: Knobs::default(),
            overlay: Overlay::default(),
            file_ckpt: Mutex::new(FileCheckpoint::default()),
            unsynced: crate::unsynced::Unsynced::default(),
            dw_checkpoint: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// What the configured protection resolved to, and why.
    pub fn resolved(&self) -> &ResolvedProtection {
        &self.resolved
    }

    /// Whether the data file and the doublewrite area use O_DIRECT, and why (the request in
    /// [`PageWriterConfig::direct_io`] resolved against the file system's probe).
    pub fn direct_io(&self) -> &DirectIo {
        &self.direct_io
    }

    /// The configuration the writer was opened with.
    pub fn config(&self) -> &PageWriterConfig {
        &self.config
    }

    /// The page size.
    pub fn page_size(&self) -> PageSize {
        self.config.page_size
    }

    /// The data file's path.
    pub fn data_path(&self) -> &Path {
        self.data.path()
    }

    /// The doublewrite area's path, if the writer has one open.
    pub fn doublewrite_path(&self) -> Option<&Path> {
        self.area.as_deref().map(|a| a.path())
    }

    /// Whole pages the data file holds now (pages at or beyond this read as unwritten).
    pub fn data_pages(&self) -> Result<u64> {
        Ok(self.data.len()? / self.config.page_size.bytes() as u64)
    }

    /// Whether a failed sync (or in-place write) has poisoned the writer.
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_set()
    }

    /// What poisoned the writer (the first failure), if it is poisoned.
    pub fn poison_cause(&self) -> Option<keel_io::PoisonCause> {
        self.poison.cause().cloned()
    }

    /// A copy of the counters.
    pub fn stats(&self) -> FlushStats {
        self.counters.snapshot()
    }

    /// Whether every page write either completes whole or is repaired from this writer's own
    /// copy at recovery (doublewrite, atomic writes): then a torn write never leaves a page that
    /// only redo could rebuild. Full-page-writes and no-protection modes: false.
    pub fn never_leaves_torn_pages(&self) -> bool {
        matches!(
            self.resolved.mode,
            ResolvedMode::Doublewrite { .. } | ResolvedMode::Atomic
        )
    }

    /// Makes the redo log durable up to at least `lsn` (what a batch of pages at that LSN would
    /// force first, by the WAL rule).
    ///
    /// # Errors
    ///
    /// [`FlushError::Wal`] if the log cannot be made durable; [`FlushError::WalRule`] if it
    /// claims success but is not durable there.
    pub fn flush_log_to(&self, lsn: Lsn) -> Result<()> {
        self.poison.check()?;
        self.log_durable_to(lsn, PageId(0))
    }

    /// Full-page-writes mode: must the first change of a page after a checkpoint log an image?
    pub fn wants_full_page_images(&self) -> bool {
        self.scheme.wants_full_page_images()
    }

    /// Whether the buffer pool must log a full page image for a page's first change after a
    /// checkpoint: in full-page-writes mode, unless the page is rebuildable from redo and the
    /// init-on-flush skip is on (then the skip is counted in `pages_skipped_protection`).
    pub fn should_log_full_page_image(&self, rebuildable_from_redo: bool) -> bool {
        if !self.wants_full_page_images() {
            return false;
        }
        if rebuildable_from_redo && self.config.init_on_flush_skip {
            add(&self.counters.pages_skipped_protection, 1);
            return false;
        }
        true
    }

    /// Counts one full page image of `bytes` the buffer pool logged.
    pub fn count_full_page_image(&self, bytes: usize) {
        add(&self.counters.full_page_images, 1);
        add(&self.counters.full_page_image_bytes, bytes as u64);
    }

    /// Writes a batch of pages durably through the protection scheme; returns when every page is
    /// durable — in place, or in a synced doublewrite slot that is not reused before the data
    /// file is synced (so recovery, [`PageWriter::recover_doublewrite`], restores it after a
    /// crash).
    ///
    /// 1. Checks every page (one page of bytes, header page id and LSN as given, no page twice).
    /// 2. WAL rule: if the log is not durable up to the batch's newest page LSN, calls
    ///    `flush_to` (counted in `forced_log_flushes`), then checks `durable_lsn()` — before any
    ///    page byte is written anywhere.
    /// 3. If the doublewrite area has not been recovered yet, recovers it first (its images must
    ///    not be overwritten before they were applied).
    /// 4. Seals each page (checksum + trailer) into an aligned copy and writes through the
    ///    scheme: Doublewrite copies up to `batch_pages` protected pages into a slot, syncs the
    ///    area, writes them (and the skipped ones) in place and marks the slot *pending*; the
    ///    data file is synced only when a batch needs a slot and none is free (that sync frees
    ///    every slot that was pending before it started), when the group holds pages that skipped
    ///    the doublewrite (they have no copy), or by [`PageWriter::sync_data`] — InnoDB's rule
    ///    "a slot is reused only after the in-place writes of its batch are durable" read
    ///    literally (MariaDB's `innodb_doublewrite=fast` is the same idea). Atomic writes each
    ///    protected page with RWF_ATOMIC and syncs; FullPageWrites and None write in place and
    ///    sync. Pages with `rebuildable_from_redo` skip the doublewrite / atomic write when the
    ///    skip is on.
    ///
    /// Callers must not pass the same page to two concurrent calls.
    pub fn write_pages(&self, pages: &[FlushPage<'_>]) -> Result<()> {
        self.poison.check()?;
        if pages.is_empty() {
            return Ok(());
        }
        let ps = self.config.page_size.bytes();
        let mut seen = HashSet::with_capacity(pages.len());
        let mut newest = &pages[0];
        for p in pages {
            self.check_page(p)?;
            if !seen.insert(p.page_id) {
                return Err(FlushError::BadPage {
                    page_id: p.page_id,
                    reason: "the page appears twice in one batch".into(),
                });
            }
            if p.lsn > newest.lsn {
                newest = p;
            }
        }
        self.enforce_wal(newest)?;
        self.ensure_recovered()?;
        // Page 0 carries the file checkpoint: its writes are serialised with the stamp's.
        let page0 = pages
            .iter()
            .any(|p| p.page_id == PageId(0))
            .then(|| self.file_ckpt.lock());
        let stamp = page0.as_ref().filter(|f| f.known).map(|f| f.value);

        // A page skips the protection only where a torn write of it is detected: without a page
        // checksum a page torn between its first and last sector passes every check, and a
        // pending page copy's disk copy is read by recovery (found by the crash matrix once it
        // ran without checksums: a torn copy written plainly in atomic mode was kept).
        let skip = self.config.init_on_flush_skip
            && self.scheme.protects()
            && self.config.checksum != keel_page::Checksum::None;
        let (skipped, protected): (Vec<&FlushPage<'_>>, Vec<&FlushPage<'_>>) =
            pages.iter().partition(|p| skip && p.rebuildable_from_redo);
        let limit = self.scheme.group_limit().max(1);
        let mut chunks: Vec<&[&FlushPage<'_>]> = protected.chunks(limit).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let last = chunks.len() - 1;
        let ctx = self.ctx();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let extra: &[&FlushPage<'_>] = if i == last { &skipped } else { &[] };
            let mut group = self.seal_group(chunk, extra, ps, stamp);
            let r = self.scheme.write_group(&ctx, &mut group);
            self.give_back(group.buf);
            r?;
        }
        add(&self.counters.batches, 1);
        Ok(())
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            data: &*self.data,
            area: self.area.as_deref(),
            counters: &self.counters,
            poison: &self.poison,
            knobs: &self.knobs,
            unsynced: &self.unsynced,
        }
    }

    /// Syncs the data file now (counted in `syncs`). Every page [`PageWriter::write_pages`]
    /// wrote in place before this call is then durable in place, and the doublewrite slots
    /// holding their copies may be reused without a sync at the next batch.
    ///
    /// Not needed for correctness: in doublewrite mode `write_pages` returns once each page is in
    /// a synced doublewrite slot, which recovery restores from and which is never reused before a
    /// data sync. Useful at a clean shutdown (the next open then restores nothing) or before
    /// copying the data file. A failure poisons the writer, as every failed sync does.
    pub fn sync_data(&self) -> Result<()> {
        self.poison.check()?;
        self.ctx().sync_data_file()
    }

    /// Makes page 0 of the data file record, durably, that the file holds every change up to
    /// `lsn` (a checkpoint LSN whose pages are all written): the log is made durable up to `lsn`,
    /// page 0 is read from the file, its file checkpoint set to `lsn`, and the page written back
    /// in place and the data file synced. Call before the log records `lsn` as its checkpoint:
    /// then page 0 on disk always records at least the log's checkpoint, and a data file that
    /// records less is older than the log (restored from an older copy) — the open refuses it.
    /// Every later write of page 0 records `lsn` or more.
    ///
    /// The write needs no torn-page protection: only the first 32 bytes differ from the page on
    /// disk (checksum, flags, file checkpoint), and they lie in one sector, so a torn write
    /// leaves either the old page or the new one. Writes of page 0 are serialised with it.
    /// Nothing to do when an earlier stamp already recorded `lsn` or more.
    ///
    /// # Errors
    /// A poisoned writer; the log cannot be made durable up to `lsn`
    /// ([`FlushError::Wal`]); page 0 is unwritten ([`FlushError::BadPage`]) or fails
    /// verification; the write or the sync fails (which poisons the writer).
    pub fn stamp_checkpoint(&self, lsn: Lsn) -> Result<()> {
        self.poison.check()?;
        self.ensure_recovered()?;
        let mut f = self.file_ckpt.lock();
        if f.known && f.durable >= lsn {
            return Ok(());
        }
        self.log_durable_to(lsn, PageId(0))?;
        let ps = self.config.page_size.bytes();
        let mut buf = AlignedBuf::page(ps);
        match self.read_page(PageId(0), &mut buf)? {
            PageState::Valid(_) => {}
            PageState::Unwritten => {
                return Err(FlushError::BadPage {
                    page_id: PageId(0),
                    reason: "page 0 is unwritten: no file checkpoint can be recorded on it".into(),
                })
            }
        }
        let value = if f.known { f.value.max(lsn) } else { lsn };
        set_file_checkpoint(&mut buf, value);
        seal(&mut buf, self.config.checksum);
        let ctx = self.ctx();
        ctx.write_home(
            &[WriteOp {
                buf: &buf,
                offset: 0,
            }],
            false,
        )?;
        ctx.sync_data_file()?;
        add(&self.counters.checkpoint_stamps, 1);
        f.known = true;
        f.value = value;
        f.durable = value;
        Ok(())
    }

    /// Sets the file checkpoint every later write of page 0 records to at least `lsn` (the
    /// recovered checkpoint, or what page 0 on disk records if more). Until it is called, page 0
    /// is written as the caller gives it. `lsn` must not exceed the durable log.
    pub fn set_file_checkpoint_floor(&self, lsn: Lsn) {
        let mut f = self.file_ckpt.lock();
        f.value = if f.known { f.value.max(lsn) } else { lsn };
        f.known = true;
    }

    /// The file checkpoint page 0 records on disk (through the in-memory doublewrite overlay of
    /// a read-only recovery): `None` when page 0 is unwritten or has no record (written before
    /// the field existed). Page 0's LSN is not compared with the log here: the caller compares
    /// the record itself with the log.
    ///
    /// # Errors
    /// Page 0 cannot be read or fails verification (torn, for instance).
    pub fn file_checkpoint_on_disk(&self) -> Result<Option<Lsn>> {
        Ok(self.page0_on_disk()?.and_then(|p| file_checkpoint(&p)))
    }

    /// Page 0 as it is on disk (through the in-memory doublewrite overlay of a read-only
    /// recovery), verified (checksum, page id, trailer) but its LSN not compared with the log:
    /// `None` when it is unwritten. For the open's checks of the data file against the log
    /// (the file checkpoint here, the store its meta page records above) before recovery writes
    /// anything.
    ///
    /// # Errors
    /// Page 0 cannot be read or fails verification (torn, for instance).
    pub fn page0_on_disk(&self) -> Result<Option<Vec<u8>>> {
        let mut buf = AlignedBuf::page(self.config.page_size.bytes());
        self.read_raw(PageId(0), &mut buf)?;
        Ok(
            match verify(&buf, PageId(0), self.config.checksum, self.data.path())? {
                PageState::Valid(_) => Some(buf.to_vec()),
                PageState::Unwritten => None,
            },
        )
    }

    fn check_page(&self, p: &FlushPage<'_>) -> Result<()> {
        let bad = |reason: String| FlushError::BadPage {
            page_id: p.page_id,
            reason,
        };
        let ps = self.config.page_size.bytes();
        self.page_offset(p.page_id)?;
        if p.image.len() != ps {
            return Err(bad(format!(
                "the image is {} bytes, the page size is {}",
                p.image.len(),
                self.config.page_size
            )));
        }
        let h = PageHeader::read(p.image).ok_or_else(|| bad("no room for a header".into()))?;
        if h.page_id != p.page_id {
            return Err(bad(format!(
                "the image's header says {} (a misdirected write)",
                h.page_id
            )));
        }
        if h.lsn != p.lsn {
            return Err(bad(format!(
                "the image's header holds {} but the batch says {}",
                h.lsn, p.lsn
            )));
        }
        Ok(())
    }

    /// docs/design.md invariant 1: the log is durable up to the newest page LSN before any page byte
    /// is written.
    fn enforce_wal(&self, newest: &FlushPage<'_>) -> Result<()> {
        self.log_durable_to(newest.lsn, newest.page_id)
    }

    /// Makes the log durable up to `needed` (if it is not yet) and checks that it is; errors
    /// name `page_id`, the page the flush is for.
    fn log_durable_to(&self, needed: Lsn, page_id: PageId) -> Result<()> {
        if needed == Lsn::ZERO {
            return Ok(());
        }
        if self.log.durable_lsn() < needed && !(cfg!(test) && self.knobs.skip_wal_flush) {
            self.log
                .flush_to(needed)
                .map_err(|source| FlushError::Wal {
                    lsn: needed,
                    page_id,
                    source,
                })?;
            add(&self.counters.forced_log_flushes, 1);
        }
        if !(cfg!(test) && self.knobs.skip_wal_check) {
            let durable = self.log.durable_lsn();
            if durable < needed {
                return Err(FlushError::WalRule {
                    page_id,
                    needed,
                    durable,
                });
            }
        }
        Ok(())
    }

    fn ensure_recovered(&self) -> Result<()> {
        if let Some(area) = &self.area {
            if !area.is_ready() {
                if !area.is_recovered() {
                    tracing::warn!(
                        area = %area.path().display(),
                        "write before recover_doublewrite: recovering the doublewrite area first"
                    );
                }
                self.finish_doublewrite_recovery()?;
            }
        }
        Ok(())
    }

    /// Copies and seals `protected` then `skipped` into one aligned buffer behind room for a slot
    /// directory.
    fn seal_group(
        &self,
        protected: &[&FlushPage<'_>],
        skipped: &[&FlushPage<'_>],
        ps: usize,
        stamp: Option<Lsn>,
    ) -> Group {
        let dir_len = if protected.is_empty() {
            0
        } else {
            self.scheme.dir_len()
        };
        let n = protected.len() + skipped.len();
        let mut buf = self.take_buffer(dir_len + n * ps);
        let mut pages = Vec::with_capacity(n);
        for (i, p) in protected.iter().chain(skipped).enumerate() {
            let img = &mut buf[dir_len + i * ps..dir_len + (i + 1) * ps];
            img.copy_from_slice(p.image);
            if let (PageId(0), Some(lsn)) = (p.page_id, stamp) {
                set_file_checkpoint(img, lsn);
            }
            seal(img, self.config.checksum);
            pages.push(GroupPage {
                id: p.page_id,
                lsn: p.lsn,
            });
        }
        Group {
            buf,
            dir_len,
            page_size: ps,
            pages,
            protected: protected.len(),
        }
    }

    /// A buffer of at least `len` bytes for a group: a spare one if it is big enough, else a new
    /// one. Reusing them matters: a fresh multi-MiB zeroed allocation is usually a new mapping
    /// whose pages fault in on first touch (measured: ~0.4 ms per 2 MiB batch, a fifth of a
    /// doublewrite batch). A reused buffer holds old bytes beyond what the group writes; nothing
    /// reads them (the directory is zeroed by `encode_directory`, images are copied whole).
    fn take_buffer(&self, len: usize) -> AlignedBuf {
        let mut spare = self.spare.lock();
        match spare.iter().position(|b| b.len() >= len) {
            Some(i) => spare.swap_remove(i),
            None => {
                drop(spare);
                AlignedBuf::page(len)
            }
        }
    }

    /// Keeps `buf` for a later group: at most [`SPARE_BUFFERS`] buffers of at most
    /// [`SPARE_BUFFER_MAX`] bytes each (a bigger one replaces the smallest).
    fn give_back(&self, buf: AlignedBuf) {
        if buf.len() > SPARE_BUFFER_MAX {
            return;
        }
        let mut spare = self.spare.lock();
        if spare.len() < SPARE_BUFFERS {
            spare.push(buf);
        } else if let Some((i, _)) = spare
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| b.len())
            .filter(|(_, b)| b.len() < buf.len())
        {
            spare[i] = buf;
        }
    }

    /// Test-only: set deliberate faults.
    #[cfg(test)]
    pub(crate) fn set_knobs(&mut self, knobs: Knobs) {
        self.knobs = knobs;
    }
}
