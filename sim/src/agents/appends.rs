//! The agents' growing part in append form. Under checkpoint schema 1 the
//! `notes` part only grows (receipts, decisions, signals, a child's
//! result), so a worker that knows a checkpoint of its run whose notes its
//! own begin with saves the notes, at points drawn from the run's state, as
//! that checkpoint's notes followed by the new bytes ([`Part::append`]).
//! The base is the checkpoint the worker loaded or last saved and had
//! acknowledged, which may be several versions back when its step
//! follow-ups saved in between: the engine must take any earlier version.
//!
//! **Invariant ([`CHECKPOINT_LOADS_AS_SAVED`]):** a checkpoint a worker
//! loads holds the bytes of the model's checkpoint of that version, the
//! one the acknowledged commands (appends included) built.

use actum::books::{BooksRead, Command, MemBooks, Part, PartBase, RunId, digest_of, load_parts};

use super::workflow::AgentState;

/// The invariant a loaded checkpoint keeps.
pub const CHECKPOINT_LOADS_AS_SAVED: &str =
    "a checkpoint loads the bytes the acknowledged saves gave it";

/// The name of schema 1's growing part.
const NOTES_PART: &str = "notes";

/// A checkpoint of the run a worker knows holds `notes` in its notes part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotesBase {
    /// The checkpoint's version.
    pub version: u64,
    /// The notes it holds.
    pub notes: Vec<u8>,
}

impl NotesBase {
    /// The base a schema-1 checkpoint `version` with `parts` gives; `None`
    /// if it has no notes part (schema 2).
    pub fn of(version: u64, parts: &[Part]) -> Option<NotesBase> {
        let notes = parts.iter().find(|p| p.name == NOTES_PART)?;
        Some(NotesBase {
            version,
            notes: notes.bytes.clone(),
        })
    }
}

/// Whether the save of `state` puts its notes in append form: three
/// saves in four, drawn from the run and its state (not from the seed's
/// random stream, which the rest of the run draws from unchanged).
fn drawn(run: &RunId, state: &AgentState) -> bool {
    let mut key = run.as_str().as_bytes().to_vec();
    key.extend_from_slice(&state.cursor.to_le_bytes());
    key.extend_from_slice(&state.notes);
    !digest_of(&key).0[0].is_multiple_of(4)
}

/// `parts` with the notes part in append form on `base`, if there is a
/// base, the notes begin with its notes, and the draw says so; otherwise
/// `parts` unchanged.
pub fn in_append_form(
    mut parts: Vec<Part>,
    run: &RunId,
    state: &AgentState,
    base: Option<&NotesBase>,
) -> Vec<Part> {
    let Some(base) = base.filter(|b| state.notes.starts_with(&b.notes)) else {
        return parts;
    };
    if !drawn(run, state) {
        return parts;
    }
    for part in &mut parts {
        if part.name == NOTES_PART {
            assert_eq!(
                part.bytes, state.notes,
                "schema 1's notes part is the notes"
            );
            let new = state.notes[base.notes.len()..].to_vec();
            *part = Part::append(NOTES_PART, PartBase::new(base.version, NOTES_PART), new);
        }
    }
    parts
}

/// `parts` with the ones that change with every save asking to be held in
/// the checkpoint's metadata ([`Part::held_inline`]): the cursor, schema 2's
/// one `state` part, and, in the runs a draw of the run's name picks (about
/// half), the notes, so that appends meet bases held inline and bases in
/// blobs alike.
pub fn held(parts: Vec<Part>, run: &RunId) -> Vec<Part> {
    let notes_held = digest_of(run.as_str().as_bytes()).0[1].is_multiple_of(2);
    parts
        .into_iter()
        .map(|part| {
            let asks = match part.name.as_str() {
                "cursor" | "state" => true,
                NOTES_PART => notes_held,
                _ => false,
            };
            if asks { part.held_inline() } else { part }
        })
        .collect()
}

/// A tally of parts saved in append form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    /// Every part saved in append form.
    pub all: u64,
    /// Those that extend a base kept in blobs (not held inline in its
    /// checkpoint's metadata): the other path of an append.
    pub on_blobs: u64,
}

impl std::ops::Add for Appended {
    type Output = Appended;

    fn add(self, other: Appended) -> Appended {
        Appended {
            all: self.all + other.all,
            on_blobs: self.on_blobs + other.on_blobs,
        }
    }
}

/// The parts `cmd` saves in append form (itself, or inside a batch), by
/// the kind of base `model` keeps for them.
pub fn appended_parts(model: &MemBooks, cmd: &Command) -> Appended {
    match cmd {
        Command::SaveCheckpoint(save) => {
            let bases = save.parts.iter().filter_map(|p| p.extends.as_ref());
            bases
                .map(|base| {
                    let part = model.checkpoint_part(&save.run, base);
                    let on_blobs = part.is_some_and(|p| p.inline.is_none());
                    Appended {
                        all: 1,
                        on_blobs: u64::from(on_blobs),
                    }
                })
                .fold(Appended::default(), |a, b| a + b)
        }
        Command::Batch(cmds) => cmds
            .iter()
            .map(|c| appended_parts(model, c))
            .fold(Appended::default(), |a, b| a + b),
        _ => Appended::default(),
    }
}

/// Holds `parts`, which the engine loaded as checkpoint `version` of
/// `run`, to the model's checkpoint of that version. A version the model
/// lacks (a save in flight when the process died, landed) is not held.
pub fn loads_as_saved(
    model: &MemBooks,
    run: &RunId,
    version: u64,
    parts: &[Part],
) -> Result<(), String> {
    let Some(meta) = model.checkpoint_at(run, version) else {
        return Ok(());
    };
    let held = load_parts(model, meta).map_err(|e| format!("the model's checkpoint: {e}"))?;
    if held.parts == parts {
        return Ok(());
    }
    let sizes = |parts: &[Part]| -> Vec<(String, usize)> {
        parts
            .iter()
            .map(|p| (p.name.clone(), p.bytes.len()))
            .collect()
    };
    Err(format!(
        "checkpoint {version} of run {run} loads parts {:?} (name, bytes); the acknowledged \
         saves made it {:?}",
        sizes(parts),
        sizes(&held.parts)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::workflow::Workflow;

    #[test]
    fn notes_go_in_append_form_only_on_a_base_they_begin_with() {
        let run = Workflow::Research.run_id(0);
        let base = NotesBase {
            version: 3,
            notes: b"first".to_vec(),
        };
        // Draw states until one is drawn for the append form.
        let state = (0..16u32)
            .map(|cursor| AgentState {
                cursor,
                failing: None,
                notes: b"first, second".to_vec(),
            })
            .find(|s| drawn(&run, s))
            .expect("three in four are drawn");
        let parts = in_append_form(state.parts(Workflow::Research), &run, &state, Some(&base));
        let notes = parts.iter().find(|p| p.name == NOTES_PART).expect("notes");
        assert_eq!(notes.bytes, b", second");
        assert_eq!(notes.extends, Some(PartBase::new(3, NOTES_PART)));
        let other = NotesBase {
            version: 3,
            notes: b"other".to_vec(),
        };
        let whole = state.parts(Workflow::Research);
        assert_eq!(
            in_append_form(whole.clone(), &run, &state, Some(&other)),
            whole
        );
        assert_eq!(in_append_form(whole.clone(), &run, &state, None), whole);
    }
}
