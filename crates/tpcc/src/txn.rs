//! The five TPC-C transactions (clauses 2.4–2.8) and the per-terminal input generator.
//!
//! Semantics kept from the spec: New-Order reads W_TAX / D_TAX / C_DISCOUNT, takes D_NEXT_O_ID,
//! inserts ORDER, NEW-ORDER and the order-by-customer index row, then for every line reads ITEM,
//! updates STOCK (quantity wrap at +91, S_YTD, S_ORDER_CNT, S_REMOTE_CNT) and inserts ORDER-LINE;
//! 1% of New-Orders carry an unused item id in their last line and are executed fully, then
//! rolled back. Payment reads W_NAME / D_NAME, updates W_YTD, D_YTD and the customer (C_DATA
//! prefix for bad credit) and inserts HISTORY; 15% pay through a remote warehouse; 60% of
//! Payments and Order-Status select the customer by last name, taking the middle of the matches
//! sorted by C_FIRST (position ceil(n/2)). Delivery delivers the oldest undelivered order of
//! each of the 10 districts in one transaction. Order-Status and Stock-Level are read-only.
//!
//! W_YTD and D_YTD live in their own tables (`warehouse_ytd`, `district_ytd`: the vertical
//! partitioning of [`crate::schema`], TPC-C clause 1.6): Payment reads the warehouse and
//! district rows and adds to the YTD rows without reading them ([`WriteTx::add_i64`], an
//! atomic add under concurrent writers), New-Order reads no YTD row, so under concurrent
//! writers a Payment invalidates neither the New-Orders nor the other Payments of its
//! warehouse.
//!
//! Non-spec addition: Delivery also bumps a per-district delivery counter (one meta row per
//! warehouse) in the same transaction, so that consistency condition 11 can be checked after a
//! run ("2100 + orders delivered since load"); Payment's HISTORY key needs a unique id (the spec
//! gives HISTORY no key), made of the run number, the terminal and a per-terminal sequence.
//!
//! Writers: New-Order, Payment and Delivery run either on the exclusive writer
//! ([`Engine::write`], one at a time, never a conflict) or as concurrent write transactions
//! ([`Engine::write_concurrent`]), per [`WriterMode`]. Each is its logic on a transaction
//! (`new_order_in`, `payment_in`, `delivery_in`: reads and writes only through the transaction,
//! no other side effect) run by [`run_write`], which commits it and, on a conflict, runs the same
//! logic with the same input on a new transaction (a TPC-C retry keeps the generated
//! parameters), at most [`MAX_RETRIES`] times; the retries are counted in [`Outcome::retries`].
//! Invariants: a conflicted attempt applied nothing, so a retried transaction takes effect
//! exactly once; New-Order's intended rollback is an abort, never retried; anything outside the
//! engine (the acknowledged-commit log, the driver's counters) happens once, after the call
//! returns `Ok`. Order-Status and Stock-Level read snapshots ([`Engine::read`]) and never
//! conflict.

use crate::engine::{Direction, Engine, Flow, ReadTx, ReadTxExt, WriteTx};
use crate::error::{TpccError, TpccResult};
use crate::load::now_ms;
use crate::schema::{self, table, Row, DISTRICTS};

pub use crate::terminal::Terminal;

/// The five transaction types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum TxKind {
    /// New-Order (45%).
    NewOrder,
    /// Payment (43%).
    Payment,
    /// Order-Status (4%).
    OrderStatus,
    /// Delivery (4%).
    Delivery,
    /// Stock-Level (4%).
    StockLevel,
}

impl TxKind {
    /// All five, in report order.
    pub const ALL: [TxKind; 5] = [
        TxKind::NewOrder,
        TxKind::Payment,
        TxKind::OrderStatus,
        TxKind::Delivery,
        TxKind::StockLevel,
    ];
    /// Cards per 100 in the deck (the mix 45/43/4/4/4).
    pub const fn weight(self) -> usize {
        match self {
            TxKind::NewOrder => 45,
            TxKind::Payment => 43,
            TxKind::OrderStatus | TxKind::Delivery | TxKind::StockLevel => 4,
        }
    }
    /// Short name for report columns.
    pub const fn short(self) -> &'static str {
        match self {
            TxKind::NewOrder => "NO",
            TxKind::Payment => "P",
            TxKind::OrderStatus => "OS",
            TxKind::Delivery => "D",
            TxKind::StockLevel => "SL",
        }
    }
    /// Full name.
    pub const fn name(self) -> &'static str {
        match self {
            TxKind::NewOrder => "New-Order",
            TxKind::Payment => "Payment",
            TxKind::OrderStatus => "Order-Status",
            TxKind::Delivery => "Delivery",
            TxKind::StockLevel => "Stock-Level",
        }
    }
    /// Index in [`TxKind::ALL`].
    pub const fn index(self) -> usize {
        match self {
            TxKind::NewOrder => 0,
            TxKind::Payment => 1,
            TxKind::OrderStatus => 2,
            TxKind::Delivery => 3,
            TxKind::StockLevel => 4,
        }
    }
}

/// How New-Order, Payment and Delivery take their write transactions (`--writers`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum WriterMode {
    /// Concurrent write transactions: they run side by side, are validated at commit, and a
    /// conflicted one runs again (keel; the exclusive writer on other engines).
    #[default]
    Concurrent,
    /// The exclusive writer: one write transaction at a time, no conflicts.
    Exclusive,
}

impl WriterMode {
    /// The `--writers` value.
    pub const fn name(self) -> &'static str {
        match self {
            WriterMode::Concurrent => "concurrent",
            WriterMode::Exclusive => "exclusive",
        }
    }

    /// The mode that actually runs on engine `E`: concurrent only where the engine has
    /// concurrent writers.
    pub fn effective<E: Engine>(self) -> WriterMode {
        if E::CONCURRENT_WRITERS {
            self
        } else {
            WriterMode::Exclusive
        }
    }
}

impl std::fmt::Display for WriterMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Retries of one transaction after conflicts before [`run_write`] gives up with
/// [`TpccError::RetriesExhausted`] (so `MAX_RETRIES + 1` attempts in all).
pub const MAX_RETRIES: u32 = 100;

/// How a transaction's logic ends: commit, or roll back on purpose (New-Order's unused item).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Commit the transaction.
    Commit,
    /// Abort it (not a conflict: never retried).
    Abort,
}

/// How a Payment or Order-Status finds its customer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomerSel {
    /// By C_ID.
    Id(u16),
    /// By C_LAST (middle of the matches sorted by C_FIRST).
    LastName(String),
}

/// One order line of a New-Order input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineInput {
    /// OL_I_ID (an unused id makes the transaction roll back).
    pub i_id: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w: u16,
    /// OL_QUANTITY, 1..=10.
    pub quantity: u8,
}

/// New-Order input (clause 2.4.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrderInput {
    /// Home warehouse.
    pub w: u16,
    /// District.
    pub d: u8,
    /// Customer.
    pub c: u16,
    /// 5..=15 lines.
    pub lines: Vec<LineInput>,
}

/// Payment input (clause 2.5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentInput {
    /// Warehouse paid through.
    pub w: u16,
    /// District paid through.
    pub d: u8,
    /// Customer's warehouse.
    pub c_w: u16,
    /// Customer's district.
    pub c_d: u8,
    /// Customer selection.
    pub customer: CustomerSel,
    /// H_AMOUNT in cents (100..=500,000).
    pub amount: i64,
    /// Unique HISTORY id.
    pub history_id: u64,
}

/// Order-Status input (clause 2.6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderStatusInput {
    /// Warehouse.
    pub w: u16,
    /// District.
    pub d: u8,
    /// Customer selection.
    pub customer: CustomerSel,
}

/// Delivery input (clause 2.7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryInput {
    /// Warehouse.
    pub w: u16,
    /// O_CARRIER_ID, 1..=10.
    pub carrier: u8,
}

/// Stock-Level input (clause 2.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockLevelInput {
    /// Warehouse.
    pub w: u16,
    /// District (fixed per terminal).
    pub d: u8,
    /// Threshold, 10..=20.
    pub threshold: i32,
}

/// What a transaction did, for the driver's counters and the tests' rate checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Committed (false for a rolled-back New-Order).
    pub committed: bool,
    /// A New-Order rolled back on its unused item.
    pub rolled_back: bool,
    /// New-Order lines.
    pub lines: u32,
    /// New-Order lines supplied by another warehouse.
    pub remote_lines: u32,
    /// A Payment through a remote warehouse.
    pub remote_payment: bool,
    /// Customer selected by last name (Payment, Order-Status).
    pub by_name: bool,
    /// Delivery: districts with no undelivered order.
    pub skipped_districts: u32,
    /// Delivery: orders delivered.
    pub delivered: u32,
    /// Committed New-Order: (W_ID, D_ID, O_ID).
    pub new_order: Option<(u16, u8, u32)>,
    /// Order-Status: order lines read; Stock-Level: items below the threshold.
    pub result_count: u32,
    /// Times the transaction was run again after a conflict (concurrent writers).
    pub retries: u32,
}

fn missing(t: &'static str, key: String) -> TpccError {
    TpccError::Missing { table: t, key }
}

fn get_row<R: Row, T: ReadTx + ?Sized>(tx: &mut T, key: &[u8], what: String) -> TpccResult<R> {
    match tx.get(R::TABLE, key)? {
        Some(v) => R::decode(key, &v),
        None => Err(missing(R::TABLE, what)),
    }
}

/// Finds the customer's C_ID: by id, or the middle (position ceil(n/2)) of the customers with
/// that last name in the district, sorted by C_FIRST.
pub fn find_customer<T: ReadTx + ?Sized>(
    tx: &mut T,
    w: u16,
    d: u8,
    sel: &CustomerSel,
) -> TpccResult<u16> {
    match sel {
        CustomerSel::Id(c) => Ok(*c),
        CustomerSel::LastName(last) => {
            let prefix = schema::customer_name_prefix(w, d, last);
            let end = schema::prefix_end(&prefix);
            let mut ids = Vec::new();
            let mut bad = None;
            tx.scan(
                table::CUSTOMER_BY_NAME,
                &prefix,
                &end,
                Direction::Forward,
                &mut |k, _| {
                    match schema::decode_customer_name_key(k) {
                        Ok(c) => ids.push(c),
                        Err(e) => {
                            bad = Some(e);
                            return Ok(Flow::Stop);
                        }
                    }
                    Ok(Flow::Continue)
                },
            )?;
            if let Some(e) = bad {
                return Err(e);
            }
            if ids.is_empty() {
                return Err(missing(
                    table::CUSTOMER_BY_NAME,
                    format!("w={w} d={d} c_last={last}"),
                ));
            }
            Ok(ids[(ids.len() - 1) / 2])
        }
    }
}

/// Runs `body` (a transaction's logic) on a new write transaction of `mode` and commits or
/// aborts it as the body asks. A conflict (from the commit or from the body) means nothing was
/// applied: the body runs again on a new transaction, up to [`MAX_RETRIES`] times, and the
/// returned outcome counts the retries. The body must act only through the transaction (it may
/// run several times); its outcome is returned only from the attempt that finished, with
/// `committed` set when that attempt committed.
///
/// # Errors
///
/// The body's or the engine's error (the transaction is rolled back);
/// [`TpccError::RetriesExhausted`] after `MAX_RETRIES + 1` conflicted attempts.
pub fn run_write<E, F>(
    engine: &E,
    mode: WriterMode,
    kind: TxKind,
    mut body: F,
) -> TpccResult<Outcome>
where
    E: Engine,
    F: FnMut(&mut E::Write<'_>) -> TpccResult<(Outcome, Finish)>,
{
    let mut retries = 0u32;
    loop {
        let mut tx = match mode {
            WriterMode::Concurrent => engine.write_concurrent()?,
            WriterMode::Exclusive => engine.write()?,
        };
        let res = match body(&mut tx) {
            Ok((mut out, Finish::Commit)) => tx.commit().map_err(TpccError::from).map(|()| {
                out.committed = true;
                out
            }),
            Ok((mut out, Finish::Abort)) => {
                tx.abort();
                out.committed = false;
                Ok(out)
            }
            Err(e) => {
                tx.abort();
                Err(e)
            }
        };
        match res {
            Ok(mut out) => {
                out.retries = retries;
                return Ok(out);
            }
            Err(e) if e.is_conflict() => {
                if retries >= MAX_RETRIES {
                    return Err(TpccError::RetriesExhausted {
                        kind: kind.name(),
                        attempts: retries + 1,
                        last: e.to_string(),
                    });
                }
                retries += 1;
                backoff(retries);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A pause before retry `n` (1-based): none for the first, a yield for the next few, then a
/// short sleep growing to 1 ms, so that a transaction losing again and again to a hot row (the
/// warehouse's W_YTD row in Payment) lets the winners' commits through.
fn backoff(n: u32) {
    match n {
        1 => {}
        2..=4 => std::thread::yield_now(),
        _ => std::thread::sleep(std::time::Duration::from_micros(
            (10u64 << (n - 5).min(7)).min(1000),
        )),
    }
}

/// New-Order (clause 2.4.2) on the exclusive writer; see [`new_order_with`].
pub fn new_order<E: Engine>(engine: &E, inp: &NewOrderInput) -> TpccResult<Outcome> {
    new_order_with(engine, WriterMode::Exclusive, inp)
}

/// New-Order (clause 2.4.2) with writers of `mode`, retried on conflicts ([`run_write`]). Rolls
/// back (after executing every line) when an item id is unused.
pub fn new_order_with<E: Engine>(
    engine: &E,
    mode: WriterMode,
    inp: &NewOrderInput,
) -> TpccResult<Outcome> {
    run_write(engine, mode, TxKind::NewOrder, |tx| new_order_in(tx, inp))
}

/// New-Order's logic on `tx`: reads and writes through it only (it may run again after a
/// conflict). Asks for an abort when an item id is unused. It reads no YTD row, so a
/// concurrent Payment of its warehouse and district does not invalidate it.
pub fn new_order_in<T: WriteTx + ?Sized>(
    tx: &mut T,
    inp: &NewOrderInput,
) -> TpccResult<(Outcome, Finish)> {
    let now = now_ms();
    let (w, d, c) = (inp.w, inp.d, inp.c);
    let wh: schema::Warehouse = get_row(tx, &schema::warehouse_key(w), format!("w={w}"))?;
    let dkey = schema::district_key(w, d);
    let mut dist: schema::District = get_row(tx, &dkey, format!("w={w} d={d}"))?;
    let o_id = dist.next_o_id;
    dist.next_o_id = dist.next_o_id.wrapping_add(1);
    tx.insert(table::DISTRICT, &dkey, &dist.encode())?;
    let cust: schema::Customer = get_row(
        tx,
        &schema::customer_key(w, d, c),
        format!("w={w} d={d} c={c}"),
    )?;
    let all_local = inp.lines.iter().all(|l| l.supply_w == w);
    let order = schema::Order {
        c_id: c,
        entry_d: now,
        carrier_id: None,
        ol_cnt: inp.lines.len() as u8,
        all_local,
    };
    tx.insert(
        table::ORDER,
        &schema::order_key(w, d, o_id),
        &order.encode(),
    )?;
    tx.insert(table::NEW_ORDER, &schema::new_order_key(w, d, o_id), &[])?;
    tx.insert(
        table::ORDER_BY_CUSTOMER,
        &schema::order_customer_key(w, d, c, o_id),
        &[],
    )?;
    let mut out = Outcome {
        lines: inp.lines.len() as u32,
        ..Default::default()
    };
    let mut invalid = false;
    let mut total: i64 = 0;
    for (n, line) in inp.lines.iter().enumerate() {
        let ikey = schema::item_key(line.i_id);
        let item = match tx.get(table::ITEM, &ikey)? {
            Some(v) => schema::Item::decode(&ikey, &v)?,
            None => {
                // "Item number is not valid": the transaction is rolled back below.
                invalid = true;
                continue;
            }
        };
        let skey = schema::stock_key(line.supply_w, line.i_id);
        let mut stock: schema::Stock =
            get_row(tx, &skey, format!("w={} i={}", line.supply_w, line.i_id))?;
        let q = line.quantity as i32;
        stock.quantity = if stock.quantity >= q + 10 {
            stock.quantity.wrapping_sub(q)
        } else {
            stock.quantity.wrapping_sub(q).wrapping_add(91)
        };
        stock.ytd = stock.ytd.wrapping_add(line.quantity as u32);
        stock.order_cnt = stock.order_cnt.wrapping_add(1);
        if line.supply_w != w {
            stock.remote_cnt = stock.remote_cnt.wrapping_add(1);
            out.remote_lines += 1;
        }
        tx.insert(table::STOCK, &skey, &stock.encode())?;
        let amount = (q as i64).wrapping_mul(item.price);
        total = total.wrapping_add(amount);
        // brand-generic: computed as the spec asks, shown on the terminal only.
        let _brand_generic = item.data.contains("ORIGINAL") && stock.data.contains("ORIGINAL");
        let ol = schema::OrderLine {
            i_id: line.i_id,
            supply_w_id: line.supply_w,
            delivery_d: None,
            quantity: line.quantity,
            amount,
            dist_info: stock.dist[(d - 1) as usize].clone(),
        };
        tx.insert(
            table::ORDER_LINE,
            &schema::order_line_key(w, d, o_id, (n + 1) as u8),
            &ol.encode(),
        )?;
    }
    // total * (1 - C_DISCOUNT) * (1 + W_TAX + D_TAX), in 1/10000 units: terminal output only.
    let _total_amount = (total as i128 * (10_000 - cust.discount as i128) / 10_000)
        * (10_000 + wh.tax as i128 + dist.tax as i128)
        / 10_000;
    if invalid {
        out.rolled_back = true;
        return Ok((out, Finish::Abort));
    }
    out.new_order = Some((w, d, o_id));
    Ok((out, Finish::Commit))
}

/// Payment (clause 2.5.2) on the exclusive writer; see [`payment_with`].
pub fn payment<E: Engine>(engine: &E, inp: &PaymentInput) -> TpccResult<Outcome> {
    payment_with(engine, WriterMode::Exclusive, inp)
}

/// Payment (clause 2.5.2) with writers of `mode`, retried on conflicts ([`run_write`]; the
/// retry inserts the same HISTORY id, which the conflicted attempt did not apply).
pub fn payment_with<E: Engine>(
    engine: &E,
    mode: WriterMode,
    inp: &PaymentInput,
) -> TpccResult<Outcome> {
    run_write(engine, mode, TxKind::Payment, |tx| payment_in(tx, inp))
}

/// Payment's logic on `tx` (reads and writes through it only). It reads the warehouse and
/// district rows (names for H_DATA) but writes only their YTD rows.
pub fn payment_in<T: WriteTx + ?Sized>(
    tx: &mut T,
    inp: &PaymentInput,
) -> TpccResult<(Outcome, Finish)> {
    let now = now_ms();
    let (w, d) = (inp.w, inp.d);
    let wkey = schema::warehouse_key(w);
    let wh: schema::Warehouse = get_row(tx, &wkey, format!("w={w}"))?;
    // W_YTD and D_YTD are running totals Payment never reads: an atomic add (the YTD rows
    // are 8-byte little-endian integers), so Payments of one warehouse do not conflict.
    tx.add_i64(table::WAREHOUSE_YTD, &wkey, inp.amount)?;
    let dkey = schema::district_key(w, d);
    let dist: schema::District = get_row(tx, &dkey, format!("w={w} d={d}"))?;
    tx.add_i64(table::DISTRICT_YTD, &dkey, inp.amount)?;
    let c_id = find_customer(tx, inp.c_w, inp.c_d, &inp.customer)?;
    let ckey = schema::customer_key(inp.c_w, inp.c_d, c_id);
    let mut cust: schema::Customer =
        get_row(tx, &ckey, format!("w={} d={} c={c_id}", inp.c_w, inp.c_d))?;
    cust.balance = cust.balance.wrapping_sub(inp.amount);
    cust.ytd_payment = cust.ytd_payment.wrapping_add(inp.amount);
    cust.payment_cnt = cust.payment_cnt.wrapping_add(1);
    if cust.credit == "BC" {
        let mut data = format!(
            "{c_id} {} {} {d} {w} {}.{:02} | ",
            inp.c_d,
            inp.c_w,
            inp.amount / 100,
            inp.amount % 100
        );
        data.push_str(&cust.data);
        data.truncate(500);
        cust.data = data;
    }
    tx.insert(table::CUSTOMER, &ckey, &cust.encode())?;
    let h = schema::History {
        c_id,
        c_d_id: inp.c_d,
        c_w_id: inp.c_w,
        date: now,
        amount: inp.amount,
        data: format!("{}    {}", wh.name, dist.name),
    };
    if tx
        .insert(
            table::HISTORY,
            &schema::history_key(w, d, inp.history_id),
            &h.encode(),
        )?
        .is_some()
    {
        return Err(TpccError::Usage(format!(
            "HISTORY id {:#x} used twice (run counter not advanced?)",
            inp.history_id
        )));
    }
    Ok((
        Outcome {
            remote_payment: inp.c_w != w,
            by_name: matches!(inp.customer, CustomerSel::LastName(_)),
            ..Default::default()
        },
        Finish::Commit,
    ))
}

/// Order-Status (clause 2.6.2), read-only.
pub fn order_status<E: Engine>(engine: &E, inp: &OrderStatusInput) -> TpccResult<Outcome> {
    let (w, d) = (inp.w, inp.d);
    let mut tx = engine.read()?;
    let c_id = find_customer(&mut tx, w, d, &inp.customer)?;
    let _cust: schema::Customer = get_row(
        &mut tx,
        &schema::customer_key(w, d, c_id),
        format!("w={w} d={d} c={c_id}"),
    )?;
    let prefix = schema::customer_key(w, d, c_id);
    let end = schema::prefix_end(&prefix);
    let mut out = Outcome {
        committed: true,
        by_name: matches!(inp.customer, CustomerSel::LastName(_)),
        ..Default::default()
    };
    if let Some((k, _)) = tx.first(table::ORDER_BY_CUSTOMER, &prefix, &end, Direction::Reverse)? {
        let o_id = schema::decode_order_customer_key(&k)?;
        let _order: schema::Order = get_row(
            &mut tx,
            &schema::order_key(w, d, o_id),
            format!("w={w} d={d} o={o_id}"),
        )?;
        let lp = schema::order_key(w, d, o_id);
        for (k, v) in tx.collect(table::ORDER_LINE, &lp, &schema::prefix_end(&lp))? {
            schema::OrderLine::decode(&k, &v)?;
            out.result_count += 1;
        }
    }
    Ok(out)
}

/// Delivery (clause 2.7.4) on the exclusive writer; see [`delivery_with`].
pub fn delivery<E: Engine>(engine: &E, inp: &DeliveryInput) -> TpccResult<Outcome> {
    delivery_with(engine, WriterMode::Exclusive, inp)
}

/// Delivery (clause 2.7.4): all 10 districts in one transaction, with writers of `mode`,
/// retried on conflicts ([`run_write`]).
pub fn delivery_with<E: Engine>(
    engine: &E,
    mode: WriterMode,
    inp: &DeliveryInput,
) -> TpccResult<Outcome> {
    run_write(engine, mode, TxKind::Delivery, |tx| delivery_in(tx, inp))
}

/// Delivery's logic on `tx` (reads and writes through it only).
pub fn delivery_in<T: WriteTx + ?Sized>(
    tx: &mut T,
    inp: &DeliveryInput,
) -> TpccResult<(Outcome, Finish)> {
    let now = now_ms();
    let w = inp.w;
    let mut out = Outcome::default();
    let mkey = schema::meta_deliveries_key(w);
    let mut counts = match tx.get(table::META, &mkey)? {
        Some(v) => schema::decode_deliveries(&mkey, &v)?,
        None => return Err(missing(table::META, format!("deliveries of w={w}"))),
    };
    for d in 1..=DISTRICTS {
        let p = schema::district_key(w, d);
        let Some((nokey, _)) = tx.first(
            table::NEW_ORDER,
            &p,
            &schema::prefix_end(&p),
            Direction::Forward,
        )?
        else {
            out.skipped_districts += 1;
            continue;
        };
        let (_, _, o_id) = schema::decode_order_key(table::NEW_ORDER, &nokey)?;
        tx.remove(table::NEW_ORDER, &nokey)?;
        let okey = schema::order_key(w, d, o_id);
        let mut order: schema::Order = get_row(tx, &okey, format!("w={w} d={d} o={o_id}"))?;
        order.carrier_id = Some(inp.carrier);
        tx.insert(table::ORDER, &okey, &order.encode())?;
        let lines = tx.collect(table::ORDER_LINE, &okey, &schema::prefix_end(&okey))?;
        let mut sum = 0i64;
        for (k, v) in lines {
            let mut ol = schema::OrderLine::decode(&k, &v)?;
            ol.delivery_d = Some(now);
            sum = sum.wrapping_add(ol.amount);
            tx.insert(table::ORDER_LINE, &k, &ol.encode())?;
        }
        let ckey = schema::customer_key(w, d, order.c_id);
        let mut cust: schema::Customer =
            get_row(tx, &ckey, format!("w={w} d={d} c={}", order.c_id))?;
        cust.balance = cust.balance.wrapping_add(sum);
        cust.delivery_cnt = cust.delivery_cnt.wrapping_add(1);
        tx.insert(table::CUSTOMER, &ckey, &cust.encode())?;
        counts[(d - 1) as usize] = counts[(d - 1) as usize].wrapping_add(1);
        out.delivered += 1;
    }
    tx.insert(table::META, &mkey, &schema::encode_deliveries(&counts))?;
    Ok((out, Finish::Commit))
}

/// Stock-Level (clause 2.8.2), read-only.
pub fn stock_level<E: Engine>(engine: &E, inp: &StockLevelInput) -> TpccResult<Outcome> {
    let (w, d) = (inp.w, inp.d);
    let mut tx = engine.read()?;
    let dist: schema::District =
        get_row(&mut tx, &schema::district_key(w, d), format!("w={w} d={d}"))?;
    let next = dist.next_o_id;
    let start = schema::order_key(w, d, next.saturating_sub(20));
    let end = schema::order_key(w, d, next);
    let mut items = std::collections::BTreeSet::new();
    let mut bad = None;
    tx.scan(
        table::ORDER_LINE,
        &start,
        &end,
        Direction::Forward,
        &mut |k, v| match schema::OrderLine::decode(k, v) {
            Ok(ol) => {
                items.insert(ol.i_id);
                Ok(Flow::Continue)
            }
            Err(e) => {
                bad = Some(e);
                Ok(Flow::Stop)
            }
        },
    )?;
    if let Some(e) = bad {
        return Err(e);
    }
    let mut low = 0;
    for i in items {
        let skey = schema::stock_key(w, i);
        let s: schema::Stock = get_row(&mut tx, &skey, format!("w={w} i={i}"))?;
        if s.quantity < inp.threshold {
            low += 1;
        }
    }
    Ok(Outcome {
        committed: true,
        result_count: low,
        ..Default::default()
    })
}
