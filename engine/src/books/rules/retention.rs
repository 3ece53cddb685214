//! Retention: a run that ended long enough ago leaves the books whole (its
//! record, ledger entries, checkpoints, decisions, audit, waits, budget and
//! saga), and the blobs no kept run references go with it, so a database
//! under a steady stream of runs stops growing.
//!
//! A run is **prunable** at `now` when it is terminal, ended at least the
//! policy's `older_than_ms` ago, its parent (if any) is over too (a parent
//! may still open its wait for the child's end), and the dedup window of
//! every ledger entry it holds has passed (an idempotent tool's key is kept
//! at least as long as the window it protects: a resend inside it must
//! still find its intent).
//!
//! A pruned run's name is free again. Its new life starts its lease tokens
//! at 1, as any new run does, and a resource hold of its earlier life does
//! not pass for its own (`live_hold` compares the hold's time with the
//! run's creation). Reuse a name only for new work, once every worker of
//! its earlier life has let go: prune after longer than the longest lease.
//!
//! Blobs are reference counted by run: a blob written by this build starts
//! with a holder count of 0 (`blob_holders`), and each run that first
//! references it (a checkpoint part, the stored arguments of an intent, a
//! receipt kept by digest) adds itself to its `BlobRefs` and one to the
//! count; pruning the run takes one off each, and a blob whose count
//! reaches 0 is deleted. A blob
//! without a count (written before counting began) is never deleted.
//!
//! **Invariant:** a blob is deleted only when no kept run references it; a
//! ledger entry is deleted only after its dedup window; nothing of a run
//! that is not over is ever pruned.

use crate::books::base::limits::PRUNE_RUNS_MAX;
use crate::books::records::ledger::EffectEntry;
use crate::books::records::run::Run;
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::Prune;
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Why a run named in a prune is kept.
pub(crate) fn kept_because(
    state: &dyn BooksRead,
    run: &Run,
    older_than_ms: u64,
    now_ms: u64,
) -> Option<String> {
    if !run.state.is_terminal() {
        return Some(format!("it is {}, not over", run.state));
    }
    let ended_for_ms = now_ms.saturating_sub(run.updated_ms);
    if ended_for_ms < older_than_ms {
        return Some(format!(
            "it ended {ended_for_ms} ms ago, less than the {older_than_ms} ms kept"
        ));
    }
    if let Some(parent) = run.parent.as_ref().and_then(|p| state.run(p))
        && !parent.state.is_terminal()
    {
        return Some(format!(
            "its parent run {} is {}, not over: it may still wait for its end",
            parent.id, parent.state
        ));
    }
    state
        .effects_of(&run.id)
        .iter()
        .find(|e| window_open(e, now_ms))
        .map(|e| {
            format!(
                "the dedup window of effect {} is still open: its key must still be found",
                e.key
            )
        })
}

/// True while an idempotent tool may still deduplicate `entry`'s key: a
/// resend inside the window must find the intent.
fn window_open(entry: &EffectEntry, now_ms: u64) -> bool {
    let Some(dedup_window_ms) = entry.tool_class.dedup_window_ms() else {
        return false;
    };
    let last_ms = entry
        .settled_ms
        .unwrap_or(entry.intended_ms)
        .max(entry.intended_ms);
    now_ms.saturating_sub(last_ms) < dedup_window_ms
}

/// Decides `Prune`: each named run that is prunable leaves the books
/// (`RunPruned`); the others are kept, with the reason. At most
/// [`PRUNE_RUNS_MAX`] runs per command.
pub(crate) fn decide_prune(state: &dyn BooksRead, cmd: &Prune, now_ms: u64) -> Result<Decided> {
    if cmd.runs.len() > PRUNE_RUNS_MAX {
        return Err(Error::TooLarge {
            what: "prune (in runs)".to_string(),
            size_bytes: cmd.runs.len() as u64,
            max_bytes: PRUNE_RUNS_MAX as u64,
        });
    }
    let mut ops = Vec::new();
    let mut pruned = Vec::new();
    let mut kept = Vec::new();
    for id in &cmd.runs {
        let Some(run) = state.run(id) else {
            kept.push((id.clone(), "it does not exist".to_string()));
            continue;
        };
        if pruned.contains(id) {
            continue;
        }
        match kept_because(state, &run, cmd.older_than_ms, now_ms) {
            Some(reason) => kept.push((id.clone(), reason)),
            None => {
                ops.push(Op::RunPruned {
                    run: id.clone(),
                    at_ms: now_ms,
                });
                pruned.push(id.clone());
            }
        }
    }
    assert_eq!(ops.len(), pruned.len());
    Ok(Decided {
        ops,
        answer: Answer::Pruned { pruned, kept },
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::Begun;
    use crate::books::Part;
    use crate::books::RunState;
    use crate::books::test_support::*;
    use crate::books::{Command, Guard, ToolClass};

    fn prune(runs: &[&str], older_than_ms: u64) -> Command {
        Command::Prune(Prune {
            runs: runs.iter().map(|r| rid(r)).collect(),
            older_than_ms,
        })
    }

    fn part(bytes: &[u8]) -> Vec<Part> {
        vec![Part {
            name: "state".into(),
            bytes: bytes.to_vec(),
            extends: None,
            inline: false,
        }]
    }

    /// Run `name`, leased to `worker`, that saved `shared` and its own part,
    /// made one act on `class`, and completed.
    fn finished_run(b: &mut Books, name: &str, worker: &str, class: ToolClass) -> Guard {
        b.ok(create(name, name.as_bytes()));
        let Answer::Leased {
            run: leased, token, ..
        } = b.ok(acquire(name, worker, LEASE_MS)).answer
        else {
            panic!("free")
        };
        let g = Guard {
            run: leased,
            worker: wid(worker),
            token,
        };
        b.ok(transition(name, &g, RunState::Running));
        b.ok(save(name, &g, 1, part(b"shared")));
        b.ok(save(name, &g, 1, part(name.as_bytes())));
        b.ok(decision(name, &g, 0, b"prompt", b"pay it"));
        let d = b.ok(begin(name, "pay", &g, class, b"args"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        b.ok(finish(&key, &g, confirmed(b"ok")));
        b.ok(transition(name, &g, RunState::Completed));
        g
    }

    #[test]
    fn a_pruned_run_leaves_whole_and_its_last_referenced_blobs_go_with_it() {
        let mut b = Books::default();
        finished_run(&mut b, "a", "w1", ToolClass::Queryable);
        finished_run(&mut b, "b", "w2", ToolClass::Queryable);
        let shared = crate::books::digest_of(b"shared");
        let own_a = crate::books::digest_of(b"a");
        assert_eq!(b.mem.blob_holders(&shared), Some(2));
        assert_eq!(b.mem.blob_holders(&own_a), Some(1));
        let d = b.ok(prune(&["a"], 0));
        assert!(matches!(&d.answer, Answer::Pruned { pruned, .. } if *pruned == [rid("a")]));
        let a = rid("a");
        assert!(b.mem.run(&a).is_none() && b.mem.effects_of(&a).is_empty());
        assert!(b.mem.checkpoint_latest(&a).is_none() && b.mem.audit_len(&a) == 0);
        assert!(b.mem.decision_count(&a) == 0 && b.mem.decision_at(&a, 0).is_none());
        assert_eq!(b.mem.decision_count(&rid("b")), 1, "b keeps its decision");
        // Its own blob is gone; the one b still references stays.
        assert!(!b.mem.blob_exists(&own_a) && b.mem.blob_holders(&own_a).is_none());
        assert!(b.mem.blob_exists(&shared));
        assert_eq!(b.mem.blob_holders(&shared), Some(1));
        b.ok(prune(&["b"], 0));
        assert!(!b.mem.blob_exists(&shared));
        // The name is free again: a new run of it starts afresh.
        b.ok(create("a", b"again"));
        assert_eq!(b.mem.run(&a).unwrap().version, 1);
    }

    /// Run `name` that confirmed one act with `receipt` and completed.
    fn run_with_receipt(b: &mut Books, name: &str, receipt: &[u8]) {
        b.ok(create(name, name.as_bytes()));
        let Answer::Leased {
            run: leased, token, ..
        } = b.ok(acquire(name, "w", LEASE_MS)).answer
        else {
            panic!("free")
        };
        let g = Guard {
            run: leased,
            worker: wid("w"),
            token,
        };
        b.ok(transition(name, &g, RunState::Running));
        let d = b.ok(begin(name, "pay", &g, ToolClass::Queryable, b"args"));
        let Answer::Begun(Begun::Proceed { key, .. }) = d.answer else {
            panic!("{:?}", d.answer)
        };
        b.ok(finish(&key, &g, confirmed(receipt)));
        b.ok(transition(name, &g, RunState::Completed));
    }

    #[test]
    fn runs_with_the_same_large_receipt_share_its_blob_until_the_last_is_pruned() {
        let mut b = Books::default();
        let receipt = vec![7u8; crate::books::RECEIPT_INLINE_BYTES_MAX + 1];
        let digest = crate::books::digest_of(&receipt);
        run_with_receipt(&mut b, "a", &receipt);
        run_with_receipt(&mut b, "b", &receipt);
        assert_eq!(b.mem.blob(&digest), Some(receipt.clone()));
        assert_eq!(b.mem.blob_holders(&digest), Some(2), "one blob, two runs");
        b.ok(prune(&["a"], 0));
        assert_eq!(b.mem.blob(&digest), Some(receipt), "b still names it");
        assert_eq!(b.mem.blob_holders(&digest), Some(1));
        b.ok(prune(&["b"], 0));
        assert!(!b.mem.blob_exists(&digest) && b.mem.blob_holders(&digest).is_none());
    }

    #[test]
    fn a_run_is_kept_while_live_young_or_a_dedup_window_is_open() {
        let mut b = Books::default();
        let window = ToolClass::Idempotent {
            dedup_window_ms: 5_000,
        };
        finished_run(&mut b, "done", "w1", window);
        b.ok(create("live", b"live"));
        let d = b.ok(prune(&["live", "done", "nobody"], 0));
        let Answer::Pruned { pruned, kept } = d.answer else {
            panic!()
        };
        assert!(pruned.is_empty());
        let reasons: Vec<&str> = kept.iter().map(|(_, r)| r.as_str()).collect();
        assert!(reasons[0].contains("not over"), "{reasons:?}");
        assert!(reasons[1].contains("dedup window"), "{reasons:?}");
        assert!(reasons[2].contains("does not exist"), "{reasons:?}");
        b.now_ms += 5_000;
        let young = b.ok(prune(&["done"], 60_000));
        assert!(young.ops.is_empty());
        b.now_ms += 60_000;
        assert_eq!(b.ok(prune(&["done"], 60_000)).ops.len(), 1);
    }

    #[test]
    fn a_child_is_kept_while_its_parent_is_not_over() {
        let (mut b, g) = books_with_running_run("parent");
        let mut child = create("kid", b"kid");
        if let Command::CreateRun(c) = &mut child {
            c.parent = Some(rid("parent"));
        }
        b.ok(child);
        let lease = b.ok(acquire("kid", "w2", LEASE_MS));
        let Answer::Leased {
            run: leased, token, ..
        } = lease.answer
        else {
            panic!("{:?}", lease.answer)
        };
        let kid = Guard {
            run: leased,
            worker: wid("w2"),
            token,
        };
        b.ok(transition("kid", &kid, RunState::Cancelled));
        let d = b.ok(prune(&["kid"], 0));
        let Answer::Pruned { kept, .. } = &d.answer else {
            panic!("{:?}", d.answer)
        };
        assert!(kept[0].1.contains("parent run parent"), "{kept:?}");
        b.ok(transition("parent", &g, RunState::Completed));
        assert_eq!(b.ok(prune(&["kid", "parent"], 0)).ops.len(), 2);
    }

    #[test]
    fn a_reused_name_does_not_inherit_its_earlier_lifes_resource_hold() {
        use crate::books::AcquireResource;
        use crate::books::ResourceId;
        let hold = |run: &str, g: &Guard| {
            Command::AcquireResource(AcquireResource {
                resource: ResourceId::new("customer:42").unwrap(),
                run: rid(run),
                guard: g.clone(),
                ttl_ms: 60_000,
            })
        };
        let (mut b, g) = books_with_running_run("r");
        let first = b.ok(hold("r", &g));
        b.ok(transition("r", &g, RunState::Completed));
        b.ok(prune(&["r"], 0));
        // The earlier life's hold has not expired; the new life of the
        // name must get a fresh grant, not a renewal of it.
        b.now_ms += 1;
        b.ok(create("r", b"again"));
        let lease = b.ok(acquire("r", "w1", LEASE_MS));
        let Answer::Leased {
            run: leased, token, ..
        } = lease.answer
        else {
            panic!("{:?}", lease.answer)
        };
        let g2 = Guard {
            run: leased,
            worker: wid("w1"),
            token,
        };
        b.ok(transition("r", &g2, RunState::Running));
        let second = b.ok(hold("r", &g2));
        let token_of = |d: &Decided| match &d.answer {
            Answer::ResourceGranted { token, renewed, .. } => (*token, *renewed),
            other => panic!("{other:?}"),
        };
        let (t1, _) = token_of(&first);
        let (t2, renewed) = token_of(&second);
        assert!(
            !renewed && t2 > t1,
            "{t1:?} then {t2:?} (renewed: {renewed})"
        );
    }
}
