//! Every transaction type executes with the spec's semantics (memory engine, 1 warehouse).

mod common;

use keel_tpcc::check::check;
use keel_tpcc::engine::{Engine, ReadTx};
use keel_tpcc::schema::{self, table, Row};
use keel_tpcc::txn::{
    delivery, find_customer, new_order, order_status, payment, stock_level, CustomerSel,
    DeliveryInput, LineInput, NewOrderInput, OrderStatusInput, PaymentInput, StockLevelInput,
    Terminal, TxKind,
};
use keel_tpcc::MemoryEngine;

fn get<R: Row>(e: &MemoryEngine, key: &[u8]) -> Option<R> {
    let mut r = e.read().unwrap();
    r.get(R::TABLE, key)
        .unwrap()
        .map(|v| R::decode(key, &v).unwrap())
}

fn lines(items: &[(u32, u16, u8)]) -> Vec<LineInput> {
    items
        .iter()
        .map(|&(i_id, supply_w, quantity)| LineInput {
            i_id,
            supply_w,
            quantity,
        })
        .collect()
}

#[test]
fn new_order_commits_every_row_and_rollback_leaves_none() {
    let (_d, e) = common::loaded(1);
    let d0: schema::District = get(&e, &schema::district_key(1, 3)).unwrap();
    let s0: schema::Stock = get(&e, &schema::stock_key(1, 42)).unwrap();
    let inp = NewOrderInput {
        w: 1,
        d: 3,
        c: 77,
        lines: lines(&[(42, 1, 7), (43, 1, 1), (44, 1, 10), (45, 1, 2), (46, 1, 3)]),
    };
    let out = new_order(&e, &inp).unwrap();
    let o = d0.next_o_id;
    assert!(out.committed && !out.rolled_back);
    assert_eq!(out.new_order, Some((1, 3, o)));
    let d1: schema::District = get(&e, &schema::district_key(1, 3)).unwrap();
    assert_eq!(d1.next_o_id, o + 1);
    let ord: schema::Order = get(&e, &schema::order_key(1, 3, o)).unwrap();
    assert_eq!(
        (ord.c_id, ord.ol_cnt, ord.carrier_id, ord.all_local),
        (77, 5, None, true)
    );
    let mut r = e.read().unwrap();
    assert!(r
        .get(table::NEW_ORDER, &schema::new_order_key(1, 3, o))
        .unwrap()
        .is_some());
    assert!(r
        .get(
            table::ORDER_BY_CUSTOMER,
            &schema::order_customer_key(1, 3, 77, o)
        )
        .unwrap()
        .is_some());
    drop(r);
    let item: schema::Item = get(&e, &schema::item_key(42)).unwrap();
    let ol: schema::OrderLine = get(&e, &schema::order_line_key(1, 3, o, 1)).unwrap();
    assert_eq!(ol.amount, 7 * item.price);
    assert_eq!(ol.dist_info, s0.dist[2]);
    let s1: schema::Stock = get(&e, &schema::stock_key(1, 42)).unwrap();
    let expect_q = if s0.quantity >= 17 {
        s0.quantity - 7
    } else {
        s0.quantity - 7 + 91
    };
    assert_eq!(
        (s1.quantity, s1.ytd, s1.order_cnt),
        (expect_q, s0.ytd + 7, s0.order_cnt + 1)
    );

    // Rollback: the last line's item is unused; everything else was executed, then undone.
    let bad = NewOrderInput {
        w: 1,
        d: 3,
        c: 78,
        lines: lines(&[(42, 1, 5), (common::TEST_ITEMS + 1, 1, 1)]),
    };
    let out = new_order(&e, &bad).unwrap();
    assert!(out.rolled_back && !out.committed && out.new_order.is_none());
    let d2: schema::District = get(&e, &schema::district_key(1, 3)).unwrap();
    assert_eq!(d2.next_o_id, o + 1, "D_NEXT_O_ID must be rolled back");
    assert!(get::<schema::Order>(&e, &schema::order_key(1, 3, o + 1)).is_none());
    assert_eq!(
        get::<schema::Stock>(&e, &schema::stock_key(1, 42)).unwrap(),
        s1
    );
    assert!(check(&e).unwrap().all_passed());
}

#[test]
fn payment_by_last_name_takes_the_middle_match_sorted_by_first_name() {
    let (_d, e) = common::loaded(1);
    // Customers 1..=1000 have last names 0..=999 in order; later ones are NURand'ed, so some
    // names occur several times. Find a name with at least 3 customers in district 2.
    let mut by_name: std::collections::BTreeMap<String, Vec<(String, u16)>> = Default::default();
    for c in 1..=schema::CUSTOMERS {
        let cu: schema::Customer = get(&e, &schema::customer_key(1, 2, c)).unwrap();
        by_name
            .entry(cu.last.clone())
            .or_default()
            .push((cu.first.clone(), c));
    }
    let (last, mut matches) = by_name.into_iter().find(|(_, v)| v.len() >= 3).unwrap();
    matches.sort();
    let want = matches[matches.len().div_ceil(2) - 1].1; // position ceil(n/2), 1-based
    let mut r = e.read().unwrap();
    assert_eq!(
        find_customer(&mut r, 1, 2, &CustomerSel::LastName(last.clone())).unwrap(),
        want
    );
    drop(r);

    let w0: schema::WarehouseYtd = get(&e, &schema::warehouse_key(1)).unwrap();
    let d0: schema::DistrictYtd = get(&e, &schema::district_key(1, 5)).unwrap();
    let static0 = (
        get::<schema::Warehouse>(&e, &schema::warehouse_key(1)).unwrap(),
        get::<schema::District>(&e, &schema::district_key(1, 5)).unwrap(),
    );
    let c0: schema::Customer = get(&e, &schema::customer_key(1, 2, want)).unwrap();
    let inp = PaymentInput {
        w: 1,
        d: 5,
        c_w: 1,
        c_d: 2,
        customer: CustomerSel::LastName(last),
        amount: 12_345,
        history_id: 1 << 63 | 99,
    };
    let out = payment(&e, &inp).unwrap();
    assert!(out.committed && out.by_name && !out.remote_payment);
    let w1: schema::WarehouseYtd = get(&e, &schema::warehouse_key(1)).unwrap();
    assert_eq!(w1.ytd, w0.ytd + 12_345);
    let d1: schema::DistrictYtd = get(&e, &schema::district_key(1, 5)).unwrap();
    assert_eq!(d1.ytd, d0.ytd + 12_345);
    // The warehouse and district rows themselves are not written (W_YTD and D_YTD are in their
    // own tables).
    assert_eq!(
        (
            get::<schema::Warehouse>(&e, &schema::warehouse_key(1)).unwrap(),
            get::<schema::District>(&e, &schema::district_key(1, 5)).unwrap(),
        ),
        static0
    );
    let c1: schema::Customer = get(&e, &schema::customer_key(1, 2, want)).unwrap();
    assert_eq!(c1.balance, c0.balance - 12_345);
    assert_eq!(c1.ytd_payment, c0.ytd_payment + 12_345);
    assert_eq!(c1.payment_cnt, c0.payment_cnt + 1);
    if c0.credit == "BC" {
        assert!(c1.data.starts_with(&format!("{want} 2 1 5 1 123.45 | ")));
        assert!(c1.data.len() <= 500);
    } else {
        assert_eq!(c1.data, c0.data);
    }
    let h: schema::History = get(&e, &schema::history_key(1, 5, 1 << 63 | 99)).unwrap();
    assert_eq!((h.c_id, h.c_d_id, h.c_w_id, h.amount), (want, 2, 1, 12_345));
    // The same HISTORY id twice is refused (and rolled back), never silently overwritten.
    assert!(payment(&e, &inp).is_err());
    assert_eq!(
        get::<schema::WarehouseYtd>(&e, &schema::warehouse_key(1))
            .unwrap()
            .ytd,
        w1.ytd
    );
    assert!(check(&e).unwrap().all_passed());
}

#[test]
fn delivery_delivers_the_oldest_order_of_all_ten_districts() {
    let (_d, e) = common::loaded(1);
    let out = delivery(&e, &DeliveryInput { w: 1, carrier: 4 }).unwrap();
    assert_eq!((out.delivered, out.skipped_districts), (10, 0));
    for d in 1..=schema::DISTRICTS {
        let o = schema::FIRST_NEW_ORDER;
        let mut r = e.read().unwrap();
        assert!(r
            .get(table::NEW_ORDER, &schema::new_order_key(1, d, o))
            .unwrap()
            .is_none());
        assert!(r
            .get(table::NEW_ORDER, &schema::new_order_key(1, d, o + 1))
            .unwrap()
            .is_some());
        drop(r);
        let ord: schema::Order = get(&e, &schema::order_key(1, d, o)).unwrap();
        assert_eq!(ord.carrier_id, Some(4));
        let mut sum = 0;
        for n in 1..=ord.ol_cnt {
            let ol: schema::OrderLine = get(&e, &schema::order_line_key(1, d, o, n)).unwrap();
            assert!(ol.delivery_d.is_some());
            sum += ol.amount;
        }
        let c: schema::Customer = get(&e, &schema::customer_key(1, d, ord.c_id)).unwrap();
        assert_eq!((c.balance, c.delivery_cnt), (-1000 + sum, 1));
    }
    let report = check(&e).unwrap();
    assert!(report.all_passed(), "{}", report.render());
}

#[test]
fn delivery_skips_districts_without_undelivered_orders() {
    let (_d, e) = common::loaded(1);
    // 900 undelivered orders per district: deliver them all, then once more.
    for _ in 0..(schema::ORDERS - schema::FIRST_NEW_ORDER + 1) {
        assert_eq!(
            delivery(&e, &DeliveryInput { w: 1, carrier: 1 })
                .unwrap()
                .delivered,
            10
        );
    }
    let out = delivery(&e, &DeliveryInput { w: 1, carrier: 1 }).unwrap();
    assert_eq!((out.delivered, out.skipped_districts), (0, 10));
    let report = check(&e).unwrap();
    assert!(report.all_passed(), "{}", report.render());
}

#[test]
fn order_status_reads_the_latest_order_and_stock_level_counts_low_stock() {
    let (_d, e) = common::loaded(1);
    // A new order for customer 5 becomes its latest.
    let inp = NewOrderInput {
        w: 1,
        d: 1,
        c: 5,
        lines: lines(&[
            (1, 1, 1),
            (2, 1, 1),
            (3, 1, 1),
            (4, 1, 1),
            (5, 1, 1),
            (6, 1, 1),
            (7, 1, 1),
        ]),
    };
    new_order(&e, &inp).unwrap();
    let out = order_status(
        &e,
        &OrderStatusInput {
            w: 1,
            d: 1,
            customer: CustomerSel::Id(5),
        },
    )
    .unwrap();
    assert_eq!(out.result_count, 7);
    // Stock-Level over the last 20 orders: compare with a direct count.
    let dist: schema::District = get(&e, &schema::district_key(1, 1)).unwrap();
    let mut items = std::collections::BTreeSet::new();
    for o in dist.next_o_id - 20..dist.next_o_id {
        let ord: schema::Order = get(&e, &schema::order_key(1, 1, o)).unwrap();
        for n in 1..=ord.ol_cnt {
            items.insert(
                get::<schema::OrderLine>(&e, &schema::order_line_key(1, 1, o, n))
                    .unwrap()
                    .i_id,
            );
        }
    }
    for threshold in [10, 15, 20, 101] {
        let low = items
            .iter()
            .filter(|&&i| {
                get::<schema::Stock>(&e, &schema::stock_key(1, i))
                    .unwrap()
                    .quantity
                    < threshold
            })
            .count() as u32;
        let out = stock_level(
            &e,
            &StockLevelInput {
                w: 1,
                d: 1,
                threshold,
            },
        )
        .unwrap();
        assert_eq!(out.result_count, low, "threshold {threshold}");
    }
    assert_eq!(
        stock_level(
            &e,
            &StockLevelInput {
                w: 1,
                d: 1,
                threshold: 101
            }
        )
        .unwrap()
        .result_count as usize,
        items.len()
    );
}

#[test]
fn every_transaction_type_executes_through_the_terminal() {
    let (_d, e) = common::loaded(1);
    let mut t = Terminal::new(0, 1, common::TEST_ITEMS, 3, 1);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let k = t.next_kind();
        let o = t.execute(&e, k).unwrap();
        assert!(o.committed || o.rolled_back);
        seen.insert(k);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), TxKind::ALL.to_vec());
    let report = check(&e).unwrap();
    assert!(report.all_passed(), "{}", report.render());
}
