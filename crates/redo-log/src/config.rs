//! [`LogConfig`] and its parts.

use crate::error::{LogError, Result};
use keel_io::SyncMethod;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Size of one log block, fixed when the log is created and stored in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum LogBlockSize {
    /// 512-byte blocks (classic InnoDB).
    #[serde(rename = "512")]
    B512,
    /// 4096-byte blocks (Percona's `innodb_log_block_size = 4096`, experiment E5).
    #[default]
    #[serde(rename = "4096")]
    B4096,
}

impl LogBlockSize {
    /// Both sizes.
    pub const ALL: [LogBlockSize; 2] = [LogBlockSize::B512, LogBlockSize::B4096];

    /// The size in bytes.
    pub const fn bytes(self) -> usize {
        match self {
            LogBlockSize::B512 => 512,
            LogBlockSize::B4096 => 4096,
        }
    }

    /// The block size with this many bytes.
    pub fn from_bytes(bytes: usize) -> Option<LogBlockSize> {
        match bytes {
            512 => Some(LogBlockSize::B512),
            4096 => Some(LogBlockSize::B4096),
            _ => None,
        }
    }
}

/// How the log's files are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFiles {
    /// `files` files of `file_size` bytes each, zero-filled at creation and reused circularly: a
    /// write never grows a file, so `fdatasync` needs no metadata commit (E4). The log holds at
    /// most about `files * file_size` bytes between the checkpoint and the end; appenders wait for
    /// [`crate::RedoLog::checkpoint`] when it is full.
    Preallocated {
        /// Bytes per file (a multiple of the block size and of `write_ahead_size`).
        file_size: u64,
        /// Number of files (at least 1).
        files: u32,
    },
    /// Files that grow by appending; a new file is started when one reaches `file_size`, and files
    /// wholly before the checkpoint are deleted. Append-only: a partly filled tail block is sealed
    /// before each sync (whatever the [`TailPolicy`]), so every durable write extends the file and
    /// every sync also commits the file size (for comparison with `Preallocated`, as in E4).
    /// Never full.
    Growing {
        /// Bytes per file before the next one is started (a multiple of the block size).
        file_size: u64,
    },
}

impl Default for LogFiles {
    fn default() -> Self {
        LogFiles::Preallocated {
            file_size: 64 << 20,
            files: 2,
        }
    }
}

impl LogFiles {
    /// Bytes per file.
    pub fn file_size(&self) -> u64 {
        match *self {
            LogFiles::Preallocated { file_size, .. } | LogFiles::Growing { file_size } => file_size,
        }
    }

    /// Whether the files are preallocated.
    pub fn is_preallocated(&self) -> bool {
        matches!(self, LogFiles::Preallocated { .. })
    }
}

/// When a commit counts as done (see [`crate::RedoLog::wait_committed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// The commit waits until the log is durable up to its LSN (`innodb_flush_log_at_trx_commit
    /// = 1`). The flusher writes and syncs as soon as anyone waits.
    #[default]
    Sync,
    /// The commit waits until its group is written to the OS; the log is synced every
    /// `flush_interval` (`innodb_flush_log_at_trx_commit = 2`). An OS crash may lose up to one
    /// interval of commits; a process crash loses none.
    Buffered,
    /// The commit does not wait; the log is written and synced every `flush_interval`
    /// (`innodb_flush_log_at_trx_commit = 0`).
    Lazy,
}

/// What to do with a partly filled tail block that is about to be synced (preallocated files;
/// growing files always seal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TailPolicy {
    /// `RewriteInPlace` when the log block is no larger than the device's physical block (a
    /// write of one block is then all-or-nothing under the fault model), else `SealOnSync`.
    #[default]
    Auto,
    /// The tail block is rewritten in place as it fills (InnoDB). Safe only if one block is
    /// written atomically by the device: a torn rewrite would destroy groups already durable in
    /// that block.
    RewriteInPlace,
    /// Before a sync, the rest of a partly filled tail block is filled with padding (a filler),
    /// so a block that holds durable data is never written again. Costs log space, never
    /// durability.
    SealOnSync,
}

/// Everything configurable about the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogConfig {
    /// Log block size. Stored in the log header at creation; opening with another size is an
    /// error.
    pub block_size: LogBlockSize,
    /// A write that ends inside a `write_ahead_size`-aligned region is padded with zeros to the
    /// region's end, so the OS never has to read a page before writing it (InnoDB's
    /// `innodb_log_write_ahead_size`, E5). A power of two, at least the block size; equal to the
    /// block size: no padding. Applies to `Preallocated` files written through the page cache
    /// (appends and O_DIRECT writes never read).
    pub write_ahead_size: usize,
    /// How writes are made durable.
    pub sync_method: SyncMethod,
    /// File layout (stored in the log header).
    pub files: LogFiles,
    /// Bytes of the in-memory log buffer (64 KiB to 1 GiB). Appenders wait (never fail) while
    /// it is full.
    pub buffer_size: usize,
    /// What a commit waits for.
    pub durability: Durability,
    /// How often `Buffered` syncs and `Lazy` writes and syncs (also the longest time appended data
    /// stays unsynced in `Sync` mode when nobody waits for it).
    pub flush_interval: Duration,
    /// Before a sync, wait this long so more committers join it (PostgreSQL `commit_delay`;
    /// at most one second).
    pub group_commit_delay: Duration,
    /// Partly filled tail blocks (see [`TailPolicy`]).
    pub tail_policy: TailPolicy,
    /// A thread blocked in `wait_durable` / `flush_to` does the write and sync itself when no
    /// other thread is doing one (it then leads the group: everything buffered goes into its
    /// sync, and every waiter it covers is woken). `false`: only the flusher thread does I/O and
    /// blocked threads just wait for it (one more thread hand-off per commit).
    pub waiter_flush: bool,
    /// A thread waiting for another thread's write and sync first spins (yielding the CPU) for
    /// up to this long before it sleeps (InnoDB's spin-then-wait). Zero (the default): sleep at
    /// once. Measured with 16 committers on 2 cores, a 50 µs spin doubled the CPU time per
    /// commit (≈10 µs vs ≈5.7 µs) and stretched each sync (the syncing thread waits for a CPU),
    /// for ≈15% fewer commits/s; since a waiter sleeps on its own parker and is woken only
    /// when its commit is durable, sleeping costs one wakeup per commit.
    pub spin_before_sleep: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            block_size: LogBlockSize::default(),
            write_ahead_size: 4096,
            sync_method: SyncMethod::Fdatasync,
            files: LogFiles::default(),
            buffer_size: 4 << 20,
            durability: Durability::Sync,
            flush_interval: Duration::from_secs(1),
            group_commit_delay: Duration::ZERO,
            tail_policy: TailPolicy::Auto,
            waiter_flush: true,
            spin_before_sleep: Duration::ZERO,
        }
    }
}

/// Smallest log buffer accepted.
pub(crate) const MIN_BUFFER: usize = 64 << 10;
/// The longest group-commit delay.
pub(crate) const MAX_GROUP_COMMIT_DELAY: Duration = Duration::from_secs(1);
/// The largest log buffer (it is allocated whole at open; InnoDB's largest is 4 GiB).
pub(crate) const MAX_BUFFER: usize = 1 << 30;

impl LogConfig {
    /// Checks the settings that do not depend on the file system.
    pub fn validate(&self) -> Result<()> {
        let b = self.block_size.bytes();
        let bad = |reason: String| Err(LogError::InvalidConfig { reason });
        if !self.write_ahead_size.is_power_of_two() || self.write_ahead_size < b {
            return bad(format!(
                "write_ahead_size {} must be a power of two and at least the block size {b}",
                self.write_ahead_size
            ));
        }
        if self.write_ahead_size > (1 << 20) {
            return bad(format!(
                "write_ahead_size {} is larger than 1 MiB",
                self.write_ahead_size
            ));
        }
        if self.buffer_size < MIN_BUFFER {
            return bad(format!(
                "buffer_size {} is below the minimum of {MIN_BUFFER} bytes",
                self.buffer_size
            ));
        }
        if self.buffer_size > MAX_BUFFER {
            return bad(format!(
                "buffer_size {} is above the maximum of {MAX_BUFFER} bytes (1 GiB)",
                self.buffer_size
            ));
        }
        let fs = self.files.file_size();
        if fs == 0 || !fs.is_multiple_of(b as u64) {
            return bad(format!(
                "file_size {fs} must be a non-zero multiple of the block size {b}"
            ));
        }
        if let LogFiles::Preallocated { file_size, files } = self.files {
            if files == 0 {
                return bad("Preallocated needs at least one file".into());
            }
            if file_size % self.write_ahead_size as u64 != 0 {
                return bad(format!(
                    "file_size {file_size} must be a multiple of write_ahead_size {}",
                    self.write_ahead_size
                ));
            }
            let Some(total) = (file_size / b as u64).checked_mul(files as u64) else {
                return bad(format!(
                    "{files} files of {file_size} bytes overflow the log's block numbers"
                ));
            };
            let pad = (self.write_ahead_size / b) as u64;
            if total < pad + 8 {
                return bad(format!(
                    "the log holds {total} blocks; at least {} are needed with write_ahead_size {}",
                    pad + 8,
                    self.write_ahead_size
                ));
            }
        } else if fs < 2 * b as u64 {
            return bad(format!("file_size {fs} must hold at least two blocks"));
        }
        if self.flush_interval.is_zero() {
            return bad("flush_interval must be positive".into());
        }
        // Each sync waits this long first, with the writer held: past a second every commit
        // would stall (MySQL's `binlog_group_commit_sync_delay` stops at one second too).
        if self.group_commit_delay > MAX_GROUP_COMMIT_DELAY {
            return bad(format!(
                "group_commit_delay {:?} is above the maximum of {MAX_GROUP_COMMIT_DELAY:?}",
                self.group_commit_delay
            ));
        }
        Ok(())
    }
}
