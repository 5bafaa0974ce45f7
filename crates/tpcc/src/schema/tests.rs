//! Unit tests of the schema: key order, row round trips, and decoders refusing bad bytes.

use super::*;

#[test]
fn keys_sort_like_tuples() {
    let tuples = [
        (1u16, 1u8, 5u32),
        (1, 1, 256),
        (1, 2, 1),
        (2, 1, 1),
        (256, 1, 1),
    ];
    let keys: Vec<Vec<u8>> = tuples.iter().map(|&(w, d, o)| order_key(w, d, o)).collect();
    for i in 1..keys.len() {
        assert!(
            keys[i - 1] < keys[i],
            "{:?} !< {:?}",
            tuples[i - 1],
            tuples[i]
        );
    }
    // Names: shorter names sort before longer ones with the same prefix; first names order
    // within one last name.
    let a = customer_name_key(1, 1, "BAR", "zz", 9);
    let b = customer_name_key(1, 1, "BARBAR", "aa", 1);
    assert!(a < b);
    let c = customer_name_key(1, 1, "BAR", "aa", 9);
    assert!(c < a);
    assert!(a.starts_with(&customer_name_prefix(1, 1, "BAR")));
    assert!(!b.starts_with(&customer_name_prefix(1, 1, "BAR")));
}

#[test]
fn prefix_end_bounds_the_prefix() {
    assert_eq!(prefix_end(&[1, 2]), vec![1, 3]);
    assert_eq!(prefix_end(&[1, 0xFF]), vec![2]);
    let p = district_key(7, 3);
    let e = prefix_end(&p);
    assert!(order_key(7, 3, u32::MAX) < e);
    assert!(order_key(7, 4, 0) >= e);
}

fn sample_customer() -> Customer {
    Customer {
        first: "abcdefgh".into(),
        middle: "OE".into(),
        last: "BARBARBAR".into(),
        address: Address {
            street_1: "s1xxxxxxxx".into(),
            street_2: "s2xxxxxxxx".into(),
            city: "cityxxxxxx".into(),
            state: "CA".into(),
            zip: "123411111".into(),
        },
        phone: "0123456789012345".into(),
        since: 1_700_000_000_000,
        credit: "GC".into(),
        credit_lim: 5_000_000,
        discount: 1234,
        balance: -1000,
        ytd_payment: 1000,
        payment_cnt: 1,
        delivery_cnt: 0,
        data: "x".repeat(400),
    }
}

#[test]
fn rows_round_trip() {
    let c = sample_customer();
    let k = customer_key(1, 2, 3);
    assert_eq!(Customer::decode(&k, &c.encode()).unwrap(), c);
    let ol = OrderLine {
        i_id: 99_999,
        supply_w_id: 2,
        delivery_d: None,
        quantity: 5,
        amount: 12_345,
        dist_info: "d".repeat(24),
    };
    assert_eq!(OrderLine::decode(&k, &ol.encode()).unwrap(), ol);
    let s = Stock {
        quantity: 55,
        dist: std::array::from_fn(|i| format!("{i:024}")),
        ytd: 0,
        order_cnt: 0,
        remote_cnt: 0,
        data: "ORIGINALxxxxxxxxxxxxxxxxxx".into(),
    };
    assert_eq!(Stock::decode(&k, &s.encode()).unwrap(), s);
}

#[test]
fn truncated_and_overlong_rows_are_corrupt_not_panics() {
    let c = sample_customer().encode();
    let k = customer_key(1, 2, 3);
    for cut in 0..c.len() {
        let e = Customer::decode(&k, &c[..cut]).unwrap_err();
        assert!(e.to_string().contains("customer"), "{e}");
    }
    let mut long = c.clone();
    long.push(0);
    let e = Customer::decode(&k, &long).unwrap_err().to_string();
    assert!(e.contains("trailing") && e.contains(&hex(&k)), "{e}");
    // A bad option tag.
    let o = Order {
        c_id: 1,
        entry_d: 0,
        carrier_id: None,
        ol_cnt: 5,
        all_local: true,
    };
    let mut b = o.encode();
    b[10] = 7;
    assert!(Order::decode(&k, &b).is_err());
}

#[test]
fn keys_decode_and_reject_wrong_lengths() {
    assert_eq!(
        decode_order_line_key(&order_line_key(3, 4, 70_000, 15)).unwrap(),
        (3, 4, 70_000, 15)
    );
    assert!(decode_order_line_key(&order_key(3, 4, 5)).is_err());
    assert_eq!(
        decode_history_key(&history_key(1, 2, u64::MAX)).unwrap(),
        (1, 2, u64::MAX)
    );
    assert_eq!(
        decode_customer_name_key(&customer_name_key(1, 1, "A", "B", 77)).unwrap(),
        77
    );
}

#[test]
fn partitioned_warehouse_and_district_rows_round_trip_and_refuse_the_old_layout() {
    let address = Address {
        street_1: "s1xxxxxxxx".into(),
        street_2: "s2xxxxxxxx".into(),
        city: "cityxxxxxx".into(),
        state: "CA".into(),
        zip: "123411111".into(),
    };
    let wk = warehouse_key(7);
    let w = Warehouse {
        name: "wname".into(),
        address: address.clone(),
        tax: 1234,
    };
    assert_eq!(Warehouse::decode(&wk, &w.encode()).unwrap(), w);
    let wy = WarehouseYtd { ytd: -5 };
    assert_eq!(WarehouseYtd::decode(&wk, &wy.encode()).unwrap(), wy);
    // Payment adds to the YTD rows with `add_i64`: they must be 8-byte little-endian integers.
    assert_eq!(wy.encode(), (-5i64).to_le_bytes());
    assert_eq!(DistrictYtd { ytd: 7 }.encode(), 7i64.to_le_bytes());
    assert_eq!(wy.encode().len(), 8);
    let dk = district_key(7, 3);
    let d = District {
        name: "dname".into(),
        address,
        tax: 99,
        next_o_id: 3001,
    };
    assert_eq!(District::decode(&dk, &d.encode()).unwrap(), d);
    let dy = DistrictYtd { ytd: 3_000_000 };
    assert_eq!(DistrictYtd::decode(&dk, &dy.encode()).unwrap(), dy);
    assert_eq!(
        (WarehouseYtd::TABLE, DistrictYtd::TABLE),
        (table::WAREHOUSE_YTD, table::DISTRICT_YTD)
    );
    assert!(
        table::ALL.contains(&table::WAREHOUSE_YTD) && table::ALL.contains(&table::DISTRICT_YTD)
    );

    // Format 1 rows (W_YTD after W_TAX; D_YTD between D_TAX and D_NEXT_O_ID) do not decode as
    // format 2 rows: the warehouse row has 8 trailing bytes, and the district row too.
    let mut old_w = w.encode();
    old_w.extend_from_slice(&30_000_000i64.to_le_bytes());
    let e = Warehouse::decode(&wk, &old_w).unwrap_err().to_string();
    assert!(e.contains("trailing"), "{e}");
    let mut old_d = w.encode(); // name, address, tax, as the district row starts
    old_d.truncate(old_d.len() - 4);
    old_d.extend_from_slice(&99i32.to_le_bytes());
    old_d.extend_from_slice(&3_000_000i64.to_le_bytes());
    old_d.extend_from_slice(&3001u32.to_le_bytes());
    let e = District::decode(&dk, &old_d).unwrap_err().to_string();
    assert!(e.contains("trailing"), "{e}");
    // A YTD row is exactly one i64.
    assert!(WarehouseYtd::decode(&wk, &[0; 7]).is_err());
    assert!(DistrictYtd::decode(&dk, &[0; 9]).is_err());
    assert_eq!(
        decode_district_ytd_key(&dk).unwrap(),
        decode_district_key(&dk).unwrap()
    );
    let e = decode_warehouse_ytd_key(&dk).unwrap_err().to_string();
    assert!(e.contains("warehouse_ytd"), "{e}");
}
