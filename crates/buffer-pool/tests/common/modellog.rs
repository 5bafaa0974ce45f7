//! A model redo log for crash tests: groups kept in memory, an explicit durable LSN, and a
//! checkpoint. At a crash it freezes: what survives is every group ending at or below the durable
//! LSN, and the last checkpoint. (The real log's own crash behaviour is keel-redo-log's to test.)
#![allow(dead_code)]

use keel_buffer_pool::{PoolError, Record, RecoveredGroup, RedoSink, Result};
use keel_flush::{WalError, WalFlush};
use keel_page::Lsn;
use parking_lot::Mutex;
use std::sync::Arc;

#[derive(Debug, Default)]
struct Inner {
    groups: Vec<RecoveredGroup>,
    end: Lsn,
    durable: Lsn,
    checkpoint: Lsn,
    dead: bool,
    /// Breaks docs/design.md invariant 1 on purpose: claims everything is durable, flushes nothing.
    lie: bool,
}

#[derive(Clone, Debug)]
pub struct ModelLog(Arc<Mutex<Inner>>);

/// What a recovery scan of the model log returns.
pub struct Recovered {
    pub checkpoint: Lsn,
    pub groups: Vec<RecoveredGroup>,
    pub durable: Lsn,
}

impl Default for ModelLog {
    fn default() -> Self {
        ModelLog::new()
    }
}

impl ModelLog {
    pub fn new() -> ModelLog {
        ModelLog(Arc::new(Mutex::new(Inner {
            end: Lsn(64),
            durable: Lsn(64),
            ..Default::default()
        })))
    }

    /// Makes `flush_to` a no-op and `durable_lsn` report everything durable (invariant 1 broken).
    pub fn set_lying(&self, yes: bool) {
        self.0.lock().lie = yes;
    }

    pub fn durable(&self) -> Lsn {
        self.0.lock().durable
    }

    /// Makes the log durable up to its end (a commit under `Durability::Sync`).
    pub fn sync(&self) -> Result<()> {
        let mut g = self.0.lock();
        if g.dead {
            return Err(PoolError::log(std::io::Error::other("the log crashed")));
        }
        g.durable = g.end;
        Ok(())
    }

    /// Records a checkpoint at `lsn` (synced, like the real log's header slot).
    pub fn checkpoint(&self, lsn: Lsn) -> Result<()> {
        let mut g = self.0.lock();
        if g.dead {
            return Err(PoolError::log(std::io::Error::other("the log crashed")));
        }
        assert!(
            lsn <= g.end,
            "checkpoint {lsn} beyond the log's end {}",
            g.end
        );
        assert!(lsn >= g.checkpoint, "checkpoint went backwards");
        if lsn > g.durable {
            g.durable = g.end;
        }
        g.checkpoint = lsn;
        Ok(())
    }

    pub fn checkpoint_lsn(&self) -> Lsn {
        self.0.lock().checkpoint
    }

    /// The crash: nothing more becomes durable.
    pub fn freeze(&self) {
        self.0.lock().dead = true;
    }

    /// The recovery scan: the checkpoint and the durable groups after it.
    pub fn recover(&self) -> Recovered {
        let g = self.0.lock();
        Recovered {
            checkpoint: g.checkpoint,
            durable: g.durable,
            groups: g
                .groups
                .iter()
                .filter(|x| x.start_lsn >= g.checkpoint && x.end_lsn <= g.durable)
                .cloned()
                .collect(),
        }
    }

    /// The log after the reboot: the durable groups, appends continue at the durable end.
    pub fn reopen(&self) -> ModelLog {
        let g = self.0.lock();
        let groups: Vec<RecoveredGroup> = g
            .groups
            .iter()
            .filter(|x| x.end_lsn <= g.durable)
            .cloned()
            .collect();
        ModelLog(Arc::new(Mutex::new(Inner {
            groups,
            end: g.durable,
            durable: g.durable,
            checkpoint: g.checkpoint,
            dead: false,
            lie: false,
        })))
    }
}

fn size(r: &Record) -> u64 {
    16 + match r {
        Record::PageWrite { bytes, .. } => bytes.len() as u64,
        Record::PageImage { image, .. } => image.len() as u64,
        Record::Logical { bytes, .. } => bytes.len() as u64,
        _ => 0,
    }
}

impl RedoSink for ModelLog {
    fn end_lsn(&self) -> Lsn {
        self.0.lock().end
    }

    fn durable_lsn(&self) -> Lsn {
        self.0.lock().durable
    }

    fn append(&self, records: &[Record]) -> Result<Lsn> {
        let mut g = self.0.lock();
        if g.dead {
            return Err(PoolError::log(std::io::Error::other("the log crashed")));
        }
        let start = g.end;
        let end = Lsn(start.0 + 24 + records.iter().map(size).sum::<u64>());
        g.end = end;
        g.groups.push(RecoveredGroup {
            start_lsn: start,
            end_lsn: end,
            records: records.to_vec(),
        });
        Ok(end)
    }
}

impl WalFlush for ModelLog {
    fn flush_to(&self, _lsn: Lsn) -> std::result::Result<(), WalError> {
        let mut g = self.0.lock();
        if g.dead {
            return Err("the log crashed".into());
        }
        if !g.lie {
            g.durable = g.end;
        }
        Ok(())
    }

    fn durable_lsn(&self) -> Lsn {
        let g = self.0.lock();
        if g.lie {
            Lsn(u64::MAX)
        } else {
            g.durable
        }
    }
}
