#![no_main]
//! See `tests/fuzz_ops/mod.rs` (`load`) for what the bytes mean and what is
//! checked.

#[path = "../../tests/fuzz_ops/mod.rs"]
mod fuzz_ops;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_ops::load(data));
