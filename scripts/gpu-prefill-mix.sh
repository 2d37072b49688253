#!/bin/bash
# gpu-prefill-mix.sh OUT [BUILD] - the chunked-prefill check on an H200:
# atlas-serve on a Qwen3-8B-shape checkpoint of random weights, 32
# streams decoding while 4,000-token prompts arrive one after another
# (scripts/serve-prefill-mix.py), for each step token budget in
# $BUDGETS (default "512 256"). One JSON line per budget in OUT/mix.jsonl.
set -u
. "$(dirname "$0")/gpu-prelude.sh"
for b in ${BUDGETS:-512 256}; do
	port=$((20000 + RANDOM % 20000))
	"$build/atlas-serve" -m "$m" --port $port --max-seqs 64 -c 4608 --max-batch-tokens "$b" \
		>"$out/serve-$b.log" 2>&1 &
	pid=$!
	python3 -c "
import time, urllib.request
for i in range(180):
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/health'); break
    except Exception: time.sleep(1)"
	timeout 150 python3 scripts/serve-prefill-mix.py "http://127.0.0.1:$port" --streams 32 \
		--long 4000 --seconds 15 --gen 2500 | sed "s/^{/{\"max_batch_tokens\": $b, /" >>"$out/mix.jsonl"
	kill $pid
	wait $pid 2>/dev/null
done
cat "$out/mix.jsonl"
