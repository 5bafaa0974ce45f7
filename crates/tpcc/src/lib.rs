//! keel-tpcc: a TPC-C-like workload (TPC-C v5.11 semantics) on Keel's named tables, and the
//! `keel-tpcc` CLI around it.
//!
//! Everything is generic over the storage trait [`engine::Engine`], which mirrors the `keel`
//! facade contract; [`keel_engine::KeelEngine`] is the durable keel store (the CLI's default
//! engine) and [`memory::MemoryEngine`] the in-memory reference engine ("memory (no
//! durability)"), a correctness baseline and a "no I/O" row in reports.
//!
//! Modules: [`schema`] (tables, keys, rows), [`load`] (deterministic loader), [`txn`] (the five
//! transactions and the terminal input generator), [`driver`] (terminals, interval lines,
//! summary, run files), [`check`] (consistency conditions 1–12), [`matrix`] (interleaved
//! configuration matrices), [`report`] (report.md and SVG charts), [`fsmount`] (loop-mounted file
//! systems), [`keel_engine`] (the keel adapter), [`cli`] (the commands).

pub mod acked;
pub mod charts;
pub mod check;
pub mod cli;
pub mod compare;
pub mod config;
pub mod costs;
pub mod driver;
pub mod engine;
pub mod error;
pub mod fsmount;
pub mod interrupt;
pub mod keel_engine;
pub mod load;
pub mod matrix;
pub mod memory;
pub mod redb_engine;
pub mod report;
pub mod results;
pub mod rng;
pub mod run_meta;
pub mod schema;
pub mod spread;
pub mod sqlite_engine;
pub mod terminal;
pub mod txn;

pub use engine::{Engine, EngineError, EngineStats, ReadTx, WriteTx};
pub use error::{TpccError, TpccResult};
pub use keel_engine::KeelEngine;
pub use memory::MemoryEngine;
pub use redb_engine::RedbEngine;
pub use sqlite_engine::SqliteEngine;
