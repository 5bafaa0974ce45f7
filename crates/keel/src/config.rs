//! Store configuration: every knob of docs/design.md's table, settable in code or from TOML, validated
//! at open. This is the one configuration schema: the `keel-tpcc` CLI (`--config`, `--set`) and
//! its matrix specs read exactly these keys through [`Config::from_toml_str`].
//!
//! Sizes are written as bytes or human strings (`pool_size = "256MiB"`), durations as human
//! strings (`checkpoint_interval = "5s"`), both parsed by [`crate::human`].

use crate::Error;
use keel_flush::TornPageProtection;
use keel_io::SyncMethod;
use keel_page::{Checksum, PageSize};
use keel_redo_log::{Durability, LogBlockSize, LogConfig, LogFiles};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

use crate::human;

/// How torn pages are prevented or repaired.
///
/// The mode also decides how a B-tree leaf split is logged: with doublewrite and atomic writes
/// (a page write is whole or repaired from the writer's own copy) the new right half is one
/// page-copy record, and the store orders its page writes so that it can be replayed; with
/// full-page writes and no protection it is logged as page bytes (about half a page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TornPage {
    /// InnoDB's doublewrite buffer (batches of `doublewrite_batch` pages).
    #[default]
    Doublewrite,
    /// Linux `RWF_ATOMIC` writes (an error where the file system cannot do them).
    Atomic,
    /// PostgreSQL's full-page writes: the first change after a checkpoint logs the whole page.
    FullPageWrites,
    /// Atomic writes where the device does them in hardware, else doublewrite.
    Auto,
    /// No protection (unsafe; torn pages are detected, never used).
    None,
}

/// Log file layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFileMode {
    /// Zero-filled files reused circularly (no metadata commit per sync).
    #[default]
    Preallocated,
    /// Appended files (every sync also commits the file size), for comparison.
    Growing,
}

/// Every setting of a store. `Config::default()` is a sensible production setup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Page size in bytes: 4096, 8192, 16384, 32768 or 65536. Fixed at creation.
    #[serde(with = "human::size_usize")]
    pub page_size: usize,
    /// Buffer pool size in bytes.
    #[serde(with = "human::size_usize")]
    pub pool_size: usize,
    /// Torn-page protection.
    pub torn_page: TornPage,
    /// Pages per doublewrite batch (1..=4096).
    pub doublewrite_batch: usize,
    /// Skip the torn-page protection for pages redo alone can rebuild (MariaDB MDEV-19738).
    pub init_on_flush_skip: bool,
    /// Redo log block size: 512 or 4096. Fixed at creation.
    pub log_block_size: u32,
    /// Pad partial log writes up to this many bytes (InnoDB's `innodb_log_write_ahead_size`).
    /// No padding is spelled `0` (or, equivalently, the log block size: a write is always whole
    /// blocks); otherwise a power of two of at least the block size.
    #[serde(with = "human::size_usize")]
    pub write_ahead_size: usize,
    /// How the log is made durable.
    pub log_sync: SyncMethod,
    /// Preallocated or growing log files.
    pub log_files: LogFileMode,
    /// Bytes per log file; 0 (the default) sizes the log to the pool when the store is created
    /// ([`Config::new_log_file_size`]: `log_file_count` files holding `pool_size` bytes in
    /// all, within [`AUTO_LOG_MIN`]..=[`AUTO_LOG_MAX`]). Fixed at creation: an existing store
    /// keeps the size it was made with when this is 0, and any other value must match it.
    #[serde(with = "human::size_u64")]
    pub log_file_size: u64,
    /// Number of preallocated log files. With growing files, the log a checkpoint is due at
    /// (`checkpoint_log_fraction` of this many files) — growing files are never preallocated.
    pub log_file_count: u32,
    /// Bytes of the in-memory log buffer (64 KiB to 1 GiB).
    #[serde(with = "human::size_usize")]
    pub log_buffer_size: usize,
    /// Page checksum algorithm. Fixed at creation. `Checksum::None` detects no damaged byte,
    /// and a page torn between its first and last sector passes for whole: the torn-page
    /// protections still repair such a page (the doublewrite recovery compares bytes, and no
    /// page skips the protection), but with `torn_page = None` it goes undetected.
    pub checksum: Checksum,
    /// What a commit waits for.
    pub durability: Durability,
    /// How often `Buffered` syncs and `Lazy` writes the log (`"1s"`; at least
    /// [`MIN_INTERVAL`]).
    #[serde(with = "human::duration")]
    pub flush_interval: Duration,
    /// Wait this long before a log sync so more committers share it (`"0s"`, `"50us"`).
    #[serde(with = "human::duration")]
    pub group_commit_delay: Duration,
    /// Take a checkpoint at least this often (default `"60s"`; log pressure starts one sooner,
    /// at `checkpoint_log_fraction`). Each writes every dirty page, so a short interval rewrites
    /// hot pages often; recovery replays at most about half the log whatever it is. At least
    /// [`MIN_INTERVAL`].
    #[serde(with = "human::duration")]
    pub checkpoint_interval: Duration,
    /// Take a checkpoint when this fraction of the log space is in use (with growing files: of
    /// `log_file_count` × `log_file_size` bytes since the checkpoint).
    pub checkpoint_log_fraction: f64,
    /// Run checkpoints and page cleaning in the threads that use the store instead of in
    /// background threads of their own (default false). The store then starts no page cleaner
    /// and no checkpointer: a write transaction that finds the log past
    /// `checkpoint_log_fraction` takes the checkpoint itself before it begins (as every writer
    /// does past the synchronous point), `checkpoint_interval` is not used, and pages reach the
    /// data file only through checkpoints ([`crate::Store::checkpoint`] too) and eviction. What
    /// one thread does with the store then happens in the same order every run — no timer
    /// decides when a page is written — as SQLite, LMDB and redb work; the crash matrix runs a
    /// share of its cases this way so that a failing seed replays exactly. The log's flusher
    /// thread still runs (`Buffered` and `Lazy` commits are synced by it); a `Sync` commit of a
    /// single writer syncs the log itself.
    pub inline_maintenance: bool,
    /// Open the data file and the doublewrite area with O_DIRECT (default true), so page reads
    /// and writes reach the device instead of being served and absorbed by the OS page cache
    /// (the pool is the only cache, as in InnoDB with `O_DIRECT`). Where the file system cannot
    /// (tmpfs, or an alignment the page size does not meet) the store falls back to buffered
    /// I/O and says why in [`crate::Effective::direct_io_reason`]; it is never an error.
    pub direct_io: bool,
    /// The most memory old page versions may take for read transactions (snapshots) that
    /// started before later commits (default 64 MiB). Past it the oldest snapshots are refused
    /// with [`Error::SnapshotTooOld`] instead of writers stalling or memory growing.
    #[serde(with = "human::size_u64")]
    pub snapshot_budget: u64,
    /// Create the store if the directory holds none (default true). With `false`, opening a
    /// directory without a store is [`Error::NotAStore`] and creates nothing, not even the
    /// directory.
    pub create: bool,
    /// Open read-only (default false): nothing is written, on any file, ever (it works on a
    /// read-only mount); `write()` and `checkpoint()` return [`Error::ReadOnly`]. A store that
    /// needs recovery (redo after the checkpoint, pages to restore from the doublewrite area) is
    /// recovered in memory (`RecoveryReport::in_memory`): reads see every commit, the files
    /// stay as they are. Only when the recovered pages would fill more than 3/4 of the pool is
    /// it refused with [`Error::NeedsRecovery`]. Implies `create = false`.
    /// Takes a shared lock: several read-only opens may coexist, never with a writer.
    pub read_only: bool,
    /// Accept the loss of durable log data (default false; InnoDB's `innodb_force_recovery`
    /// in spirit). Without it, an open whose recovery scan meets a damaged log block in the
    /// middle of durable data — a later valid block proves it had been synced — is refused with
    /// a corruption error naming the file, block and LSN ([`crate::LogError::CorruptMiddle`]).
    /// With it, recovery ends at that block, [`crate::RecoveryReport::log_loss`] says what was
    /// given up, and a warning is logged. Commits after the damaged block are lost; data pages
    /// already written with their changes keep LSNs above the recovered log end and are
    /// refused when read ([`crate::FlushError::PageLsnInFuture`]), never returned as data.
    /// Implies `read_only` (and so `create = false`): new commits would continue the log below
    /// the LSNs of those pages, and once past them such a page would be read as valid again.
    /// Nothing is written, so an open without it still refuses the damaged log. Use it to
    /// salvage what can be read, then copy the data into a new store.
    pub accept_log_loss: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            page_size: 16384,
            pool_size: 128 << 20,
            torn_page: TornPage::Doublewrite,
            doublewrite_batch: 128,
            init_on_flush_skip: true,
            log_block_size: 4096,
            write_ahead_size: 4096,
            log_sync: SyncMethod::Fdatasync,
            log_files: LogFileMode::Preallocated,
            log_file_size: 0,
            log_file_count: 2,
            log_buffer_size: 8 << 20,
            checksum: Checksum::Crc32c,
            durability: Durability::Sync,
            flush_interval: Duration::from_secs(1),
            group_commit_delay: Duration::ZERO,
            checkpoint_interval: Duration::from_secs(60),
            checkpoint_log_fraction: 0.5,
            inline_maintenance: false,
            direct_io: true,
            snapshot_budget: 64 << 20,
            create: true,
            read_only: false,
            accept_log_loss: false,
        }
    }
}

/// The shortest `checkpoint_interval` and `flush_interval` accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The largest configuration file [`Config::from_toml_file`] reads (1 MiB; a full
/// configuration is under 2 KiB).
pub const MAX_TOML_BYTES: u64 = 1 << 20;

/// The least a pool-sized log holds (all files together): 2 × 64 MiB, what a store with the
/// default 128 MiB pool gets, as before pool sizing.
pub const AUTO_LOG_MIN: u64 = 128 << 20;
/// The most a pool-sized log holds (all files together), as fjall's default journal budget
/// (512 MiB) and PostgreSQL's `max_wal_size` (1 GB) bound theirs.
pub const AUTO_LOG_MAX: u64 = 1 << 30;

/// The bytes of the log header under `dir` (the store directory), read through `fs`, and its
/// path.
pub(crate) fn log_header_bytes(
    fs: &dyn keel_io::FileSystem,
    dir: &Path,
) -> Result<(std::path::PathBuf, Vec<u8>), Error> {
    use keel_io::{FileClass, OpenOptions};
    use keel_redo_log::inspect::{HEADER_BYTES, HEADER_FILE};
    let path = dir.join(crate::LOG_DIR).join(HEADER_FILE);
    let f = fs.open(&path, &OpenOptions::new(FileClass::Other).read_only(true))?;
    let mut bytes = vec![0u8; HEADER_BYTES];
    f.read_exact_at(&mut bytes, 0)?;
    Ok((path, bytes))
}

/// Reads the header of the log under `dir` (the store directory) through `fs`.
fn read_log_header(
    fs: &dyn keel_io::FileSystem,
    dir: &Path,
) -> Result<keel_redo_log::inspect::StaticHeader, Error> {
    let (path, bytes) = log_header_bytes(fs, dir)?;
    Ok(keel_redo_log::inspect::decode_header(&path, &bytes)?.0)
}

/// A refusal of the log's own configuration check, told in this schema's keys (it named the
/// log crate's fields — `buffer_size`, `file_size`, "Preallocated" — that no `Config` or
/// `--set` has: a tester).
fn in_config_keys(reason: &str) -> String {
    if reason == "Preallocated needs at least one file" {
        return "log_file_count 0: a preallocated log needs at least one file".into();
    }
    if reason.starts_with("the log holds") || reason.contains(" files of ") {
        return format!("log_file_size × log_file_count: {reason}");
    }
    for (theirs, ours) in [
        ("buffer_size ", "log_buffer_size "),
        ("file_size ", "log_file_size "),
    ] {
        if let Some(rest) = reason.strip_prefix(theirs) {
            return format!("{ours}{rest}");
        }
    }
    reason.to_string()
}

impl Config {
    /// The bytes per log file a store created with this configuration gets: `log_file_size`,
    /// or when it is 0, the pool's size clamped to [`AUTO_LOG_MIN`]..=[`AUTO_LOG_MAX`] and
    /// split over `log_file_count` files, rounded down to whole MiB — but at least 1 MiB per
    /// file, so with more than 1,024 files the log holds more than [`AUTO_LOG_MAX`].
    ///
    /// Why the pool: a log much smaller than what the pool can hold dirty makes checkpoints
    /// write pages the pool could have kept, only for the next transactions to dirty them
    /// again. A bulk load of 2M random keys into a store with a 928 MiB pool wrote 1,650
    /// device bytes per row with a 2 × 64 MiB log and 573 with a pool-sized one, close
    /// included (docs/design.md, "The log sized to the pool"). The cost is disk space (the
    /// files are zero-filled at creation) and a longer replay after a crash.
    pub fn new_log_file_size(&self) -> u64 {
        if self.log_file_size != 0 {
            return self.log_file_size;
        }
        let total = (self.pool_size as u64).clamp(AUTO_LOG_MIN, AUTO_LOG_MAX);
        // Whole MiB: a multiple of every valid block and write-ahead size (at most 1 MiB).
        let unit = 1u64 << 20;
        let per_file = total / u64::from(self.log_file_count.max(1));
        (per_file / unit * unit).max(unit)
    }

    /// Resolves `log_file_size` 0 for opening the store in `dir` through `fs`: for a store
    /// being created, [`new_log_file_size`](Self::new_log_file_size); for an existing one, the
    /// size its log header records (if the header cannot be read, the new-store size, and
    /// opening the log reports what is wrong with it).
    pub(crate) fn resolve_log_file_size(
        &mut self,
        fs: &dyn keel_io::FileSystem,
        dir: &Path,
        created: bool,
    ) {
        if self.log_file_size != 0 {
            return;
        }
        self.log_file_size = if created {
            self.new_log_file_size()
        } else {
            read_log_header(fs, dir).map_or_else(|_| self.new_log_file_size(), |h| h.file_size)
        };
    }

    /// The settings fixed when the store in `dir` was created, read from its files: page size
    /// and checksum from the identity file (`store.keel`), log block size, file layout, file
    /// size and file count from the log header, and the doublewrite batch size from the
    /// doublewrite area (`torn_page` is `Doublewrite` when the store has an area, else
    /// `FullPageWrites`, which protects a read-write open without creating or reformatting an
    /// area — `None` ran such opens unprotected, whatever protection the store was made with);
    /// every other field has its default. Use it to open a store whatever settings it was made
    /// with (the `keel` tool does).
    ///
    /// # Errors
    ///
    /// The identity file or the log header cannot be read, is damaged, or is not a Keel
    /// store's (the error names the file).
    pub fn for_store(dir: &Path) -> Result<Config, Error> {
        use keel_io::{FileClass, FileSystem, OpenOptions};
        let id = crate::meta::read_identity(dir)?;
        let fs = keel_io::OsFs::new(keel_io::Backend::Pwrite);
        let log = read_log_header(&fs, dir)?;
        let mut c = Config {
            page_size: id.page_size,
            checksum: id.checksum,
            log_block_size: log.block_size,
            log_file_size: log.file_size,
            ..Config::default()
        };
        if log.preallocated {
            c.log_files = LogFileMode::Preallocated;
            c.log_file_count = log.files;
        } else {
            c.log_files = LogFileMode::Growing;
        }
        // The doublewrite area's geometry, where the store has one: opening with the same batch
        // size reads the area as it is, where another size would reformat it. Without an area
        // (or with one whose header does not decode), the protection that needs none.
        let area = dir.join(keel_flush::DOUBLEWRITE_FILE_NAME);
        c.torn_page = TornPage::FullPageWrites;
        if fs.exists(&area)? {
            let f = fs.open(&area, &OpenOptions::new(FileClass::Other).read_only(true))?;
            let mut h = vec![0u8; keel_flush::AREA_HEADER_BYTES];
            if f.len()? >= h.len() as u64 && f.read_exact_at(&mut h, 0).is_ok() {
                if let Some(batch) = keel_flush::area_batch_pages(&h) {
                    c.torn_page = TornPage::Doublewrite;
                    c.doublewrite_batch = batch;
                }
            }
        }
        Ok(c)
    }

    /// Parses TOML (unknown keys are an error, so a typo never goes unnoticed).
    pub fn from_toml_str(text: &str) -> Result<Config, Error> {
        toml::from_str(text).map_err(|e| Error::Config(format!("bad TOML configuration: {e}")))
    }

    /// Reads a TOML file. A file past [`MAX_TOML_BYTES`] (`/dev/zero`, a log file named by
    /// mistake) is refused rather than read to the end (`read_to_string` never returned: a
    /// tester). A FIFO is read as `cat` reads one — `--config <(...)` and a pipe work — so one
    /// that no process writes waits for a writer.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the file if it cannot be opened or read, is larger than
    /// [`MAX_TOML_BYTES`], or is not a valid configuration.
    pub fn from_toml_file(path: &Path) -> Result<Config, Error> {
        use std::io::Read;
        let cannot =
            |e: std::io::Error| Error::Config(format!("cannot read {}: {e}", path.display()));
        let file = std::fs::File::open(path).map_err(cannot)?;
        // Bytes first, the size checked before the text: the bound can cut a character in two,
        // and an oversized file was then called "not valid UTF-8" (a tester).
        let mut bytes = Vec::new();
        file.take(MAX_TOML_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        if bytes.len() as u64 > MAX_TOML_BYTES {
            return Err(Error::Config(format!(
                "{} is larger than {MAX_TOML_BYTES} bytes: not a configuration file",
                path.display()
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            Error::Config(format!(
                "{}: not a configuration file (not valid UTF-8: {e})",
                path.display()
            ))
        })?;
        Config::from_toml_str(&text).map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// This configuration as TOML. A value TOML cannot hold (an integer past `i64::MAX`) gives
    /// text that [`from_toml_str`](Self::from_toml_str) refuses, naming the cause — never one
    /// that reads back as the defaults (it was a comment only, which did: a tester).
    pub fn to_toml(&self) -> String {
        self.try_to_toml().unwrap_or_else(|e| {
            format!("# {e}\ncannot_serialise = true # refused on reading: not a setting\n")
        })
    }

    /// This configuration as TOML.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if a value cannot be written as TOML (an integer past `i64::MAX`).
    pub fn try_to_toml(&self) -> Result<String, Error> {
        toml::to_string(self)
            .map_err(|e| Error::Config(format!("cannot write this configuration as TOML: {e}")))
    }

    /// Checks every setting; the error says which and why.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Config(m));
        let Some(ps) = PageSize::from_bytes(self.page_size) else {
            return bad(format!(
                "page_size {} is not one of 4096, 8192, 16384, 32768, 65536",
                self.page_size
            ));
        };
        if self.pool_size < 16 * ps.bytes() {
            return bad(format!(
                "pool_size {} holds fewer than 16 pages of {} bytes",
                self.pool_size, self.page_size
            ));
        }
        if !(1..=4096).contains(&self.doublewrite_batch) {
            return bad(format!(
                "doublewrite_batch {} must be 1..=4096",
                self.doublewrite_batch
            ));
        }
        if self.log_block_size != 512 && self.log_block_size != 4096 {
            return bad(format!(
                "log_block_size {} must be 512 or 4096",
                self.log_block_size
            ));
        }
        if self.write_ahead_size != 0
            && (!self.write_ahead_size.is_power_of_two()
                || self.write_ahead_size < self.log_block_size as usize)
        {
            return bad(format!(
                "write_ahead_size {} must be 0 (no padding) or a power of two of at least \
                 log_block_size ({})",
                self.write_ahead_size, self.log_block_size
            ));
        }
        if !(0.05..=0.95).contains(&self.checkpoint_log_fraction) {
            return bad(format!(
                "checkpoint_log_fraction {} must be within 0.05..=0.95",
                self.checkpoint_log_fraction
            ));
        }
        // Below a millisecond the checkpointer and the flusher only spin (1 ns was accepted:
        // ~90,000 idle checkpoints a second, a tester).
        for (name, d) in [
            ("checkpoint_interval", self.checkpoint_interval),
            ("flush_interval", self.flush_interval),
        ] {
            if d < MIN_INTERVAL {
                return bad(format!(
                    "{name} {d:?} is below the minimum of {MIN_INTERVAL:?}"
                ));
            }
        }
        self.log_config().validate().map_err(|e| match e {
            keel_redo_log::LogError::InvalidConfig { reason } => {
                Error::Config(in_config_keys(&reason))
            }
            other => Error::Config(other.to_string()),
        })?;
        Ok(())
    }

    /// The page size.
    pub fn page_size(&self) -> PageSize {
        PageSize::from_bytes(self.page_size).unwrap_or_default()
    }

    /// The redo log's configuration.
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            block_size: if self.log_block_size == 512 {
                LogBlockSize::B512
            } else {
                LogBlockSize::B4096
            },
            // One meaning of "no padding": 0 is the block size (whole blocks only).
            write_ahead_size: if self.write_ahead_size == 0 {
                self.log_block_size as usize
            } else {
                self.write_ahead_size
            },
            sync_method: self.log_sync,
            files: match self.log_files {
                LogFileMode::Preallocated => LogFiles::Preallocated {
                    file_size: self.new_log_file_size(),
                    files: self.log_file_count,
                },
                LogFileMode::Growing => LogFiles::Growing {
                    file_size: self.new_log_file_size(),
                },
            },
            buffer_size: self.log_buffer_size,
            durability: self.durability,
            flush_interval: self.flush_interval,
            group_commit_delay: self.group_commit_delay,
            ..LogConfig::default()
        }
    }

    /// The page writer's protection setting.
    pub fn protection(&self) -> TornPageProtection {
        match self.torn_page {
            TornPage::Doublewrite => TornPageProtection::Doublewrite {
                batch_pages: self.doublewrite_batch,
            },
            TornPage::Atomic => TornPageProtection::Atomic,
            TornPage::FullPageWrites => TornPageProtection::FullPageWrites,
            TornPage::Auto => TornPageProtection::Auto,
            TornPage::None => TornPageProtection::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_of_log_settings_name_the_config_keys() {
        for (config, key) in [
            (
                Config {
                    log_buffer_size: 65_535,
                    ..Config::default()
                },
                "log_buffer_size",
            ),
            (
                Config {
                    log_file_size: 1000,
                    ..Config::default()
                },
                "log_file_size",
            ),
            (
                Config {
                    log_file_size: 12_288,
                    ..Config::default()
                },
                "log_file_size",
            ),
            (
                Config {
                    log_file_count: 0,
                    ..Config::default()
                },
                "log_file_count",
            ),
        ] {
            let e = config.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn intervals_below_a_millisecond_are_refused() {
        for f in [
            |c: &mut Config, d| c.checkpoint_interval = d,
            |c: &mut Config, d| c.flush_interval = d,
        ] {
            let mut c = Config::default();
            f(&mut c, Duration::from_nanos(1));
            let e = c.validate().unwrap_err();
            assert!(e.to_string().contains("minimum"), "{e}");
            f(&mut c, MIN_INTERVAL);
            c.validate().unwrap();
        }
    }

    #[test]
    fn a_configuration_toml_cannot_hold_never_reads_back_as_the_defaults() {
        let c = Config {
            doublewrite_batch: usize::MAX,
            ..Config::default()
        };
        let e = c.try_to_toml().unwrap_err();
        assert!(e.to_string().contains("TOML"), "{e}");
        let text = c.to_toml();
        assert!(Config::from_toml_str(&text).is_err(), "{text}");
        let ok = Config::default();
        assert_eq!(Config::from_toml_str(&ok.to_toml()).unwrap(), ok);
    }

    #[test]
    fn a_zero_log_file_size_is_the_pool_split_over_the_files_within_bounds() {
        let c = |pool: usize, files: u32| Config {
            pool_size: pool,
            log_file_count: files,
            ..Config::default()
        };
        // The default pool keeps the old default log (2 × 64 MiB); smaller pools get no less.
        assert_eq!(Config::default().new_log_file_size(), 64 << 20);
        assert_eq!(c(4 << 20, 2).new_log_file_size(), 64 << 20);
        // Between the bounds, the pool's size over the files, rounded down to whole MiB.
        assert_eq!(c(928 << 20, 2).new_log_file_size(), 464 << 20);
        assert_eq!(c((300 << 20) + 12345, 3).new_log_file_size(), 100 << 20);
        assert_eq!(c(1 << 30, 3).new_log_file_size(), 341 << 20);
        // Past the upper bound, at most 1 GiB in all.
        assert_eq!(c(8 << 30, 2).new_log_file_size(), 512 << 20);
        let w = Config {
            write_ahead_size: 1 << 20,
            ..c((200 << 20) + 4096, 2)
        };
        assert_eq!(w.new_log_file_size(), 100 << 20);
        // An explicit size is kept as it is.
        let e = Config {
            log_file_size: 4 << 20,
            ..c(1 << 30, 2)
        };
        assert_eq!(e.new_log_file_size(), 4 << 20);
        for cfg in [c(928 << 20, 2), c(1 << 30, 3), w] {
            cfg.validate().unwrap();
        }
    }

    #[test]
    fn a_config_file_past_the_size_bound_is_refused_and_a_pipe_is_read() {
        let dir = tempfile::tempdir().unwrap();
        // Read on a thread: without the bound, /dev/zero was read until memory ran out.
        let read = |path: std::path::PathBuf| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(Config::from_toml_file(&path).map_err(|e| e.to_string()));
            });
            rx.recv_timeout(Duration::from_secs(20))
                .expect("from_toml_file hangs")
        };
        // A FIFO with a writer (process substitution, a pipe) is read.
        let fifo = dir.path().join("keel.toml");
        if std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success())
        {
            let writer = {
                let fifo = fifo.clone();
                std::thread::spawn(move || std::fs::write(fifo, Config::default().to_toml()))
            };
            assert_eq!(read(fifo).unwrap(), Config::default());
            writer.join().unwrap().unwrap();
        } else {
            println!("SKIPPED: mkfifo is not available; the pipe case is untested");
        }
        let e = read("/dev/zero".into()).unwrap_err();
        assert!(e.contains("/dev/zero") && e.contains("larger than"), "{e}");
        // Past the bound with a character cut in two by it: still "larger than", not "not
        // valid UTF-8" (a tester).
        let big = dir.path().join("big.toml");
        let text = format!("# {}\n", "é".repeat(MAX_TOML_BYTES as usize / 2 + 1));
        std::fs::write(&big, text).unwrap();
        let e = read(big).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        let latin1 = dir.path().join("latin1.toml");
        std::fs::write(&latin1, b"# caf\xe9\n").unwrap();
        let e = read(latin1).unwrap_err();
        assert!(e.contains("latin1.toml") && e.contains("UTF-8"), "{e}");
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, Config::default().to_toml()).unwrap();
        assert_eq!(read(ok).unwrap(), Config::default());
    }

    #[test]
    fn toml_round_trip_and_typos_are_errors() {
        let c = Config {
            torn_page: TornPage::FullPageWrites,
            log_block_size: 512,
            ..Config::default()
        };
        let back = Config::from_toml_str(&c.to_toml()).unwrap();
        assert_eq!(back, c);
        let partial =
            Config::from_toml_str("torn_page = \"atomic\"\nlog_sync = \"o_dsync\"\n").unwrap();
        assert_eq!(partial.torn_page, TornPage::Atomic);
        assert_eq!(partial.log_sync, SyncMethod::ODsync);
        assert_eq!(partial.page_size, 16384);
        let err = Config::from_toml_str("torn_pages = \"none\"").unwrap_err();
        assert!(err.to_string().contains("torn_pages"), "{err}");
    }

    #[test]
    fn sizes_and_durations_take_human_strings() {
        let c = Config::from_toml_str(
            "pool_size = \"256MiB\"\npage_size = \"8KiB\"\nlog_file_size = 1048576\n\
             checkpoint_interval = \"1.5s\"\ngroup_commit_delay = \"50us\"\n\
             write_ahead_size = 0\n",
        )
        .unwrap();
        assert_eq!(c.pool_size, 256 << 20);
        assert_eq!(c.page_size, 8192);
        assert_eq!(c.log_file_size, 1 << 20);
        assert_eq!(c.checkpoint_interval, Duration::from_millis(1500));
        assert_eq!(c.group_commit_delay, Duration::from_micros(50));
        c.validate().unwrap();
        // One meaning of "no padding": 0 and the block size give the same log configuration.
        let same = Config {
            write_ahead_size: c.log_block_size as usize,
            ..c.clone()
        };
        assert_eq!(c.log_config(), same.log_config());
        let text = c.to_toml();
        assert!(text.contains("pool_size = \"256MiB\""), "{text}");
        assert!(text.contains("checkpoint_interval = \"1500ms\""), "{text}");
        assert_eq!(Config::from_toml_str(&text).unwrap(), c);
        for (bad, word) in [
            ("checkpoint_interval = 5", "no unit"),
            ("pool_size = \"12 parsecs\"", "parsecs"),
            ("flush_interval = \"0s\"", "flush_interval"),
            ("checkpoint_interval_ms = 5000", "checkpoint_interval_ms"),
        ] {
            let e = Config::from_toml_str(bad)
                .and_then(|c| c.validate())
                .unwrap_err()
                .to_string();
            assert!(e.contains(word), "{bad}: {e}");
        }
    }

    #[test]
    fn validation_names_the_bad_setting() {
        for (c, word) in [
            (
                Config {
                    page_size: 5000,
                    ..Config::default()
                },
                "page_size",
            ),
            (
                Config {
                    log_block_size: 1024,
                    ..Config::default()
                },
                "log_block_size",
            ),
            (
                Config {
                    write_ahead_size: 512,
                    ..Config::default()
                },
                "write_ahead_size",
            ),
            (
                Config {
                    doublewrite_batch: 0,
                    ..Config::default()
                },
                "doublewrite_batch",
            ),
            (
                Config {
                    pool_size: 4096,
                    ..Config::default()
                },
                "pool_size",
            ),
        ] {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(word), "{e}");
        }
        Config::default().validate().unwrap();
    }
}
