//! A doublewrite slot's directory (docs/format.md, "Doublewrite area"): the batch sequence
//! number and, per image, its page id, LSN and a CRC-32C binding the image to them; encoding,
//! decoding with every field checked, and computing an image's CRC from its sealed page
//! checksum without reading the image twice (CRC combination with precomputed shift operators).
//!
//! Invariant: a directory decodes only if its own CRC matches and every count and offset is in
//! range; anything else is `None` / an error, never a panic (fuzz target and
//! `torn_slot_writes_are_never_restored`).

use super::*;

/// The CRC-32C binding an image to its batch, page id and LSN.
pub(crate) fn image_crc(seq: u64, page_id: PageId, lsn: Lsn, image: &[u8]) -> u32 {
    let mut pre = [0u8; 24];
    pre[0..8].copy_from_slice(&seq.to_le_bytes());
    pre[8..16].copy_from_slice(&page_id.0.to_le_bytes());
    pre[16..24].copy_from_slice(&lsn.0.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&pre), image)
}

/// [`image_crc`] of an image just sealed with `sealed_with`: under CRC-32C the page already
/// carries the CRC of its bytes `4..`, so the image CRC is combined from it instead of reading the
/// page again (equal to [`image_crc`]; tested).
pub(crate) fn image_crc_of_sealed(
    seq: u64,
    page_id: PageId,
    lsn: Lsn,
    image: &[u8],
    sealed_with: Checksum,
) -> u32 {
    if sealed_with != Checksum::Crc32c || image.len() < 4 {
        return image_crc(seq, page_id, lsn, image);
    }
    let mut pre = [0u8; 24];
    pre[0..8].copy_from_slice(&seq.to_le_bytes());
    pre[8..16].copy_from_slice(&page_id.0.to_le_bytes());
    pre[16..24].copy_from_slice(&lsn.0.to_le_bytes());
    let rest = get_u32(image, 0); // seal stored crc32c(image[4..]) here
    let head = crc32c::crc32c_append(crc32c::crc32c(&pre), &image[..4]);
    match shift_operator(image.len() - 4) {
        Some(op) => gf2_times(op, head) ^ rest,
        None => crc32c::crc32c_combine(head, rest, image.len() - 4),
    }
}

/// The GF(2) matrix (32 columns) that appends `n` zero bytes to a CRC-32C state: CRC(A ‖ B) =
/// op(CRC(A)) ⊕ CRC(B) for |B| = n. `crc32c::crc32c_combine` builds this operator anew on every
/// call (about 16 matrix squarings, ~6 µs — more than computing the CRC of a 16 KiB page); the
/// doublewrite needs it once per page size, so it is cached for every `n = 2^k − 4` (a page
/// minus its stored checksum). `None` for other lengths.
pub(super) fn shift_operator(n: usize) -> Option<&'static [u32; 32]> {
    use std::sync::OnceLock;
    static CACHE: [OnceLock<[u32; 32]>; 64] = [const { OnceLock::new() }; 64];
    let full = n.checked_add(4)?;
    if !full.is_power_of_two() {
        return None;
    }
    let slot = CACHE.get(full.trailing_zeros() as usize)?;
    Some(slot.get_or_init(|| {
        // Column i: the operator applied to the unit vector 1 << i (combine is linear in crc1).
        std::array::from_fn(|i| crc32c::crc32c_combine(1 << i, 0, n))
    }))
}

/// `op × v` over GF(2): the XOR of the columns of `op` selected by the bits of `v`.
pub(super) fn gf2_times(op: &[u32; 32], v: u32) -> u32 {
    let mut sum = 0;
    for (i, col) in op.iter().enumerate() {
        if v >> i & 1 == 1 {
            sum ^= col;
        }
    }
    sum
}

/// Fills a slot directory in `dir` (of `geometry.dir_len()` bytes) for `entries`, whose images
/// follow in `images` (`entries.len()` pages back to back, sealed with `sealed_with`).
pub(crate) fn encode_directory(
    dir: &mut [u8],
    slot: usize,
    seq: u64,
    page_size: usize,
    entries: &[(PageId, Lsn)],
    images: &[u8],
    sealed_with: Checksum,
) {
    dir.fill(0);
    dir[0..8].copy_from_slice(SLOT_MAGIC);
    put_u64(dir, 8, seq);
    put_u32(dir, 16, slot as u32);
    put_u32(dir, 20, entries.len() as u32);
    put_u32(dir, 24, page_size as u32);
    put_u32(dir, 28, dir.len() as u32);
    for (i, &(id, lsn)) in entries.iter().enumerate() {
        let e = DIR_FIXED + i * ENTRY_LEN;
        let image = &images[i * page_size..(i + 1) * page_size];
        put_u64(dir, e, id.0);
        put_u64(dir, e + 8, lsn.0);
        put_u32(
            dir,
            e + 16,
            image_crc_of_sealed(seq, id, lsn, image, sealed_with),
        );
    }
    let crc = directory_crc(dir, entries.len());
    put_u32(dir, DIR_CRC, crc);
}

pub(super) fn directory_crc(dir: &[u8], count: usize) -> u32 {
    let c = crc32c::crc32c(&dir[..DIR_CRC]);
    crc32c::crc32c_append(c, &dir[DIR_FIXED..DIR_FIXED + count * ENTRY_LEN])
}

/// One entry of a decoded directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirEntry {
    pub page_id: PageId,
    pub lsn: Lsn,
    pub crc: u32,
}

/// A decoded, checksum-valid slot directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Directory {
    pub seq: u64,
    pub entries: Vec<DirEntry>,
}

/// Decodes the directory at the start of slot `slot` (`Err` says why it is not valid).
pub(crate) fn decode_directory(
    dir: &[u8],
    g: &Geometry,
    slot: usize,
) -> std::result::Result<Directory, String> {
    if dir.len() < g.dir_len() {
        return Err("directory shorter than its geometry".into());
    }
    if keel_page::is_zero(&dir[..DIR_FIXED]) {
        return Err("never written".into());
    }
    if &dir[0..8] != SLOT_MAGIC {
        return Err("no slot magic".into());
    }
    let count = get_u32(dir, 20) as usize;
    if count == 0 || count > g.capacity {
        return Err(format!("{count} images in a slot of {}", g.capacity));
    }
    let stored = get_u32(dir, DIR_CRC);
    let computed = directory_crc(dir, count);
    if stored != computed {
        return Err(format!(
            "directory checksum mismatch: expected {computed:#010x}, found {stored:#010x}"
        ));
    }
    if get_u32(dir, 16) as usize != slot
        || get_u32(dir, 24) as usize != g.page_size
        || get_u32(dir, 28) as usize != g.dir_len()
    {
        return Err("directory belongs to another slot or geometry".into());
    }
    let entries = (0..count)
        .map(|i| {
            let e = DIR_FIXED + i * ENTRY_LEN;
            DirEntry {
                page_id: PageId(get_u64(dir, e)),
                lsn: Lsn(get_u64(dir, e + 8)),
                crc: get_u32(dir, e + 16),
            }
        })
        .collect();
    Ok(Directory {
        seq: get_u64(dir, 8),
        entries,
    })
}
