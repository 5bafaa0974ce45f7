//! Walking a whole tree: the structural check (key order and bounds, levels, slot bounds,
//! overflow chains; what `BTree::check` reports is what the model tests rely on) and freeing
//! every page of a tree. Both stop at [`MAX_DEPTH`] levels: a cycle of child pointers is
//! corruption, never an endless walk.

use super::*;

/// A node's links: an inner node's children, left to right, or a leaf's overflow chains
/// (first page, value length). One walk of the pointers, shared by the whole-tree walks below.
type Links = (Vec<PageId>, Vec<(PageId, u64)>);

fn links(n: &Node<'_>) -> Result<Links> {
    let mut children = Vec::new();
    let mut overflow = Vec::new();
    if n.is_leaf() {
        for i in 0..n.len() {
            if let ValueRef::Overflow { first, len } = n.value(i)? {
                overflow.push((first, len));
            }
        }
    } else {
        children.reserve(n.len() + 1);
        for c in 0..=n.len() {
            children.push(n.child(c)?);
        }
    }
    Ok((children, overflow))
}

/// A walk deeper than any tree can be: the child pointers form a cycle.
fn cycle(id: PageId) -> BTreeError {
    BTreeError::Corrupt {
        page_id: id,
        detail: "cycle of child pointers".into(),
    }
}

impl BTree {
    /// Walks the whole tree checking its invariants (key order and bounds, levels, slot
    /// bounds, overflow chains); returns what it counted.
    pub fn check<S: PageRead>(&self, store: &S) -> Result<TreeStats> {
        Ok(self.check_with_pages(store)?.0)
    }

    /// [`check`](Self::check), also returning every page of the tree (nodes and overflow
    /// pages, as [`page_ids`](Self::page_ids) lists them) from the same walk: each page is read
    /// once.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    pub fn check_with_pages<S: PageRead>(&self, store: &S) -> Result<(TreeStats, Vec<PageId>)> {
        let mut stats = TreeStats::default();
        let mut ids = Vec::new();
        let level = with_node(store, self.root, |n| Ok(n.level()))?;
        stats.depth = level as usize + 1;
        self.check_node(store, self.root, level, None, None, &mut stats, &mut ids, 0)?;
        Ok((stats, ids))
    }

    /// The number of key/value pairs: a walk that reads every inner node and leaf once and
    /// copies nothing (no values, no overflow pages), so O(pages) but far cheaper than a scan.
    ///
    /// # Errors
    ///
    /// A page cannot be read, is not a node, or the child pointers form a cycle (corruption).
    pub fn len<S: PageRead>(&self, store: &S) -> Result<u64> {
        self.len_node(store, self.root, None, 0)
    }

    fn len_node<S: PageRead>(
        &self,
        store: &S,
        id: PageId,
        from: Option<(PageId, usize)>,
        depth: usize,
    ) -> Result<u64> {
        if depth > MAX_DEPTH {
            return Err(cycle(id));
        }
        let (leaf_len, children) = with_node_from(store, id, from, |n| {
            if n.is_leaf() {
                return Ok((n.len() as u64, Vec::new()));
            }
            Ok((0, links(&n)?.0))
        })?;
        let mut total = leaf_len;
        for (slot, c) in children.into_iter().enumerate() {
            let below = self.len_node(store, c, Some((id, slot)), depth + 1)?;
            total = total
                .checked_add(below)
                .ok_or_else(|| BTreeError::Corrupt {
                    page_id: id,
                    detail: "row count overflows u64".into(),
                })?;
        }
        Ok(total)
    }

    /// Every page of the tree: each node (root first, depth first) and each overflow page of
    /// its values. Every node and overflow page is read once; a damaged node, a chain that ends
    /// early or a cycle is an error naming the page. What a store-wide check uses to account
    /// for every page of a file.
    ///
    /// # Errors
    ///
    /// A page cannot be read, is not what the pointer to it says, or the walk finds a cycle.
    pub fn page_ids<S: PageRead>(&self, store: &S) -> Result<Vec<PageId>> {
        let mut out = Vec::new();
        self.collect_pages(store, self.root, None, 0, &mut out)?;
        Ok(out)
    }

    fn collect_pages<S: PageRead>(
        &self,
        store: &S,
        id: PageId,
        from: Option<(PageId, usize)>,
        depth: usize,
        out: &mut Vec<PageId>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(cycle(id));
        }
        let (children, overflow) = with_node_from(store, id, from, |n| links(&n))?;
        out.push(id);
        for (slot, c) in children.into_iter().enumerate() {
            self.collect_pages(store, c, Some((id, slot)), depth + 1, out)?;
        }
        // Each chain walked as a read walks it (lengths bounded, loops refused).
        for (first, len) in overflow {
            self.walk_overflow(store, first, len, |page, _| out.push(page))?;
        }
        Ok(())
    }

    /// Frees every page of the tree, including the root.
    pub fn destroy<S: PageWrite>(&self, store: &mut S) -> Result<()> {
        self.destroy_node(store, self.root, 0)
    }

    pub(super) fn destroy_node<S: PageWrite>(
        &self,
        store: &mut S,
        id: PageId,
        depth: usize,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(cycle(id));
        }
        let (children, overflow) = with_node(store, id, |n| links(&n))?;
        for c in children {
            self.destroy_node(store, c, depth + 1)?;
        }
        for (first, len) in overflow {
            self.free_overflow(store, first, len)?;
        }
        store.free(id)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_node<S: PageRead>(
        &self,
        store: &S,
        id: PageId,
        level: u8,
        low: Option<&[u8]>,
        high: Option<&[u8]>,
        stats: &mut TreeStats,
        ids: &mut Vec<PageId>,
        depth: usize,
    ) -> Result<()> {
        let corrupt = |detail: String| BTreeError::Corrupt {
            page_id: id,
            detail,
        };
        if depth > MAX_DEPTH {
            return Err(cycle(id));
        }
        let (keys, children, overflow, is_leaf) = with_node(store, id, |n| {
            if n.level() != level {
                return Err(level_error(id, level, n.level()));
            }
            if n.is_leaf() != (level == 0) {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!("leaf flag {} at level {level}", n.is_leaf()),
                });
            }
            let want = if n.is_leaf() {
                PageType::BTREE_LEAF
            } else {
                PageType::BTREE_INNER
            };
            if n.page_type() != Some(want) {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!(
                        "a {} node whose page type is {:?}",
                        if n.is_leaf() { "leaf" } else { "inner" },
                        n.page_type()
                    ),
                });
            }
            n.check_hints()?;
            n.check_cells()?;
            let mut keys = Vec::with_capacity(n.len());
            let mut overflow = Vec::new();
            for i in 0..n.len() {
                keys.push(n.key(i)?.to_vec());
                if n.is_leaf() {
                    if let ValueRef::Overflow { first, len } = n.value(i)? {
                        overflow.push((first, len));
                    }
                }
            }
            let mut children = Vec::new();
            if !n.is_leaf() {
                for c in 0..=n.len() {
                    children.push(n.child(c)?);
                }
            }
            Ok((keys, children, overflow, n.is_leaf()))
        })?;
        for w in keys.windows(2) {
            if w[0] >= w[1] {
                return Err(corrupt(format!(
                    "keys out of order: {:?} >= {:?}",
                    w[0], w[1]
                )));
            }
        }
        if let (Some(first), Some(lo)) = (keys.first(), low) {
            if first.as_slice() < lo {
                return Err(corrupt(format!(
                    "key {first:?} below the parent's bound {lo:?}"
                )));
            }
        }
        if let (Some(last), Some(hi)) = (keys.last(), high) {
            if last.as_slice() >= hi {
                return Err(corrupt(format!(
                    "key {last:?} not below the parent's bound {hi:?}"
                )));
            }
        }
        ids.push(id);
        if is_leaf {
            if id != self.root && keys.is_empty() {
                stats.empty_leaves += 1;
            }
            stats.leaves += 1;
            stats.entries += keys.len();
            for (first, len) in overflow {
                let pages = self.walk_overflow(store, first, len, |p, _| ids.push(p))?;
                stats.overflow_pages += pages as usize;
            }
            return Ok(());
        }
        stats.inners += 1;
        for (c, child) in children.iter().enumerate() {
            let lo = if c == 0 {
                low
            } else {
                Some(keys[c - 1].as_slice())
            };
            let hi = if c < keys.len() {
                Some(keys[c].as_slice())
            } else {
                high
            };
            self.check_node(store, *child, level - 1, lo, hi, stats, ids, depth + 1)
                .map_err(|e| BTreeError::BadPointer {
                    page_id: id,
                    slot: c,
                    target: *child,
                    source: Box::new(e),
                })?;
        }
        Ok(())
    }
}
