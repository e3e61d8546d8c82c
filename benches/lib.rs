//! Nothing here: this package only holds selfspec's criterion benches
//! (`strategies.rs`: draft calls per strategy; `memory.rs`: the engine-wide
//! memory; `step.rs`: the decoding step), run with `cargo bench` from the
//! workspace root.
