//! Invariant: after every recovery the books equal the reference model fed
//! the acknowledged commands, with the one command cut off by the crash
//! either wholly landed or wholly absent.

use actum::books::{BooksWrite, Command, MemBooks, apply, decide};

/// The command a crash cut off, and the clock reading it was decided at.
pub type InFlight = (Command, u64);

/// Compares `found` with `model`; returns the model to continue with (the
/// in-flight command applied if it landed), or `Err` describing the first
/// difference.
pub fn books_match_model(
    found: &MemBooks,
    model: &MemBooks,
    inflight: Option<&InFlight>,
) -> Result<MemBooks, String> {
    if found == model {
        return Ok(model.clone());
    }
    if let Some((cmd, now_ms)) = inflight {
        let mut landed = model.clone();
        if let Ok(decided) = decide(&landed, cmd, *now_ms) {
            for op in &decided.ops {
                apply(&mut landed as &mut dyn BooksWrite, op)
                    .map_err(|e| format!("the in-flight command does not apply: {e}"))?;
            }
            if *found == landed {
                return Ok(landed);
            }
        }
    }
    let diff = model
        .diff(found)
        .unwrap_or_else(|| "no table differs".to_string());
    Err(format!(
        "the recovered books differ from the model of acknowledged commands{}: first \
         difference (model here, recovered there): {diff}",
        if inflight.is_some() {
            ", with or without the command in flight"
        } else {
            ""
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{CreateRun, EffectStatus, ToolClass, digest_of};

    #[test]
    fn differing_books_are_caught_and_a_cut_off_command_may_land_whole() {
        let model = MemBooks::new();
        assert!(books_match_model(&model, &model, None).is_ok());
        let extra = books_with(vec![entry(
            "r/pay/1",
            EffectStatus::Intended,
            ToolClass::Queryable,
        )]);
        let err = books_match_model(&extra, &model, None).expect_err("an extra effect");
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
            books_match_model(&landed, &model, Some(&inflight)),
            Ok(landed.clone())
        );
        assert_eq!(
            books_match_model(&model, &model, Some(&inflight)),
            Ok(model.clone())
        );
        assert!(books_match_model(&extra, &model, Some(&inflight)).is_err());
    }
}
