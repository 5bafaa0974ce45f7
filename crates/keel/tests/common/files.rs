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

/// Panics with `what` and the files added, removed or changed if `dir` no longer matches
/// `before` (a [`snapshot`]).
pub fn assert_unchanged(dir: &Path, before: &[(String, Vec<u8>)], what: &str) {
    let after = snapshot(dir);
    if after == before {
        return;
    }
    let mut differ: Vec<String> = Vec::new();
    for (name, bytes) in before {
        match after.iter().find(|(n, _)| n == name) {
            None => differ.push(format!("{name} removed")),
            Some((_, b)) if b != bytes => differ.push(format!(
                "{name} changed ({} bytes, was {}; first difference at byte {})",
                b.len(),
                bytes.len(),
                b.iter()
                    .zip(bytes)
                    .position(|(x, y)| x != y)
                    .unwrap_or(b.len().min(bytes.len()))
            )),
            Some(_) => {}
        }
    }
    for (name, _) in &after {
        if !before.iter().any(|(n, _)| n == name) {
            differ.push(format!("{name} added"));
        }
    }
    panic!("{what}: {differ:?}");
}
