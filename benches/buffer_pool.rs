//! Buffer-pool micro-benchmarks (issue 4):
//!
//! - `buffer_pool/hit/*`: the hit path — page-table lookup + pin + shared latch + unpin
//!   (target ≤ 100 ns);
//! - `buffer_pool/miss_evict/*`: random reads over a data set 8× the pool: nearly every read
//!   evicts a clean page (CLOCK) and reads one, through the in-memory store (pool overhead +
//!   checksum) and through keel-flush's page writer on a real file (page cache read + checksum).
//!
//! The hit ratio and eviction count of each miss run are printed beside it.

#![allow(missing_docs)] // criterion_group! generates an undocumented pub fn

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use keel_buffer_pool::{BufferPool, MemStore, PageOut, PageStore, PoolConfig};
use keel_flush::{PageWriter, PageWriterConfig, TornPageProtection, WalError, WalFlush};
use keel_io::{AlignedBuf, OsFs, SplitMix64};
use keel_page::{Lsn, PageHeader, PageId, PageSize, PageType};
use std::sync::Arc;

const PS: PageSize = PageSize::K16;

/// The data is written with page LSN 0 (no redo), so the writer needs no log.
struct NoRedo;

impl WalFlush for NoRedo {
    fn flush_to(&self, _lsn: Lsn) -> Result<(), WalError> {
        Ok(())
    }
    fn durable_lsn(&self) -> Lsn {
        Lsn::ZERO
    }
}

fn seed(store: &dyn PageStore, pages: u64) {
    let ps = PS.bytes();
    for start in (0..pages).step_by(64) {
        let ids: Vec<u64> = (start..(start + 64).min(pages)).collect();
        let images: Vec<AlignedBuf> = ids
            .iter()
            .map(|&id| {
                let mut p = AlignedBuf::page(ps);
                PageHeader::init(&mut p, PageId(id), PageType::RAW, Lsn::ZERO);
                for (i, b) in p[64..ps - 8].iter_mut().enumerate() {
                    *b = (i as u64 ^ id) as u8;
                }
                p
            })
            .collect();
        let out: Vec<PageOut<'_>> = ids
            .iter()
            .zip(&images)
            .map(|(&id, img)| PageOut {
                page_id: PageId(id),
                image: img,
                lsn: Lsn::ZERO,
                rebuildable_from_redo: false,
            })
            .collect();
        store.write_pages(&out).expect("seed");
    }
}

fn pool_over(store: Arc<dyn PageStore>, frames: usize) -> BufferPool {
    let cfg = PoolConfig {
        page_size: PS,
        pool_bytes: frames * PS.bytes(),
        ..PoolConfig::default()
    };
    BufferPool::new(cfg, store).expect("pool")
}

fn hit(c: &mut Criterion) {
    let store = Arc::new(MemStore::new(PS));
    seed(&*store, 1024);
    let pool = pool_over(store, 2048);
    for id in 0..1024 {
        drop(pool.read(PageId(id)).expect("warm"));
    }
    let mut g = c.benchmark_group("buffer_pool/hit");
    g.throughput(Throughput::Elements(1));
    g.bench_function("same_page", |b| {
        b.iter(|| {
            let p = pool.read(black_box(PageId(7))).expect("read");
            black_box(p[100]);
        })
    });
    let mut i = 0u64;
    g.bench_function("1024_resident_pages", |b| {
        b.iter(|| {
            i = (i + 389) & 1023;
            let p = pool.read(black_box(PageId(i))).expect("read");
            // The guard only: touching the page bytes would add a DRAM miss per page.
            black_box(p.as_ptr());
        })
    });
    g.finish();
    let s = pool.stats();
    println!(
        "hit bench: {} hits, {} misses, {} evictions",
        s.hits, s.misses, s.evictions
    );
}

fn miss(c: &mut Criterion) {
    const PAGES: u64 = 2048;
    const FRAMES: usize = 256; // 1/8 of the data
    let mut g = c.benchmark_group("buffer_pool/miss_evict");
    g.throughput(Throughput::Elements(1));

    let mem = Arc::new(MemStore::new(PS));
    seed(&*mem, PAGES);
    let pool = pool_over(mem, FRAMES);
    let mut rng = SplitMix64::new(1);
    g.bench_function("mem_store_pool_1_8", |b| {
        b.iter(|| {
            let id = rng.next_u64() % PAGES;
            let p = pool.read(PageId(id)).expect("read");
            black_box(p[100]);
        })
    });
    let s = pool.stats();
    println!(
        "miss bench (mem store): hit ratio {:.3}, {} evictions, {} reads",
        s.hits as f64 / (s.hits + s.misses).max(1) as f64,
        s.evictions,
        s.pages_read
    );

    let dir = keel_benches::bench_dir("buffer_pool_miss");
    let writer = Arc::new(
        PageWriter::open(
            Arc::new(OsFs::default()),
            &dir,
            PageWriterConfig::new(PS, TornPageProtection::None),
            NoRedo,
        )
        .expect("page writer"),
    );
    seed(&*writer, PAGES);
    let pool = pool_over(writer, FRAMES);
    g.bench_function("file_page_cache_pool_1_8", |b| {
        b.iter(|| {
            let id = rng.next_u64() % PAGES;
            let p = pool.read(PageId(id)).expect("read");
            black_box(p[100]);
        })
    });
    g.finish();
    let s = pool.stats();
    println!(
        "miss bench (file): hit ratio {:.3}, {} evictions, {} reads",
        s.hits as f64 / (s.hits + s.misses).max(1) as f64,
        s.evictions,
        s.pages_read
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, hit, miss);
criterion_main!(benches);
