//! The initial population (TPC-C clause 4.3.3.1): deterministic from a seed, written in batched
//! commits, with a progress bar.
//!
//! Invariants (tests break them on purpose):
//! - the same seed, scale and timestamp give byte-identical tables, whatever the batch size (every
//!   warehouse/district/table stream has its own generator derived from the seed);
//! - the load marker is written in the last commit: a directory whose marker is missing was never
//!   completely loaded, and `run` / `check` refuse it;
//! - after a load, consistency conditions 1–12 hold (`tests/checks.rs`).

use indicatif::{ProgressBar, ProgressStyle};
use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineStats, WriteTx};
use crate::error::{TpccError, TpccResult};
use crate::rng::{last_name, NuRandC, Rng};
use crate::schema::{self, table, Address, Row, CUSTOMERS, DISTRICTS, FIRST_NEW_ORDER, ORDERS};

/// What to load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Number of warehouses (1..=65535).
    pub warehouses: u16,
    /// Items (100,000 per the spec; only tests may reduce it, through an explicit flag).
    pub items: u32,
    /// Seed of every generator.
    pub seed: u64,
    /// Rows per commit.
    pub batch_rows: usize,
    /// The "current date" written into date fields, ms since the epoch.
    pub timestamp_ms: i64,
    /// Show a progress bar.
    pub progress: bool,
}

impl LoadOptions {
    /// Spec scale with `warehouses`, seed 1, batches of 5,000 rows, dates = now.
    pub fn new(warehouses: u16) -> LoadOptions {
        LoadOptions {
            warehouses,
            items: schema::ITEMS,
            seed: 1,
            batch_rows: 5000,
            timestamp_ms: now_ms(),
            progress: false,
        }
    }
}

/// What a load did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    /// Rows written (index rows included).
    pub rows: u64,
    /// Commits.
    pub commits: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Engine counters during the load (checkpoint included).
    pub stats: EngineStats,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Rows a load of `warehouses` × `items` writes (index rows included), for the progress bar.
pub fn expected_rows(warehouses: u16, items: u32) -> u64 {
    let w = warehouses as u64;
    let per_district = 1 // district_ytd
        + CUSTOMERS as u64 * 3 // customer, by-name index, history
        + ORDERS as u64 * 2 // order, by-customer index
        + (ORDERS - FIRST_NEW_ORDER + 1) as u64
        + ORDERS as u64 * 10; // ≈ order lines

    // Per warehouse: warehouse and warehouse_ytd, stock, districts, the delivery counters.
    items as u64 + w * (2 + items as u64 + DISTRICTS as u64 * (1 + per_district) + 1) + 2
}

struct Batch<'e, E: Engine> {
    engine: &'e E,
    tx: Option<E::Write<'e>>,
    in_tx: usize,
    limit: usize,
    rows: u64,
    commits: u64,
    bar: ProgressBar,
}

impl<'e, E: Engine> Batch<'e, E> {
    fn put(&mut self, t: &str, key: &[u8], value: &[u8]) -> TpccResult<()> {
        if self.tx.is_none() {
            self.tx = Some(self.engine.write()?);
        }
        if let Some(tx) = self.tx.as_mut() {
            if tx.insert(t, key, value)?.is_some() {
                return Err(TpccError::Usage(format!(
                    "loader wrote key {} of table {t} twice (the directory was not empty?)",
                    schema::hex(key)
                )));
            }
        }
        self.in_tx += 1;
        self.rows += 1;
        if self.in_tx >= self.limit {
            self.commit()?;
        }
        Ok(())
    }

    fn row<R: Row>(&mut self, key: &[u8], r: &R) -> TpccResult<()> {
        self.put(R::TABLE, key, &r.encode())
    }

    fn commit(&mut self) -> TpccResult<()> {
        if let Some(tx) = self.tx.take() {
            tx.commit()?;
            self.commits += 1;
            self.bar.inc(self.in_tx as u64);
            self.in_tx = 0;
        }
        Ok(())
    }
}

fn address(r: &mut Rng) -> Address {
    Address {
        street_1: r.astring(10, 20),
        street_2: r.astring(10, 20),
        city: r.astring(10, 20),
        state: r.astring(2, 2).to_uppercase(),
        zip: r.zip(),
    }
}

// Stream ids for derived generators: (kind << 32) | (w << 8) | d.
fn stream(kind: u64, w: u16, d: u8) -> u64 {
    (kind << 32) | ((w as u64) << 8) | d as u64
}

/// Reads the load marker, or explains why the directory is not loaded.
pub fn read_marker<E: Engine>(engine: &E) -> TpccResult<schema::LoadMarker> {
    use crate::engine::ReadTx;
    let mut r = engine.read()?;
    match r.get(table::META, schema::META_LOAD)? {
        Some(v) => {
            let m = schema::LoadMarker::decode(&v)?;
            if m.format != schema::FORMAT_VERSION {
                return Err(TpccError::NotLoaded(format!(
                    "this directory was loaded with table layout (format) version {}, this \
                     keel-tpcc reads version {}{}: reload it (`keel-tpcc load` into a new --dir)",
                    m.format,
                    schema::FORMAT_VERSION,
                    if m.format < 2 {
                        " (W_YTD and D_YTD moved to tables warehouse_ytd and district_ytd)"
                    } else {
                        ""
                    }
                )));
            }
            Ok(m)
        }
        None => Err(TpccError::NotLoaded(
            "no complete TPC-C load in this directory (no load marker): run `keel-tpcc load` first"
                .to_string(),
        )),
    }
}

/// Loads the initial population into an empty store.
pub fn load<E: Engine>(engine: &E, opts: &LoadOptions) -> TpccResult<LoadReport> {
    if opts.warehouses == 0 {
        return Err(TpccError::Usage("--warehouses must be at least 1".into()));
    }
    if opts.items < 100 {
        return Err(TpccError::Usage("at least 100 items are needed".into()));
    }
    {
        // Any marker, of this format or another: loading on top would write keys twice.
        use crate::engine::ReadTx;
        if engine
            .read()?
            .get(table::META, schema::META_LOAD)?
            .is_some()
        {
            return Err(TpccError::Usage(
                "this directory is already loaded; use a new --dir".into(),
            ));
        }
    }
    let start = Instant::now();
    let before = engine.stats();
    let bar = if opts.progress {
        let b = ProgressBar::new(expected_rows(opts.warehouses, opts.items));
        b.set_style(
            ProgressStyle::with_template(
                "loading {bar:40.cyan/blue} {percent:>3}% {human_pos}/{human_len} rows, {per_sec}, eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        ProgressBar::hidden()
    };
    let mut b = Batch {
        engine,
        tx: None,
        in_tx: 0,
        limit: opts.batch_rows.max(1),
        rows: 0,
        commits: 0,
        bar,
    };
    let now = opts.timestamp_ms;
    let c_load = NuRandC::LOAD;

    // ITEM
    let mut r = Rng::derive(opts.seed, stream(1, 0, 0));
    for i in 1..=opts.items {
        let item = schema::Item {
            im_id: r.range(1, 10_000) as u32,
            name: r.astring(14, 24),
            price: r.range(100, 10_000) as i64,
            data: r.data_with_original(),
        };
        b.row(&schema::item_key(i), &item)?;
    }

    for w in 1..=opts.warehouses {
        let mut r = Rng::derive(opts.seed, stream(2, w, 0));
        let wh = schema::Warehouse {
            name: r.astring(6, 10),
            address: address(&mut r),
            tax: r.range(0, 2000) as i32,
        };
        b.row(&schema::warehouse_key(w), &wh)?;
        b.row(
            &schema::warehouse_key(w),
            &schema::WarehouseYtd { ytd: 30_000_000 },
        )?;

        let mut r = Rng::derive(opts.seed, stream(3, w, 0));
        for i in 1..=opts.items {
            let s = schema::Stock {
                quantity: r.range(10, 100) as i32,
                dist: std::array::from_fn(|_| r.astring(24, 24)),
                ytd: 0,
                order_cnt: 0,
                remote_cnt: 0,
                data: r.data_with_original(),
            };
            b.row(&schema::stock_key(w, i), &s)?;
        }

        for d in 1..=DISTRICTS {
            let mut r = Rng::derive(opts.seed, stream(4, w, d));
            let dist = schema::District {
                name: r.astring(6, 10),
                address: address(&mut r),
                tax: r.range(0, 2000) as i32,
                next_o_id: ORDERS + 1,
            };
            b.row(&schema::district_key(w, d), &dist)?;
            b.row(
                &schema::district_key(w, d),
                &schema::DistrictYtd { ytd: 3_000_000 },
            )?;

            let mut r = Rng::derive(opts.seed, stream(5, w, d));
            for c in 1..=CUSTOMERS {
                let last = if c <= 1000 {
                    last_name(c as u64 - 1)
                } else {
                    last_name(r.nurand(255, c_load.c_last, 0, 999))
                };
                let cust = schema::Customer {
                    first: r.astring(8, 16),
                    middle: "OE".into(),
                    last,
                    address: address(&mut r),
                    phone: r.nstring(16, 16),
                    since: now,
                    credit: if r.range(1, 100) <= 10 { "BC" } else { "GC" }.into(),
                    credit_lim: 5_000_000,
                    discount: r.range(0, 5000) as i32,
                    balance: -1000,
                    ytd_payment: 1000,
                    payment_cnt: 1,
                    delivery_cnt: 0,
                    data: r.astring(300, 500),
                };
                b.row(&schema::customer_key(w, d, c), &cust)?;
                b.put(
                    table::CUSTOMER_BY_NAME,
                    &schema::customer_name_key(w, d, &cust.last, &cust.first, c),
                    &[],
                )?;
                let h = schema::History {
                    c_id: c,
                    c_d_id: d,
                    c_w_id: w,
                    date: now,
                    amount: 1000,
                    data: r.astring(12, 24),
                };
                b.row(&schema::history_key(w, d, c as u64), &h)?;
            }

            let mut r = Rng::derive(opts.seed, stream(6, w, d));
            let perm = r.permutation(CUSTOMERS as u32);
            for o in 1..=ORDERS {
                let delivered = o < FIRST_NEW_ORDER;
                let c_id = perm[(o - 1) as usize] as u16;
                let ord = schema::Order {
                    c_id,
                    entry_d: now,
                    carrier_id: if delivered {
                        Some(r.range(1, 10) as u8)
                    } else {
                        None
                    },
                    ol_cnt: r.range(5, 15) as u8,
                    all_local: true,
                };
                b.row(&schema::order_key(w, d, o), &ord)?;
                b.put(
                    table::ORDER_BY_CUSTOMER,
                    &schema::order_customer_key(w, d, c_id, o),
                    &[],
                )?;
                for ol in 1..=ord.ol_cnt {
                    let line = schema::OrderLine {
                        i_id: r.range(1, opts.items as u64) as u32,
                        supply_w_id: w,
                        delivery_d: if delivered { Some(now) } else { None },
                        quantity: 5,
                        amount: if delivered {
                            0
                        } else {
                            r.range(1, 999_999) as i64
                        },
                        dist_info: r.astring(24, 24),
                    };
                    b.row(&schema::order_line_key(w, d, o, ol), &line)?;
                }
                if !delivered {
                    b.put(table::NEW_ORDER, &schema::new_order_key(w, d, o), &[])?;
                }
            }
        }
        b.put(
            table::META,
            &schema::meta_deliveries_key(w),
            &schema::encode_deliveries(&[0; DISTRICTS as usize]),
        )?;
    }
    b.put(table::META, schema::META_RUNS, &0u32.to_le_bytes())?;
    b.commit()?;
    // The marker goes in a commit of its own, after everything else is committed.
    let marker = schema::LoadMarker {
        format: schema::FORMAT_VERSION,
        warehouses: opts.warehouses,
        items: opts.items,
        seed: opts.seed,
        c_load,
        loaded_at_ms: now,
    };
    b.put(table::META, schema::META_LOAD, &marker.encode())?;
    b.commit()?;
    b.bar.finish_and_clear();
    engine.checkpoint()?;
    Ok(LoadReport {
        rows: b.rows,
        commits: b.commits,
        seconds: start.elapsed().as_secs_f64(),
        stats: engine.stats().delta(&before),
    })
}
