"""End-to-end checks of selfspec-server with the real `openai` client.

usage: python3 tests/client.py BASE_URL [RECORD CONVERSATIONS NEAR_TIE MAX_TOKENS]

BASE_URL: e.g. http://127.0.0.1:8080. With RECORD (the plain replies of
the `selfspec-llama-cpp` command, `--record`), CONVERSATIONS (the text
conversations it decoded: files joined by commas), NEAR_TIE (the near-tie bound it measured) and
MAX_TOKENS (its --max-tokens),
the server's temperature-0 replies to the same turns are checked against
the command's: equal, or different first where the command's top-1 /
top-2 margin was under the bound (counted and printed).

Plain asserts: exits non-zero on the first failure. Needs `openai` and
`requests` (ci.sh installs them in a venv).
"""

import json
import sys
import threading
import time

import openai
import requests

BASE = sys.argv[1].rstrip("/")
client = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=120)
MODEL = "any"


def ask(text, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], **kw
    )


def metrics():
    """The /metrics samples: {series: value}; every line checked."""
    r = requests.get(BASE + "/metrics", timeout=30)
    assert r.status_code == 200, r.status_code
    out = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name = series.split("{", 1)[0]
        assert name and all(c.isalnum() or c == "_" for c in name), line
        if "{" in series:
            assert series.endswith("}"), line
        out[series] = float(value)
    return out


def not_streamed():
    r = ask("Say hello in one short sentence.", max_tokens=24, temperature=0)
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content, "empty reply"
    assert choice.finish_reason in ("stop", "length"), choice.finish_reason
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 24, u
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    t = r.model_extra["timings"]
    for key in ("prompt_ms", "predicted_ms", "predicted_per_second", "draft_n", "draft_n_accepted"):
        assert key in t, (key, t)
    print("not streamed ok:", repr(choice.message.content[:60]))


def streamed():
    stream = ask("Name three colors.", max_tokens=32, temperature=0, stream=True)
    deltas, finish, usage = [], None, None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.choices:
            c = chunk.choices[0]
            if c.delta.content:
                deltas.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
        if chunk.usage:
            usage = chunk.usage
    text = "".join(deltas)
    assert text, "no streamed text"
    assert finish in ("stop", "length"), finish
    assert usage is not None and usage.completion_tokens > 0
    print("streamed ok:", len(deltas), "deltas", repr(text[:60]))


def stop_strings():
    full = ask("Count from 1 to 10, separated by commas.", max_tokens=40, temperature=0)
    text = full.choices[0].message.content
    assert len(text) > 4, text
    stop = text[2:4]
    cut = ask("Count from 1 to 10, separated by commas.", max_tokens=40, temperature=0, stop=[stop])
    got = cut.choices[0].message.content
    assert got == text[: text.find(stop)], (got, text, stop)
    assert cut.choices[0].finish_reason == "stop"
    print("stop strings ok:", repr(stop))


def concurrent():
    results, errors = [None] * 8, []

    def one(i):
        try:
            r = ask(f"Write one sentence about the number {i}.", max_tokens=32, temperature=0.7, seed=i)
            results[i] = r.choices[0].message.content
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(r is not None for r in results), results
    print("8 concurrent ok")


def greedy_equivalence():
    prompts = [
        "Write a Python function that returns the square of a number.",
        "List the days of the week.",
        "What is the capital of France? Answer in one sentence.",
    ]
    for p in prompts:
        # A first request leaves the prompt in a slot's cache: both runs
        # below then reuse it alike (all but its last token), so their
        # first tokens come from passes of the same shape. (A prompt
        # prefilled whole and one evaluated from the cache can differ in a
        # near tie: llama.cpp's kernels sum in another order by batch size.)
        ask(p, max_tokens=1, temperature=0, extra_body={"speculative": False})
        outs = []
        for spec in (True, False):
            r = ask(p, max_tokens=48, temperature=0, extra_body={"speculative": spec})
            outs.append(r.choices[0].message.content)
        if outs[0] != outs[1]:
            print("speculative:", repr(outs[0]))
            print("plain:      ", repr(outs[1]))
            raise AssertionError("greedy speculative decoding differs from plain decoding")
    print("greedy speculative == plain ok")


def bad_inputs():
    url = BASE + "/v1/chat/completions"
    msg = [{"role": "user", "content": "hi"}]
    long_text = "hello world " * 40000
    cases = [
        ("malformed json", "{not json"),
        ("messages not a list", {"messages": "hi"}),
        ("temperature a string", {"messages": msg, "temperature": "hot"}),
        ("stream a string", {"messages": msg, "stream": "yes"}),
        ("no messages", {"model": "x"}),
        ("empty messages", {"messages": []}),
        ("prompt past the context", {"messages": [{"role": "user", "content": long_text}]}),
        ("max_tokens 0", {"messages": msg, "max_tokens": 0}),
        ("max_tokens past the context", {"messages": msg, "max_tokens": 10**7}),
        ("temperature < 0", {"messages": msg, "temperature": -0.5}),
        ("temperature > 2", {"messages": msg, "temperature": 2.5}),
        ("top_p 0", {"messages": msg, "top_p": 0}),
        ("top_p > 1", {"messages": msg, "top_p": 1.5}),
    ]
    for name, body in cases:
        if isinstance(body, str):
            r = requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=60)
        else:
            r = requests.post(url, json=body, timeout=60)
        assert r.status_code == 400, (name, r.status_code, r.text[:200])
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error", (name, err)
        assert isinstance(err["message"], str) and err["message"], (name, err)
        assert "param" in err and "code" in err, (name, err)
    # The openai client raises its own BadRequestError on them.
    try:
        ask("hi", max_tokens=0)
        raise AssertionError("max_tokens 0 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400
    print("bad inputs ok:", len(cases), "cases")


def disconnect():
    stream = ask("Write a long story about a dragon.", max_tokens=1500, temperature=0, stream=True)
    it = iter(stream)
    next(it)
    next(it)
    stream.close()
    rs = []

    def one(i):
        rs.append(ask(f"Say {i}.", max_tokens=16, temperature=0).choices[0].message.content)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(rs) == 4, rs
    deadline = time.time() + 10
    while metrics()["selfspec_slots_busy"] != 0:
        assert time.time() < deadline, "slots still busy after the client left"
        time.sleep(0.1)
    m = metrics()
    assert m.get('selfspec_requests_finished_total{finish="cancelled"}', 0) >= 1, m
    print("disconnect ok")


def post(path, body):
    r = requests.post(BASE + path, json=body, timeout=60)
    return r.status_code, r.json()


def token_endpoints():
    text = "Hello, world: <|im_start|>user"
    code, got = post("/tokenize", {"content": text})
    assert code == 200, (code, got)
    tokens = got["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens), got
    code, back = post("/detokenize", {"tokens": tokens})
    # <|im_start|> is parsed as the special token, which has no text.
    assert code == 200 and back["content"] == "Hello, world: user", (code, back)
    for bad in ([-1], [10**9], "x", [1.5]):
        code, err = post("/detokenize", {"tokens": bad})
        assert code == 400 and err["error"]["type"] == "invalid_request_error", (bad, code, err)
    print("tokenize / detokenize ok:", len(tokens), "tokens")


def detokenize(tokens):
    code, got = post("/detokenize", {"tokens": tokens})
    assert code == 200, (code, got)
    return got["content"]


def first_difference(output, text):
    """The index of the first token of `output` whose text leaves `text`
    (each prefix's text checked), or None when all of them stay in it."""
    for k in range(len(output)):
        if not text.startswith(detokenize(output[: k + 1])):
            return k
    return None


def command_equivalence(record_path, conversations_path, bound, max_tokens):
    """The server's greedy replies (speculation on) to the recorded turns,
    their earlier replies the command's, against the command's replies."""
    conversations = {}
    for path in conversations_path.split(","):
        with open(path) as f:
            for line in f:
                if line.strip():
                    c = json.loads(line)
                    conversations[c["id"]] = c["turns"]
    turns = identical = near_ties = 0
    with open(record_path) as f:
        sessions = [json.loads(line) for line in f if line.strip()]
    assert sessions, "the record is empty"
    for session in sessions:
        messages = []
        for t, request in enumerate(session["requests"]):
            output, margins = request["output"], request["margins"]
            assert len(margins) == len(output), session["id"]
            messages.append({"role": "user", "content": conversations[session["id"]][t]})
            want = detokenize(output)
            r = client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0
            )
            got = r.choices[0].message.content
            assert r.usage.prompt_tokens == len(request["prompt"]), (
                session["id"], t, r.usage.prompt_tokens, len(request["prompt"]))
            turns += 1
            if got == want:
                identical += 1
            else:
                k = first_difference(output, got)
                if k is None:
                    # Every token's text is in the server's: the server went
                    # on where the command stopped (at its stop token) or
                    # the other way round.
                    k = len(output) - 1
                where = f"{session['id']} turn {t} token {k}"
                assert margins[k] <= bound, (
                    f"{where}: differs where the margin was {margins[k]:.4f}, over the near-tie bound {bound:.4f}",
                    want, got)
                near_ties += 1
                print(f"  near tie: {where}, margin {margins[k]:.4f} <= {bound:.4f}")
            messages.append({"role": "assistant", "content": want})
    print(f"temperature 0 == the command's replies ok: {turns} turns, {identical} identical, "
          f"{near_ties} different first at a near tie")


def prompt_cache():
    """A conversation's next turn restores what its first turn left after
    every slot served other prompts; another scope's request with the same
    messages reuses nothing of it."""
    def scoped(scope, messages, max_tokens=32):
        return client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0,
            extra_headers={"X-Selfspec-Scope": scope},
        )

    def counts():
        m = metrics()
        return m["selfspec_prompt_tokens_cached_total"], m["selfspec_prompt_cache_restores_total"]

    first = [{"role": "user", "content": "Explain, in a few sentences, how a bicycle's gears work, "
              "why riders change them on hills, and what a derailleur does."}]
    r1 = scoped("pc-a", first)
    held = r1.usage.prompt_tokens + r1.usage.completion_tokens
    # Eight prompts at once (the slots all busy): the slot that held the
    # first turn takes one of them, its cache saved to the prompt cache.
    threads = [threading.Thread(target=scoped, args=(
        "pc-a", [{"role": "user", "content": f"Write a short poem about the number {i}."}], 24))
        for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    second = first + [{"role": "assistant", "content": r1.choices[0].message.content},
                      {"role": "user", "content": "And on a single-speed bicycle?"}]
    cached0, restores0 = counts()
    scoped("pc-a", second)
    cached1, restores1 = counts()
    assert restores1 == restores0 + 1, (restores0, restores1)
    # Its reply's text re-tokenized may end differently: most of it.
    assert cached1 - cached0 >= r1.usage.prompt_tokens, (cached1 - cached0, held)
    scoped("pc-b", second)
    cached2, restores2 = counts()
    assert (cached2, restores2) == (cached1, restores1), "another scope reused the cache"
    print(f"prompt cache ok: {int(cached1 - cached0)} of {held} tokens restored, none for another scope")


def endpoints():
    r = requests.get(BASE + "/health", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    models = client.models.list()
    assert len(models.data) == 1 and models.data[0].id
    m = metrics()
    assert m["selfspec_requests_total"] > 0, m
    assert m["selfspec_generated_tokens_total"] > 0, m
    assert m["selfspec_forward_passes_total"] > 0, m
    assert m["selfspec_slots_busy"] == 0 and m["selfspec_queue_length"] == 0, m
    assert any(k.startswith("selfspec_drafted_tokens_total{") for k in m), m
    print("endpoints and metrics ok")


if __name__ == "__main__":
    not_streamed()
    streamed()
    stop_strings()
    concurrent()
    greedy_equivalence()
    bad_inputs()
    disconnect()
    token_endpoints()
    prompt_cache()
    if len(sys.argv) == 6:
        command_equivalence(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
    else:
        assert len(sys.argv) == 2, __doc__
    endpoints()
    print("client.py: all checks passed")
