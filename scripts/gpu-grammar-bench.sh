#!/bin/bash
# gpu-grammar-bench.sh OUT [BUILD] - what grammar-constrained decoding
# costs a decode step on an H100/H200 (issue 21): the Qwen3-8B-shape
# checkpoint of random weights (gpu-prelude.sh) with the real Qwen3
# tokenizer (151,669 tokens; scripts/gpu-carry.sh packs it into BUILD as
# qwen3-tok/), prompts through atlas-run, 256 tokens each, free and
# constrained by scripts/bench-schema.json (a nested object: 8 items of 5
# fields each, an inner object and an array; it does not complete within
# 256 tokens, so both runs decode exactly as many tokens). Batch 1 and
# batch 32, the same prompts, seeds and token counts with and without the
# grammar; the first pass through the grammar (its mask cache empty) and
# a warm one, best of three runs each.
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
for i in $(seq 64); do echo "{\"prompt\": \"Record $i of the catalogue, as JSON:\"}"; done >/tmp/g64.jsonl
head -2 /tmp/g64.jsonl >/tmp/g1.jsonl
cp /tmp/g64.jsonl /tmp/g32.jsonl
summary=$out/summary.md
{
	echo "| batch | free ms/step | constrained, first pass | cost | constrained, warm | cost |"
	echo "|---|---|---|---|---|---|"
} >"$summary"
. "$src/scripts/grammar-bench-lib.sh"
# batch b: 2b prompts, b at a time; the first b pass through the grammar
# first (its mask cache fills), the second b find it warm, as requests
# with the same schema do in a server (atlas-serve keeps compiled grammars)
for b in 1 32; do
	for mode in free schema; do
		args=""
		[ $mode = schema ] && args="--json-schema scripts/bench-schema.json"
		for rep in 1 2 3; do
			# shellcheck disable=SC2086
			timeout 300 "$run" -m "$mq" -f /tmp/g$b.jsonl --jsonl -n 256 --ignore-eos --temperature 1 \
				--seed 7 --parallel $b -c 1024 $args >"$out/out-$b-$mode.jsonl" 2>"$out/run.txt"
			cat "$out/run.txt" >>"$out/batch$b.txt"
			for part in cold warm; do
				if [ $part = cold ]; then ms=$(step_ms 1 $b <"$out/run.txt"); else ms=$(step_ms $((b + 1)) $((2 * b)) <"$out/run.txt"); fi
				eval "cur=\${best_${mode}_$part:-}"
				if [ -z "$cur" ] || awk -v a="$ms" -v c="$cur" 'BEGIN { exit !(a < c) }'; then
					eval "best_${mode}_$part=$ms"
				fi
			done
		done
	done
	free=$(awk -v a="$best_free_cold" -v b="$best_free_warm" 'BEGIN { printf "%.3f", (a < b ? a : b) }')
	echo "| $b | $free | $best_schema_cold | $(pct "$free" "$best_schema_cold") | $best_schema_warm | $(pct "$free" "$best_schema_warm") |" >>"$summary"
	unset best_free_cold best_free_warm best_schema_cold best_schema_warm
done
rm -f "$out/run.txt" "$out"/out-*.jsonl.tmp
cat "$summary"
