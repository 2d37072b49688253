#!/usr/bin/env python3
"""serve-prefill-mix.py - do long prompts starve running decodes?

Starts STREAMS streaming /v1/completions requests (short prompts, long
generations, ignore_eos) against an OpenAI-compatible server; once they
all decode, sends LONG-token prompts (max_tokens 1) one after another
for SECONDS, then reports, over the decoding streams' tokens in that
window, the time between tokens (inter-token latency) p50/p90/p99/max
and each stream's mean time per output token p50/p99, as one JSON line.
Standard library only; binds nothing, talks to 127.0.0.1 servers.

    serve-prefill-mix.py URL [--streams 32] [--long 4000] [--seconds 20]
"""
import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))]


def stream(url, prompt, gen, times, lock):
    u = urllib.parse.urlparse(url)
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": gen, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    mine = []
    for raw in r:
        line = raw.decode().strip()
        if line.startswith("data: {"):
            mine.append(time.monotonic())
    with lock:
        times.append(mine)


def long_prompt(url, prompt, ttfts):
    u = urllib.parse.urlparse(url)
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0})
    t0 = time.monotonic()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    c.getresponse().read()
    ttfts.append(time.monotonic() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--long", type=int, default=4000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--gen", type=int, default=4000)
    ap.add_argument("--vocab", type=int, default=4000)
    a = ap.parse_args()
    rnd = random.Random(5)
    times, lock = [], threading.Lock()
    th = [threading.Thread(target=stream, args=(a.url, [rnd.randrange(5, a.vocab) for _ in range(32)],
                                               a.gen, times, lock)) for _ in range(a.streams)]
    for t in th:
        t.start()
    time.sleep(3)  # every stream is decoding
    w0 = time.monotonic()
    ttfts, n_long = [], 0
    while time.monotonic() - w0 < a.seconds:
        long_prompt(a.url, [rnd.randrange(5, a.vocab) for _ in range(a.long)], ttfts)
        n_long += 1
    w1 = time.monotonic()
    for t in th:
        t.join()
    gaps, tpots = [], []
    for mine in times:
        inwin = [t for t in mine if w0 <= t <= w1]
        g = [y - x for x, y in zip(inwin, inwin[1:])]
        gaps += g
        if g:
            tpots.append(sum(g) / len(g))
    ms = lambda x: None if x is None else round(1e3 * x, 2)
    print(json.dumps({
        "streams": a.streams, "long_prompt": a.long, "long_requests": n_long,
        "window_s": round(w1 - w0, 2),
        "itl_p50_ms": ms(pct(gaps, 50)), "itl_p90_ms": ms(pct(gaps, 90)),
        "itl_p99_ms": ms(pct(gaps, 99)), "itl_max_ms": ms(max(gaps) if gaps else None),
        "tpot_p50_ms": ms(pct(tpots, 50)), "tpot_p99_ms": ms(pct(tpots, 99)),
        "long_ttft_p50_ms": ms(pct(ttfts, 50)),
    }))


if __name__ == "__main__":
    main()
