//! Arbitrary log file images through the whole recovery scan: never a panic, and every group it
//! returns lies inside the scanned range, in LSN order, without overlaps.
//!
//! With bit 0 of the first byte set, every block is re-sealed (number, epoch and CRC made right)
//! so the fuzzer gets past the checksums and explores the stream: group framing, fillers,
//! restart blocks, incarnations, the first-group field and groups spanning blocks.
#![no_main]

use keel_redo_log::inspect::{block_crc, payload_size, scan_images, Geometry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let reseal = data[0] & 1 != 0;
    let b = if data[0] & 2 == 0 { 512usize } else { 4096 };
    let preallocated = data[0] & 4 == 0;
    let files = 1 + (data[1] % 3) as u32;
    let blocks_per_file = 1 + (data[2] % 16) as u64;
    let salt = u32::from_le_bytes([data[3], data[4], data[5], data[6]]);
    let p = payload_size(b) as u64;
    let start_block = (data[7] % 8) as u64;
    let start = start_block * p + (u16::from_le_bytes([data[8], data[9]]) as u64 % (p + 1));
    let checkpoint = start + data[10] as u64 * 16;
    let max_inc = data[11] as u32;
    let geo = Geometry {
        block: b,
        payload: b - 28,
        preallocated,
        blocks_per_file,
        files: if preallocated { files } else { 0 },
        salt,
    };
    let body = &data[16..];
    let nfiles = if preallocated {
        files as usize
    } else {
        1 + (data[12] % 4) as usize
    };
    let file_len = (blocks_per_file as usize) * b;
    let mut images: Vec<Vec<u8>> = Vec::new();
    let mut off = 0;
    for f in 0..nfiles {
        let want = if data[13] & (1 << f) != 0 {
            file_len / 2
        } else {
            file_len
        };
        let mut img = vec![0u8; want];
        let n = body.len().saturating_sub(off).min(want);
        img[..n].copy_from_slice(&body[off..off + n]);
        off += n;
        images.push(img);
    }
    if reseal {
        // Give each block the number, epoch and CRC of the lap `data[14]` says.
        let lap = if preallocated {
            blocks_per_file * files as u64
        } else {
            blocks_per_file
        };
        for (fi, img) in images.iter_mut().enumerate() {
            for (bi, blk) in img.chunks_exact_mut(b).enumerate() {
                let slot = fi as u64 * blocks_per_file + bi as u64;
                let n = if preallocated {
                    slot + lap * (data[14] as u64 % 3)
                } else {
                    slot
                };
                blk[0..8].copy_from_slice(&n.to_le_bytes());
                let epoch = (n / lap + 1) as u32;
                blk[8..12].copy_from_slice(&epoch.to_le_bytes());
                let crc = block_crc(salt, &blk[..b - 4]);
                blk[b - 4..].copy_from_slice(&crc.to_le_bytes());
            }
        }
    }
    let refs: Vec<&[u8]> = images.iter().map(|i| &i[..]).collect();
    if let Ok(s) = scan_images(geo, &refs, start, checkpoint, max_inc) {
        let mut prev = start;
        for g in &s.groups {
            assert!(g.start_lsn.0 >= prev, "groups overlap or go backwards");
            assert!(g.end_lsn.0 > g.start_lsn.0);
            assert!(g.end_lsn.0 > checkpoint);
            prev = g.end_lsn.0;
        }
        assert!(s.end >= prev);
    }
});
