//! Nothing here: this package only holds selfspec's property tests
//! (`tests/`), which run with the workspace's `cargo test`.
