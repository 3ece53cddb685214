//! The books' redb layout: one table per kind of record, keyed by the
//! record's own id, and the byte format of a row (docs/FORMAT.md, "State
//! store tables", pins both).
//!
//! A row is a CRC-32 (IEEE, `crc32fast`) of the postcard encoding, seeded
//! by the row's table, little-endian, then the encoding:
//!
//! ```text
//! [ crc: u32 LE ][ postcard(value) ]
//! ```
//!
//! redb checks its page checksums only when it repairs a file or is asked
//! to (`check_integrity`), so the engine checks every row it reads: a
//! flipped bit in a value, or a value of another table, is `Corrupt`, never
//! a wrong answer. Every value also carries its own key fields (a run its
//! id, an entry its key), which readers compare with the key they read it
//! under: the CRC covers the value, not the key, so a row under another key
//! is caught only there, and is `Corrupt` too. Blobs are stored raw: their key is the digest of their bytes, which
//! every load checks.
//!
//! **Invariant:** `decode_row(t, &encode_row(t, v)) == Ok(v)`, and any other
//! bytes, or a row of another table, is an `Err`.

use redb::TableDefinition;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::books::{AuditEntry, EffectKey, EffectKind, Run, claimable_from_ms, may_park};

/// A live run as an open files it (a row of [`LIVE_CLAIMS_TABLE`]): what
/// `HotState::load` would otherwise read the run's whole row for. Derived
/// from the run's row alone ([`LiveClaim::of`]), in the transaction that
/// writes it, so the two never disagree (an open in a build with debug
/// assertions checks that they do not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveClaim {
    /// The run's id (the key; a row under another key is `Corrupt`).
    pub run: String,
    /// Its agent version: the claim index is kept per version.
    pub agent_version: String,
    /// Whether it holds a lease: the open loads such a run whole, to
    /// release it.
    pub leased: bool,
    /// Whether it may wait out of memory for something from outside
    /// (`may_park`): its claimable instant is its open wait's deadline, in
    /// its wait book, which the open reads.
    pub parks: bool,
    /// When it may be claimed, from its row alone (`claimable_from_ms` with
    /// no wait); `None` for a run that parks or cannot be claimed.
    pub from_ms: Option<u64>,
}

impl LiveClaim {
    /// The claim row of the live run `run`.
    pub fn of(run: &Run) -> LiveClaim {
        LiveClaim {
            run: run.id.as_str().to_string(),
            agent_version: run.agent_version.clone(),
            leased: run.lease.is_some(),
            parks: may_park(run),
            from_ms: claimable_from_ms(run, None),
        }
    }
}

/// Runs, by run id.
pub const RUNS_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("books_runs");
/// The ids of the runs that are not terminal: what an open loads into
/// memory. The value is empty.
pub const LIVE_RUNS_TABLE: TableDefinition<&str, ()> = TableDefinition::new("books_live_runs");
/// What an open needs of each live run without reading its row, by run id:
/// a [`LiveClaim`] row, written with the run's row while the run is live
/// and removed with it from [`LIVE_RUNS_TABLE`]. Added in schema version
/// 15; a live run of a store written before, until its row is written
/// again, has none here and is read from its run row.
pub const LIVE_CLAIMS_TABLE: TableDefinition<&str, &[u8]> =
    TableDefinition::new("books_live_claims");
/// Ledger entries, by (run, step, kind code, attempt); see [`effect_row_key`].
pub const EFFECTS_TABLE: TableDefinition<(&str, &str, u8, u32), &[u8]> =
    TableDefinition::new("books_effects");
/// Content-addressed blobs, by digest (raw bytes, no row header).
pub const BLOBS_TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("books_blobs");
/// Checkpoint metadata, by (run, version).
pub const CHECKPOINTS_TABLE: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("books_checkpoints");
/// The decision journal, by (run, position).
pub const DECISIONS_TABLE: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("books_decisions");
/// The audit journal, by (run, seq).
pub const AUDIT_TABLE: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("books_audit");
/// Wait books (a run's waits and untaken signals), by run id. Added in
/// schema version 2.
pub const WAITS_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("books_waits");
/// Budget books (a run's limits, spending and open reservations), by run
/// id. Added in schema version 3.
pub const BUDGETS_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("books_budgets");
/// Saga books (the steps a run may have to undo, and its saga's end), by
/// run id. Added in schema version 6.
pub const SAGAS_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("books_sagas");
/// Resource lease books, by resource name. Added in schema version 6.
pub const RESOURCES_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("books_resources");
/// Shared keys, by key. Added in schema version 6.
pub const SHARED_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("books_shared");
/// How many runs reference each counted blob, by digest (a plain `u64`,
/// like the meta table's values). Added in schema version 6.
pub const BLOB_HOLDERS_TABLE: TableDefinition<&[u8], u64> =
    TableDefinition::new("books_blob_holders");
/// The counted blobs each run references, by run id. Added in schema
/// version 6.
pub const BLOB_REFS_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("books_blob_refs");
/// The runs that are over, by (the time they ended, run id): where a prune
/// finds its oldest candidates. The value is empty. Added in schema
/// version 6.
pub const ENDED_TABLE: TableDefinition<(u64, &str), ()> = TableDefinition::new("books_ended");

/// The byte an [`EffectKind`] is stored as in an effects row key: acts
/// before compensations, as [`EffectKey`]'s own order has them.
pub fn effect_kind_code(kind: EffectKind) -> u8 {
    match kind {
        EffectKind::Act => 0,
        EffectKind::Undo => 1,
    }
}

/// The effects row key of `key`: (run, step, kind code, attempt), ordered
/// exactly as [`EffectKey`] orders.
pub fn effect_row_key(key: &EffectKey) -> (&str, &str, u8, u32) {
    (
        key.run().as_str(),
        key.step().as_str(),
        effect_kind_code(key.kind()),
        key.attempt(),
    )
}

/// The table a row belongs to; its number seeds the row's checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowTable {
    /// [`RUNS_TABLE`].
    Run = 1,
    /// [`EFFECTS_TABLE`].
    Effect = 2,
    /// [`CHECKPOINTS_TABLE`].
    Checkpoint = 3,
    /// [`DECISIONS_TABLE`].
    Decision = 4,
    /// [`AUDIT_TABLE`].
    Audit = 5,
    /// [`WAITS_TABLE`].
    Waits = 6,
    /// [`BUDGETS_TABLE`].
    Budgets = 7,
    /// [`SAGAS_TABLE`].
    Sagas = 8,
    /// [`RESOURCES_TABLE`].
    Resources = 9,
    /// [`SHARED_TABLE`].
    Shared = 10,
    /// [`BLOB_REFS_TABLE`].
    BlobRefs = 11,
    /// [`AUDIT_TABLE`] since schema 12: the audit entries one checkpoint
    /// appended to one run, in one row ([`encode_audit_row`]).
    AuditChunk = 12,
    /// [`LIVE_CLAIMS_TABLE`] (schema 15).
    LiveClaim = 13,
}

/// Bytes of a row's checksum.
pub const ROW_CRC_BYTES: usize = 4;

fn row_crc(table: RowTable, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(table as u32);
    hasher.update(body);
    hasher.finalize()
}

/// The capacity a row's buffer starts with: most rows fit.
const ROW_ROOM_BYTES: usize = 256;

/// The bytes of `value` as a row of `table`.
pub fn encode_row<T: Serialize>(table: RowTable, value: &T) -> Vec<u8> {
    // The body is encoded behind room for its checksum: one buffer, no copy,
    // sized for the usual row (a ledger entry, a run, an audit line encode
    // to 60-120 bytes) so it is not grown byte by byte through six
    // reallocations (docs/PERFORMANCE.md, "The client's share").
    let mut room = Vec::with_capacity(ROW_ROOM_BYTES);
    room.resize(ROW_CRC_BYTES, 0);
    let mut row =
        postcard::to_extend(value, room).expect("encoding a books value into a Vec cannot fail");
    assert!(
        row.len() > ROW_CRC_BYTES,
        "a books value encodes to some bytes"
    );
    let crc = row_crc(table, &row[ROW_CRC_BYTES..]);
    row[..ROW_CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
    row
}

/// The value a row of `table` holds; `Err` says what is wrong with it.
pub fn decode_row<T: DeserializeOwned>(table: RowTable, row: &[u8]) -> Result<T, String> {
    let Some((crc, body)) = row.split_first_chunk::<ROW_CRC_BYTES>() else {
        return Err(format!(
            "the row is {} bytes, shorter than its checksum",
            row.len()
        ));
    };
    let expected = row_crc(table, body);
    if u32::from_le_bytes(*crc) != expected {
        return Err(format!(
            "the row's checksum {:08x} does not match its bytes ({expected:08x})",
            u32::from_le_bytes(*crc)
        ));
    }
    let (value, rest) = postcard::take_from_bytes(body).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!("{} bytes follow the value", rest.len()));
    }
    Ok(value)
}

/// The row of `entries`, audit entries of one run numbered without a gap,
/// stored under (run, the last one's seq): one row per run per checkpoint
/// instead of one per entry, the checkpoint's inserts being its cost
/// (docs/FORMAT.md, "State store tables").
pub fn encode_audit_row(entries: &[AuditEntry]) -> Vec<u8> {
    assert!(!entries.is_empty(), "an audit row holds an entry");
    assert!(
        entries.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "an audit row's entries are numbered without a gap"
    );
    encode_row(RowTable::AuditChunk, &entries)
}

/// The audit entries of the row stored under (run, `key_seq`) of
/// [`AUDIT_TABLE`]: a chunk (table 12, written since schema 12) or a
/// single entry (table 5, written before), told apart by the seed their
/// checksum matches. `Err` says what is wrong: a row of neither table, no
/// entry, a gap in the numbering, or a last seq other than the key's.
pub fn decode_audit_row(row: &[u8], key_seq: u64) -> Result<Vec<AuditEntry>, String> {
    let entries = if crc_matches(RowTable::AuditChunk, row) {
        decode_row::<Vec<AuditEntry>>(RowTable::AuditChunk, row)?
    } else {
        let one = decode_row::<AuditEntry>(RowTable::Audit, row).map_err(|e| {
            format!("neither a chunk of entries (table 12) nor one entry (table 5): {e}")
        })?;
        vec![one]
    };
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Err("an audit row that holds no entry".to_string());
    };
    if let Some(gap) = entries.windows(2).find(|w| w[1].seq != w[0].seq.wrapping_add(1)) {
        return Err(format!(
            "audit entry {} follows entry {} in one row",
            gap[1].seq, gap[0].seq
        ));
    }
    if last.seq != key_seq {
        return Err(format!(
            "a row holding audit entries {} to {} is stored under entry {key_seq}",
            first.seq, last.seq
        ));
    }
    Ok(entries)
}

/// Whether `row`'s checksum is that of a row of `table`.
fn crc_matches(table: RowTable, row: &[u8]) -> bool {
    row.split_first_chunk::<ROW_CRC_BYTES>()
        .is_some_and(|(crc, body)| u32::from_le_bytes(*crc) == row_crc(table, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> AuditEntry {
        AuditEntry {
            seq,
            at_ms: seq * 10,
            token: None,
            what: crate::books::AuditWhat::LeaseReleased,
            why: String::new(),
        }
    }

    #[test]
    fn an_audit_row_holds_many_entries_or_one_written_before_and_nothing_else() {
        let chunk = vec![entry(4), entry(5), entry(6)];
        let row = encode_audit_row(&chunk);
        assert_eq!(decode_audit_row(&row, 6), Ok(chunk.clone()));
        // The key is the last entry's seq, never another.
        assert!(decode_audit_row(&row, 4).expect_err("refused").contains("stored under entry 4"));
        // A one-entry row of an older store.
        let old = encode_row(RowTable::Audit, &entry(3));
        assert_eq!(decode_audit_row(&old, 3), Ok(vec![entry(3)]));
        // A row of another table, or damaged, is neither.
        let other = encode_row(RowTable::Decision, &chunk);
        assert!(decode_audit_row(&other, 6).expect_err("refused").contains("neither"));
        for bit in 0..row.len() * 8 {
            let mut bad = row.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_audit_row(&bad, 6).is_err(), "bit {bit}");
        }
        // A gap, or no entry at all, is refused even under a good checksum.
        let gap = encode_row(RowTable::AuditChunk, &vec![entry(4), entry(6)]);
        assert!(decode_audit_row(&gap, 6).expect_err("refused").contains("follows"));
        let empty = encode_row(RowTable::AuditChunk, &Vec::<AuditEntry>::new());
        assert!(decode_audit_row(&empty, 0).expect_err("refused").contains("no entry"));
    }

    #[test]
    fn rows_round_trip_and_any_flipped_bit_or_other_table_is_refused() {
        let value = (String::from("run-17"), 42u64);
        let row = encode_row(RowTable::Run, &value);
        assert_eq!(decode_row::<(String, u64)>(RowTable::Run, &row), Ok(value));
        assert!(decode_row::<(String, u64)>(RowTable::Effect, &row).is_err());
        for bit in 0..row.len() * 8 {
            let mut bad = row.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_row::<(String, u64)>(RowTable::Run, &bad).is_err(),
                "bit {bit}"
            );
        }
        assert!(decode_row::<(String, u64)>(RowTable::Run, &row[..3]).is_err());
    }
}
