//! Opening a store: the lock, what the directory holds, creation or recovery, the meta page.
//!
//! The sequence (docs/design.md invariants 4, 7 and 8; `docs/format.md`, "How a store is
//! created, locked and opened"):
//!
//! 1. Without `create` (or read-only), look first: a directory that holds no store is
//!    `NotAStore` and gets nothing, not even a lock file.
//! 2. Take the directory lock (`LOCK`): exclusive, or shared for read-only opens.
//! 3. Classify the directory ([`crate::layout`]): a store (check its identity and pieces), an
//!    empty directory or an interrupted creation (mark, then create), or pieces of a store
//!    without its identity (refused).
//! 4. Open the log (creating it only for a new store; read-only scans without writing) and the
//!    page writer; restore torn pages from the doublewrite area (read-only: refuse if any would
//!    be restored, or if redo is pending); replay redo from the checkpoint; checkpoint.
//! 5. Read the meta page — or, for a new store only, write the meta page and the catalog root,
//!    checkpoint, and publish `store.keel` (the last step of creation).
//! 6. [`Store::assemble`] starts the page cleaner and the checkpointer.
//!
//! Invariant (tested in `tests/open.rs`): an existing store is never initialised again, whatever
//! is missing or zeroed; the open is refused naming what is wrong.

use crate::config::Config;
use crate::layout::{self, DirState};
use crate::meta::{self, MetaInfo, IDENTITY_FILE, META_PAGE};
use crate::store::{Effective, Opened, RecoveryReport};
use crate::{Error, Result, Store, LOG_DIR};
use keel_btree::BTree;
use keel_buffer_pool::{BufferPool, PageStore as PoolPageStore, PoolConfig};
use keel_flush::{PageWriter, PageWriterConfig, TornPageProtection};
use keel_io::{FileSystem, LockGuard, LockMode, OsFs, ReadOnlyFs};
use keel_page::{file_checkpoint, Lsn, PageId};
use keel_redo_log::{LogOpenMode, RedoLog};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

impl Store {
    /// Opens the store in `dir` on the real file system, creating it if absent and recovering
    /// it otherwise.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// assert!(store.recovery().created);
    /// store.close()?;
    /// let again = keel::Store::open(dir.path(), keel::Config::default())?;
    /// assert!(!again.recovery().created);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`open_with_fs`](Self::open_with_fs).
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        Store::open_with_fs(Arc::new(OsFs::auto()), dir, config)
    }

    /// Opens on any file system (e.g. `keel_io::SimFs` for crash tests).
    ///
    /// How a store is created, locked and opened is described in [`crate::layout`] and
    /// `docs/format.md`: an exclusive lock on `dir/LOCK` for the store's lifetime (shared for
    /// `read_only`); a directory that holds any piece of a store is never initialised again;
    /// creation is published by renaming `store.keel` into place, so an interrupted creation is
    /// recognised and redone.
    ///
    /// # Errors
    /// [`Error::AlreadyOpen`] when another `Store` holds the directory; [`Error::NotAStore`]
    /// when there is no store and `create` is false (or `read_only`); [`Error::IncompleteStore`]
    /// when a piece of an existing store is missing; [`Error::NeedsRecovery`] for a read-only
    /// open of a store that needs more recovery than its pool can hold in memory;
    /// [`Error::Config`] for a pool too small for the largest transaction recovery replays, or
    /// for settings that do not match the store; [`Error::Format`] for a data file whose meta
    /// page records another store than the log's, and [`Error::Recovery`] for a data file and a
    /// log of different moments (design invariants 9 and 10); corruption and I/O errors from
    /// recovery.
    pub fn open_with_fs(
        fs: Arc<dyn FileSystem>,
        dir: impl AsRef<Path>,
        config: Config,
    ) -> Result<Store> {
        let t0 = Instant::now();
        config.validate()?;
        // A store whose durable log was given up is opened for salvage only: new commits would
        // continue the log below the LSNs of pages written with the lost commits, and once
        // they passed them such a page would be read as valid again (the lost commits' rows
        // beside an older state of others: test `log_corruption.rs`
        // `an_accepted_loss_opens_for_salvage_only`). Read-only, nothing is written, so a
        // normal open still refuses the damaged log.
        let config = if config.accept_log_loss {
            Config {
                read_only: true,
                create: false,
                ..config
            }
        } else {
            config
        };
        // Made absolute once, here: a store reaches its files by path all its life (a growing
        // log creates and removes its files), and a relative path would name another directory
        // after the process changed its working directory — refused as a moved store
        // (invariant 21), so a store opened as "db" poisoned itself at its next log file after
        // a `chdir` (a tester).
        let dir = std::path::absolute(dir.as_ref()).map_err(|e| {
            Error::Io(keel_io::IoError::Os {
                path: dir.as_ref().to_path_buf(),
                op: "resolve",
                source: e,
            })
        })?;
        let read_only = config.read_only;
        let (fs, dir_lock, created) = lock_and_classify(fs, &dir, &config)?;
        let mut config = config;
        config.resolve_log_file_size(fs.as_ref(), &dir, created);
        let log_mode = if created {
            LogOpenMode::CreateIfMissing
        } else if read_only {
            LogOpenMode::ReadOnly
        } else {
            LogOpenMode::Existing
        };
        // Unstarted: the log writes nothing (its new incarnation, restart block, a growing
        // log's cut) until the data file was checked against it (`recover_pages`), so an open
        // refused there leaves every file as it was.
        let (log, recovered) = RedoLog::open_unstarted(
            fs.clone(),
            &dir.join(LOG_DIR),
            config.log_config(),
            log_mode,
            config.accept_log_loss,
        )
        .map_err(|e| match e {
            keel_redo_log::LogError::Missing { path, what } => layout::incomplete(
                &dir,
                &format!("{what} ({})", path.display()),
                &layout::present(fs.as_ref(), &dir),
            ),
            // A setting fixed at creation is a configuration error naming the `Config` key,
            // as `page_size` and `checksum` are (it was `Error::Log` naming the log's own
            // field: a tester).
            keel_redo_log::LogError::ConfigMismatch {
                path,
                field,
                stored,
                configured,
            } => Error::Config(format!(
                "{}: the store was created with {} {stored}, the configuration says {configured}",
                path.display(),
                match field {
                    "log block size" => "log_block_size",
                    "log files" => "log_files",
                    "log file size" => "log_file_size",
                    "number of log files" => "log_file_count",
                    other => other,
                }
            )),
            other => Error::Log(other),
        })?;
        // The recovered redo made durable before anything is built on it (a page the replay
        // evicts, the flush of the replayed pages, the checkpoint): a process that was killed
        // leaves its unsynced log writes in the page cache, where the scan read them
        // (`RedoLog::sync_recovered`; PostgreSQL's sync of the data directory before crash
        // recovery). Once per open, before either recovery pass; a sync writes no byte, so a
        // refused open still changes no file.
        if !read_only {
            log.sync_recovered()?;
        }
        // Full-page writes protect a page written during recovery only through the images its
        // redo begins with. A log written in another mode (doublewrite, atomic writes, none)
        // has none, so a power loss during the flush of the replayed pages could tear a page
        // nothing can rebuild (crash matrix, recovering in another mode than the run's). Such a
        // log is recovered under doublewrite protection and checkpointed; the configured mode
        // then opens a store with nothing to replay (design invariant 11).
        let unprotected =
            if !read_only && matches!(config.protection(), TornPageProtection::FullPageWrites) {
                keel_buffer_pool::recovery::pages_redo_cannot_rebuild(&recovered.groups).len()
            } else {
                0
            };
        let (pages, recovered_under) = if unprotected > 0 {
            let under = TornPageProtection::Doublewrite {
                batch_pages: config.doublewrite_batch,
            };
            let first = recover_pages(&fs, &dir, &config, under, &log, &recovered, created)?;
            // The doublewrite pass is done: its writer and pool go (the report of what it did
            // stays), and the configured mode opens a store with nothing left to replay.
            let done = first.done;
            drop(first.pool);
            drop(first.writer);
            let settled = keel_redo_log::Recovered {
                groups: Vec::new(),
                checkpoint_lsn: log.checkpoint_lsn(),
                ..recovered.clone()
            };
            let second = recover_pages(
                &fs,
                &dir,
                &config,
                config.protection(),
                &log,
                &settled,
                created,
            )?;
            let note = format!(
                "doublewrite: the log since the checkpoint holds no full page image of {unprotected} pages it changes (written in another mode), so they were replayed and written under doublewrite protection before full-page writes took over"
            );
            tracing::warn!(%note, "recovered under another protection");
            (PagesRecovered { done, ..second }, Some(note))
        } else {
            (
                recover_pages(
                    &fs,
                    &dir,
                    &config,
                    config.protection(),
                    &log,
                    &recovered,
                    created,
                )?,
                None,
            )
        };
        let PagesRecovered {
            writer,
            pool,
            meta,
            done:
                RecoveryDone {
                    dw,
                    redo,
                    pages_flushed,
                    on_disk,
                },
        } = pages;
        let resolved = writer.resolved();
        let probe = fs.capabilities(&dir).ok();
        let effective = Effective {
            config: config.clone(),
            torn_page: format!("{:?}", resolved.mode),
            torn_page_reason: resolved.reason.clone(),
            direct_io: writer.direct_io().in_force,
            direct_io_reason: writer.direct_io().reason.clone(),
            io_backend: probe.as_ref().map_or_else(
                || "unknown".into(),
                |c| if c.io_uring { "io_uring" } else { "pwrite" }.to_string(),
            ),
            probe,
        };
        tracing::info!(dir = %dir.display(), torn_page = %effective.torn_page, reason = %effective.torn_page_reason, direct_io = %effective.direct_io_reason, read_only, "opening store");

        let catalog_root = catalog_root(&Parts {
            fs: fs.as_ref(),
            dir: &dir,
            config: &config,
            log: &log,
            writer: &writer,
            pool: &pool,
            meta,
        })?;
        let recovery = RecoveryReport {
            created,
            in_memory: read_only && (!recovered.groups.is_empty() || dw.restored_pages > 0),
            checkpoint_lsn: recovered.checkpoint_lsn,
            end_lsn: recovered.end_lsn,
            groups_replayed: recovered.groups.len() as u64,
            redo,
            doublewrite_restored: dw.restored_pages,
            doublewrite_images_valid: dw.images_valid,
            log_bytes_discarded: recovered.discarded_bytes,
            discard_reason: recovered.discard_reason.clone(),
            log_end_reason: recovered.end_reason.clone(),
            pages_flushed,
            duration_ms: t0.elapsed().as_secs_f64() * 1000.0,
            log_loss: recovered.log_loss.clone(),
            data_file_checkpoint: on_disk,
            recovered_under,
        };
        if !created {
            tracing::info!(?recovery, "recovered");
        }
        Store::assemble(Opened {
            dir,
            fs,
            config,
            effective,
            log,
            writer,
            pool,
            catalog_root,
            recovery,
            read_only,
            dir_lock,
        })
    }
}

/// What [`recover_pages`] leaves: the page writer and the pool, and what recovery did.
struct PagesRecovered {
    writer: Arc<PageWriter>,
    pool: Arc<BufferPool>,
    /// The recovered meta page of an existing store (`None` for a store being created).
    meta: Option<MetaInfo>,
    done: RecoveryDone,
}

/// What a [`recover_pages`] pass did, for the [`RecoveryReport`].
struct RecoveryDone {
    dw: keel_flush::DoublewriteRecovery,
    redo: keel_buffer_pool::RedoApplyReport,
    pages_flushed: u64,
    on_disk: Option<Lsn>,
}

/// Opens the page writer with `protection` and the pool, checks the data file against the log,
/// runs the doublewrite recovery and replays `recovered`; a read-write open then flushes the
/// replayed pages and records a checkpoint.
fn recover_pages(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    config: &Config,
    protection: TornPageProtection,
    log: &RedoLog,
    recovered: &keel_redo_log::Recovered,
    created: bool,
) -> Result<PagesRecovered> {
    let read_only = config.read_only;
    let writer = Arc::new(PageWriter::open(
        fs.clone(),
        dir,
        PageWriterConfig {
            page_size: config.page_size(),
            checksum: config.checksum,
            // Read-only: no page is ever written, and an existing doublewrite area is only
            // read (opened for recovery, never formatted).
            protection: if read_only {
                TornPageProtection::None
            } else {
                protection
            },
            init_on_flush_skip: config.init_on_flush_skip,
            direct_io: config.direct_io,
            // The doublewrite area records the store it belongs to: the log's salt.
            store: log.salt(),
        },
        log.clone(),
    )?);
    // The data file against the log — the store its meta page records, and its checkpoint
    // — before the doublewrite recovery writes anything into a data file that may not
    // belong with this log; after it if page 0 was torn (then read as restored; the store
    // is checked again on the recovered meta page by `catalog_root`).
    let page0_read = writer.page0_on_disk().ok().map(|p| {
        p.as_deref().map(|p| {
            let lsn = keel_page::PageHeader::read(p).map(|h| h.lsn);
            (meta::recorded_store(p), file_checkpoint(p), lsn)
        })
    });
    if let Some(page0) = page0_read {
        meta::check_store(page0.and_then(|p| p.0), log.salt(), writer.data_path())?;
        check_file_checkpoint(
            &writer,
            page0.and_then(|p| p.1),
            recovered,
            config.accept_log_loss,
        )?;
        // The WAL rule, read side, for page 0 now (after the file checkpoint, whose refusal
        // names the cause better): a page 0 past the log's end means the log lost its durable
        // tail, found here before the log's start writes a new incarnation at the recovered
        // end — which would make the lost tail unreadable for good, should the missing piece
        // be put back (found by `bad_bytes.rs` undoing a deleted growing-log file after the
        // refusal).
        if let Some(lsn) = page0.and_then(|p| p.2) {
            writer.check_not_in_future(PageId(0), lsn)?;
        }
    }
    // The doublewrite area against the log, too, before anything is written.
    writer.check_doublewrite_area()?;
    // The doublewrite recovery begins in memory: the images are served to reads in place of
    // their home pages (which stay as they are on disk) while the redo is replayed and the
    // meta page checked, so an open refused by those checks writes nothing (`bad_bytes.rs`
    // asserts it: before, 7 refusals in 8,000 had restored images into the data file). A
    // read-only open stops there: the replayed pages stay dirty in memory (a read-only store
    // has no cleaner or checkpointer, and eviction takes clean frames first). A read-write
    // open writes the images home once the log has started (`finish_doublewrite_recovery`
    // below), or at the first page write before that (a replay that evicts a page), always
    // before the page's own write and the area's format.
    // Area images at or below the log's checkpoint repair no page (keel-flush
    // `page_writer::recovery`): every write the checkpoint covered was synced before it was
    // recorded — by builds whose page 0 records the file checkpoint. A store of an older
    // build (none recorded, or page 0 torn) keeps the rule without that bound.
    let covered = page0_read
        .flatten()
        .and_then(|p| p.1)
        .map_or(Lsn::ZERO, |_| recovered.checkpoint_lsn);
    let dw = writer.recover_doublewrite_in_memory(covered)?;
    let on_disk = match page0_read {
        Some(page0) => page0.and_then(|p| p.1),
        None => {
            let on_disk = writer.file_checkpoint_on_disk().ok().flatten();
            check_file_checkpoint(&writer, on_disk, recovered, config.accept_log_loss)?;
            on_disk
        }
    };
    let pool = Arc::new(BufferPool::new(
        PoolConfig {
            page_size: config.page_size(),
            pool_bytes: config.pool_size,
            version_budget: config.snapshot_budget,
            read_only,
            ..PoolConfig::default()
        },
        writer.clone() as Arc<dyn PoolPageStore>,
    )?);
    group_room(dir, &pool, recovered)?;
    if read_only && !recovered.groups.is_empty() {
        in_memory_room(dir, &pool, recovered)?;
    }
    let redo = pool.apply_redo(recovered.checkpoint_lsn, &recovered.groups)?;
    // The meta page as recovered, too: a zeroed one, one that does not decode or one of
    // another store is refused here, before the log starts (a refusal after the start would
    // have left a new incarnation at the recovered end: `open.rs`
    // `a_zeroed_meta_page_is_refused_and_nothing_is_overwritten`).
    let meta = if created {
        None
    } else {
        Some(recovered_meta(&pool, &writer, log)?)
    };
    // The data file and the area were checked against the log and the redo replayed (a page
    // it cannot rebuild is refused above, with the log untouched): the log starts — its new
    // incarnation, a growing log's cut, the restart block — before the replayed pages are
    // written and checkpointed. (Idempotent: the second pass of a full-page-writes recovery
    // finds it started.)
    if !read_only {
        log.start()?;
        // The doublewrite images written home (synced) and the area readied for this run's
        // writes (formatted for this store, or emptied outside doublewrite mode) after every
        // check, too (`open.rs` `a_zeroed_meta_page_is_refused_and_nothing_is_overwritten`: the
        // format of an emptied area came before the meta page's refusal). A replay that
        // evicted a page did both already, before that page's write.
        writer.finish_doublewrite_recovery()?;
    }
    // A split's right half as a page copy (module `copy_deps` of the pool) where the log
    // takes the record (format version 4 on) and the page writer never leaves a torn page
    // that only redo could rebuild (doublewrite, atomic writes).
    pool.set_page_copies(log.accepts_page_copies() && !read_only);
    let mut pages_flushed = 0;
    if !recovered.groups.is_empty() && !read_only {
        pages_flushed = pool.flush_all()? as u64;
        let c = pool.checkpoint_lsn(log);
        crate::checkpointer::record_checkpoint(log, &writer, c)?;
    }
    Ok(PagesRecovered {
        writer,
        pool,
        meta,
        done: RecoveryDone {
            dw,
            redo,
            pages_flushed,
            on_disk,
        },
    })
}

/// Compares the file checkpoint page 0 records (`PageWriter::stamp_checkpoint`) with the
/// recovered log, and makes every later write of page 0 record at least the log's checkpoint.
///
/// Page 0 on disk always records at least the log's checkpoint (checkpointer invariant 5), and
/// never more than the durable log. So a data file recording less than the log's checkpoint is
/// older than the log: a copy restored from before that checkpoint, whose pages lack changes
/// recovery from the log's checkpoint does not replay — opening it would read the old data
/// silently. (Replaying from the data file's own record instead, where the log still holds it,
/// would open such a copy; it is refused, the simpler safe answer.) And a data file
/// recording more than the log's end was written after log data that is now gone (a log
/// restored from an older copy), unless the loss was accepted (`accept_log_loss`). Both are
/// refused. A page 0 without the record (written before it existed) or that cannot be read
/// (torn, rebuilt by redo below) is not checked. Called before the doublewrite recovery (so a
/// refused data file is left as it was) and again after it, with the restored page 0, if page
/// 0 could not be read before.
///
/// # Errors
/// [`Error::Recovery`] naming the data file and both LSNs.
fn check_file_checkpoint(
    writer: &PageWriter,
    on_disk: Option<Lsn>,
    recovered: &keel_redo_log::Recovered,
    accept_log_loss: bool,
) -> Result<()> {
    let log_ckpt = recovered.checkpoint_lsn;
    if let Some(d) = on_disk {
        // A checkpoint slot a build before the record wrote (unmarked) may have moved the
        // log's checkpoint past a record that build kept as it was: stale, not older data (a
        // store taken back to such a build and forward again was refused for good: a
        // tester). It is not checked then; this build's first checkpoint restamps it.
        if d < log_ckpt && recovered.checkpoint_kept {
            return Err(Error::Recovery {
                lsn: log_ckpt,
                detail: format!(
                    "{} records the checkpoint at {d}, older than the log's checkpoint at {log_ckpt}: the data file is older than the log (restored from an older copy?), and recovery from the log's checkpoint would skip changes it lacks; refusing to open",
                    writer.data_path().display()
                ),
            });
        }
        if d > recovered.end_lsn && !accept_log_loss {
            return Err(Error::Recovery {
                lsn: recovered.end_lsn,
                detail: format!(
                    "{} records the checkpoint at {d}, past the end of the log at {}: log data the data file depends on is gone (a log restored from an older copy?); refusing to open",
                    writer.data_path().display(),
                    recovered.end_lsn
                ),
            });
        }
    }
    // Never above the durable log: a record past its end is kept only when the loss was
    // accepted, and then the later writes of page 0 record the log's end instead.
    let durable = recovered.end_lsn.max(log_ckpt);
    let floor = on_disk.map_or(log_ckpt, |d| d.min(durable).max(log_ckpt));
    writer.set_file_checkpoint_floor(floor);
    Ok(())
}

/// Recovery applies a transaction with all its pages in the pool at once, so the pool must hold
/// the largest transaction in the log within the limit a transaction has at run time
/// ([`BufferPool::max_txn_pages`]: one rule, so a transaction a pool committed replays in that
/// pool — the two were rounded apart, and a pool of 18 frames committed 13 pages and refused
/// to replay them) — a store written with a larger pool can hold larger ones. Refused at once,
/// naming the least pool that replays it (it used to wait `frame_wait_ms` for a frame, then
/// fail with "no free frame").
fn group_room(dir: &Path, pool: &BufferPool, recovered: &keel_redo_log::Recovered) -> Result<()> {
    let limit = pool.max_txn_pages();
    for g in &recovered.groups {
        let pages = held_at_replay(g.records.iter());
        if pages.len() > limit {
            let need = pool.pool_bytes_for_txn(pages.len());
            return Err(Error::Config(format!(
                "{}: the log holds a committed transaction of {} pages ({}..{}) that recovery \
                 must hold in the pool at once, within the {limit} pages this pool of {} lets \
                 one transaction hold: open with pool_size of at least {need} bytes",
                dir.display(),
                pages.len(),
                g.start_lsn,
                g.end_lsn,
                pool.frames(),
            )));
        }
    }
    Ok(())
}

/// The pages replaying `records` holds in the pool: every page a record changes, and every
/// page a copy is made from (a page only freed takes no frame at replay).
fn held_at_replay<'a>(
    records: impl Iterator<Item = &'a keel_buffer_pool::Record>,
) -> std::collections::HashSet<PageId> {
    use keel_buffer_pool::Record;
    records
        .filter(|r| !matches!(r, Record::PageFree { .. }))
        .flat_map(|r| {
            let from = match r {
                Record::PageCopy { from, .. } => Some(*from),
                _ => None,
            };
            r.page_id().into_iter().chain(from)
        })
        .collect()
}

/// A read-only open recovers in memory only while the recovered pages stay within what the
/// pool lets one transaction hold ([`BufferPool::max_txn_pages`], 3/4 of its frames), leaving
/// the rest clean for reads (dirty pages can never be written back in a read-only open);
/// beyond that it is refused with what to do instead.
fn in_memory_room(
    dir: &Path,
    pool: &BufferPool,
    recovered: &keel_redo_log::Recovered,
) -> Result<()> {
    let pages = held_at_replay(recovered.groups.iter().flat_map(|g| g.records.iter()));
    let frames = pool.frames();
    if pages.len() > pool.max_txn_pages() {
        return Err(Error::NeedsRecovery {
            dir: dir.to_path_buf(),
            detail: format!(
                "{} committed transactions after the checkpoint at {} change {} pages; a read-only open recovers them in memory only within the {} pages its pool of {frames} lets one transaction hold: open the store read-write once, or give the read-only open a larger pool_size",
                recovered.groups.len(),
                recovered.checkpoint_lsn,
                pages.len(),
                pool.max_txn_pages()
            ),
        });
    }
    Ok(())
}

/// What [`lock_and_classify`] returns: the file system to use, the held lock, and whether the
/// store is being created.
type Claimed = (Arc<dyn FileSystem>, Box<dyn LockGuard>, bool);

/// Steps 1–3: looks at the directory, takes the lock, and decides between opening an existing
/// store and creating one (after clearing an interrupted creation). Returns the file system to
/// use (a read-only view for read-only opens), the lock, and whether the store is being created.
fn lock_and_classify(fs: Arc<dyn FileSystem>, dir: &Path, config: &Config) -> Result<Claimed> {
    let dir = dir.to_path_buf();
    let read_only = config.read_only;
    let may_create = config.create && !read_only;
    let not_a_store = |detail: &str| Error::NotAStore {
        dir: dir.clone(),
        detail: detail.to_string(),
    };
    // Look before taking the lock when nothing may be created: a directory that is not a
    // store gets no lock file either.
    if !may_create {
        match layout::classify(fs.as_ref(), &dir)? {
            DirState::Missing => return Err(not_a_store("no such directory")),
            DirState::Empty => return Err(not_a_store("no store in it")),
            DirState::InterruptedCreation => {
                // A creation still running holds the lock: said so, not "interrupted" (a tester:
                // `keel check` beside a process creating the store).
                if fs.exists(&layout::lock_path(&dir))? {
                    if let Err(e @ Error::AlreadyOpen { .. }) =
                        layout::lock(fs.as_ref(), &dir, LockMode::Shared)
                    {
                        return Err(e);
                    }
                }
                return Err(not_a_store("only an interrupted creation"));
            }
            DirState::Incomplete { found } => {
                return Err(layout::incomplete(&dir, IDENTITY_FILE, &found))
            }
            DirState::Store { .. } => {}
        }
    } else {
        fs.create_dir_all(&dir).map_err(|e| {
            // A dangling symbolic link in place of the directory fails with "File exists",
            // which names no cause (a tester): said as what it is.
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.file_type().is_symlink() && !dir.exists() => not_a_store(&format!(
                    "a symbolic link to {}, which does not exist",
                    std::fs::read_link(&dir)
                        .map(|t| t.display().to_string())
                        .unwrap_or_else(|_| "a target that cannot be read".into())
                )),
                _ => Error::from(e),
            }
        })?;
    }
    let fs: Arc<dyn FileSystem> = if read_only {
        Arc::new(ReadOnlyFs::new(fs))
    } else {
        fs
    };
    let lock_mode = if read_only {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    };
    let dir_lock = layout::lock(fs.as_ref(), &dir, lock_mode)?;
    // The names this store's files live under made durable before anything depends on them:
    // the entries of the files in its directory, and the directory's own entry in its parent,
    // and each ancestor's in its own, up to the root. Each creation syncs its directory, but an
    // earlier open whose sync failed (refused, nothing acknowledged) left the names there on
    // the same boot, and a later open reused them without a sync: the commits it acknowledged
    // went with the store directory — or a directory above it that the first open made — or
    // with its doublewrite area, at the next power loss (testers). (The log's directory is
    // synced with the recovered log files: `RedoLog::sync_recovered`.)
    if !read_only {
        for d in dir.ancestors() {
            match fs.sync_dir(d) {
                // A directory that cannot be synced at all (`IoError::cannot_sync_dir`: one
                // this process cannot open, a file system that does not sync directories) is
                // passed over, as `OsFs::create_dir_all` passes over it; a failed sync refuses.
                Err(e) if e.cannot_sync_dir() => {
                    tracing::warn!(dir = %d.display(), error = %e, "a directory on the store's path cannot be synced");
                }
                r => r?,
            }
        }
    }
    let created = match layout::classify(fs.as_ref(), &dir)? {
        DirState::Store { creating } => {
            meta::check_identity(fs.as_ref(), &dir, config.page_size, config.checksum)?;
            if !fs.exists(&dir.join(keel_flush::DATA_FILE_NAME))? {
                return Err(layout::incomplete(
                    &dir,
                    keel_flush::DATA_FILE_NAME,
                    &layout::present(fs.as_ref(), &dir),
                ));
            }
            if creating && !read_only {
                layout::unmark_creating(fs.as_ref(), &dir)?;
            }
            false
        }
        DirState::Missing | DirState::Empty if may_create => {
            layout::mark_creating(fs.as_ref(), &dir)?;
            true
        }
        DirState::InterruptedCreation if may_create => {
            tracing::warn!(dir = %dir.display(), "redoing an interrupted store creation");
            layout::clear_interrupted_creation(fs.as_ref(), &dir)?;
            layout::mark_creating(fs.as_ref(), &dir)?;
            true
        }
        DirState::Incomplete { found } => {
            return Err(layout::incomplete(&dir, IDENTITY_FILE, &found))
        }
        _ => return Err(not_a_store("no store in it")),
    };
    Ok((fs, dir_lock, created))
}

/// What step 5 works with.
struct Parts<'a> {
    fs: &'a dyn FileSystem,
    dir: &'a Path,
    config: &'a Config,
    log: &'a RedoLog,
    writer: &'a PageWriter,
    pool: &'a BufferPool,
    /// The checked meta page of an existing store ([`recovered_meta`]); `None`: being created.
    meta: Option<MetaInfo>,
}

/// Step 5: the catalog root from the meta page of an existing store — whose meta page must not
/// be unwritten (zeroed, or cut off): initialising it would write a new catalog over live pages —
/// or, for a store being created, a new meta page and catalog root, checkpointed, and then the
/// identity published (the store exists from here on) and the creation marker removed.
fn catalog_root(p: &Parts<'_>) -> Result<PageId> {
    let Parts {
        fs,
        dir,
        config,
        log,
        writer,
        pool,
        meta,
    } = *p;
    if let Some(m) = meta {
        // A meta page recording no store (made before the field: 0) gets this one.
        if m.store == 0 && !config.read_only {
            let txn = pool.begin();
            meta::set_store(&txn, log.salt())?;
            let lsn = txn.commit(log)?;
            log.wait_durable(lsn)?;
        }
        return Ok(m.catalog_root);
    }
    match pool.read(META_PAGE) {
        Ok(_) => Err(Error::Corruption {
            file: writer.data_path().to_path_buf(),
            page_id: META_PAGE,
            detail: "a store being created already has a meta page".into(),
        }),
        Err(keel_buffer_pool::PoolError::Unwritten { .. }) => {
            let txn = pool.begin();
            meta::init_meta(&txn, config.page_size, log.salt())?;
            let root = {
                let mut pages =
                    crate::table::TxnPages::new(&txn, writer.data_path(), config.page_size);
                BTree::create(&mut pages)?.root()
            };
            meta::set_catalog_root(&txn, root)?;
            let lsn = txn.commit(log)?;
            log.wait_durable(lsn)?;
            pool.flush_all()?;
            let c = pool.checkpoint_lsn(log);
            crate::checkpointer::record_checkpoint(log, writer, c)?;
            writer.sync_data()?;
            meta::publish_identity(fs, dir, config.page_size, config.checksum)?;
            layout::unmark_creating(fs, dir)?;
            Ok(root)
        }
        Err(e) => Err(e.into()),
    }
}

/// The meta page of an existing store as recovered (the doublewrite recovery and the redo
/// applied), decoded and checked against the log (the store it records, if not 0). Called
/// before the log starts, so a refusal writes nothing.
///
/// # Errors
///
/// [`Error::Corruption`] when the meta page is unwritten (zeroed, or cut off) and nothing
/// rebuilt it: initialising it would write a new catalog over live pages, so the store is
/// refused; [`Error::Format`] when it does not decode or records another store than the
/// log's; a read error of page 0.
fn recovered_meta(pool: &BufferPool, writer: &PageWriter, log: &RedoLog) -> Result<MetaInfo> {
    let g = match pool.read(META_PAGE) {
        Ok(g) => g,
        Err(keel_buffer_pool::PoolError::Unwritten { file, page_id }) => {
            return Err(Error::Corruption {
                file,
                page_id,
                detail: "the meta page is zeroed or missing and no doublewrite copy or redo can rebuild it; the store is refused rather than initialised over its data".into(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let m = meta::read_meta(&g, writer.data_path())?;
    drop(g);
    // Checked again on the recovered meta page (page 0 may have been torn or older on disk).
    let recorded = Some(m.store).filter(|&s| s != 0);
    meta::check_store(recorded, log.salt(), writer.data_path())?;
    Ok(m)
}
