//! The reference model: what the store must hold, from the acknowledged
//! appends alone.
//!
//! Invariant: `state` is exactly the puts of the acknowledged batches
//! applied in LSN order; at most one batch (`inflight`) is unresolved, and a
//! recovery resolves it as wholly present or wholly absent.

use std::collections::BTreeMap;

use actum::Lsn;

/// One key written by one WAL record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Put {
    /// The key.
    pub key: u64,
    /// The value.
    pub value: Vec<u8>,
}

/// What the engine acknowledged, and the one batch whose fate is unknown.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// Every acknowledged put with its LSN, in order.
    history: Vec<(Lsn, Put)>,
    /// The state after every acknowledged put.
    state: BTreeMap<u64, Vec<u8>>,
    /// A batch whose append failed or was cut off: durable or not.
    inflight: Option<Vec<Put>>,
    /// The LSN the last acknowledged state checkpoint covers.
    checkpoint_lsn: Lsn,
    /// The first LSN of the last batch that landed.
    last_batch_first: Lsn,
}

impl Model {
    /// An empty model.
    pub fn new() -> Model {
        Model::default()
    }

    /// The last acknowledged LSN.
    pub fn last_lsn(&self) -> Lsn {
        self.history.last().map_or(Lsn::ZERO, |(lsn, _)| *lsn)
    }

    /// The state after every acknowledged put.
    pub fn state(&self) -> &BTreeMap<u64, Vec<u8>> {
        &self.state
    }

    /// The batch whose fate is unknown, if any.
    pub fn inflight(&self) -> Option<&[Put]> {
        self.inflight.as_deref()
    }

    /// The LSN the last acknowledged checkpoint covers.
    pub fn checkpoint_lsn(&self) -> Lsn {
        self.checkpoint_lsn
    }

    /// The state if the in-flight batch landed.
    pub fn state_with_inflight(&self) -> BTreeMap<u64, Vec<u8>> {
        let mut state = self.state.clone();
        for put in self.inflight.iter().flatten() {
            state.insert(put.key, put.value.clone());
        }
        state
    }

    /// The state after the acknowledged puts up to and including `lsn`.
    pub fn state_at(&self, lsn: Lsn) -> BTreeMap<u64, Vec<u8>> {
        let mut state = BTreeMap::new();
        for (at, put) in self.history.iter().take_while(|(at, _)| *at <= lsn) {
            assert!(*at <= lsn);
            state.insert(put.key, put.value.clone());
        }
        state
    }

    /// The first LSN of the last batch that landed (`Lsn::ZERO` if none).
    pub fn last_batch_first(&self) -> Lsn {
        self.last_batch_first
    }

    /// A batch is about to be appended; until acknowledged it is in flight.
    pub fn begin(&mut self, batch: Vec<Put>) {
        assert!(self.inflight.is_none(), "one batch in flight at a time");
        assert!(!batch.is_empty());
        self.inflight = Some(batch);
    }

    /// The in-flight batch was acknowledged with its last record at `last`.
    pub fn acknowledge(&mut self, last: Lsn) {
        let batch = self.inflight.take().expect("acknowledge without a batch");
        self.land(batch, last);
    }

    /// A recovery found the in-flight batch present (`true`) or absent.
    pub fn resolve(&mut self, landed: bool) {
        if let Some(batch) = self.inflight.take()
            && landed
        {
            let last = Lsn(self.last_lsn().0 + batch.len() as u64);
            self.land(batch, last);
        }
        assert!(self.inflight.is_none());
    }

    /// A state checkpoint covering `lsn` was acknowledged.
    pub fn checkpointed(&mut self, lsn: Lsn) {
        assert!(
            lsn <= self.last_lsn(),
            "checkpoint past the acknowledged log"
        );
        self.checkpoint_lsn = self.checkpoint_lsn.max(lsn);
    }

    fn land(&mut self, batch: Vec<Put>, last: Lsn) {
        let first = Lsn(self.last_lsn().0 + 1);
        self.last_batch_first = first;
        assert_eq!(
            last.0 + 1 - first.0,
            batch.len() as u64,
            "a batch's LSNs are contiguous after the last acknowledged one"
        );
        for (offset, put) in batch.into_iter().enumerate() {
            self.state.insert(put.key, put.value.clone());
            self.history.push((Lsn(first.0 + offset as u64), put));
        }
    }
}
