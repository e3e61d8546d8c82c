#!/usr/bin/env python3
"""Send text conversations through a running llama-server, greedy, and sum its timings per kind.

The same conversations as `selfspec-llama-cpp --conversations FILE[:N]...`: each session is one conversation, turn k
sent with the model's own earlier replies in the history (/v1/chat/completions, temperature 0, top_k 1). With
--parallel S, S sessions are in flight at once (start the server with `-np S`), each taking the next session when its
own ends, as the selfspec command's slots do.

Prints per kind and in total: turns, generated tokens, decode time, tokens/s, drafted and accepted draft tokens (the
server's `timings`). Decode time is the sum of the replies' `predicted_ms` divided by S (the slots decode side by
side), so tokens/s is comparable with the selfspec command's (prompt processing excluded in both).

usage: drive_server.py --url http://127.0.0.1:8089 --max-tokens 256 [--parallel S] [--json OUT] [--replies OUT.jsonl]
                       FILE[:N]...
"""
import argparse
import collections
import json
import queue
import sys
import threading
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def load(specs):
    sessions = []
    for spec in specs:
        path, limit = spec, None
        head, _, tail = spec.rpartition(":")
        if head and tail.isdigit():
            path, limit = head, int(tail)
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f):
                if limit is not None and n >= limit:
                    break
                if line.strip():
                    sessions.append(json.loads(line))
    return sessions


def run_session(a, s, tot, lock, out):
    msgs = []
    for k, turn in enumerate(s["turns"]):
        msgs.append({"role": "user", "content": turn})
        r = post(a.url + "/v1/chat/completions", {
            "messages": msgs, "temperature": 0, "top_k": 1, "max_tokens": a.max_tokens,
            "cache_prompt": True, "seed": 0})
        text = r["choices"][0]["message"]["content"]
        t = r.get("timings", {})
        with lock:
            c = tot[s["kind"]]
            c["turns"] += 1
            for key in ("predicted_n", "predicted_ms", "prompt_n", "prompt_ms", "draft_n", "draft_n_accepted"):
                c[key] += t.get(key, 0)
            if out:
                out.write(json.dumps({"id": s["id"], "turn": k, "reply": text, "timings": t}) + "\n")
        msgs.append({"role": "assistant", "content": text})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8089")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--json")
    ap.add_argument("--replies")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    sessions = load(a.files)
    tot = collections.defaultdict(collections.Counter)
    lock = threading.Lock()
    out = open(a.replies, "w") if a.replies else None
    t0 = time.time()
    # One kind at a time (as the selfspec command runs them), S sessions in flight.
    for kind in sorted({s["kind"] for s in sessions}):
        todo = queue.Queue()
        for s in sessions:
            if s["kind"] == kind:
                todo.put(s)

        def worker():
            while True:
                try:
                    s = todo.get_nowait()
                except queue.Empty:
                    return
                run_session(a, s, tot, lock, out)

        threads = [threading.Thread(target=worker) for _ in range(a.parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    rows = []
    allc = collections.Counter()
    for kind, c in sorted(tot.items()):
        allc.update(c)
        rows.append(show(a, kind, c))
    rows.append(show(a, "all", allc))
    print(f"wall {time.time() - t0:.1f} s", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def show(a, name, c):
    decode_s = c["predicted_ms"] / 1000 / a.parallel
    tps = c["predicted_n"] / decode_s if decode_s else 0
    acc = c["draft_n_accepted"] / c["draft_n"] if c["draft_n"] else 0
    print(f"{a.label}{name}: turns {c['turns']} generated {c['predicted_n']} decode {decode_s:.2f} s "
          f"{tps:.2f} tok/s drafted {c['draft_n']} accepted {c['draft_n_accepted']} acceptance {acc:.3f}")
    return {"label": a.label, "kind": name, "parallel": a.parallel, "turns": c["turns"],
            "generated": c["predicted_n"], "decode_s": decode_s, "tokens_per_s": tps,
            "drafted": c["draft_n"], "accepted": c["draft_n_accepted"], "acceptance": acc}


if __name__ == "__main__":
    main()
