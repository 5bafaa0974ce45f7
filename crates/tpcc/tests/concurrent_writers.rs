//! Concurrent writers (`--writers concurrent`): New-Order, Payment and Delivery as concurrent
//! write transactions, conflicted ones run again with the same input, retries counted.
//!
//! Each test breaks or exercises the property it guards: a New-Order forced into a conflict (a
//! Payment of its customer commits the customer row it read in between) commits exactly one
//! order on its retry; a New-Order and a Payment of the same district overlap without a conflict
//! (W_YTD and D_YTD are in their own tables, so Payment writes no row New-Order reads), Payments
//! of one warehouse and district do not conflict (they add to the YTD rows without reading
//! them), and the one sharing left (Payment reads the district row whose D_NEXT_O_ID New-Order
//! updates) is pinned down;
//! the retry bound ends a transaction that always conflicts with an error, having applied
//! nothing; many terminals on one warehouse conflict for real on keel, and the run still passes
//! conditions 1–12 with every acknowledged New-Order present exactly once; a longer concurrent
//! run on two warehouses keeps the partitioned W_YTD / D_YTD consistent (conditions 1, 8, 9) and
//! leaves the static warehouse and district columns alone; an engine without
//! concurrent writers runs the exclusive writer and says so; old result files still parse.

mod common;

use keel_tpcc::check::check;
use keel_tpcc::config::StoreConfig;
use keel_tpcc::driver::{
    missing_acked, read_acked, run_workload, summary, RunOptions, RunResult, MAX_RETRIES,
};
use keel_tpcc::engine::{Engine, EngineError, ReadTx, ReadTxExt, WriteTx};
use keel_tpcc::load::{load, LoadOptions};
use keel_tpcc::schema::{self, table, Row};
use keel_tpcc::txn::{
    new_order_in, new_order_with, payment_in, payment_with, run_write, CustomerSel, Finish,
    LineInput, NewOrderInput, Outcome, PaymentInput, TxKind, WriterMode,
};
use keel_tpcc::{KeelEngine, TpccError};
use std::cell::Cell;
use std::time::Duration;

fn keel_loaded() -> (tempfile::TempDir, KeelEngine) {
    keel_loaded_with(1)
}

fn keel_loaded_with(warehouses: u16) -> (tempfile::TempDir, KeelEngine) {
    let d = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::default().with("pool_size", "32MiB");
    let e = KeelEngine::open(d.path(), &cfg).unwrap();
    let mut lo = LoadOptions::new(warehouses);
    lo.items = 1000;
    lo.seed = 3;
    load(&e, &lo).unwrap();
    (d, e)
}

fn get<E: Engine, R: Row>(e: &E, key: &[u8]) -> Option<R> {
    let mut r = e.read().unwrap();
    r.get(R::TABLE, key)
        .unwrap()
        .map(|v| R::decode(key, &v).unwrap())
}

fn count<E: Engine>(e: &E, t: &str, prefix: &[u8]) -> usize {
    e.read()
        .unwrap()
        .collect(t, prefix, &schema::prefix_end(prefix))
        .unwrap()
        .len()
}

fn order_input(d: u8) -> NewOrderInput {
    NewOrderInput {
        w: 1,
        d,
        c: 77,
        lines: [(42, 7), (43, 1), (44, 10), (45, 2), (46, 3)]
            .iter()
            .map(|&(i_id, quantity)| LineInput {
                i_id,
                supply_w: 1,
                quantity,
            })
            .collect(),
    }
}

#[test]
fn a_retried_new_order_commits_exactly_one_order() {
    let (_d, e) = keel_loaded();
    let d = 3;
    let d0: schema::District = get(&e, &schema::district_key(1, d)).unwrap();
    let d0_ytd: schema::DistrictYtd = get(&e, &schema::district_key(1, d)).unwrap();
    let s0: schema::Stock = get(&e, &schema::stock_key(1, 42)).unwrap();
    let o = d0.next_o_id;
    let inp = order_input(d);
    let attempts = Cell::new(0u32);
    let out = run_write(&e, WriterMode::Concurrent, TxKind::NewOrder, |tx| {
        attempts.set(attempts.get() + 1);
        if attempts.get() == 1 {
            // Another terminal's Payment of this order's customer commits the customer row
            // (C_BALANCE; New-Order reads its C_DISCOUNT) after this transaction's snapshot and
            // before it reads it: its commit must be refused. (A Payment of another customer
            // would not do: it writes only the YTD rows of the warehouse and the district, which
            // New-Order does not read.)
            let p = payment_with(
                &e,
                WriterMode::Concurrent,
                &PaymentInput {
                    w: 1,
                    d,
                    c_w: 1,
                    c_d: d,
                    customer: CustomerSel::Id(77),
                    amount: 1234,
                    history_id: (1 << 62) | 1,
                },
            )
            .unwrap();
            assert!(p.committed && p.retries == 0);
        }
        new_order_in(tx, &inp)
    })
    .unwrap();
    assert_eq!(attempts.get(), 2, "the first attempt conflicted, once");
    assert_eq!(out.retries, 1);
    assert!(out.committed && !out.rolled_back);
    assert_eq!(out.new_order, Some((1, d, o)));
    assert!(e.stats().conflicts >= 1, "{:?}", e.stats());

    // Exactly one order: D_NEXT_O_ID moved by one, one ORDER / NEW-ORDER / order lines set, the
    // stock counted once, and nothing at the next id.
    let d1: schema::District = get(&e, &schema::district_key(1, d)).unwrap();
    assert_eq!(d1.next_o_id, o + 1);
    let d1_ytd: schema::DistrictYtd = get(&e, &schema::district_key(1, d)).unwrap();
    assert_eq!(
        d1_ytd.ytd,
        d0_ytd.ytd + 1234,
        "the Payment in between is kept"
    );
    assert!(get::<_, schema::Order>(&e, &schema::order_key(1, d, o)).is_some());
    assert!(get::<_, schema::Order>(&e, &schema::order_key(1, d, o + 1)).is_none());
    assert_eq!(count(&e, table::ORDER_LINE, &schema::order_key(1, d, o)), 5);
    assert_eq!(
        count(&e, table::NEW_ORDER, &schema::district_key(1, d)),
        count(&e, table::NEW_ORDER, &schema::district_key(1, d + 1)) + 1,
        "one more undelivered order than a district left alone"
    );
    let s1: schema::Stock = get(&e, &schema::stock_key(1, 42)).unwrap();
    assert_eq!((s1.order_cnt, s1.ytd), (s0.order_cnt + 1, s0.ytd + 7));
    let c = check(&e).unwrap();
    assert!(c.all_passed(), "{}", c.render());

    // The intended rollback (an unused item) aborts, is not a conflict and is not retried.
    let mut bad = order_input(d);
    bad.lines.last_mut().unwrap().i_id = 1001;
    let out = new_order_with(&e, WriterMode::Concurrent, &bad).unwrap();
    assert!(out.rolled_back && !out.committed && out.new_order.is_none());
    assert_eq!(out.retries, 0);
    let d2: schema::District = get(&e, &schema::district_key(1, d)).unwrap();
    assert_eq!(
        d2.next_o_id,
        o + 1,
        "the rolled-back New-Order left no trace"
    );
}

fn payment_input(d: u8, c: u16, amount: i64, seq: u64) -> PaymentInput {
    PaymentInput {
        w: 1,
        d,
        c_w: 1,
        c_d: d,
        customer: CustomerSel::Id(c),
        amount,
        history_id: (1 << 62) | seq,
    }
}

fn ytd<E: Engine>(e: &E, d: u8) -> (i64, i64) {
    let w: schema::WarehouseYtd = get(e, &schema::warehouse_key(1)).unwrap();
    let dy: schema::DistrictYtd = get(e, &schema::district_key(1, d)).unwrap();
    (w.ytd, dy.ytd)
}

#[test]
fn a_new_order_and_a_payment_of_one_district_overlap_without_a_conflict() {
    let (_d, e) = keel_loaded();
    let d = 4;
    let o = get::<_, schema::District>(&e, &schema::district_key(1, d))
        .unwrap()
        .next_o_id;
    let (w0, d0) = ytd(&e, d);
    let conflicts0 = e.stats().conflicts;

    // Both start (snapshots before either commits), both bodies run, then the Payment commits
    // and the New-Order after it. The New-Order read the warehouse row (W_TAX) and the district
    // row (D_TAX, D_NEXT_O_ID); the Payment wrote only the YTD rows and its customer (another
    // one) and HISTORY, so the New-Order's reads still hold and it commits.
    let mut no_tx = e.write_concurrent().unwrap();
    let mut p_tx = e.write_concurrent().unwrap();
    let (no_out, no_finish) = new_order_in(&mut no_tx, &order_input(d)).unwrap();
    let (_, p_finish) = payment_in(&mut p_tx, &payment_input(d, 5, 1234, 1)).unwrap();
    assert_eq!((no_finish, p_finish), (Finish::Commit, Finish::Commit));
    p_tx.commit().expect("the Payment commits");
    no_tx
        .commit()
        .expect("the New-Order commits after a Payment of its warehouse and district");
    assert_eq!(no_out.new_order, Some((1, d, o)));
    assert_eq!(e.stats().conflicts, conflicts0, "no conflict");
    assert_eq!(ytd(&e, d), (w0 + 1234, d0 + 1234));
    assert_eq!(
        get::<_, schema::District>(&e, &schema::district_key(1, d))
            .unwrap()
            .next_o_id,
        o + 1
    );
    assert!(get::<_, schema::Order>(&e, &schema::order_key(1, d, o)).is_some());

    // Two Payments of one warehouse (and of one district) do not conflict either: each adds
    // to W_YTD and D_YTD without reading them (an atomic add), and both amounts count.
    let mut p1 = e.write_concurrent().unwrap();
    let mut p2 = e.write_concurrent().unwrap();
    let mut p3 = e.write_concurrent().unwrap();
    payment_in(&mut p1, &payment_input(d, 6, 100, 2)).unwrap();
    payment_in(&mut p2, &payment_input(d + 1, 7, 200, 3)).unwrap();
    payment_in(&mut p3, &payment_input(d, 9, 50, 5)).unwrap();
    p1.commit().unwrap();
    p2.commit()
        .expect("a Payment of another district of the warehouse commits");
    p3.commit().expect("a Payment of the same district commits");
    assert_eq!(e.stats().conflicts, conflicts0, "no conflict");
    assert_eq!(ytd(&e, d), (w0 + 1234 + 350, d0 + 1234 + 150));

    // The sharing left: a Payment reads the district row (D_NAME for H_DATA), whose
    // D_NEXT_O_ID a New-Order of the district updates, so a New-Order committing first makes
    // the overlapping Payment conflict (on `district`, not on a YTD row). Splitting
    // D_NEXT_O_ID out of the district row as well would remove this one.
    let conflicts1 = e.stats().conflicts;
    let mut no_tx = e.write_concurrent().unwrap();
    let mut p_tx = e.write_concurrent().unwrap();
    new_order_in(&mut no_tx, &order_input(d)).unwrap();
    payment_in(&mut p_tx, &payment_input(d, 8, 300, 4)).unwrap();
    no_tx.commit().expect("the New-Order commits");
    let err = p_tx.commit().unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(err.to_string().contains("\"district\""), "{err}");
    assert_eq!(e.stats().conflicts, conflicts1 + 1);
    // The conflicted attempt applied nothing: the same Payment (same HISTORY id) run again
    // commits.
    let out = payment_with(&e, WriterMode::Concurrent, &payment_input(d, 8, 300, 4)).unwrap();
    assert!(out.committed);
    assert_eq!(ytd(&e, d), (w0 + 1234 + 350 + 300, d0 + 1234 + 150 + 300));
    let c = check(&e).unwrap();
    assert!(c.all_passed(), "{}", c.render());
}

#[test]
fn retries_are_bounded_and_a_conflicted_attempt_applies_nothing() {
    let (_d, e) = common::loaded(1);
    let attempts = Cell::new(0u32);
    let err = run_write(&e, WriterMode::Concurrent, TxKind::Payment, |tx| {
        attempts.set(attempts.get() + 1);
        tx.insert(table::META, b"never", b"applied")?;
        Err::<(Outcome, Finish), _>(EngineError::Conflict("forced".into()).into())
    })
    .unwrap_err();
    assert_eq!(attempts.get(), MAX_RETRIES + 1);
    assert!(
        matches!(err, TpccError::RetriesExhausted { kind: "Payment", attempts: n, .. } if n == MAX_RETRIES + 1),
        "{err}"
    );
    assert!(err.to_string().contains("forced"), "{err}");
    assert!(e
        .read()
        .unwrap()
        .get(table::META, b"never")
        .unwrap()
        .is_none());

    // Another error is not retried.
    let attempts = Cell::new(0u32);
    let err = run_write(&e, WriterMode::Concurrent, TxKind::Delivery, |_tx| {
        attempts.set(attempts.get() + 1);
        Err::<(Outcome, Finish), _>(TpccError::Usage("boom".into()))
    })
    .unwrap_err();
    assert_eq!(attempts.get(), 1);
    assert!(!err.is_conflict() && err.to_string().contains("boom"));

    // A conflict that clears: counted, then committed once.
    let attempts = Cell::new(0u32);
    let out = run_write(&e, WriterMode::Concurrent, TxKind::NewOrder, |tx| {
        attempts.set(attempts.get() + 1);
        let n = attempts.get().to_le_bytes();
        tx.insert(table::META, b"attempt", &n)?;
        if attempts.get() <= 3 {
            return Err(EngineError::Conflict("again".into()).into());
        }
        Ok((Outcome::default(), Finish::Commit))
    })
    .unwrap();
    assert!(out.committed);
    assert_eq!(out.retries, 3);
    assert_eq!(
        e.read().unwrap().get(table::META, b"attempt").unwrap(),
        Some(4u32.to_le_bytes().to_vec())
    );
}

fn run_keel(e: &KeelEngine, writers: WriterMode, acked: &std::path::Path) -> RunResult {
    let ro = RunOptions {
        terminals: 8,
        duration: Duration::from_secs(60),
        warmup: Duration::ZERO,
        interval: Duration::from_secs(1),
        max_transactions: Some(60),
        seed: 9,
        acked_log: Some(acked.to_path_buf()),
        print: false,
        writers,
        ..RunOptions::default()
    };
    run_workload(e, &ro).unwrap()
}

#[test]
fn eight_concurrent_terminals_on_one_warehouse_retry_and_stay_consistent() {
    let (d, e) = keel_loaded();
    let acked = d.path().join("acked.txt");
    // Conflicts depend on timing: a few rounds until one happened (8 terminals on one
    // warehouse conflict in the first round in practice: New-Orders of a district all take
    // D_NEXT_O_ID, and a Payment reads the district row they write).
    let mut retries = 0;
    let mut conflicts = 0;
    let mut committed = 0;
    for round in 0..5 {
        let r = run_keel(&e, WriterMode::Concurrent, &acked);
        assert_eq!(r.meta.writers, Some(WriterMode::Concurrent));
        assert!(
            summary(&r).contains("writers: concurrent"),
            "{}",
            summary(&r)
        );
        for k in [TxKind::OrderStatus, TxKind::StockLevel] {
            assert_eq!(r.retries[k.index()], 0, "{} reads a snapshot", k.name());
        }
        let c = check(&e).unwrap();
        assert!(c.all_passed(), "round {round}: {}", c.render());
        retries += r.retries.iter().sum::<u64>();
        conflicts += r.stats.conflicts;
        committed += r.new_orders_committed;
        if retries > 0 {
            let per100 = r.rates.retries_per_100;
            println!(
                "round {round}: retries {:?} (per 100: {per100:?}), most {:?}, conflicts {}",
                r.retries, r.max_retries, r.stats.conflicts
            );
            break;
        }
    }
    assert!(retries > 0, "8 terminals on one warehouse never conflicted");
    assert!(conflicts > 0);
    // Every acknowledged New-Order is in the store, and each was acknowledged once: a retried
    // one wrote its line only after the commit that succeeded.
    let acks = read_acked(&acked).unwrap();
    assert_eq!(acks.len() as u64, committed);
    let unique: std::collections::BTreeSet<_> = acks.iter().collect();
    assert_eq!(unique.len(), acks.len(), "an order acknowledged twice");
    assert!(missing_acked(&e, &acks).unwrap().is_empty());

    // The same run on the exclusive writer: no retries, no conflicts, still consistent.
    let before = e.stats().conflicts;
    let r = run_keel(&e, WriterMode::Exclusive, &acked);
    assert_eq!(r.meta.writers, Some(WriterMode::Exclusive));
    assert_eq!(r.retries, [0; 5]);
    assert_eq!(e.stats().conflicts, before);
    assert!(check(&e).unwrap().all_passed());
}

#[test]
fn a_concurrent_run_on_two_warehouses_keeps_the_partitioned_ytd_consistent() {
    let (d, e) = keel_loaded_with(2);
    let statics = |e: &KeelEngine| {
        let mut r = e.read().unwrap();
        let w: Vec<_> = r
            .collect(table::WAREHOUSE, &[], &[0xFF; 4])
            .unwrap()
            .into_iter()
            .map(|(k, v)| schema::Warehouse::decode(&k, &v).unwrap())
            .collect();
        let dist: Vec<_> = r
            .collect(table::DISTRICT, &[], &[0xFF; 4])
            .unwrap()
            .into_iter()
            .map(|(k, v)| {
                let mut dist = schema::District::decode(&k, &v).unwrap();
                dist.next_o_id = 0;
                dist
            })
            .collect();
        (w, dist)
    };
    let before = statics(&e);
    assert_eq!((before.0.len(), before.1.len()), (2, 20));
    let ytd_total = |e: &KeelEngine| -> i64 {
        let mut r = e.read().unwrap();
        r.collect(table::WAREHOUSE_YTD, &[], &[0xFF; 4])
            .unwrap()
            .into_iter()
            .map(|(k, v)| schema::WarehouseYtd::decode(&k, &v).unwrap().ytd)
            .sum()
    };
    let ytd0 = ytd_total(&e);
    let ro = RunOptions {
        terminals: 8,
        duration: Duration::from_secs(60),
        warmup: Duration::ZERO,
        interval: Duration::from_secs(1),
        max_transactions: Some(400),
        seed: 21,
        acked_log: Some(d.path().join("acked.txt")),
        print: false,
        writers: WriterMode::Concurrent,
        ..RunOptions::default()
    };
    let r = run_workload(&e, &ro).unwrap();
    assert_eq!(r.meta.writers, Some(WriterMode::Concurrent));
    println!(
        "retries {:?} (per 100: {:?}), conflicts {}",
        r.retries, r.rates.retries_per_100, r.stats.conflicts
    );
    assert!(r.done[TxKind::Payment.index()] > 0 && r.new_orders_committed > 0);
    let c = check(&e).unwrap();
    assert!(c.all_passed(), "{}", c.render());
    for (id, groups) in [(1u8, 2u64), (8, 2), (9, 20)] {
        assert_eq!(c.condition(id).unwrap().checked, groups, "condition {id}");
    }
    // The Payments went to the YTD rows; the warehouse and district rows kept their static
    // columns (only D_NEXT_O_ID moved).
    assert!(ytd_total(&e) > ytd0);
    assert_eq!(statics(&e), before);
    let acks = read_acked(&d.path().join("acked.txt")).unwrap();
    assert_eq!(acks.len() as u64, r.new_orders_committed);
    assert!(missing_acked(&e, &acks).unwrap().is_empty());
}

#[test]
fn an_engine_without_concurrent_writers_runs_exclusive_and_says_so() {
    let (_d, e) = common::loaded(1);
    let ro = RunOptions {
        terminals: 4,
        warmup: Duration::ZERO,
        interval: Duration::from_millis(300),
        max_transactions: Some(100),
        print: false,
        writers: WriterMode::Concurrent,
        ..RunOptions::default()
    };
    let r = run_workload(&e, &ro).unwrap();
    assert_eq!(r.meta.writers, Some(WriterMode::Exclusive));
    assert_eq!(r.meta.writers_requested, Some(WriterMode::Concurrent));
    assert_eq!(r.retries, [0; 5]);
    let s = summary(&r);
    assert!(
        s.contains("--writers concurrent ignored"),
        "the report says the mode was ignored: {s}"
    );
    assert!(r.meta.lines().iter().any(|l| l.contains("ignored")));
}

#[test]
fn results_without_the_writer_fields_still_parse() {
    let (_d, e) = common::loaded(1);
    let ro = RunOptions {
        terminals: 1,
        warmup: Duration::ZERO,
        interval: Duration::from_millis(300),
        max_transactions: Some(20),
        print: false,
        ..RunOptions::default()
    };
    let r = run_workload(&e, &ro).unwrap();
    let mut v = serde_json::to_value(&r).unwrap();
    let o = v.as_object_mut().unwrap();
    assert!(o.remove("retries").is_some() && o.remove("max_retries").is_some());
    o["stats"]
        .as_object_mut()
        .unwrap()
        .remove("conflicts")
        .unwrap();
    o["rates"]
        .as_object_mut()
        .unwrap()
        .remove("retries_per_100")
        .unwrap();
    let m = o["meta"].as_object_mut().unwrap();
    m.remove("writers").unwrap();
    m.remove("writers_requested").unwrap();
    for i in o["intervals"].as_array_mut().unwrap() {
        let i = i.as_object_mut().unwrap();
        i.remove("retries").unwrap();
        i["stats"]
            .as_object_mut()
            .unwrap()
            .remove("conflicts")
            .unwrap();
    }
    let old: RunResult = serde_json::from_value(v).unwrap();
    assert_eq!(old.retries, [0; 5]);
    assert_eq!(old.meta.writers, None);
    assert!(summary(&old).contains("not recorded"), "{}", summary(&old));
}
