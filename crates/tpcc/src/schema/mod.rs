//! The nine TPC-C tables (WAREHOUSE and DISTRICT each vertically partitioned in two), two
//! secondary indexes and the workload's meta table on Keel's named tables: key layout
//! (big-endian composite keys, so byte order = the spec's ordering) and the compact binary row
//! encoding. The byte layout is documented in `docs/format.md`, section "keel-tpcc".
//!
//! Vertical partitioning (format version 2): W_YTD lives in its own table `warehouse_ytd` and
//! D_YTD in `district_ytd`, keyed like their parent rows; `warehouse` keeps the static columns
//! (W_NAME, address, W_TAX) and `district` the static columns plus D_NEXT_O_ID. The reason is
//! the concurrent writers' row-granular optimistic validation: a transaction conflicts when any
//! row it read changed, whatever column changed. With W_YTD and D_YTD inside the rows, every
//! Payment (which updates them) invalidated every concurrent New-Order of the same warehouse,
//! which reads W_TAX and D_TAX from the same rows — a conflict on columns neither transaction
//! shares. TPC-C clause 1.6 permits vertical partitioning when the transactions' logic and
//! results are unchanged, and they are: Payment reads and updates the YTD rows where it updated
//! the columns, New-Order reads the same static columns as before, and conditions 1, 8 and 9
//! read W_YTD and D_YTD from the YTD tables. (What remains shared: a Payment still reads the
//! district row for D_NAME, and a New-Order still updates D_NEXT_O_ID there, so a New-Order
//! committing while a Payment of its district runs makes that Payment run again. Few of
//! Payment's conflicts are that one; most are Payments of one warehouse on its `warehouse_ytd`
//! row, a true conflict.)
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
    /// WAREHOUSE (static columns), key (W_ID).
    pub const WAREHOUSE: &str = "warehouse";
    /// WAREHOUSE's W_YTD, vertically partitioned out of [`WAREHOUSE`], key (W_ID).
    pub const WAREHOUSE_YTD: &str = "warehouse_ytd";
    /// DISTRICT (static columns and D_NEXT_O_ID), key (W_ID, D_ID).
    pub const DISTRICT: &str = "district";
    /// DISTRICT's D_YTD, vertically partitioned out of [`DISTRICT`], key (W_ID, D_ID).
    pub const DISTRICT_YTD: &str = "district_ytd";
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
    pub const ALL: [&str; 14] = [
        ITEM,
        WAREHOUSE,
        WAREHOUSE_YTD,
        STOCK,
        DISTRICT,
        DISTRICT_YTD,
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
/// Format version stored in the load marker; `run` and `check` refuse a store loaded with
/// another. 1: W_YTD and D_YTD inside the warehouse and district rows; 2: in their own tables
/// [`table::WAREHOUSE_YTD`] and [`table::DISTRICT_YTD`].
pub const FORMAT_VERSION: u32 = 2;
