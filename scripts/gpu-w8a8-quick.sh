#!/bin/bash
# gpu-w8a8-quick.sh OUT [BUILD] - W8A8 only, one short device call:
# test-cuda-ops (W8A8 against the exact sums, every other op), then
# prefill 512 / 2048 (profiled) and decode batch 32 / 64 of fp8-block
# with and without ATLAS_FP8_W8A8=1, and BF16, Qwen3-8B shape.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
b=$build/atlas-bench
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 "$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
echo "test-cuda-ops: exit $?, $(grep -c '^ok' "$out/ops.log") ok, $(grep -c '^not ok' "$out/ops.log") not ok"
grep -E '^not ok|FAIL|w8a8' "$out/ops.log" | head -12
for w in 1 0; do
	echo "== fp8-block ATLAS_FP8_W8A8=$w"
	ATLAS_FP8_W8A8=$w timeout 60 "$b" prefill --synthetic qwen3-8b --quant fp8-block \
		--prompt 512,2048 --profile 2>&1 | grep -E '^(ceilings|atlas_gemm|atlas_fp8|[0-9]+ )' | head -9
	ATLAS_FP8_W8A8=$w timeout 60 "$b" decode --synthetic qwen3-8b --quant fp8-block \
		--batch 32,64 --prompt 512 --gen 32 2>&1 | grep -E '^[0-9]+ '
done
echo "== bf16"
timeout 60 "$b" prefill --synthetic qwen3-8b --prompt 512,2048 2>&1 | grep -E '^[0-9]+ '
timeout 60 "$b" decode --synthetic qwen3-8b --batch 32,64 --prompt 512 --gen 32 2>&1 | grep -E '^[0-9]+ '
