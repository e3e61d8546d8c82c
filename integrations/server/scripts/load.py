#!/usr/bin/env python3
"""A load generator for OpenAI-compatible chat servers (selfspec-server,
llama-server's /v1 endpoint): conversations from integrations/data/*.text.jsonl,
Poisson arrivals, streamed replies.

Arrivals (a Poisson process of --rate requests a second) go in turn to
--users clients; each client goes through its conversations (client k: the
k-th of the files, interleaved, then every --users-th after it) a turn at a
time, each turn's messages the earlier turns and the model's own replies
(as the engine commands do). A client whose last reply has not come back
sends when it does (latency and time to first token count from the send).
So the requests are the same for every server at a rate and seed; only
their replies differ. Arrivals stop after --duration seconds; the requests
in flight are waited for.

Prints one JSON line: requests, completed, errors, generated tokens a second
(all replies' tokens over the wall time), time to first token and
per-request latency (p50, p99, milliseconds).

usage: scripts/load.py --url http://127.0.0.1:8080 --rate 1 --duration 60
       [--max-tokens 256] [--temperature 0] [--data FILE ...] [--model NAME]
       [--users 8] [--seed 0]
       [--extra '{"speculative": false}']

Standard library only. Not run in CI (a benchmark: run it on a quiet machine).
"""

import argparse
import glob
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "data")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the server's base URL")
    p.add_argument("--rate", type=float, default=1.0, help="requests a second (Poisson arrivals)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--model", default="default", help="the request's model field")
    p.add_argument("--data", nargs="*", help="*.text.jsonl files (default: integrations/data's)")
    p.add_argument("--seed", type=int, default=0, help="the arrivals' random seed")
    p.add_argument("--users", type=int, default=8,
                   help="clients the arrivals go to in turn, each one conversation at a time")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a request may take")
    p.add_argument("--extra", default="{}",
                   help='JSON fields added to every request, e.g. \'{"speculative": false}\'')
    return p.parse_args()


def conversations(files):
    """Every conversation's user turns, the files interleaved (one of each
    file in turn, a shorter file's from its start again), so that each
    kind of conversation is in every stretch of the load."""
    per_file = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            turns = [json.loads(line).get("turns") or [] for line in fh if line.strip()]
        turns = [t for t in turns if t]
        if turns:
            per_file.append(turns)
    if not per_file:
        sys.exit("load.py: no conversations in " + ", ".join(files))
    longest = max(len(c) for c in per_file)
    return [c[i % len(c)] for i in range(longest) for c in per_file]


class User:
    """One of --users clients: conversation k, k + users, k + 2 users, ...
    a turn at a time, each turn's messages the earlier turns and the
    model's own replies. Its lock is held while a request of it is out."""

    def __init__(self, convs, k, users):
        self.convs, self.conv, self.users = convs, k, users
        self.turn, self.messages = 0, []
        self.lock = threading.Lock()

    def next_messages(self):
        """The next request's messages (the next conversation's first turn
        after a conversation's last)."""
        turns = self.convs[self.conv % len(self.convs)]
        if self.turn >= len(turns):
            self.conv, self.turn, self.messages = self.conv + self.users, 0, []
            turns = self.convs[self.conv % len(self.convs)]
        return self.messages + [{"role": "user", "content": turns[self.turn]}]

    def answered(self, messages, text):
        self.messages = messages + [{"role": "assistant", "content": text}]
        self.turn += 1


def stream_request(url, body, timeout):
    """POSTs a streamed chat completion; returns (ttft, latency, tokens, text)
    in seconds, or raises on an HTTP error."""
    u = urllib.parse.urlparse(url)
    conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(u.hostname, u.port, timeout=timeout)
    path = (u.path.rstrip("/") or "") + "/v1/chat/completions"
    start = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    ttft, chunks, usage, text = None, 0, None, []
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(str(chunk["error"])[:200])
        for c in chunk.get("choices") or []:
            piece = (c.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - start
                chunks += 1
                text.append(piece)
        if chunk.get("usage"):
            usage = chunk["usage"]
    latency = time.perf_counter() - start
    conn.close()
    tokens = usage["completion_tokens"] if usage else chunks
    return (ttft if ttft is not None else latency), latency, tokens, "".join(text)


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return round(1e3 * xs[min(len(xs) - 1, int(q * len(xs)))], 1)


def main():
    a = parse_args()
    if a.users < 1 or a.rate <= 0:
        sys.exit("load.py: --users must be at least 1 and --rate above 0")
    extra = json.loads(a.extra)
    files = a.data or sorted(glob.glob(os.path.join(DATA, "*.text.jsonl")))
    convs = conversations(files)
    users = [User(convs, k, a.users) for k in range(a.users)]
    rng = random.Random(a.seed)
    stats = {"ttft": [], "latency": [], "tokens": 0, "errors": 0, "sent": 0}
    lock = threading.Lock()

    def one(user):
        # A user whose last reply has not come back sends when it does.
        with user.lock:
            messages = user.next_messages()
            body = {
                "model": a.model,
                "messages": messages,
                "max_tokens": a.max_tokens,
                "temperature": a.temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            body.update(extra)
            try:
                ttft, latency, tokens, text = stream_request(a.url, body, a.timeout)
            except Exception as e:  # noqa: BLE001 (counted; the user goes on)
                print(f"load.py: {e}", file=sys.stderr)
                with lock:
                    stats["errors"] += 1
                user.answered(messages, "")
                return
            with lock:
                stats["ttft"].append(ttft)
                stats["latency"].append(latency)
                stats["tokens"] += tokens
            user.answered(messages, text)

    threads = []
    start = time.perf_counter()
    at = rng.expovariate(a.rate)
    while at < a.duration:
        time.sleep(max(0.0, start + at - time.perf_counter()))
        t = threading.Thread(target=one, args=(users[stats["sent"] % a.users],), daemon=True)
        t.start()
        threads.append(t)
        stats["sent"] += 1
        at += rng.expovariate(a.rate)
    for t in threads:
        t.join(a.timeout)
    wall = time.perf_counter() - start
    print(json.dumps({
        "url": a.url,
        "rate": a.rate,
        "duration_s": a.duration,
        "wall_s": round(wall, 2),
        "requests": stats["sent"],
        "completed": len(stats["latency"]),
        "errors": stats["errors"],
        "generated_tokens": stats["tokens"],
        "tokens_per_s": round(stats["tokens"] / wall, 2) if wall > 0 else 0.0,
        "ttft_p50_ms": pct(stats["ttft"], 0.50),
        "ttft_p99_ms": pct(stats["ttft"], 0.99),
        "latency_p50_ms": pct(stats["latency"], 0.50),
        "latency_p99_ms": pct(stats["latency"], 0.99),
    }))


if __name__ == "__main__":
    main()
