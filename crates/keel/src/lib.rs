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
//! One writer at a time with early lock release: [`WriteTxn::commit`] appends its redo (fixing
//! the commit LSN), lets the next writer in, and only then waits for the log sync, so many
//! committers share one sync (group commit). Readers run when no writer holds the store.

mod config;
mod error;
pub mod meta;
mod store;
mod table;

pub use config::{Config, LogFileMode, TornPage};
pub use error::{Error, Result};
pub use keel_io::SyncMethod;
pub use keel_page::Checksum;
pub use keel_redo_log::Durability;
pub use store::{Effective, ReadTxn, RecoveryReport, Store, StoreStats, WriteTxn, LOG_DIR};
pub use table::{PoolReader, ReadTable, Rows, Table, TxnReader, MERGE_GAP};
