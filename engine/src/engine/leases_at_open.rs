//! The leases of an earlier process, released at open. A writable open
//! holds the directory lock, and the lock proves that the process which
//! had the directory before is gone: no worker of it can still be acting
//! under the leases it was granted. Waiting for each of them to run out
//! would only keep its runs idle, so the open releases them, each under
//! its own guard, through the ordinary commit path:
//!
//! 1. after replay, the hot books are read for every run that is not over
//!    and holds a live lease (a run parked out of memory holds none: the
//!    wait that parked it released it), in run id order;
//! 2. their `ReleaseLease` commands are committed as one batch, one WAL
//!    record (split only past `BATCH_COMMANDS_MAX` commands or the log's
//!    record size), journaled in each run's audit like any release;
//! 3. a lease that ran out between the read and the decision is refused
//!    (`LeaseLost`) and left out; nothing else may be refused;
//! 4. the commit may be followed by a checkpoint, as any commit; if that
//!    fails, the engine halts and the open fails with it.
//!
//! A crash before the record is durable leaves the leases held, and the
//! next open releases them. The tokens stay fenced: a release does not
//! take back `next_token`, so the next grant of the run hands out a larger
//! one, and a holder presenting the old token is `LeaseLost` or `Fenced`.
//!
//! **Invariant:** after a writable open, no run that is not over holds a
//! lease granted before it; a read-only open changes no lease.

use std::collections::BTreeSet;

use crate::books::{Answer, BATCH_COMMANDS_MAX, Command, FencingToken, Guard, ReleaseLease, RunId};
use crate::error::{Error, Result};
use crate::hot::HotState;

use super::core::Engine;

impl Engine {
    /// Releases every live lease of a run not over that the books hold
    /// once replayed (see the module docs); returns how many. `stored_only`
    /// is the planted `ReleaseStoredLeasesOnly`: only the leases the state
    /// store held before the log was replayed are released.
    pub(crate) fn release_leases_at_open(
        &self,
        stored_only: Option<&BTreeSet<(RunId, FencingToken)>>,
    ) -> Result<u64> {
        let guards: Vec<Guard> = {
            let mut inner = self.lock();
            self.check_running(&mut inner)?;
            let now_ms = self.clock.now_ms();
            live_leases(&inner.hot, now_ms)
                .filter(|g| stored_only.is_none_or(|s| s.contains(&(g.run.clone(), g.token))))
                .collect()
        };
        let released = self.release_leases(&guards)?;
        // A checkpoint the commit was followed by may have failed, halting
        // the engine: the open fails then, as it would have failed itself.
        self.check_running(&mut self.lock())?;
        Ok(released)
    }

    /// Releases the lease of each of `guards`, as few commits as the log's
    /// record size allows (one batch of up to `BATCH_COMMANDS_MAX`
    /// releases a commit, halved while a record would be too large), each
    /// journaled in its run's audit; a lease that ran out, or was taken
    /// over, before its batch was decided is left out. Returns how many
    /// were released. What a process that holds many leases does before it
    /// goes (the LangGraph saver, as its database closes), and what a
    /// writable open does for the leases of the process before it.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let mut guards = Vec::new();
    /// for name in ["a", "b"] {
    ///     let run = RunId::new(name)?;
    ///     engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"x"),
    ///         agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    ///     guards.push(engine.acquire_lease(&run, &WorkerId::new("w1")?, 30_000)?.guard);
    /// }
    /// assert_eq!(engine.release_leases(&guards)?, 2);
    /// // Released already: nothing to release, and no error.
    /// assert_eq!(engine.release_leases(&guards)?, 0);
    /// assert!(engine.run(&RunId::new("a")?)?.expect("created").lease.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release_leases(&self, guards: &[Guard]) -> Result<u64> {
        let mut released = 0;
        let mut rest = guards;
        let mut chunk_max = BATCH_COMMANDS_MAX;
        while !rest.is_empty() {
            let take = chunk_max.min(rest.len());
            match self.release_batch(rest[..take].to_vec()) {
                Ok(count) => {
                    released += count;
                    rest = &rest[take..];
                }
                // Names near the size limit: fewer leases a record.
                Err(Error::RecordTooLarge { .. }) if take > 1 => chunk_max = take / 2,
                Err(e) => return Err(e),
            }
        }
        assert!(
            released <= guards.len() as u64,
            "each lease is released once"
        );
        Ok(released)
    }

    /// Commits the release of each of `guards`' leases in one batch,
    /// leaving out a lease the batch is refused for because it ran out or
    /// was taken over meanwhile; returns how many were released.
    fn release_batch(&self, mut guards: Vec<Guard>) -> Result<u64> {
        // Each refusal leaves one lease out, so this ends.
        for _ in 0..=guards.len() {
            if guards.is_empty() {
                return Ok(0);
            }
            let batch = guards
                .iter()
                .map(|guard| {
                    Command::ReleaseLease(ReleaseLease {
                        run: guard.run.clone(),
                        guard: guard.clone(),
                    })
                })
                .collect();
            match self.commit_batch(batch) {
                Ok(answers) => {
                    assert!(
                        answers.iter().all(|a| matches!(a, Answer::Released { .. })),
                        "a release answers Released"
                    );
                    return Ok(guards.len() as u64);
                }
                Err(Error::BatchRefused { index, cause })
                    if matches!(*cause, Error::LeaseLost { .. } | Error::Fenced { .. })
                        && index < guards.len() =>
                {
                    guards.remove(index);
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("every refusal leaves a lease out")
    }
}

/// The guard of every live lease at `now_ms` on a run in memory that is
/// not over, in run id order (a parked run, out of memory, holds no lease).
fn live_leases(hot: &HotState, now_ms: u64) -> impl Iterator<Item = Guard> + '_ {
    hot.runs.values().filter_map(move |held| {
        let run = &held.run;
        let lease = run.lease.as_ref().filter(|l| l.is_live(now_ms))?;
        (!run.state.is_terminal()).then(|| Guard {
            run: run.id.clone(),
            worker: lease.worker.clone(),
            token: lease.token,
        })
    })
}

/// Every lease the hot books hold, live or not, by run and token: what the
/// planted `ReleaseStoredLeasesOnly` reads before the log is replayed.
pub(crate) fn held_leases(hot: &HotState) -> BTreeSet<(RunId, FencingToken)> {
    hot.runs
        .values()
        .filter_map(|held| {
            let lease = held.run.lease.as_ref()?;
            Some((held.run.id.clone(), lease.token))
        })
        .collect()
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::books::{
        AuditWhat, CreateRun, OperatorAction, RunState, Transition, WorkerId, digest_of,
    };
    use crate::clock::ManualClock;
    use crate::engine::EngineOptions;
    use crate::engine::existing::tests::files;
    use crate::storage::FsStorage;

    const START_MS: u64 = 1_700_000_000_000;
    const HOUR_MS: u64 = 3_600_000;

    fn open(dir: &Path, clock: &Arc<ManualClock>, options: EngineOptions) -> Engine {
        Engine::open_with(Arc::new(FsStorage::new()), clock.clone(), dir, options).unwrap()
    }

    fn rid(name: &str) -> RunId {
        RunId::new(name).unwrap()
    }

    fn wid(name: &str) -> WorkerId {
        WorkerId::new(name).unwrap()
    }

    /// Creates `name`, leases it to `worker` for `ttl_ms` and starts it.
    fn started(engine: &Engine, name: &str, worker: &str, ttl_ms: u64) -> Guard {
        engine
            .create_run(CreateRun {
                run: rid(name),
                input_digest: digest_of(name.as_bytes()),
                agent_version: "1".into(),
                trace_id: "t".into(),
                parent: None,
                input: None,
            })
            .unwrap();
        let grant = engine
            .acquire_lease(&rid(name), &wid(worker), ttl_ms)
            .unwrap();
        move_to(engine, &grant.guard, RunState::Running);
        grant.guard
    }

    fn move_to(engine: &Engine, guard: &Guard, to: RunState) {
        engine
            .transition(Transition {
                run: guard.run.clone(),
                guard: guard.clone(),
                to,
                expected_version: None,
                reason: format!("to {to}"),
            })
            .unwrap();
    }

    #[test]
    fn a_writable_open_releases_the_leases_of_the_process_before_it_and_keeps_them_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(START_MS));
        let engine = open(dir.path(), &clock, EngineOptions::default());
        // a runs, b is over, c is paused by an operator, d's lease runs out.
        let old_a = started(&engine, "a", "w1", HOUR_MS);
        let old_b = started(&engine, "b", "w1", HOUR_MS);
        move_to(&engine, &old_b, RunState::Completed);
        started(&engine, "c", "w1", HOUR_MS);
        engine
            .operate(&rid("c"), OperatorAction::Pause, "ops", "a look")
            .unwrap();
        started(&engine, "d", "w1", 1_000);
        clock.advance_ms(5_000);
        let b_before = engine.run(&rid("b")).unwrap().unwrap();
        drop(engine); // The process dies with a's and c's leases live.

        // A read-only open changes no lease, and no byte.
        let storage = FsStorage::new();
        let bytes = files(&storage, dir.path());
        let reader = Engine::open_read_only_with(
            Arc::new(FsStorage::new()),
            clock.clone(),
            dir.path(),
            EngineOptions::default(),
        )
        .unwrap();
        assert_eq!(reader.recovery().leases_released, 0);
        let lease = reader.run(&rid("a")).unwrap().unwrap().lease.unwrap();
        assert_eq!((lease.worker, lease.token), (wid("w1"), old_a.token));
        drop(reader);
        assert_eq!(
            files(&storage, dir.path()),
            bytes,
            "the reader wrote nothing"
        );

        // The next process, at the same clock reading, takes over at once.
        let engine = open(dir.path(), &clock, EngineOptions::default());
        assert_eq!(engine.recovery().leases_released, 2, "a's and c's");
        for name in ["a", "c"] {
            assert_eq!(engine.run(&rid(name)).unwrap().unwrap().lease, None);
        }
        assert_eq!(
            engine.run(&rid("b")).unwrap().unwrap(),
            b_before,
            "a run that is over is untouched"
        );
        let last = engine.audit(&rid("a")).unwrap().pop().unwrap();
        assert_eq!(
            (last.what, last.token, last.at_ms),
            (
                AuditWhat::LeaseReleased,
                Some(old_a.token),
                START_MS + 5_000
            )
        );
        // The old holder's guard is dead: released, then fenced.
        let lost = engine.renew_lease(&rid("a"), &old_a, HOUR_MS).unwrap_err();
        assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
        // d's lease ran out before the open (it is claimable since), then a.
        let w2 = wid("w2");
        let d = engine.claim_next(&w2, HOUR_MS).unwrap().unwrap();
        let a = engine.claim_next(&w2, HOUR_MS).unwrap().unwrap();
        assert_eq!((d.run.as_str(), a.run.as_str()), ("d", "a"));
        assert!(
            a.guard.token > old_a.token,
            "the token is never handed out again"
        );
        assert!(
            engine.claim_next(&w2, HOUR_MS).unwrap().is_none(),
            "c is paused"
        );
        let fenced = engine.renew_lease(&rid("a"), &old_a, HOUR_MS).unwrap_err();
        assert!(
            matches!(fenced, Error::Fenced { presented, current, .. }
                if presented == old_a.token && current == a.guard.token),
            "{fenced}"
        );
        drop(engine);

        // An open releases what any earlier open granted: w2's two leases.
        let engine = open(dir.path(), &clock, EngineOptions::default());
        assert_eq!(engine.recovery().leases_released, 2);
        engine.close().unwrap();
        let engine = open(dir.path(), &clock, EngineOptions::default());
        assert_eq!(
            engine.recovery().leases_released,
            0,
            "nothing left to release"
        );
    }

    #[test]
    fn leases_too_many_for_one_record_are_released_in_several() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(START_MS));
        let mut options = EngineOptions::default();
        options.db.wal.max_record_bytes = 1024;
        let engine = open(dir.path(), &clock, options.clone());
        let runs: u64 = 40;
        for i in 0..runs {
            let name = format!("a-run-whose-name-takes-up-a-good-part-of-a-small-record-{i:02}");
            started(&engine, &name, "w1", HOUR_MS);
        }
        let before = engine.durable_lsn();
        drop(engine);
        let engine = open(dir.path(), &clock, options);
        assert_eq!(engine.recovery().leases_released, runs);
        let records = engine.durable_lsn().0 - before.0;
        assert!(
            (2..runs).contains(&records),
            "a few records, not one per lease: {records}"
        );
        assert!(engine.claim_next(&wid("w2"), HOUR_MS).unwrap().is_some());
    }
}
