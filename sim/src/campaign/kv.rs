//! The campaign's state machine: each WAL record puts one key, applied to
//! a redb table through the engine's `StateStore`.
//!
//! Invariant: `encode` and `decode` are inverse, and `decode` refuses any
//! record shorter than a key (a torn or garbled record must never apply).

use std::collections::BTreeMap;

use actum::{Error, Result};
use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::model::Put;

/// The table the campaign's keys live in.
pub(crate) const KV_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("kv");

/// The record bytes for `put`: the key (u64 little-endian), then the value.
pub(crate) fn encode(put: &Put) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(8 + put.value.len());
    bytes.extend_from_slice(&put.key.to_le_bytes());
    bytes.extend_from_slice(&put.value);
    bytes
}

/// The put a record holds.
pub(crate) fn decode(bytes: &[u8]) -> Result<Put> {
    let Some((key, value)) = bytes.split_first_chunk::<8>() else {
        return Err(Error::InvalidConfig {
            reason: format!("campaign record of {} bytes has no key", bytes.len()),
        });
    };
    Ok(Put {
        key: u64::from_le_bytes(*key),
        value: value.to_vec(),
    })
}

/// Applies one record inside the state store's transaction.
pub(crate) fn apply(txn: &WriteTransaction, record: &[u8]) -> Result<()> {
    let put = decode(record)?;
    let mut table = txn.open_table(KV_TABLE).map_err(redb_error)?;
    table
        .insert(put.key, put.value.as_slice())
        .map_err(redb_error)?;
    Ok(())
}

/// Every key and value in the state store.
pub(crate) fn read_all(txn: &redb::ReadTransaction) -> Result<BTreeMap<u64, Vec<u8>>> {
    let table = match txn.open_table(KV_TABLE) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(redb_error(e)),
    };
    let mut all = BTreeMap::new();
    for entry in table.iter().map_err(redb_error)? {
        let (key, value) = entry.map_err(redb_error)?;
        all.insert(key.value(), value.value().to_vec());
    }
    Ok(all)
}

fn redb_error(error: impl Into<redb::Error>) -> Error {
    Error::StateStore {
        file: "state.redb".into(),
        op: "campaign kv",
        source: Box::new(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_short_ones_are_refused() {
        let put = Put {
            key: 0xdead_beef,
            value: b"value".to_vec(),
        };
        assert_eq!(decode(&encode(&put)).expect("decode"), put);
        assert!(decode(&[1, 2, 3]).is_err());
    }
}
