//! Invariant: a replayed receipt equals the world's. When the books answer
//! a step from the ledger (the step was done before a crash, a resume, a
//! re-run), the receipt they hand back is the one the world gave for that
//! key.

use actum::books::EffectKey;

use crate::world::Application;

/// `Err` unless the world applied `key` and answered `receipt`.
pub fn replayed_receipt_is_the_worlds(
    log: &[Application],
    key: &EffectKey,
    receipt: &[u8],
) -> Result<(), String> {
    match log.iter().find(|app| &app.key == key) {
        Some(app) if app.receipt == receipt => Ok(()),
        Some(app) => Err(format!(
            "the books replayed receipt {:?} for {key} but the world answered {:?}",
            String::from_utf8_lossy(receipt),
            String::from_utf8_lossy(&app.receipt)
        )),
        None => Err(format!(
            "the books replayed receipt {:?} for {key}, which the world never applied",
            String::from_utf8_lossy(receipt)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;

    #[test]
    fn a_replayed_receipt_the_world_never_gave_is_caught() {
        let log = [app(0, "r/pay/1", 1, "x")];
        assert!(replayed_receipt_is_the_worlds(&log, &key("r/pay/1"), b"x").is_ok());
        assert!(replayed_receipt_is_the_worlds(&log, &key("r/pay/1"), b"y").is_err());
        assert!(replayed_receipt_is_the_worlds(&log, &key("r/ship/1"), b"x").is_err());
    }
}
