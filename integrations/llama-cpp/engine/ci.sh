#!/usr/bin/env bash
# CI for selfspec-llama-cpp: installs what llama-cpp-sys-2 needs to build
# llama.cpp (cmake, clang / libclang for bindgen) when missing, fetches the
# real model, then one profile (release) and one target dir for everything
# so llama.cpp compiles once. Tests run one at a time (each uses 2 threads).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v cmake >/dev/null || ! command -v clang >/dev/null \
    || ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
    apt-get update && apt-get install -y cmake clang libclang-dev
fi
model=$(bash ../fetch-model.sh)
export SELFSPEC_MODEL="$model"
# Nothing here is timed: OpenMP threads sleep instead of spinning while they
# wait, so a busy machine does not stall llama.cpp's passes.
export OMP_WAIT_POLICY=passive

cargo fmt --check
cargo clippy --release --all-targets --locked -- -D warnings
cargo test --release --locked -- --test-threads=1
out=$(cargo run --release --locked -- --conversations ../data/sample-code.text.jsonl:3 \
    --max-tokens 64 --parallel 1 --threads 2)
echo "$out"
grep -q 'elsewhere$' <<<"$out"
grep -q ' 0 elsewhere$' <<<"$out"
# --help exits 0, a bad argument exits 2.
cargo run --release --locked -q -- --help >/dev/null
set +e
cargo run --release --locked -q -- --max-tokens 0 2>/dev/null
code=$?
set -e
[ "$code" -eq 2 ] || { echo "bad argument: exit $code, expected 2" >&2; exit 1; }
echo "ci.sh: ok"
