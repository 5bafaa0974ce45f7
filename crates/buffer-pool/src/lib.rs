//! keel-buffer-pool (being written).
