#!/usr/bin/env python3
"""serve-share.py URL IDS_FILE - send each line of ids (one prompt a line)
as a temperature-0 /v1/completions request, one after the other, and
print one JSON line per request: its text and usage. Standard library
only; for the prefix-cache identity checks."""
import json
import sys
import time
import urllib.request

url, path = sys.argv[1], sys.argv[2]
for _ in range(240):
    try:
        urllib.request.urlopen(url + "/health")
        break
    except Exception:
        time.sleep(0.5)
for line in open(path):
    ids = [int(x) for x in line.split()]
    body = json.dumps({"prompt": ids, "max_tokens": 24, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(req))
    print(json.dumps({"text": d["choices"][0]["text"],
                      "cached_tokens": d["usage"].get("prompt_tokens_details", {}).get("cached_tokens")}))
