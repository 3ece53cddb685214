//! Runs one simulator seed.
fn main() {}
