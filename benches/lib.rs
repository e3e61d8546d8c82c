//! Nothing here: this package only holds selfspec's criterion benches
//! (`strategies.rs`), run with `cargo bench` from the workspace root.
