//! Connects the buffer pool's transactions to the redo log.
//!
//! The pool appends groups through its `RedoSink` trait; this adapter forwards them to
//! [`RedoLog`], converting record types field by field (the pool and the log each define the
//! record set of the redo contract; the conversion is exact and covered by the crash tests).

use keel_buffer_pool::{Record as PoolRecord, RecoveredGroup as PoolGroup, RedoSink};
use keel_page::Lsn;
use keel_redo_log::{Record as LogRecord, RecoveredGroup as LogGroup, RedoLog};

/// The redo log as the pool's sink.
pub(crate) struct LogSink<'a>(pub(crate) &'a RedoLog);

pub(crate) fn to_log(r: &PoolRecord) -> LogRecord {
    match r {
        PoolRecord::PageInit { page_id, page_type } => LogRecord::PageInit {
            page_id: *page_id,
            page_type: *page_type,
        },
        PoolRecord::PageWrite {
            page_id,
            offset,
            bytes,
        } => LogRecord::PageWrite {
            page_id: *page_id,
            offset: *offset,
            bytes: bytes.clone(),
        },
        PoolRecord::PageImage { page_id, image } => LogRecord::PageImage {
            page_id: *page_id,
            image: image.clone(),
        },
        PoolRecord::PageFree { page_id } => LogRecord::PageFree { page_id: *page_id },
        PoolRecord::Logical { kind, bytes } => LogRecord::Logical {
            kind: *kind,
            bytes: bytes.clone(),
        },
    }
}

fn to_pool(r: &LogRecord) -> PoolRecord {
    match r {
        LogRecord::PageInit { page_id, page_type } => PoolRecord::PageInit {
            page_id: *page_id,
            page_type: *page_type,
        },
        LogRecord::PageWrite {
            page_id,
            offset,
            bytes,
        } => PoolRecord::PageWrite {
            page_id: *page_id,
            offset: *offset,
            bytes: bytes.clone(),
        },
        LogRecord::PageImage { page_id, image } => PoolRecord::PageImage {
            page_id: *page_id,
            image: image.clone(),
        },
        LogRecord::PageFree { page_id } => PoolRecord::PageFree { page_id: *page_id },
        LogRecord::Logical { kind, bytes } => PoolRecord::Logical {
            kind: *kind,
            bytes: bytes.clone(),
        },
    }
}

/// Recovered log groups as the pool's recovery takes them.
pub(crate) fn groups_for_pool(groups: &[LogGroup]) -> Vec<PoolGroup> {
    groups
        .iter()
        .map(|g| PoolGroup {
            start_lsn: g.start_lsn,
            end_lsn: g.end_lsn,
            records: g.records.iter().map(to_pool).collect(),
        })
        .collect()
}

impl RedoSink for LogSink<'_> {
    fn end_lsn(&self) -> Lsn {
        self.0.end_lsn()
    }

    fn append(&self, records: &[PoolRecord]) -> keel_buffer_pool::Result<Lsn> {
        let recs: Vec<LogRecord> = records.iter().map(to_log).collect();
        self.0
            .append(&recs)
            .map_err(|e| keel_buffer_pool::PoolError::Log(Box::new(e)))
    }
}
