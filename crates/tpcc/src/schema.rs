//! The nine TPC-C tables, two secondary indexes and the workload's meta table on Keel's named
//! tables: key layout (big-endian composite keys, so byte order = the spec's ordering) and the
//! compact binary row encoding. The byte layout is documented in `docs/format.md`, section
//! "keel-tpcc".
//!
//! Invariants (tests break each on purpose):
//! - keys sort like their id tuples: for every table, `key(a) < key(b)` iff `a < b` componentwise
//!   lexicographically (big-endian, fixed width; names zero-padded to 16 bytes);
//! - a row never decodes from bytes it was not encoded to: truncated or over-long values are
//!   [`TpccError::Corrupt`] naming the table and key, never a panic.

use serde::{Deserialize, Serialize};

use crate::error::{TpccError, TpccResult};
use crate::rng::NuRandC;

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

// ---------------------------------------------------------------------------------------------
// Keys

/// Hex of a key, for error messages.
pub fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The smallest byte string greater than every string starting with `prefix` (for range ends).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut v = prefix.to_vec();
    while let Some(last) = v.pop() {
        if last != 0xFF {
            v.push(last + 1);
            return v;
        }
    }
    vec![0xFF; 64]
}

fn padded_name(s: &str) -> [u8; NAME_WIDTH] {
    let mut out = [0u8; NAME_WIDTH];
    let b = s.as_bytes();
    let n = b.len().min(NAME_WIDTH);
    out[..n].copy_from_slice(&b[..n]);
    out
}

/// WAREHOUSE key.
pub fn warehouse_key(w: u16) -> Vec<u8> {
    w.to_be_bytes().to_vec()
}
/// DISTRICT key.
pub fn district_key(w: u16, d: u8) -> Vec<u8> {
    let mut k = w.to_be_bytes().to_vec();
    k.push(d);
    k
}
/// CUSTOMER key.
pub fn customer_key(w: u16, d: u8, c: u16) -> Vec<u8> {
    let mut k = district_key(w, d);
    k.extend_from_slice(&c.to_be_bytes());
    k
}
/// Prefix of the by-name index for one last name in a district.
pub fn customer_name_prefix(w: u16, d: u8, last: &str) -> Vec<u8> {
    let mut k = district_key(w, d);
    k.extend_from_slice(&padded_name(last));
    k
}
/// Customer-by-last-name index key.
pub fn customer_name_key(w: u16, d: u8, last: &str, first: &str, c: u16) -> Vec<u8> {
    let mut k = customer_name_prefix(w, d, last);
    k.extend_from_slice(&padded_name(first));
    k.extend_from_slice(&c.to_be_bytes());
    k
}
/// HISTORY key.
pub fn history_key(w: u16, d: u8, id: u64) -> Vec<u8> {
    let mut k = district_key(w, d);
    k.extend_from_slice(&id.to_be_bytes());
    k
}
/// NEW-ORDER key (same layout as ORDER).
pub fn new_order_key(w: u16, d: u8, o: u32) -> Vec<u8> {
    order_key(w, d, o)
}
/// ORDER key.
pub fn order_key(w: u16, d: u8, o: u32) -> Vec<u8> {
    let mut k = district_key(w, d);
    k.extend_from_slice(&o.to_be_bytes());
    k
}
/// Order-by-customer index key.
pub fn order_customer_key(w: u16, d: u8, c: u16, o: u32) -> Vec<u8> {
    let mut k = customer_key(w, d, c);
    k.extend_from_slice(&o.to_be_bytes());
    k
}
/// ORDER-LINE key.
pub fn order_line_key(w: u16, d: u8, o: u32, ol: u8) -> Vec<u8> {
    let mut k = order_key(w, d, o);
    k.push(ol);
    k
}
/// ITEM key.
pub fn item_key(i: u32) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}
/// STOCK key.
pub fn stock_key(w: u16, i: u32) -> Vec<u8> {
    let mut k = w.to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Meta key of the load marker.
pub const META_LOAD: &[u8] = b"load";
/// Meta key of the run counter (used to make HISTORY ids unique across runs).
pub const META_RUNS: &[u8] = b"runs";
/// Meta key of a warehouse's delivery counters (10 × u32, deliveries per district since load).
pub fn meta_deliveries_key(w: u16) -> Vec<u8> {
    let mut k = b"dlv".to_vec();
    k.extend_from_slice(&w.to_be_bytes());
    k
}

fn corrupt(table: &'static str, key: &[u8], detail: impl Into<String>) -> TpccError {
    TpccError::Corrupt {
        table,
        key: hex(key),
        detail: detail.into(),
    }
}

fn be_u16(table: &'static str, key: &[u8], at: usize) -> TpccResult<u16> {
    key.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| corrupt(table, key, format!("key too short for a u16 at {at}")))
}
fn be_u32(table: &'static str, key: &[u8], at: usize) -> TpccResult<u32> {
    key.get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| corrupt(table, key, format!("key too short for a u32 at {at}")))
}
fn be_u8(table: &'static str, key: &[u8], at: usize) -> TpccResult<u8> {
    key.get(at)
        .copied()
        .ok_or_else(|| corrupt(table, key, format!("key too short for a u8 at {at}")))
}
fn exact_len(table: &'static str, key: &[u8], len: usize) -> TpccResult<()> {
    if key.len() == len {
        Ok(())
    } else {
        Err(corrupt(
            table,
            key,
            format!("key is {} bytes, expected {len}", key.len()),
        ))
    }
}

/// Decodes a DISTRICT key into (W_ID, D_ID).
pub fn decode_district_key(key: &[u8]) -> TpccResult<(u16, u8)> {
    exact_len(table::DISTRICT, key, 3)?;
    Ok((
        be_u16(table::DISTRICT, key, 0)?,
        be_u8(table::DISTRICT, key, 2)?,
    ))
}
/// Decodes a WAREHOUSE key.
pub fn decode_warehouse_key(key: &[u8]) -> TpccResult<u16> {
    exact_len(table::WAREHOUSE, key, 2)?;
    be_u16(table::WAREHOUSE, key, 0)
}
/// Decodes a CUSTOMER key into (W_ID, D_ID, C_ID).
pub fn decode_customer_key(key: &[u8]) -> TpccResult<(u16, u8, u16)> {
    exact_len(table::CUSTOMER, key, 5)?;
    Ok((
        be_u16(table::CUSTOMER, key, 0)?,
        be_u8(table::CUSTOMER, key, 2)?,
        be_u16(table::CUSTOMER, key, 3)?,
    ))
}
/// Decodes an ORDER or NEW-ORDER key into (W_ID, D_ID, O_ID).
pub fn decode_order_key(table: &'static str, key: &[u8]) -> TpccResult<(u16, u8, u32)> {
    exact_len(table, key, 7)?;
    Ok((
        be_u16(table, key, 0)?,
        be_u8(table, key, 2)?,
        be_u32(table, key, 3)?,
    ))
}
/// Decodes an ORDER-LINE key into (W_ID, D_ID, O_ID, OL_NUMBER).
pub fn decode_order_line_key(key: &[u8]) -> TpccResult<(u16, u8, u32, u8)> {
    let t = table::ORDER_LINE;
    exact_len(t, key, 8)?;
    Ok((
        be_u16(t, key, 0)?,
        be_u8(t, key, 2)?,
        be_u32(t, key, 3)?,
        be_u8(t, key, 7)?,
    ))
}
/// Decodes a HISTORY key into (H_W_ID, H_D_ID, id).
pub fn decode_history_key(key: &[u8]) -> TpccResult<(u16, u8, u64)> {
    let t = table::HISTORY;
    exact_len(t, key, 11)?;
    let mut id = [0u8; 8];
    id.copy_from_slice(&key[3..11]);
    Ok((
        be_u16(t, key, 0)?,
        be_u8(t, key, 2)?,
        u64::from_be_bytes(id),
    ))
}
/// The C_ID at the end of a customer-by-name index key.
pub fn decode_customer_name_key(key: &[u8]) -> TpccResult<u16> {
    let t = table::CUSTOMER_BY_NAME;
    exact_len(t, key, 3 + 2 * NAME_WIDTH + 2)?;
    be_u16(t, key, 3 + 2 * NAME_WIDTH)
}
/// The O_ID at the end of an order-by-customer index key.
pub fn decode_order_customer_key(key: &[u8]) -> TpccResult<u32> {
    let t = table::ORDER_BY_CUSTOMER;
    exact_len(t, key, 9)?;
    be_u32(t, key, 5)
}

// ---------------------------------------------------------------------------------------------
// Row encoding

/// Appends fields to a row buffer (little-endian integers, length-prefixed strings,
/// fixed-width CHAR(n) fields without a prefix).
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// VARCHAR up to 255 bytes: u8 length + bytes (longer input is truncated).
    fn str8(&mut self, s: &str) -> &mut Self {
        let b = &s.as_bytes()[..s.len().min(255)];
        self.0.push(b.len() as u8);
        self.0.extend_from_slice(b);
        self
    }
    /// VARCHAR up to 65535 bytes: u16 length + bytes.
    fn str16(&mut self, s: &str) -> &mut Self {
        let b = &s.as_bytes()[..s.len().min(65535)];
        self.0.extend_from_slice(&(b.len() as u16).to_le_bytes());
        self.0.extend_from_slice(b);
        self
    }
    /// CHAR(n): exactly n bytes, space-padded or truncated.
    fn fixed(&mut self, s: &str, n: usize) -> &mut Self {
        let b = s.as_bytes();
        for i in 0..n {
            self.0.push(*b.get(i).unwrap_or(&b' '));
        }
        self
    }
    fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).i64(x),
            None => self.u8(0),
        }
    }
    fn opt_u8(&mut self, v: Option<u8>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).u8(x),
            None => self.u8(0),
        }
    }
}

/// Reads fields back; every read is bounds-checked and reports the table and key.
pub struct Dec<'a> {
    table: &'static str,
    key: &'a [u8],
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    /// A decoder over `buf`, the value of `key` in `table`.
    pub fn new(table: &'static str, key: &'a [u8], buf: &'a [u8]) -> Dec<'a> {
        Dec {
            table,
            key,
            buf,
            pos: 0,
        }
    }
    fn take(&mut self, n: usize) -> TpccResult<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(e) => {
                let s = &self.buf[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => Err(corrupt(
                self.table,
                self.key,
                format!(
                    "value truncated: need {n} bytes at offset {} of {}",
                    self.pos,
                    self.buf.len()
                ),
            )),
        }
    }
    fn u8(&mut self) -> TpccResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> TpccResult<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> TpccResult<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self) -> TpccResult<i32> {
        let b = self.take(4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i64(&mut self) -> TpccResult<i64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }
    fn utf8(&self, b: &[u8]) -> TpccResult<String> {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| corrupt(self.table, self.key, "string field is not UTF-8"))
    }
    fn str8(&mut self) -> TpccResult<String> {
        let n = self.u8()? as usize;
        let b = self.take(n)?;
        self.utf8(b)
    }
    fn str16(&mut self) -> TpccResult<String> {
        let n = self.u16()? as usize;
        let b = self.take(n)?;
        self.utf8(b)
    }
    fn fixed(&mut self, n: usize) -> TpccResult<String> {
        let b = self.take(n)?;
        self.utf8(b)
    }
    fn opt_i64(&mut self) -> TpccResult<Option<i64>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.i64()?)),
            t => Err(corrupt(self.table, self.key, format!("bad option tag {t}"))),
        }
    }
    fn opt_u8(&mut self) -> TpccResult<Option<u8>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u8()?)),
            t => Err(corrupt(self.table, self.key, format!("bad option tag {t}"))),
        }
    }
    fn end(&self) -> TpccResult<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(corrupt(
                self.table,
                self.key,
                format!(
                    "{} unexpected trailing bytes at offset {}",
                    self.buf.len() - self.pos,
                    self.pos
                ),
            ))
        }
    }
}

/// A street address (street 1, street 2, city, state CHAR(2), zip CHAR(9)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// VARCHAR(20).
    pub street_1: String,
    /// VARCHAR(20).
    pub street_2: String,
    /// VARCHAR(20).
    pub city: String,
    /// CHAR(2).
    pub state: String,
    /// CHAR(9).
    pub zip: String,
}

impl Address {
    fn enc(&self, e: &mut Enc) {
        e.str8(&self.street_1)
            .str8(&self.street_2)
            .str8(&self.city)
            .fixed(&self.state, 2)
            .fixed(&self.zip, 9);
    }
    fn dec(d: &mut Dec<'_>) -> TpccResult<Address> {
        Ok(Address {
            street_1: d.str8()?,
            street_2: d.str8()?,
            city: d.str8()?,
            state: d.fixed(2)?,
            zip: d.fixed(9)?,
        })
    }
}

/// A table row: encodes to and decodes from the compact binary value.
pub trait Row: Sized {
    /// The table the row lives in.
    const TABLE: &'static str;
    /// The value bytes.
    fn encode(&self) -> Vec<u8>;
    /// Decodes the value of `key`.
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self>;
}

/// WAREHOUSE row (W_ID is the key). Money in cents, tax in 1/10000.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warehouse {
    /// W_NAME VARCHAR(10).
    pub name: String,
    /// W_STREET_1 .. W_ZIP.
    pub address: Address,
    /// W_TAX, 0..=2000 (0.0000..0.2000).
    pub tax: i32,
    /// W_YTD in cents.
    pub ytd: i64,
}

impl Row for Warehouse {
    const TABLE: &'static str = table::WAREHOUSE;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.str8(&self.name);
        self.address.enc(&mut e);
        e.i32(self.tax).i64(self.ytd);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = Warehouse {
            name: d.str8()?,
            address: Address::dec(&mut d)?,
            tax: d.i32()?,
            ytd: d.i64()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// DISTRICT row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct District {
    /// D_NAME VARCHAR(10).
    pub name: String,
    /// D_STREET_1 .. D_ZIP.
    pub address: Address,
    /// D_TAX in 1/10000.
    pub tax: i32,
    /// D_YTD in cents.
    pub ytd: i64,
    /// D_NEXT_O_ID.
    pub next_o_id: u32,
}

impl Row for District {
    const TABLE: &'static str = table::DISTRICT;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.str8(&self.name);
        self.address.enc(&mut e);
        e.i32(self.tax).i64(self.ytd).u32(self.next_o_id);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = District {
            name: d.str8()?,
            address: Address::dec(&mut d)?,
            tax: d.i32()?,
            ytd: d.i64()?,
            next_o_id: d.u32()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// CUSTOMER row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Customer {
    /// C_FIRST VARCHAR(16).
    pub first: String,
    /// C_MIDDLE CHAR(2) ("OE").
    pub middle: String,
    /// C_LAST VARCHAR(16).
    pub last: String,
    /// C_STREET_1 .. C_ZIP.
    pub address: Address,
    /// C_PHONE CHAR(16).
    pub phone: String,
    /// C_SINCE, ms since the epoch.
    pub since: i64,
    /// C_CREDIT CHAR(2): "GC" or "BC".
    pub credit: String,
    /// C_CREDIT_LIM in cents.
    pub credit_lim: i64,
    /// C_DISCOUNT in 1/10000.
    pub discount: i32,
    /// C_BALANCE in cents.
    pub balance: i64,
    /// C_YTD_PAYMENT in cents.
    pub ytd_payment: i64,
    /// C_PAYMENT_CNT.
    pub payment_cnt: u32,
    /// C_DELIVERY_CNT.
    pub delivery_cnt: u32,
    /// C_DATA VARCHAR(500).
    pub data: String,
}

impl Row for Customer {
    const TABLE: &'static str = table::CUSTOMER;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.str8(&self.first).fixed(&self.middle, 2).str8(&self.last);
        self.address.enc(&mut e);
        e.fixed(&self.phone, 16)
            .i64(self.since)
            .fixed(&self.credit, 2)
            .i64(self.credit_lim)
            .i32(self.discount)
            .i64(self.balance)
            .i64(self.ytd_payment)
            .u32(self.payment_cnt)
            .u32(self.delivery_cnt)
            .str16(&self.data);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = Customer {
            first: d.str8()?,
            middle: d.fixed(2)?,
            last: d.str8()?,
            address: Address::dec(&mut d)?,
            phone: d.fixed(16)?,
            since: d.i64()?,
            credit: d.fixed(2)?,
            credit_lim: d.i64()?,
            discount: d.i32()?,
            balance: d.i64()?,
            ytd_payment: d.i64()?,
            payment_cnt: d.u32()?,
            delivery_cnt: d.u32()?,
            data: d.str16()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// HISTORY row (H_W_ID and H_D_ID are in the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// H_C_ID.
    pub c_id: u16,
    /// H_C_D_ID.
    pub c_d_id: u8,
    /// H_C_W_ID.
    pub c_w_id: u16,
    /// H_DATE, ms since the epoch.
    pub date: i64,
    /// H_AMOUNT in cents.
    pub amount: i64,
    /// H_DATA VARCHAR(24).
    pub data: String,
}

impl Row for History {
    const TABLE: &'static str = table::HISTORY;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u16(self.c_id)
            .u8(self.c_d_id)
            .u16(self.c_w_id)
            .i64(self.date)
            .i64(self.amount)
            .str8(&self.data);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = History {
            c_id: d.u16()?,
            c_d_id: d.u8()?,
            c_w_id: d.u16()?,
            date: d.i64()?,
            amount: d.i64()?,
            data: d.str8()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// ORDER row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// O_C_ID.
    pub c_id: u16,
    /// O_ENTRY_D, ms since the epoch.
    pub entry_d: i64,
    /// O_CARRIER_ID (null until delivered).
    pub carrier_id: Option<u8>,
    /// O_OL_CNT.
    pub ol_cnt: u8,
    /// O_ALL_LOCAL.
    pub all_local: bool,
}

impl Row for Order {
    const TABLE: &'static str = table::ORDER;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u16(self.c_id)
            .i64(self.entry_d)
            .opt_u8(self.carrier_id)
            .u8(self.ol_cnt)
            .u8(self.all_local as u8);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = Order {
            c_id: d.u16()?,
            entry_d: d.i64()?,
            carrier_id: d.opt_u8()?,
            ol_cnt: d.u8()?,
            all_local: d.u8()? != 0,
        };
        d.end()?;
        Ok(r)
    }
}

/// ORDER-LINE row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderLine {
    /// OL_I_ID.
    pub i_id: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w_id: u16,
    /// OL_DELIVERY_D (null until delivered), ms since the epoch.
    pub delivery_d: Option<i64>,
    /// OL_QUANTITY.
    pub quantity: u8,
    /// OL_AMOUNT in cents.
    pub amount: i64,
    /// OL_DIST_INFO CHAR(24).
    pub dist_info: String,
}

impl Row for OrderLine {
    const TABLE: &'static str = table::ORDER_LINE;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u32(self.i_id)
            .u16(self.supply_w_id)
            .opt_i64(self.delivery_d)
            .u8(self.quantity)
            .i64(self.amount)
            .fixed(&self.dist_info, 24);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = OrderLine {
            i_id: d.u32()?,
            supply_w_id: d.u16()?,
            delivery_d: d.opt_i64()?,
            quantity: d.u8()?,
            amount: d.i64()?,
            dist_info: d.fixed(24)?,
        };
        d.end()?;
        Ok(r)
    }
}

/// ITEM row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// I_IM_ID.
    pub im_id: u32,
    /// I_NAME VARCHAR(24).
    pub name: String,
    /// I_PRICE in cents.
    pub price: i64,
    /// I_DATA VARCHAR(50).
    pub data: String,
}

impl Row for Item {
    const TABLE: &'static str = table::ITEM;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u32(self.im_id)
            .str8(&self.name)
            .i64(self.price)
            .str8(&self.data);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = Item {
            im_id: d.u32()?,
            name: d.str8()?,
            price: d.i64()?,
            data: d.str8()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// STOCK row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stock {
    /// S_QUANTITY.
    pub quantity: i32,
    /// S_DIST_01 .. S_DIST_10, CHAR(24) each.
    pub dist: [String; 10],
    /// S_YTD.
    pub ytd: u32,
    /// S_ORDER_CNT.
    pub order_cnt: u32,
    /// S_REMOTE_CNT.
    pub remote_cnt: u32,
    /// S_DATA VARCHAR(50).
    pub data: String,
}

impl Row for Stock {
    const TABLE: &'static str = table::STOCK;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.i32(self.quantity);
        for s in &self.dist {
            e.fixed(s, 24);
        }
        e.u32(self.ytd)
            .u32(self.order_cnt)
            .u32(self.remote_cnt)
            .str8(&self.data);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let quantity = d.i32()?;
        let mut dist: [String; 10] = Default::default();
        for s in dist.iter_mut() {
            *s = d.fixed(24)?;
        }
        let r = Stock {
            quantity,
            dist,
            ytd: d.u32()?,
            order_cnt: d.u32()?,
            remote_cnt: d.u32()?,
            data: d.str8()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// The load marker (meta row `load`): what was loaded, so `run` and `check` use the same scale
/// and constants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadMarker {
    /// [`FORMAT_VERSION`] of the loader.
    pub format: u32,
    /// Warehouses loaded.
    pub warehouses: u16,
    /// Items loaded (100,000 except in tests).
    pub items: u32,
    /// The loader's seed.
    pub seed: u64,
    /// NURand constants used by the loader.
    pub c_load: NuRandC,
    /// Load timestamp used for dates, ms since the epoch.
    pub loaded_at_ms: i64,
}

impl LoadMarker {
    /// JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    /// Decodes the marker row.
    pub fn decode(value: &[u8]) -> TpccResult<LoadMarker> {
        serde_json::from_slice(value).map_err(|e| corrupt(table::META, META_LOAD, e.to_string()))
    }
}

/// Encodes a warehouse's per-district delivery counters.
pub fn encode_deliveries(counts: &[u32; DISTRICTS as usize]) -> Vec<u8> {
    counts.iter().flat_map(|c| c.to_le_bytes()).collect()
}

/// Decodes a warehouse's per-district delivery counters.
pub fn decode_deliveries(key: &[u8], value: &[u8]) -> TpccResult<[u32; DISTRICTS as usize]> {
    let mut d = Dec::new(table::META, key, value);
    let mut out = [0u32; DISTRICTS as usize];
    for c in out.iter_mut() {
        *c = d.u32()?;
    }
    d.end()?;
    Ok(out)
}

/// Decodes the run counter.
pub fn decode_runs(value: &[u8]) -> TpccResult<u32> {
    let mut d = Dec::new(table::META, META_RUNS, value);
    let v = d.u32()?;
    d.end()?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_like_tuples() {
        let tuples = [
            (1u16, 1u8, 5u32),
            (1, 1, 256),
            (1, 2, 1),
            (2, 1, 1),
            (256, 1, 1),
        ];
        let keys: Vec<Vec<u8>> = tuples.iter().map(|&(w, d, o)| order_key(w, d, o)).collect();
        for i in 1..keys.len() {
            assert!(
                keys[i - 1] < keys[i],
                "{:?} !< {:?}",
                tuples[i - 1],
                tuples[i]
            );
        }
        // Names: shorter names sort before longer ones with the same prefix; first names order
        // within one last name.
        let a = customer_name_key(1, 1, "BAR", "zz", 9);
        let b = customer_name_key(1, 1, "BARBAR", "aa", 1);
        assert!(a < b);
        let c = customer_name_key(1, 1, "BAR", "aa", 9);
        assert!(c < a);
        assert!(a.starts_with(&customer_name_prefix(1, 1, "BAR")));
        assert!(!b.starts_with(&customer_name_prefix(1, 1, "BAR")));
    }

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end(&[1, 2]), vec![1, 3]);
        assert_eq!(prefix_end(&[1, 0xFF]), vec![2]);
        let p = district_key(7, 3);
        let e = prefix_end(&p);
        assert!(order_key(7, 3, u32::MAX) < e);
        assert!(order_key(7, 4, 0) >= e);
    }

    fn sample_customer() -> Customer {
        Customer {
            first: "abcdefgh".into(),
            middle: "OE".into(),
            last: "BARBARBAR".into(),
            address: Address {
                street_1: "s1xxxxxxxx".into(),
                street_2: "s2xxxxxxxx".into(),
                city: "cityxxxxxx".into(),
                state: "CA".into(),
                zip: "123411111".into(),
            },
            phone: "0123456789012345".into(),
            since: 1_700_000_000_000,
            credit: "GC".into(),
            credit_lim: 5_000_000,
            discount: 1234,
            balance: -1000,
            ytd_payment: 1000,
            payment_cnt: 1,
            delivery_cnt: 0,
            data: "x".repeat(400),
        }
    }

    #[test]
    fn rows_round_trip() {
        let c = sample_customer();
        let k = customer_key(1, 2, 3);
        assert_eq!(Customer::decode(&k, &c.encode()).unwrap(), c);
        let ol = OrderLine {
            i_id: 99_999,
            supply_w_id: 2,
            delivery_d: None,
            quantity: 5,
            amount: 12_345,
            dist_info: "d".repeat(24),
        };
        assert_eq!(OrderLine::decode(&k, &ol.encode()).unwrap(), ol);
        let s = Stock {
            quantity: 55,
            dist: std::array::from_fn(|i| format!("{i:024}")),
            ytd: 0,
            order_cnt: 0,
            remote_cnt: 0,
            data: "ORIGINALxxxxxxxxxxxxxxxxxx".into(),
        };
        assert_eq!(Stock::decode(&k, &s.encode()).unwrap(), s);
    }

    #[test]
    fn truncated_and_overlong_rows_are_corrupt_not_panics() {
        let c = sample_customer().encode();
        let k = customer_key(1, 2, 3);
        for cut in 0..c.len() {
            let e = Customer::decode(&k, &c[..cut]).unwrap_err();
            assert!(e.to_string().contains("customer"), "{e}");
        }
        let mut long = c.clone();
        long.push(0);
        let e = Customer::decode(&k, &long).unwrap_err().to_string();
        assert!(e.contains("trailing") && e.contains(&hex(&k)), "{e}");
        // A bad option tag.
        let o = Order {
            c_id: 1,
            entry_d: 0,
            carrier_id: None,
            ol_cnt: 5,
            all_local: true,
        };
        let mut b = o.encode();
        b[10] = 7;
        assert!(Order::decode(&k, &b).is_err());
    }

    #[test]
    fn keys_decode_and_reject_wrong_lengths() {
        assert_eq!(
            decode_order_line_key(&order_line_key(3, 4, 70_000, 15)).unwrap(),
            (3, 4, 70_000, 15)
        );
        assert!(decode_order_line_key(&order_key(3, 4, 5)).is_err());
        assert_eq!(
            decode_history_key(&history_key(1, 2, u64::MAX)).unwrap(),
            (1, 2, u64::MAX)
        );
        assert_eq!(
            decode_customer_name_key(&customer_name_key(1, 1, "A", "B", 77)).unwrap(),
            77
        );
    }
}
