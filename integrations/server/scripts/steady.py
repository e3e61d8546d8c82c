#!/usr/bin/env python3
"""Steady decoding speed of an OpenAI-compatible chat server: N requests
sent at once (greedy, not streamed, --max-tokens each), timed together;
prints one JSON line: wall seconds, generated tokens, tokens a second
(all replies' tokens over the wall time), repeated --runs times.

usage: scripts/steady.py --url http://127.0.0.1:8080 [--requests 4]
       [--max-tokens 256] [--runs 3] [--extra '{"speculative": false}']

With as many requests as the server has slots, every step decodes all of
them: this compares servers' decoding passes, not their scheduling.
Standard library only; a benchmark (not run in CI).
"""

import argparse
import json
import threading
import time
import urllib.request

TOPICS = ["a dragon", "the sea", "trains", "a cat", "the moon", "a city", "a storm", "a garden"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--extra", default="{}", help="JSON merged into each request body")
    a = p.parse_args()
    extra = json.loads(a.extra)

    def one(i, out):
        body = {"messages": [{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]}."}],
                "max_tokens": a.max_tokens, "temperature": 0, **extra}
        req = urllib.request.Request(a.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out[i] = json.load(r)["usage"]["completion_tokens"]

    for _ in range(a.runs):
        out = [0] * a.requests
        threads = [threading.Thread(target=one, args=(i, out)) for i in range(a.requests)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        print(json.dumps({"url": a.url, "requests": a.requests, "wall_s": round(wall, 2),
                          "tokens": sum(out), "tokens_per_s": round(sum(out) / wall, 1)}))


if __name__ == "__main__":
    main()
