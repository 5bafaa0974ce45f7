//! Page versions for snapshot readers: multi-version concurrency at page granularity.
//!
//! Answers: what a reader at snapshot `S` sees of a page while writers change it, how long old
//! page images are kept, and what happens when they would take too much memory.
//!
//! A snapshot is the LSN of the newest published commit ([`Versions::snapshot`]). A write
//! transaction keeps a page's committed image in this store the first time it takes the page,
//! *before* it changes a byte (under the page's exclusive latch): a *pending* version, valid
//! for every snapshot while the transaction runs. It keeps it as a copy, or, when no snapshot
//! is registered as it takes the page, as the undo of its changes (invariant 5): a bulk load
//! with no reader then copies nothing. At commit (LSN `C`) the transaction
//! seals its versions (valid for snapshots `S < C`) and only then publishes `C` as the newest
//! snapshot; at abort it restores its pages and then discards them. A reader at `S` reading
//! page `P` uses the version of `P` with the smallest end above `S` (pending counts as
//! infinite); if there is none, the page as it is in the pool (or on disk) is the page at `S`.
//!
//! # Invariants (each tested below or in `tests/snapshots.rs`)
//!
//! 1. **Version before change**: a page's pending version is stored before the first change of
//!    the transaction, under the exclusive latch; a reader looks for versions while it holds
//!    the shared latch (or inside an optimistic read's validated window), so it either finds
//!    the version or reads the page before the change
//!    (`a_reader_never_sees_an_uncommitted_change`, which a knob that skips the copy breaks).
//! 2. **Seal before publish**: no snapshot at or above `C` exists while a version ending at
//!    `C` is still pending (`seal` precedes `publish`; `publishing_before_sealing_is_caught`).
//! 3. **Kept while needed**: a sealed version ending at `C` is dropped only when no snapshot
//!    below `C` is registered and `C` is published (a snapshot taken between the seal and the
//!    publish reads below `C`); the bound is computed and the versions dropped under the lock
//!    snapshots register under (`old_snapshots_keep_their_versions`,
//!    `a_sealed_version_waits_for_its_publish`).
//! 4. **Bounded**: past the memory budget, the oldest snapshots are revoked (their next read
//!    is [`PoolError::SnapshotTooOld`]) and their versions dropped; a revoked flag is set
//!    before any version it needed is dropped, and a reader checks it after its lookup (and
//!    after a failed read), so it never uses a newer page in place of a dropped version, nor
//!    answers with the read error of a page freed since (`the_budget_revokes_the_oldest`;
//!    keel's `tests/snapshots.rs`, `HeldScan`).
//! 5. **Undo versions are rebuilt while the page is the transaction's**: a version kept as
//!    undo ([`TxnUndo`], module `txn_undo`: the bytes each change overwrote) is the page in its frame with those
//!    bytes put back, which holds only while the transaction owns the page and has not yet
//!    stamped it. So a reader rebuilds it under the page's shared latch (the transaction records
//!    undo under the exclusive one) and keeps the copy as the version; and the commit, after
//!    sealing, either publishes in the same hold of the registry lock that finds no snapshot
//!    registered (none can then be below the commit, and the undo versions are dropped) or
//!    rebuilds every undo version before it publishes (`tests/snapshots.rs:
//!    undo_versions_are_rebuilt_for_registered_snapshots` and the seeded model, which the knob
//!    `publish_undo_versions` breaks; `tests/versions_shuttle.rs`).

// parking_lot's mutex and std's atomics, or shuttle's under `--cfg keel_shuttle` (module `sync`).
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::{PoolError, Result};
use keel_page::{Lsn, PageId};
use std::collections::{BTreeMap, HashMap, VecDeque};

mod txn_undo;
pub use txn_undo::TxnUndo;

const SHARDS: usize = 64;
/// The end of a pending version (its transaction has not committed).
const PENDING: u64 = u64::MAX;

/// One old image of a page.
#[derive(Debug)]
struct Version {
    /// Valid for snapshots below this LSN (`PENDING`: for every snapshot).
    until: u64,
    /// The write transaction that stored it.
    txn: u64,
    image: Arc<[u8]>,
}

/// What a reader found for a page: an image to read, or a transaction's undo to rebuild one
/// from the page's frame (under its shared latch: [`Versions::rebuild`]).
#[derive(Debug, Clone)]
pub(crate) enum Found {
    /// The page as the snapshot sees it.
    Image(Arc<[u8]>),
    /// Rebuild it from the frame with this transaction's undo of the page (its slot).
    Undo(Arc<TxnUndo>, u32),
}

/// Versions of the pages of one shard, by page id.
type Shard = Mutex<HashMap<u64, Vec<Version>, crate::page_table::BuildIdHash>>;

#[derive(Debug, Default)]
struct Registry {
    /// The newest published commit LSN: new snapshots read at it.
    latest: u64,
    next_id: u64,
    /// Registered snapshots by (LSN, id), with their revoked flags.
    active: BTreeMap<(u64, u64), Arc<AtomicBool>>,
}

/// Counters of the version store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VersionCounts {
    /// Page versions kept now.
    pub kept: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Snapshots registered now.
    pub snapshots: u64,
    /// Snapshots revoked because the versions they needed passed the budget.
    pub refused: u64,
    /// Page images copied into the store (every first change of a page in a transaction).
    pub copied: u64,
}

/// The page versions and the registered snapshots of one pool.
#[derive(Debug)]
pub struct Versions {
    shards: Box<[Shard]>,
    /// Versions in `shards` (0: a reader skips the lookup).
    count: AtomicUsize,
    bytes: AtomicU64,
    reg: Mutex<Registry>,
    /// Sealed versions by end LSN (seals happen in commit order, so this is sorted).
    sealed: Mutex<VecDeque<(u64, u64)>>,
    /// Images of dropped versions that nothing else holds, kept for the next copies (one
    /// allocation of a page per copy otherwise: most of a transaction's allocator time).
    spare: Mutex<Vec<Arc<[u8]>>>,
    /// A finished transaction's undo, emptied, for the next one (its buffers kept).
    spare_undo: Mutex<Option<Arc<TxnUndo>>>,
    /// Transactions keeping pages as undo (at most one per writer), and how many.
    lazy: Mutex<Vec<Arc<TxnUndo>>>,
    lazy_count: AtomicUsize,
    budget: u64,
    refused: AtomicU64,
    copied: AtomicU64,
    /// Registered snapshots (kept with `reg.active`, read without its lock): with none, a write
    /// transaction keeps undo instead of copying the pages it takes.
    registered: AtomicUsize,
    /// The fork generation the store was made in: a snapshot dropped in a forked child leaves
    /// the registry alone (its lock may be held for good by a thread of the parent).
    born: u64,
}

/// A registered snapshot: reads through it see the committed state at [`lsn`](Self::lsn).
/// Dropping it lets the versions it kept go.
#[derive(Debug)]
pub struct Snapshot {
    versions: Arc<Versions>,
    lsn: u64,
    id: u64,
    revoked: Arc<AtomicBool>,
}

impl Versions {
    /// An empty store keeping at most about `budget` bytes of versions for old snapshots.
    pub fn new(budget: u64) -> Versions {
        Versions {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            count: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            reg: Mutex::new(Registry::default()),
            sealed: Mutex::new(VecDeque::new()),
            spare: Mutex::new(Vec::new()),
            spare_undo: Mutex::new(None),
            lazy: Mutex::new(Vec::new()),
            lazy_count: AtomicUsize::new(0),
            budget,
            refused: AtomicU64::new(0),
            copied: AtomicU64::new(0),
            registered: AtomicUsize::new(0),
            born: keel_io::os::fork::generation(),
        }
    }

    fn shard(&self, id: PageId) -> &Shard {
        // The page table's shard function (top bits of a multiply): the map within a shard
        // hashes with the low bits, which must not be the same for every id of the shard.
        &self.shards[crate::page_table::shard_of(id.0) % SHARDS]
    }

    /// Registers a snapshot of the newest published commit.
    pub fn snapshot(self: &Arc<Self>) -> Snapshot {
        let mut reg = self.reg.lock();
        let id = reg.next_id;
        reg.next_id += 1;
        let lsn = reg.latest;
        let revoked = Arc::new(AtomicBool::new(false));
        reg.active.insert((lsn, id), revoked.clone());
        self.registered.store(reg.active.len(), Ordering::SeqCst);
        Snapshot {
            versions: self.clone(),
            lsn,
            id,
            revoked,
        }
    }

    /// Whether any snapshot is registered now (a hint: one may register right after).
    pub(crate) fn any_registered(&self) -> bool {
        self.registered.load(Ordering::SeqCst) > 0
    }

    /// Whether a registered snapshot is older than the newest published commit (such a
    /// snapshot may read pages that commits since freed).
    pub fn has_old_snapshots(&self) -> bool {
        let reg = self.reg.lock();
        reg.active
            .keys()
            .next()
            .is_some_and(|&(s, _)| s < reg.latest)
    }

    /// The newest published commit LSN.
    pub fn latest(&self) -> Lsn {
        Lsn(self.reg.lock().latest)
    }

    /// [`add_pending_image`](Self::add_pending_image) of a copy of `image` (for the tests,
    /// which drive the store without a page transaction).
    #[cfg(any(test, keel_shuttle))]
    pub(crate) fn add_pending(&self, id: PageId, txn: u64, image: &[u8]) -> Arc<[u8]> {
        let image = self.copy_of(image);
        self.add_pending_image(id, txn, image)
    }

    /// A shared copy of `bytes`, in a recycled buffer when one of that size is spare.
    pub(crate) fn copy_of(&self, bytes: &[u8]) -> Arc<[u8]> {
        let spare = self.spare.lock().pop();
        match spare {
            Some(mut a) if a.len() == bytes.len() => match Arc::get_mut(&mut a) {
                Some(buf) => {
                    buf.copy_from_slice(bytes);
                    a
                }
                None => Arc::from(bytes),
            },
            _ => Arc::from(bytes),
        }
    }

    /// Stores `image` (a copy of page `id`'s committed state, never changed afterwards) as
    /// transaction `txn`'s pending version (call it before the transaction's first change of
    /// the page, holding the page's exclusive latch). Returns it: the transaction restores the
    /// page from it if it aborts.
    pub(crate) fn add_pending_image(&self, id: PageId, txn: u64, image: Arc<[u8]>) -> Arc<[u8]> {
        let len = image.len() as u64;
        self.shard(id)
            .lock()
            .entry(id.0)
            .or_default()
            .push(Version {
                until: PENDING,
                txn,
                image: image.clone(),
            });
        self.count.fetch_add(1, Ordering::AcqRel);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        self.copied.fetch_add(1, Ordering::Relaxed);
        image
    }

    /// Registers a transaction as one that keeps pages as undo (invariant 5), before its
    /// first such page. Each page is then added with [`TxnUndo::add_page`] under its exclusive
    /// latch, before its first change, and every change records what undoes it there, under
    /// the same latch.
    pub(crate) fn begin_undo(&self) -> Arc<TxnUndo> {
        let t = match self.spare_undo.lock().take() {
            Some(t) => {
                t.reset(PENDING);
                t
            }
            None => Arc::new(TxnUndo::new(PENDING)),
        };
        let mut lazy = self.lazy.lock();
        lazy.push(t.clone());
        self.lazy_count.store(lazy.len(), Ordering::SeqCst);
        t
    }

    /// Marks transaction `t`'s undo versions valid for snapshots below `commit` only (its
    /// [`seal`](Self::seal)).
    pub(crate) fn seal_undo(&self, t: &TxnUndo, commit: Lsn) {
        t.until.store(commit.0, Ordering::SeqCst);
    }

    /// Unregisters transaction `t` (after its publish, or after its rollback restored its
    /// pages) and keeps its buffers for the next one if no reader still holds it.
    pub(crate) fn end_undo(&self, t: Arc<TxnUndo>) {
        {
            let mut lazy = self.lazy.lock();
            lazy.retain(|x| !Arc::ptr_eq(x, &t));
            self.lazy_count.store(lazy.len(), Ordering::SeqCst);
        }
        if Arc::strong_count(&t) == 1 {
            *self.spare_undo.lock() = Some(t);
        }
    }

    /// The page of `slot` before transaction `t`'s changes: `frame` (the page's bytes, read
    /// under its shared latch, or by its owner) with them undone. Kept with the undo, so it is
    /// rebuilt once: later readers and the commit use the copy.
    pub(crate) fn rebuild(&self, frame: &[u8], t: &TxnUndo, slot: u32) -> Arc<[u8]> {
        if let Some(img) = t.rebuilt(slot) {
            return img;
        }
        t.rebuild_into(slot, self.copy_of(frame))
    }

    /// Publishes `commit` (after [`seal`](Self::seal)) if no snapshot is registered, in one
    /// hold of the registry lock, and returns true: then no snapshot below `commit` can exist
    /// any more, and the versions it sealed (undo ones included) are dropped. Returns false,
    /// publishing nothing, if one is registered: the caller rebuilds its undo versions
    /// ([`rebuild`](Self::rebuild)) and then publishes (invariant 5).
    pub(crate) fn publish_if_unregistered(&self, commit: Lsn) -> bool {
        self.publish_unless_registered(commit, true)
    }

    /// [`publish`](Self::publish) and [`publish_if_unregistered`](Self::publish_if_unregistered):
    /// publishes `commit` and collects, unless `only_if_unregistered` and a snapshot is
    /// registered (then returns false, publishing nothing).
    fn publish_unless_registered(&self, commit: Lsn, only_if_unregistered: bool) -> bool {
        {
            let mut reg = self.reg.lock();
            if only_if_unregistered && !reg.active.is_empty() {
                return false;
            }
            debug_assert!(commit.0 >= reg.latest, "commits publish in LSN order");
            reg.latest = reg.latest.max(commit.0);
        }
        self.collect();
        true
    }

    /// Seals transaction `txn`'s pending versions of `pages` at its commit LSN `commit`.
    pub(crate) fn seal(&self, txn: u64, pages: &[PageId], commit: Lsn) {
        let mut sealed = Vec::with_capacity(pages.len());
        for &id in pages {
            let mut shard = self.shard(id).lock();
            if let Some(vs) = shard.get_mut(&id.0) {
                for v in vs.iter_mut().filter(|v| v.until == PENDING && v.txn == txn) {
                    v.until = commit.0;
                    sealed.push((commit.0, id.0));
                }
            }
        }
        self.sealed.lock().extend(sealed);
    }

    /// Publishes `commit` as the newest snapshot (after [`seal`](Self::seal)) and drops the
    /// versions no snapshot needs any more.
    pub(crate) fn publish(&self, commit: Lsn) {
        self.publish_unless_registered(commit, false);
    }

    /// Drops transaction `txn`'s pending versions of `pages` (abort, after its pages were
    /// restored).
    pub(crate) fn discard(&self, txn: u64, pages: &[PageId]) {
        for &id in pages {
            let mut shard = self.shard(id).lock();
            if let Some(vs) = shard.get_mut(&id.0) {
                let before = vs.len();
                let mut freed = 0u64;
                let mut dropped = Vec::new();
                let mut i = 0;
                while i < vs.len() {
                    if vs[i].until == PENDING && vs[i].txn == txn {
                        let v = vs.swap_remove(i);
                        freed += v.image.len() as u64;
                        dropped.push(v.image);
                    } else {
                        i += 1;
                    }
                }
                let gone = before - vs.len();
                if vs.is_empty() {
                    shard.remove(&id.0);
                }
                self.count.fetch_sub(gone, Ordering::AcqRel);
                self.bytes.fetch_sub(freed, Ordering::Relaxed);
                drop(shard);
                dropped.into_iter().for_each(|img| self.recycle(img));
            }
        }
    }

    /// The image of page `id` a reader at snapshot `lsn` must use instead of the current one,
    /// if any.
    #[inline]
    pub(crate) fn find(&self, id: PageId, lsn: u64) -> Option<Found> {
        let mut best: Option<(u64, Found)> = None;
        if self.count.load(Ordering::Acquire) > 0 {
            let shard = self.shard(id).lock();
            best = shard.get(&id.0).and_then(|vs| {
                vs.iter()
                    .filter(|v| v.until > lsn)
                    .min_by_key(|v| v.until)
                    .map(|v| (v.until, Found::Image(v.image.clone())))
            });
        }
        if self.lazy_count.load(Ordering::SeqCst) > 0 {
            for t in self.lazy.lock().iter() {
                let until = t.until.load(Ordering::SeqCst);
                // A stored version ending no later wins (same image, or an older one needed).
                if until <= lsn || best.as_ref().is_some_and(|(b, _)| *b <= until) {
                    continue;
                }
                if let Some(slot) = t.slot_of(id.0) {
                    let found = match t.rebuilt(slot) {
                        Some(img) => Found::Image(img),
                        None => Found::Undo(t.clone(), slot),
                    };
                    best = Some((until, found));
                }
            }
        }
        best.map(|(_, f)| f)
    }

    /// Drops sealed versions that no registered snapshot needs; past the budget, revokes the
    /// oldest snapshots first.
    fn collect(&self) {
        loop {
            {
                // Under the registry lock, so no snapshot registers between computing the
                // bound and dropping; and never past the newest published commit, since a
                // snapshot registered later reads at it (a version sealed but not yet
                // published serves those).
                let reg = self.reg.lock();
                let oldest = reg.active.keys().next().map_or(reg.latest, |&(s, _)| s);
                self.drop_sealed_up_to(oldest.min(reg.latest));
            }
            if self.bytes.load(Ordering::Relaxed) <= self.budget {
                return;
            }
            // Over budget: revoke every snapshot at the oldest LSN, then collect again.
            let mut reg = self.reg.lock();
            let Some(&(s, _)) = reg.active.keys().next() else {
                return;
            };
            let newest = reg.latest;
            if s >= newest {
                // Only current snapshots remain: what is kept is pending, needed by all.
                return;
            }
            while let Some(e) = reg.active.first_entry() {
                if e.key().0 != s {
                    break;
                }
                // Set before any version it needs is dropped (invariant 4).
                e.get().store(true, Ordering::SeqCst);
                e.remove();
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            self.registered.store(reg.active.len(), Ordering::SeqCst);
        }
    }

    /// Keeps a dropped version's image for the next copy if nothing else holds it (a reader may
    /// still hold a clone) and the spares are few.
    fn recycle(&self, mut image: Arc<[u8]>) {
        const SPARES: usize = 64;
        if Arc::get_mut(&mut image).is_some() {
            let mut spare = self.spare.lock();
            if spare.len() < SPARES {
                spare.push(image);
            }
        }
    }

    /// Drops sealed versions ending at or below `bound` (the caller holds the registry lock).
    fn drop_sealed_up_to(&self, bound: u64) {
        let mut sealed = self.sealed.lock();
        while let Some(&(until, page)) = sealed.front() {
            if until > bound {
                break;
            }
            sealed.pop_front();
            let mut shard = self.shard(PageId(page)).lock();
            if let Some(vs) = shard.get_mut(&page) {
                let mut dropped = None;
                if let Some(i) = vs.iter().position(|v| v.until == until) {
                    let v = vs.swap_remove(i);
                    self.count.fetch_sub(1, Ordering::AcqRel);
                    self.bytes
                        .fetch_sub(v.image.len() as u64, Ordering::Relaxed);
                    dropped = Some(v.image);
                }
                if vs.is_empty() {
                    shard.remove(&page);
                }
                drop(shard);
                if let Some(img) = dropped {
                    self.recycle(img);
                }
            }
        }
    }

    /// The store's counters now.
    pub fn counts(&self) -> VersionCounts {
        VersionCounts {
            kept: self.count.load(Ordering::Relaxed) as u64,
            bytes: self.bytes.load(Ordering::Relaxed),
            snapshots: self.reg.lock().active.len() as u64,
            refused: self.refused.load(Ordering::Relaxed),
            copied: self.copied.load(Ordering::Relaxed),
        }
    }
}

impl Snapshot {
    /// The commit LSN this snapshot reads at.
    pub fn lsn(&self) -> Lsn {
        Lsn(self.lsn)
    }

    /// [`PoolError::SnapshotTooOld`] if the snapshot was revoked (call it after a lookup:
    /// invariant 4).
    ///
    /// # Errors
    ///
    /// [`PoolError::SnapshotTooOld`] naming the snapshot's LSN and the budget.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.revoked.load(Ordering::SeqCst) {
            return Err(PoolError::SnapshotTooOld {
                lsn: Lsn(self.lsn),
                budget: self.versions.budget,
            });
        }
        Ok(())
    }

    /// The version of page `id` this snapshot must read instead of the current page, if any.
    #[inline]
    pub(crate) fn find(&self, id: PageId) -> Option<Found> {
        self.versions.find(id, self.lsn)
    }

    /// [`find`](Self::find), for a caller that cannot rebuild from the frame: an image if the
    /// snapshot has one for the page (tests and the shuttle model).
    #[cfg(any(test, keel_shuttle))]
    pub(crate) fn find_image(&self, id: PageId) -> Option<Arc<[u8]>> {
        match self.find(id)? {
            Found::Image(c) => Some(c),
            Found::Undo(..) => None,
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if keel_io::os::fork::forked_since(self.versions.born) {
            return;
        }
        let removed = {
            let mut reg = self.versions.reg.lock();
            let removed = reg.active.remove(&(self.lsn, self.id)).is_some();
            self.versions
                .registered
                .store(reg.active.len(), Ordering::SeqCst);
            removed
        };
        if removed {
            self.versions.collect();
        }
    }
}

/// The crate-private operations, public only in the shuttle build (`--cfg keel_shuttle`) so that
/// `tests/versions_shuttle.rs` can drive the store the way a write transaction does.
#[cfg(keel_shuttle)]
impl Versions {
    /// [`add_pending`](Self::add_pending).
    pub fn shuttle_add_pending(&self, id: PageId, txn: u64, image: &[u8]) {
        let _ = self.add_pending(id, txn, image);
    }

    /// [`seal`](Self::seal).
    pub fn shuttle_seal(&self, txn: u64, pages: &[PageId], commit: Lsn) {
        self.seal(txn, pages, commit);
    }

    /// [`publish`](Self::publish).
    pub fn shuttle_publish(&self, commit: Lsn) {
        self.publish(commit);
    }

    /// [`discard`](Self::discard).
    pub fn shuttle_discard(&self, txn: u64, pages: &[PageId]) {
        self.discard(txn, pages);
    }

    /// [`any_registered`](Self::any_registered).
    pub fn shuttle_any_registered(&self) -> bool {
        self.any_registered()
    }

    /// [`begin_undo`](Self::begin_undo).
    pub fn shuttle_begin_undo(&self) -> Arc<TxnUndo> {
        self.begin_undo()
    }

    /// [`seal_undo`](Self::seal_undo).
    pub fn shuttle_seal_undo(&self, t: &TxnUndo, commit: Lsn) {
        self.seal_undo(t, commit);
    }

    /// [`end_undo`](Self::end_undo).
    pub fn shuttle_end_undo(&self, t: Arc<TxnUndo>) {
        self.end_undo(t);
    }

    /// [`rebuild`](Self::rebuild), kept as `txn`'s pending version of page `id` (what a
    /// commit with a snapshot registered does).
    pub fn shuttle_keep_rebuilt(&self, id: PageId, txn: u64, frame: &[u8], t: &TxnUndo, slot: u32) {
        let image = self.rebuild(frame, t, slot);
        self.add_pending_image(id, txn, image);
    }

    /// [`publish_if_unregistered`](Self::publish_if_unregistered).
    pub fn shuttle_publish_if_unregistered(&self, commit: Lsn) -> bool {
        self.publish_if_unregistered(commit)
    }
}

/// See the `impl Versions` above.
#[cfg(keel_shuttle)]
impl TxnUndo {
    /// [`add_page`](Self::add_page).
    pub fn shuttle_add_page(&self, id: PageId, page_len: usize) -> u32 {
        self.add_page(id.0, page_len)
    }

    /// [`push`](Self::push).
    pub fn shuttle_push(&self, slot: u32, offset: usize, old: &[u8]) {
        let _ = self.push(slot, offset, old);
    }

    /// [`roll_back`](Self::roll_back).
    pub fn shuttle_roll_back(&self, slot: u32, page: &mut [u8]) {
        self.roll_back(slot, page);
    }
}

/// See the `impl Versions` above.
#[cfg(keel_shuttle)]
impl Snapshot {
    /// [`find`](Self::find).
    pub fn shuttle_find(&self, id: PageId) -> Option<Arc<[u8]>> {
        self.find_image(id)
    }

    /// [`find`](Self::find) under the page's latch, with `frame` the page's bytes: an undo
    /// version is rebuilt from them ([`Versions::rebuild`]).
    pub fn shuttle_find_latched(&self, id: PageId, frame: &[u8]) -> Option<Arc<[u8]>> {
        match self.find(id)? {
            Found::Image(c) => Some(c),
            Found::Undo(t, slot) => Some(self.versions.rebuild(frame, &t, slot)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(b: u8) -> Vec<u8> {
        vec![b; 64]
    }

    #[test]
    fn old_snapshots_keep_their_versions() {
        let v = Arc::new(Versions::new(1 << 20));
        let s0 = v.snapshot();
        // Transaction 1 changes page 5 and commits at LSN 10.
        v.add_pending(PageId(5), 1, &page(0));
        let during = v.snapshot();
        assert_eq!(during.find_image(PageId(5)).as_deref(), Some(&page(0)[..]));
        v.seal(1, &[PageId(5)], Lsn(10));
        v.publish(Lsn(10));
        let s10 = v.snapshot();
        assert_eq!(s10.lsn(), Lsn(10));
        assert!(
            s10.find_image(PageId(5)).is_none(),
            "the page itself is at LSN 10"
        );
        assert_eq!(s0.find_image(PageId(5)).as_deref(), Some(&page(0)[..]));
        // Transaction 2 changes it again (commit 20): s0 still sees the first image, s10 the
        // second.
        v.add_pending(PageId(5), 2, &page(1));
        v.seal(2, &[PageId(5)], Lsn(20));
        v.publish(Lsn(20));
        assert_eq!(s0.find_image(PageId(5)).as_deref(), Some(&page(0)[..]));
        assert_eq!(s10.find_image(PageId(5)).as_deref(), Some(&page(1)[..]));
        drop((s0, during));
        assert_eq!(v.counts().kept, 1, "only s10's version is left");
        drop(s10);
        assert_eq!(v.counts().kept, 0);
        assert_eq!(v.counts().bytes, 0);
    }

    #[test]
    fn a_sealed_version_waits_for_its_publish() {
        // A collection between a commit's seal and its publish (another snapshot ending) must
        // keep the version: a snapshot taken in between reads below the commit.
        let v = Arc::new(Versions::new(1 << 20));
        v.add_pending(PageId(4), 1, &page(0));
        v.seal(1, &[PageId(4)], Lsn(10));
        drop(v.snapshot()); // collects, with no snapshot registered
        let between = v.snapshot();
        assert_eq!(between.lsn(), Lsn(0));
        assert_eq!(between.find_image(PageId(4)).as_deref(), Some(&page(0)[..]));
        v.publish(Lsn(10));
        assert_eq!(between.find_image(PageId(4)).as_deref(), Some(&page(0)[..]));
        drop(between);
        assert_eq!(v.counts().kept, 0);
    }

    #[test]
    fn an_abort_discards_its_pending_versions() {
        let v = Arc::new(Versions::new(1 << 20));
        let s = v.snapshot();
        v.add_pending(PageId(1), 7, &page(3));
        assert!(s.find_image(PageId(1)).is_some());
        v.discard(7, &[PageId(1)]);
        assert!(s.find_image(PageId(1)).is_none());
        assert_eq!(v.counts().kept, 0);
    }

    #[test]
    fn a_recycled_image_never_changes_under_a_reader() {
        let v = Versions::new(1 << 20);
        // Transaction 1 stores a version of page 1 and aborts while a reader holds its image.
        v.add_pending(PageId(1), 1, &[1u8; 64]);
        let Some(Found::Image(held)) = v.find(PageId(1), 0) else {
            panic!("pending version")
        };
        v.discard(1, &[PageId(1)]);
        // Transaction 2 copies another image: the held one is not re-used.
        v.add_pending(PageId(2), 2, &[2u8; 64]);
        assert!(held.iter().all(|&b| b == 1));
        // Once nothing holds an image it is re-used for the next copy, with the new bytes.
        drop(held);
        v.discard(2, &[PageId(2)]);
        assert_eq!(v.spare.lock().len(), 1);
        v.add_pending(PageId(3), 3, &[3u8; 64]);
        assert!(v.spare.lock().is_empty());
        let Some(Found::Image(img)) = v.find(PageId(3), 0) else {
            panic!("pending version")
        };
        assert!(img.iter().all(|&b| b == 3));
    }

    #[test]
    fn publishing_before_sealing_is_caught() {
        // Break invariant 2 on purpose: publish first. A snapshot at the commit then still
        // finds the pending (older) image: it would read the page as it was before its own
        // snapshot's commit.
        let v = Arc::new(Versions::new(1 << 20));
        v.add_pending(PageId(2), 1, &page(0));
        v.publish(Lsn(10));
        let s = v.snapshot();
        assert!(s.find_image(PageId(2)).is_some(), "the wrong order shows");
        v.seal(1, &[PageId(2)], Lsn(10));
        assert!(
            s.find_image(PageId(2)).is_none(),
            "the right order hides it"
        );
    }

    #[test]
    fn the_budget_revokes_the_oldest() {
        let v = Arc::new(Versions::new(100));
        let old = v.snapshot();
        v.add_pending(PageId(1), 1, &page(0));
        v.seal(1, &[PageId(1)], Lsn(10));
        v.publish(Lsn(10));
        assert!(old.check().is_ok(), "64 bytes fit the budget of 100");
        let mid = v.snapshot();
        v.add_pending(PageId(2), 2, &page(1));
        v.seal(2, &[PageId(2)], Lsn(20));
        v.publish(Lsn(20));
        // 128 bytes > 100: the oldest snapshot goes, and its version with it.
        assert!(matches!(
            old.check(),
            Err(PoolError::SnapshotTooOld { lsn: Lsn(0), .. })
        ));
        assert!(mid.check().is_ok());
        assert_eq!(v.counts().kept, 1);
        assert_eq!(v.counts().refused, 1);
        // A pending version alone never revokes current snapshots.
        let now = v.snapshot();
        v.add_pending(PageId(3), 3, &[0u8; 200]);
        v.collect();
        assert!(now.check().is_ok());
    }
}
