//! Invariant: the payload of a resend equals its intent's. Every act
//! request carrying a key carries the arguments the first one did.

use std::collections::BTreeMap;

use actum::books::{Digest, EffectKey};

use crate::world::Delivery;

/// `Err` naming the first key sent with other arguments.
pub fn resends_carry_the_same_payload(deliveries: &[Delivery]) -> Result<(), String> {
    let mut first: BTreeMap<&EffectKey, Digest> = BTreeMap::new();
    for d in deliveries {
        let Some(digest) = d.args_digest else {
            continue;
        };
        let original = *first.entry(&d.key).or_insert(digest);
        if original != digest {
            return Err(format!(
                "{} was sent with args {} and resent with args {}",
                d.key,
                original.short(),
                digest.short()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;

    #[test]
    fn a_resend_with_other_arguments_is_caught() {
        let same = [
            delivery("r/pay/1", 1, Some(b"a"), Some(0)),
            delivery("r/pay/1", 2, Some(b"a"), None),
        ];
        assert!(resends_carry_the_same_payload(&same).is_ok());
        let other = [
            delivery("r/pay/1", 1, Some(b"a"), Some(0)),
            delivery("r/pay/1", 2, Some(b"b"), None),
        ];
        assert!(resends_carry_the_same_payload(&other).is_err());
    }
}
