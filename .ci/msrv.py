#!/usr/bin/env python3
"""Fails when a library dependency (any feature) declares a newer rust-version
than selfspec's own: the MSRV check that works with the one toolchain here."""
import json, subprocess, sys

meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"]))
pkgs = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(p for p in meta["packages"] if p["name"] == "selfspec")

def version(v):
    return tuple(int(x) for x in (v or "0").split("."))

msrv = version(root["rust_version"])
seen, stack, bad = set(), [root["id"]], []
while stack:
    pid = stack.pop()
    if pid in seen:
        continue
    seen.add(pid)
    for dep in nodes[pid]["deps"]:
        # normal and build dependencies only: what a user compiles (loom
        # builds only under `--cfg loom`, for the model tests)
        if any(k["kind"] in (None, "build") and k.get("target") != "cfg(loom)"
               for k in dep["dep_kinds"]):
            stack.append(dep["pkg"])
for pid in seen - {root["id"]}:
    p = pkgs[pid]
    if version(p.get("rust_version")) > msrv:
        bad.append(f'{p["name"]} {p["version"]} needs rust {p["rust_version"]}')
if bad:
    sys.exit("MSRV " + root["rust_version"] + " is too low: " + "; ".join(bad))
print(f'msrv: {len(seen) - 1} library dependencies fit rust-version {root["rust_version"]}')
