//! Shared helpers for Keel's criterion benches (which live beside this file, one per question).

use std::path::PathBuf;

/// Where benches put their files: `$KEEL_BENCH_DIR` if set (e.g. a mounted XFS image), otherwise a
/// directory under the system temp dir. Never tmpfs-only paths on purpose: the point is the disk.
pub fn bench_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("KEEL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench-files"));
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench directory");
    dir
}
