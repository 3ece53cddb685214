//! actum-sim: the deterministic simulator for actum.
