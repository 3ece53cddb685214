//! The hot books: the engine's decision state, in memory. Every run being
//! worked on is held whole (its record, every ledger entry, every
//! decision, its newest checkpoint's metadata, its audit length), with an
//! index of every claimable run in claim order; what changed since the last
//! checkpoint but is not needed to decide (blob bytes, older checkpoint
//! metadata, audit entries) is held until the checkpoint writes it to the
//! state store. Terminal runs and runs parked in a wait leave memory once a
//! checkpoint has written them, an open leaves every live run no lease
//! holds in the state store, and such runs are read from there when asked
//! and brought back by the first command on them.
//!
//! `state` holds the data, `cold` reads the state store for what memory
//! does not hold, `view` joins the two behind the books traits, so
//! `decide` and `apply` run unchanged over them: a record's ops are applied
//! once, to an overlay of the view, and the overlay's writes merged in.
//!
//! **Invariant:** a run is either in memory, whole, or in the state store
//! and unchanged since the checkpoint that wrote it; nothing that is not in
//! the state store has left memory.

mod claims;
mod cold;
mod state;
mod view;

pub(crate) use cold::ColdReader;
pub(crate) use state::{Forget, HotState};
pub(crate) use view::HotView;
