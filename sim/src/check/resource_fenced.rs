//! Invariant: a resource is held by one run at a time, as the world sees
//! it. Every act sent under a resource hold carries the hold's token; in
//! the order the world applied them, a resource's tokens never go down,
//! and one token is only ever one run's. So no act of a stale holder (a
//! paused worker whose hold ran out and went to another run) landed after
//! the new holder's, and no two runs acted under one hold.

use std::collections::BTreeMap;

use actum::books::{FencingToken, ResourceId, RunId};

use crate::world::Application;

/// `Err` naming the first application that breaks the rule.
pub fn resource_holds_are_fenced(log: &[Application]) -> Result<(), String> {
    let mut last: BTreeMap<&ResourceId, (FencingToken, &RunId)> = BTreeMap::new();
    for app in log {
        let Some((resource, token)) = &app.hold else {
            continue;
        };
        let run = app.key.run();
        if let Some((seen, holder)) = last.get(resource) {
            if token < seen {
                return Err(format!(
                    "{} landed under token {token} of {resource} after an act under token {seen}: \
                     a stale holder acted",
                    app.key
                ));
            }
            if token == seen && *holder != run {
                return Err(format!(
                    "runs {holder} and {run} both acted under token {token} of {resource}"
                ));
            }
        }
        last.insert(resource, (*token, run));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;

    fn held(seq: usize, key: &str, token: u64) -> Application {
        let customer = ResourceId::new("customer:1").expect("a valid name");
        Application {
            hold: Some((customer, FencingToken(token))),
            ..app(seq, key, 1, "ok")
        }
    }

    #[test]
    fn growing_tokens_of_one_run_each_pass() {
        let log = [
            held(0, "a/ship/1", 1),
            held(1, "a/mail/1", 1),
            held(2, "b/ship/1", 2),
        ];
        assert_eq!(resource_holds_are_fenced(&log), Ok(()));
    }

    #[test]
    fn a_stale_holder_or_a_shared_token_is_caught() {
        let stale = [held(0, "b/ship/1", 2), held(1, "a/ship/1", 1)];
        assert!(resource_holds_are_fenced(&stale).is_err_and(|e| e.contains("stale holder")),);
        let shared = [held(0, "a/ship/1", 2), held(1, "b/ship/1", 2)];
        assert!(resource_holds_are_fenced(&shared).is_err_and(|e| e.contains("both acted")));
    }
}
