//! Keel: an embedded, crash-safe page store and key-value engine whose subject is the durable
//! write path.
//!
//! ```no_run
//! # fn main() -> keel::Result<()> {
//! let store = keel::Store::open("data/", keel::Config::default())?; // creates, or recovers
//! let tx = store.write()?;                     // one writer at a time
//! let mut orders = tx.table("orders")?;        // named B+trees, created on first use
//! orders.insert(b"k", b"v")?;
//! assert_eq!(orders.get(b"k")?, Some(b"v".to_vec()));
//! for kv in orders.range(b"a".as_slice()..b"z".as_slice())? {
//!     let (_k, _v) = kv?;
//! }
//! tx.commit()?;                                // durable under Durability::Sync
//! let r = store.read()?;                       // committed data
//! assert_eq!(r.table("orders")?.get(b"k")?, Some(b"v".to_vec()));
//! store.checkpoint()?;
//! println!("{}", serde_json_free(&store.stats()));
//! # Ok(()) }
//! # fn serde_json_free<T: std::fmt::Debug>(t: &T) -> String { format!("{t:?}") }
//! ```
//!
//! # Layers
//!
//! `keel` sits on keel-btree (B+trees on pages), keel-buffer-pool (frames, latches, no-steal
//! write transactions that record redo), keel-flush (torn-page protection), keel-redo-log (group
//! commit, checkpoints, recovery scan), keel-page and keel-io. Opening a store recovers it:
//! doublewrite restore, redo replay from the checkpoint (uncommitted groups ignored, a torn log
//! tail discarded), then a checkpoint; [`Store::recovery`] says what it did.
//!
//! # Concurrency
//!
//! Read transactions ([`Store::read`]) are snapshots: they take no lock and never wait.
//! Writers are exclusive ([`Store::write`]: the writer lock for the transaction's life) or
//! concurrent ([`Store::write_concurrent`]: any number at once, each executing at a snapshot
//! with its writes buffered, validated and applied under the writer lock at commit, or refused
//! with [`Error::Conflict`]). Either way the commit has early lock release:
//! [`WriteTxn::commit`] appends its redo (fixing the commit LSN), lets the next writer in, and
//! only then waits for the log sync, so many committers share one sync (group commit).

/// Whether test knob `$name` of store internals `$inner` is on; always false without the
/// `test-knobs` feature (whose absence compiles the knobs out of every release and library
/// build).
macro_rules! knob_on {
    ($inner:expr, $name:ident) => {{
        #[cfg(feature = "test-knobs")]
        let on = $inner
            .knobs
            .$name
            .load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(feature = "test-knobs"))]
        let on = {
            let _ = &$inner;
            false
        };
        on
    }};
}

mod check;
mod checkpointer;
mod config;
mod cursor;
mod error;
mod held;
pub mod human;
#[cfg(feature = "test-knobs")]
mod knobs;
pub mod layout;
mod merged;
mod meta;
mod new_identity;
mod open;
mod optimistic;
mod poison;
mod read_set;
mod recent_writes;
mod row_limits;
mod store;
mod table;
mod txn;

pub use check::{CheckReport, TableCheck};
pub use config::{
    Config, LogFileMode, TornPage, AUTO_LOG_MAX, AUTO_LOG_MIN, MAX_TOML_BYTES, MIN_INTERVAL,
};
pub use error::{Error, Result};
pub use keel_btree::{BTreeError, GET_WITH_INLINE};
pub use keel_buffer_pool::PoolError;
pub use keel_flush::{DoublewriteInspection, FlushError};
pub use keel_io::{Capabilities, IoError};
pub use keel_redo_log::LogError;
pub use meta::{read_identity, MetaInfo, StoreIdentity};
pub use new_identity::{give_new_identity, NewIdentity};

/// Low-level access to the data file's format for tools (`keel dump page`), tests and fuzzing:
/// decoders of the meta page and of free-list trunk pages that work on bytes read from the
/// file, without opening the store. (B-tree nodes: `keel_btree::dump_node`; page headers and
/// checksums: `keel_page::verify`; the log: `keel_redo_log::inspect`.)
pub mod inspect {
    pub use crate::meta::{decode_identity, decode_meta_page, decode_trunk_page, meta_free_ids};
}

/// The longest value a table accepts: 4 GiB - 1 bytes ([`Error::ValueTooLarge`] above it).
pub const MAX_VALUE_LEN: usize = u32::MAX as usize;

/// The longest key a table accepts on pages of `page_size` bytes ([`Error::KeyTooLarge`] above
/// it): a quarter of the page minus cell overheads, so that a node always holds four cells.
/// 976 bytes on 4 KiB pages, 2,000 on 8 KiB, 4,048 on 16 KiB.
pub fn max_key_len(page_size: usize) -> usize {
    keel_btree::Limits::new(page_size).max_key
}
pub use cursor::Cursor;
pub use keel_io::SyncMethod;
pub use keel_page::Checksum;
pub use keel_redo_log::Durability;
#[cfg(feature = "test-knobs")]
pub use knobs::TestKnobs;
pub use store::{Effective, RecoveryReport, Store, StoreStats, LOG_DIR};
pub use table::{ReadTable, ReadableTable, Rows, Table};
pub use txn::{ReadTxn, WriteTxn};
