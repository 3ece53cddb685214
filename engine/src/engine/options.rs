//! How an [`Engine`](super::Engine) is configured: plain data with defaults
//! that suit a real disk.
//!
//! **Invariant:** options that pass [`EngineOptions::validate`] let a
//! command of the largest allowed checkpoint fit one WAL record, or say so
//! (a larger command is refused with `RecordTooLarge`, never split).

use crate::db::{DbOptions, PipelineOptions};
use crate::error::{Error, Result};
use crate::wal::WalOptions;

/// Default: checkpoint the state store after this many commits. An open after
/// a crash replays about this many commands at most (docs/PERFORMANCE.md,
/// "Open time after a crash"); a longer interval does not speed commits up.
pub const CHECKPOINT_EVERY_RECORDS_DEFAULT: u64 = 2048;
/// Default: checkpoint the state store after this many logged bytes.
pub const CHECKPOINT_EVERY_BYTES_DEFAULT: u64 = 8 << 20;
/// Default: a clean close compacts the state store when at least this many
/// bytes of it (and a sixteenth of it or more) are free pages.
pub const COMPACT_AT_CLOSE_FREE_BYTES_DEFAULT: u64 = 1 << 20;
/// Default largest WAL record, i.e. the largest single command's ops.
pub const MAX_RECORD_BYTES_DEFAULT: u64 = 4 << 20;

// The largest receipt's record (its blob, its status, a reconcile note, the
// act a compensation marks undone, a woken wait) fits the default record.
const _: () =
    assert!(crate::books::RECEIPT_LEN_BYTES_MAX as u64 + (1 << 20) <= MAX_RECORD_BYTES_DEFAULT);
/// Default WAL segment size. Recovery reads the log from the start of the
/// segment holding the last checkpoint's LSN, so open time after a crash
/// is bounded by one segment plus what was logged since the checkpoint
/// (docs/PERFORMANCE.md, "Open time after a crash"): about 30 ms here with a
/// million-command history and a whole default checkpoint interval to replay.
pub const SEGMENT_SIZE_BYTES_DEFAULT: u64 = 16 << 20;

/// How to open an engine.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Database directory options (WAL segment size, record limit, id).
    pub db: DbOptions,
    /// Check the state store's pages before redb uses them. After a clean
    /// close, each page as redb reads it, against the CRC-32 per 4 KiB
    /// block that close wrote (`state.redb.sums`): nothing is read at open.
    /// After a crash, or for a store without those sums, every page checksum
    /// at open (redb's `check_integrity`): a read of the whole file, so that
    /// open's time grows with the state store's size. On by default: redb
    /// trusts a page whose checksum nobody asked for, and damaged bytes
    /// there make redb miss rows, panic (the engine's guard turns that into
    /// an `Err`), or, when redb panics again while unwinding, abort the
    /// process past any guard (docs/DURABILITY.md, "State store checks",
    /// has the numbers). Off, reads are still checked against sums a clean
    /// close left, but nothing is read at open; run `actum verify` after any
    /// disk error.
    pub verify_state_on_open: bool,
    /// Run a checkpoint (durable redb commit, manifest update, WAL GC)
    /// after this many commits since the last one; 0 disables the count.
    pub checkpoint_every_records: u64,
    /// ... or after this many logged bytes since the last one; 0 disables.
    pub checkpoint_every_bytes: u64,
    /// When runs that are over leave the books by themselves (never, by
    /// default).
    pub retention: super::retention::Retention,
    /// Serve the operator channel (`crate::operator::channel`: a Unix
    /// socket in the database directory, owner-only) so the `actum`
    /// command's writes reach this engine while it runs: a `Runtime`
    /// serves it from `run`; a program sharing an `Arc<Engine>` calls
    /// `Engine::serve_operators`. Off by default.
    pub operator_channel: bool,
    /// A clean close compacts the state store (redb's `compact`, through
    /// the page sums) when at least this many bytes of its file, and a
    /// sixteenth of it or more, are pages no table uses: the file shrinks by
    /// them. The close looks (a read of the whole file) only after a
    /// session that wrote a sixteenth of the file or more. 0: never.
    /// Default [`COMPACT_AT_CLOSE_FREE_BYTES_DEFAULT`], 1 MiB. Its cost
    /// grows with the file (docs/DURABILITY.md, "Compaction at close").
    pub compact_at_close_free_bytes: u64,
    /// At open, read each live run's row beside its claim row
    /// (`books_live_claims`, what the open files a parked run by, so it
    /// need not read the run rows) and refuse the open (`Inconsistent`,
    /// naming the run) if they disagree. On in builds with debug assertions
    /// and in the simulator, off by default in release builds: it reads the
    /// rows the claim rows are there to spare (docs/DURABILITY.md, "Open").
    pub check_live_claims: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            db: DbOptions {
                wal: WalOptions {
                    segment_size_bytes: SEGMENT_SIZE_BYTES_DEFAULT,
                    max_record_bytes: MAX_RECORD_BYTES_DEFAULT,
                    ..WalOptions::default()
                },
                database_id: None,
            },
            verify_state_on_open: true,
            checkpoint_every_records: CHECKPOINT_EVERY_RECORDS_DEFAULT,
            checkpoint_every_bytes: CHECKPOINT_EVERY_BYTES_DEFAULT,
            retention: super::retention::Retention::default(),
            operator_channel: false,
            compact_at_close_free_bytes: COMPACT_AT_CLOSE_FREE_BYTES_DEFAULT,
            check_live_claims: cfg!(debug_assertions),
        }
    }
}

impl EngineOptions {
    /// Checks that the options are consistent.
    pub fn validate(&self) -> Result<()> {
        self.db.wal.validate()?;
        if self.checkpoint_every_bytes != 0
            && self.checkpoint_every_bytes < self.db.wal.max_record_bytes / 1024
        {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "checkpoint_every_bytes {} is so small against max_record_bytes {} that \
                     nearly every commit would checkpoint",
                    self.checkpoint_every_bytes, self.db.wal.max_record_bytes
                ),
            });
        }
        Ok(())
    }

    /// The durable pipeline's share of these options.
    pub(crate) fn pipeline(&self) -> PipelineOptions {
        PipelineOptions {
            db: self.db.clone(),
            verify_state_on_open: self.verify_state_on_open,
            checkpoint_every_records: self.checkpoint_every_records,
            checkpoint_every_bytes: self.checkpoint_every_bytes,
            compact_at_close_free_bytes: self.compact_at_close_free_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_checkpoint_by_count_or_size() {
        let options = EngineOptions::default().pipeline();
        assert!(EngineOptions::default().validate().is_ok());
        assert!(!options.checkpoint_due(1, 1));
        assert!(options.checkpoint_due(CHECKPOINT_EVERY_RECORDS_DEFAULT, 0));
        assert!(options.checkpoint_due(0, CHECKPOINT_EVERY_BYTES_DEFAULT));
        let never = EngineOptions {
            checkpoint_every_records: 0,
            checkpoint_every_bytes: 0,
            ..EngineOptions::default()
        };
        assert!(!never.pipeline().checkpoint_due(u64::MAX, u64::MAX));
    }
}
