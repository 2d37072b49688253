#!/bin/bash
# gpu-spec-serve.sh [BUILD] - greedy text of atlas-serve (batch-invariant,
# its default) on CUDA with --speculative ngram against without, on the
# shipped default model: the same prompt through /v1/completions on two
# servers, texts compared, the drafts counted (/metrics); then atlas-run
# --batch-invariant on CUDA with and without drafts. Binaries carried in
# BUILD (atlas-serve, atlas-run). Logs under $OUT.
B=${1:-build-gs}
sh scripts/gpu-unpack.sh "$B"
P=$(printf 'def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n')
body=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 256, "temperature": 0, "ignore_eos": True}))' "$P")
port=18431
for sp in none ngram; do
	port=$((port + 1))
	"$B/atlas-serve" -m models/default --device cuda --port $port --speculative $sp >"$OUT/serve-$sp.log" 2>&1 &
	pid=$!
	for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
	for i in 1 2 3; do
		curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
			-d "$body" >"$OUT/completion-$sp-$i.json"
	done
	curl -s "http://127.0.0.1:$port/metrics" | grep '^atlas_spec_\|^atlas_batch_invariant' >"$OUT/metrics-$sp.txt"
	kill $pid; wait $pid 2>/dev/null
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' \
		"$OUT/completion-$sp-1.json" >"$OUT/text-$sp.txt"
	echo "== --speculative $sp: $(wc -c <"$OUT/text-$sp.txt") bytes; $(tr '\n' ' ' <"$OUT/metrics-$sp.txt")"
done
cmp -s "$OUT/text-none.txt" "$OUT/text-ngram.txt" && echo "greedy texts: equal" || echo "greedy texts: DIFFER"
# atlas-run in batch-invariant mode: greedy with and without drafts
for sp in none ngram; do
	timeout 60 "$B/atlas-run" -m models/default --device cuda --batch-invariant -p "$P" -n 256 \
		--temperature 0 --ignore-eos --speculative $sp >"$OUT/run-bi-$sp.txt" 2>"$OUT/run-bi-$sp.err"
	echo "atlas-run --batch-invariant --speculative $sp: exit $?: $(tail -1 "$OUT/run-bi-$sp.err")"
done
cmp -s "$OUT/run-bi-none.txt" "$OUT/run-bi-ngram.txt" && echo "atlas-run --batch-invariant greedy: equal" ||
	echo "atlas-run --batch-invariant greedy: DIFFER"
