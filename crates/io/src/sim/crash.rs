//! What a crash does to the writes since each file's last successful sync: [`CrashPolicy`],
//! [`CrashReport`], and the per-file algorithm.

use super::image::Image;
use super::rng::SplitMix64;
use super::state::{sectors_of, torn_mask, write_sectors, Data, FileState, Op};
use super::Sabotage;
use std::collections::BTreeMap;

/// How the pending writes of a crash (or a failed sync) fare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fates {
    /// Every pending write reaches the disk.
    KeepAll,
    /// No pending write reaches the disk.
    LoseAll,
    /// Every write that can tear (not atomic, touching at least two sectors) is torn; the others
    /// are kept or lost by a seeded coin.
    TearAll,
    /// Each write independently: kept, lost or torn with these relative weights (a write that
    /// cannot tear draws between kept and lost only; all zero means a fair coin).
    Random {
        /// Weight of "kept".
        keep: u32,
        /// Weight of "lost".
        lose: u32,
        /// Weight of "torn".
        tear: u32,
    },
}

/// What happens at a crash: the fate of each pending write and whether pending writes of a file
/// may reach the disk in another order than they were issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPolicy {
    /// Fate of each pending write (and length change).
    pub fates: Fates,
    /// Apply each file's surviving writes in a random order (between two length changes) instead
    /// of issue order, so an older write may end up on top of a newer one.
    pub reorder: bool,
}

impl CrashPolicy {
    /// Everything pending survives, in issue order.
    pub fn keep_all() -> CrashPolicy {
        CrashPolicy {
            fates: Fates::KeepAll,
            reorder: false,
        }
    }

    /// Nothing pending survives.
    pub fn lose_all() -> CrashPolicy {
        CrashPolicy {
            fates: Fates::LoseAll,
            reorder: false,
        }
    }

    /// Every tearable write is torn, in issue order.
    pub fn tear_all() -> CrashPolicy {
        CrashPolicy {
            fates: Fates::TearAll,
            reorder: false,
        }
    }

    /// Independent fates with these weights, reordered.
    pub fn random(keep: u32, lose: u32, tear: u32) -> CrashPolicy {
        CrashPolicy {
            fates: Fates::Random { keep, lose, tear },
            reorder: true,
        }
    }

    /// Sets `reorder`.
    pub fn reordering(mut self, yes: bool) -> CrashPolicy {
        self.reorder = yes;
        self
    }

    /// The policy [`super::SimFs::crash`] uses: weights 0..=3 each (not all zero) and reordering
    /// with probability 1/2, drawn from the crash's generator. Over many seeds this covers "all
    /// kept", "all lost", "all torn" and every mix.
    pub(crate) fn drawn(rng: &mut SplitMix64) -> CrashPolicy {
        let mut w = [
            rng.below(4) as u32,
            rng.below(4) as u32,
            rng.below(4) as u32,
        ];
        if w == [0, 0, 0] {
            w = [1, 1, 1];
        }
        CrashPolicy {
            fates: Fates::Random {
                keep: w[0],
                lose: w[1],
                tear: w[2],
            },
            reorder: rng.coin(),
        }
    }

    /// The fate of one operation (`can_tear`: a non-atomic write touching ≥ 2 sectors).
    pub(crate) fn draw(&self, rng: &mut SplitMix64, can_tear: bool) -> Fate {
        let (k, l, t) = match self.fates {
            Fates::KeepAll => (1, 0, 0),
            Fates::LoseAll => (0, 1, 0),
            Fates::TearAll => (0, 0, 1),
            Fates::Random { keep, lose, tear } => (keep as u64, lose as u64, tear as u64),
        };
        let t = if can_tear { t } else { 0 };
        if k + l + t == 0 {
            return if rng.coin() { Fate::Keep } else { Fate::Lose };
        }
        let r = rng.below(k + l + t);
        if r < k {
            Fate::Keep
        } else if r < k + l {
            Fate::Lose
        } else {
            Fate::Tear
        }
    }
}

/// The fate of one pending operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    Keep,
    Lose,
    Tear,
}

/// What a crash did, summed over all files, so tests can assert that faults really happened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Which crash of the original file system this was (1 for the first).
    pub generation: u64,
    /// The policy used (drawn from the seed by `crash()`).
    pub policy: Option<CrashPolicy>,
    /// Files that survived (have a durable name).
    pub files: u64,
    /// Files that had a live name but no durable one: gone (files only an open handle still
    /// reached are not counted).
    pub files_lost: u64,
    /// Pending writes (atomic ones included) kept whole.
    pub writes_kept: u64,
    /// Pending writes lost whole.
    pub writes_lost: u64,
    /// Pending writes torn: some sectors kept, others lost.
    pub writes_torn: u64,
    /// Sectors kept of torn writes.
    pub torn_sectors_kept: u64,
    /// Sectors lost of torn writes.
    pub torn_sectors_lost: u64,
    /// Of `writes_kept`, atomic writes.
    pub atomic_kept: u64,
    /// Of `writes_lost`, atomic writes.
    pub atomic_lost: u64,
    /// Pending length changes (`set_len`, `allocate`) that survived.
    pub set_len_kept: u64,
    /// Pending length changes lost.
    pub set_len_lost: u64,
    /// Surviving writes that reached the disk before a write issued earlier to the same file.
    pub reordered: u64,
    /// Surviving writes that landed on top of bytes of a later-issued surviving write: the older
    /// data won (only possible with reordering).
    pub older_on_top: u64,
    /// Bytes of pending writes, summed (what the crash had to decide about).
    pub pending_bytes: u64,
}

/// Which surviving write was applied last over each byte range, to count `older_on_top`.
#[derive(Default)]
struct TopMap {
    /// start -> (end, issue index); disjoint ranges.
    map: BTreeMap<u64, (u64, usize)>,
}

impl TopMap {
    /// Records `a..b` written by issue index `seq`; true if it covered bytes of a later write.
    fn cover(&mut self, a: u64, b: u64, seq: usize) -> bool {
        let mut newer = false;
        let mut hits = Vec::new();
        for (&s, &(e, q)) in self.map.range(..b).rev() {
            if e <= a {
                break;
            }
            hits.push((s, e, q));
        }
        for (s, e, q) in hits {
            if q > seq {
                newer = true;
            }
            self.map.remove(&s);
            if s < a {
                self.map.insert(s, (a, q));
            }
            if e > b {
                self.map.insert(b, (e, q));
            }
        }
        self.map.insert(a, (b, seq));
        newer
    }
}

/// Crashes one file: consumes its durable image and pending operations and returns the image
/// that is on disk afterwards.
pub(crate) fn crash_file(
    state: &mut FileState,
    policy: &CrashPolicy,
    rng: &mut SplitMix64,
    sector: u64,
    report: &mut CrashReport,
    sabotage: Sabotage,
) -> Image {
    let mut img = std::mem::take(&mut state.durable);
    let ops = state.take_pending_for_crash();
    state.current = Image::default();
    if sabotage.lose_synced {
        let n = img.len().min(sector);
        img.write_zeros(0, n);
    }
    let mut top = TopMap::default();
    let mut i = 0;
    while i < ops.len() {
        if let Op::SetLen { len, .. } = ops[i] {
            if policy.draw(rng, false) == Fate::Keep {
                img.set_len(len);
                report.set_len_kept += 1;
            } else {
                report.set_len_lost += 1;
            }
            i += 1;
            continue;
        }
        // A run of writes between two length changes.
        let mut j = i;
        while j < ops.len() && matches!(ops[j], Op::Write { .. }) {
            j += 1;
        }
        let mut plan: Vec<(usize, Fate)> = Vec::with_capacity(j - i);
        for (k, op) in ops.iter().enumerate().take(j).skip(i) {
            if let Op::Write {
                offset,
                data,
                atomic,
                ..
            } = op
            {
                report.pending_bytes += data.len() as u64;
                let n = sectors_of(*offset, data.len(), sector);
                let tearable = (!*atomic || sabotage.tear_atomic) && n >= 2;
                plan.push((k, policy.draw(rng, tearable)));
            }
        }
        if policy.reorder {
            for x in (1..plan.len()).rev() {
                let y = rng.below(x as u64 + 1) as usize;
                plan.swap(x, y);
            }
        }
        // Count surviving writes applied before an earlier-issued surviving write.
        let survivors: Vec<usize> = plan
            .iter()
            .filter(|(_, f)| *f != Fate::Lose)
            .map(|(k, _)| *k)
            .collect();
        let mut min_after = usize::MAX;
        for &k in survivors.iter().rev() {
            if min_after < k {
                report.reordered += 1;
            }
            min_after = min_after.min(k);
        }
        for (k, fate) in plan {
            let Op::Write {
                offset,
                data,
                atomic,
                ..
            } = &ops[k]
            else {
                continue;
            };
            let (offset, atomic) = (*offset, *atomic);
            let end = offset + data.len() as u64;
            match fate {
                Fate::Keep => {
                    data.write_part(&mut img, offset, 0, data.len());
                    report.writes_kept += 1;
                    report.atomic_kept += u64::from(atomic);
                    if top.cover(offset, end, k) {
                        report.older_on_top += 1;
                    }
                }
                Fate::Lose => {
                    report.writes_lost += 1;
                    report.atomic_lost += u64::from(atomic);
                    if sabotage.invent_bytes {
                        let b = (offset / sector + 1) * sector;
                        let n = (b.min(end) - offset) as usize;
                        Data::Bytes(vec![0xA5; n].into()).write_part(&mut img, offset, 0, n);
                    }
                }
                Fate::Tear => {
                    let n = sectors_of(offset, data.len(), sector);
                    let mask = torn_mask(rng, n);
                    let kept = write_sectors(&mut img, offset, data, sector, &mask);
                    report.writes_torn += 1;
                    report.torn_sectors_kept += kept as u64;
                    report.torn_sectors_lost += (n - kept) as u64;
                    let first = offset / sector;
                    let mut newer = false;
                    for (s, &keep) in mask.iter().enumerate() {
                        if keep {
                            let a = ((first + s as u64) * sector).max(offset);
                            let b = ((first + s as u64 + 1) * sector).min(end);
                            newer |= top.cover(a, b, k);
                        }
                    }
                    if newer {
                        report.older_on_top += 1;
                    }
                }
            }
        }
        i = j;
    }
    img.trim_chunks();
    img
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_map_detects_older_on_top() {
        let mut t = TopMap::default();
        assert!(!t.cover(0, 100, 5));
        assert!(!t.cover(100, 200, 1));
        assert!(t.cover(50, 60, 2), "issue 2 lands on bytes of issue 5");
        assert!(!t.cover(0, 10, 9));
        assert!(!t.cover(300, 400, 0));
        assert!(t.cover(0, 1000, 3), "covers 5 and 9");
    }

    #[test]
    fn policies_draw_what_they_say() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..100 {
            assert_eq!(CrashPolicy::keep_all().draw(&mut rng, true), Fate::Keep);
            assert_eq!(CrashPolicy::lose_all().draw(&mut rng, true), Fate::Lose);
            assert_eq!(CrashPolicy::tear_all().draw(&mut rng, true), Fate::Tear);
            assert_ne!(CrashPolicy::tear_all().draw(&mut rng, false), Fate::Tear);
            assert_ne!(
                CrashPolicy::random(1, 1, 1).draw(&mut rng, false),
                Fate::Tear
            );
        }
    }
}
