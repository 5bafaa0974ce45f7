//! TPC-C keys: big-endian composite keys (byte order = the spec's ordering of id tuples; names
//! zero-padded to [`NAME_WIDTH`] bytes), and their checked decoders (a short or long key is
//! [`TpccError::Corrupt`] naming the table and key).

use super::{table, NAME_WIDTH};
use crate::error::{TpccError, TpccResult};

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

/// WAREHOUSE key (also the WAREHOUSE_YTD key).
pub fn warehouse_key(w: u16) -> Vec<u8> {
    w.to_be_bytes().to_vec()
}
/// DISTRICT key (also the DISTRICT_YTD key).
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

pub(super) fn corrupt(table: &'static str, key: &[u8], detail: impl Into<String>) -> TpccError {
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

fn district_key_of(table: &'static str, key: &[u8]) -> TpccResult<(u16, u8)> {
    exact_len(table, key, 3)?;
    Ok((be_u16(table, key, 0)?, be_u8(table, key, 2)?))
}
fn warehouse_key_of(table: &'static str, key: &[u8]) -> TpccResult<u16> {
    exact_len(table, key, 2)?;
    be_u16(table, key, 0)
}
/// Decodes a DISTRICT key into (W_ID, D_ID).
pub fn decode_district_key(key: &[u8]) -> TpccResult<(u16, u8)> {
    district_key_of(table::DISTRICT, key)
}
/// Decodes a DISTRICT_YTD key into (W_ID, D_ID).
pub fn decode_district_ytd_key(key: &[u8]) -> TpccResult<(u16, u8)> {
    district_key_of(table::DISTRICT_YTD, key)
}
/// Decodes a WAREHOUSE key.
pub fn decode_warehouse_key(key: &[u8]) -> TpccResult<u16> {
    warehouse_key_of(table::WAREHOUSE, key)
}
/// Decodes a WAREHOUSE_YTD key.
pub fn decode_warehouse_ytd_key(key: &[u8]) -> TpccResult<u16> {
    warehouse_key_of(table::WAREHOUSE_YTD, key)
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
