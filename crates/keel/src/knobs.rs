//! Test-only switches that break an invariant on purpose, so the tests that guard it show they
//! catch the break. They exist only with the `test-knobs` feature, which only this crate's own
//! dev-dependency enables: no release or library build has them.

use std::sync::atomic::AtomicBool;

/// The switches of one store (all off when it opens).
#[derive(Debug, Default)]
pub struct TestKnobs {
    /// A concurrent transaction's commit applies its writes without validating its read set
    /// (breaks serializability: `tests/concurrent.rs` must fail).
    pub skip_validation: AtomicBool,
    /// A concurrent transaction's scans record nothing in its read set (`merged.rs`
    /// invariant 2): a row another transaction adds to or removes from a scanned range is
    /// missed (`tests/concurrent.rs` must fail).
    pub skip_range_reads: AtomicBool,
    /// A concurrent transaction's commit records that it wrote nothing (`recent_writes.rs`
    /// invariant 2), so later validations skip reads it changed (`tests/concurrent.rs` must
    /// fail).
    pub forget_recent_writes: AtomicBool,
}
