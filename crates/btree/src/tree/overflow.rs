//! Values too large for a leaf cell: a chain of overflow pages, each with a header naming the
//! next page and its length. Reading a chain checks every page's type, length and the chain's
//! total against the cell, so a damaged chain is `BTreeError::Corrupt`, never a short value.

use super::*;

impl BTree {
    pub(super) fn write_overflow<S: PageWrite>(
        &self,
        store: &mut S,
        value: &[u8],
    ) -> Result<PageId> {
        let cap = self.limits.overflow_capacity();
        let chunks: Vec<&[u8]> = value.chunks(cap).collect();
        let mut pages = Vec::with_capacity(chunks.len());
        for _ in &chunks {
            pages.push(store.allocate(PageType::OVERFLOW)?);
        }
        for (i, chunk) in chunks.iter().enumerate() {
            let next = pages.get(i + 1).copied().unwrap_or(PageId(0));
            store.write(pages[i], |p| {
                let o = PAGE_HEADER_SIZE;
                wr_u64(p, o, next.0);
                p[o + 8..o + 12].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
                p[o + OVERFLOW_HEADER..o + OVERFLOW_HEADER + chunk.len()].copy_from_slice(chunk);
            })?;
        }
        pages
            .first()
            .copied()
            .ok_or(BTreeError::ValueTooLarge { len: 0 })
    }

    /// Reads `(next, data)` of one overflow page, checking its type and lengths.
    pub(super) fn overflow_page<S: PageRead>(
        &self,
        store: &S,
        id: PageId,
    ) -> Result<(PageId, Vec<u8>)> {
        let cap = self.limits.overflow_capacity();
        store.read(id, |p| {
            let ty = PageHeader::read(p).map(|h| h.page_type);
            if ty != Some(PageType::OVERFLOW) {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!("expected an overflow page, found type {ty:?}"),
                });
            }
            let o = PAGE_HEADER_SIZE;
            let used = rd_u32(p, o + 8) as usize;
            if used > cap {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!("overflow page claims {used} bytes, holds at most {cap}"),
                });
            }
            Ok((
                PageId(rd_u64(p, o)),
                p[o + OVERFLOW_HEADER..o + OVERFLOW_HEADER + used].to_vec(),
            ))
        })?
    }

    pub(super) fn read_overflow<S: PageRead>(
        &self,
        store: &S,
        first: PageId,
        len: u64,
    ) -> Result<Vec<u8>> {
        // Reserved up to 64 MiB: a damaged length must not allocate what the chain never holds.
        let mut out = Vec::with_capacity(len.min(1 << 26) as usize);
        self.walk_overflow(store, first, len, |_, data| out.extend_from_slice(data))?;
        Ok(out)
    }

    /// Walks the overflow chain of a `len`-byte value from `first`, handing each page and its
    /// bytes to `each`; checks that the chain holds exactly `len` bytes, has no empty page, and
    /// ends neither earlier nor later (its last page names no next page: a chain whose tail
    /// points into another chain, or back into itself, passed every check, and freeing it freed
    /// the other value's pages), is no longer than any value can be, and never comes back to a
    /// page it passed (a damaged leaf claiming 2^40 bytes over a chain looping on itself read
    /// 2.7 x 10^8 pages and grew a vector toward a terabyte: a tester). Returns the pages walked.
    pub(super) fn walk_overflow<S: PageRead>(
        &self,
        store: &S,
        first: PageId,
        len: u64,
        mut each: impl FnMut(PageId, &[u8]),
    ) -> Result<u64> {
        if len > u64::from(u32::MAX) {
            return Err(BTreeError::Corrupt {
                page_id: first,
                detail: format!(
                    "an overflow value of {len} bytes: longer than any value (4 GiB - 1)"
                ),
            });
        }
        let mut got = 0u64;
        let mut pages = 0u64;
        let mut id = first;
        let mut prev = first;
        let mut seen = std::collections::HashSet::new();
        while got < len {
            if !seen.insert(id) {
                return Err(BTreeError::Corrupt {
                    page_id: prev,
                    detail: format!(
                        "the overflow chain from {first} comes back to page {id} after {got} of {len} bytes"
                    ),
                });
            }
            if id == PageId(0) {
                return Err(BTreeError::Corrupt {
                    page_id: first,
                    detail: format!("overflow chain ends after {got} of {len} bytes"),
                });
            }
            let (next, data) = self.overflow_page(store, id).map_err(|e| {
                if id == first {
                    e
                } else {
                    BTreeError::BadPointer {
                        page_id: prev,
                        slot: 0,
                        target: id,
                        source: Box::new(e),
                    }
                }
            })?;
            if data.is_empty() {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: "empty overflow page in a chain".into(),
                });
            }
            each(id, &data);
            pages += 1;
            got = got.saturating_add(data.len() as u64);
            prev = id;
            id = next;
        }
        if got != len {
            return Err(BTreeError::Corrupt {
                page_id: first,
                detail: format!("overflow chain holds {got} bytes, the leaf says {len}"),
            });
        }
        if id != PageId(0) {
            return Err(BTreeError::Corrupt {
                page_id: prev,
                detail: format!(
                    "the last page of a {len}-byte overflow chain from {first} names a next page ({id})"
                ),
            });
        }
        Ok(pages)
    }

    /// Reads the `len`-byte value of the overflow chain from `first` and frees the chain (one
    /// walk, checked as [`walk_overflow`](Self::walk_overflow) checks it).
    pub(super) fn take_overflow<S: PageWrite>(
        &self,
        store: &mut S,
        first: PageId,
        len: u64,
    ) -> Result<Vec<u8>> {
        // Reserved up to 64 MiB: a damaged length must not allocate what the chain never holds.
        let mut out = Vec::with_capacity(len.min(1 << 26) as usize);
        self.free_walked(store, first, len, |data| out.extend_from_slice(data))?;
        Ok(out)
    }

    /// Frees the overflow chain of a `len`-byte value from `first`: exactly the pages
    /// [`walk_overflow`](Self::walk_overflow) checks hold it, none past them.
    pub(super) fn free_overflow<S: PageWrite>(
        &self,
        store: &mut S,
        first: PageId,
        len: u64,
    ) -> Result<()> {
        self.free_walked(store, first, len, |_| ())
    }

    /// Walks the chain (handing each page's bytes to `each`), then frees the pages walked.
    fn free_walked<S: PageWrite>(
        &self,
        store: &mut S,
        first: PageId,
        len: u64,
        mut each: impl FnMut(&[u8]),
    ) -> Result<()> {
        let mut ids = Vec::new();
        self.walk_overflow(&*store, first, len, |id, data| {
            ids.push(id);
            each(data);
        })?;
        for id in ids {
            store.free(id)?;
        }
        Ok(())
    }

    pub(super) fn materialize<S: PageRead>(&self, store: &S, v: FoundValue) -> Result<Vec<u8>> {
        match v {
            FoundValue::Inline(v) => Ok(v),
            FoundValue::Overflow { first, len } => self.read_overflow(store, first, len),
        }
    }
}
