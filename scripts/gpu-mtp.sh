#!/bin/bash
# gpu-mtp.sh OUT [BUILD] - --speculative mtp on the GPU, with binaries
# carried from a build machine (scripts/gpu-carry.sh):
#   run-*.txt        atlas-run on CUDA (--batch-invariant) over the two
#                    hybrid fixtures that carry an MTP head, greedy and
#                    seeded, one prompt and four at once (-f --parallel 4):
#                    the output with MTP drafts against the plain output
#                    (the same bytes in batch-invariant mode), and the
#                    timing line's draft counts
#   serve.log        atlas-serve --speculative mtp on CUDA: a completion
#                    answered and drafts counted in atlas_spec_*
#   spec-K.json/.txt atlas-bench decode --synthetic qwen3.5-35b-a3b
#                    --speculative mtp --num-draft K (K = 2, 4): a plain
#                    step, the verification of 1 + K rows and the head's
#                    passes at that shape, the tokens a step to break even
#                    and the speed-up at 60/80/90% of drafts kept
#   summary.md       one line per check
# The heads' weights are random, so drafts are almost never accepted:
# this checks the CUDA path (the head reading the trunk's hidden rows in
# device memory), not the speed-up, which needs a trained head.
set -u
PRELUDE_NO_MODEL=1
# shellcheck source=scripts/gpu-prelude.sh
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_SRC="$src"
status=0
summary="$out/summary.md"
printf '| check | result | detail |\n|---|---|---|\n' >"$summary"
row() { echo "| $1 | $2 | $3 |" >>"$summary"; [ "$2" = FAIL ] && status=1; return 0; }
G=$src/tests/fixtures/golden
printf '%s\n' "the cat sat on the mat and the cat sat on the" "one two three four" \
	"a much longer prompt that runs for many more tokens than the others do" "x" >"$out/prompts"
for m in qwen3-next-bf16 qwen3-5-moe; do
	for args in "--temperature 0" "--temperature 0.9 --seed 4"; do
		tag=$m-$(echo "$args" | tr -cd 'a-z0-9')
		# shellcheck disable=SC2086
		timeout 120 "$build/atlas-run" --device cuda --batch-invariant -m "$G/$m" -n 64 \
			--ignore-eos $args -f "$out/prompts" --parallel 4 >"$out/run-$tag-plain.txt" \
			2>"$out/run-$tag-plain.err"
		# shellcheck disable=SC2086
		timeout 120 "$build/atlas-run" --device cuda --batch-invariant -m "$G/$m" -n 64 \
			--ignore-eos $args -f "$out/prompts" --parallel 4 --speculative mtp \
			>"$out/run-$tag-mtp.txt" 2>"$out/run-$tag-mtp.err"
		rc=$?
		same=$(cmp -s "$out/run-$tag-plain.txt" "$out/run-$tag-mtp.txt" && echo yes || echo no)
		row "atlas-run $m $args" "$([ $rc -eq 0 ] && [ "$same" = yes ] && echo pass || echo FAIL)" \
			"exit $rc, same bytes: $same; $(grep -o 'speculative (mtp): [^;]*' "$out/run-$tag-mtp.err" | head -1)"
	done
done
port=$((20000 + RANDOM % 20000))
timeout 120 "$build/atlas-serve" --device cuda -m "$G/qwen3-next-bf16" --host 127.0.0.1 \
	--port $port --speculative mtp >"$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 60); do
	curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
	sleep 0.5
done
req='{"prompt":"the cat sat on the mat and the cat sat on the","max_tokens":32,"temperature":0,"ignore_eos":true}'
a=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$req")
drafts=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^atlas_spec_draft_tokens_total //p')
kill $pid 2>/dev/null
wait $pid 2>/dev/null
echo "$a" >>"$out/serve.log"
row "atlas-serve --speculative mtp" "$(echo "$a" | grep -q '"text"' && [ "${drafts:-0}" -gt 0 ] && echo pass || echo FAIL)" \
	"drafts proposed: ${drafts:-none}"
for k in 2 4; do
	timeout 300 "$build/atlas-bench" decode --synthetic qwen3.5-35b-a3b --speculative mtp \
		--num-draft $k --prompt 512 --gen 32 --json >"$out/spec-$k.json" 2>"$out/spec-$k.txt"
	rc=$?
	row "MTP step cost, qwen3.5-35b-a3b, K=$k" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
		"$(grep -o 'speculative (mtp.*' "$out/spec-$k.txt" | head -1)"
done
cat "$summary"
exit $status
