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
