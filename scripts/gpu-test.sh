#!/bin/bash
# gpu-test.sh OUT [BUILD] - the GPU half of the test suite, on a machine
# with an H100/H200 and binaries already built (make gpu-tests, or carried
# from a build machine). Writes OUT/summary.md (a table) and the full logs:
#   1. every CUDA op against the CPU op (build/tests/gpu/test-cuda-ops),
#      again under each alternative decode GEMV (ATLAS_CUDA_GEMV=fma|tc|bulk)
#   1b. the tensor-core summation facts of tests/gpu/probe-mma-order.cu
#   2. the fused one-token decode equals the op-by-op decode on synthetic
#      models (build/tests/gpu/test-fused-decode)
#   3. every golden model on CUDA (test-golden with ATLAS_TEST_DEVICE=cuda),
#      batch invariance end to end, with the tensor-core invariant
#      attention (the default) and the split-K one (ATLAS_CUDA_ATT_INV=0), and the goldens
#      and attention op tests with decode on its split form (ATLAS_CUDA_ATT_TC=1)
#   3d. hybrid models' recurrent state on CUDA (test-hybrid)
#   4. tokenize | generate | detokenize on CUDA equals -p on CUDA
#   5. device selection messages and a short decode timing
# Exit status 0 only if every part passed.
set -u
out=${1:?usage: gpu-test.sh OUT [BUILD]}
build=${2:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export ATLAS_SRC="$src" PATH="$src/$build:$PATH"
cd "$src"
sh scripts/gpu-unpack.sh "$build"
status=0
summary="$out/summary.md"
echo "| part | result | detail |" >"$summary"
echo "|---|---|---|" >>"$summary"
row() { echo "| $1 | $2 | $3 |" >>"$summary"; [ "$2" = pass ] || status=1; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
echo "# gpu: $(cat "$out/gpu.txt")"

# 1. ops
"$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
rc=$?
fails=$(grep -c '^not ok' "$out/ops.log")
row "CUDA ops vs CPU" "$([ $rc -eq 0 ] && [ "$fails" -eq 0 ] && echo pass || echo FAIL)" \
	"$(grep -c ' ok$' "$out/ops.log") cases ok, $(grep -c ' FAIL$' "$out/ops.log") failed; $(grep 'worst' "$out/ops.log" | sed 's/^# //')"

# the alternative decode GEMVs (ATLAS_CUDA_GEMV) must be as correct
for alt in fma tc bulk; do
	ATLAS_CUDA_GEMV=$alt "$build/tests/gpu/test-cuda-ops" >"$out/ops-$alt.log" 2>&1
	rc=$?
	fails=$(grep -c '^not ok' "$out/ops-$alt.log")
	row "CUDA ops vs CPU, ATLAS_CUDA_GEMV=$alt" "$([ $rc -eq 0 ] && [ "$fails" -eq 0 ] && echo pass || echo FAIL)" \
		"$(grep -c ' ok$' "$out/ops-$alt.log") cases ok, $(grep -c ' FAIL$' "$out/ops-$alt.log") failed"
done

# the tensor-core facts the batch-invariant GEMMs rely on (a k-step's bits
# do not depend on slots or on mma.sync against wgmma), built here by nvcc
if command -v nvcc >/dev/null 2>&1 &&
	nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o "$out/probe-mma-order" \
		tests/gpu/probe-mma-order.cu >"$out/probe.log" 2>&1; then
	for spread in 2 12 30; do "$out/probe-mma-order" $spread; done >>"$out/probe.log" 2>&1
	rc=$?
	row "tensor-core summation facts" "$([ $rc -eq 0 ] && ! grep -q differ "$out/probe.log" && echo pass || echo FAIL)" \
		"$(grep -c ': ok' "$out/probe.log") of 12 facts hold (tests/gpu/probe-mma-order.cu)"
	rm -f "$out/probe-mma-order"
else
	row "tensor-core summation facts" FAIL "nvcc could not build tests/gpu/probe-mma-order.cu"
fi

# 2. fused decode: every layer of a one-token step in one kernel gives the
# logits of the op-by-op step (qwen3-0.6b, qwen3-8b and llama3-8b shapes)
"$build/tests/gpu/test-fused-decode" >"$out/fused.log" 2>&1
rc=$?
row "fused decode = unfused" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/fused.log" && echo pass || echo FAIL)" \
	"$(grep -c '^ok' "$out/fused.log") ok, $(grep -c '^not ok' "$out/fused.log") not ok; $(grep -m1 -e '^# overall:' -e '# skip' "$out/fused.log" | sed 's/^# overall: //; s/^1..0 # //')"

# 3. golden models
ATLAS_TEST_DEVICE=cuda ATLAS_LOG=info "$build/tests/test-golden" >"$out/golden.log" 2>&1
rc=$?
row "golden models on CUDA" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
	"$(grep -c '^ok' "$out/golden.log") ok, $(grep -c '^not ok' "$out/golden.log") not ok; $(grep 'worst' "$out/golden.log" | sed 's/^# //')"

# 3b. batch invariance end to end on CUDA (tests/unit/test-invariance.c):
# a 700-token prompt in one step = in chunks of 512, 100, 64 and 1; a
# sequence decoded alone = in batches of 7, 32 and 64; bit for bit
ATLAS_TEST_DEVICE=cuda "$build/tests/test-invariance" >"$out/invariance.log" 2>&1
rc=$?
row "batch invariance (chunks, batch sizes)" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/invariance.log" && echo pass || echo FAIL)" \
	"$(grep -c '^ok' "$out/invariance.log") ok, $(grep -c '^not ok' "$out/invariance.log") not ok; $(grep -c ' 0 of ' "$out/invariance.log") comparisons equal"

# 3b'. hybrid models on CUDA (tests/unit/test-hybrid.c): chunking and
# batch invariance, reset, cut-back and warm prefix cache = cold, bit for bit
ATLAS_TEST_DEVICE=cuda "$build/tests/test-hybrid" >"$out/hybrid.log" 2>&1
rc=$?
row "hybrid models (state, invariance, snapshots)" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/hybrid.log" && echo pass || echo FAIL)" \
	"$(grep -c '^ok' "$out/hybrid.log") ok, $(grep -c '^not ok' "$out/hybrid.log") not ok"

# att_switch NAME VAR=VAL TEST TAG: with VAR=VAL, the attention op tests
# and tests/TEST on CUDA, one row (logs OUT/att-TAG-ops.log, -TAG-model.log)
att_switch() {
	env "$2" HARNESS_ONLY=attention "$build/tests/gpu/test-cuda-ops" >"$out/att-$4-ops.log" 2>&1
	local rc=$?
	env "$2" ATLAS_TEST_DEVICE=cuda "$build/tests/$3" >"$out/att-$4-model.log" 2>&1
	local rc2=$?
	row "$1 ($2)" \
		"$([ $rc -eq 0 ] && [ $rc2 -eq 0 ] && ! grep -q '^not ok' "$out/att-$4-ops.log" "$out/att-$4-model.log" && echo pass || echo FAIL)" \
		"ops: $(grep -c '^ok' "$out/att-$4-ops.log") ok, $(grep -c '^not ok' "$out/att-$4-ops.log") not ok; $3: $(grep -c '^ok' "$out/att-$4-model.log") ok, $(grep -c '^not ok' "$out/att-$4-model.log") not ok"
}

# 3c. the same, and the attention op tests, with the split-K kernel in
# batch-invariant mode instead of the tensor-core invariant attention
# (attention_inv.cu, the default, which 3 tests)
att_switch "invariant attention on the split-K kernel" ATLAS_CUDA_ATT_INV=0 test-invariance inv

# 3d. decode attention outside batch-invariant mode on the same kernels'
# split form: the attention op tests against the CPU and the golden models
att_switch "decode attention on tensor cores" ATLAS_CUDA_ATT_TC=1 test-golden tc

# 4. the pipe equals -p, on CUDA
pipe_ok=pass
: >"$out/pipe.log"
for m in models/default tests/fixtures/golden/qwen3-bf16 tests/fixtures/golden/llama3; do
	for flags in "--temperature 0" "--temperature 0.9 --top-k 20 --top-p 0.9 --min-p 0.05 --seed 7"; do
		# shellcheck disable=SC2086
		atlas-run -m "$m" --device cuda -p "The meaning of life is" -n 24 -q $flags >"$out/p.txt" 2>>"$out/pipe.log"
		# shellcheck disable=SC2086
		printf 'The meaning of life is\n' | atlas-run tokenize -m "$m" |
			atlas-run generate -m "$m" --device cuda -n 24 -q $flags 2>>"$out/pipe.log" |
			atlas-run detokenize -m "$m" >"$out/q.txt"
		if cmp -s "$out/p.txt" "$out/q.txt" && [ -s "$out/p.txt" ]; then r=same; else r=DIFFERENT; pipe_ok=FAIL; fi
		echo "$m [$flags]: $r" >>"$out/pipe.log"
	done
done
row "pipe = -p on CUDA" "$pipe_ok" "$(grep -c ': same' "$out/pipe.log") of 6 identical"

# 5. selection and a short timing
atlas-run -m tests/fixtures/golden/llama3 -p hi -n 4 -v >/dev/null 2>"$out/select.log"
atlas-run -m tests/fixtures/golden/qwen3 -p hi -n 4 -v >/dev/null 2>>"$out/select.log"
atlas-run -m tests/fixtures/golden/qwen3 --device cpu -p hi -n 4 -v >/dev/null 2>>"$out/select.log"
sel=$(grep -c 'kernel target' "$out/select.log")
row "device selection" "$([ "$sel" -ge 2 ] && grep -q 'device: cpu' "$out/select.log" && echo pass || echo FAIL)" \
	"$(grep -m1 'kernel target' "$out/select.log" | sed 's/atlas: info: //'); --device cpu honoured"
# 6. the server on CUDA: 64 concurrent temperature-0 requests with prompts
# of 1..1000 tokens give exactly what each gives alone, text and logprobs
# (batch composition and chunked prefill must not change results)
if [ -x "$build/atlas-serve" ] && command -v python3 >/dev/null; then
	port=$((20000 + RANDOM % 20000))
	"$build/atlas-serve" -m models/default --device cuda --port $port --max-seqs 64 \
		>"$out/serve.log" 2>&1 &
	spid=$!
	python3 -c "
import time, urllib.request
for i in range(60):
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/health'); break
    except Exception: time.sleep(0.5)"
	timeout 300 python3 scripts/serve-check.py "http://127.0.0.1:$port" 64 1-1000 16 >"$out/serve-check.txt" 2>&1
	rc=$?
	kill $spid 2>/dev/null
	row "serve: batched = alone on CUDA" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" "$(head -1 "$out/serve-check.txt")"
fi

# 7. a model that does not fit says how much it needed and how much was free
# (the synthetic Qwen3-0.6B shape with a 16M-token context: ~1.9 TB of KV)
if [ -n "${SYNTH:-}" ] && [ -d "$SYNTH" ]; then
	atlas-run -m "$SYNTH" --device cuda -c 16777216 -p hi -n 2 >/dev/null 2>"$out/oom.log"
	rc=$?
	row "out of memory at load" "$([ $rc -ne 0 ] && grep -q 'needs .* MiB free of' "$out/oom.log" && echo pass || echo FAIL)" \
		"exit $rc: $(head -1 "$out/oom.log" | cut -c1-160)"
fi
if [ -n "${SYNTH:-}" ] && [ -d "$SYNTH" ]; then
	atlas-run -m "$SYNTH" -p "$(printf 'word %.0s' $(seq 1 120))" -n 128 --ignore-eos -v \
		>/dev/null 2>"$out/bench.log"
	row "decode timing ($(basename "$SYNTH"))" info "$(grep '^atlas-run: prompt' "$out/bench.log" | sed 's/atlas-run: //; s/|/\//g')"
fi
cat "$summary"
exit $status
