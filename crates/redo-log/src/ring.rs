//! The log buffer: a ring of bytes indexed by LSN, split into segments that each have their own
//! lock, so appenders copying into different places never wait for each other and no global
//! lock is held during a copy.
//!
//! Invariant (kept by the callers in `log.rs`; `tests/log.rs: appender_waits_for_ring_space`
//! shows appenders waiting, `ring_overwrite_corrupts_the_log` breaks it on purpose): the
//! byte for LSN `x` is written only while `x < written + size`, i.e. after the byte that used the
//! same slot one lap earlier (`x - size`) has been written to the file; and the flusher reads
//! only LSNs in `[written, completed)`, which no appender writes any more.

use parking_lot::Mutex;

const SEGMENT: usize = 16 << 10;

/// The ring.
#[derive(Debug)]
pub(crate) struct Ring {
    segs: Vec<Mutex<Box<[u8]>>>,
    size: u64,
}

impl Ring {
    /// A ring of at least `bytes` bytes (rounded up to whole segments).
    pub fn new(bytes: usize) -> Ring {
        let n = bytes.div_ceil(SEGMENT).max(1);
        Ring {
            segs: (0..n)
                .map(|_| Mutex::new(vec![0u8; SEGMENT].into_boxed_slice()))
                .collect(),
            size: (n * SEGMENT) as u64,
        }
    }

    /// Bytes in the ring.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn pieces(&self, lsn: u64, len: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
        let mut done = 0usize;
        while done < len {
            let at = ((lsn + done as u64) % self.size) as usize;
            let seg = at / SEGMENT;
            let off = at % SEGMENT;
            let n = (SEGMENT - off).min(len - done);
            f(seg, off, done, n);
            done += n;
        }
    }

    /// Copies `data` to the ring positions of LSNs `lsn..lsn + data.len()`.
    pub fn write(&self, lsn: u64, data: &[u8]) {
        self.pieces(lsn, data.len(), |seg, off, done, n| {
            self.segs[seg].lock()[off..off + n].copy_from_slice(&data[done..done + n]);
        });
    }

    /// Copies the bytes of LSNs `lsn..lsn + out.len()` into `out`.
    pub fn read(&self, lsn: u64, out: &mut [u8]) {
        let len = out.len();
        self.pieces(lsn, len, |seg, off, done, n| {
            out[done..done + n].copy_from_slice(&self.segs[seg].lock()[off..off + n]);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_around() {
        let r = Ring::new(1000);
        assert_eq!(r.size(), SEGMENT as u64);
        let data: Vec<u8> = (0..100u8).collect();
        let at = r.size() - 30 + 7 * r.size();
        r.write(at, &data);
        let mut out = vec![0u8; 100];
        r.read(at, &mut out);
        assert_eq!(out, data);
        let mut head = vec![0u8; 70];
        r.read(0, &mut head);
        assert_eq!(&head[..], &data[30..]);
    }
}
