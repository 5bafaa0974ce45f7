//! keel-btree: a B+tree stored in pages.
//!
//! The tree never touches files or the buffer pool directly: it works through [`PageWrite`], which
//! (with [`PageRead`] for reading) the store implements on top of the buffer pool (pin + latch per access, redo derived by the
//! transaction layer from each page's before-image) and which [`MemPages`] implements in memory
//! for model tests.
//!
//! # Node layout (inside a page's payload; see `docs/format.md`)
//!
//! A node is a slotted page: a 24-byte node header right after the page header, an array of 4-byte
//! slots growing upwards (sorted by key), and cells growing downwards from the trailer. Leaves hold
//! `(key, value)` cells, values larger than [`Limits::max_inline_value`] live in a chain of
//! overflow pages. Inner nodes hold `(key, child)` cells plus a leftmost child: the child of cell
//! `i` holds keys `>= key_i`, the leftmost child keys `< key_0`. The root page of a tree never
//! changes (a root split moves the root's contents into two new children), so the catalog never
//! needs an update when a tree grows.
//!
//! # Invariants (each checked by [`BTree::check`] and tested by breaking it on purpose)
//!
//! 1. Keys within a node are strictly increasing; every key in the subtree of a child lies within
//!    the bounds given by its parent's separators.
//! 2. All leaves are at the same depth (level 0), inner nodes one level above their children.
//! 3. Slot offsets and cell lengths stay inside the page: a node whose bytes break this is
//!    reported as [`BTreeError::Corrupt`] naming the page, never followed.
//! 4. No leaf below the root is without a row: a removal that empties a leaf unlinks it from
//!    its parent and frees it (a parent left without a child goes too; the root, whose id is
//!    the tree's, becomes an empty leaf). Nodes are not merged, so a leaf can hold a single row
//!    and an inner node a single child, but the tree never keeps a page that holds nothing
//!    (a table used as a queue grew by every page it ever held: a tester). Counted by
//!    [`TreeStats::empty_leaves`] (stores of older builds may still have some: they read
//!    correctly); tested by the model test, which fails with the unlink switched off.

mod dump;
mod mem;
mod node;
mod optimistic;
mod tree;

pub use dump::{dump_node, CellDump, CellValue, NodeDump};
pub use keel_page::PageOp;
pub use mem::MemPages;
pub use node::Limits;
pub use tree::{BTree, Cursor, Range, TreeStats, GET_WITH_INLINE};

use keel_page::{PageId, PageType};
use std::sync::atomic::AtomicU64;

/// What an implementation of [`PageRead::read_optimistic`] validated (opaque to the tree: it
/// only hands it back to [`PageRead::is_unchanged`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadToken(pub u128);

/// Errors from B-tree operations.
#[derive(Debug, thiserror::Error)]
pub enum BTreeError {
    /// A node's bytes are inconsistent (bad slot, offset or length): never used as data.
    #[error("B-tree {page_id} is corrupt: {detail}")]
    Corrupt {
        /// The page.
        page_id: PageId,
        /// What is wrong.
        detail: String,
    },
    /// The key is longer than this page size allows.
    #[error("key of {len} bytes is longer than the maximum of {max} for this page size")]
    KeyTooLarge {
        /// Key length.
        len: usize,
        /// Maximum.
        max: usize,
    },
    /// The value is longer than Keel supports (4 GiB).
    #[error("value of {len} bytes is too large")]
    ValueTooLarge {
        /// Value length.
        len: usize,
    },
    /// Following a page pointer read from disk failed: the child (or overflow) page it names
    /// could not be read or is not what the pointer promised. Names the page and slot that held
    /// the pointer, the target, and the cause (which may be a storage error such as a page out of
    /// range, never written, or failing its checksum).
    #[error("{page_id}, slot {slot}: pointer to {target}: {source}")]
    BadPointer {
        /// The page that holds the pointer.
        page_id: PageId,
        /// The slot (child index) of the pointer in that page.
        slot: usize,
        /// The page the pointer names.
        target: PageId,
        /// Why following it failed.
        #[source]
        source: Box<BTreeError>,
    },
    /// The page store failed (I/O, corruption detected by a checksum, pool exhausted...).
    #[error(transparent)]
    Storage(Box<dyn std::error::Error + Send + Sync>),
}

/// Result with [`BTreeError`].
pub type Result<T, E = BTreeError> = std::result::Result<T, E>;

/// Read access to a tree's pages. Page access is scoped by closures so implementations can pin
/// and latch a page exactly for the duration of the access. Implemented for `&T` too, so range
/// cursors can own a cheap handle.
pub trait PageRead {
    /// Page size in bytes.
    fn page_size(&self) -> usize;

    /// Runs `f` on the bytes of page `id` (shared access).
    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R>;

    /// Optimistic read of page `id`, without latching it: `f` gets the page as aligned
    /// little-endian 8-byte words that may change while it reads them (it loads them
    /// `Relaxed`, bounds-checks all it decodes and must terminate on any bytes). Returns
    /// `Some((f's result, token))` only if the page provably did not change during `f`;
    /// `None` if it may have, if the page is not at hand (e.g. not resident), or if the
    /// implementation has no optimistic reads (the default) — the caller then uses
    /// [`read`](Self::read). `BTree::get` uses it for its descent.
    fn read_optimistic<R>(
        &self,
        id: PageId,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, ReadToken)> {
        let _ = (id, f);
        None
    }

    /// A hint that pages `ids` will be read soon (a forward cursor's next leaves): an
    /// implementation may read the ones it does not hold in one batch. Errors are not reported
    /// here (the later [`read`](Self::read) reports them). Default: nothing.
    fn prefetch(&self, ids: &[PageId]) {
        let _ = ids;
    }

    /// Whether the page an optimistic read validated under `token` is still unchanged (the
    /// tree re-checks a parent after reading its child, so the child pointer it followed was
    /// still current). Default: `false`.
    fn is_unchanged(&self, token: ReadToken) -> bool {
        let _ = token;
        false
    }

    /// A number that changes whenever the pages read through this store may have changed
    /// since it was last asked (a write transaction wrote). A cursor compares it before each
    /// row and, when it changed, finds its place again by key instead of trusting the path it
    /// kept. Default: 0, for stores whose pages do not change while read (a snapshot).
    fn generation(&self) -> u64 {
        0
    }
}

impl<T: PageRead + ?Sized> PageRead for &T {
    fn page_size(&self) -> usize {
        (**self).page_size()
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        (**self).read(id, f)
    }

    fn read_optimistic<R>(
        &self,
        id: PageId,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, ReadToken)> {
        (**self).read_optimistic(id, f)
    }

    fn is_unchanged(&self, token: ReadToken) -> bool {
        (**self).is_unchanged(token)
    }

    fn prefetch(&self, ids: &[PageId]) {
        (**self).prefetch(ids)
    }

    fn generation(&self) -> u64 {
        (**self).generation()
    }
}

/// Where a tree's pages live, for changing them.
pub trait PageWrite: PageRead {
    /// Runs `f` on the bytes of page `id` (exclusive access; the change must be logged by the
    /// implementation). Only the payload (between page header and trailer) may be changed.
    fn write<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> R) -> Result<R>;

    /// Applies `edits` to page `id` in order (exclusive access; logged by the implementation).
    /// Every edit stays within the payload. The tree uses it on its hot path (a cell inserted
    /// into a node with room), where it knows the exact changes; the default goes through
    /// [`PageWrite::write`].
    fn edit(&mut self, id: PageId, edits: &[PageOp<'_>]) -> Result<()> {
        self.write(id, |p| edits.iter().try_for_each(|e| e.apply(p)))?
            .map_err(|e| BTreeError::Corrupt {
                page_id: id,
                detail: format!("an edit falls outside the payload: {e}"),
            })
    }

    /// Plans a change from page `id` as it is and makes it, under one exclusive access: `plan`
    /// sees the page and returns `Ok(p)` to change it or `Err(o)` to leave it as it is (the
    /// outcome is returned); for `Ok(p)`, `apply` is handed `p` and a function that applies
    /// edits to the page as [`edit`](Self::edit) does. The tree's hot path (a cell inserted into
    /// a leaf with room) uses it so that the search, the plan and the edits cost one page
    /// lookup and one latch, not three. The default reads, then edits: the same outcome.
    ///
    /// # Errors
    ///
    /// The page cannot be read or written, or `plan` or `apply` fails.
    fn edit_planned<P, O>(
        &mut self,
        id: PageId,
        plan: impl FnOnce(&[u8]) -> Result<std::result::Result<P, O>>,
        apply: impl FnOnce(P, &mut dyn FnMut(&[PageOp<'_>]) -> Result<()>) -> Result<()>,
    ) -> Result<std::result::Result<(), O>> {
        match self.read(id, plan)?? {
            Ok(p) => {
                apply(p, &mut |ops| self.edit(id, ops))?;
                Ok(Ok(()))
            }
            Err(o) => Ok(Err(o)),
        }
    }

    /// Allocates a page and initialises it (zeroed payload, header with `page_type`); the
    /// implementation logs this as a page-init record.
    fn allocate(&mut self, page_type: PageType) -> Result<PageId>;

    /// Re-initialises an existing page as `page_type` (payload zeroed); logged as a page-init
    /// record. Used when the root changes from leaf to inner node.
    fn reinit(&mut self, id: PageId, page_type: PageType) -> Result<()>;

    /// Frees a page (it will not be read again by this tree).
    fn free(&mut self, id: PageId) -> Result<()>;

    /// Makes page `dst`, just allocated by this tree, a copy of page `src` as it is now: the
    /// header set for `dst` with `src`'s page type, every payload byte copied. The
    /// implementation logs it as one page-copy record instead of the bytes (a split's right
    /// half costs a few bytes of redo, not half a page). Returns false, doing nothing, where
    /// it does not make copies (the default): the tree then writes `dst`'s bytes itself.
    fn copy_page(&mut self, _dst: PageId, _src: PageId) -> Result<bool> {
        Ok(false)
    }
}
