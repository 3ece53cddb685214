//! The books in PostgreSQL (the `postgres` feature): the same rules
//! (`books::decide` and `books::apply`) over a database that processes on
//! many hosts share, for teams whose agents outgrow one process.
//!
//! - [`PgStore`]: a connection; [`PgStore::execute`] runs one command as
//!   one transaction (repeatable read, the command's runs locked), answered
//!   once committed; time is the
//!   server's clock.
//! - [`PgBooks`]: the books' traits over one open transaction.
//! - The tables, versioned, are created or upgraded at connect
//!   ([`PG_SCHEMA_VERSION`]; docs/FORMAT.md, "PostgreSQL tables").
//!
//! What the embedded engine has and this backend does not have yet (the
//! `Engine` API over it, the runtime, the Python module, the `actum`
//! commands): docs/POSTGRES.md.

mod books;
#[cfg(test)]
mod engine_tests;
mod schema;
mod store;
#[cfg(test)]
mod tests;
mod wire;

pub use books::PgBooks;
pub use schema::PG_SCHEMA_VERSION;
pub(crate) use store::Planted;
pub use store::{
    OptimisticCounts, PgStore, RETRIES, scratch_database, server_for_tests, without_password,
};
/// The pipelining connection under the store, for the benches' ceiling of
/// its shape (`internals`: not part of the public API).
#[cfg(feature = "internals")]
pub use wire::{Connection, Param, Request};
