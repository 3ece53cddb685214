//! Layer 5: the rules, one file per domain, each deciding its commands.

pub(crate) mod budget;
pub(crate) mod checkpoint;
pub(crate) mod checks;
pub(crate) mod compensation;
pub(crate) mod coord;
pub(crate) mod decision;
pub(crate) mod effect;
pub(crate) mod lease;
pub(crate) mod retention;
pub(crate) mod retry;
pub(crate) mod run;
pub(crate) mod saga;
pub(crate) mod version;
pub(crate) mod wait;
