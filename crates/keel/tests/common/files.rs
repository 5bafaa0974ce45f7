//! Every file of a store directory with its bytes, to show that an open wrote nothing.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::Path;

/// Every file under `dir` (its subdirectories too) but the lock file, with its bytes, sorted by
/// path.
pub fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n != keel::layout::LOCK_FILE) {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}
