//! Fuzz target `manifest_copy`: one manifest copy decoded from arbitrary
//! bytes.
//!
//! **Invariant:** `manifest::decode` never panics; a copy that decodes is
//! valid, is exactly what `encode` writes for it (bytes past the declared
//! length are slot padding and ignored), decodes again to an equal
//! `Manifest`, and stops decoding after any single-byte change.

use actum::manifest::{self, DecodeError};

/// Runs the `manifest_copy` target on `data`.
pub fn manifest_copy(data: &[u8]) {
    let Ok(manifest) = manifest::decode(data) else {
        return;
    };
    assert_eq!(
        manifest.validate(),
        Ok(()),
        "decode returned an invalid manifest"
    );
    let encoded = manifest::encode(&manifest);
    assert!(
        encoded.len() <= data.len(),
        "the copy is longer than its input"
    );
    assert_eq!(
        encoded.as_slice(),
        &data[..encoded.len()],
        "encode(decode(bytes)) differs from the bytes"
    );
    assert_eq!(
        manifest::decode(&encoded).as_ref(),
        Ok(&manifest),
        "decode(encode(manifest)) differs from the manifest"
    );
    // The byte after the copy picks the mask, so the fuzzer varies it too.
    let mask = data.get(encoded.len()).copied().unwrap_or(0).max(1);
    let mut damaged = encoded.clone();
    for at in 0..encoded.len() {
        damaged[at] ^= mask;
        let result = manifest::decode(&damaged);
        assert!(
            matches!(result, Err(DecodeError::Invalid { .. })),
            "byte {at} ^ {mask:#04x} of a valid copy gave {result:?}"
        );
        damaged[at] ^= mask;
    }
}
