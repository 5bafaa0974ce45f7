//! keel-redo-log (being written).
