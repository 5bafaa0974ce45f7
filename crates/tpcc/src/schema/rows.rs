//! One struct per TPC-C table row ([`Row`]: encode to and decode from the value bytes), the load
//! marker and the workload's meta rows.

use serde::{Deserialize, Serialize};

use super::codec::{Dec, Enc};
use super::keys::corrupt;
use super::{table, DISTRICTS, META_LOAD, META_RUNS};
use crate::error::TpccResult;
use crate::rng::NuRandC;

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

/// WAREHOUSE row, static columns (W_ID is the key; W_YTD is in [`WarehouseYtd`]). Tax in
/// 1/10000.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warehouse {
    /// W_NAME VARCHAR(10).
    pub name: String,
    /// W_STREET_1 .. W_ZIP.
    pub address: Address,
    /// W_TAX, 0..=2000 (0.0000..0.2000).
    pub tax: i32,
}

impl Row for Warehouse {
    const TABLE: &'static str = table::WAREHOUSE;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.str8(&self.name);
        self.address.enc(&mut e);
        e.i32(self.tax);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = Warehouse {
            name: d.str8()?,
            address: Address::dec(&mut d)?,
            tax: d.i32()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// WAREHOUSE_YTD row: W_YTD, vertically partitioned out of the warehouse row (key: the
/// warehouse key), so that Payment's update of it does not change the row New-Order reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarehouseYtd {
    /// W_YTD in cents.
    pub ytd: i64,
}

impl Row for WarehouseYtd {
    const TABLE: &'static str = table::WAREHOUSE_YTD;
    fn encode(&self) -> Vec<u8> {
        encode_ytd(self.ytd)
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        Ok(WarehouseYtd {
            ytd: decode_ytd(Self::TABLE, key, value)?,
        })
    }
}

/// The value of a YTD row ([`WarehouseYtd`], [`DistrictYtd`]): the amount in cents.
fn encode_ytd(ytd: i64) -> Vec<u8> {
    let mut e = Enc::default();
    e.i64(ytd);
    e.0
}

/// The amount of a YTD row of `table` (exactly 8 bytes, else corrupt).
fn decode_ytd(table: &'static str, key: &[u8], value: &[u8]) -> TpccResult<i64> {
    let mut d = Dec::new(table, key, value);
    let ytd = d.i64()?;
    d.end()?;
    Ok(ytd)
}

/// DISTRICT row: static columns and D_NEXT_O_ID (D_YTD is in [`DistrictYtd`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct District {
    /// D_NAME VARCHAR(10).
    pub name: String,
    /// D_STREET_1 .. D_ZIP.
    pub address: Address,
    /// D_TAX in 1/10000.
    pub tax: i32,
    /// D_NEXT_O_ID.
    pub next_o_id: u32,
}

impl Row for District {
    const TABLE: &'static str = table::DISTRICT;
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.str8(&self.name);
        self.address.enc(&mut e);
        e.i32(self.tax).u32(self.next_o_id);
        e.0
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        let mut d = Dec::new(Self::TABLE, key, value);
        let r = District {
            name: d.str8()?,
            address: Address::dec(&mut d)?,
            tax: d.i32()?,
            next_o_id: d.u32()?,
        };
        d.end()?;
        Ok(r)
    }
}

/// DISTRICT_YTD row: D_YTD, vertically partitioned out of the district row (key: the district
/// key), so that Payment's update of it does not change the row New-Order reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistrictYtd {
    /// D_YTD in cents.
    pub ytd: i64,
}

impl Row for DistrictYtd {
    const TABLE: &'static str = table::DISTRICT_YTD;
    fn encode(&self) -> Vec<u8> {
        encode_ytd(self.ytd)
    }
    fn decode(key: &[u8], value: &[u8]) -> TpccResult<Self> {
        Ok(DistrictYtd {
            ytd: decode_ytd(Self::TABLE, key, value)?,
        })
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
    /// [`super::FORMAT_VERSION`] of the loader.
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
