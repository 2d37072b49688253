#!/usr/bin/env python3
"""serve-load.py - a small load generator for an OpenAI-compatible server
(until atlas-bench serve exists): streaming /v1/completions requests with
token-id prompts at given concurrency levels; reports generated tok/s,
time-to-first-token p50/p90/p99 and time per output token p50/p99 as JSON
lines (one per concurrency level). Standard library only.

    serve-load.py URL --concurrency 1,8,32 --prompt 512 --gen 256 [--requests N]
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def one(url, prompt, gen, out, lock):
    u = urllib.parse.urlparse(url)
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": gen, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    first, n, err = None, 0, r.status != 200
    usage = None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        if ev.get("choices") and ev["choices"][0].get("text") is not None:
            if first is None:
                first = time.monotonic()
            n += 1
    t1 = time.monotonic()
    conn.close()
    toks = usage["completion_tokens"] if usage else n
    with lock:
        out.append({"ttft": (first or t1) - t0, "total": t1 - t0, "tokens": toks, "error": err})


def level(url, conc, nreq, plen, gen, vocab):
    rng = random.Random(conc)
    out, lock, threads = [], threading.Lock(), []
    sem = threading.Semaphore(conc)

    def worker(prompt):
        with sem:
            one(url, prompt, gen, out, lock)

    t0 = time.monotonic()
    for i in range(nreq):
        prompt = [rng.randrange(100, vocab) for _ in range(plen)]
        th = threading.Thread(target=worker, args=(prompt,))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    ok = [o for o in out if not o["error"]]
    tpot = [(o["total"] - o["ttft"]) / max(1, o["tokens"] - 1) for o in ok]
    return {
        "concurrency": conc, "requests": nreq, "prompt_tokens": plen, "output_tokens": gen,
        "errors": len(out) - len(ok), "wall_s": round(wall, 3),
        "generated_tok_per_s": round(sum(o["tokens"] for o in ok) / wall, 1),
        "ttft_ms_p50": round(1e3 * pct([o["ttft"] for o in ok], 50), 1),
        "ttft_ms_p90": round(1e3 * pct([o["ttft"] for o in ok], 90), 1),
        "ttft_ms_p99": round(1e3 * pct([o["ttft"] for o in ok], 99), 1),
        "tpot_ms_p50": round(1e3 * pct(tpot, 50), 2),
        "tpot_ms_p99": round(1e3 * pct(tpot, 99), 2),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--requests", type=int, default=0, help="per level (default: the concurrency, at least 2)")
    ap.add_argument("--vocab", type=int, default=1000)
    a = ap.parse_args()
    for c in [int(x) for x in a.concurrency.split(",")]:
        n = a.requests or max(2, c)
        r = level(a.url, c, n, a.prompt, a.gen, a.vocab)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
