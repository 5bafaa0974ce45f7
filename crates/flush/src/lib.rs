//! keel-flush (being written).
