//! TPC-C consistency conditions 1–12 (clause 3.3.2), checked in one read transaction.
//!
//! W_YTD and D_YTD are read from their own tables (`warehouse_ytd`, `district_ytd`: the schema's
//! vertical partitioning); a warehouse or district without its YTD row, or a YTD row without its
//! warehouse or district, fails condition 1 (warehouse) or 9 (district).
//!
//! Condition 11 is adjusted for deliveries since load: count(ORDER) − count(NEW-ORDER) must equal
//! 2100 plus the orders delivered in the district since the load, which Delivery counts in the
//! same transaction that delivers them (meta row `dlv` + W_ID). Every condition reports pass/fail,
//! how many rows or groups it checked, how many failed, and the first offending key in key order.
//!
//! Invariant: each condition fails when the row it guards is altered on purpose
//! (`tests/checks.rs` alters one row per condition and expects exactly that condition to report
//! the altered key).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use crate::engine::{Direction, Engine, Flow, ReadTx, ReadTxExt};
use crate::error::{TpccError, TpccResult};
use crate::load::read_marker;
use crate::schema::{self, table, Row, FIRST_NEW_ORDER};

/// The twelve conditions' short descriptions.
pub const CONDITIONS: [&str; 12] = [
    "W_YTD = sum(D_YTD)",
    "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)",
    "max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW-ORDER)",
    "sum(O_OL_CNT) = count(ORDER-LINE)",
    "O_CARRIER_ID null iff NEW-ORDER row",
    "O_OL_CNT = count(ORDER-LINE) per order",
    "OL_DELIVERY_D null iff O_CARRIER_ID null",
    "W_YTD = sum(H_AMOUNT)",
    "D_YTD = sum(H_AMOUNT)",
    "C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT)",
    "count(ORDER) - count(NEW-ORDER) = 2100 + delivered since load",
    "C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT)",
];

/// The result of one condition.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConditionResult {
    /// 1..=12.
    pub id: u8,
    /// What it checks.
    pub name: &'static str,
    /// No failure found.
    pub passed: bool,
    /// Rows or groups checked.
    pub checked: u64,
    /// Rows or groups that failed.
    pub failures: u64,
    /// The first offending key (in key order) and the values found.
    pub first_offending: Option<String>,
}

/// All twelve results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckReport {
    /// Conditions 1..=12 in order.
    pub conditions: Vec<ConditionResult>,
    /// Wall time of the check, seconds.
    pub seconds: f64,
}

impl CheckReport {
    /// Whether every condition passed.
    pub fn all_passed(&self) -> bool {
        self.conditions.iter().all(|c| c.passed)
    }

    /// The result of condition `id`.
    pub fn condition(&self, id: u8) -> Option<&ConditionResult> {
        self.conditions.iter().find(|c| c.id == id)
    }

    /// One line per condition, then a verdict.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for c in &self.conditions {
            s.push_str(&format!(
                "  condition {:>2} {:<4} {:<58} {:>9} checked",
                c.id,
                if c.passed { "PASS" } else { "FAIL" },
                c.name,
                c.checked
            ));
            if let Some(k) = &c.first_offending {
                s.push_str(&format!(", {} failed, first: {k}", c.failures));
            }
            s.push('\n');
        }
        let failed = self.conditions.iter().filter(|c| !c.passed).count();
        s.push_str(&format!(
            "  consistency: {} ({} of 12 conditions passed, {:.1} s)\n",
            if failed == 0 { "OK" } else { "FAILED" },
            12 - failed,
            self.seconds
        ));
        s
    }
}

/// Formats cents as a decimal amount.
pub fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let a = cents.unsigned_abs();
    format!("{sign}{}.{:02}", a / 100, a % 100)
}

struct Tracker {
    id: u8,
    checked: u64,
    failures: u64,
    first: Option<String>,
}

impl Tracker {
    fn new(id: u8) -> Tracker {
        Tracker {
            id,
            checked: 0,
            failures: 0,
            first: None,
        }
    }
    fn record(&mut self, ok: bool, detail: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.failures += 1;
            if self.first.is_none() {
                self.first = Some(detail());
            }
        }
    }
    fn finish(self) -> ConditionResult {
        ConditionResult {
            id: self.id,
            name: CONDITIONS[(self.id - 1) as usize],
            passed: self.failures == 0,
            checked: self.checked,
            failures: self.failures,
            first_offending: self.first,
        }
    }
}

fn scan_decode<T: ReadTx + ?Sized>(
    tx: &mut T,
    t: &'static str,
    start: &[u8],
    end: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> TpccResult<()>,
) -> TpccResult<()> {
    let mut err = None;
    tx.scan(
        t,
        start,
        end,
        Direction::Forward,
        &mut |k, v| match f(k, v) {
            Ok(()) => Ok(Flow::Continue),
            Err(e) => {
                err = Some(e);
                Ok(Flow::Stop)
            }
        },
    )?;
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

const ALL_START: &[u8] = &[];
const ALL_END: &[u8] = &[0xFF; 16];

/// Checks conditions 1–12 over the whole database.
pub fn check<E: Engine>(engine: &E) -> TpccResult<CheckReport> {
    let start = Instant::now();
    let _marker = read_marker(engine)?;
    let mut tx = engine.read()?;
    let mut t: Vec<Tracker> = (1..=12).map(Tracker::new).collect();

    // W_YTD per warehouse (`None`: no warehouse_ytd row), and warehouse_ytd rows without a
    // warehouse row.
    let mut warehouses: BTreeMap<u16, Option<i64>> = BTreeMap::new();
    scan_decode(&mut tx, table::WAREHOUSE, ALL_START, ALL_END, |k, v| {
        let w = schema::decode_warehouse_key(k)?;
        schema::Warehouse::decode(k, v)?;
        warehouses.insert(w, None);
        Ok(())
    })?;
    let mut orphan_w_ytd: Vec<u16> = Vec::new();
    scan_decode(&mut tx, table::WAREHOUSE_YTD, ALL_START, ALL_END, |k, v| {
        let w = schema::decode_warehouse_ytd_key(k)?;
        let ytd = schema::WarehouseYtd::decode(k, v)?.ytd;
        match warehouses.get_mut(&w) {
            Some(slot) => *slot = Some(ytd),
            None => orphan_w_ytd.push(w),
        }
        Ok(())
    })?;
    let mut districts: BTreeMap<(u16, u8), schema::District> = BTreeMap::new();
    scan_decode(&mut tx, table::DISTRICT, ALL_START, ALL_END, |k, v| {
        districts.insert(
            schema::decode_district_key(k)?,
            schema::District::decode(k, v)?,
        );
        Ok(())
    })?;
    let mut district_ytd: BTreeMap<(u16, u8), i64> = BTreeMap::new();
    scan_decode(&mut tx, table::DISTRICT_YTD, ALL_START, ALL_END, |k, v| {
        district_ytd.insert(
            schema::decode_district_ytd_key(k)?,
            schema::DistrictYtd::decode(k, v)?.ytd,
        );
        Ok(())
    })?;
    let mut h_w: HashMap<u16, i64> = HashMap::new();
    let mut h_d: HashMap<(u16, u8), i64> = HashMap::new();
    let mut h_c: HashMap<(u16, u8, u16), i64> = HashMap::new();
    scan_decode(&mut tx, table::HISTORY, ALL_START, ALL_END, |k, v| {
        let (w, d, _) = schema::decode_history_key(k)?;
        let h = schema::History::decode(k, v)?;
        let e = h_w.entry(w).or_default();
        *e = e.wrapping_add(h.amount);
        let e = h_d.entry((w, d)).or_default();
        *e = e.wrapping_add(h.amount);
        let e = h_c.entry((h.c_w_id, h.c_d_id, h.c_id)).or_default();
        *e = e.wrapping_add(h.amount);
        Ok(())
    })?;

    // Conditions 1 and 8, per warehouse.
    for (&w, &ytd) in &warehouses {
        let Some(ytd) = ytd else {
            let no_row = || format!("warehouse w={w}: no {} row", table::WAREHOUSE_YTD);
            t[0].record(false, no_row);
            t[7].record(false, no_row);
            continue;
        };
        let sum_d: i64 = district_ytd
            .range((w, 0)..=(w, u8::MAX))
            .fold(0i64, |a, (_, &ytd)| a.wrapping_add(ytd));
        t[0].record(ytd == sum_d, || {
            format!(
                "warehouse w={w}: W_YTD {} != sum(D_YTD) {}",
                money(ytd),
                money(sum_d)
            )
        });
        let sum_h = h_w.get(&w).copied().unwrap_or(0);
        t[7].record(ytd == sum_h, || {
            format!(
                "warehouse w={w}: W_YTD {} != sum(H_AMOUNT) {}",
                money(ytd),
                money(sum_h)
            )
        });
    }

    for &w in &orphan_w_ytd {
        t[0].record(false, || {
            format!(
                "{} w={w}: no WAREHOUSE row for this W_YTD",
                table::WAREHOUSE_YTD
            )
        });
    }

    let mut deliveries: HashMap<u16, [u32; schema::DISTRICTS as usize]> = HashMap::new();
    for &w in warehouses.keys() {
        let k = schema::meta_deliveries_key(w);
        if let Some(v) = tx.get(table::META, &k)? {
            deliveries.insert(w, schema::decode_deliveries(&k, &v)?);
        }
    }

    for (&(w, d), dist) in &districts {
        let p = schema::district_key(w, d);
        let pe = schema::prefix_end(&p);
        let dk = || format!("district w={w} d={d}");

        // Condition 9.
        let sum_h = h_d.get(&(w, d)).copied().unwrap_or(0);
        match district_ytd.get(&(w, d)) {
            Some(&ytd) => t[8].record(ytd == sum_h, || {
                format!(
                    "{}: D_YTD {} != sum(H_AMOUNT) {}",
                    dk(),
                    money(ytd),
                    money(sum_h)
                )
            }),
            None => t[8].record(false, || {
                format!("{}: no {} row", dk(), table::DISTRICT_YTD)
            }),
        }

        let mut orders: BTreeMap<u32, schema::Order> = BTreeMap::new();
        for (k, v) in tx.collect(table::ORDER, &p, &pe)? {
            let (_, _, o) = schema::decode_order_key(table::ORDER, &k)?;
            orders.insert(o, schema::Order::decode(&k, &v)?);
        }
        let mut new_orders: BTreeSet<u32> = BTreeSet::new();
        for (k, _) in tx.collect(table::NEW_ORDER, &p, &pe)? {
            new_orders.insert(schema::decode_order_key(table::NEW_ORDER, &k)?.2);
        }
        // Per order: (line count, delivered OL_AMOUNT sum); lines checked for condition 7.
        let mut line_counts: HashMap<u32, u32> = HashMap::new();
        let mut delivered_by_customer: HashMap<u16, i64> = HashMap::new();
        let mut total_lines: u64 = 0;
        {
            let orders = &orders;
            let t7 = &mut t[6];
            scan_decode(&mut tx, table::ORDER_LINE, &p, &pe, |k, v| {
                let (_, _, o, n) = schema::decode_order_line_key(k)?;
                let ol = schema::OrderLine::decode(k, v)?;
                total_lines += 1;
                *line_counts.entry(o).or_default() += 1;
                if let Some(order) = orders.get(&o) {
                    t7.record(ol.delivery_d.is_none() == order.carrier_id.is_none(), || {
                        format!(
                            "order line w={w} d={d} o={o} ol={n}: OL_DELIVERY_D {} but O_CARRIER_ID {}",
                            if ol.delivery_d.is_some() { "set" } else { "null" },
                            order.carrier_id.map_or("null".to_string(), |c| c.to_string())
                        )
                    });
                    if ol.delivery_d.is_some() {
                        let e = delivered_by_customer.entry(order.c_id).or_default();
                        *e = e.wrapping_add(ol.amount);
                    }
                }
                Ok(())
            })?;
        }

        // Condition 2.
        let max_o = orders.keys().next_back().copied();
        let max_no = new_orders.iter().next_back().copied();
        let expect = dist.next_o_id.wrapping_sub(1);
        let ok2 = max_o == Some(expect) && max_no.is_none_or(|m| m == expect);
        t[1].record(ok2, || {
            format!(
                "{}: D_NEXT_O_ID - 1 = {expect}, max(O_ID) = {}, max(NO_O_ID) = {}",
                dk(),
                max_o.map_or("none".into(), |v| v.to_string()),
                max_no.map_or("none".into(), |v| v.to_string())
            )
        });
        // Condition 3.
        if let (Some(&min), Some(&max)) = (new_orders.iter().next(), new_orders.iter().next_back())
        {
            let n = new_orders.len() as u64;
            t[2].record(u64::from(max - min) + 1 == n, || {
                format!(
                    "{}: max(NO_O_ID) {max} - min(NO_O_ID) {min} + 1 != {n} NEW-ORDER rows",
                    dk()
                )
            });
        }
        // Condition 4.
        let sum_cnt: u64 = orders.values().map(|o| o.ol_cnt as u64).sum();
        t[3].record(sum_cnt == total_lines, || {
            format!(
                "{}: sum(O_OL_CNT) {sum_cnt} != {total_lines} ORDER-LINE rows",
                dk()
            )
        });
        // Conditions 5 and 6, per order (and NEW-ORDER rows without an order fail 5).
        for (&o, order) in &orders {
            let has_no = new_orders.contains(&o);
            t[4].record(order.carrier_id.is_none() == has_no, || {
                format!(
                    "order w={w} d={d} o={o}: O_CARRIER_ID {} but NEW-ORDER row {}",
                    order
                        .carrier_id
                        .map_or("null".to_string(), |c| c.to_string()),
                    if has_no { "present" } else { "absent" }
                )
            });
            let lines = line_counts.get(&o).copied().unwrap_or(0);
            t[5].record(order.ol_cnt as u32 == lines, || {
                format!(
                    "order w={w} d={d} o={o}: O_OL_CNT {} != {lines} ORDER-LINE rows",
                    order.ol_cnt
                )
            });
        }
        for &o in &new_orders {
            if !orders.contains_key(&o) {
                t[4].record(false, || {
                    format!("new-order w={w} d={d} o={o}: no ORDER row")
                });
            }
        }
        // Condition 11.
        let delivered = deliveries
            .get(&w)
            .and_then(|c| c.get((d as usize).wrapping_sub(1)).copied())
            .unwrap_or(0) as u64;
        let lhs = orders.len() as i64 - new_orders.len() as i64;
        let rhs = (FIRST_NEW_ORDER - 1) as i64 + delivered as i64;
        t[10].record(lhs == rhs, || {
            format!(
                "{}: count(ORDER) {} - count(NEW-ORDER) {} = {lhs} != 2100 + {delivered} delivered since load",
                dk(),
                orders.len(),
                new_orders.len()
            )
        });
        // Conditions 10 and 12, per customer.
        for (k, v) in tx.collect(table::CUSTOMER, &p, &pe)? {
            let (_, _, c) = schema::decode_customer_key(&k)?;
            let cust = schema::Customer::decode(&k, &v)?;
            let delivered = delivered_by_customer.get(&c).copied().unwrap_or(0);
            let paid = h_c.get(&(w, d, c)).copied().unwrap_or(0);
            t[9].record(cust.balance == delivered.wrapping_sub(paid), || {
                format!(
                    "customer w={w} d={d} c={c}: C_BALANCE {} != delivered {} - paid {}",
                    money(cust.balance),
                    money(delivered),
                    money(paid)
                )
            });
            t[11].record(
                cust.balance.wrapping_add(cust.ytd_payment) == delivered,
                || {
                    format!(
                    "customer w={w} d={d} c={c}: C_BALANCE {} + C_YTD_PAYMENT {} != delivered {}",
                    money(cust.balance),
                    money(cust.ytd_payment),
                    money(delivered)
                )
                },
            );
        }
    }
    for &(w, d) in district_ytd.keys() {
        if !districts.contains_key(&(w, d)) {
            t[8].record(false, || {
                format!(
                    "{} w={w} d={d}: no DISTRICT row for this D_YTD",
                    table::DISTRICT_YTD
                )
            });
        }
    }
    if warehouses.is_empty() {
        return Err(TpccError::NotLoaded(
            "the load marker is present but WAREHOUSE is empty".into(),
        ));
    }
    Ok(CheckReport {
        conditions: t.into_iter().map(Tracker::finish).collect(),
        seconds: start.elapsed().as_secs_f64(),
    })
}
