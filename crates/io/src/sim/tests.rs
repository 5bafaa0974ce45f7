//! Unit tests of SimFs. The `sabotage_*` tests switch off one guarantee each (a knob only unit
//! tests can reach) and show that the check guarding it — the same function the positive test
//! runs — fails.

use super::*;
use crate::{AlignedBuf, FileClass, FileSystem, IoError, OpenOptions};
use std::path::PathBuf;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn opts() -> OpenOptions {
    OpenOptions::new(FileClass::Data).create(true)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut g = SplitMix64::new(seed);
    (0..len).map(|_| (g.next_u64() % 255 + 1) as u8).collect()
}

type Make = dyn Fn(SimConfig) -> SimFs;

fn honest() -> Box<Make> {
    Box::new(SimFs::new)
}

fn broken(s: Sabotage) -> Box<Make> {
    Box::new(move |c| SimFs::sabotaged(c, s))
}

/// Invariant 1: data synced before a crash is there after it (plus unsynced noise around it).
fn check_synced_survives(make: &Make) -> std::result::Result<(), String> {
    for seed in 0..40 {
        let fs = make(SimConfig::seeded(seed));
        let f = fs.open(&p("/f"), &opts()).map_err(|e| e.to_string())?;
        let a = pattern(seed, 8192);
        f.write_all_at(&a, 0).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())?;
        f.write_all_at(&pattern(seed + 1000, 4096), 16384)
            .map_err(|e| e.to_string())?;
        let after = fs.crash();
        let got = after.contents(&p("/f")).map_err(|e| e.to_string())?;
        if got.len() < a.len() || got[..a.len()] != a[..] {
            return Err(format!("seed {seed}: synced bytes lost"));
        }
    }
    Ok(())
}

/// Invariant 2: an atomic write is all-or-nothing, even when every write is torn.
fn check_atomic_never_torn(make: &Make) -> std::result::Result<(), String> {
    let d = OpenOptions::new(FileClass::Data).create(true).direct(true);
    for seed in 0..40 {
        let fs = make(SimConfig::seeded(seed));
        let f = fs.open(&p("/f"), &d).map_err(|e| e.to_string())?;
        let old = AlignedBuf::from_slice(&pattern(seed, 16384));
        let new = AlignedBuf::from_slice(&pattern(seed + 7, 16384));
        f.write_all_at(&old, 16384).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())?;
        f.write_atomic(&new, 16384).map_err(|e| e.to_string())?;
        let policy = if seed.is_multiple_of(2) {
            CrashPolicy::tear_all()
        } else {
            CrashPolicy::random(1, 1, 8)
        };
        let got = fs
            .crash_with(policy)
            .contents(&p("/f"))
            .map_err(|e| e.to_string())?;
        let region = &got[16384..32768];
        if region != &old[..] && region != &new[..] {
            return Err(format!("seed {seed}: atomic write torn"));
        }
    }
    Ok(())
}

/// Invariant 3 (and 1, 2 via the oracle): random writes, syncs and length changes, then a crash;
/// the oracle must accept the result.
fn check_oracle_accepts(make: &Make) -> std::result::Result<(), String> {
    let d = OpenOptions::new(FileClass::Data).create(true).direct(true);
    for seed in 0..60u64 {
        let sector = if seed.is_multiple_of(2) { 512 } else { 4096 };
        let fs = make(SimConfig::seeded(seed).sector_size(sector));
        let f = fs.open(&p("/f"), &d).map_err(|e| e.to_string())?;
        let mut g = SplitMix64::new(seed);
        for i in 0..20 {
            let off = g.below(16) * 4096;
            let len = (1 + g.below(3) as usize) * 4096;
            let buf = AlignedBuf::from_slice(&pattern(seed * 100 + i, len));
            match g.below(10) {
                0 => f.sync_data().map_err(|e| e.to_string())?,
                1 => f.set_len(g.below(20) * 4096).map_err(|e| e.to_string())?,
                2 if len.is_power_of_two() && off.is_multiple_of(len as u64) => {
                    f.write_atomic(&buf, off).map_err(|e| e.to_string())?
                }
                _ => f.write_all_at(&buf, off).map_err(|e| e.to_string())?,
            }
        }
        let snap = fs.snapshot(&p("/f")).map_err(|e| e.to_string())?;
        let after = fs.crash();
        let got = after.contents(&p("/f")).map_err(|e| e.to_string())?;
        snap.check_crash_outcome(&got)
            .map_err(|e| format!("seed {seed}: {e}"))?;
    }
    Ok(())
}

/// Invariant 4: every use of an old handle or the old file system after a crash is `Crashed`.
fn check_old_handles_dead(make: &Make) -> std::result::Result<(), String> {
    let fs = make(SimConfig::seeded(3));
    let f = fs.open(&p("/f"), &opts()).map_err(|e| e.to_string())?;
    f.write_all_at(b"abc", 0).map_err(|e| e.to_string())?;
    let _after = fs.crash();
    let mut b = [0u8; 3];
    let results = [
        ("write", f.write_all_at(b"xyz", 0)),
        ("read", f.read_exact_at(&mut b, 0)),
        ("sync", f.sync_all()),
        ("set_len", f.set_len(0)),
        ("len", f.len().map(|_| ())),
        ("open", fs.open(&p("/f"), &opts()).map(|_| ())),
        ("exists", fs.exists(&p("/f")).map(|_| ())),
    ];
    for (what, r) in results {
        if !matches!(r, Err(IoError::Crashed { .. })) {
            return Err(format!(
                "{what} on an old handle returned {r:?}, not Crashed"
            ));
        }
    }
    Ok(())
}

/// Invariant 5: misaligned direct I/O is refused before any effect.
fn check_misaligned_refused(make: &Make) -> std::result::Result<(), String> {
    let fs = make(SimConfig::seeded(1));
    let d = OpenOptions::new(FileClass::Data).create(true).direct(true);
    let f = fs.open(&p("/f"), &d).map_err(|e| e.to_string())?;
    let buf = AlignedBuf::page(8192);
    for (off, range) in [(100u64, 0..4096), (0, 0..1000), (0, 1..4097)] {
        let r = f.write_all_at(&buf[range], off);
        if !matches!(r, Err(IoError::Misaligned { .. })) {
            return Err(format!("misaligned write returned {r:?}"));
        }
    }
    if f.len().map_err(|e| e.to_string())? != 0 {
        return Err("a refused write changed the file".into());
    }
    Ok(())
}

/// Invariant 6: writes a failed sync dropped stay lost after a later successful sync.
fn check_failed_sync_not_undone(make: &Make) -> std::result::Result<(), String> {
    let fs = make(SimConfig::seeded(5).failed_sync(Fates::LoseAll));
    let f = fs.open(&p("/f"), &opts()).map_err(|e| e.to_string())?;
    f.write_all_at(&[1u8; 4096], 0).map_err(|e| e.to_string())?;
    f.sync_data().map_err(|e| e.to_string())?;
    f.write_all_at(&[2u8; 4096], 0).map_err(|e| e.to_string())?;
    fs.inject(Fault::SyncFailsNth(1));
    if !matches!(f.sync_data(), Err(IoError::SyncFailed { .. })) {
        return Err("the injected sync failure did not surface".into());
    }
    f.sync_data().map_err(|e| e.to_string())?;
    let got = fs
        .crash_with(CrashPolicy::keep_all())
        .contents(&p("/f"))
        .map_err(|e| e.to_string())?;
    if got != vec![1u8; 4096] {
        return Err("a later sync made writes durable that a failed sync had dropped".into());
    }
    Ok(())
}

#[test]
fn synced_data_survives_crashes() {
    check_synced_survives(&*honest()).unwrap();
}

#[test]
fn sabotage_lose_synced_is_caught() {
    let s = Sabotage {
        lose_synced: true,
        ..Sabotage::default()
    };
    assert!(check_synced_survives(&*broken(s)).is_err());
    let e = check_oracle_accepts(&*broken(s)).unwrap_err();
    assert!(e.contains("synced") || e.contains("invented"), "{e}");
}

#[test]
fn atomic_writes_never_tear() {
    check_atomic_never_torn(&*honest()).unwrap();
}

#[test]
fn sabotage_tear_atomic_is_caught() {
    let s = Sabotage {
        tear_atomic: true,
        ..Sabotage::default()
    };
    assert!(check_atomic_never_torn(&*broken(s))
        .unwrap_err()
        .contains("torn"));
}

#[test]
fn oracle_accepts_honest_crashes() {
    check_oracle_accepts(&*honest()).unwrap();
}

#[test]
fn sabotage_invented_bytes_are_caught() {
    let s = Sabotage {
        invent_bytes: true,
        ..Sabotage::default()
    };
    let e = check_oracle_accepts(&*broken(s)).unwrap_err();
    assert!(e.contains("invented") || e.contains("torn"), "{e}");
}

#[test]
fn old_handles_are_dead_after_a_crash() {
    check_old_handles_dead(&*honest()).unwrap();
}

#[test]
fn sabotage_live_old_handles_are_caught() {
    let s = Sabotage {
        old_handles_live: true,
        ..Sabotage::default()
    };
    assert!(check_old_handles_dead(&*broken(s)).is_err());
}

#[test]
fn misaligned_direct_io_is_refused() {
    check_misaligned_refused(&*honest()).unwrap();
}

#[test]
fn sabotage_skipped_alignment_is_caught() {
    let s = Sabotage {
        skip_alignment: true,
        ..Sabotage::default()
    };
    assert!(check_misaligned_refused(&*broken(s)).is_err());
}

#[test]
fn failed_sync_is_not_undone_by_a_later_sync() {
    check_failed_sync_not_undone(&*honest()).unwrap();
}

#[test]
fn sabotage_failed_sync_keeping_pending_is_caught() {
    let s = Sabotage {
        failed_sync_keeps_pending: true,
        ..Sabotage::default()
    };
    assert!(check_failed_sync_not_undone(&*broken(s)).is_err());
}

#[test]
fn oracle_rejects_hand_made_violations() {
    let snap = FileSnapshot {
        path: p("/f"),
        sector_size: 512,
        durable: vec![1; 1024],
        current: vec![2; 2048],
        writes: vec![PendingWrite {
            offset: 1024,
            data: vec![2; 1024],
            atomic: true,
        }],
        set_lens: vec![],
    };
    assert!(snap.check_crash_outcome(&[1; 1024]).is_ok());
    assert!(snap
        .check_crash_outcome(&[&[1u8; 1024][..], &[2u8; 1024][..]].concat())
        .is_ok());
    // Shorter than the durable length: synced data lost.
    assert!(snap.check_crash_outcome(&[1; 1000]).is_err());
    // Half of the atomic write.
    let half = [&[1u8; 1024][..], &[2u8; 512][..]].concat();
    assert!(snap.check_crash_outcome(&half).is_err());
    // A byte nobody wrote.
    let mut bad = vec![1u8; 1024];
    bad[10] = 9;
    assert!(snap
        .check_crash_outcome(&bad)
        .unwrap_err()
        .contains("synced byte"));
    // Extension by a lost write: zeros where the write would be.
    let ext = [&[1u8; 1024][..], &[0u8; 1024][..]].concat();
    assert!(snap.check_crash_outcome(&ext).is_err());
}

#[test]
fn same_seed_same_crash_and_reads_do_not_disturb_it() {
    let run = |reads: bool| {
        let fs = SimFs::with_seed(42);
        let f = fs.open(&p("/f"), &opts()).unwrap();
        for i in 0..30u64 {
            f.write_all_at(&pattern(i, 3000), i * 1000).unwrap();
            if reads {
                let mut b = vec![0u8; 100];
                f.read_exact_at(&mut b, 0).unwrap();
            }
        }
        let after = fs.crash();
        (
            after.contents(&p("/f")).unwrap(),
            after.last_crash().cloned(),
        )
    };
    assert_eq!(run(false), run(true));
}

#[test]
fn zero_preallocation_costs_no_memory_and_crash_is_cheap() {
    let fs = SimFs::with_seed(9);
    let f = fs
        .open(&p("/log"), &OpenOptions::new(FileClass::Log).create(true))
        .unwrap();
    crate::preallocate(&*f, 64 << 20, crate::Preallocation::Zeroed).unwrap();
    assert_eq!(fs.allocated_bytes(&p("/log")).unwrap(), 0);
    f.write_all_at(&[7u8; 512], 1 << 20).unwrap();
    assert_eq!(fs.allocated_bytes(&p("/log")).unwrap(), 4096);
    let after = fs.crash_with(CrashPolicy::keep_all());
    assert_eq!(after.allocated_bytes(&p("/log")).unwrap(), 4096);
    assert_eq!(after.last_crash().unwrap().pending_bytes, 512);
}
