//! Invariant: no world mutation under a stale token. A service never
//! applies a request whose token is lower than one it already saw for the
//! run, in an act or a query. Recomputed here from the arrival order, apart
//! from the services' own fence table. A tool that ignores tokens is not
//! held to it (the runtime waits out its requests' lifetime instead).

use std::collections::BTreeMap;

use actum::books::{FencingToken, RunId};

use crate::world::{Delivery, ignores_tokens};

/// `Err` naming the first application under a stale token.
pub fn world_refuses_stale_tokens(deliveries: &[Delivery]) -> Result<(), String> {
    let mut seen: BTreeMap<(&str, &RunId), FencingToken> = BTreeMap::new();
    // A tool that ignores tokens refuses none: the runtime, not the
    // service, keeps a stale request from landing there.
    for d in deliveries.iter().filter(|d| !ignores_tokens(d.tool)) {
        let highest = seen.entry((d.tool, d.key.run())).or_default();
        if d.applied.is_some() && d.token < *highest {
            return Err(format!(
                "{} applied {} under token {} after it had seen token {}",
                d.tool, d.key, d.token.0, highest.0
            ));
        }
        *highest = (*highest).max(d.token);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;

    #[test]
    fn an_application_under_a_token_below_one_seen_is_caught() {
        let fine = [
            delivery("r/pay/1", 1, None, None),
            delivery("r/pay/1", 2, Some(b"a"), Some(0)),
        ];
        assert!(world_refuses_stale_tokens(&fine).is_ok());
        let stale = [
            delivery("r/pay/1", 2, None, None),
            delivery("r/pay/1", 1, Some(b"a"), Some(0)),
        ];
        assert!(world_refuses_stale_tokens(&stale).is_err());
    }
}
