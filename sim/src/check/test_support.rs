//! Builders for the checks' unit tests: world records and ledger entries
//! written out by hand, so each test states the violation it plants.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use actum::books::{
    BooksWrite, Digest, EffectEntry, EffectKey, EffectStatus, FencingToken, MemBooks, Run, RunId,
    RunState, ToolClass, digest_of,
};

use crate::world::{Application, Delivery};

pub(crate) fn key(text: &str) -> EffectKey {
    EffectKey::parse(text).unwrap()
}

pub(crate) fn app(seq: usize, key_text: &str, token: u64, receipt: &str) -> Application {
    Application {
        seq,
        tool: "bank.charge",
        key: key(key_text),
        token: FencingToken(token),
        args_digest: digest_of(b"args"),
        at_ms: 1_000 + seq as u64,
        receipt: receipt.as_bytes().to_vec(),
        hold: None,
    }
}

pub(crate) fn delivery(
    key_text: &str,
    token: u64,
    args: Option<&[u8]>,
    applied: Option<usize>,
) -> Delivery {
    Delivery {
        tool: "bank.charge",
        key: key(key_text),
        token: FencingToken(token),
        args_digest: args.map(digest_of),
        applied,
    }
}

pub(crate) fn entry(key_text: &str, status: EffectStatus, class: ToolClass) -> EffectEntry {
    EffectEntry {
        key: key(key_text),
        tool: "bank.charge".into(),
        tool_class: class,
        args_digest: Digest([0; 32]),
        rationale: String::new(),
        compensation: None,
        status,
        intended_ms: 1_000,
        token: FencingToken(1),
        resends: 0,
        settled_ms: Some(2_000),
    }
}

pub(crate) fn books_with(entries: Vec<EffectEntry>) -> MemBooks {
    let mut books = MemBooks::new();
    for e in entries {
        books.put_effect(e);
    }
    books
}

pub(crate) fn confirmed(receipt: &str) -> EffectStatus {
    EffectStatus::Confirmed {
        receipt: receipt.as_bytes().to_vec(),
    }
}

pub(crate) fn run_id(name: &str) -> RunId {
    RunId::new(name).unwrap()
}

/// The record of run `id` in `state` at version 3, never leased since token
/// 1 (`next_token` 2), with no live lease; tests set what they need.
pub(crate) fn run_record(id: &str, state: RunState) -> Run {
    Run {
        id: run_id(id),
        state,
        version: 3,
        input_digest: digest_of(b"in"),
        agent_version: "a".into(),
        trace_id: "t".into(),
        parent: None,
        created_ms: 0,
        updated_ms: 0,
        lease: None,
        next_token: FencingToken(2),
    }
}
