//! The loader: spec cardinalities and initial values, field widths, determinism from the seed
//! (whatever the batch size), and refusal to load twice.

mod common;

use keel_tpcc::config::StoreConfig;
use keel_tpcc::engine::{Direction, Engine, Flow, ReadTx};
use keel_tpcc::load::{load, LoadOptions};
use keel_tpcc::rng::last_name;
use keel_tpcc::schema::{self, table, Row};
use keel_tpcc::MemoryEngine;

fn digest(e: &MemoryEngine) -> Vec<(String, usize, u32)> {
    let mut r = e.read().unwrap();
    table::ALL
        .iter()
        .map(|t| {
            let (mut n, mut crc) = (0usize, 0u32);
            r.scan(t, &[], &[0xFF; 16], Direction::Forward, &mut |k, v| {
                n += 1;
                crc = crc32c::crc32c_append(crc32c::crc32c_append(crc, k), v);
                Ok(Flow::Continue)
            })
            .unwrap();
            (t.to_string(), n, crc)
        })
        .collect()
}

fn load_with(seed: u64, batch: usize) -> (tempfile::TempDir, MemoryEngine) {
    let d = tempfile::tempdir().unwrap();
    let e = MemoryEngine::open(d.path(), &StoreConfig::default()).unwrap();
    let mut o = LoadOptions::new(1);
    o.items = 500;
    o.seed = seed;
    o.batch_rows = batch;
    o.timestamp_ms = 1_700_000_000_000;
    load(&e, &o).unwrap();
    (d, e)
}

#[test]
fn load_is_deterministic_whatever_the_batch_size() {
    let (_a, a) = load_with(5, 1000);
    let (_b, b) = load_with(5, 7777);
    let da = digest(&a);
    assert_eq!(da, digest(&b));
    let (_c, c) = load_with(6, 1000);
    let dc = digest(&c);
    assert_ne!(da, dc, "another seed gives other data");
    // ...but the same cardinalities of the fixed-size tables.
    for (x, y) in da.iter().zip(&dc) {
        if x.0 != table::ORDER_LINE {
            assert_eq!(x.1, y.1, "{}", x.0);
        }
    }
}

#[test]
fn load_has_spec_cardinalities_initial_values_and_field_widths() {
    let (_d, e) = common::loaded(1);
    let items = common::TEST_ITEMS as usize;
    for (t, n) in [
        (table::WAREHOUSE, 1),
        (table::WAREHOUSE_YTD, 1),
        (table::DISTRICT, 10),
        (table::DISTRICT_YTD, 10),
        (table::CUSTOMER, 30_000),
        (table::CUSTOMER_BY_NAME, 30_000),
        (table::HISTORY, 30_000),
        (table::ORDER, 30_000),
        (table::ORDER_BY_CUSTOMER, 30_000),
        (table::NEW_ORDER, 9_000),
        (table::ITEM, items),
        (table::STOCK, items),
    ] {
        assert_eq!(e.row_count(t), n, "{t}");
    }
    let lines = e.row_count(table::ORDER_LINE);
    assert!(
        (295_000..=305_000).contains(&lines),
        "order lines {lines} (≈ 300,000)"
    );

    let mut r = e.read().unwrap();
    let mut get = |t: &str, k: Vec<u8>| r.get(t, &k).unwrap().map(|v| (k, v)).unwrap();
    let (k, v) = get(table::WAREHOUSE, schema::warehouse_key(1));
    let w = schema::Warehouse::decode(&k, &v).unwrap();
    let (k, v) = get(table::WAREHOUSE_YTD, schema::warehouse_key(1));
    assert_eq!(
        schema::WarehouseYtd::decode(&k, &v).unwrap().ytd,
        30_000_000
    );
    assert!((6..=10).contains(&w.name.len()) && (0..=2000).contains(&w.tax));
    assert_eq!(w.address.zip.len(), 9);
    assert!(w.address.zip.ends_with("11111"));
    let (k, v) = get(table::DISTRICT, schema::district_key(1, 10));
    let d = schema::District::decode(&k, &v).unwrap();
    assert_eq!(d.next_o_id, 3001);
    let (k, v) = get(table::DISTRICT_YTD, schema::district_key(1, 10));
    assert_eq!(schema::DistrictYtd::decode(&k, &v).unwrap().ytd, 3_000_000);
    let mut bc = 0;
    for c in 1..=schema::CUSTOMERS {
        let (k, v) = get(table::CUSTOMER, schema::customer_key(1, 4, c));
        let cu = schema::Customer::decode(&k, &v).unwrap();
        if c <= 1000 {
            assert_eq!(cu.last, last_name(c as u64 - 1));
        }
        assert!((8..=16).contains(&cu.first.len()) && (300..=500).contains(&cu.data.len()));
        assert_eq!(
            (
                cu.middle.as_str(),
                cu.balance,
                cu.ytd_payment,
                cu.payment_cnt,
                cu.delivery_cnt
            ),
            ("OE", -1000, 1000, 1, 0)
        );
        assert_eq!(cu.credit_lim, 5_000_000);
        assert!((0..=5000).contains(&cu.discount));
        bc += (cu.credit == "BC") as u32;
    }
    assert!(
        (200..=400).contains(&bc),
        "{bc} of 3000 customers with bad credit (≈ 10%)"
    );
    for o in [1u32, 2100, 2101, 3000] {
        let (k, v) = get(table::ORDER, schema::order_key(1, 2, o));
        let ord = schema::Order::decode(&k, &v).unwrap();
        assert_eq!(ord.carrier_id.is_some(), o < 2101);
        assert!((5..=15).contains(&ord.ol_cnt));
        let (k, v) = get(table::ORDER_LINE, schema::order_line_key(1, 2, o, 1));
        let ol = schema::OrderLine::decode(&k, &v).unwrap();
        assert_eq!(ol.delivery_d.is_some(), o < 2101);
        assert_eq!(ol.amount == 0, o < 2101);
        assert_eq!(ol.quantity, 5);
    }
    let mut original = 0;
    for i in 1..=common::TEST_ITEMS {
        let (k, v) = get(table::ITEM, schema::item_key(i));
        let it = schema::Item::decode(&k, &v).unwrap();
        assert!((100..=10_000).contains(&it.price) && (26..=50).contains(&it.data.len()));
        original += it.data.contains("ORIGINAL") as u32;
    }
    assert!(
        (100..=300).contains(&original),
        "{original} of 2000 items ORIGINAL (≈ 10%)"
    );
}

#[test]
fn loading_twice_is_refused() {
    let (_d, e) = load_with(1, 5000);
    let mut o = LoadOptions::new(1);
    o.items = 500;
    let err = load(&e, &o).unwrap_err().to_string();
    assert!(err.contains("already loaded"), "{err}");
}

#[test]
fn a_store_loaded_with_the_old_layout_is_refused_with_reload() {
    use keel_tpcc::check::check;
    use keel_tpcc::driver::{run_workload, RunOptions};
    use keel_tpcc::engine::WriteTx;
    // Format version 2 moved W_YTD and D_YTD out of the warehouse and district rows: a marker of
    // version 1 means rows of the old layout, which `run` and `check` must refuse rather than
    // misread.
    assert_eq!(schema::FORMAT_VERSION, 2);
    let (_d, e) = common::loaded(1);
    let mut tx = e.write().unwrap();
    let mut m = schema::LoadMarker::decode(
        &tx.get(table::META, schema::META_LOAD)
            .unwrap()
            .expect("marker"),
    )
    .unwrap();
    m.format = 1;
    tx.insert(table::META, schema::META_LOAD, &m.encode())
        .unwrap();
    tx.commit().unwrap();
    let ro = RunOptions {
        terminals: 1,
        max_transactions: Some(10),
        print: false,
        ..RunOptions::default()
    };
    let err = run_workload(&e, &ro).unwrap_err().to_string();
    assert!(
        err.contains("reload") && err.contains("version 1") && err.contains("warehouse_ytd"),
        "{err}"
    );
    let err = check(&e).unwrap_err().to_string();
    assert!(err.contains("reload"), "{err}");
    // Loading on top of it is refused too (it would write every key twice).
    let mut o = LoadOptions::new(1);
    o.items = common::TEST_ITEMS;
    let err = load(&e, &o).unwrap_err().to_string();
    assert!(err.contains("already loaded"), "{err}");
}
