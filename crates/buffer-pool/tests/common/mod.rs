//! Helpers shared by the buffer-pool integration tests.
#![allow(dead_code)]

pub mod crashfs;
pub mod modellog;
pub mod world;

use keel_buffer_pool::{BufferPool, MemStore, PageOut, PageStore, PoolConfig};
use keel_page::{Lsn, PageHeader, PageId, PageSize, PageType, PAGE_HEADER_SIZE};
use std::sync::Arc;

/// The `PageStore` methods a test store takes unchanged from the `MemStore` in its `inner`
/// field — the page size, the data path, single-page reads — and no full page images. Each
/// test store writes out only what it tests (a gate, a count, a crash, a poison).
#[allow(unused_macros)]
macro_rules! memstore_basics {
    () => {
        fn page_size(&self) -> keel_page::PageSize {
            self.inner.page_size()
        }
        fn data_path(&self) -> &std::path::Path {
            self.inner.data_path()
        }
        fn read_page(
            &self,
            id: keel_page::PageId,
            buf: &mut [u8],
        ) -> keel_buffer_pool::Result<keel_page::PageState> {
            self.inner.read_page(id, buf)
        }
        fn wants_full_page_images(&self) -> bool {
            false
        }
    };
}
#[allow(unused_imports)]
pub(crate) use memstore_basics;

/// SplitMix64: a small deterministic PRNG.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The payload byte `i` of page `id` at `version`.
pub fn pattern(id: u64, version: u64, i: usize) -> u8 {
    (id.wrapping_mul(31) ^ version.wrapping_mul(7) ^ (i as u64).wrapping_mul(13)) as u8
}

/// A page image of `id` at `version` (version stored at the start of the payload).
pub fn page_image(ps: usize, id: u64, version: u64, lsn: Lsn) -> Vec<u8> {
    let mut p = vec![0u8; ps];
    PageHeader::init(&mut p, PageId(id), PageType::RAW, lsn);
    p[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + 8].copy_from_slice(&version.to_le_bytes());
    for (i, b) in p
        .iter_mut()
        .enumerate()
        .take(ps - 8)
        .skip(PAGE_HEADER_SIZE + 8)
    {
        *b = pattern(id, version, i);
    }
    p
}

/// Checks a page written by `page_image` is self-consistent; returns its version.
pub fn check_page(bytes: &[u8], id: u64) -> u64 {
    let h = PageHeader::read(bytes).expect("header");
    assert_eq!(h.page_id, PageId(id), "frame holds another page");
    let mut v = [0u8; 8];
    v.copy_from_slice(&bytes[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + 8]);
    let version = u64::from_le_bytes(v);
    for i in (PAGE_HEADER_SIZE + 8..bytes.len() - 8).step_by(97) {
        assert_eq!(
            bytes[i],
            pattern(id, version, i),
            "page {id} byte {i} inconsistent with version {version}"
        );
    }
    version
}

/// Writes pages `0..n` at version 0 straight into `store`.
pub fn seed(store: &dyn PageStore, n: u64) {
    let ps = store.page_size().bytes();
    let images: Vec<Vec<u8>> = (0..n).map(|id| page_image(ps, id, 0, Lsn(1))).collect();
    for chunk in images.chunks(64).zip((0..n).collect::<Vec<_>>().chunks(64)) {
        let pages: Vec<PageOut<'_>> = chunk
            .0
            .iter()
            .zip(chunk.1)
            .map(|(img, &id)| PageOut {
                page_id: PageId(id),
                image: img,
                lsn: Lsn(1),
                rebuildable_from_redo: false,
            })
            .collect();
        store.write_pages(&pages).expect("seed write");
    }
}

/// A pool of `frames` 4 KiB frames over a fresh MemStore.
pub fn mem_pool(frames: usize) -> (Arc<BufferPool>, Arc<MemStore>) {
    mem_pool_with(frames, |_| {})
}

pub fn mem_pool_with(
    frames: usize,
    tweak: impl FnOnce(&mut PoolConfig),
) -> (Arc<BufferPool>, Arc<MemStore>) {
    let store = Arc::new(MemStore::new(PageSize::K4));
    let mut cfg = PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: frames * 4096,
        ..PoolConfig::default()
    };
    tweak(&mut cfg);
    let pool = BufferPool::new(cfg, store.clone()).expect("pool");
    (Arc::new(pool), store)
}
