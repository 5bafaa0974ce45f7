//! The driver's measured mix, rollback, remote and by-name rates are within the spec's targets,
//! with a statistical tolerance (4 standard deviations of a binomial over the sample), over a few
//! thousand transactions; conditions 1–12 still hold afterwards.

mod common;

use keel_tpcc::check::check;
use keel_tpcc::driver::{run_workload, RunOptions};
use std::time::Duration;

fn within(name: &str, measured_pct: f64, target_pct: f64, n: u64) {
    let p = target_pct / 100.0;
    let sd = (p * (1.0 - p) / n as f64).sqrt() * 100.0;
    let tol = 4.0 * sd + 0.05;
    assert!(
        (measured_pct - target_pct).abs() <= tol,
        "{name}: measured {measured_pct:.2}% over {n}, target {target_pct}% ± {tol:.2}"
    );
}

fn opts(terminals: usize, per_terminal: u64) -> RunOptions {
    RunOptions {
        terminals,
        warmup: Duration::ZERO,
        interval: Duration::from_secs(1),
        max_transactions: Some(per_terminal),
        print: false,
        seed: 2024,
        ..RunOptions::default()
    }
}

#[test]
fn mix_rollback_and_by_name_rates_on_one_warehouse() {
    let (_d, e) = common::loaded(1);
    let r = run_workload(&e, &opts(1, 5000)).unwrap();
    let total: u64 = r.done.iter().sum();
    assert_eq!(total, 5000);
    // The deck gives the exact mix per 100 cards.
    let want = [45.0, 43.0, 4.0, 4.0, 4.0];
    for (got, want) in r.rates.mix_pct.iter().zip(want) {
        assert!((got - want).abs() < 0.01, "mix {:?}", r.rates.mix_pct);
    }
    within("New-Order rollback", r.rates.rollback_pct, 1.0, r.done[0]);
    within(
        "Payment by last name",
        r.rates.payment_by_name_pct,
        60.0,
        r.done[1],
    );
    within(
        "Order-Status by last name",
        r.rates.order_status_by_name_pct,
        60.0,
        r.done[2],
    );
    assert!(
        (9.5..=10.5).contains(&r.rates.avg_lines),
        "lines/order {}",
        r.rates.avg_lines
    );
    assert_eq!(
        r.rates.remote_lines_pct, 0.0,
        "one warehouse: no remote lines"
    );
    assert_eq!(r.rates.delivery_skipped_pct, 0.0);
    assert_eq!(r.new_orders_committed + r.rollbacks, r.done[0]);
    assert!(
        r.rollbacks > 0,
        "rolled-back New-Orders are counted separately"
    );
    let c = check(&e).unwrap();
    assert!(c.all_passed(), "{}", c.render());
}

#[test]
fn remote_rates_on_two_warehouses() {
    let (_d, e) = common::loaded(2);
    let r = run_workload(&e, &opts(2, 1500)).unwrap();
    let lines = (r.rates.avg_lines * r.done[0] as f64).round() as u64;
    within("remote order lines", r.rates.remote_lines_pct, 1.0, lines);
    within(
        "remote Payments",
        r.rates.remote_payments_pct,
        15.0,
        r.done[1],
    );
    let c = check(&e).unwrap();
    assert!(c.all_passed(), "{}", c.render());
}

#[test]
fn warmup_transactions_are_not_counted() {
    let (_d, e) = common::loaded(1);
    let o = RunOptions {
        terminals: 1,
        warmup: Duration::from_millis(600),
        duration: Duration::from_millis(600),
        interval: Duration::from_millis(300),
        max_transactions: None,
        print: false,
        ..RunOptions::default()
    };
    let r = run_workload(&e, &o).unwrap();
    let warm: u64 = r
        .intervals
        .iter()
        .filter(|i| i.warmup)
        .flat_map(|i| i.done)
        .sum();
    let measured: u64 = r
        .intervals
        .iter()
        .filter(|i| !i.warmup)
        .flat_map(|i| i.done)
        .sum();
    assert!(warm > 0, "transactions ran during the warm-up");
    assert_eq!(
        r.done.iter().sum::<u64>(),
        measured,
        "totals = measured intervals only"
    );
    assert!(r
        .intervals
        .iter()
        .filter(|i| !i.warmup)
        .all(|i| i.t_end_s > 0.0));
}
