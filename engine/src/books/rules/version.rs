//! An operator's move of a run to another agent version (`MoveVersion`):
//! the run keeps its state, journal, ledger and checkpoints; only the
//! agent version in its record changes, journaled with who and why, so the
//! next claim resumes it with the new version's handler.
//!
//! Invariant: a run is moved only while no worker holds a live lease on
//! it. A runtime reads a run's version once, when it claims it, and runs
//! that version's handler until the lease ends; moving the run under a
//! live lease would leave the old handler acting on a run the books say
//! is the new version's. So the move waits for the holder to let go
//! (park, end, pause, or lose its lease), and a handler holding a live
//! lease always runs at the version the record names.

use crate::books::base::limits::check_text;
use crate::books::records::run::current_token;
use crate::books::rules::checks::{check_operator, existing};
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::MoveVersion;
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Decides `MoveVersion` (see the module docs). A run at `to` already is
/// answered unchanged (a retried move is safe); over, at another version
/// than `from`, or leased live, it is refused naming the run.
pub(crate) fn decide_move_version(
    state: &dyn BooksRead,
    cmd: &MoveVersion,
    now_ms: u64,
) -> Result<Decided> {
    check_operator(
        "move to another version",
        &cmd.run,
        &cmd.operator,
        &cmd.reason,
    )?;
    check_text("agent version", &cmd.from)?;
    check_text("agent version", &cmd.to)?;
    let invalid = |what: &str| Error::InvalidCommand {
        reason: format!("a move of run {} to another version {what}", cmd.run),
    };
    if cmd.from.is_empty() || cmd.to.is_empty() {
        return Err(invalid("must name both versions"));
    }
    if cmd.from == cmd.to {
        return Err(invalid(&format!(
            "must name two different versions, not {} twice",
            cmd.to
        )));
    }
    let run = existing(state, &cmd.run)?;
    if run.state.is_terminal() {
        return Err(Error::RunTerminal {
            run: run.id.clone(),
            state: run.state,
        });
    }
    if run.agent_version == cmd.to {
        return Ok(Decided {
            ops: Vec::new(),
            answer: Answer::VersionMoved {
                run: run.id.clone(),
                agent_version: run.agent_version.clone(),
                version: run.version,
                changed: false,
            },
        });
    }
    if run.agent_version != cmd.from {
        return Err(Error::AgentVersionMismatch {
            run: run.id.clone(),
            expected: cmd.from.clone(),
            found: run.agent_version.clone(),
        });
    }
    if let Some(lease) = run.lease.as_ref().filter(|l| l.is_live(now_ms)) {
        return Err(Error::LeaseHeld {
            run: run.id.clone(),
            worker: lease.worker.clone(),
            expires_ms: lease.expires_ms,
        });
    }
    let version = run.version + 1;
    let op = Op::RunVersionMoved {
        run: run.id.clone(),
        from: run.agent_version.clone(),
        to: cmd.to.clone(),
        version,
        at_ms: now_ms,
        token: current_token(&run),
        operator: cmd.operator.clone(),
        reason: cmd.reason.clone(),
    };
    assert!(run.lease.as_ref().is_none_or(|l| !l.is_live(now_ms)));
    Ok(Decided {
        ops: vec![op],
        answer: Answer::VersionMoved {
            run: run.id.clone(),
            agent_version: cmd.to.clone(),
            version,
            changed: true,
        },
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::test_support::*;
    use crate::books::*;

    fn move_version(run: &str, from: &str, to: &str) -> Command {
        Command::MoveVersion(MoveVersion {
            run: rid(run),
            from: from.into(),
            to: to.into(),
            operator: "ops-anna".into(),
            reason: "v2 fixes the refund rounding".into(),
        })
    }

    /// A run created at `agent`, pending, with no lease.
    fn books_with_run_at(agent: &str) -> Books {
        let mut b = Books::default();
        let mut cmd = create("r", b"in");
        if let Command::CreateRun(c) = &mut cmd {
            c.agent_version = agent.into();
        }
        b.ok(cmd);
        b
    }

    #[test]
    fn a_move_changes_the_agent_version_and_journals_who_and_why() {
        let mut b = books_with_run_at("shop@1");
        let before = b.mem.run(&rid("r")).unwrap();
        let d = b.ok(move_version("r", "shop@1", "shop@2"));
        assert!(matches!(
            &d.answer,
            Answer::VersionMoved { agent_version, changed: true, version, .. }
                if agent_version == "shop@2" && *version == before.version + 1
        ));
        let after = b.mem.run(&rid("r")).unwrap();
        assert_eq!(after.agent_version, "shop@2");
        assert_eq!(
            (after.state, after.lease.clone()),
            (before.state, before.lease)
        );
        let audit = b.mem.audit(&rid("r"), 1);
        let last = audit.last().unwrap();
        assert!(matches!(
            &last.what,
            AuditWhat::VersionMoved { from, to, operator }
                if from == "shop@1" && to == "shop@2" && operator == "ops-anna"
        ));
        assert_eq!(last.why, "v2 fixes the refund rounding");
        assert!(last.what.to_string().contains("shop@1 to shop@2"));
    }

    #[test]
    fn moving_again_to_the_same_version_changes_nothing() {
        let mut b = books_with_run_at("shop@1");
        b.ok(move_version("r", "shop@1", "shop@2"));
        let before = b.mem.clone();
        let again = b.ok(move_version("r", "shop@1", "shop@2"));
        assert!(again.ops.is_empty());
        assert!(matches!(
            again.answer,
            Answer::VersionMoved { changed: false, .. }
        ));
        assert_eq!(b.mem, before);
    }

    #[test]
    fn a_run_at_another_version_than_the_move_expects_is_refused_naming_both() {
        let mut b = books_with_run_at("shop@3");
        let before = b.mem.clone();
        let err = b.run(move_version("r", "shop@1", "shop@2")).unwrap_err();
        assert!(
            matches!(&err, Error::AgentVersionMismatch { expected, found, .. }
                if expected == "shop@1" && found == "shop@3"),
            "{err}"
        );
        let said = err.to_string();
        assert!(said.contains("run r") && said.contains("shop@3"), "{said}");
        assert_eq!(b.mem, before);
    }

    #[test]
    fn a_run_that_is_over_is_refused() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(transition("r", &g, RunState::Running));
        b.ok(transition("r", &g, RunState::Completed));
        let agent = b.mem.run(&rid("r")).unwrap().agent_version;
        let before = b.mem.clone();
        let err = b.run(move_version("r", &agent, "other@2")).unwrap_err();
        assert!(matches!(err, Error::RunTerminal { .. }), "{err}");
        assert_eq!(b.mem, before);
    }

    #[test]
    fn a_run_leased_live_is_refused_until_its_lease_runs_out() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(transition("r", &g, RunState::Running));
        let agent = b.mem.run(&rid("r")).unwrap().agent_version;
        let before = b.mem.clone();
        let err = b.run(move_version("r", &agent, "other@2")).unwrap_err();
        assert!(
            matches!(&err, Error::LeaseHeld { worker, .. } if worker.as_str() == "w1"),
            "{err}"
        );
        assert_eq!(b.mem, before);
        // Once the lease ran out, the holder's handler can do nothing more
        // (its calls are refused), so the run may move.
        b.now_ms += LEASE_MS + 1;
        b.ok(move_version("r", &agent, "other@2"));
        assert_eq!(b.mem.run(&rid("r")).unwrap().agent_version, "other@2");
        // The old holder is refused as after any expiry.
        assert!(matches!(
            b.run(renew("r", &g, LEASE_MS)),
            Err(Error::LeaseLost { .. })
        ));
    }

    #[test]
    fn a_paused_or_waiting_run_without_a_lease_may_move() {
        let mut b = books_with_run_at("shop@1");
        b.ok(Command::Operate(Operate {
            run: rid("r"),
            action: OperatorAction::Pause,
            operator: "ops-anna".into(),
            reason: "hold".into(),
        }));
        b.ok(move_version("r", "shop@1", "shop@2"));
        assert_eq!(b.mem.run(&rid("r")).unwrap().state, RunState::Paused);
    }

    #[test]
    fn a_move_must_name_its_operator_and_two_versions() {
        let mut b = books_with_run_at("shop@1");
        let before = b.mem.clone();
        let mut unnamed = move_version("r", "shop@1", "shop@2");
        if let Command::MoveVersion(m) = &mut unnamed {
            m.operator.clear();
        }
        for cmd in [
            unnamed,
            move_version("r", "shop@1", "shop@1"),
            move_version("r", "", "shop@2"),
        ] {
            assert!(
                matches!(b.run(cmd.clone()), Err(Error::InvalidCommand { .. })),
                "{cmd:?}"
            );
        }
        assert!(matches!(
            b.run(move_version("nobody", "shop@1", "shop@2")),
            Err(Error::NotFound { .. })
        ));
        assert_eq!(b.mem, before);
    }
}
