//! Compensations (saga steps): undoing a step's confirmed act is an effect of
//! its own, on the step's `Undo` side, with its own derived key
//! (`run/step/undo/n`), its own durable intent before the act and its own
//! outcome, decided by the undoing tool's class exactly like an act. When it
//! confirms, the act becomes `Compensated` in the same decision
//! (`effect.rs`).
//!
//! Invariants: only a confirmed act that registered a compensation can be
//! undone; the tool, class and arguments come from that registration (the
//! caller cannot change them after a crash); an act is undone at most once.

use crate::books::base::digest::digest_of;
use crate::books::base::ids::{EffectKey, EffectKind};
use crate::books::base::limits::check_text;

use crate::books::records::run::RunState;
use crate::books::rules::checks::{check_live, check_running, existing};
use crate::books::rules::effect::{Intent, begin_side};
use crate::books::vocabulary::answer::Decided;
use crate::books::vocabulary::command::BeginCompensation;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Decides `BeginCompensation`: the undo side of `cmd.step`.
pub(crate) fn decide_begin_compensation(
    state: &dyn BooksRead,
    cmd: &BeginCompensation,
    now_ms: u64,
) -> Result<Decided> {
    check_text("compensation rationale", &cmd.rationale)?;
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    // A running run may undo a step itself; a compensating one's saga does.
    if run.state != RunState::Compensating {
        check_running(&run, "begin a compensation")?;
    }
    let act = state
        .latest_effect(&cmd.run, &cmd.step, EffectKind::Act)
        .ok_or_else(|| Error::NotFound {
            what: format!(
                "an act of step {} of run {} to compensate",
                cmd.step, cmd.run
            ),
        })?;
    if !act.status.is_confirmed() && !act.status.is_compensated() {
        return Err(Error::EffectNotOpen {
            key: act.key,
            status: act.status.name(),
        });
    }
    let compensation = act
        .compensation
        .as_ref()
        .ok_or_else(|| Error::InvalidCommand {
            reason: format!("effect {} registered no compensation to run", act.key),
        })?;
    let latest = state.latest_effect(&cmd.run, &cmd.step, EffectKind::Undo);
    let undone = act.status.is_compensated();
    let undo_confirmed = latest.as_ref().is_some_and(|e| e.status.is_confirmed());
    if undone != undo_confirmed {
        return Err(Error::Inconsistent {
            what: format!(
                "act {} is {} but its latest compensation is {}",
                act.key,
                act.status.name(),
                latest.as_ref().map_or("absent", |e| e.status.name())
            ),
        });
    }
    let intent = Intent {
        tool: &compensation.tool,
        class: compensation.class,
        args_digest: digest_of(&compensation.args),
        rationale: &cmd.rationale,
        compensation: None,
    };
    let first = EffectKey::of_kind(cmd.run.clone(), cmd.step.clone(), EffectKind::Undo, 1)?;
    begin_side(state, latest, first, &intent, cmd.guard.token, now_ms)
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
    use crate::books::{Answer, Begun};
    use crate::books::{Compensation, Outcome, ToolClass};

    fn with_compensation(cmd: Command, class: ToolClass) -> Command {
        let Command::BeginEffect(mut c) = cmd else {
            panic!("not a begin")
        };
        c.compensation = Some(Compensation {
            tool: "bank.unsweep".into(),
            args: b"usd 100 back".to_vec(),
            class,
        });
        Command::BeginEffect(c)
    }

    /// Books with run `r` whose step `sweep` is confirmed with a
    /// compensation of `class` registered.
    fn swept(class: ToolClass) -> (Books, Guard, EffectKey) {
        let (mut b, g) = books_with_running_run("r");
        let d = b.ok(with_compensation(
            begin("r", "sweep", &g, ToolClass::Queryable, b"usd 100"),
            class,
        ));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        b.ok(finish(&key, &g, confirmed(b"sw-1")));
        (b, g, key)
    }

    fn proceed_key(d: &Decided) -> EffectKey {
        match &d.answer {
            Answer::Begun(Begun::Proceed { key, .. }) => key.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_compensation_is_an_effect_with_its_own_key_intent_first() {
        let (mut b, g, act) = swept(ToolClass::Queryable);
        let d = b.ok(compensate("r", "sweep", &g));
        let undo = proceed_key(&d);
        assert_eq!(undo.encode(), "r/sweep/undo/1");
        let entry = b.mem.effect(&undo).unwrap();
        assert_eq!(entry.status, EffectStatus::Intended);
        assert_eq!(entry.tool, "bank.unsweep");
        assert_eq!(entry.args_digest, digest_of(b"usd 100 back"));
        // The act stands until the compensation confirms.
        assert!(matches!(
            b.mem.effect(&act).unwrap().status,
            EffectStatus::Confirmed { .. }
        ));
        let d = b.ok(finish(&undo, &g, confirmed(b"unsw-1")));
        assert_eq!(d.ops.len(), 2, "the undo and the act settle together");
        assert_eq!(
            b.mem.effect(&act).unwrap().status,
            EffectStatus::Compensated {
                receipt: b"sw-1".to_vec(),
                compensation_receipt: b"unsw-1".to_vec()
            }
        );
        // Again: the stored compensation receipt, nothing new.
        let again = b.ok(compensate("r", "sweep", &g));
        assert!(again.ops.is_empty());
        assert_eq!(
            again.answer,
            Answer::Begun(Begun::Replay {
                key: undo,
                receipt: b"unsw-1".to_vec()
            })
        );
        let forward = b.ok(with_compensation(
            begin("r", "sweep", &g, ToolClass::Queryable, b"usd 100"),
            ToolClass::Queryable,
        ));
        assert_eq!(
            forward.answer,
            Answer::Begun(Begun::Compensated { key: act })
        );
    }

    #[test]
    fn an_interrupted_compensation_is_resumed_by_its_tool_class() {
        let window = ToolClass::Idempotent {
            dedup_window_ms: 1_000,
        };
        let (mut b, g, _act) = swept(window);
        let undo = proceed_key(&b.ok(compensate("r", "sweep", &g)));
        // Crash before the outcome: the same key is resent, never a new one.
        let d = b.ok(compensate("r", "sweep", &g));
        assert!(matches!(&d.answer, Answer::Begun(Begun::Resend { key, .. }) if key == &undo));
        b.now_ms += 1_000;
        let d = b.ok(compensate("r", "sweep", &g));
        assert!(matches!(&d.answer, Answer::Begun(Begun::Unknown { key, .. }) if key == &undo));
    }

    #[test]
    fn a_retryably_failed_compensation_gets_a_new_attempt() {
        let (mut b, g, _act) = swept(ToolClass::NotIdempotent);
        let undo = proceed_key(&b.ok(compensate("r", "sweep", &g)));
        let failed = Outcome::Failed {
            retryable: true,
            reason: "bank busy".into(),
        };
        b.ok(finish(&undo, &g, failed));
        let next = proceed_key(&b.ok(compensate("r", "sweep", &g)));
        assert_eq!(next.encode(), "r/sweep/undo/2");
    }

    #[test]
    fn only_a_confirmed_act_with_a_registration_can_be_compensated() {
        let (mut b, g) = books_with_running_run("r");
        assert!(matches!(
            b.run(compensate("r", "sweep", &g)),
            Err(Error::NotFound { .. })
        ));
        let d = b.ok(with_compensation(
            begin("r", "sweep", &g, ToolClass::Queryable, b"usd 100"),
            ToolClass::Queryable,
        ));
        let key = proceed_key(&d);
        assert!(matches!(
            b.run(compensate("r", "sweep", &g)),
            Err(Error::EffectNotOpen { .. })
        ));
        let d = b.ok(begin("r", "post", &g, ToolClass::Queryable, b"entry"));
        b.ok(finish(&proceed_key(&d), &g, confirmed(b"p")));
        assert!(matches!(
            b.run(compensate("r", "post", &g)),
            Err(Error::InvalidCommand { .. })
        ));
        b.ok(finish(&key, &g, confirmed(b"s")));
        b.ok(compensate("r", "sweep", &g));
    }
}
