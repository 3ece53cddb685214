//! The audit journal of a run: what happened, why, when and under which
//! lease token, one entry per applied op that concerns the run. It is
//! derived from the ops alone, so replaying the log rebuilds it exactly.
//!
//! Invariant: a run's entries carry `seq` 1, 2, 3, ... in apply order.

use serde::{Deserialize, Serialize};

use super::ids::{FencingToken, RunId};
use super::op::Op;

/// One line of a run's journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the run's journal, from 1.
    pub seq: u64,
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// The lease token the change was made under (`None` for creation).
    pub token: Option<FencingToken>,
    /// What happened, in words.
    pub what: String,
    /// Why, as the agent or caller said (may be empty).
    pub why: String,
}

/// The journal line `op` contributes, and the run it belongs to; `None` for
/// ops that concern no single run (blob puts).
pub fn describe(op: &Op) -> Option<(RunId, AuditEntry)> {
    let entry = |at_ms, token, what: String, why: &str| AuditEntry {
        seq: 0,
        at_ms,
        token,
        what,
        why: why.to_string(),
    };
    let (run, line) = match op {
        Op::RunCreated { run } => (
            run.id.clone(),
            entry(
                run.created_ms,
                None,
                format!(
                    "created (agent {}, input {})",
                    run.agent_version,
                    run.input_digest.short()
                ),
                "",
            ),
        ),
        Op::RunTransitioned {
            run,
            from,
            to,
            at_ms,
            token,
            reason,
            ..
        } => (
            run.clone(),
            entry(*at_ms, Some(*token), format!("{from} -> {to}"), reason),
        ),
        Op::LeaseAcquired {
            run, lease, at_ms, ..
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(lease.token),
                format!(
                    "lease acquired by {} until {} ms",
                    lease.worker, lease.expires_ms
                ),
                "",
            ),
        ),
        Op::LeaseRenewed {
            run,
            token,
            expires_ms,
            at_ms,
            ..
        } => (
            run.clone(),
            entry(
                *at_ms,
                Some(*token),
                format!("lease renewed until {expires_ms} ms"),
                "",
            ),
        ),
        Op::LeaseReleased {
            run, token, at_ms, ..
        } => (
            run.clone(),
            entry(*at_ms, Some(*token), "lease released".to_string(), ""),
        ),
        Op::EffectIntended { entry: e } => (
            e.key.run().clone(),
            entry(
                e.intended_ms,
                Some(e.token),
                format!(
                    "intent {} via {} (args {})",
                    e.key,
                    e.tool,
                    e.args_digest.short()
                ),
                &e.rationale,
            ),
        ),
        Op::EffectResent { key, token, at_ms } => (
            key.run().clone(),
            entry(
                *at_ms,
                Some(*token),
                format!("resent {key} with the same key"),
                "",
            ),
        ),
        Op::EffectSettled {
            key,
            status,
            at_ms,
            token,
            note,
        } => (
            key.run().clone(),
            entry(
                *at_ms,
                Some(*token),
                format!("{key} {}", status.name()),
                note,
            ),
        ),
        Op::BlobPut { .. } => return None,
        Op::CheckpointSaved { meta } => (
            meta.run.clone(),
            entry(
                meta.saved_ms,
                Some(meta.token),
                format!(
                    "checkpoint v{} saved (schema {}, {} parts)",
                    meta.version,
                    meta.schema_version,
                    meta.parts.len()
                ),
                "",
            ),
        ),
        Op::DecisionRecorded { record } => (
            record.run.clone(),
            entry(
                record.recorded_ms,
                Some(record.token),
                format!(
                    "model call {} recorded (input {})",
                    record.position,
                    record.input_digest.short()
                ),
                &record.rationale,
            ),
        ),
    };
    Some((run, line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::books::ledger::ToolClass;
    use crate::books::run::RunState;
    use crate::books::state::BooksRead;
    use crate::books::test_support::*;

    #[test]
    fn the_journal_says_what_why_when_and_under_which_token() {
        let (mut b, g) = books_with_leased_run("r");
        b.now_ms += 5;
        b.ok(transition("r", &g, RunState::Running));
        let mut cmd = begin("r", "wire", &g, ToolClass::Queryable, b"usd 100 to mmf");
        if let Command::BeginEffect(c) = &mut cmd {
            c.rationale = "excess cash above policy threshold".to_string();
        }
        b.ok(cmd);
        let journal = b.mem.audit(&rid("r"), 1);
        let seqs: Vec<u64> = journal.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4]);
        assert_eq!(journal[0].token, None);
        assert!(journal[1].what.contains("lease acquired"));
        assert_eq!(journal[2].what, "pending -> running");
        assert_eq!(journal[2].at_ms, b.now_ms);
        assert_eq!(journal[3].token, Some(g.token));
        assert_eq!(journal[3].why, "excess cash above policy threshold");
        assert_eq!(b.mem.audit(&rid("r"), 4).len(), 1);
    }

    #[test]
    fn blob_puts_are_not_journaled() {
        let op = Op::BlobPut {
            digest: crate::books::digest::digest_of(b"x"),
            bytes: b"x".to_vec(),
        };
        assert!(describe(&op).is_none());
        let (b, _g) = books_with_leased_run("r");
        assert_eq!(b.mem.audit_len(&rid("r")), 2);
    }
}
