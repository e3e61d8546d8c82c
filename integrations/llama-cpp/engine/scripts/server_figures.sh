#!/usr/bin/env bash
# llama-server's figures beside selfspec-llama-cpp's: for each server
# configuration, start llama-server on the model (bound to 127.0.0.1), send
# the conversations with drive_server.py, stop the server. Not run in CI.
#
# usage: server_figures.sh SERVER MODEL PARALLEL OUTDIR FILE[:N]... -- 'FLAGS' ['FLAGS'...]
#   e.g. server_figures.sh ~/.cache/llama-server/bin/llama-server model.gguf 1 /tmp/figs \
#          data/sample-code.text.jsonl:40 -- '' '--spec-default' '--spec-type ngram-map-k'
# '' is plain decoding. Prompts are rendered with llama.cpp's built-in chat
# templates (--no-jinja), as the selfspec command renders them. Each run
# holds $SELFSPEC_CPU_LOCK (if set) exclusively, so nothing else runs meanwhile.
set -euo pipefail
server=$1 model=$2 parallel=$3 outdir=$4
shift 4
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do files+=("$1"); shift; done
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$outdir"
port=${PORT:-8089}
ctx=$((8192 * parallel))
export LD_LIBRARY_PATH="$(dirname "$server")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
one() {
    local flags=$1 label=$2
    # shellcheck disable=SC2086
    "$server" -m "$model" -c "$ctx" -np "$parallel" --no-kv-unified -t 2 --no-jinja \
        --host 127.0.0.1 --port "$port" $flags >"$outdir/server-$label.log" 2>&1 &
    local pid=$!
    trap 'kill $pid 2>/dev/null' EXIT
    for _ in $(seq 1 120); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.5
    done
    python3 "$here/drive_server.py" --url "http://127.0.0.1:$port" --max-tokens "${MAX_TOKENS:-256}" \
        --parallel "$parallel" --label "$label " --json "$outdir/$label.json" "${files[@]}"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    trap - EXIT
}
for flags in "$@"; do
    label=$(echo "${flags:-plain}" | tr -d '-' | tr ' ' '_')
    label="S$parallel-${label:-plain}"
    if [ -n "${SELFSPEC_CPU_LOCK:-}" ]; then
        export -f one; export server model parallel outdir port ctx here
        flock -x "$SELFSPEC_CPU_LOCK" bash -c "$(declare -p files); one \"\$1\" \"\$2\"" _ "$flags" "$label"
    else
        one "$flags" "$label"
    fi
done
