//! `Shared::from_bytes` (what `Shared::load` reads) on arbitrary bytes: a
//! typed error or a memory that drafts, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use selfspec::{Config, Shared, Speculative, Strategy};

fuzz_target!(|data: &[u8]| {
    let config = Config::new([Strategy::NgramMod { n: 4 }, Strategy::Recall { threshold_permille: 130 }])
        .with_pool_size(64);
    // Half the inputs behind a valid header, so that the body is reached.
    let mut bytes = data.to_vec();
    if data.first().is_some_and(|b| b & 1 == 1) {
        let empty = Shared::new(&config).unwrap();
        let path = std::env::temp_dir().join(format!("selfspec-fuzz-{}.mem", std::process::id()));
        empty.save(&path).unwrap();
        let mut valid = std::fs::read(&path).unwrap();
        valid.truncate(112);
        valid.extend_from_slice(&data[1..]);
        bytes = valid;
    }
    if let Ok(shared) = Shared::from_bytes(&config, "fuzz", &bytes) {
        let mut spec = Speculative::with_shared(&config, &shared).unwrap();
        spec.begin(&[1, 2, 3]);
        let _ = spec.draft(&[1, 2, 3], 1);
        let _ = shared.heap_bytes();
    }
});
