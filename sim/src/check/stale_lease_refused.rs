//! Invariant: no mutation accepted from a stale lease. A command the engine
//! acknowledged presented the run's current fencing token (the latest the
//! reference model granted), or took no guard.

use actum::books::{BooksRead, Command, FencingToken, MemBooks};

/// `Err` if `cmd`, just acknowledged, presented a token older than the
/// run's latest grant in `model` (the books before the command).
pub fn stale_lease_refused(model: &MemBooks, cmd: &Command) -> Result<(), String> {
    let mut cmd = cmd.clone();
    let Some((run, guard)) = cmd.guard_mut() else {
        return Ok(());
    };
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
    fn an_acknowledged_command_under_an_older_token_is_caught() {
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
        let under = |token| {
            Command::Transition(Transition {
                run: run_id("r"),
                guard: Guard {
                    worker: worker.clone(),
                    token: FencingToken(token),
                },
                to: RunState::Completed,
                expected_version: None,
                reason: String::new(),
            })
        };
        assert!(stale_lease_refused(&books, &under(2)).is_ok());
        assert!(stale_lease_refused(&books, &under(1)).is_err());
        let create = Command::CreateRun(CreateRun {
            run: run_id("s"),
            input_digest: digest_of(b"in"),
            agent_version: "a".into(),
            trace_id: "t".into(),
            parent: None,
        });
        assert!(
            stale_lease_refused(&books, &create).is_ok(),
            "takes no guard"
        );
    }
}
