#!/bin/bash
# gpu-cache-identity.sh OUT [BUILD] - the prefix cache changes no output,
# on CUDA: atlas-run generate (its own kernels) on a Qwen3-8B-shape
# checkpoint of random weights, and atlas-serve (batch-invariant) on the
# golden qwen3-bf16 model, each with and without the cache, on prompts
# sharing a 300-token prefix. Writes OUT/identity.md.
set -u
. "$(dirname "$0")/gpu-prelude.sh"
python3 -c "
import random
r = random.Random(11)
pre = [r.randrange(5, 900) for _ in range(300)]
with open('/tmp/share8.txt', 'w') as f:
    for i in range(8):
        f.write(' '.join(map(str, pre + [r.randrange(5, 900) for _ in range(1 + 5 * i)])) + '\n')
"
for flag in "" --no-prefix-cache; do
	timeout 120 "$build/atlas-run" generate -m "$m" -n 32 --ignore-eos --temperature 0 -c 512 $flag \
		</tmp/share8.txt >"$out/run${flag}.txt" 2>>"$out/identity.log"
done
run_same=$(cmp -s "$out/run.txt" "$out/run--no-prefix-cache.txt" && echo identical || echo DIFFERENT)
port=$((20000 + RANDOM % 20000))
for flag in "" --no-prefix-cache; do
	"$build/atlas-serve" -m tests/fixtures/golden/qwen3-bf16 --port $port $flag >>"$out/identity.log" 2>&1 &
	pid=$!
	python3 scripts/serve-share.py "http://127.0.0.1:$port" /tmp/share8.txt >"$out/serve${flag}.txt" 2>>"$out/identity.log"
	kill $pid
	wait $pid 2>/dev/null
	port=$((port + 1))
done
serve_same=$(python3 -c "
import json, sys
a = [json.loads(l)['text'] for l in open('$out/serve.txt')]
b = [json.loads(l)['text'] for l in open('$out/serve--no-prefix-cache.txt')]
print('identical' if a == b and len(a) == 8 else 'DIFFERENT')" 2>/dev/null || echo DIFFERENT)
{
	echo "| check | result |"
	echo "|---|---|"
	echo "| atlas-run generate on CUDA, 8 prompts sharing 300 tokens, cache on = off | $run_same |"
	echo "| atlas-serve (batch-invariant) on CUDA, the same 8 prompts, cache on = off | $serve_same; cached tokens: $(grep -o '"cached_tokens": [0-9]*' "$out/serve.txt" | tr '\n' ' ') |"
} >"$out/identity.md"
cat "$out/identity.md"
