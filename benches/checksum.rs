//! Page checksum throughput: CRC-32C (hardware) vs legacy fold vs none, on 4 KiB and 16 KiB pages.
//!
//! Criterion reports throughput in bytes/s; the question is how much a slow checksum costs per page
//! (E3: atomic + fast checksum vs atomic + slow checksum).

#![allow(missing_docs)] // criterion_group! generates an undocumented pub fn

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use keel_page::{seal, verify, Checksum, Lsn, PageHeader, PageId, PageSize, PageType};
use std::hint::black_box;
use std::path::Path;

fn checksum(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum");
    for size in [PageSize::K4, PageSize::K16] {
        let mut page = vec![0u8; size.bytes()];
        for (i, b) in page.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        group.throughput(Throughput::Bytes(size.bytes() as u64));
        for algo in Checksum::ALL {
            group.bench_with_input(
                BenchmarkId::new(format!("{algo:?}"), size.bytes()),
                &page,
                |b, page| b.iter(|| black_box(algo.compute(black_box(page)))),
            );
        }
        // Seal + verify: what a page write and a page read really pay.
        for algo in Checksum::ALL {
            let mut p = page.clone();
            PageHeader::init(&mut p, PageId(1), PageType::RAW, Lsn(1));
            group.bench_function(
                BenchmarkId::new(format!("seal+verify/{algo:?}"), size.bytes()),
                |b| {
                    b.iter(|| {
                        seal(&mut p, algo);
                        black_box(verify(&p, PageId(1), algo, Path::new("bench")).is_ok())
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, checksum);
criterion_main!(benches);
