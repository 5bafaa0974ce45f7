//! [`FileSnapshot`]: what a crash of one file may draw from, and the check that a post-crash file
//! obeys the fault model (the oracle crash tests use).

use super::image::is_zero;
use std::collections::HashMap;
use std::path::PathBuf;

/// A write issued since its file's last successful sync (bytes a truncation or an O_DSYNC write
/// superseded are already cut out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWrite {
    /// File offset.
    pub offset: u64,
    /// The bytes.
    pub data: Vec<u8>,
    /// Issued by `write_atomic`: all-or-nothing at a crash.
    pub atomic: bool,
}

impl PendingWrite {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// One file just before a crash: its durable contents and everything pending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSnapshot {
    /// The file.
    pub path: PathBuf,
    /// Tearing granularity of the file system.
    pub sector_size: u32,
    /// Contents guaranteed to survive (what a crash that loses everything pending leaves).
    pub durable: Vec<u8>,
    /// Contents reads see now.
    pub current: Vec<u8>,
    /// Pending writes, in issue order.
    pub writes: Vec<PendingWrite>,
    /// Pending length changes (`set_len`, `allocate`), their target lengths in issue order.
    pub set_lens: Vec<u64>,
}

const BUCKET: u64 = 4096;

impl FileSnapshot {
    /// Checks that `post`, the file's contents after a crash, is something the fault model
    /// allows starting from this snapshot, and returns the first violation found:
    ///
    /// - every byte equals the durable byte, a byte of some pending write covering it, or zero
    ///   where the file had no durable byte (a hole, an extension, a truncated range): no byte is
    ///   invented;
    /// - a durable byte that no pending write or length change touches is still there (synced
    ///   data is kept);
    /// - an atomic write that no other pending operation overlaps is entirely new or entirely
    ///   old; so is each sector-sized piece of a non-atomic write that nothing else overlaps;
    /// - the length is the durable length, a pending `set_len` target, or the end of a piece of
    ///   a pending write whose last byte is there (a lost write does not extend the file).
    pub fn check_crash_outcome(&self, post: &[u8]) -> Result<(), String> {
        let path = self.path.display();
        let dl = self.durable.len() as u64;
        let plen = post.len() as u64;
        let sector = u64::from(self.sector_size.max(1));
        let min_set = self.set_lens.iter().copied().min();
        let zero_ok = |o: u64| o >= dl || min_set.is_some_and(|t| t <= o);
        // Bucket the writes for the per-byte lookups.
        let mut buckets: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, w) in self.writes.iter().enumerate() {
            if w.data.is_empty() {
                continue;
            }
            for b in w.offset / BUCKET..=(w.end() - 1) / BUCKET {
                buckets.entry(b).or_default().push(i);
            }
        }
        let covering = |o: u64| {
            buckets
                .get(&(o / BUCKET))
                .into_iter()
                .flatten()
                .copied()
                .filter(move |&i| self.writes[i].offset <= o && o < self.writes[i].end())
        };
        // Length.
        if min_set.is_none() && plen < dl {
            return Err(format!(
                "{path}: synced data lost: the file is {plen} bytes after the crash, {dl} were durable"
            ));
        }
        if plen != dl && !self.set_lens.contains(&plen) {
            let ok = plen > 0
                && covering(plen - 1).any(|i| {
                    let w = &self.writes[i];
                    let piece_end = ((plen - 1) / sector + 1) * sector;
                    piece_end.min(w.end()) == plen
                        && w.data[(plen - 1 - w.offset) as usize] == post[plen as usize - 1]
                });
            if !ok {
                return Err(format!(
                    "{path}: length {plen} after the crash is neither the durable length {dl}, a \
                     pending set_len target, nor the end of a surviving piece of a pending write"
                ));
            }
        }
        // Bytes, a block at a time: a block equal to the durable image, to zeros past it, or to
        // one pending write covering it needs no per-byte work.
        let mut block = 0u64;
        while block < plen {
            let end = (block + BUCKET).min(plen);
            let (a, b) = (block as usize, end as usize);
            let got = &post[a..b];
            let same = end <= dl && *got == self.durable[a..b];
            let zeros = block >= dl && is_zero(got);
            if !same && !zeros {
                let cands: Vec<usize> = buckets
                    .get(&(block / BUCKET))
                    .map(|v| {
                        v.iter()
                            .copied()
                            .filter(|&i| {
                                self.writes[i].offset < end && block < self.writes[i].end()
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let whole = cands.iter().any(|&i| {
                    let w = &self.writes[i];
                    w.offset <= block
                        && end <= w.end()
                        && *got == w.data[(block - w.offset) as usize..(end - w.offset) as usize]
                });
                if !whole {
                    for o in block..end {
                        self.check_byte(o, post[o as usize], dl, &cands, &zero_ok)?;
                    }
                }
            }
            block = end;
        }
        // All-or-nothing units: atomic writes, and sector pieces of other writes, when nothing
        // else pending overlaps them.
        for (i, w) in self.writes.iter().enumerate() {
            if w.data.is_empty() {
                continue;
            }
            let overlapped = self
                .writes
                .iter()
                .enumerate()
                .any(|(j, x)| j != i && x.offset < w.end() && w.offset < x.end())
                || self.set_lens.iter().any(|&t| t < w.end());
            if overlapped {
                continue;
            }
            let units: Vec<(u64, u64)> = if w.atomic {
                vec![(w.offset, w.end())]
            } else {
                let mut v = Vec::new();
                let mut a = w.offset;
                while a < w.end() {
                    let b = ((a / sector + 1) * sector).min(w.end());
                    v.push((a, b));
                    a = b;
                }
                v
            };
            for (a, b) in units {
                let (ua, ub) = (a as usize, b as usize);
                let new = &w.data[(a - w.offset) as usize..(b - w.offset) as usize];
                let all_new = b <= plen && post[ua..ub] == *new;
                // Old: the durable bytes, zeros past the durable length; past the post-crash
                // end only where nothing durable was.
                let all_old = {
                    let cut = plen.clamp(a, b) as usize;
                    let dcut = dl.clamp(a, cut as u64) as usize;
                    (dcut == ua || post[ua..dcut] == self.durable[ua..dcut])
                        && (cut == dcut || is_zero(&post[dcut..cut]))
                        && (cut == ub || cut as u64 >= dl)
                };
                if !all_new && !all_old {
                    let what = if w.atomic {
                        "atomic write"
                    } else {
                        "sector of a write"
                    };
                    return Err(format!(
                        "{path}: {what} at {a}..{b} is torn: neither all old nor all new bytes"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The byte rule for one byte `got` at `o`; `cands` holds (at least) the writes covering it.
    fn check_byte(
        &self,
        o: u64,
        got: u8,
        dl: u64,
        cands: &[usize],
        zero_ok: &impl Fn(u64) -> bool,
    ) -> Result<(), String> {
        let durable = (o < dl).then(|| self.durable[o as usize]);
        if durable == Some(got) || (got == 0 && zero_ok(o)) {
            return Ok(());
        }
        let mut touched = false;
        for &i in cands {
            let w = &self.writes[i];
            if w.offset <= o && o < w.end() {
                touched = true;
                if w.data[(o - w.offset) as usize] == got {
                    return Ok(());
                }
            }
        }
        let path = self.path.display();
        if !touched && !zero_ok(o) {
            return Err(format!(
                "{path}: synced byte at offset {o} changed from {:#04x} to {got:#04x} though no \
                 pending operation touched it",
                durable.unwrap_or(0)
            ));
        }
        Err(format!(
            "{path}: invented byte {got:#04x} at offset {o}: not the durable byte {durable:?}, \
             not from any pending write covering it, not a hole"
        ))
    }
}
