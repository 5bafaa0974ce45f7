//! Arbitrary bytes as one redo log block (checked against arbitrary expectations) and as one
//! record group: never a panic; what is accepted is well-formed, and a decoded group re-encodes,
//! plainly and compactly, to bytes that decode to the same records.
#![no_main]

use keel_redo_log::inspect::{
    check_block, decode_group, encode_group, encode_group_as, group_len_as, payload_size, Encoding,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let b = if data[0] & 1 == 0 { 512 } else { 4096 };
    let verify = data[0] & 2 == 0;
    let expected = u64::from_le_bytes(data[1..9].try_into().unwrap_or([0; 8]));
    let epoch = u32::from_le_bytes(data[9..13].try_into().unwrap_or([0; 4]));
    let salt = u32::from_le_bytes(data[13..17].try_into().unwrap_or([0; 4]));
    let rest = &data[17..];
    let mut block = vec![0u8; b];
    let n = rest.len().min(b);
    block[..n].copy_from_slice(&rest[..n]);
    if let Ok(h) = check_block(&block, salt, expected, epoch, verify) {
        assert!(h.used as usize <= payload_size(b));
        if let Some(fg) = h.first_group {
            assert!(fg < h.used);
        }
        if verify {
            assert_eq!(h.number, expected);
            assert_eq!(h.epoch, epoch);
        }
    }
    // A block of the wrong size is refused, not a panic.
    let _ = check_block(&block[..n], salt, expected, epoch, verify);
    if let Ok(records) = decode_group(rest) {
        // Re-encoded in either encoding, the records decode to themselves, in the bytes
        // computed, and the compact encoding is never the longer one.
        let mut lens = Vec::new();
        for enc in [Encoding::Plain, Encoding::Compact] {
            let mut again = Vec::new();
            let len = encode_group_as(&records, &mut again, enc);
            assert_eq!(len, Ok(again.len()));
            assert_eq!(again.len() as u64, group_len_as(&records, enc));
            assert_eq!(decode_group(&again).as_ref(), Ok(&records));
            lens.push(again.len());
        }
        assert!(lens[1] <= lens[0]);
        // However the input cut its runs and chose its forms, the encoder's choice (whole runs,
        // the shorter form each) is never longer.
        let mut compact = Vec::new();
        let _ = encode_group(&records, &mut compact);
        assert!(compact.len() <= rest.len());
    }
});
