//! The home writer: in doublewrite mode, the in-place ("home") writes of a batch run on a
//! background thread after `write_pages` has returned (InnoDB does the same: once a batch is in
//! the synced doublewrite area it is durable — recovery restores it from there — so its in-place
//! writes need not delay the caller).
//!
//! # Invariants kept here (each tested by breaking it on purpose, see `crate::tests::pipeline`)
//!
//! 1. One thread, one FIFO queue: the in-place writes of queued groups happen in queue order, so
//!    two batches holding the same page reach its home in batch order
//!    (`same_page_in_consecutive_batches_is_written_home_in_batch_order`, broken with the
//!    `home_writes_lifo` fault).
//! 2. In-flight pages: from the moment a group is queued until its in-place writes returned, each
//!    of its pages counts as in flight; reads of the data file wait while a page they read is in
//!    flight, so a page re-read right after `write_pages` never shows an older (or half-written)
//!    home copy (`a_read_of_a_page_whose_home_write_is_in_flight_sees_the_new_image`, broken with
//!    the `skip_home_read_wait` fault).
//! 3. A queued group holds its doublewrite slot busy; after its in-place writes the slot becomes
//!    pending (freed by a later data sync, as in the synchronous path), after a failed one it is
//!    lost (never reused) and the writer is poisoned. Every waiter (drain, in-flight readers,
//!    slot acquirers) is woken after every job, so a poisoned writer leaves nobody waiting; the
//!    thread marks itself dead when it ends for any reason (also a panic), which releases every
//!    waiter too.
//! 4. Anything that needs the in-place writes complete drains the queue first: groups holding
//!    pages that skipped the doublewrite, `sync_data`, recovery, and drop (drain, then join).

use crate::area::DoublewriteArea;
use crate::error::{FlushError, Result};
use crate::scheme::{Ctx, Group, Knobs, Poison};
use crate::stats::Counters;
use crate::writer::Spare;
use keel_io::{File, IoError};
use keel_page::PageId;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A group whose slot is written and synced, waiting for its in-place writes.
#[derive(Debug)]
pub(crate) struct HomeJob {
    /// The sealed images (the group owns its buffer; the caller's pages are not referenced).
    pub group: Group,
    /// The busy slot holding the group's images.
    pub slot: usize,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<HomeJob>,
    /// Page -> queued or running in-place writes of it.
    in_flight: HashMap<PageId, u32>,
    /// A job taken from the queue is being written.
    busy: bool,
    /// Drop asked the thread to end once the queue is empty.
    shutdown: bool,
    /// The thread has ended (normally or not): nobody may wait for it any more.
    dead: bool,
    /// An in-place write on the thread failed (the writer is poisoned).
    failed: bool,
    /// The deliberate faults of the tests.
    knobs: Knobs,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// What the thread writes with.
struct Env {
    data: Arc<dyn File>,
    area: Arc<DoublewriteArea>,
    counters: Arc<Counters>,
    poison: Arc<Poison>,
    spare: Arc<Spare>,
}

/// The background home writer of one page writer (doublewrite mode only).
#[derive(Debug)]
pub(crate) struct HomeWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Marks the thread dead and wakes every waiter when the thread ends, also by a panic (then the
/// writer is poisoned and the slots of groups never written are lost: their images stay).
struct DeadOnExit {
    shared: Arc<Shared>,
    area: Arc<DoublewriteArea>,
    poison: Arc<Poison>,
    path: std::path::PathBuf,
}

impl Drop for DeadOnExit {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        st.dead = true;
        st.busy = false;
        let unwritten: Vec<usize> = st.queue.drain(..).map(|j| j.slot).collect();
        if std::thread::panicking() || !unwritten.is_empty() {
            st.failed = true;
            self.poison
                .set(&self.path, "the home writer thread ended unexpectedly".into());
        }
        // Queued jobs will never be written: their pages are no longer "in flight" (the writer
        // is poisoned, so readers get an error rather than an old image).
        st.in_flight.clear();
        drop(st);
        for slot in unwritten {
            self.area.abandon(slot);
        }
        self.area.wake_all();
        self.shared.changed.notify_all();
    }
}

impl HomeWriter {
    /// Starts the thread.
    pub fn start(
        data: Arc<dyn File>,
        area: Arc<DoublewriteArea>,
        counters: Arc<Counters>,
        poison: Arc<Poison>,
        spare: Arc<Spare>,
    ) -> Result<HomeWriter> {
        let shared = Arc::new(Shared::default());
        let env = Env {
            data,
            area,
            counters,
            poison,
            spare,
        };
        let s = shared.clone();
        let path = env.data.path().to_path_buf();
        let thread = std::thread::Builder::new()
            .name("keel-home-writer".into())
            .spawn(move || run(s, env))
            .map_err(|source| {
                FlushError::Io(IoError::Os {
                    op: "spawn the home writer thread",
                    path,
                    source,
                })
            })?;
        Ok(HomeWriter {
            shared,
            thread: Some(thread),
        })
    }

    /// Sets the deliberate faults (tests).
    pub fn set_knobs(&self, knobs: Knobs) {
        self.shared.state.lock().knobs = knobs;
    }

    /// Queues `job`; its pages are in flight from now on. `Err(job)` if the thread has ended.
    pub fn enqueue(&self, job: HomeJob) -> std::result::Result<(), HomeJob> {
        let mut st = self.shared.state.lock();
        if st.dead || st.shutdown {
            return Err(job);
        }
        for p in &job.group.pages {
            *st.in_flight.entry(p.id).or_insert(0) += 1;
        }
        st.queue.push_back(job);
        drop(st);
        self.shared.changed.notify_all();
        Ok(())
    }

    /// Waits until every queued group has been written in place (or the thread has ended).
    pub fn drain(&self) {
        let mut st = self.shared.state.lock();
        while (!st.queue.is_empty() || st.busy) && !st.dead {
            self.shared.changed.wait(&mut st);
        }
    }

    /// Waits while any of `ids` is in flight. Returns (whether it waited, whether an in-place
    /// write on the thread has failed).
    pub fn wait_pages(&self, ids: &[PageId]) -> (bool, bool) {
        let mut st = self.shared.state.lock();
        let mut waited = false;
        if !st.knobs.skip_home_read_wait {
            while !st.dead && ids.iter().any(|id| st.in_flight.contains_key(id)) {
                waited = true;
                self.shared.changed.wait(&mut st);
            }
        }
        (waited, st.failed)
    }
}

impl Drop for HomeWriter {
    fn drop(&mut self) {
        {
            let mut st = self.shared.state.lock();
            st.shutdown = true;
        }
        self.shared.changed.notify_all();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the home writer thread panicked");
            }
        }
    }
}

/// The thread: takes groups in FIFO order, writes them in place, marks their slots pending.
fn run(shared: Arc<Shared>, env: Env) {
    let _dead = DeadOnExit {
        shared: shared.clone(),
        area: env.area.clone(),
        poison: env.poison.clone(),
        path: env.data.path().to_path_buf(),
    };
    loop {
        let (job, knobs) = {
            let mut st = shared.state.lock();
            loop {
                let next = if st.knobs.home_writes_lifo {
                    st.queue.pop_back()
                } else {
                    st.queue.pop_front()
                };
                if let Some(job) = next {
                    st.busy = true;
                    break (job, st.knobs);
                }
                if st.shutdown {
                    return;
                }
                shared.changed.wait(&mut st);
            }
        };
        let ctx = Ctx {
            data: &*env.data,
            area: Some(&*env.area),
            counters: &env.counters,
            poison: &env.poison,
            knobs: &knobs,
            home: None,
            spare: &env.spare,
        };
        let n = job.group.pages.len();
        let r = ctx
            .write_home(&job.group.home_ops(0..n), false)
            .and_then(|()| {
                if knobs.in_place_before_doublewrite_sync {
                    ctx.sync(&**env.area.file(), true)?;
                }
                Ok(())
            });
        let failed = r.is_err();
        if failed {
            // The writer is poisoned (write_home / sync set it, or it already was): the slot's
            // images must survive until recovery.
            env.poison.set(
                env.data.path(),
                "an in-place write of the home writer failed".into(),
            );
            env.area.abandon(job.slot);
        } else if knobs.defer_data_sync {
            env.area.release(job.slot);
        } else {
            env.area.mark_pending(job.slot);
        }
        {
            let mut st = shared.state.lock();
            st.busy = false;
            st.failed |= failed;
            for p in &job.group.pages {
                if let Some(c) = st.in_flight.get_mut(&p.id) {
                    *c -= 1;
                    if *c == 0 {
                        st.in_flight.remove(&p.id);
                    }
                }
            }
        }
        shared.changed.notify_all();
        env.spare.give_back(job.group.buf);
    }
}
