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
