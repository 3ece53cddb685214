//! Invariant: no application without a durable intent. Online: when a
//! worker sends an act, the engine's durable LSN has reached the intent's
//! record. After every recovery and at the end: every act the world applied
//! has its intent in the recovered books (what the disk kept, not what the
//! engine said).

use actum::Lsn;
use actum::books::{BooksRead, MemBooks};
use actum::engine::EffectCtx;

use crate::world::Application;

/// `Err` if `ctx`'s act is about to start before its intent is durable.
pub fn intent_durable_before_act(durable: Lsn, ctx: &EffectCtx) -> Result<(), String> {
    if durable >= ctx.intent_lsn {
        return Ok(());
    }
    Err(format!(
        "the act of {} started with its intent at {} but the log durable only to {}",
        ctx.key, ctx.intent_lsn, durable
    ))
}

/// `Err` naming the first application whose key the books never intended.
pub fn applications_have_intents(books: &MemBooks, log: &[Application]) -> Result<(), String> {
    for app in log {
        if books.effect(&app.key).is_none() {
            return Err(format!(
                "the world applied {} (via {}, token {}) but the recovered books hold no \
                 intent for it",
                app.key, app.tool, app.token.0
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{FencingToken, ToolClass};

    #[test]
    fn an_act_before_its_intent_is_durable_or_without_one_is_caught() {
        let ctx = EffectCtx {
            key: key("r/pay/1"),
            token: FencingToken(1),
            resend: false,
            intent_lsn: Lsn(7),
            act_receipt: None,
        };
        assert!(intent_durable_before_act(Lsn(7), &ctx).is_ok());
        assert!(intent_durable_before_act(Lsn(6), &ctx).is_err());
        let books = books_with(vec![entry("r/pay/1", confirmed("x"), ToolClass::Queryable)]);
        assert!(applications_have_intents(&books, &[app(0, "r/pay/1", 1, "x")]).is_ok());
        assert!(applications_have_intents(&books, &[app(0, "r/ship/1", 1, "x")]).is_err());
    }
}
