//! Redo records as the pool sees them: keel-redo-log's [`Record`] and [`RecoveredGroup`],
//! re-exported so users of the pool need not name the log crate.

pub use keel_redo_log::{Record, RecoveredGroup};
