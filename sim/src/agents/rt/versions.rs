//! Agent versions in the runtime family: how a process deploys its
//! handlers, the operator who moves runs from version 1 to version 2
//! (`Engine::move_version`), and the checks that hold the runtime to it.
//!
//! A process first serves every kind at version 1. A process that comes
//! back after a crash may be a redeploy (and stays one): either version 2
//! registered as compatible with version 1 (one handler serves both), or
//! both versions side by side, each its own handler, as a team that keeps
//! the old code for the old runs deploys. Once version 2 is served, an
//! operator moves chosen runs of version 1 to version 2 at random points:
//! between events, and while a handler is in the middle of a call (the
//! engine must refuse that one: the holder's handler is version 1's).
//!
//! Checks: a handler acts, and returns, only on a run whose record names a
//! version it serves, for as long as it holds the run's live lease (so a
//! moved run is resumed only by a handler of its new version); every move
//! the engine answered is in the run's journal with the operator and the
//! reason, and the run stays at its new version.
//!
//! **Invariant:** every choice comes from the seed's `operator` generator.

use actum::books::{AuditWhat, FencingToken, RunId};
use actum::runtime::{Fail, RunCtx};

use super::agents::{REDEPLOYED as V2, VERSION as V1};
use super::world::Shared;

/// Invariant: a handler runs only on a run at a version it serves while it
/// holds the run's live lease.
pub const MOVED_RUN_NEW_HANDLER: &str =
    "a moved run is resumed only by a handler of its new version";
/// Invariant: an operator's move to another version is journaled.
pub const MOVE_JOURNALED: &str = "an operator's move to another version is journaled";

/// The operator's reason, journaled with every move.
pub const MOVE_REASON: &str = "version 2 handles this better";
/// Chance per event that the operator moves runs, per mille.
const MOVE_PER_MILLE: u64 = 40;
/// Chance per act, once version 2 is served, that the operator tries to
/// move the acting run, per mille.
const MOVE_MID_CALL_PER_MILLE: u64 = 150;

/// What a process serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deploy {
    /// Version 1 only.
    First,
    /// Version 2, registered as compatible with version 1.
    Compatible,
    /// Versions 1 and 2, each its own handler.
    SideBySide,
    /// Version 2 registered as compatible with version 1 by mistake: its
    /// research handler renames the searches from round 2 on, so a run of
    /// version 1 that got that far diverges from its journal when version
    /// 2 resumes it (the runtime must stop it before it acts, and pause it).
    Broken,
    /// The team's fix after a broken deploy: version 1's code for the runs
    /// of version 1, version 2's (with the renamed searches) beside it for
    /// the runs started at 2.
    RolledBack,
}

impl Deploy {
    /// The agent versions (`kind@version`) the handler registered at
    /// `version` serves in this deploy.
    pub fn served(self, kind: &str, version: &str) -> Vec<String> {
        let mut served = vec![format!("{kind}@{version}")];
        if matches!(self, Deploy::Compatible | Deploy::Broken) && version == V2 {
            served.push(format!("{kind}@{V1}"));
        }
        served
    }
}

/// A move the engine answered done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub run: RunId,
    pub from: String,
    pub to: String,
    /// The operator's reason, journaled.
    pub why: &'static str,
}

/// The operator's reason for moving a diverged run to the version whose
/// code wrote its journal.
pub const MOVE_BACK_REASON: &str = "its journal is the other version's";

/// Invariant: a handler that no longer matches its run's journal is
/// stopped before it acts.
pub const DIVERGED_NEVER_ACTS: &str = "a handler that diverged from its journal never acts";

/// Checks [`DIVERGED_NEVER_ACTS`] on the books' ledger: a research run's
/// searches (the acts it began, whatever became of them) follow one code,
/// version 1's (`search-<round>` in every round) or version 2's as the
/// broken deploy shipped it (`lookup-<round>` from round 2 on), never a mix
/// only a handler going on past a divergence begins.
pub fn diverged_never_acts(books: &actum::books::MemBooks) -> Result<(), String> {
    let mut runs: std::collections::BTreeMap<RunId, (Vec<String>, Vec<String>)> =
        std::collections::BTreeMap::new();
    for entry in books.effects() {
        if entry.key.kind() != actum::books::EffectKind::Act {
            continue;
        }
        let step = entry.key.step().as_str();
        let entry = runs.entry(entry.key.run().clone()).or_default();
        let late_search = step
            .strip_prefix("search-")
            .and_then(|r| r.parse::<u64>().ok())
            .is_some_and(|round| round >= 2);
        if late_search {
            entry.0.push(step.to_string());
        } else if step.starts_with("lookup-") {
            entry.1.push(step.to_string());
        }
    }
    for (run, (searches, lookups)) in runs {
        if !searches.is_empty() && !lookups.is_empty() {
            return Err(format!(
                "{run} began both {searches:?} (version 1's code) and {lookups:?} (version 2's): \
                 a handler acted on a journal it did not match"
            ));
        }
    }
    Ok(())
}

impl Shared {
    /// Runs `agent` as the handler that serves `served`, checking the run's
    /// version when it starts and when it returns.
    pub fn serve(
        &self,
        ctx: &mut RunCtx<'_>,
        served: &[String],
        agent: impl FnOnce(&mut RunCtx<'_>) -> Result<Vec<u8>, Fail>,
    ) -> Result<Vec<u8>, Fail> {
        let run = ctx.run_id().clone();
        self.check_version(&run, ctx.token(), served, "starts");
        self.state().serving.push((run.clone(), served.to_vec()));
        let returned = agent(ctx);
        let mut state = self.state();
        let at = state.serving.iter().rposition(|(r, _)| *r == run);
        if let Some(at) = at {
            state.serving.remove(at);
        }
        drop(state);
        self.check_version(&run, ctx.token(), served, "returns");
        returned
    }

    /// The versions the innermost handler of `run` serves, if one runs.
    pub fn serving(&self, run: &RunId) -> Option<Vec<String>> {
        let state = self.state();
        state
            .serving
            .iter()
            .rev()
            .find(|(r, _)| r == run)
            .map(|(_, served)| served.clone())
    }

    /// While the lease under `token` is live, the run's record names a
    /// version the handler serves; false, with the violation recorded, if
    /// not.
    pub fn check_version(
        &self,
        run: &RunId,
        token: FencingToken,
        served: &[String],
        when: &str,
    ) -> bool {
        let Some(engine) = self.engine() else {
            return true;
        };
        let now = self.clock.peek();
        let Ok(Some(record)) = engine.read(|books| Ok(books.run(run))) else {
            return true; // the process died reading
        };
        let holds = record
            .lease
            .as_ref()
            .is_some_and(|l| l.token == token && now < l.expires_ms);
        if holds && !served.contains(&record.agent_version) {
            self.violate(
                MOVED_RUN_NEW_HANDLER,
                format!(
                    "the handler of {served:?} {when} on {run} under token {}, which the books \
                     hold at {}",
                    token.0, record.agent_version
                ),
            );
            return false;
        }
        self.state().report.checks += 1;
        true
    }

    /// The operator moves `run` from version 1 to version 2, if it is at
    /// version 1; a move the engine answered is remembered for the end.
    pub fn move_to_v2(&self, run: &RunId, why: &str) {
        let Some(engine) = self.engine() else {
            return;
        };
        let Ok(Some(record)) = engine.run(run) else {
            return;
        };
        let Some(kind) = record.agent_version.strip_suffix(&format!("@{V1}")) else {
            return;
        };
        if record.state.is_terminal() || self.state().diverged.contains(run) {
            return; // a run that diverged once is left where it was put back
        }
        let to = format!("{kind}@{V2}");
        let moved = engine.move_version(run, &record.agent_version, &to, PERSON, MOVE_REASON);
        self.note(|| format!("an operator moves {run} to {to} ({why}): {moved:?}"));
        if let Ok(moved) = moved
            && moved.changed
        {
            let mut state = self.state();
            state.report.moves += 1;
            state.moves.push(Move {
                run: run.clone(),
                from: record.agent_version,
                to,
                why: MOVE_REASON,
            });
        }
    }

    /// After a rolled-back deploy, the operator moves `run`, paused because
    /// its version's handler cannot replay its journal, to the other version,
    /// whose code wrote that journal (a run of version 1 that the broken
    /// deploy drove on with version 2's code, or the other way round);
    /// true if the engine moved it.
    pub fn move_to_matching_version(&self, run: &RunId) -> bool {
        let Some(engine) = self.engine() else {
            return false;
        };
        let Ok(Some(record)) = engine.run(run) else {
            return false;
        };
        let to = if let Some(kind) = record.agent_version.strip_suffix(&format!("@{V2}")) {
            format!("{kind}@{V1}")
        } else if let Some(kind) = record.agent_version.strip_suffix(&format!("@{V1}")) {
            format!("{kind}@{V2}")
        } else {
            return false;
        };
        let moved = engine.move_version(run, &record.agent_version, &to, PERSON, MOVE_BACK_REASON);
        self.note(|| format!("an operator moves diverged {run} to {to}: {moved:?}"));
        let Ok(moved) = moved else {
            return false;
        };
        if moved.changed {
            let mut state = self.state();
            state.report.moves += 1;
            state.moves.push(Move {
                run: run.clone(),
                from: record.agent_version,
                to,
                why: MOVE_BACK_REASON,
            });
        }
        true
    }

    /// Inside an act: the operator may try to move the acting run (the
    /// engine must refuse: its holder is acting).
    pub fn maybe_move_mid_call(&self, run: &RunId) {
        let roll = {
            let mut state = self.state();
            if !state.serves_v2 || state.calm || state.nested {
                return;
            }
            state.operator.below(1000)
        };
        if roll < MOVE_MID_CALL_PER_MILLE {
            self.move_to_v2(run, "while its handler acts");
        }
    }

    /// Between events: the operator may move some runs of version 1.
    pub fn maybe_move_some(&self, live: &[RunId]) {
        let picked: Vec<RunId> = {
            let mut state = self.state();
            if !state.serves_v2 || state.operator.below(1000) >= MOVE_PER_MILLE {
                return;
            }
            let all = state.operator.below(4) == 0;
            live.iter()
                .filter(|_| all || state.operator.below(2) == 0)
                .cloned()
                .collect()
        };
        for run in picked {
            if self.dead() {
                return;
            }
            self.move_to_v2(&run, "chosen by the operator");
        }
    }
}

/// The operator's name in the journal.
pub const PERSON: &str = "sim-operator";

/// Every move the engine answered is in its run's journal, with the
/// operator and the reason, and the run is at its new version.
pub fn moves_are_journaled(engine: &actum::Engine, moves: &[Move]) -> Result<(), String> {
    for (i, m) in moves.iter().enumerate() {
        let audit = engine.audit(&m.run).map_err(|e| e.to_string())?;
        let journaled = audit.iter().any(|e| {
            matches!(&e.what, AuditWhat::VersionMoved { from, to, operator }
                if *from == m.from && *to == m.to && operator == PERSON)
                && e.why == m.why
        });
        if !journaled {
            return Err(format!(
                "{} was moved from {} to {}, and its journal does not say so",
                m.run, m.from, m.to
            ));
        }
        if moves[i + 1..].iter().any(|later| later.run == m.run) {
            continue; // moved again since: the last move says where it is
        }
        let at = engine
            .run(&m.run)
            .map_err(|e| e.to_string())?
            .map(|r| r.agent_version);
        if at.as_deref() != Some(m.to.as_str()) {
            return Err(format!(
                "{} was moved to {}, and the books hold it at {at:?}",
                m.run, m.to
            ));
        }
    }
    Ok(())
}
