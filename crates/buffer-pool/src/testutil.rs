//! Helpers shared by the unit tests: a small pool over a [`MemStore`] and pages to put in it.

use crate::page_store::{MemStore, PageOut, PageStore};
use crate::{BufferPool, PoolConfig};
use keel_page::{Lsn, PageHeader, PageId, PageSize, PageType, PAGE_HEADER_SIZE};
use std::sync::Arc;

/// The unit tests' page size.
pub(crate) const PS: PageSize = PageSize::K4;

/// A pool of 16 frames over `store`.
pub(crate) fn pool(store: Arc<MemStore>) -> BufferPool {
    BufferPool::new(
        PoolConfig {
            page_size: PS,
            pool_bytes: 16 * PS.bytes(),
            ..PoolConfig::default()
        },
        store,
    )
    .unwrap()
}

/// Stores page `id` with every payload byte `fill`.
pub(crate) fn put(store: &MemStore, id: PageId, fill: u8) {
    let mut p = vec![0u8; PS.bytes()];
    PageHeader::init(&mut p, id, PageType::BTREE_LEAF, Lsn(1));
    let end = p.len() - keel_page::PAGE_TRAILER_SIZE;
    p[PAGE_HEADER_SIZE..end].fill(fill);
    store
        .write_pages(&[PageOut {
            page_id: id,
            image: &p,
            lsn: Lsn(1),
            rebuildable_from_redo: false,
        }])
        .unwrap();
}
