//! A node decoded for people: what `keel dump page` prints. Decoding goes through the same
//! checked accessors as the tree's own reads, so a damaged node is an error naming the page
//! and the first field that does not hold, never a panic.

use crate::node::{Node, ValueRef};
use crate::Result;
use keel_page::PageId;
use serde::Serialize;

/// A leaf cell's value as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CellValue {
    /// Stored in the leaf.
    Inline(Vec<u8>),
    /// Stored in a chain of overflow pages.
    Overflow {
        /// The chain's first page.
        first: PageId,
        /// The value's length in bytes.
        len: u64,
    },
}

/// One cell of a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CellDump {
    /// The cell's key (a leaf's row key, or an inner node's separator).
    pub key: Vec<u8>,
    /// A leaf cell's value (`None` in an inner node).
    pub value: Option<CellValue>,
}

/// A B-tree node as stored in one page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeDump {
    /// The page the node was read from.
    pub page_id: PageId,
    /// Its level (0: a leaf).
    pub level: u8,
    /// Whether it is a leaf.
    pub leaf: bool,
    /// Bytes of the common key prefix its search hints skip.
    pub hint_prefix: usize,
    /// Its cells, in slot order.
    pub cells: Vec<CellDump>,
    /// An inner node's children, left to right (one more than its cells); empty for a leaf.
    pub children: Vec<PageId>,
}

/// Decodes the node in `page` (read from page `id`).
///
/// # Errors
///
/// [`crate::BTreeError::Corrupt`] naming the page when it is not a node or a field does not
/// hold (slot bounds, cell lengths, level).
pub fn dump_node(page: &[u8], id: PageId) -> Result<NodeDump> {
    let n = Node::new(page, id)?;
    let mut cells = Vec::with_capacity(n.len());
    for i in 0..n.len() {
        let key = n.key(i)?.to_vec();
        let value = if n.is_leaf() {
            Some(match n.value(i)? {
                ValueRef::Inline(v) => CellValue::Inline(v.to_vec()),
                ValueRef::Overflow { first, len } => CellValue::Overflow { first, len },
            })
        } else {
            None
        };
        cells.push(CellDump { key, value });
    }
    let mut children = Vec::new();
    if !n.is_leaf() {
        for c in 0..=n.len() {
            children.push(n.child(c)?);
        }
    }
    Ok(NodeDump {
        page_id: id,
        level: n.level(),
        leaf: n.is_leaf(),
        hint_prefix: n.hint_prefix(),
        cells,
        children,
    })
}
