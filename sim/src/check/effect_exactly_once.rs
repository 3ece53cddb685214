//! Invariant: once the runs are over, every effect the books call done
//! happened exactly once, under its key: a confirmed (or compensated) entry
//! has exactly one application of its key in the world, with the receipt
//! the books hold; a failed entry has none.

use std::collections::BTreeMap;

use actum::books::{BooksRead, EffectKey, EffectStatus, MemBooks};

use crate::world::Application;

/// `Err` naming the first entry whose world record disagrees.
pub fn effect_applied_exactly_once(books: &MemBooks, log: &[Application]) -> Result<(), String> {
    let mut by_key: BTreeMap<&EffectKey, Vec<&Application>> = BTreeMap::new();
    for app in log {
        by_key.entry(&app.key).or_default().push(app);
    }
    for entry in books.effects() {
        let apps = by_key.get(&entry.key).map_or(&[][..], Vec::as_slice);
        // A receipt kept by digest is held to the world with its bytes.
        let entry = entry
            .clone()
            .with_bytes(&|d| books.blob(d))
            .map_err(|e| e.to_string())?;
        let receipt = match &entry.status {
            EffectStatus::Confirmed { receipt } | EffectStatus::Compensated { receipt, .. } => {
                receipt
            }
            EffectStatus::Failed { reason, .. } if !apps.is_empty() => {
                return Err(format!(
                    "effect {} is recorded failed ({reason}) but the world applied it {} times",
                    entry.key,
                    apps.len()
                ));
            }
            _ => continue,
        };
        let [app] = apps else {
            return Err(format!(
                "effect {} is recorded {} but the world applied it {} times",
                entry.key,
                entry.status.name(),
                apps.len()
            ));
        };
        if &app.receipt != receipt {
            return Err(format!(
                "effect {} holds receipt {:?} but the world answered {:?}",
                entry.key,
                String::from_utf8_lossy(receipt),
                String::from_utf8_lossy(&app.receipt)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::ToolClass;

    #[test]
    fn a_confirmed_entry_needs_exactly_one_application_with_its_receipt() {
        let books = books_with(vec![entry("r/pay/1", confirmed("x"), ToolClass::Queryable)]);
        assert!(effect_applied_exactly_once(&books, &[app(0, "r/pay/1", 1, "x")]).is_ok());
        assert!(effect_applied_exactly_once(&books, &[]).is_err());
        assert!(effect_applied_exactly_once(&books, &[app(0, "r/pay/1", 1, "y")]).is_err());
        let failed = EffectStatus::Failed {
            retryable: false,
            reason: "no".into(),
        };
        let books = books_with(vec![entry("r/pay/1", failed, ToolClass::Queryable)]);
        assert!(effect_applied_exactly_once(&books, &[app(0, "r/pay/1", 1, "x")]).is_err());
    }
}
