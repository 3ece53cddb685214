//! `BooksWrite` for [`RedbBooks`] over a write transaction: the puts that
//! `apply` makes, as redb inserts in the transaction `StateStore::apply`
//! commits together with the record's LSN.
//!
//! **Invariant:** a write through a read-only view is a bug (asserted); a
//! failed insert is recorded in the view and surfaces from
//! [`RedbBooks::finish`], so the transaction is dropped, not committed.

use redb::TableDefinition;

use super::books_tables::{RedbBooks, Txn};
use super::rows::{
    AUDIT_TABLE, BLOBS_TABLE, BUDGETS_TABLE, CHECKPOINTS_TABLE, DECISIONS_TABLE, EFFECTS_TABLE,
    LIVE_RUNS_TABLE, RUNS_TABLE, RowTable, WAITS_TABLE, effect_row_key, encode_row,
};
use crate::books::{
    AuditEntry, BooksRead, BooksWrite, BudgetBook, CheckpointMeta, DecisionRecord, Digest,
    EffectEntry, Run, RunId, WaitBook,
};

impl RedbBooks<'_> {
    fn assert_writable(&self, what: &str) {
        assert!(
            matches!(self.txn, Txn::Write(_)),
            "{what} through a read-only view of the books"
        );
    }

    /// Inserts `value` under `key` in `def`, recording any failure.
    fn insert<K: redb::Key + 'static>(
        &self,
        def: TableDefinition<K, &[u8]>,
        key: K::SelfType<'_>,
        value: &[u8],
        op: &'static str,
    ) {
        let Txn::Write(txn) = self.txn else {
            panic!("{op} through a read-only view of the books");
        };
        let outcome = txn
            .open_table(def)
            .map_err(|e| e.to_string())
            .and_then(|mut table| {
                table
                    .insert(key, value)
                    .map(|_| Some(()))
                    .map_err(|e| e.to_string())
            });
        self.settle(outcome, op);
    }
}

impl RedbBooks<'_> {
    /// Keeps [`LIVE_RUNS_TABLE`] in step with `run`: listed while it is not
    /// terminal, removed when it is.
    fn mark_live(&self, run: &Run) {
        let Txn::Write(txn) = self.txn else {
            panic!("mark_live through a read-only view of the books");
        };
        let outcome = txn
            .open_table(LIVE_RUNS_TABLE)
            .map_err(|e| e.to_string())
            .and_then(|mut table| {
                let id = run.id.as_str();
                let done = if run.state.is_terminal() {
                    table.remove(id).map(|_| ())
                } else {
                    table.insert(id, ()).map(|_| ())
                };
                done.map(Some).map_err(|e| e.to_string())
            });
        self.settle(outcome, "index live run");
    }
}

impl BooksWrite for RedbBooks<'_> {
    fn put_run(&mut self, run: Run) {
        self.assert_writable("put_run");
        let bytes = encode_row(RowTable::Run, &run);
        self.insert(RUNS_TABLE, run.id.as_str(), &bytes, "write run");
        self.mark_live(&run);
    }

    fn put_effect(&mut self, entry: EffectEntry) {
        self.assert_writable("put_effect");
        let bytes = encode_row(RowTable::Effect, &entry);
        self.insert(
            EFFECTS_TABLE,
            effect_row_key(&entry.key),
            &bytes,
            "write effect",
        );
    }

    fn put_blob(&mut self, digest: Digest, bytes: Vec<u8>) {
        self.assert_writable("put_blob");
        // Content addressed: a second put of the same digest is a no-op.
        if self.blob_exists(&digest) {
            return;
        }
        self.insert(BLOBS_TABLE, digest.0.as_slice(), &bytes, "write blob");
    }

    fn put_checkpoint(&mut self, meta: CheckpointMeta) {
        self.assert_writable("put_checkpoint");
        let bytes = encode_row(RowTable::Checkpoint, &meta);
        let key = (meta.run.as_str(), meta.version);
        self.insert(CHECKPOINTS_TABLE, key, &bytes, "write checkpoint");
    }

    fn put_decision(&mut self, record: DecisionRecord) {
        self.assert_writable("put_decision");
        let bytes = encode_row(RowTable::Decision, &record);
        let key = (record.run.as_str(), record.position);
        self.insert(DECISIONS_TABLE, key, &bytes, "write decision");
    }

    fn push_audit(&mut self, run: &RunId, entry: AuditEntry) {
        self.assert_writable("push_audit");
        assert_eq!(
            entry.seq,
            self.audit_len(run) + 1,
            "audit of run {run} out of sequence"
        );
        let bytes = encode_row(RowTable::Audit, &entry);
        let key = (run.as_str(), entry.seq);
        self.insert(AUDIT_TABLE, key, &bytes, "write audit entry");
        self.audit_lens.borrow_mut().insert(run.clone(), entry.seq);
    }

    fn put_budget(&mut self, book: BudgetBook) {
        self.assert_writable("put_budget");
        let bytes = encode_row(RowTable::Budgets, &book);
        self.insert(
            BUDGETS_TABLE,
            book.run.as_str(),
            &bytes,
            "write budget book",
        );
    }

    fn put_waits(&mut self, book: WaitBook) {
        self.assert_writable("put_waits");
        let bytes = encode_row(RowTable::Waits, &book);
        self.insert(WAITS_TABLE, book.run.as_str(), &bytes, "write wait book");
    }
}
