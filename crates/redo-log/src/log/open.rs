//! Opening a log: create a new one (header, preallocated files, first checkpoint slots), or read
//! the header, check it against the configuration, scan from the newest valid checkpoint and
//! return what recovery needs ([`Recovered`]); then, at once or when the caller's own checks
//! passed ([`RedoLog::open_unstarted`], [`RedoLog::start`]), record the new incarnation, cut a
//! growing log at the recovered end, write the restart block and start the flusher thread.
//!
//! Invariants (tests: `tests/log.rs` `append_close_reopen_recovers_every_group`,
//! `opening_with_another_layout_is_a_clear_error`; `tests/corrupt_middle.rs`; `tests/crash.rs`
//! `disabling_the_tail_check_breaks_recovery`):
//! 1. A directory holding any piece of a log is never initialised again: only `CreateIfMissing`
//!    on an empty directory creates one.
//! 2. A read-only open writes nothing, on any file; an existing log opened unstarted writes
//!    nothing until `start`.
//! 3. The scan stops at the first block that is not a valid block of the current lap; a damaged
//!    block with proof that it was durable after it is `CorruptMiddle`, unless `accept_loss`.
//! 4. A scan that stops short of the durable LSN the header's slot records is `CorruptMiddle`
//!    too, unless `accept_loss` (test `corrupt_middle.rs`
//!    `a_growing_logs_newest_file_lost_is_refused`).

use super::*;

/// A complete group found by the recovery scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredGroup {
    /// LSN of the group's first byte.
    pub start_lsn: Lsn,
    /// LSN after the group (its commit LSN).
    pub end_lsn: Lsn,
    /// The records, in order.
    pub records: Vec<Record>,
}

/// What the recovery scan found when the log was opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The checkpoint LSN of the newest valid checkpoint slot.
    pub checkpoint_lsn: Lsn,
    /// Where the scan started (the start of the group that contains the checkpoint LSN, or the
    /// checkpoint LSN itself).
    pub scan_start_lsn: Lsn,
    /// Every complete group whose end LSN is after the checkpoint LSN, in LSN order.
    pub groups: Vec<RecoveredGroup>,
    /// Where new appends continue (the start of the block after the last one recovered).
    pub end_lsn: Lsn,
    /// Bytes of incomplete (or earlier abandoned) groups that were skipped.
    pub discarded_bytes: u64,
    /// Why bytes were discarded (`None` if none were).
    pub discard_reason: Option<String>,
    /// Why the scan stopped where it did (e.g. "block 12 ...: checksum mismatch").
    pub end_reason: String,
    /// This opening's incarnation number (1 for a new log).
    pub incarnation: u32,
    /// Durable log data given up because the open accepted a damaged block in the middle
    /// (`accept_loss` of [`RedoLog::open_mode`]): which block, why it was known durable, and
    /// where the recovered log ends. `None` when nothing durable was lost.
    pub log_loss: Option<String>,
    /// The winning checkpoint slot was written by a build whose checkpoints keep the data
    /// file's checkpoint record, or carried from one ([`crate::inspect::Slot::checkpoint_kept`]).
    pub checkpoint_kept: bool,
}

pub(crate) fn salt_now(dir: &Path) -> u32 {
    // SplitMix64 over time, process id and the directory name: distinct per creation.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t ^ (std::process::id() as u64).rotate_left(32);
    for b in dir.as_os_str().as_encoded_bytes() {
        x = x.wrapping_mul(31).wrapping_add(*b as u64);
    }
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z as u32) | 1
}

/// How far past a damaged block recovery looks for proof that it had been durable, at least
/// (the log buffer's size when that is larger): a torn tail is confined to what was written
/// after the last completed sync, which the writer keeps within [`UNSYNCED_MAX`] (half this),
/// whatever its buffer (the buffer alone bounded nothing: a group larger than the buffer, or
/// `Buffered` commits between two syncs, were written on without one).
pub(super) const LOOKAHEAD_BYTES: usize = 16 << 20;

/// How [`RedoLog::open_mode`] treats the log directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogOpenMode {
    /// Create a new, empty log if `dir` has none (what [`RedoLog::open`] does).
    CreateIfMissing,
    /// The log must exist: a missing header is an error, never a new log.
    Existing,
    /// The log must exist and nothing is written: scan only, no appends.
    ReadOnly,
}

/// Creates a new, empty log in `dir`. Preallocated files that need more than the file system's
/// free room (where known, once an earlier attempt's leftovers are removed) are refused before
/// anything is written: zero-filling up to a full device and then failing would leave it full
/// meanwhile, and take minutes.
pub(super) fn create_log(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    cfg: &LogConfig,
    opts: OpenOptions,
) -> Result<()> {
    // Leftovers of an earlier log or an interrupted creation.
    for path in fs.list_dir(dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if parse_name(name).is_some() || name == "log.header.tmp" {
            fs.remove_file(&path)?;
        }
    }
    if let LogFiles::Preallocated { file_size, files } = cfg.files {
        let need = file_size.saturating_mul(u64::from(files));
        // Probed after the leftovers went: their room counts as free.
        let free = fs.capabilities(dir).ok().and_then(|c| c.free_bytes);
        if let Some(free) = free.filter(|&f| f < need) {
            tracing::warn!(dir = %dir.display(), need, free, "the preallocated log does not fit");
            return Err(LogError::Io(keel_io::IoError::NoSpace {
                path: dir.to_path_buf(),
                offset: 0,
                len: usize::try_from(need).unwrap_or(usize::MAX),
            }));
        }
    }
    let (preallocated, files) = match cfg.files {
        LogFiles::Preallocated { files, .. } => (true, files),
        LogFiles::Growing { .. } => (false, 0),
    };
    let st = StaticHeader {
        block_size: cfg.block_size.bytes() as u32,
        preallocated,
        files,
        file_size: cfg.files.file_size(),
        salt: salt_now(dir),
        version: crate::header::VERSION,
    };
    let geo = st.geometry();
    LogFileSet::create(fs, dir, &geo, opts, st.file_size)?;
    let tmp = dir.join("log.header.tmp");
    let h = fs.open(&tmp, &OpenOptions::new(FileClass::Log).create(true))?;
    let mut img = vec![0u8; HEADER_BYTES];
    img[..SLOT_BYTES].copy_from_slice(&st.encode());
    let slot = Slot {
        seq: 1,
        checkpoint_lsn: 0,
        scan_start: 0,
        incarnation: 0,
        // A new growing log has no file yet.
        newest_file: None,
        checkpoint_kept: true,
        durable_lsn: Some(0),
    };
    let o = Slot::offset(1) as usize;
    img[o..o + SLOT_BYTES].copy_from_slice(&slot.encode(st.salt));
    h.write_all_at(&img, 0)?;
    h.sync_all()?;
    drop(h);
    fs.rename(&tmp, &dir.join(HEADER_FILE))?;
    Ok(())
}

pub(super) fn mismatch(
    path: &Path,
    field: &'static str,
    stored: String,
    configured: String,
) -> LogError {
    LogError::ConfigMismatch {
        path: path.to_path_buf(),
        field,
        stored,
        configured,
    }
}

impl RedoLog {
    /// Creates the log in `dir` if it has none, otherwise opens it and runs the recovery scan.
    ///
    /// Every opening is a new incarnation: the scan's result is returned, the header records the
    /// incarnation, and appends continue at the start of the block after the last recovered one
    /// (that block is written at once with the restart flag, so a crash right after opening is
    /// recovered the same way).
    pub fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        config: LogConfig,
    ) -> Result<(RedoLog, Recovered)> {
        RedoLog::open_mode(fs, dir, config, LogOpenMode::CreateIfMissing, false)
    }

    /// [`RedoLog::open`] with safety checks switched off on purpose (tests only: exists with
    /// the `test-switches` feature, which only this crate's own tests enable).
    ///
    /// # Errors
    /// As [`RedoLog::open`].
    #[cfg(any(test, feature = "test-switches"))]
    pub fn open_with(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        switches: TestSwitches,
    ) -> Result<(RedoLog, Recovered)> {
        RedoLog::open_started(fs, dir, cfg, switches, LogOpenMode::CreateIfMissing, false)
    }

    /// Opens the log in `dir` the way `mode` says: [`LogOpenMode::CreateIfMissing`] is
    /// [`RedoLog::open`]; [`LogOpenMode::Existing`] refuses a directory without a log (a missing
    /// `log.header` is [`LogError::Missing`], never replaced by a new empty log);
    /// [`LogOpenMode::ReadOnly`] also writes nothing at all: it runs the recovery scan and returns
    /// a log that takes no appends ([`LogError::Closed`]) and has no flusher thread.
    ///
    /// `accept_loss`: when the recovery scan ends at a damaged block that had been durable (a
    /// corrupt middle, [`LogError::CorruptMiddle`]), accept the loss of everything after it
    /// instead of refusing; [`Recovered::log_loss`] then says what was given up. Never the
    /// default: it discards acknowledged commits.
    ///
    /// # Errors
    /// As [`RedoLog::open`], plus [`LogError::Missing`] when the log is absent and `mode` does
    /// not create it, and [`LogError::CorruptMiddle`] (unless `accept_loss`).
    pub fn open_mode(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        mode: LogOpenMode,
        accept_loss: bool,
    ) -> Result<(RedoLog, Recovered)> {
        RedoLog::open_started(fs, dir, cfg, TestSwitches::default(), mode, accept_loss)
    }

    /// `open_inner`, then (read-write) [`RedoLog::sync_recovered`] and [`RedoLog::start`]. The
    /// recovered redo is made durable before the new incarnation writes a byte: a process that
    /// died left its unsynced writes in the page cache, where the scan read them; the start
    /// then syncs only the files it writes, yet its blocks claim every block below them
    /// durable — so a power loss after an acknowledged append lost the append and what the
    /// scan had returned, or made the log refuse to open (test `crash.rs`
    /// `an_open_after_a_process_crash_makes_what_it_recovered_durable`). A caller of
    /// [`RedoLog::open_unstarted`] calls `sync_recovered` itself (keel's open does).
    fn open_started(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        switches: TestSwitches,
        mode: LogOpenMode,
        accept_loss: bool,
    ) -> Result<(RedoLog, Recovered)> {
        let (log, recovered) = RedoLog::open_inner(fs, dir, cfg, switches, mode, accept_loss)?;
        if mode != LogOpenMode::ReadOnly {
            log.sync_recovered()?;
        }
        log.start()?;
        Ok((log, recovered))
    }

    /// [`RedoLog::open_mode`] without starting the log: the recovery scan runs, but nothing is
    /// written to any file (not the new incarnation, the restart block or, for growing logs,
    /// the removal of files past the recovered end) until [`RedoLog::start`]. Until then the
    /// log takes no appends and no checkpoint ([`LogError::Closed`]). A caller that checks what
    /// it recovered against other files first (keel checks the data file's store and
    /// checkpoint) can so refuse without having written. A [`LogOpenMode::ReadOnly`] log is
    /// never started. (A log created by this call was written by its creation.)
    ///
    /// # Errors
    /// As [`RedoLog::open_mode`], but none of the writes of the start.
    pub fn open_unstarted(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        mode: LogOpenMode,
        accept_loss: bool,
    ) -> Result<(RedoLog, Recovered)> {
        RedoLog::open_inner(fs, dir, cfg, TestSwitches::default(), mode, accept_loss)
    }

    /// Starts a log opened by [`RedoLog::open_unstarted`]: records the new incarnation in the
    /// header (synced), removes a growing log's files past the recovered end (newest first)
    /// and behind the checkpoint's scan, writes and syncs the (empty) restart block, and
    /// starts the flusher thread. Does nothing for a log already started or read-only.
    ///
    /// # Errors
    /// A write, sync or removal failed, or the flusher thread could not start: the log stays
    /// unstarted (a later open scans it again; nothing recovered is lost). A failed write or
    /// sync of the header's slot poisons the log: a later `start` returns that failure
    /// rather than take the slot as written.
    pub fn start(&self) -> Result<()> {
        let h = &self.h;
        let mut pending = h.pending.lock();
        let Some(p) = pending.as_ref() else {
            return Ok(());
        };
        let sh = &h.sh;
        {
            // The slot open prepared (`Slots::last`): the new incarnation.
            let sl = sh.slots.lock();
            sh.put_slot(&sl.header, &sl.last)?;
        }
        {
            let mut w = sh.io.lock();
            if let Some((fi, off, first)) = p.cut {
                w.files.truncate_after(fi, off)?;
                // Files behind the scan start hold nothing recovery needs: one that cannot be
                // unlinked is kept for the first checkpoint, not a refused open.
                if let Err(e) = w.files.remove_before(first) {
                    Counters::add(&sh.stats.unlink_failures, 1);
                    tracing::warn!(error = %e, "could not remove a log file behind the scan start; kept for the first checkpoint");
                }
            }
            w.emit(&sh.ring, p.restart_at, &sh.stats)
                .map_err(|f| LogError::Io(f.err))?;
            w.sync(&sh.stats).map_err(|f| LogError::Io(f.err))?;
        }
        let sh2 = h.sh.clone();
        let t = std::thread::Builder::new()
            .name("keel-log-flusher".into())
            .spawn(move || flusher_main(sh2))
            .map_err(LogError::Thread)?;
        *h.flusher.lock() = Some(t);
        *pending = None;
        sh.closed.store(false, SeqCst);
        Ok(())
    }

    fn open_inner(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        cfg: LogConfig,
        switches: TestSwitches,
        mode: LogOpenMode,
        accept_loss: bool,
    ) -> Result<(RedoLog, Recovered)> {
        cfg.validate()?;
        let read_only = mode == LogOpenMode::ReadOnly;
        let hpath = dir.join(HEADER_FILE);
        if mode == LogOpenMode::CreateIfMissing {
            fs.create_dir_all(dir)?;
        } else if !fs.exists(&hpath)? {
            return Err(LogError::Missing {
                path: hpath,
                what: "the log header",
            });
        }
        let caps = fs.capabilities(dir)?;
        let b = cfg.block_size.bytes();
        if cfg.sync_method == SyncMethod::ODirect {
            let need = caps
                .logical_block_size
                .max(caps.direct_io.map(|d| d.offset).unwrap_or(0));
            if (b as u32) < need {
                return Err(LogError::BlockBelowDeviceBlock {
                    dir: dir.to_path_buf(),
                    block_size: b,
                    logical_block_size: need,
                });
            }
        }
        let atomic_unit = if caps.physical_block_size > 0 {
            caps.physical_block_size
        } else {
            caps.logical_block_size
        };
        // Growing logs are append-only: sealing the tail before each sync makes every durable
        // write extend the file (E4), instead of rewriting the tail block in place.
        let seal = !cfg.files.is_preallocated()
            || match cfg.tail_policy {
                TailPolicy::Auto => b as u32 > atomic_unit,
                TailPolicy::RewriteInPlace => false,
                TailPolicy::SealOnSync => true,
            };
        let opts = OpenOptions::new(FileClass::Log).for_sync_method(cfg.sync_method);
        if !fs.exists(&hpath)? {
            if mode != LogOpenMode::CreateIfMissing {
                return Err(LogError::Missing {
                    path: hpath,
                    what: "the log header",
                });
            }
            create_log(&fs, dir, &cfg, opts)?;
        }
        let header = fs.open(&hpath, &OpenOptions::new(FileClass::Log))?;
        // The header as the device holds it, not as a failed sync left it in the page cache.
        header.drop_cache()?;
        let (st, slot) = read_header(&*header)?;
        if st.block_size as usize != b {
            return Err(mismatch(
                &hpath,
                "log block size",
                st.block_size.to_string(),
                b.to_string(),
            ));
        }
        let (pre, files) = match cfg.files {
            LogFiles::Preallocated { files, .. } => (true, files),
            LogFiles::Growing { .. } => (false, 0),
        };
        let mode = |p: bool| if p { "preallocated" } else { "growing" }.to_string();
        if st.preallocated != pre {
            return Err(mismatch(
                &hpath,
                "log files",
                mode(st.preallocated),
                mode(pre),
            ));
        }
        if st.file_size != cfg.files.file_size() {
            return Err(mismatch(
                &hpath,
                "log file size",
                st.file_size.to_string(),
                cfg.files.file_size().to_string(),
            ));
        }
        if st.files != files {
            return Err(mismatch(
                &hpath,
                "number of log files",
                st.files.to_string(),
                files.to_string(),
            ));
        }
        let geo = st.geometry();
        let p = geo.payload as u64;
        let set = LogFileSet::open(fs.clone(), dir, geo, opts, st.file_size)?;
        // A growing log's files are created in order and removed only from the front (behind
        // the scan start) and from the back (newest first): every file from the scan start's
        // to the newest — present, or recorded by the header as created — must be there. One
        // missing is damage, not a torn tail: the scan would end quietly before the commits it
        // and the files after it held (a deleted newest file leaves no gap at all; a deleted
        // file followed by one holding only a restart block ended the scan without proof of
        // loss).
        let missing = if st.preallocated {
            None
        } else {
            let first = geo.location(slot.scan_start / p).0;
            let last = set.newest().max(slot.newest_file);
            last.and_then(|last| (first..=last).find(|i| set.existing(*i).is_none()))
        };
        let files_lost = match missing {
            Some(i) => {
                let later = set.newest().is_some_and(|n| n > i);
                if !accept_loss {
                    return Err(LogError::Missing {
                        path: set.path(i),
                        what: if later {
                            "a log file between the checkpoint's and the newest (the commits it held would be lost; put it back, or open with accept_log_loss)"
                        } else {
                            "a log file the header records the log had created (the commits it held would be lost; put it back, or open with accept_log_loss)"
                        },
                    });
                }
                let why = if later {
                    "a later log file is present"
                } else {
                    "the header records that the log had created it"
                };
                let what = format!(
                    "{} is missing, though {why}: its groups and any after it were given up",
                    set.path(i).display()
                );
                tracing::warn!(loss = %what, "accepting the loss of durable log data");
                Some(what)
            }
            None => None,
        };

        // The recovery scan.
        let mut groups = Vec::new();
        let end = {
            let mut src = FileSource::new(&set);
            let params = ScanParams {
                geo,
                start: slot.scan_start,
                max_incarnation: slot.incarnation,
                verify: !switches.skip_block_checks,
                lookahead: (cfg.buffer_size.max(LOOKAHEAD_BYTES) / geo.payload) as u64,
            };
            scan(&mut src, &params, &mut |ev| {
                if let Event::Group {
                    start,
                    end,
                    records,
                } = ev
                {
                    if end > slot.checkpoint_lsn {
                        groups.push(RecoveredGroup {
                            start_lsn: Lsn(start),
                            end_lsn: Lsn(end),
                            records,
                        });
                    }
                }
                true
            })?
        };

        // The header records how far the log had been durable (the first sync into each new
        // file of a growing log, each checkpoint): a scan that ends short of it met damage or
        // loss, not a torn tail — a growing log's newest file zeroed, or replaced by one of
        // another moment, opened as a torn tail and lost its acknowledged commits. Every block
        // below the mark was synced, and a synced block is never written again (growing files
        // seal their tail; a preallocated one rewrites it in place only where one block is
        // written whole), so the scan reaches the mark's block on any healthy log.
        let mut end = end;
        if let (None, None, Some(d)) = (&end.corrupt_middle, &files_lost, slot.durable_lsn) {
            if d.div_ceil(p) > end.next_block {
                end.corrupt_middle = Some((
                    end.next_block,
                    format!(
                        "the log header records that every log byte below {} (block {}, in {}) had been made durable",
                        Lsn(d),
                        d.div_ceil(p) - 1,
                        set.path(geo.location(d.div_ceil(p) - 1).0).display()
                    ),
                ));
            }
        }
        let log_loss = match &end.corrupt_middle {
            None => files_lost,
            Some((block, evidence)) => {
                let (fi, off) = geo.location(*block);
                let path = set.path(fi);
                let lsn = Lsn(block.saturating_mul(p));
                if !accept_loss {
                    return Err(LogError::CorruptMiddle {
                        path,
                        block: *block,
                        offset: off,
                        lsn,
                        evidence: evidence.clone(),
                    });
                }
                let what = format!(
                    "block {block} ({} offset {off}, {lsn}) is damaged although {evidence}; everything from {} on was given up ({} complete groups recovered before it)",
                    path.display(),
                    Lsn(end.end),
                    groups.len()
                );
                tracing::warn!(loss = %what, "accepting the loss of durable log data");
                Some(what)
            }
        };

        // A new incarnation, recorded before anything of it is written.
        let incarnation =
            slot.incarnation
                .checked_add(1)
                .ok_or_else(|| LogError::CorruptHeader {
                    path: hpath.clone(),
                    reason: "incarnation counter exhausted".into(),
                })?;
        let seq = slot.seq + 1;
        // A growing log records the newest file that stays once the start cut the files past
        // the recovered end (the slot is written before the cut).
        let newest_file = if st.preallocated {
            None
        } else {
            set.newest_up_to(geo.location(end.next_block).0)
        };
        let new_slot = Slot {
            seq,
            incarnation,
            newest_file,
            // Lowered to the recovered end when a loss was accepted.
            durable_lsn: slot
                .durable_lsn
                .map(|d| d.min(end.next_block.saturating_mul(p))),
            ..slot
        };
        // Written by `start` (never for a read-only log), after the caller's checks.

        let scan_start_block = slot.scan_start / p;
        let m = end.next_block;
        let reserve_blocks = if switches.no_space_reserve {
            0
        } else if st.preallocated {
            let wab = if cfg.sync_method == SyncMethod::ODirect {
                1
            } else {
                (cfg.write_ahead_size / b) as u64
            };
            wab.max(1) + 1
        } else {
            0
        };
        // The check for a log that runs past the space its checkpoint allows uses the least
        // reserve any configuration keeps (2 blocks: an `ODirect` log's), not this opening's:
        // a log written with a smaller write-ahead or another sync method may end closer to
        // the lap than this configuration would let it, and is healthy — its appends wait for
        // the next checkpoint. (It was refused as corrupt until reopened with the old setting:
        // test `log.rs` `a_full_log_reopens_with_a_larger_write_ahead`.)
        const LEAST_RESERVE: u64 = 2;
        if st.preallocated
            && !switches.no_space_reserve
            && m + LEAST_RESERVE > scan_start_block + geo.lap_blocks() + 1
        {
            return Err(LogError::Corrupt {
                path: set.path(geo.location(m).0),
                lsn: Lsn(m * p),
                reason: format!(
                    "the log continues to block {m}, beyond the space the checkpoint at block {scan_start_block} allows"
                ),
            });
        }
        let cut = (!st.preallocated).then(|| {
            let (fi, off) = geo.location(m);
            (fi, off, geo.location(scan_start_block).0)
        });
        let write_ahead = if st.preallocated
            && cfg.sync_method != SyncMethod::ODirect
            && cfg.write_ahead_size > b
        {
            cfg.write_ahead_size as u64
        } else {
            0
        };
        let mut w = Writer::new(
            set,
            geo,
            cfg.sync_method,
            write_ahead,
            m,
            incarnation,
            scan_start_block,
            cfg.buffer_size,
        );
        w.unclamped_padding = switches.no_space_reserve;
        // Version 1 logs keep a durable lag of 0 (no claims), so that builds that read only
        // version 1 never meet a block they reject.
        w.claims_durable = st.version >= 2;
        let stats = Counters::default();
        let ring = Ring::new(cfg.buffer_size);
        // The (empty) restart block is written and synced by `start`.

        let start = m * p;
        let limit = limit_for(&geo, slot.scan_start, reserve_blocks);
        // Version 1 and 2 logs keep plain groups, so that builds that read only those versions
        // never meet a page-ops item.
        let encoding = if st.version >= 3 {
            Encoding::Compact
        } else {
            Encoding::Plain
        };
        let sh = Arc::new(Shared {
            dir: dir.to_path_buf(),
            born: keel_io::os::fork::generation(),
            encoding,
            page_copies: st.version >= 4,
            seal,
            geo,
            reserve_blocks,
            ring,
            resv: Mutex::new(Resv { end: start, limit }),
            space_cv: Condvar::new(),
            reserved: AtomicU64::new(start),
            done: Mutex::new(Done {
                completed: start,
                pending: BTreeMap::new(),
            }),
            completed: AtomicU64::new(start),
            written: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            sig: Mutex::new(Sig::default()),
            completion_cv: Condvar::new(),
            ring_cv: Condvar::new(),
            work_cv: Condvar::new(),
            io: Mutex::new(w),
            io_gen: AtomicU64::new(0),
            ckpt: Mutex::new(Ckpt {
                checkpoint_lsn: slot.checkpoint_lsn,
                scan_start: slot.scan_start,
            }),
            slots: Mutex::new(Slots {
                header,
                last: new_slot,
            }),
            checkpoint_lsn: AtomicU64::new(slot.checkpoint_lsn),
            scan_start: AtomicU64::new(slot.scan_start),
            poison: Poison::new(),
            closed: AtomicBool::new(false),
            stats,
            cfg,
            no_ring_wait: switches.no_ring_wait,
            no_handoff: switches.no_handoff,
            unsynced_max: if switches.no_unsynced_cap {
                u64::MAX
            } else {
                UNSYNCED_MAX
            },
        });
        // Takes no appends until `start` (a read-only log never): no flusher yet.
        sh.closed.store(true, SeqCst);
        let recovered = Recovered {
            checkpoint_lsn: Lsn(slot.checkpoint_lsn),
            scan_start_lsn: Lsn(slot.scan_start),
            groups,
            end_lsn: Lsn(start),
            discarded_bytes: end.discarded_bytes,
            discard_reason: if end.discards.is_empty() {
                None
            } else {
                Some(end.discards.join("; "))
            },
            end_reason: end.stop,
            incarnation,
            log_loss,
            checkpoint_kept: slot.checkpoint_kept,
        };
        Ok((
            RedoLog {
                h: Arc::new(Handle {
                    sh,
                    flusher: Mutex::new(None),
                    pending: Mutex::new((!read_only).then_some(PendingStart {
                        cut,
                        restart_at: m * p,
                    })),
                }),
            },
            recovered,
        ))
    }
}
