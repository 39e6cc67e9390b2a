//! No code: this crate only depends on what the suite and the reference gateway share, with the
//! union of the features each turns on, so building one after the other compiles each shared crate
//! once (scripts/workspace-hack explains and regenerates it).
