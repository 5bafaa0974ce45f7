//! The driver's run hygiene: an interrupt ends the run early with a summary and its files, the
//! open-loop `rate` paces arrivals, every run carries its costs and metadata, and interval lines
//! fit 120 columns. Each test breaks the property it guards where it can (a run without the
//! interrupt runs its full length; a bad rate is refused).

mod common;

use keel_tpcc::driver::{interval_line, run_workload, summary, write_run_files, RunOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn an_interrupt_ends_the_run_early_with_a_summary_and_files() {
    let (d, e) = common::loaded(1);
    let flag = Arc::new(AtomicBool::new(false));
    let o = RunOptions {
        terminals: 2,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(600),
        interval: Duration::from_secs(10),
        print: false,
        interrupt: Some(flag.clone()),
        ..RunOptions::default()
    };
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            flag.store(true, Ordering::SeqCst);
        })
    };
    let t = Instant::now();
    let r = run_workload(&e, &o).unwrap();
    setter.join().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "a 600 s run ended by the interrupt"
    );
    assert!(r.interrupted);
    assert!(
        r.done.iter().sum::<u64>() > 0,
        "the measured part until the interrupt is kept"
    );
    assert!(r.seconds > 0.5 && r.seconds < 60.0, "{}", r.seconds);
    assert!(
        r.intervals.iter().any(|i| !i.warmup),
        "the cut interval is reported"
    );
    assert!(summary(&r).contains("INTERRUPTED"));
    let out = d.path().join("out");
    write_run_files(&out, &r, serde_json::json!({})).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(json["interrupted"], true);

    // Without the interrupt the same flag-less run goes its full (short) length.
    let o = RunOptions {
        terminals: 1,
        warmup: Duration::ZERO,
        duration: Duration::from_millis(800),
        interval: Duration::from_millis(400),
        print: false,
        ..RunOptions::default()
    };
    let r = run_workload(&e, &o).unwrap();
    assert!(!r.interrupted);
    assert!(r.seconds >= 0.75, "{}", r.seconds);
}

#[test]
fn rate_paces_poisson_arrivals_and_bad_rates_are_refused() {
    let (_d, e) = common::loaded(1);
    let o = RunOptions {
        terminals: 2,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(2),
        interval: Duration::from_secs(1),
        print: false,
        rate: Some(100.0),
        ..RunOptions::default()
    };
    let r = run_workload(&e, &o).unwrap();
    let n: u64 = r.done.iter().sum();
    // 100/s for 2 s: 200 expected; a Poisson count stays within ±6 standard deviations (±85).
    // Closed loop, the memory engine does thousands per second.
    assert!(
        (115..=285).contains(&n),
        "{n} transactions at 100/s for 2 s"
    );
    assert_eq!(r.meta.rate_tps, Some(100.0));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let o = RunOptions {
            rate: Some(bad),
            print: false,
            ..RunOptions::default()
        };
        let err = run_workload(&e, &o).unwrap_err().to_string();
        assert!(err.contains("--rate"), "{err}");
    }
}

#[test]
fn every_run_carries_its_costs_and_metadata() {
    let (d, e) = common::loaded(1);
    let o = RunOptions {
        terminals: 2,
        warmup: Duration::ZERO,
        interval: Duration::from_millis(300),
        max_transactions: Some(400),
        print: false,
        seed: 99,
        device_dir: Some(d.path().to_path_buf()),
        ..RunOptions::default()
    };
    let r = run_workload(&e, &o).unwrap();
    let c = &r.costs;
    assert_eq!(c.transactions, r.done.iter().sum::<u64>());
    assert!(c.cpu_us_per_txn > 0.0, "{c:?}");
    assert!(c.cores_used > 0.0 && c.cores_used.is_finite(), "{c:?}");
    assert!(
        c.device.is_some() || c.device_missing.is_some(),
        "device traffic is measured or its absence explained: {c:?}"
    );
    if let Some(why) = &c.device_missing {
        println!("SKIPPED: device bytes not measurable here: {why}");
    }
    let m = &r.meta;
    assert_eq!(m.seed, 99);
    assert_eq!(m.terminals, 2);
    assert!(m.host.cpus >= 1);
    assert!(
        m.started_utc.ends_with('Z') && m.started_utc.len() == 20,
        "{}",
        m.started_utc
    );
    assert!(!m.version.is_empty() && !m.commit.is_empty());
    for k in 0..5 {
        let l = r.latency[k];
        assert!(l.p999_ms >= l.p99_ms && l.max_ms >= l.p999_ms, "{l:?}");
    }
    // Lines fit 120 columns, even with a long label and large figures.
    for rec in &r.intervals {
        let mut big = rec.clone();
        big.notpm = 9_999_999.0;
        big.tpm = 9_999_999.0;
        for l in big.latency.iter_mut() {
            l.p50_ms = 123_456.0;
            l.p99_ms = 123_456.0;
            l.p999_ms = 123_456.0;
        }
        big.costs.cpu_us_per_txn = 123_456.0;
        for label in ["", "doublewrite @ext4-journal checksum=legacy T=64 #3"] {
            let line = interval_line(label, &big);
            assert!(
                line.chars().count() <= 120,
                "{} columns: {line}",
                line.chars().count()
            );
        }
    }
}
