#!/bin/bash
# gpu-grammar-bench.sh OUT [BUILD] - what grammar-constrained decoding
# costs a decode step on an H100/H200 (issue 21): the Qwen3-8B-shape
# checkpoint of random weights (gpu-prelude.sh) with the real Qwen3
# tokenizer (151,669 tokens; scripts/gpu-carry.sh packs it into BUILD as
# qwen3-tok/), prompts through atlas-run, 256 tokens each, free and
# constrained by scripts/bench-schema.json (a nested object: 8 items of 5
# fields each, an inner object and an array; it does not complete within
# 256 tokens, so both runs decode exactly as many tokens). Batch 1 (one
# prompt, three times) and batch 32 (32 prompts at once), the same
# prompts, seeds and token counts with and without the grammar.
#   batch1.txt, batch32.txt  the runs' stderr
#   out-*.jsonl              the outputs (the constrained ones parse as
#                            a prefix of the schema's JSON)
#   summary.md               decode ms per step, free against constrained
set -u
. "$(dirname "$0")/gpu-prelude.sh"
run=$build/atlas-run
mq=/tmp/q8-qwen3tok
mkdir -p "$mq"
for f in "$m"/*.safetensors "$m"/*.json; do ln -sf "$f" "$mq/"; done
rm -f "$mq/tokenizer.json" "$mq/tokenizer_config.json"
cp "$build/qwen3-tok/tokenizer.json" "$build/qwen3-tok/tokenizer_config.json" "$mq/"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1
for i in $(seq 32); do echo "{\"prompt\": \"Record $i of the catalogue, as JSON:\"}"; done >/tmp/g32.jsonl
head -1 /tmp/g32.jsonl >/tmp/g1.jsonl
summary=$out/summary.md
echo "| batch | free ms/step | constrained ms/step | cost |" >"$summary"
echo "|---|---|---|---|" >>"$summary"
# per-step decode time: generation time (after the first token) over the
# steps after the first, the slowest prompt of the batch (they run
# together); best of three for batch 1
step_ms() {
	awk '/generated [0-9]+ tokens in/ { for (i = 1; i <= NF; i++) if ($i == "generated") { n = $(i + 1); t = $(i + 4) } ms = t / (n - 1); if (ms > worst) worst = ms } END { printf "%.3f", worst }'
}
for b in 1 32; do
	for mode in free schema; do
		args=""
		[ $mode = schema ] && args="--json-schema scripts/bench-schema.json"
		best=""
		for rep in 1 2 3; do
			# shellcheck disable=SC2086
			timeout 300 "$run" -m "$mq" -f /tmp/g$b.jsonl --jsonl -n 256 --ignore-eos --temperature 1 \
				--seed 7 --parallel 32 -c 1024 $args >"$out/out-$b-$mode.jsonl" 2>"$out/run-$b-$mode-$rep.txt"
			ms=$(step_ms <"$out/run-$b-$mode-$rep.txt")
			cat "$out/run-$b-$mode-$rep.txt" >>"$out/batch$b.txt"
			if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$ms; fi
		done
		eval "ms_$mode=$best"
	done
	echo "| $b | $ms_free | $ms_schema | $(awk -v f="$ms_free" -v s="$ms_schema" 'BEGIN { printf "%+.1f%%", (s / f - 1) * 100 }') |" >>"$summary"
done
cat "$summary"
