//! The nine TPC-C tables, two secondary indexes and the workload's meta table on Keel's named
//! tables: key layout (big-endian composite keys, so byte order = the spec's ordering) and the
//! compact binary row encoding. The byte layout is documented in `docs/format.md`, section
//! "keel-tpcc".
//!
//! Invariants (tests break each on purpose):
//! - keys sort like their id tuples: for every table, `key(a) < key(b)` iff `a < b` componentwise
//!   lexicographically (big-endian, fixed width; names zero-padded to 16 bytes);
//! - a row never decodes from bytes it was not encoded to: truncated or over-long values are
//!   [`crate::error::TpccError::Corrupt`] naming the table and key, never a panic.
//!
//! Files: `keys.rs` (key builders and decoders), `codec.rs` (the row byte encoding), `rows.rs`
//! (one struct per table row), `tests.rs`.

mod codec;
mod keys;
mod rows;
#[cfg(test)]
mod tests;

pub use codec::{Dec, Enc};
pub use keys::*;
pub use rows::*;

/// Table names as stored in the engine.
pub mod table {
    /// WAREHOUSE, key (W_ID).
    pub const WAREHOUSE: &str = "warehouse";
    /// DISTRICT, key (W_ID, D_ID).
    pub const DISTRICT: &str = "district";
    /// CUSTOMER, key (W_ID, D_ID, C_ID).
    pub const CUSTOMER: &str = "customer";
    /// Secondary index customer-by-last-name, key (W_ID, D_ID, C_LAST, C_FIRST, C_ID), empty value.
    pub const CUSTOMER_BY_NAME: &str = "customer_by_name";
    /// HISTORY, key (H_W_ID, H_D_ID, unique 64-bit id); the spec gives it no primary key.
    pub const HISTORY: &str = "history";
    /// NEW-ORDER, key (W_ID, D_ID, O_ID), empty value.
    pub const NEW_ORDER: &str = "new_order";
    /// ORDER, key (W_ID, D_ID, O_ID).
    pub const ORDER: &str = "orders";
    /// Secondary index order-by-customer, key (W_ID, D_ID, C_ID, O_ID), empty value.
    pub const ORDER_BY_CUSTOMER: &str = "order_by_customer";
    /// ORDER-LINE, key (W_ID, D_ID, O_ID, OL_NUMBER).
    pub const ORDER_LINE: &str = "order_line";
    /// ITEM, key (I_ID).
    pub const ITEM: &str = "item";
    /// STOCK, key (W_ID, I_ID).
    pub const STOCK: &str = "stock";
    /// The workload's own rows: the load marker, per-warehouse delivery counters, run counter.
    pub const META: &str = "tpcc_meta";
    /// Every table, in load order.
    pub const ALL: [&str; 12] = [
        ITEM,
        WAREHOUSE,
        STOCK,
        DISTRICT,
        CUSTOMER,
        CUSTOMER_BY_NAME,
        HISTORY,
        ORDER,
        ORDER_BY_CUSTOMER,
        NEW_ORDER,
        ORDER_LINE,
        META,
    ];
}

/// Districts per warehouse.
pub const DISTRICTS: u8 = 10;
/// Customers per district.
pub const CUSTOMERS: u16 = 3000;
/// Orders per district at load.
pub const ORDERS: u32 = 3000;
/// The first order id with a NEW-ORDER row at load (orders 2101..=3000 are undelivered).
pub const FIRST_NEW_ORDER: u32 = 2101;
/// Items in the spec's ITEM table (also the stock rows per warehouse).
pub const ITEMS: u32 = 100_000;
/// Width of C_LAST and C_FIRST in the by-name index key.
pub const NAME_WIDTH: usize = 16;
/// Format version stored in the load marker.
pub const FORMAT_VERSION: u32 = 1;
