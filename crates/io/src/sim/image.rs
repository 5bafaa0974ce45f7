//! [`Image`]: the bytes of one file, sparse, in copy-on-write chunks.
//!
//! A file in [`super::SimFs`] has two images, the latest state (what reads see) and the durable
//! one (what survives a crash). They share unchanged chunks through `Arc`s, so a sync or a crash
//! costs time proportional to the chunks written since the last sync, not to the file size.
//!
//! Invariant: every byte at or beyond `len` in an allocated chunk is zero, and an absent chunk
//! reads as zeros. So extending `len` never needs to touch memory.

use std::sync::Arc;

/// Chunk size of the sparse store.
pub(crate) const CHUNK: usize = 4096;

type Chunk = Arc<[u8; CHUNK]>;

/// The contents of a file: `len` bytes, stored in 4 KiB chunks, absent chunks are zeros.
#[derive(Clone, Default)]
pub(crate) struct Image {
    len: u64,
    chunks: Vec<Option<Chunk>>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Image({} bytes, {} chunks allocated)",
            self.len,
            self.chunks.iter().filter(|c| c.is_some()).count()
        )
    }
}

static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// Whether every byte of `buf` is zero (memcmp against a zero block: fast in debug builds too).
pub(crate) fn is_zero(buf: &[u8]) -> bool {
    buf.chunks(CHUNK).all(|c| c == &ZEROS[..c.len()])
}

fn chunk_of(offset: u64) -> usize {
    (offset / CHUNK as u64) as usize
}

fn chunks_for(len: u64) -> usize {
    len.div_ceil(CHUNK as u64) as usize
}

impl Image {
    /// Length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`; bytes past `len` read as zero.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let k = chunk_of(pos);
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(buf.len() - done);
            match self.chunks.get(k) {
                Some(Some(c)) => buf[done..done + n].copy_from_slice(&c[within..within + n]),
                _ => buf[done..done + n].fill(0),
            }
            done += n;
        }
        // Bytes past len are zero by the invariant, nothing to clear.
    }

    /// The whole contents.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len as usize];
        self.read(0, &mut v);
        v
    }

    /// Writes `data` at `offset`, extending `len` if needed. Writing zeros into an absent chunk
    /// allocates nothing.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let k = chunk_of(pos);
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(data.len() - done);
            let piece = &data[done..done + n];
            if self.chunks.len() <= k {
                if is_zero(piece) {
                    done += n;
                    continue;
                }
                self.chunks.resize(k + 1, None);
            }
            match &mut self.chunks[k] {
                Some(c) => {
                    if c[within..within + n] != *piece {
                        Arc::make_mut(c)[within..within + n].copy_from_slice(piece);
                    }
                }
                slot @ None => {
                    if !is_zero(piece) {
                        let mut c = Arc::new([0u8; CHUNK]);
                        Arc::make_mut(&mut c)[within..within + n].copy_from_slice(piece);
                        *slot = Some(c);
                    }
                }
            }
            done += n;
        }
        if end > self.len {
            self.len = end;
        }
    }

    /// Writes `len` zero bytes at `offset` (extending the file if needed).
    pub(crate) fn write_zeros(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            let k = chunk_of(pos);
            let within = (pos % CHUNK as u64) as usize;
            let n = ((CHUNK - within) as u64).min(end - pos) as usize;
            if let Some(Some(c)) = self.chunks.get_mut(k) {
                if !is_zero(&c[within..within + n]) {
                    Arc::make_mut(c)[within..within + n].fill(0);
                }
            }
            pos += n as u64;
        }
        if end > self.len {
            self.len = end;
        }
    }

    /// Truncates (zeroing the tail of the last chunk) or extends (with zeros) to `len`.
    pub(crate) fn set_len(&mut self, len: u64) {
        if len < self.len {
            let keep = chunks_for(len);
            self.chunks.truncate(keep);
            let within = (len % CHUNK as u64) as usize;
            if within != 0 {
                if let Some(Some(c)) = self.chunks.get_mut(keep - 1) {
                    if !is_zero(&c[within..]) {
                        Arc::make_mut(c)[within..].fill(0);
                    }
                }
            }
        }
        self.len = len;
    }

    /// Makes the bytes of `range` (clipped to whole chunks) of `self` equal to those of `other`
    /// by sharing `other`'s chunks. Only valid when the two images are known to differ only
    /// inside those chunks or when whole chunks should be taken over.
    pub(crate) fn share_chunks_from(&mut self, other: &Image, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let first = chunk_of(start);
        let last = chunk_of(end - 1);
        if self.chunks.len() <= last {
            self.chunks.resize(last + 1, None);
        }
        for k in first..=last {
            self.chunks[k] = other.chunks.get(k).cloned().flatten();
        }
    }

    /// Copies bytes `start..end` of `other` into `self`, extending `self` to `end` if needed
    /// (bytes past `other.len()` read as zeros).
    pub(crate) fn copy_range_from(&mut self, other: &Image, start: u64, end: u64) {
        let mut pos = start;
        let mut buf = [0u8; CHUNK];
        while pos < end {
            let n = ((CHUNK as u64) - pos % CHUNK as u64).min(end - pos) as usize;
            other.read(pos, &mut buf[..n]);
            self.write(pos, &buf[..n]);
            pos += n as u64;
        }
    }

    /// Sets `len` without touching memory: only valid when every byte at or past `len` is
    /// already zero (e.g. the chunks there were just shared from an image of that length).
    pub(crate) fn set_len_unchecked(&mut self, len: u64) {
        self.len = len;
        self.trim_chunks();
    }

    /// Drops trailing chunks past `len` (they must already be zero or absent).
    pub(crate) fn trim_chunks(&mut self) {
        let keep = chunks_for(self.len);
        if self.chunks.len() > keep {
            self.chunks.truncate(keep);
        }
    }

    /// Whether both images have the same length and bytes.
    pub(crate) fn same_as(&self, other: &Image) -> bool {
        if self.len != other.len {
            return false;
        }
        let n = self.chunks.len().max(other.chunks.len());
        (0..n).all(|k| {
            let a = self.chunks.get(k).and_then(|c| c.as_ref());
            let b = other.chunks.get(k).and_then(|c| c.as_ref());
            match (a, b) {
                (None, None) => true,
                (Some(x), Some(y)) => Arc::ptr_eq(x, y) || x[..] == y[..],
                (Some(x), None) | (None, Some(x)) => is_zero(&x[..]),
            }
        })
    }

    /// Bytes of memory held by chunks (shared chunks counted in each image).
    pub(crate) fn allocated_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| c.is_some()).count() as u64 * CHUNK as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_truncate_extend_keep_zero_tail() {
        let mut im = Image::default();
        im.write(5000, &[7u8; 5000]);
        assert_eq!(im.len(), 10000);
        let v = im.to_vec();
        assert!(v[..5000].iter().all(|&b| b == 0));
        assert!(v[5000..].iter().all(|&b| b == 7));
        im.set_len(6000);
        im.set_len(12000);
        let v = im.to_vec();
        assert!(v[5000..6000].iter().all(|&b| b == 7));
        assert!(
            v[6000..].iter().all(|&b| b == 0),
            "truncated bytes must not come back"
        );
    }

    #[test]
    fn zero_writes_allocate_nothing_and_sharing_is_copy_on_write() {
        let mut im = Image::default();
        im.write(0, &vec![0u8; 1 << 20]);
        assert_eq!(im.len(), 1 << 20);
        assert_eq!(im.allocated_bytes(), 0);
        im.write(100, b"abc");
        let snap = im.clone();
        im.write(100, b"xyz");
        let mut b = [0u8; 3];
        snap.read(100, &mut b);
        assert_eq!(&b, b"abc");
        im.read(100, &mut b);
        assert_eq!(&b, b"xyz");
        assert!(!im.same_as(&snap));
        let mut d = snap.clone();
        d.share_chunks_from(&im, 100, 103);
        assert!(d.same_as(&im));
    }

    #[test]
    fn copy_range_copies_only_the_range() {
        let mut a = Image::default();
        a.write(0, &[1u8; 100]);
        let mut b = Image::default();
        b.write(0, &[2u8; 50]);
        b.copy_range_from(&a, 10, 20);
        assert_eq!(b.len(), 50);
        let v = b.to_vec();
        assert_eq!(&v[8..22], &[2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2]);
        b.copy_range_from(&a, 90, 100);
        assert_eq!(b.len(), 100);
    }
}
