//! The agent step on a peer: the durable work of actum's `agent_step/step` as three durable
//! commits of the same rows, so every system in the `agent_step` bench does three durable
//! commits and writes the same bytes per step.
//!
//! actum's step is `Engine::step` (the intent committed, a simulated act with no I/O, the
//! outcome committed) then `save_checkpoint` of a 10 KiB state with one 1 KiB part changed (the
//! new part and the metadata naming all ten parts, committed together). [`AgentStep`] commits,
//! per step: the intent (one 256-byte row), then the outcome (one 256-byte row), then the changed
//! part ([`STEP_PART_BYTES`]) with the checkpoint metadata ([`CHECKPOINT_META_BYTES`]) as one
//! transaction of two rows: [`STEP_BYTES`] bytes in [`STEP_COMMITS`] durable commits.
//!
//! **Invariant:** step `ticket` writes rows `STEP_ROWS * ticket ..` and no others, so no row
//! overwrites another; the changed part's bytes are new for every step (derived from the ticket).

use crate::agent::{STEP_PART_BYTES, STEP_STATE_PARTS, part_bytes};
use crate::{DurableRows, PeerWork, RECORD_BYTES, record};

/// Bytes per part of the checkpoint metadata: a 32-byte digest, an 8-byte size and the part's
/// name with its length, about what actum's `PartRef` takes (docs/FORMAT.md).
pub const CHECKPOINT_META_BYTES_PER_PART: usize = 64;
/// Bytes of the checkpoint metadata naming every part of the state.
pub const CHECKPOINT_META_BYTES: usize = STEP_STATE_PARTS * CHECKPOINT_META_BYTES_PER_PART;
/// Bytes a peer writes per step: intent, outcome, the changed part and the metadata.
pub const STEP_BYTES: usize = 2 * RECORD_BYTES + STEP_PART_BYTES + CHECKPOINT_META_BYTES;
/// Durable commits per step, as actum's `agent_step/step` makes them.
pub const STEP_COMMITS: u64 = 3;
/// Rows (keys) per step: intent, outcome, part, metadata.
pub const STEP_ROWS: u64 = 4;

const _: () = assert!(STEP_BYTES == 2_176);
const _: () = assert!(STEP_ROWS == STEP_COMMITS + 1);

/// The agent step on a peer ([`crate::OnPeer`]; see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct AgentStep;

impl PeerWork for AgentStep {
    fn commit<L: DurableRows>(&self, peer: &L, writer: &mut L::Writer<'_>, ticket: u64) {
        let first = ticket
            .checked_mul(STEP_ROWS)
            .expect("tickets stay far below 2^62");
        peer.commit_rows(writer, first, &[&record(first)]);
        // The act: no I/O, as in actum's bench.
        peer.commit_rows(writer, first + 1, &[&record(first + 1)]);
        let part = part_bytes(first + 2, STEP_PART_BYTES);
        let meta = part_bytes(first + 3, CHECKPOINT_META_BYTES);
        assert_eq!(part.len() + meta.len() + 2 * RECORD_BYTES, STEP_BYTES);
        peer.commit_rows(writer, first + 2, &[&part, &meta]);
    }

    fn summary(&self) -> Option<String> {
        Some(format!(
            "{STEP_COMMITS} commits and {STEP_BYTES} bytes per step"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group_commit::GroupCommitFile;
    use crate::harness::run_writers;
    use crate::peers::{Redb, SqliteShared};
    use crate::raw::PreallocatedFile;
    use crate::{DurableLog, OnPeer};

    #[test]
    fn a_step_on_a_database_is_four_rows() {
        let redb = OnPeer::new(AgentStep, Redb::new());
        run_writers(&redb, 4, 0, 10);
        assert_eq!(redb.peer.len(), 10 * STEP_ROWS);
        let sqlite = OnPeer::new(AgentStep, SqliteShared::new());
        run_writers(&sqlite, 4, 0, 10);
        assert_eq!(sqlite.peer.len(), 10 * STEP_ROWS);
    }

    #[test]
    fn a_step_on_a_raw_file_is_three_durable_commits() {
        let ceiling = OnPeer::new(AgentStep, GroupCommitFile::new());
        run_writers(&ceiling, 4, 0, 10);
        assert_eq!(ceiling.peer.counts().0, 10 * STEP_COMMITS);
        let summary = ceiling.summary().expect("a summary");
        assert!(
            summary.ends_with("3 commits and 2176 bytes per step"),
            "{summary}"
        );
        let floor = OnPeer::new(AgentStep, PreallocatedFile::new());
        run_writers(&floor, 2, 0, 10);
        assert_eq!(floor.peer.written_bytes(), 10 * STEP_BYTES as u64);
    }
}
