//! Which rows can a table take? The limits on a row's key and value, checked before an insert
//! changes anything, so that a row refused for its size leaves the transaction usable.
//!
//! Invariants: a key longer than [`crate::max_key_len`] is [`Error::KeyTooLarge`]; a value
//! longer than [`crate::MAX_VALUE_LEN`] is [`Error::ValueTooLarge`]; a value whose overflow
//! chain and leaf alone are more pages than the pool lets one write transaction hold (no-steal:
//! they stay in memory until the commit) is [`Error::ValueTooLargeForPool`] — such an insert
//! could only fail part-way, which fails the whole transaction (design invariant 12). The
//! bound is a lower one: an insert that passes may still need more (a split, pages the
//! transaction already holds) and then fails part-way as before.

use crate::store::Inner;
use crate::{Error, Result};

/// [`Error::KeyTooLarge`] when `key` is longer than the store's pages allow.
pub(crate) fn check_key(inner: &Inner, key: &[u8]) -> Result<()> {
    let max = crate::max_key_len(inner.config.page_size);
    if key.len() > max {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max,
        });
    }
    Ok(())
}

/// [`check_key`], then [`Error::ValueTooLarge`] or [`Error::ValueTooLargeForPool`] when
/// `value` can never be stored under `key` in one transaction of this store.
pub(crate) fn check_row(inner: &Inner, key: &[u8], value: &[u8]) -> Result<()> {
    check_key(inner, key)?;
    if value.len() > crate::MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: crate::MAX_VALUE_LEN,
        });
    }
    let limits = keel_btree::Limits::new(inner.config.page_size);
    // The chain's pages and the leaf that points to it.
    let pages = limits
        .overflow_pages(key.len(), value.len())
        .saturating_add(1);
    let limit = inner.pool.max_txn_pages();
    if pages > limit {
        return Err(Error::ValueTooLargeForPool {
            len: value.len(),
            pages,
            limit,
        });
    }
    Ok(())
}
