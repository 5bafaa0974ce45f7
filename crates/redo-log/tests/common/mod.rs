//! Helpers shared by the integration tests.
#![allow(dead_code)]

use keel_page::{PageId, PageType};
use keel_redo_log::Record;

/// SplitMix64: a small deterministic generator.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A deterministic group tagged `tag`, with roughly `size` payload bytes.
pub fn group(tag: u64, size: usize) -> Vec<Record> {
    let mut rng = Rng(tag.wrapping_mul(7919).wrapping_add(size as u64));
    let mut recs = vec![Record::PageWrite {
        page_id: PageId(tag),
        offset: 32 + (tag % 100) as u32,
        bytes: rng.bytes(size).into(),
    }];
    match tag % 4 {
        0 => recs.push(Record::PageInit {
            page_id: PageId(tag + 1),
            page_type: PageType::BTREE_LEAF,
        }),
        1 => recs.push(Record::Logical {
            kind: tag as u16,
            bytes: rng.bytes(3),
        }),
        2 => recs.push(Record::PageFree {
            page_id: PageId(tag ^ 0xFF),
        }),
        _ => recs.push(Record::PageMove {
            page_id: PageId(tag),
            src: 40 + (tag % 64) as u32,
            dst: 44 + (tag % 64) as u32,
            len: (tag % 300) as u32,
        }),
    }
    recs
}

/// The log data files (`log.NNNNNNNNNN`) of a simulated file system, sorted.
pub fn log_files(fs: &keel_io::SimFs) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = fs
        .files()
        .unwrap()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("log.0"))
        .collect();
    v.sort();
    v
}
