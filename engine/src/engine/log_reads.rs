//! The log as commits: what `actum tail` follows. Each durable record is
//! one commit's ops, decoded; [`crate::books::audit_line_of`] puts each op
//! in the audit journal's words.
//!
//! **Invariant:** the commits come back in LSN order, each LSN once, every
//! one durable when it was read; a range the log no longer holds (a
//! checkpoint let its segment go) is `LsnOutOfRange` naming the oldest LSN
//! still there, never a silent gap.

use crate::books::{Op, decode_ops};
use crate::error::{Error, Result};
use crate::ids::Lsn;

use super::core::Engine;

/// One durable commit of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedCommit {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its ops, in the order they were applied.
    pub ops: Vec<Op>,
}

impl Engine {
    /// The durable commits after `after`, oldest first, at most `max` of
    /// them. `LsnOutOfRange` (with the oldest LSN the log still holds) if
    /// the commit after `after` is no longer in the log: a checkpoint
    /// covered it and its segment was let go. A record that does not decode
    /// is `Corrupt`, naming its file and offset.
    ///
    /// ```
    /// use actum::books::{CreateRun, Op, RunId, audit_line_of, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Lsn;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let from = engine.durable_lsn();
    /// engine.create_run(CreateRun { run: RunId::new("r1")?, input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// let commits = engine.read_log(from, 100)?;
    /// assert_eq!(commits.len(), 1);
    /// assert_eq!(commits[0].lsn, engine.durable_lsn());
    /// assert!(matches!(&commits[0].ops[0], Op::RunCreated { run } if run.id.as_str() == "r1"));
    /// let (run, line) = audit_line_of(&commits[0].ops[0]).expect("a run's line");
    /// assert_eq!((run.as_str(), line.what.to_string().starts_with("created")), ("r1", true));
    /// assert!(engine.read_log(engine.durable_lsn(), 100)?.is_empty(), "nothing after the end");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_log(&self, after: Lsn, max: usize) -> Result<Vec<LoggedCommit>> {
        #[cfg(feature = "postgres")]
        if self.postgres().is_some() {
            return Err(super::postgres::not_on_postgres(
                "reading the log",
                "follow a run through its audit journal (Engine::audit)",
            ));
        }
        let wal = self.local().pipeline.db().wal();
        if max == 0 || after >= wal.durable_lsn() {
            return Ok(Vec::new());
        }
        let mut records = wal.read_from(after.next())?;
        let mut commits = Vec::new();
        // Bounded by `max` and by the durable LSN the iterator was made at.
        while commits.len() < max {
            let Some(record) = records.next() else {
                break;
            };
            let (lsn, payload) = record?;
            let (file, offset) = records
                .position()
                .map(|(f, o)| (f.to_path_buf(), o))
                .expect("a record was just read");
            let ops = decode_ops(&payload).map_err(|e| {
                Error::corrupt(
                    file,
                    offset,
                    format!("the record at {lsn} does not decode: {e}"),
                )
            })?;
            commits.push(LoggedCommit { lsn, ops });
        }
        Ok(commits)
    }
}
