#!/bin/bash
# gpu-draft.sh [BUILD] - speculative decoding on CUDA, in one short device
# call (binaries carried in BUILD, a slimmed scripts/gpu-carry.sh carry:
# atlas-bench, atlas-run, atlas-serve):
#   1. the shipped default model, greedy, 256 tokens of a prompt that
#      repeats itself: atlas-run with --speculative none, ngram and
#      draft (the model as its own draft), in default and in
#      --batch-invariant mode; outputs compared with the plain one of
#      the same mode, and the timing lines (acceptance, tok/s).
#      RUN_EXTRA: more atlas-run flags (e.g. --repeat-penalty 1, so that
#      the backend draws the tokens and the drafts)
#   2. atlas-serve (batch-invariant, its default) on the default model
#      with none, ngram and draft: the same prompt through
#      /v1/completions, texts compared, /metrics' atlas_spec_* counters
#   3. real shapes (random weights, scripts/make-synthetic.py): a
#      Qwen3-8B-shaped model with a Qwen3-0.6B-shaped draft, atlas-bench
#      serve --self at concurrency 1 and 8, with and without the draft:
#      what the draft passes cost against what the accepted drafts give
#      (random weights accept what they accept: the acceptance here says
#      nothing of real models, the step times do)
#   fused: test-fused-decode's case of a Qwen3-8B model with a
#      Qwen3-0.6B model loaded on its backend after it (carry
#      tests/gpu/test-fused-decode too)
# PARTS picks parts (default "run serve shapes"). Logs under $OUT; a
# summary on stdout.
B=${1:-build-gs}
PARTS=" ${PARTS:-run serve shapes} "
sh scripts/gpu-unpack.sh "$B"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
P=$(printf 'def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n')
DM=models/default
for bi in "" --batch-invariant; do
	[[ $PARTS == *" run "* ]] || break
	tag=${bi:+bi}
	tag=${tag:-def}
	for sp in none ngram draft; do
		extra=()
		[ "$sp" = draft ] && extra=(--draft-model "$DM")
		[ "$sp" = ngram ] && extra=(--speculative ngram)
		timeout 90 "$B/atlas-run" -m "$DM" --device cuda $bi ${RUN_EXTRA:-} -p "$P" -n 256 --temperature 0 \
			--ignore-eos "${extra[@]}" >"$OUT/run-$tag-$sp.txt" 2>"$OUT/run-$tag-$sp.err"
		echo "atlas-run ${bi:-(default mode)} --speculative $sp: exit $?: $(tail -1 "$OUT/run-$tag-$sp.err")"
	done
	for sp in ngram draft; do
		cmp -s "$OUT/run-$tag-none.txt" "$OUT/run-$tag-$sp.txt" && echo "  $sp greedy = none: equal" ||
			echo "  $sp greedy = none: DIFFER (from byte $(cmp "$OUT/run-$tag-none.txt" "$OUT/run-$tag-$sp.txt" | awk '{print $5}'))"
	done
done

body=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 256, "temperature": 0, "ignore_eos": True}))' "$P")
port=18431
for sp in none ngram draft; do
	[[ $PARTS == *" serve "* ]] || break
	port=$((port + 1))
	extra=()
	[ "$sp" = draft ] && extra=(--draft-model "$DM")
	[ "$sp" = ngram ] && extra=(--speculative ngram)
	"$B/atlas-serve" -m "$DM" --device cuda --port $port "${extra[@]}" >"$OUT/serve-$sp.log" 2>&1 &
	pid=$!
	for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
	for i in 1 2; do
		curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
			-d "$body" >"$OUT/completion-$sp-$i.json"
	done
	curl -s "http://127.0.0.1:$port/metrics" | grep '^atlas_spec_' >"$OUT/metrics-$sp.txt"
	kill $pid
	wait $pid 2>/dev/null
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' \
		"$OUT/completion-$sp-1.json" >"$OUT/text-$sp.txt" 2>>"$OUT/serve-$sp.log"
	echo "atlas-serve --speculative $sp: $(wc -c <"$OUT/text-$sp.txt") bytes; $(tr '\n' ' ' <"$OUT/metrics-$sp.txt")"
done
for sp in ngram draft; do
	[[ $PARTS == *" serve "* ]] || break
	cmp -s "$OUT/text-none.txt" "$OUT/text-$sp.txt" && echo "  serve $sp greedy = none: equal" ||
		echo "  serve $sp greedy = none: DIFFER"
done

if [[ $PARTS == *" fused "* ]]; then
	# the fused kernel of a model with a smaller one loaded beside it
	HARNESS_ONLY="beside it" "$B/tests/gpu/test-fused-decode" >"$OUT/fused-beside.log" 2>&1
	echo "test-fused-decode (a second model beside): exit $?: $(grep -c '^ok' "$OUT/fused-beside.log") ok, $(grep -c '^not ok' "$OUT/fused-beside.log") not ok"
	grep '^not ok\|^# ' "$OUT/fused-beside.log" | head -12
fi
[[ $PARTS == *" shapes "* ]] || exit 0
t8=/tmp/q8
d06=/tmp/q06
[ -f "$t8/config.json" ] || python3 scripts/make-synthetic.py qwen3-8b "$t8" >/dev/null
[ -f "$d06/config.json" ] || python3 scripts/make-synthetic.py qwen3-0.6b "$d06" >/dev/null
# the fused one-token kernel (default mode) of the target with the
# draft's beside it on one backend
timeout 120 "$B/atlas-run" -m "$t8" --device cuda --draft-model "$d06" -p "$P" -n 64 \
	--temperature 0 --ignore-eos >"$OUT/run-8b-draft.txt" 2>"$OUT/run-8b-draft.err"
echo "atlas-run 8B shape, 0.6B-shape draft, default mode: exit $?: $(tail -1 "$OUT/run-8b-draft.err")"
for m in ${MODES:-bi nbi}; do
	mode=
	[ "$m" = nbi ] && mode=--no-batch-invariant
	for sp in none draft; do
		extra=()
		[ "$sp" = draft ] && extra=(--draft-model "$d06" --num-draft ${NUM_DRAFT:-4})
		echo "== serve --self qwen3-8b shape ${mode:-batch-invariant} --speculative $sp"
		timeout 110 "$B/atlas-bench" serve --self -m "$t8" $mode "${extra[@]}" --concurrency 1,8 \
			--prompt 512 --gen 128 --requests 8 --vocab 4000 --no-record --json \
			>"$OUT/bench-${mode:+nbi-}$sp.json" 2>"$OUT/bench-${mode:+nbi-}$sp.txt"
		echo "exit $?"
		grep -A3 '^concurrency\|^ *conc' "$OUT/bench-${mode:+nbi-}$sp.txt" | tail -4
	done
done
