//! Cheap I/O counters per file class.
//!
//! Every backend ([`crate::OsFs`], `SimFs`) counts each request once, when it completes
//! successfully: a batch of N writes counts N writes. Relaxed atomics: counters are statistics,
//! never used for synchronisation.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a file is for; counters are kept per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileClass {
    /// The data file: pages at their home location.
    Data,
    /// The doublewrite area.
    Doublewrite,
    /// Redo log files.
    Log,
    /// Anything else (headers, probes, benchmarks).
    Other,
}

impl FileClass {
    /// Every class.
    pub const ALL: [FileClass; 4] = [
        FileClass::Data,
        FileClass::Doublewrite,
        FileClass::Log,
        FileClass::Other,
    ];

    fn index(self) -> usize {
        match self {
            FileClass::Data => 0,
            FileClass::Doublewrite => 1,
            FileClass::Log => 2,
            FileClass::Other => 3,
        }
    }
}

#[derive(Default, Debug)]
struct ClassCounters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    atomic_writes: AtomicU64,
    syncs: AtomicU64,
}

/// Live counters, shared by every file of one file system.
#[derive(Default, Debug)]
pub struct IoCounters {
    classes: [ClassCounters; 4],
}

/// A copy of one class's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassStats {
    /// Read requests completed.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write requests completed (atomic writes included).
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Of `writes`, how many were RWF_ATOMIC writes.
    pub atomic_writes: u64,
    /// Syncs (fsync or fdatasync) completed.
    pub syncs: u64,
}

impl ClassStats {
    /// `self - earlier`, field by field (saturating).
    pub fn since(&self, earlier: &ClassStats) -> ClassStats {
        ClassStats {
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            writes: self.writes.saturating_sub(earlier.writes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            atomic_writes: self.atomic_writes.saturating_sub(earlier.atomic_writes),
            syncs: self.syncs.saturating_sub(earlier.syncs),
        }
    }
}

/// A copy of all counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoStats {
    /// The data file.
    pub data: ClassStats,
    /// The doublewrite area.
    pub doublewrite: ClassStats,
    /// The redo log.
    pub log: ClassStats,
    /// Everything else.
    pub other: ClassStats,
}

impl IoStats {
    /// The counters of one class.
    pub fn class(&self, class: FileClass) -> &ClassStats {
        match class {
            FileClass::Data => &self.data,
            FileClass::Doublewrite => &self.doublewrite,
            FileClass::Log => &self.log,
            FileClass::Other => &self.other,
        }
    }

    /// `self - earlier`, class by class.
    pub fn since(&self, earlier: &IoStats) -> IoStats {
        IoStats {
            data: self.data.since(&earlier.data),
            doublewrite: self.doublewrite.since(&earlier.doublewrite),
            log: self.log.since(&earlier.log),
            other: self.other.since(&earlier.other),
        }
    }
}

impl IoCounters {
    /// Counts one completed read of `bytes`.
    pub fn read(&self, class: FileClass, bytes: usize) {
        let c = &self.classes[class.index()];
        c.reads.fetch_add(1, Ordering::Relaxed);
        c.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts one completed write of `bytes`.
    pub fn write(&self, class: FileClass, bytes: usize) {
        let c = &self.classes[class.index()];
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.write_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts one completed atomic write of `bytes` (also counted as a write).
    pub fn atomic_write(&self, class: FileClass, bytes: usize) {
        self.write(class, bytes);
        self.classes[class.index()]
            .atomic_writes
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one completed sync.
    pub fn sync(&self, class: FileClass) {
        self.classes[class.index()]
            .syncs
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of all counters.
    pub fn snapshot(&self) -> IoStats {
        let get = |class: FileClass| {
            let c = &self.classes[class.index()];
            ClassStats {
                reads: c.reads.load(Ordering::Relaxed),
                read_bytes: c.read_bytes.load(Ordering::Relaxed),
                writes: c.writes.load(Ordering::Relaxed),
                write_bytes: c.write_bytes.load(Ordering::Relaxed),
                atomic_writes: c.atomic_writes.load(Ordering::Relaxed),
                syncs: c.syncs.load(Ordering::Relaxed),
            }
        };
        IoStats {
            data: get(FileClass::Data),
            doublewrite: get(FileClass::Doublewrite),
            log: get(FileClass::Log),
            other: get(FileClass::Other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_class_and_since_subtracts() {
        let c = IoCounters::default();
        c.write(FileClass::Log, 512);
        let before = c.snapshot();
        c.write(FileClass::Data, 4096);
        c.atomic_write(FileClass::Data, 16384);
        c.sync(FileClass::Data);
        c.read(FileClass::Doublewrite, 100);
        let d = c.snapshot().since(&before);
        assert_eq!(d.data.writes, 2);
        assert_eq!(d.data.write_bytes, 4096 + 16384);
        assert_eq!(d.data.atomic_writes, 1);
        assert_eq!(d.data.syncs, 1);
        assert_eq!(d.doublewrite.read_bytes, 100);
        assert_eq!(d.log, ClassStats::default());
        assert_eq!(c.snapshot().log.write_bytes, 512);
    }
}
