//! Raw device baselines that later issues compare against (REFERENCE.md E4, E5, torn-page modes).
//!
//! (a) `commit/{512,4096}/{zeroed,fallocate,grow}/{fsync,fdatasync,o_dsync,o_direct}`: one log
//!     "commit" = write `size` bytes at the next sequential position, then make it durable the way
//!     the sync method says (`o_dsync`: opened write-through, no sync call; `o_direct`: opened
//!     direct with aligned buffers, then fdatasync). The file is zero-filled (overwrites recycle
//!     it), fallocated (unwritten extents: the first write to each still commits metadata), or
//!     growing (every commit appends). A fallocated or growing file that is used up is recreated
//!     outside the timed region, so every timed commit sees the same kind of file.
//! (b) `pages/*`: 16 KiB random page writes into a zero-filled 128 MiB file opened O_DIRECT:
//!     `pwrite_qd1` (one at a time), `io_uring_batch64` (64 pages in one submission), and on
//!     `KEEL_XFS_DIR` (XFS with reflink) the same two plain ones plus `atomic_pwrite_qd1` and
//!     `atomic_io_uring_batch64` with RWF_ATOMIC. Without `KEEL_XFS_DIR` these print `SKIPPED`.
//!
//! Files go to `keel_benches::bench_dir("device")` (`$KEEL_BENCH_DIR` to choose the disk). Each
//! bench runs ~0.5 s warm-up + 2 s measurement so `cargo bench --bench device` stays a few minutes.
//! Throughput is in elements: commits/s for (a), pages/s for (b).
#![allow(missing_docs)] // criterion_group! generates an undocumented pub fn

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use keel_benches::{bench_dir, method_name};
use keel_io::os::io_uring_status;
use keel_io::{
    preallocate, AlignedBuf, Backend, File, FileClass, FileSystem, OpenOptions, OsFs,
    Preallocation, SplitMix64, SyncMethod, WriteOp,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Size of the log file in (a): 32 MiB, recycled (zeroed) or recreated (others) when used up.
const LOG_FILE: u64 = 32 << 20;
/// Size of the page file in (b): 128 MiB = 8192 pages of 16 KiB.
const PAGE_FILE: u64 = 128 << 20;
const PAGE: usize = 16384;
const BATCH: usize = 64;

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(2000))
        .sample_size(20)
        .nresamples(20_000)
}

fn prealloc_name(p: Preallocation) -> &'static str {
    match p {
        Preallocation::Zeroed => "zeroed",
        Preallocation::Fallocate => "fallocate",
        Preallocation::Grow => "grow",
    }
}

/// A log file ready for commits: created, preallocated `how`, synced.
fn fresh_log(fs: &OsFs, path: &Path, method: SyncMethod, how: Preallocation) -> Arc<dyn File> {
    let _ = std::fs::remove_file(path);
    let f = fs
        .open(
            path,
            &OpenOptions::new(FileClass::Log)
                .create(true)
                .for_sync_method(method),
        )
        .expect("open log file");
    preallocate(f.as_ref(), LOG_FILE, how).expect("preallocate log file");
    f
}

fn commits(c: &mut Criterion) {
    let dir = bench_dir("device");
    let fs = OsFs::new(Backend::Pwrite);
    let caps = fs.capabilities(&dir).expect("probe bench directory");
    let direct_align = caps.direct_io.map_or(u32::MAX, |d| d.offset) as usize;
    eprintln!(
        "device bench: commits in {} ({}; logical {} B, physical {} B, direct-I/O alignment {:?})",
        dir.display(),
        caps.filesystem,
        caps.logical_block_size,
        caps.physical_block_size,
        caps.direct_io
    );
    let mut group = c.benchmark_group("commit");
    group.throughput(Throughput::Elements(1));
    for size in [512usize, 4096] {
        for how in [
            Preallocation::Zeroed,
            Preallocation::Fallocate,
            Preallocation::Grow,
        ] {
            for method in SyncMethod::ALL {
                let id = BenchmarkId::new(
                    format!("{size}/{}", prealloc_name(how)),
                    method_name(method),
                );
                if method == SyncMethod::ODirect && size % direct_align != 0 {
                    println!(
                        "SKIPPED: commit/{size}/{}/o_direct: direct I/O here needs {direct_align}-byte alignment",
                        prealloc_name(how)
                    );
                    continue;
                }
                let path = dir.join(format!(
                    "log-{size}-{}-{}",
                    prealloc_name(how),
                    method_name(method)
                ));
                let mut file = fresh_log(&fs, &path, method, how);
                let mut buf = AlignedBuf::page(size);
                let mut pos = 0u64;
                let mut n = 0u64;
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let mut spent = Duration::ZERO;
                        let mut start = Instant::now();
                        for _ in 0..iters {
                            if pos + size as u64 > LOG_FILE {
                                spent += start.elapsed();
                                match how {
                                    // A zero-filled log is recycled in place.
                                    Preallocation::Zeroed => {}
                                    _ => file = fresh_log(&fs, &path, method, how),
                                }
                                pos = 0;
                                start = Instant::now();
                            }
                            n += 1;
                            buf[..8].copy_from_slice(&n.to_le_bytes());
                            file.write_all_at(&buf, pos).expect("commit write");
                            file.sync(method).expect("commit sync");
                            pos += size as u64;
                        }
                        spent + start.elapsed()
                    })
                });
                drop(file);
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    group.finish();
}

/// A zero-filled, synced page file opened O_DIRECT with `fs`.
fn page_file(fs: &OsFs, path: &Path) -> Arc<dyn File> {
    let f = fs
        .open(
            path,
            &OpenOptions::new(FileClass::Data).create(true).direct(true),
        )
        .expect("open page file");
    if f.len().expect("page file length") != PAGE_FILE {
        preallocate(f.as_ref(), PAGE_FILE, Preallocation::Zeroed).expect("zero-fill page file");
    }
    f
}

fn page_benches(c: &mut Criterion, group_name: &str, dir: &Path, atomic: bool) {
    let pages = PAGE_FILE / PAGE as u64;
    let mut group = c.benchmark_group(group_name);
    let path: PathBuf = dir.join("pages");
    let data: Vec<AlignedBuf> = (0..BATCH)
        .map(|i| {
            let mut b = AlignedBuf::page(PAGE);
            b.fill(i as u8 + 1);
            b
        })
        .collect();
    let kind = if atomic { "atomic_" } else { "" };

    let pwrite = OsFs::new(Backend::Pwrite);
    let f = page_file(&pwrite, &path);
    let mut rng = SplitMix64::new(1);
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("{kind}pwrite_qd1"), |b| {
        b.iter(|| {
            let off = (rng.next_u64() % pages) * PAGE as u64;
            if atomic {
                f.write_atomic(&data[0], off).expect("atomic page write");
            } else {
                f.write_all_at(&data[0], off).expect("page write");
            }
        })
    });
    drop(f);

    match io_uring_status() {
        Ok(()) => {
            let uring = OsFs::new(Backend::IoUring);
            let f = page_file(&uring, &path);
            group.throughput(Throughput::Elements(BATCH as u64));
            group.bench_function(format!("{kind}io_uring_batch{BATCH}"), |b| {
                b.iter(|| {
                    // 64 distinct random pages, submitted together.
                    let mut slots: Vec<u64> = Vec::with_capacity(BATCH);
                    while slots.len() < BATCH {
                        let s = rng.next_u64() % pages;
                        if !slots.contains(&s) {
                            slots.push(s);
                        }
                    }
                    let writes: Vec<WriteOp<'_>> = slots
                        .iter()
                        .zip(&data)
                        .map(|(&s, buf)| WriteOp {
                            offset: s * PAGE as u64,
                            buf,
                        })
                        .collect();
                    if atomic {
                        f.write_atomic_batch(&writes).expect("atomic batch");
                    } else {
                        f.write_batch(&writes).expect("batch");
                    }
                })
            });
        }
        Err(why) => println!("SKIPPED: {group_name}/{kind}io_uring_batch{BATCH}: {why}"),
    }
    group.finish();
}

fn pages(c: &mut Criterion) {
    let dir = bench_dir("device-pages");
    page_benches(c, "pages", &dir, false);
    let _ = std::fs::remove_dir_all(&dir);
    let Some(xfs) = std::env::var_os("KEEL_XFS_DIR").map(PathBuf::from) else {
        println!(
            "SKIPPED: pages on XFS (plain and RWF_ATOMIC): KEEL_XFS_DIR is not set (mount one with \
             .ci/xfs-image.sh setup DIR)"
        );
        return;
    };
    let dir = xfs.join("keel-bench-device");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create XFS bench directory");
    let fs = OsFs::new(Backend::Pwrite);
    let caps = fs.capabilities(&dir).expect("probe XFS bench directory");
    eprintln!(
        "device bench: XFS pages in {} ({}; atomic {:?}; 16 KiB atomic: {:?})",
        dir.display(),
        caps.filesystem,
        caps.atomic,
        caps.atomic_support(PAGE)
    );
    page_benches(c, "pages_xfs", &dir, false);
    if caps.atomic.check(0, PAGE).is_ok() {
        page_benches(c, "pages_xfs", &dir, true);
    } else {
        println!(
            "SKIPPED: RWF_ATOMIC page writes: {} reports no 16 KiB atomic unit ({:?})",
            dir.display(),
            caps.atomic
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = device;
    config = config();
    targets = commits, pages
}
criterion_main!(device);
