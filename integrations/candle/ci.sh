#!/usr/bin/env bash
# CI for selfspec-candle: one profile (release) and one target dir for
# everything, so candle compiles once (clippy only type-checks it). The
# bench is built, not run; the `tokenizers` feature is not built.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

cargo fmt --check
cargo clippy --release --all-targets --locked -- -D warnings
cargo test --release --locked
out=$(cargo run --release --locked -- --random --max-tokens 64 --token-cost auto)
echo "$out"
grep -q '^identical outputs (plain vs speculative): yes$' <<<"$out"
# --help exits 0, a bad argument exits 2.
cargo run --release --locked -q -- --help >/dev/null
set +e
cargo run --release --locked -q -- --max-tokens 0 --random 2>/dev/null
code=$?
set -e
[ "$code" -eq 2 ] || { echo "bad argument: exit $code, expected 2" >&2; exit 1; }
cargo bench --locked --no-run
echo "ci.sh: ok"
