//! The agents' checkpoint schemas and the migration between them. The
//! workers first write schema 1 ([`AgentState::parts`]: a `cursor` part of
//! the cursor, little-endian, and a failing flag; a `notes` part; the
//! static `plan`). At the first crash of the fault phase, or at the start
//! of the calm phase if no crash came before it, the process comes back
//! redeployed with code that writes schema 2: one `state` part holding the
//! cursor big-endian, then the failing flag, then the notes, beside the
//! same `plan`. The redeploy is all at once: every worker lives in the one
//! process, so no worker of schema 1 is left to meet a checkpoint of
//! schema 2 (one that did would get `SchemaMismatch` from `load_latest` and
//! let the run go). A worker of schema 2 loads with
//! `Engine::load_latest_migrating`, which hands it a run's checkpoint of
//! schema 1 to [`migrate`]; a parent of schema 2 reads its child's result
//! the same way.
//!
//! **Invariant ([`MIGRATION_KEEPS_STATE`]):** the state a migrated
//! checkpoint decodes to under schema 2 is the state its schema-1 parts
//! held, and no run saves a checkpoint of a schema older than its latest.

use actum::Error;
use actum::books::{BooksRead, Command, MemBooks, Part, RunId};

use super::workflow::{AgentState, Failing, Workflow};

/// The schema the workers write before the redeploy.
pub const SCHEMA_1: u32 = 1;
/// The schema the redeployed workers write.
pub const SCHEMA_2: u32 = 2;
/// The invariant a migration keeps.
pub const MIGRATION_KEEPS_STATE: &str =
    "a migrated checkpoint holds the state it was saved with, and no run's schema goes back";

/// The name of schema 2's one part for the cursor, flag and notes.
const STATE_PART: &str = "state";

fn failing_code(failing: Option<Failing>) -> u8 {
    match failing {
        None => 0,
        Some(Failing::Declined) => 1,
        Some(Failing::Unknown) => 2,
        Some(Failing::NotApproved) => 3,
        Some(Failing::ChildFailed) => 4,
    }
}

fn failing_of(code: u8) -> Option<Option<Failing>> {
    Some(match code {
        0 => None,
        1 => Some(Failing::Declined),
        2 => Some(Failing::Unknown),
        3 => Some(Failing::NotApproved),
        4 => Some(Failing::ChildFailed),
        _ => return None,
    })
}

/// The checkpoint parts of `state` under `schema`.
pub fn encode(schema: u32, state: &AgentState, workflow: Workflow) -> Vec<Part> {
    let v1 = state.parts(workflow);
    if schema == SCHEMA_1 {
        return v1;
    }
    let mut bytes = state.cursor.to_be_bytes().to_vec();
    bytes.push(failing_code(state.failing));
    bytes.extend_from_slice(&state.notes);
    let plan = v1.into_iter().find(|p| p.name == "plan");
    std::iter::once(Part {
        name: STATE_PART.into(),
        bytes,
        extends: None,
        inline: false,
    })
    .chain(plan)
    .collect()
}

/// The state parts of `schema` hold; `None` if they are not ones
/// [`encode`] wrote for it.
pub fn decode(schema: u32, parts: &[Part]) -> Option<AgentState> {
    match schema {
        SCHEMA_1 => AgentState::from_parts(parts),
        SCHEMA_2 => {
            let state = parts.iter().find(|p| p.name == STATE_PART)?;
            let (number, rest) = state.bytes.split_first_chunk::<4>()?;
            let (flag, notes) = rest.split_first()?;
            Some(AgentState {
                cursor: u32::from_be_bytes(*number),
                failing: failing_of(*flag)?,
                notes: notes.to_vec(),
            })
        }
        _ => None,
    }
}

/// Schema 2's parts from the parts of a checkpoint of `run` found at
/// schema `found`, working on the parts themselves (not through the
/// decoded state): the `cursor` part's number is turned big-endian and
/// joined by its flag and the notes; the plan is kept as it is.
/// `keeps_byte_order` is the planted `MigrationKeepsByteOrder`, which
/// copies the number's bytes unturned.
pub fn migrate(
    run: &RunId,
    found: u32,
    parts: Vec<Part>,
    keeps_byte_order: bool,
) -> actum::Result<Vec<Part>> {
    let refuse = || Error::SchemaMismatch {
        run: run.clone(),
        found,
        expected: SCHEMA_2,
    };
    if found != SCHEMA_1 {
        return Err(refuse());
    }
    let cursor = parts
        .iter()
        .find(|p| p.name == "cursor")
        .ok_or_else(refuse)?;
    let notes = parts
        .iter()
        .find(|p| p.name == "notes")
        .ok_or_else(refuse)?;
    let (number, flag) = cursor.bytes.split_first_chunk::<4>().ok_or_else(refuse)?;
    let mut number = *number;
    if !keeps_byte_order {
        number.reverse();
    }
    let mut bytes = number.to_vec();
    bytes.extend_from_slice(flag);
    bytes.extend_from_slice(&notes.bytes);
    let plan = parts.iter().find(|p| p.name == "plan").cloned();
    Ok(std::iter::once(Part {
        name: STATE_PART.into(),
        bytes,
        extends: None,
        inline: false,
    })
    .chain(plan)
    .collect())
}

/// The checkpoints `cmd` saves (itself, or inside a batch).
fn saves(cmd: &Command) -> Vec<(&RunId, u32)> {
    match cmd {
        Command::SaveCheckpoint(save) => vec![(&save.run, save.schema_version)],
        Command::Batch(cmds) => cmds.iter().flat_map(saves).collect(),
        _ => Vec::new(),
    }
}

/// True if `cmd` saves a checkpoint.
pub fn saves_checkpoint(cmd: &Command) -> bool {
    !saves(cmd).is_empty()
}

/// The second half of [`MIGRATION_KEEPS_STATE`], for an acknowledged
/// `cmd` over the books before it: no checkpoint it saves is of an older
/// schema than its run's latest.
pub fn schema_never_goes_back(books: &MemBooks, cmd: &Command) -> Result<(), String> {
    for (run, schema) in saves(cmd) {
        if let Some(latest) = books.checkpoint_latest(run)
            && latest.schema_version > schema
        {
            return Err(format!(
                "run {run} saved a checkpoint of schema {schema} after one of schema {} \
                 (version {})",
                latest.schema_version, latest.version
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> AgentState {
        AgentState {
            cursor: 3,
            failing: Some(Failing::Declined),
            notes: b"receipt".to_vec(),
        }
    }

    #[test]
    fn both_schemas_round_trip_and_differ() {
        for schema in [SCHEMA_1, SCHEMA_2] {
            let parts = encode(schema, &state(), Workflow::Treasury);
            assert_eq!(decode(schema, &parts), Some(state()), "schema {schema}");
        }
        let v1 = encode(SCHEMA_1, &state(), Workflow::Treasury);
        assert_eq!(decode(SCHEMA_2, &v1), None);
    }

    #[test]
    fn migration_keeps_the_state_unless_planted() {
        let run = Workflow::Treasury.run_id(0);
        let v1 = encode(SCHEMA_1, &state(), Workflow::Treasury);
        let migrated =
            migrate(&run, SCHEMA_1, v1.clone(), false).expect("a schema-1 checkpoint migrates");
        assert_eq!(migrated, encode(SCHEMA_2, &state(), Workflow::Treasury));
        let broken = migrate(&run, SCHEMA_1, v1, true).expect("a schema-1 checkpoint migrates");
        assert_ne!(decode(SCHEMA_2, &broken), Some(state()));
        assert!(migrate(&run, 3, Vec::new(), false).is_err());
    }
}
