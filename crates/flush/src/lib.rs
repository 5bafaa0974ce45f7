//! keel-flush: Keel's page writer. Dirty pages reach the disk here, protected from torn writes
//! (a 16 KiB page half-written at power loss) by one of four schemes, and torn pages are repaired
//! here at recovery.
//!
//! # The schemes ([`TornPageProtection`])
//!
//! | mode | a batch of pages is written... | a torn page is repaired by |
//! | --- | --- | --- |
//! | `Doublewrite { batch_pages }` (default 128) | sequentially into a doublewrite slot (one write), area synced, then in place; the data file is synced only before a slot is reused (the pages are durable in the synced slot meanwhile) | [`PageWriter::recover_doublewrite`] (before redo replay) |
//! | `Atomic` | each page one `RWF_ATOMIC` O_DIRECT write, naturally aligned; then synced | nothing to repair: never torn |
//! | `Auto` | `Atomic` if the probe says atomic writes of the page size are hardware-backed, else `Doublewrite` (the choice and reason: [`PageWriter::resolved`], logged) | |
//! | `FullPageWrites` | in place, synced; the buffer pool logs a full page image ([`full_page_image_record`]) with a page's first change after a checkpoint | redo replay (the image first) |
//! | `None` | in place, synced | nothing: detected by its checksum at read and reported as corruption, never returned as data |
//!
//! Each scheme is a small implementation of one internal trait (`scheme::ProtectionScheme`);
//! the writer around them enforces the WAL rule, seals pages, counts, and poisons itself on a
//! failed sync.
//!
//! **Init on flush** (MariaDB MDEV-19738, experiment E2): a [`FlushPage`] with
//! `rebuildable_from_redo` (its redo since the last checkpoint begins with a whole-page init) is
//! written in place without the doublewrite copy (under `Atomic`: with a plain write), counted as
//! `pages_skipped_protection`; under `FullPageWrites`, [`PageWriter::should_log_full_page_image`]
//! says no image is needed. Switch it off with [`PageWriterConfig::init_on_flush_skip`] for the
//! comparison.
//!
//! **The file checkpoint on page 0** ([`PageWriter::stamp_checkpoint`]): before the log records a
//! checkpoint, page 0 of the data file is rewritten in place recording it (only its first 32
//! bytes change: no torn-page protection needed), and every other write of page 0 carries the
//! newest record. So the data file says which checkpoint it belongs to, and the `keel` facade
//! refuses to open a data file older than the log, or a log older than the data file. The
//! doublewrite area records the store it belongs to ([`PageWriterConfig::store`]) and refuses to
//! restore another store's images.
//!
//! # Files
//!
//! `dir/data.keel` (pages at `id × page_size`; pages beyond the end read as unwritten) and, in
//! doublewrite mode, `dir/doublewrite.keel` — every byte of which is described in
//! `docs/format.md`, section "Doublewrite area": a 4 KiB header, then [`DOUBLEWRITE_SLOTS`] slots
//! of a directory (batch sequence number; per image page id, LSN and a CRC-32C binding image, page
//! id, LSN and batch) and `batch_pages` images.
//!
//! # Public API
//!
//! * [`PageWriter::open`]`(fs, dir, `[`PageWriterConfig`]`, log: impl `[`WalFlush`]`)`;
//!   `keel_redo_log::RedoLog` implements [`WalFlush`].
//! * [`PageWriter::write_pages`]`(&[`[`FlushPage`]`])` — durable on return: in place, or in a
//!   synced doublewrite slot that is not reused before the data file is synced.
//! * [`PageWriter::sync_data`] — sync the data file now (frees pending slots; for a clean
//!   shutdown, not needed for correctness).
//! * [`PageWriter::read_page`], [`PageWriter::read_pages`] — verified reads.
//! * [`PageWriter::recover_doublewrite`] → [`DoublewriteRecovery`].
//! * [`PageWriter::resolved`] → [`ResolvedProtection`]; [`PageWriter::stats`] → [`FlushStats`].
//! * [`PageWriter::wants_full_page_images`], [`PageWriter::should_log_full_page_image`],
//!   [`PageWriter::count_full_page_image`], [`full_page_image_record`].
//!
//! # Invariants this crate keeps (each has a test that breaks it on purpose)
//!
//! 1. **WAL rule** (docs/design.md invariant 1): no page byte reaches the doublewrite area, an atomic
//!    write or its home before the log is durable up to the batch's newest page LSN. The writer
//!    calls [`WalFlush::flush_to`] and then checks [`WalFlush::durable_lsn`]; a log that is
//!    behind is [`FlushError::WalRule`] with nothing written. Tests:
//!    `tests::order::wal_rule_*`.
//! 2. **Doublewrite order** (docs/design.md invariant 2): a batch's images are in the area and the
//!    area is synced before any of them is written in place; a slot is reused only after the
//!    in-place writes of its batch were synced — by a data sync that *started* after they
//!    completed. The data sync is deferred to that moment (slot states free → busy → pending →
//!    free, see `area.rs`): a batch in a pending slot is durable because recovery restores it.
//!    Recovery syncs the data file before the slots may be reused (a previous run may have
//!    stopped with pending slots). Tests: `tests::order::doublewrite_*`,
//!    `tests::crash::*_breaks_repair`, `tests::crash::doublewrite_hot_pages_*`,
//!    `tests::crash::a_clean_stop_then_slot_reuse_then_power_loss_loses_nothing`.
//! 3. **The area is valid on its own**: recovery restores only images whose directory and own
//!    checksum (bound to batch sequence, page id and LSN) are valid and that verify as pages;
//!    torn slots are ignored. Tests: `tests::area::*`, `tests::crash::*`.
//! 4. **A failed sync poisons**: every later write returns [`FlushError::Poisoned`] naming the
//!    file; never retried as if it had worked. Test: `tests::order::a_failed_sync_poisons`.
//! 5. **Never silent**: a torn or corrupt page is [`FlushError::Corruption`] at read, never
//!    data. Tests: `tests::crash::none_mode_*`.

mod area;
mod config;
mod error;
mod page_writer;
mod record;
mod scheme;
mod stats;
mod unsynced;
mod wal;

#[cfg(test)]
mod tests;

pub use area::{
    area_batch_pages, reformat_area, AREA_HEADER_BYTES, DOUBLEWRITE_SLOTS, MAX_BATCH_PAGES,
};
pub use config::{
    DirectIo, PageWriterConfig, ResolvedMode, ResolvedProtection, TornPageProtection,
    DEFAULT_BATCH_PAGES,
};
pub use error::{FlushError, Result, WalError};
pub use page_writer::{
    DoublewriteInspection, DoublewriteRecovery, FlushPage, PageWriter, RestoredPage,
    DATA_FILE_NAME, DOUBLEWRITE_FILE_NAME,
};
pub use record::full_page_image_record;
pub use stats::FlushStats;
pub use wal::WalFlush;
