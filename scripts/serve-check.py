#!/usr/bin/env python3
"""serve-check.py URL N [PROMPT_LEN GEN] - batch composition must not change
results: N different temperature-0 completion requests sent at once must
each return exactly what the same request returns when sent alone: the
text and every token's logprob, bit for bit (the server prints them with
17 significant digits). PROMPT_LEN is a length (default 40; request i adds
7 i % 50) or MIN-MAX: lengths spread evenly over that range, in a shuffled
order, so short and long prompts are prefilled in chunks beside each
other's decodes. Prints one TAP line and exits 1 on any difference.
Standard library only."""
import http.client
import json
import random
import sys
import threading
import urllib.parse


def complete(url, prompt, gen):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(
        {"model": "m", "prompt": prompt, "max_tokens": gen, "temperature": 0,
         "logprobs": 1}),
        {"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    if r.status != 200:
        return r.status, body, None
    ch = body["choices"][0]
    return r.status, ch["text"], ch["logprobs"]["token_logprobs"]


def main():
    url, n = sys.argv[1], int(sys.argv[2])
    plen = sys.argv[3] if len(sys.argv) > 3 else "40"
    gen = int(sys.argv[4]) if len(sys.argv) > 4 else 32
    rng = random.Random(5)
    if "-" in plen:
        lo, hi = (int(v) for v in plen.split("-"))
        lens = [lo + (hi - lo) * i // max(n - 1, 1) for i in range(n)]
        rng.shuffle(lens)
    else:
        lens = [int(plen) + 7 * i % 50 for i in range(n)]
    prompts = [[rng.randrange(100, 1000) for _ in range(ln)] for ln in lens]
    together = [None] * n

    def run(i):
        together[i] = complete(url, prompts[i], gen)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    alone = [complete(url, p, gen) for p in prompts]
    same = sum(1 for a, b in zip(together, alone) if a == b and a[0] == 200)
    ok = same == n
    print(f"{'ok' if ok else 'not ok'} - {same}/{n} concurrent temperature-0 responses (text and "
          f"logprobs, prompts of {min(lens)}..{max(lens)} tokens) identical to alone")
    for i, (a, b) in enumerate(zip(together, alone)):
        if a != b:
            print(f"# request {i}: together {a!r:.120} alone {b!r:.120}")
            break
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
