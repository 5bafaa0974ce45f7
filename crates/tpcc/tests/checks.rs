//! Consistency conditions 1–12: they pass after a load and after a run, and each one fails —
//! naming the altered row — when the row it guards is altered on purpose.

mod common;

use keel_tpcc::check::{check, CheckReport};
use keel_tpcc::driver::{run_workload, RunOptions};
use keel_tpcc::engine::{Engine, ReadTx, WriteTx};
use keel_tpcc::schema::{self, table, Row};
use keel_tpcc::MemoryEngine;
use std::time::Duration;

/// Reads a row, applies `f`, writes it back; returns the original bytes for the revert.
fn alter<R: Row>(e: &MemoryEngine, key: &[u8], f: impl FnOnce(&mut R)) -> Vec<u8> {
    let mut tx = e.write().unwrap();
    let old = tx.get(R::TABLE, key).unwrap().expect("row to alter exists");
    let mut row = R::decode(key, &old).unwrap();
    f(&mut row);
    tx.insert(R::TABLE, key, &row.encode()).unwrap();
    tx.commit().unwrap();
    old
}

/// Removes rows; returns them for the revert.
fn remove(
    e: &MemoryEngine,
    rows: &[(&'static str, Vec<u8>)],
) -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let mut tx = e.write().unwrap();
    let mut out = Vec::new();
    for (t, k) in rows {
        let v = tx.remove(t, k).unwrap().expect("row to remove exists");
        out.push((*t, k.clone(), v));
    }
    tx.commit().unwrap();
    out
}

fn restore(e: &MemoryEngine, rows: &[(&'static str, Vec<u8>, Vec<u8>)]) {
    let mut tx = e.write().unwrap();
    for (t, k, v) in rows {
        tx.insert(t, k, v).unwrap();
    }
    tx.commit().unwrap();
}

fn assert_fails(report: &CheckReport, id: u8, key: &str) {
    let c = report.condition(id).unwrap();
    assert!(
        !c.passed,
        "condition {id} should fail:\n{}",
        report.render()
    );
    let first = c.first_offending.clone().unwrap_or_default();
    assert!(
        first.starts_with(key),
        "condition {id}: first offending {first:?}, expected {key:?}"
    );
}

#[test]
fn all_conditions_pass_after_load_and_after_a_run() {
    let (_d, e) = common::loaded(1);
    let r = check(&e).unwrap();
    assert!(r.all_passed(), "{}", r.render());
    assert_eq!(r.conditions.len(), 12);
    // Every condition looked at something.
    assert!(r.conditions.iter().all(|c| c.checked > 0), "{}", r.render());
    let opts = RunOptions {
        terminals: 2,
        warmup: Duration::ZERO,
        interval: Duration::from_secs(1),
        max_transactions: Some(800),
        print: false,
        ..RunOptions::default()
    };
    let res = run_workload(&e, &opts).unwrap();
    assert!(
        res.done[3] > 0,
        "deliveries ran, so condition 11's adjustment is exercised"
    );
    let r = check(&e).unwrap();
    assert!(r.all_passed(), "{}", r.render());
}

type Revert = Box<dyn FnOnce(&MemoryEngine)>;
type Breaker = Box<dyn Fn(&MemoryEngine) -> Revert>;
type Case = (u8, &'static str, Breaker);

#[test]
fn each_condition_fails_when_the_row_it_guards_is_altered() {
    let (_d, e) = common::loaded(1);
    fn revert_row<R: Row + 'static>(key: Vec<u8>, old: Vec<u8>) -> Box<dyn FnOnce(&MemoryEngine)> {
        Box::new(move |e: &MemoryEngine| {
            let mut tx = e.write().unwrap();
            tx.insert(R::TABLE, &key, &old).unwrap();
            tx.commit().unwrap();
        })
    }
    fn row_case<R: Row + 'static>(key: Vec<u8>, f: fn(&mut R)) -> Breaker {
        Box::new(move |e| {
            let old = alter::<R>(e, &key, f);
            revert_row::<R>(key.clone(), old)
        })
    }
    fn removal(rows: Vec<(&'static str, Vec<u8>)>) -> Breaker {
        Box::new(move |e| {
            let gone = remove(e, &rows);
            Box::new(move |e: &MemoryEngine| restore(e, &gone))
        })
    }
    // Order (1,10,10) is delivered; its lines and index row go with it for condition 11.
    let o11: schema::Order = {
        let mut r = e.read().unwrap();
        let k = schema::order_key(1, 10, 10);
        schema::Order::decode(&k, &r.get(table::ORDER, &k).unwrap().unwrap()).unwrap()
    };
    let mut rows11 = vec![
        (table::ORDER, schema::order_key(1, 10, 10)),
        (
            table::ORDER_BY_CUSTOMER,
            schema::order_customer_key(1, 10, o11.c_id, 10),
        ),
    ];
    for n in 1..=o11.ol_cnt {
        rows11.push((table::ORDER_LINE, schema::order_line_key(1, 10, 10, n)));
    }
    let cases: Vec<Case> = vec![
        (
            1,
            "warehouse w=1",
            row_case::<schema::WarehouseYtd>(schema::warehouse_key(1), |w| w.ytd += 1),
        ),
        (
            2,
            "district w=1 d=3",
            row_case::<schema::District>(schema::district_key(1, 3), |d| d.next_o_id += 1),
        ),
        (
            3,
            "district w=1 d=4",
            removal(vec![(table::NEW_ORDER, schema::new_order_key(1, 4, 2500))]),
        ),
        (
            4,
            "district w=1 d=5",
            removal(vec![(
                table::ORDER_LINE,
                schema::order_line_key(1, 5, 100, 1),
            )]),
        ),
        (
            5,
            "order w=1 d=6 o=2800",
            row_case::<schema::Order>(schema::order_key(1, 6, 2800), |o| o.carrier_id = Some(1)),
        ),
        (
            6,
            "order w=1 d=7 o=50",
            row_case::<schema::Order>(schema::order_key(1, 7, 50), |o| o.ol_cnt += 1),
        ),
        (
            7,
            "order line w=1 d=8 o=60 ol=1",
            row_case::<schema::OrderLine>(schema::order_line_key(1, 8, 60, 1), |l| {
                l.delivery_d = None
            }),
        ),
        (
            8,
            "warehouse w=1",
            row_case::<schema::History>(schema::history_key(1, 9, 5), |h| h.amount += 1),
        ),
        (
            9,
            "district w=1 d=2",
            row_case::<schema::DistrictYtd>(schema::district_key(1, 2), |d| d.ytd += 1),
        ),
        (
            10,
            "customer w=1 d=1 c=17",
            row_case::<schema::Customer>(schema::customer_key(1, 1, 17), |c| c.balance += 1),
        ),
        (11, "district w=1 d=10", removal(rows11)),
        (
            12,
            "customer w=1 d=2 c=33",
            row_case::<schema::Customer>(schema::customer_key(1, 2, 33), |c| c.ytd_payment += 1),
        ),
    ];
    for (id, key, break_it) in cases {
        let revert = break_it(&e);
        let report = check(&e).unwrap();
        assert_fails(&report, id, key);
        revert(&e);
    }
    let r = check(&e).unwrap();
    assert!(
        r.all_passed(),
        "reverts restored consistency:\n{}",
        r.render()
    );
}

#[test]
fn a_missing_ytd_row_fails_the_condition_that_reads_it() {
    let (_d, e) = common::loaded(1);
    for (t, key, ids, named) in [
        (
            table::WAREHOUSE_YTD,
            schema::warehouse_key(1),
            &[1u8, 8][..],
            "warehouse w=1: no warehouse_ytd row",
        ),
        (
            table::DISTRICT_YTD,
            schema::district_key(1, 6),
            &[9u8][..],
            "district w=1 d=6: no district_ytd row",
        ),
    ] {
        let gone = remove(&e, &[(t, key)]);
        let r = check(&e).unwrap();
        for &id in ids {
            assert_fails(&r, id, named);
        }
        restore(&e, &gone);
        assert!(check(&e).unwrap().all_passed());
    }
    // A YTD row of a district that does not exist is caught too.
    let orphan = schema::district_key(1, 11);
    restore(
        &e,
        &[(
            table::DISTRICT_YTD,
            orphan.clone(),
            schema::DistrictYtd { ytd: 0 }.encode(),
        )],
    );
    let r = check(&e).unwrap();
    assert_fails(&r, 9, "district_ytd w=1 d=11: no DISTRICT row");
    remove(&e, &[(table::DISTRICT_YTD, orphan)]);
    assert!(check(&e).unwrap().all_passed());
}

#[test]
fn check_refuses_a_directory_that_was_never_fully_loaded() {
    let (_d, e) = common::loaded(1);
    remove(&e, &[(table::META, schema::META_LOAD.to_vec())]);
    let err = check(&e).unwrap_err().to_string();
    assert!(err.contains("load marker"), "{err}");
}
