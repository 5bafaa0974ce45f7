//! An in-memory [`PageWrite`] for model tests and micro-benchmarks.

use crate::{BTreeError, PageRead, PageWrite, ReadToken, Result};
use keel_page::{Lsn, PageHeader, PageId, PageType};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

/// Pages in a `HashMap`; freed pages are remembered so use-after-free is caught.
#[derive(Debug, Clone)]
pub struct MemPages {
    page_size: usize,
    pages: HashMap<PageId, Vec<u8>>,
    freed: Vec<PageId>,
    next: u64,
    optimistic: bool,
    optimistic_reads: Cell<u64>,
    copies: bool,
}

impl MemPages {
    /// An empty store of pages of `page_size` bytes; page ids start at 1.
    pub fn new(page_size: usize) -> MemPages {
        MemPages {
            page_size,
            pages: HashMap::new(),
            freed: Vec::new(),
            next: 1,
            optimistic: false,
            optimistic_reads: Cell::new(0),
            copies: true,
        }
    }

    /// Make page copies ([`PageWrite::copy_page`]; on by default) or refuse them, as a store
    /// that cannot order the writes they need does (the tree then writes a split's right half
    /// itself).
    pub fn set_page_copies(&mut self, on: bool) {
        self.copies = on;
    }

    /// Serve [`PageRead::read_optimistic`] (from a copy of the page as words; pages never
    /// change during a read here, so every read validates). Off by default, so the tree's
    /// latched paths are what model tests exercise unless they turn this on.
    pub fn set_optimistic_reads(&mut self, on: bool) {
        self.optimistic = on;
    }

    /// Optimistic reads served so far.
    pub fn optimistic_reads(&self) -> u64 {
        self.optimistic_reads.get()
    }

    /// Pages currently allocated.
    pub fn live_pages(&self) -> usize {
        self.pages.len()
    }

    /// Mutable access to raw page bytes, for tests that corrupt pages on purpose.
    pub fn raw_mut(&mut self, id: PageId) -> Option<&mut Vec<u8>> {
        self.pages.get_mut(&id)
    }
}

impl PageRead for MemPages {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let p = self.pages.get(&id).ok_or_else(|| BTreeError::Corrupt {
            page_id: id,
            detail: "page is not allocated".into(),
        })?;
        Ok(f(p))
    }

    fn read_optimistic<R>(
        &self,
        id: PageId,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, ReadToken)> {
        if !self.optimistic {
            return None;
        }
        let p = self.pages.get(&id)?;
        let words: Vec<AtomicU64> = p
            .chunks(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                AtomicU64::new(u64::from_le_bytes(b))
            })
            .collect();
        self.optimistic_reads.set(self.optimistic_reads.get() + 1);
        Some((f(&words), ReadToken(u128::from(id.0))))
    }

    fn is_unchanged(&self, _token: ReadToken) -> bool {
        self.optimistic
    }
}

impl PageWrite for MemPages {
    fn write<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let p = self.pages.get_mut(&id).ok_or_else(|| BTreeError::Corrupt {
            page_id: id,
            detail: "page is not allocated".into(),
        })?;
        Ok(f(p))
    }

    fn allocate(&mut self, page_type: PageType) -> Result<PageId> {
        let id = match self.freed.pop() {
            Some(id) => id,
            None => {
                self.next += 1;
                PageId(self.next - 1)
            }
        };
        let mut p = vec![0u8; self.page_size];
        PageHeader::init(&mut p, id, page_type, Lsn::ZERO);
        self.pages.insert(id, p);
        Ok(id)
    }

    fn copy_page(&mut self, dst: PageId, src: PageId) -> Result<bool> {
        if !self.copies {
            return Ok(false);
        }
        let missing = |id| BTreeError::Corrupt {
            page_id: id,
            detail: "page is not allocated".into(),
        };
        let s = self.pages.get(&src).ok_or_else(|| missing(src))?.clone();
        let d = self.pages.get_mut(&dst).ok_or_else(|| missing(dst))?;
        let ty = PageHeader::read(&s).map_or(PageType::UNWRITTEN, |h| h.page_type);
        let n = d.len();
        let payload = keel_page::PAGE_HEADER_SIZE..n - keel_page::PAGE_TRAILER_SIZE;
        d[payload.clone()].copy_from_slice(&s[payload.clone()]);
        d[..payload.start].fill(0);
        d[payload.end..].fill(0);
        PageHeader::init(d, dst, ty, Lsn::ZERO);
        Ok(true)
    }

    fn reinit(&mut self, id: PageId, page_type: PageType) -> Result<()> {
        let size = self.page_size;
        let p = self.pages.get_mut(&id).ok_or_else(|| BTreeError::Corrupt {
            page_id: id,
            detail: "page is not allocated".into(),
        })?;
        p.iter_mut().for_each(|b| *b = 0);
        debug_assert_eq!(p.len(), size);
        PageHeader::init(p, id, page_type, Lsn::ZERO);
        Ok(())
    }

    fn free(&mut self, id: PageId) -> Result<()> {
        if self.pages.remove(&id).is_none() {
            return Err(BTreeError::Corrupt {
                page_id: id,
                detail: "double free".into(),
            });
        }
        self.freed.push(id);
        Ok(())
    }
}
