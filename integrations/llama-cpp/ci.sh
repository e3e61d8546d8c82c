#!/usr/bin/env bash
# CI for the llama-cpp-2 adapter (selfspec-llama-cpp) and the engine on it
# (engine/, the figures command): installs what llama-cpp-sys-2 needs to
# build llama.cpp (cmake, clang / libclang for bindgen) when missing,
# fetches the real model, then one profile (release) and one target folder
# (this folder's, .cargo/config.toml) so llama.cpp compiles once. Tests run
# one at a time (each uses 2 threads).
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
pkgs=(-p selfspec-llama-cpp -p selfspec-llama-cpp-engine)

cargo fmt "${pkgs[@]}" --check
cargo clippy --release --all-targets --locked "${pkgs[@]}" -- -D warnings
# `--features openmp` wherever the adapter is built alone: the features
# of llama-cpp-sys-2 are then those of the workspace's builds above, and
# llama.cpp (4-5 minutes of CI) compiles once, not once more without them.
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --locked -p selfspec-llama-cpp --features openmp
cargo test --release --locked "${pkgs[@]}" -- --test-threads=1

# The example prints its tokens as they come, then its counts.
out=$(cargo run --release --locked -p selfspec-llama-cpp --features openmp --example stream -- \
    --gguf "$model" --max-tokens 48 2>&1)
echo "$out"
grep -q "tokens in .* passes" <<<"$out"
set +e
cargo run --release --locked -q -p selfspec-llama-cpp --features openmp --example stream 2>/dev/null
code=$?
set -e
[ "$code" -eq 2 ] || { echo "stream without --gguf: exit $code, expected 2" >&2; exit 1; }

# Packaging: the adapter packs with selfspec (as crates.io would serve
# them); an engine crate that depends on llama-cpp-2 itself and on the
# packed adapter resolves one llama-cpp-sys-2 (a fresh lock file), builds
# and runs on the model.
(cd ../.. && cargo package --no-verify --allow-dirty --quiet -p selfspec -p selfspec-llama-cpp)
rm -rf target/packaged && mkdir -p target/packaged
for crate in selfspec selfspec-llama-cpp; do
    tar xzf ../../target/package/"$crate"-[0-9]*.crate -C target/packaged
    mv target/packaged/"$crate"-[0-9]* target/packaged/"$crate"
done
(
    cd consumer
    rm -f Cargo.lock
    cargo generate-lockfile --quiet
    n=$(grep -c '^name = "llama-cpp-sys-2"$' Cargo.lock)
    echo "consumer: $n llama-cpp-sys-2 in its lock file ($(grep -A1 '^name = "llama-cpp-sys-2"$' Cargo.lock | tail -1))"
    [ "$n" = 1 ] || { echo "the consumer resolves $n llama-cpp-sys-2" >&2; exit 1; }
    # Built and run on the workspace's versions (its lock file as the
    # seed): the fresh lock's newer build dependencies would compile
    # llama.cpp once more. (The published selfspec's own tests in .ci/run
    # build it on freshly resolved dependencies.)
    cp ../../../Cargo.lock Cargo.lock
    cargo run --release --quiet
    cargo run --release --quiet -- "$model"
    rm -f Cargo.lock
)

# The engine's command, two rounds: the 3 problems' turns counted twice.
out=$(cargo run --release --locked -p selfspec-llama-cpp-engine -- \
    --conversations ../data/sample-code.text.jsonl:3 --max-tokens 64 --parallel 1 --threads 2 \
    --rounds 2)
echo "$out"
grep -q 'elsewhere$' <<<"$out"
grep -q ' 0 elsewhere$' <<<"$out"
grep -q '2 rounds: each kind plain then speculative' <<<"$out"
grep -qE '^recall .* code +6 ' <<<"$out"
# The budget priced its passes: the median error of the prices of passes
# without drafts is printed, and under half the measured time (a price in
# the wrong unit or of the wrong pass is far off; a noisy machine is not).
grep -q "the draft budget's pass prices against the measured passes:" <<<"$out"
err=$(grep -oE "^  all +median error [0-9.]+% \(signed [-+][0-9.]+%\) over [0-9]+ passes without drafts" <<<"$out" \
    | grep -oE '[0-9.]+%' | head -1 | tr -d '%')
[ -n "$err" ] || { echo "no pass prices line" >&2; exit 1; }
awk -v e="$err" 'BEGIN { exit !(e < 50) }' || { echo "pass prices off by $err%" >&2; exit 1; }
# --help exits 0, a bad argument exits 2.
cargo run --release --locked -q -p selfspec-llama-cpp-engine -- --help >/dev/null
set +e
cargo run --release --locked -q -p selfspec-llama-cpp-engine -- --max-tokens 0 2>/dev/null
code=$?
set -e
[ "$code" -eq 2 ] || { echo "bad argument: exit $code, expected 2" >&2; exit 1; }
set +e
cargo run --release --locked -q -p selfspec-llama-cpp-engine -- --rounds 0 2>/dev/null
code=$?
set -e
[ "$code" -eq 2 ] || { echo "--rounds 0: exit $code, expected 2" >&2; exit 1; }
echo "ci.sh: ok"
