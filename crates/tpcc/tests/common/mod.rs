//! Shared helpers for keel-tpcc's integration tests (memory engine, 1 warehouse).
#![allow(dead_code)]

use keel_tpcc::config::StoreConfig;
use keel_tpcc::load::{load, LoadOptions};
use keel_tpcc::{Engine, MemoryEngine};

/// Items used by tests: a reduced count, allowed only in tests through the explicit option.
pub const TEST_ITEMS: u32 = 2000;

/// A freshly loaded memory engine in a temp dir (fixed timestamp, seed 11).
pub fn loaded(warehouses: u16) -> (tempfile::TempDir, MemoryEngine) {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = MemoryEngine::open(dir.path(), &StoreConfig::default()).expect("open");
    let mut opts = LoadOptions::new(warehouses);
    opts.items = TEST_ITEMS;
    opts.seed = 11;
    opts.timestamp_ms = 1_767_225_600_000;
    load(&engine, &opts).expect("load");
    (dir, engine)
}
