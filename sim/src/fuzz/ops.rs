//! Fuzz target `ops`: the books' op codec (postcard) on arbitrary bytes.
//!
//! **Invariant:** `Op::decode` and `decode_ops` never panic, and whatever
//! they return re-encodes to bytes that decode to an equal value. (Postcard
//! accepts some non-minimal varints, so the re-encoding need not equal the
//! input byte for byte; the value is what must survive.) The re-encoding
//! is no longer than the input, but for checkpoint metadata read in an
//! older layout, which is written in layout 4: from layout 1, an empty
//! marker and a layout byte more, and an empty chunk list and an empty
//! inline option per part; from layouts 2 and 3, the inline option.

use actum::books::{Op, decode_ops, encode_ops};

/// The bytes an op's re-encoding may add to its input: what layout 4 adds
/// to checkpoint metadata of layout 1.
fn growth_bytes_max(op: &Op) -> usize {
    match op {
        Op::CheckpointSaved { meta } => 2 + 2 * meta.parts.len(),
        _ => 0,
    }
}

/// Runs the `ops` target on `data`.
pub fn ops(data: &[u8]) {
    if let Ok(op) = Op::decode(data) {
        let encoded = op.encode();
        assert!(
            encoded.len() <= data.len() + growth_bytes_max(&op),
            "an op re-encoded longer than its input: {op:?}"
        );
        let again = Op::decode(&encoded);
        assert!(
            again.as_ref().is_ok_and(|again| again == &op),
            "decode(encode(op)) gave {again:?} for {op:?}"
        );
    }
    if let Ok(ops) = decode_ops(data) {
        let encoded = encode_ops(&ops);
        let again = decode_ops(&encoded);
        assert!(
            again.as_ref().is_ok_and(|again| again == &ops),
            "decode_ops(encode_ops(ops)) gave {again:?} for {ops:?}"
        );
        // Each op of a list is an op on its own as well.
        for op in &ops {
            let alone = Op::decode(&op.encode());
            assert!(
                alone.as_ref().is_ok_and(|alone| alone == op),
                "an op from a list does not round-trip alone: {op:?}"
            );
        }
    }
}
