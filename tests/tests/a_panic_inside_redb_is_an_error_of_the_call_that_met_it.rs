//! redb checks its page checksums only when asked (`check_integrity`), so
//! a damaged byte in a page it reads can make redb itself panic: an index
//! past a slice, an `unreachable!`. The engine's guard turns such a panic
//! into `Error::StateStore` of the call that met it, naming `state.redb`,
//! with a `RedbPanicked` source; redb's own state is then in doubt, so
//! every later call answers `Halted` with that error as its cause, and
//! dropping the engine does not let redb walk the damage again (its close
//! could panic while unwinding, which aborts). With `verify_state_on_open`
//! the same damage is refused at open.
//!
//! The clean image carries the page sums its close wrote, and reads are
//! checked against them whatever the option says, so the damage reaches
//! redb only once they are gone (a crash, or a store copied without them):
//! the search removes them. With them, the same damage is an error of the
//! read that meets it, and no panic at all.
//!
//! The damage is searched for, not hard-coded: one byte of the state store
//! of the `state_store` fuzz target's clean image set to 0xff, at offsets
//! spread over the file, until a read meets a panic inside redb. The test
//! fails if no offset does, so it cannot pass without reaching the guard.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use std::sync::Arc;

use actum::engine::Engine;
use actum::{Error, RedbPanicked};
use actum_sim::fuzz::state_store::{DIR, clock, damaged, read_everything};

/// Offsets tried, at most.
const CANDIDATES: u32 = 400;

/// The `state_store` input: the clean image (shape 0), one edit setting
/// the byte at `offset` of `state.redb` to 0xff.
fn input(offset: u32) -> Vec<u8> {
    let mut out = vec![0, 6, 0];
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&[0, 0xff]);
    out
}

/// Removes the page sums the clean image's close wrote.
fn without_sums(storage: &Arc<dyn actum::Storage>) {
    let sums = std::path::Path::new(DIR).join("state.redb.sums");
    storage.remove_file(&sums).unwrap();
}

fn redb_panicked(error: &Error) -> Option<&RedbPanicked> {
    match error {
        Error::StateStore { source, file, .. } if file.ends_with("state.redb") => {
            source.downcast_ref::<RedbPanicked>()
        }
        _ => None,
    }
}

#[test]
fn a_panic_inside_redb_is_a_state_store_error_and_verify_on_open_refuses_the_damage() {
    let mut found = None;
    for k in 0..CANDIDATES {
        // Spread over the file's pages, at a different place in each page.
        let offset = k * 4099 + 37;
        let mut db = damaged(&input(offset));
        assert!(
            db.options.verify_state_on_open,
            "the default checks the pages"
        );
        db.options.verify_state_on_open = false;
        without_sums(&db.storage);
        let Ok(engine) = Engine::open_with(db.storage, clock(), DIR, db.options) else {
            continue;
        };
        let errors = read_everything(&engine);
        let Some(panicked) = errors.iter().find_map(redb_panicked) else {
            // Reads met no panic, yet the store is damaged where nobody
            // checked: redb's close (a commit) could panic twice and abort
            // the test. Let the engine go unclosed, as a crash would.
            std::mem::forget(engine);
            continue;
        };
        eprintln!("offset {offset}: {panicked}");
        // Every later call answers Halted, the panic as its cause.
        let after = engine.run(&actum::books::RunId::new("no-such-run").unwrap());
        match after {
            Err(Error::Halted {
                cause: Some(cause), ..
            }) => assert!(redb_panicked(&cause).is_some(), "{cause}"),
            other => panic!("expected Halted after a panic inside redb, got {other:?}"),
        }
        let closed = engine.close();
        assert!(matches!(closed, Err(Error::Halted { .. })), "{closed:?}");
        found = Some(offset);
        break;
    }
    let offset = found.expect("some damaged byte of the state store made redb panic");
    // The same damage with the page sums of the clean close, even with the
    // check off: the read that meets it fails, naming the file and the
    // block, and redb never sees the bytes.
    let mut db = damaged(&input(offset));
    db.options.verify_state_on_open = false;
    if let Ok(engine) = Engine::open_with(Arc::clone(&db.storage), clock(), DIR, db.options) {
        let errors = read_everything(&engine);
        assert!(
            errors.iter().all(|e| redb_panicked(e).is_none()),
            "{errors:?}"
        );
        let named = errors.iter().any(|e| {
            let text = e.to_string();
            text.contains("state.redb") && text.contains("does not match the checksum kept for it")
        });
        assert!(
            named,
            "the damaged block is an error of its read: {errors:?}"
        );
        drop(engine);
    }
    // The same damage without the sums, opened with the defaults: every
    // page checksum checked first.
    let db = damaged(&input(offset));
    without_sums(&db.storage);
    let opened = Engine::open_with(Arc::clone(&db.storage), clock(), DIR, db.options);
    match opened {
        Err(Error::Corrupt { file, .. } | Error::StateStore { file, .. }) => {
            assert!(file.ends_with("state.redb"), "{}", file.display());
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("verify_state_on_open let damage at offset {offset} through"),
    }
}
