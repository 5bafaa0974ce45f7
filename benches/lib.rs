//! Shared helpers for Keel's criterion benches (which live beside this file, one per question).

use keel_io::SyncMethod;
use std::path::{Path, PathBuf};

/// The short name benches use for a sync method in case ids and file names.
pub fn method_name(m: SyncMethod) -> &'static str {
    match m {
        SyncMethod::Fsync => "fsync",
        SyncMethod::Fdatasync => "fdatasync",
        SyncMethod::ODsync => "o_dsync",
        SyncMethod::ODirect => "o_direct",
    }
}

/// Where benches put their files: `$KEEL_BENCH_DIR/NAME` if set (e.g. a mounted XFS image),
/// otherwise `bench-files/NAME` under the cargo target directory (`$CARGO_TARGET_DIR`, else the
/// workspace's `target/`: cargo runs benches from the package directory, so a relative path would
/// land in `benches/`). Never tmpfs-only paths on purpose: the point is the disk.
pub fn bench_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("KEEL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
                .join("bench-files")
        });
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench directory");
    dir
}
