//! Configuration matrices (`keel-tpcc matrix --spec FILE.toml`): a list of store configurations
//! (explicit `[[config]]` entries, crossed with `[axes]`), run in interleaved repeats
//! (A B C A B C …) from the same loaded copy, then `report.md`, `notpm.svg`, `medians.svg` and
//! `matrix.json`.
//!
//! Spec format (all keys but `name` optional):
//!
//! ```toml
//! name = "e1-torn-page"
//! description = "what the matrix asks"
//! published = "what the seed experiment found"
//! warehouses = 1        # loaded once (or once per configuration, see load_per_config)
//! terminals = 4
//! writers = "concurrent"   # or "exclusive": how New-Order, Payment and Delivery write
//!                          # (also per [[config]] and as an axis; `--writers` overrides all)
//! duration = 60         # measured seconds per run
//! warmup = 10
//! interval = 10
//! repeats = 3
//! seed = 1
//! load_per_config = false  # true: each configuration loads its own copy (load-time knobs)
//!                          # (without it, one shared load per set of creation-time knobs:
//!                          # page_size, checksum, log_block_size, log_files, log_file_size)
//! check = true             # consistency check after every run
//! memory_baseline = false  # add a "memory (no durability)" row (ignored when the engine is it)
//! [base]                   # store knobs for every configuration
//! page_size = 16384
//! [[config]]
//! name = "doublewrite"
//! torn_page = "doublewrite"
//! [[config]]
//! name = "sqlite"
//! engine = "sqlite"        # a peer row: keel (default), memory, sqlite or redb
//! [axes]                   # cartesian product with the configs; `terminals` and `writers` too
//! checksum = ["crc32c", "legacy", "none"]
//! terminals = [1, 4]
//! ```
//!
//! Invariants: runs are interleaved (repeat r of every configuration runs before repeat r+1 of
//! any); every run starts from a fresh copy of the same loaded directory; a configuration the
//! engine reports as unsupported is listed as skipped with the engine's reason, never dropped
//! silently; a configuration whose creation-time knobs ([`creation_knobs`]) differ from the base
//! runs on its own load made with those knobs (a store refuses to open files created with other
//! ones).
//!
//! Files: `spec.rs` (reading a spec file into [`MatrixSpec`]), `run.rs` (loading, the interleaved
//! runs and the report).

mod run;
mod spec;

pub use run::{creation_knobs, run_matrix, MatrixOptions};
pub use spec::{Entry, MatrixSpec, ENGINES};
