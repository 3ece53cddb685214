//! # actum-sim
//!
//! The deterministic simulator for actum: real engine code runs against a
//! simulated disk ([`SimDisk`]) and a virtual clock ([`SimClock`]), and every
//! run is a pure function of one `u64` seed, fed to [`Rng`].
//!
//! **Invariant:** nothing in this crate reads the wall clock, the real file
//! system or an unseeded random source, and no decision depends on a hash
//! map's iteration order; the same seed and the same calls give the same
//! faults, the same post-crash disk and the same [`SimDisk::trace_hash`].
//!
//! The fault model is written down in `docs/SIMULATION.md`.

pub mod agents;
pub mod campaign;
pub mod check;
pub mod clock;
pub mod disk;
pub mod fnv;
pub mod fuzz;
pub mod harness;
pub mod pgkill;
pub mod rng;
pub mod world;

pub use clock::SimClock;
pub use disk::{FaultConfig, RotRecord, SimDisk};
pub use rng::Rng;
