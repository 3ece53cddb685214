//! Layer 1: the plain data of each domain, with the helpers that read only
//! that data. Uses the layer below.

pub(crate) mod audit;
pub(crate) mod budget;
pub(crate) mod checkpoint;
pub(crate) mod coord;
pub(crate) mod decision;
pub(crate) mod lease;
pub(crate) mod ledger;
pub(crate) mod retention;
pub(crate) mod run;
pub(crate) mod saga;
pub(crate) mod wait;
