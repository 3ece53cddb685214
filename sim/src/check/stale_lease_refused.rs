//! Invariant: no mutation accepted from a stale lease, nor from the lease
//! of another run. A command the engine acknowledged presented a guard
//! granted on its own run, under the run's current fencing token (the
//! latest the reference model granted), or took no guard.

use actum::books::{BooksRead, Command, FencingToken, MemBooks};

/// `Err` if `cmd`, just acknowledged, presented a guard of another run, or
/// a token older than the run's latest grant in `model` (the books before
/// the command).
pub fn stale_lease_refused(model: &MemBooks, cmd: &Command) -> Result<(), String> {
    let mut cmd = cmd.clone();
    let Some((run, guard)) = cmd.guard_mut() else {
        return Ok(());
    };
    if guard.run != run {
        return Err(format!(
            "the engine acknowledged a command on run {run} from {} under a guard granted on \
             run {} (token {})",
            guard.worker, guard.run, guard.token.0
        ));
    }
    let Some(record) = model.run(&run) else {
        return Ok(());
    };
    let current = FencingToken(record.next_token.0.saturating_sub(1));
    if guard.token >= current {
        return Ok(());
    }
    Err(format!(
        "the engine acknowledged a command on run {run} from {} under token {} after token {} \
         was granted",
        guard.worker, guard.token.0, current.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{
        BooksWrite, CreateRun, Guard, Lease, Run, RunState, Transition, WorkerId, digest_of,
    };

    #[test]
    fn an_acknowledged_command_under_an_older_token_or_another_runs_guard_is_caught() {
        let mut books = MemBooks::new();
        let worker = WorkerId::new("w2").expect("valid");
        books.put_run(Run {
            lease: Some(Lease {
                worker: worker.clone(),
                token: FencingToken(2),
                expires_ms: 10,
            }),
            next_token: FencingToken(3),
            ..run_record("r", RunState::Running)
        });
        let under_guard_of = |guard_run: &str, token| {
            Command::Transition(Transition {
                run: run_id("r"),
                guard: Guard {
                    run: run_id(guard_run),
                    worker: worker.clone(),
                    token: FencingToken(token),
                },
                to: RunState::Completed,
                expected_version: None,
                reason: String::new(),
            })
        };
        assert!(stale_lease_refused(&books, &under_guard_of("r", 2)).is_ok());
        assert!(stale_lease_refused(&books, &under_guard_of("r", 1)).is_err());
        let mixed = stale_lease_refused(&books, &under_guard_of("other", 2));
        assert!(
            mixed
                .as_ref()
                .is_err_and(|e| e.contains("granted on run other")),
            "{mixed:?}"
        );
        let create = Command::CreateRun(CreateRun {
            run: run_id("s"),
            input_digest: digest_of(b"in"),
            agent_version: "a".into(),
            trace_id: "t".into(),
            parent: None,
            input: None,
        });
        assert!(
            stale_lease_refused(&books, &create).is_ok(),
            "takes no guard"
        );
    }
}
