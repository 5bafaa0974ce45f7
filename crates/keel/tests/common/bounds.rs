//! Range bounds in the model tests.

use std::ops::Bound;

/// Whether a range from `lo` to `hi` can hold any key: else `BTreeMap::range` would panic, and
/// the store answers no rows.
pub fn holds_keys(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}
