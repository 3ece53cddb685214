//! Invariant: after every recovery the books equal the reference model fed
//! the acknowledged commands, with the one command cut off by the crash
//! either wholly landed or wholly absent, and then the leases the open
//! released: the directory lock proves the process that held them gone, so
//! a writable open releases every live lease of a run not over, at its
//! clock reading (docs/API.md, `Engine::open`).

use actum::books::{
    BATCH_COMMANDS_MAX, BooksWrite, Command, Guard, MemBooks, ReleaseLease, apply, decide,
};

/// The command a crash cut off, and the clock reading it was decided at.
pub type InFlight = (Command, u64);

/// Compares `found`, the books an open at `opened_ms` recovered, with
/// `model`; returns the model to continue with (the in-flight command
/// applied if it landed, and the open's releases), or `Err` describing the
/// first difference.
pub fn books_match_model(
    found: &MemBooks,
    model: &MemBooks,
    inflight: Option<&InFlight>,
    opened_ms: u64,
) -> Result<MemBooks, String> {
    let kept = opened(model, opened_ms)?;
    if *found == kept {
        return Ok(kept);
    }
    if let Some((cmd, now_ms)) = inflight {
        let mut landed = model.clone();
        if let Ok(decided) = decide(&landed, cmd, *now_ms) {
            for op in &decided.ops {
                apply(&mut landed as &mut dyn BooksWrite, op)
                    .map_err(|e| format!("the in-flight command does not apply: {e}"))?;
            }
            let landed = opened(&landed, opened_ms)?;
            if *found == landed {
                return Ok(landed);
            }
        }
    }
    let diff = kept
        .diff(found)
        .unwrap_or_else(|| "no table differs".to_string());
    Err(format!(
        "the recovered books differ from the model of acknowledged commands{} and the leases \
         released at open: first difference (model here, recovered there): {diff}",
        if inflight.is_some() {
            ", with or without the command in flight,"
        } else {
            ""
        }
    ))
}

/// The releases a writable open at `now_ms` commits on `books`: one
/// `ReleaseLease` for every live lease of a run not over, under the
/// lease's own guard, in run id order.
pub fn releases_at_open(books: &MemBooks, now_ms: u64) -> Vec<Command> {
    books
        .runs()
        .filter(|run| !run.state.is_terminal())
        .filter_map(|run| {
            let lease = run.lease.as_ref().filter(|l| l.is_live(now_ms))?;
            Some(Command::ReleaseLease(ReleaseLease {
                run: run.id.clone(),
                guard: Guard {
                    run: run.id.clone(),
                    worker: lease.worker.clone(),
                    token: lease.token,
                },
            }))
        })
        .collect()
}

/// `books` as a writable open at `now_ms` leaves them: with
/// [`releases_at_open`] decided and applied, in batches as large as a
/// batch may be.
pub fn opened(books: &MemBooks, now_ms: u64) -> Result<MemBooks, String> {
    let releases = releases_at_open(books, now_ms);
    let mut opened = books.clone();
    for batch in releases.chunks(BATCH_COMMANDS_MAX) {
        let decided = decide(&opened, &Command::Batch(batch.to_vec()), now_ms).map_err(|e| {
            format!("the model refuses the release of the leases held at open: {e}")
        })?;
        for op in &decided.ops {
            apply(&mut opened as &mut dyn BooksWrite, op)
                .map_err(|e| format!("a release of a lease held at open does not apply: {e}"))?;
        }
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{
        AcquireLease, BooksRead, CreateRun, EffectStatus, ToolClass, WorkerId, digest_of,
    };

    #[test]
    fn differing_books_are_caught_and_a_cut_off_command_may_land_whole() {
        let model = MemBooks::new();
        assert!(books_match_model(&model, &model, None, 7).is_ok());
        let extra = books_with(vec![entry(
            "r/pay/1",
            EffectStatus::Intended,
            ToolClass::Queryable,
        )]);
        let err = books_match_model(&extra, &model, None, 7).expect_err("an extra effect");
        assert!(err.contains("effect"), "{err}");
        let create = Command::CreateRun(CreateRun {
            run: run_id("r"),
            input_digest: digest_of(b"in"),
            agent_version: "a".into(),
            trace_id: "t".into(),
            parent: None,
            input: None,
        });
        let mut landed = model.clone();
        for op in decide(&landed, &create, 7).expect("accepted").ops {
            apply(&mut landed as &mut dyn BooksWrite, &op).expect("applies");
        }
        let inflight = (create, 7);
        assert_eq!(
            books_match_model(&landed, &model, Some(&inflight), 7),
            Ok(landed.clone())
        );
        assert_eq!(
            books_match_model(&model, &model, Some(&inflight), 7),
            Ok(model.clone())
        );
        assert!(books_match_model(&extra, &model, Some(&inflight), 7).is_err());
    }

    #[test]
    fn an_open_releases_every_live_lease_of_a_run_not_over() {
        let mut model = MemBooks::new();
        let mut run = |cmd: Command, now_ms: u64| {
            for op in decide(&model, &cmd, now_ms).expect("accepted").ops {
                apply(&mut model as &mut dyn BooksWrite, &op).expect("applies");
            }
        };
        for name in ["live", "expired"] {
            run(
                Command::CreateRun(CreateRun {
                    run: run_id(name),
                    input_digest: digest_of(name.as_bytes()),
                    agent_version: "a".into(),
                    trace_id: "t".into(),
                    parent: None,
                    input: None,
                }),
                0,
            );
        }
        let acquire = |name: &str, ttl_ms| {
            Command::AcquireLease(AcquireLease {
                run: run_id(name),
                worker: WorkerId::new("w").expect("a valid worker id"),
                ttl_ms,
            })
        };
        run(acquire("live", 1_000), 0);
        run(acquire("expired", 10), 0);
        let releases = releases_at_open(&model, 100);
        assert_eq!(releases.len(), 1, "{releases:?}");
        let kept = opened(&model, 100).expect("the releases apply");
        let live = kept.run(&run_id("live")).expect("kept");
        assert_eq!((live.lease.clone(), live.next_token.0), (None, 2));
        assert_eq!(kept.run(&run_id("expired")), model.run(&run_id("expired")));
        // The engine recovered the books and did not release: caught.
        let err = books_match_model(&model, &model, None, 100).expect_err("a lease kept");
        assert!(err.contains("released at open"), "{err}");
        assert_eq!(books_match_model(&kept, &model, None, 100), Ok(kept));
    }
}
