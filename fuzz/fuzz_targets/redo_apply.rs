//! Redo application at recovery never panics, whatever the records say: offsets and lengths
//! past the page, moves out of bounds, images of the wrong size, records for freed pages,
//! pages whose disk copy is damaged. `BufferPool::apply_redo` returns a report or an error, and
//! every page is readable (or an error) afterwards.
//!
//! Input: a little program. Each record is an opcode byte (record type and page id), then the
//! fields it needs, read from the input as it comes; a `G` opcode ends a group. The store
//! starts with four valid pages and one damaged page.
#![no_main]

use keel_buffer_pool::{BufferPool, MemStore, PoolConfig, Record, RecoveredGroup};
use keel_page::{seal, Checksum, Lsn, PageHeader, PageId, PageSize, PageType};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

const PS: usize = 4096;

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u32> {
        Some(u32::from(self.byte()?) | u32::from(self.byte()?) << 8)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        a.to_vec()
    }
}

fuzz_target!(|data: &[u8]| {
    let store = Arc::new(MemStore::new(PageSize::K4));
    for id in 1..=5u64 {
        let mut p = vec![0u8; PS];
        PageHeader::init(&mut p, PageId(id), PageType::RAW, Lsn(10 + id));
        p[100..108].copy_from_slice(&id.to_le_bytes());
        seal(&mut p, Checksum::Crc32c);
        if id == 5 {
            p[200] ^= 0x40;
        }
        store.put_raw(PageId(id), p);
    }
    let cfg = PoolConfig {
        page_size: PageSize::K4,
        // Room for every page the records can name (ids 0..9): recovery never has to evict.
        pool_bytes: 64 * PS,
        ..Default::default()
    };
    let Ok(pool) = BufferPool::new(cfg, store) else {
        return;
    };
    let mut input = Input(data);
    let mut groups = Vec::new();
    let mut records = Vec::new();
    let mut lsn = 100u64;
    while let Some(op) = input.byte() {
        let page_id = PageId(u64::from(op >> 4) % 9);
        let record = match op & 7 {
            0 => Record::PageInit {
                page_id,
                page_type: PageType(u16::from(input.byte().unwrap_or(0) % 8)),
            },
            1 => {
                let offset = input.u16().unwrap_or(0);
                let len = usize::from(input.byte().unwrap_or(0));
                Record::PageWrite {
                    page_id,
                    offset,
                    bytes: input.bytes(len).into(),
                }
            }
            2 => Record::PageMove {
                page_id,
                src: input.u16().unwrap_or(0),
                dst: input.u16().unwrap_or(0),
                len: input.u16().unwrap_or(0),
            },
            3 => {
                let mut image = vec![0u8; if op & 8 == 0 { PS } else { PS / 2 }];
                PageHeader::init(&mut image, page_id, PageType::RAW, Lsn(lsn));
                let fill = input.bytes(64);
                image[64..64 + fill.len()].copy_from_slice(&fill);
                Record::PageImage { page_id, image }
            }
            4 => Record::PageFree { page_id },
            5 => Record::Logical {
                kind: u16::from(input.byte().unwrap_or(0)),
                bytes: input.bytes(8),
            },
            6 => Record::PageCopy {
                page_id,
                from: PageId(u64::from(input.byte().unwrap_or(0)) % 9),
            },
            _ => {
                let records = std::mem::take(&mut records);
                let len = keel_redo_log::inspect::group_len(&records);
                groups.push(RecoveredGroup {
                    start_lsn: Lsn(lsn),
                    end_lsn: Lsn(lsn + len),
                    records,
                });
                lsn += len;
                continue;
            }
        };
        records.push(record);
    }
    if !records.is_empty() {
        let len = keel_redo_log::inspect::group_len(&records);
        groups.push(RecoveredGroup {
            start_lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + len),
            records,
        });
    }
    let checkpoint = Lsn(u64::from(data.first().copied().unwrap_or(0) & 0x7f));
    if pool.apply_redo(checkpoint, &groups).is_err() {
        return;
    }
    for id in 0..10 {
        let _ = pool.read(PageId(id)).map(|g| g.len());
    }
});
