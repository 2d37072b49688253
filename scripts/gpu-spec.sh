#!/bin/bash
# gpu-spec.sh [BUILD] - speculative decoding on the GPU machine, in one
# short device call (binaries carried in BUILD, a slimmed
# scripts/gpu-carry.sh carry: atlas-bench, atlas-run, atlas-serve):
#   1. what a verification step costs: one sequence's T rows (T = 1 + k
#      drafts) at a short context, as atlas-bench prefill of T tokens
#      (op by op, as a speculating step runs), default and batch-invariant
#      mode, beside the batch-1 decode step (fused, recorded) on the
#      Qwen3-8B shape (random weights made in process): the acceptance a
#      draft length needs to pay off
#   2. the shipped default model on CUDA: greedy with and without n-gram
#      drafts on a prompt that repeats itself (outputs compared, speeds)
#   3. atlas-bench serve --self on the default model with --speculative
#      ngram and without, concurrency 1 and 8
# Logs under $OUT; a summary on stdout.
B=${1:-build-gs}
sh scripts/gpu-unpack.sh "$B"
for bi in "" --batch-invariant; do
	echo "== verification rows (prefill of T tokens) ${bi:-default mode}"
	timeout 120 "$B/atlas-bench" prefill --synthetic qwen3-8b --prompt 1,2,3,5,9,17 --reps 5 \
		$bi --no-record 2>&1 >/dev/null | sed -n '/^prompt/,$p'
	echo "== decode batch 1 ${bi:-default mode}"
	timeout 120 "$B/atlas-bench" decode --synthetic qwen3-8b --batch 1 --prompt 16 --gen 64 \
		$bi --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
done
P=$(printf 'def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n')
for sp in none ngram; do
	echo "== default model on CUDA, greedy, --speculative $sp"
	timeout 60 "$B/atlas-run" --device cuda -p "$P" -n 256 --temperature 0 --ignore-eos \
		--speculative $sp >"$OUT/run-$sp.txt" 2>"$OUT/run-$sp.err"
	echo "exit $?: $(tail -1 "$OUT/run-$sp.err")"
done
cmp -s "$OUT/run-none.txt" "$OUT/run-ngram.txt" && echo "greedy outputs: equal" || echo "greedy outputs: DIFFER"
for sp in none ngram; do
	echo "== serve --self, default model, --speculative $sp"
	timeout 120 "$B/atlas-bench" serve --self --speculative $sp --concurrency 1,8 --prompt 64 \
		--gen 64 --requests 16 --vocab 40 --no-record --json >"$OUT/serve-$sp.json" 2>"$OUT/serve-$sp.txt"
	echo "exit $?"
	tail -3 "$OUT/serve-$sp.txt"
done
