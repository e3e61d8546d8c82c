#!/usr/bin/env bash
# selfspec-server's checks: format, clippy, unit tests, then the built
# server against the real `openai` client (tests/client.py; its greedy
# replies against the selfspec-llama-cpp command's), a SIGTERM during
# decoding and a restart from the saved memory file.
#
# usage: bash integrations/server/ci.sh      (from anywhere)
# Needs: cargo, python3 with venv and pip, network for pip (openai,
# requests) and for the model on a first run (integrations/fetch-model.sh).
set -euo pipefail
cd "$(dirname "$0")"
export OMP_WAIT_POLICY=passive

started=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - started )) s)"; }

step "model"
SELFSPEC_MODEL=$(bash ../fetch-model.sh)
export SELFSPEC_MODEL

step "fmt"
cargo fmt -p selfspec-server --check
step "clippy"
cargo clippy --release --all-targets --locked -p selfspec-server -- -D warnings
step "unit tests"
cargo test --release --locked -p selfspec-server
step "build"
cargo build --release --locked -p selfspec-server -p selfspec-llama-cpp-engine
server=../llama-cpp/target/release/selfspec-server
command=../llama-cpp/target/release/selfspec-llama-cpp

step "python venv"
venv=target/venv
if [ ! -x "$venv/bin/python3" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check openai requests
py="$venv/bin/python3"

tmp=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts the server on a free port with --memory $tmp/mem.bin and the
# options given (sets pid and url); waits for /health.
start_server() {
    local port
    port=$(free_port)
    url="http://127.0.0.1:$port"
    "$server" --gguf "$SELFSPEC_MODEL" --port "$port" --threads 2 \
        --memory "$tmp/mem.bin" "$@" >>"$tmp/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
        if curl -sf "$url/health" >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$tmp/server.log"
            echo "ci: the server exited at start" >&2
            exit 1
        fi
        sleep 0.2
    done
    cat "$tmp/server.log"
    echo "ci: the server did not answer /health in 60 s" >&2
    exit 1
}

step "the selfspec-llama-cpp command's greedy replies (for the temperature-0 check)"
chat=../data/sample-chat.text.jsonl
code=../data/sample-code.text.jsonl
max_tokens=48
"$command" --gguf "$SELFSPEC_MODEL" --conversations "$chat:2" "$code:1" --max-tokens "$max_tokens" \
    --parallel 1 --threads 2 --record "$tmp/replies.jsonl" >"$tmp/command.out"
bound=$(sed -n 's/^near-tie bound: \([0-9.]*\) .*/\1/p' "$tmp/command.out")
[ -n "$bound" ] || { cat "$tmp/command.out"; echo "ci: the command printed no near-tie bound" >&2; exit 1; }
echo "near-tie bound measured by the command: $bound"

step "server + tests/client.py"
start_server --parallel 4
"$py" tests/client.py "$url" "$tmp/replies.jsonl" "$chat,$code" "$bound" "$max_tokens"

step "SIGTERM during decoding"
curl -sN "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Write a long story about the sea."}], "max_tokens": 2000, "temperature": 0, "stream": true}' \
    >"$tmp/long.out" 2>&1 &
curl_pid=$!
# Until the stream has tokens.
for _ in $(seq 1 100); do
    if [ "$(grep -c '"content"' "$tmp/long.out" || true)" -ge 3 ]; then break; fi
    sleep 0.1
done
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
wait "$curl_pid" || true
[ "$status" -eq 0 ] || { cat "$tmp/server.log"; echo "ci: the server exited with $status on SIGTERM" >&2; exit 1; }
[ -s "$tmp/mem.bin" ] || { echo "ci: no memory file after SIGTERM" >&2; exit 1; }
grep -q 'data: \[DONE\]' "$tmp/long.out" || { echo "ci: the stream did not end with [DONE] at shutdown" >&2; exit 1; }
echo "memory file: $(stat -c %s "$tmp/mem.bin") bytes"

step "restart from the memory file; a full queue answers 503"
grep -q 'memory saved' "$tmp/server.log" || { echo "ci: no save at shutdown in the log" >&2; exit 1; }
start_server --parallel 1 --queue 1
grep -q 'memory loaded' "$tmp/server.log" || { echo "ci: the restart did not load the memory file" >&2; exit 1; }
curl -sf "$url/health" >/dev/null
body='{"messages": [{"role": "user", "content": "Write a story."}], "max_tokens": 300, "temperature": 0}'
post() { curl -s -o /dev/null -w '%{http_code}' "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body"; }
post >"$tmp/first.code" &
first=$!
sleep 0.5   # the first request is in the slot
post >"$tmp/second.code" &
second=$!
sleep 0.5   # the second one waits in the queue
third=$(curl -s -D "$tmp/third.headers" -o "$tmp/third.body" -w '%{http_code}' "$url/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$body")
wait "$first" "$second"
[ "$third" = 503 ] || { echo "ci: a request beyond the queue got $third, not 503" >&2; exit 1; }
grep -qi '^retry-after: 1' "$tmp/third.headers" || { echo "ci: no Retry-After: 1 on the 503" >&2; exit 1; }
grep -q '"error"' "$tmp/third.body" || { echo "ci: the 503 has no error body" >&2; exit 1; }
[ "$(cat "$tmp/first.code")" = 200 ] && [ "$(cat "$tmp/second.code")" = 200 ] \
    || { echo "ci: the requests in the slot and the queue did not complete" >&2; exit 1; }
kill -TERM "$pid"
wait "$pid"
pid=""

step "ci.sh: all checks passed"
