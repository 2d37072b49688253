#!/bin/bash
# cpu-grammar-bench.sh [BUILD] - what grammar-constrained decoding costs a
# decode step on the CPU backend with the shipped default model (issue
# 21's CPU number), as gpu-grammar-bench.sh measures it on the GPU: 2b
# prompts b at a time (b = 1 and 32), 128 tokens each at temperature 1,
# free and constrained by scripts/bench-schema.json; the first b prompts
# pass through a fresh grammar, the next b find it warm; best of three.
# Prints a table (ms per step of the slowest prompt of each half).
set -u
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src" || exit 1
run=$build/atlas-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 64); do echo "{\"prompt\": \"Record $i of the catalogue, as JSON:\"}"; done >"$tmp/p32.jsonl"
head -2 "$tmp/p32.jsonl" >"$tmp/p1.jsonl"
. "$src/scripts/grammar-bench-lib.sh"
echo "| batch | free ms/step | constrained, first pass | cost | constrained, warm | cost |"
echo "|---|---|---|---|---|---|"
for b in 1 32; do
	for mode in free schema; do
		args=""
		[ $mode = schema ] && args="--json-schema scripts/bench-schema.json"
		for rep in 1 2 3; do
			# shellcheck disable=SC2086
			"$run" -f "$tmp/p$b.jsonl" --jsonl -n 128 --ignore-eos --temperature 1 --seed 7 \
				--parallel $b $args >/dev/null 2>"$tmp/run.txt"
			for part in cold warm; do
				if [ $part = cold ]; then ms=$(step_ms 1 $b <"$tmp/run.txt"); else ms=$(step_ms $((b + 1)) $((2 * b)) <"$tmp/run.txt"); fi
				eval "cur=\${best_${mode}_$part:-}"
				if [ -z "$cur" ] || awk -v a="$ms" -v c="$cur" 'BEGIN { exit !(a < c) }'; then
					eval "best_${mode}_$part=$ms"
				fi
			done
		done
	done
	free=$(awk -v a="$best_free_cold" -v b="$best_free_warm" 'BEGIN { printf "%.3f", (a < b ? a : b) }')
	echo "| $b | $free | $best_schema_cold | $(pct "$free" "$best_schema_cold") | $best_schema_warm | $(pct "$free" "$best_schema_warm") |"
	unset best_free_cold best_free_warm best_schema_cold best_schema_warm
done
