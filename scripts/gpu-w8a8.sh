#!/bin/bash
# gpu-w8a8.sh OUT [BUILD] - FP8 W8A8 (ATLAS_FP8_W8A8=1: x quantized per row
# and 128 columns, atlas_gemm_tc_f8) on the GPU machine, binaries carried
# in BUILD (default .gpubuild; scripts/gpu-carry.sh):
#   test-cuda-ops (every op; its w8a8 lines against the exact W8A8 sums),
#   then atlas-bench on the Qwen3-8B shape: prefill 512 and 2048 tokens
#   and decode at batch 32 and 64, fp8-block weight-only, fp8-block W8A8
#   and BF16, in one call. OPS=0 skips the op test. Prints the tables.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "${OPS:-1}" != 0 ]; then
	"$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
	echo "test-cuda-ops: exit $?, $(grep -c '^ok' "$out/ops.log") ok, $(grep -c '^not ok' "$out/ops.log") not ok"
	grep -E '^not ok|FAIL|w8a8|^# worst' "$out/ops.log" | head -40
fi
run() { # label, env..., then atlas-bench arguments
	local label=$1
	shift
	echo "== $label"
	env "$@" 2>&1 | grep -vE '^(atlas|#)' | head -12
}
for w in 0 1; do
	run "prefill fp8-block W8A8=$w" ATLAS_FP8_W8A8=$w "$build/atlas-bench" prefill \
		--synthetic qwen3-8b --quant fp8-block --prompt 512,2048
done
run "prefill bf16" "$build/atlas-bench" prefill --synthetic qwen3-8b --prompt 512,2048
for w in 0 1; do
	run "decode fp8-block W8A8=$w" ATLAS_FP8_W8A8=$w "$build/atlas-bench" decode \
		--synthetic qwen3-8b --quant fp8-block --batch 32,64 --prompt 512 --gen 128
done
run "decode bf16" "$build/atlas-bench" decode --synthetic qwen3-8b --batch 32,64 --prompt 512 \
	--gen 128
