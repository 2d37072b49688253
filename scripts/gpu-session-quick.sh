#!/bin/bash
# gpu-session-quick.sh OUT [BUILD] - one device call for this session's
# kernels, most important first, each step time-boxed (binaries carried
# in BUILD, default .gpubuild; scripts/gpu-carry.sh):
#   1. test-fused-decode with ATLAS_CUDA_FUSED_QUANT=1 (fused = op by op
#      on BF16, fp8-block and w4a16 layers), then atlas-bench decode,
#      Qwen3-8B shape, batch 1, fp8-block and w4a16, fused and op by op,
#      and BF16 fused;
#   2. test-cuda-ops (W8A8 against the exact sums; the MoE op, now with
#      atlas_moe_gemv1 at decode sizes), then prefill 2048 and decode
#      batch 64 of fp8-block with and without ATLAS_FP8_W8A8=1 and BF16;
#   3. MoE decode, Qwen3-30B-A3B shape, batch 1, ATLAS_CUDA_MOE_GEMV1=1/0.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
b=$build/atlas-bench
nvidia-smi --query-gpu=name --format=csv,noheader
bench() { # label, then env assignments and atlas-bench arguments
	local label=$1
	shift
	printf '== %s: ' "$label"
	timeout 60 env "$@" 2>&1 | grep -E '^[0-9]+ +[0-9]' | tr -s ' ' | head -3 | tr '\n' ';'
	echo
}
ATLAS_CUDA_FUSED_QUANT=1 timeout 120 "$build/tests/gpu/test-fused-decode" >"$out/fused.log" 2>&1
echo "test-fused-decode: exit $?, $(grep -c '^ok' "$out/fused.log") ok, $(grep -c '^not ok' "$out/fused.log") not ok"
grep -E '^not ok|fp8-block|w4a16' "$out/fused.log" | head -12
grep -m1 ceilings <(timeout 60 "$b" decode --synthetic qwen3-8b --batch 1 --prompt 512 --gen 64 2>&1)
bench "bf16 b1 fused" "$b" decode --synthetic qwen3-8b --batch 1 --prompt 512 --gen 64
for q in fp8-block w4a16; do
	bench "$q b1 fused" ATLAS_CUDA_FUSED_QUANT=1 "$b" decode --synthetic qwen3-8b --quant $q \
		--batch 1 --prompt 512 --gen 64
	bench "$q b1 op by op" "$b" decode --synthetic qwen3-8b --quant $q --batch 1 --prompt 512 \
		--gen 64
done
timeout 200 "$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
echo "test-cuda-ops: exit $?, $(grep -c '^ok' "$out/ops.log") ok, $(grep -c '^not ok' "$out/ops.log") not ok"
grep -E '^not ok|FAIL|w8a8' "$out/ops.log" | head -14
for w in 1 0; do
	bench "fp8-block prefill 2048 W8A8=$w" ATLAS_FP8_W8A8=$w "$b" prefill --synthetic qwen3-8b \
		--quant fp8-block --prompt 2048
	bench "fp8-block decode b64 W8A8=$w" ATLAS_FP8_W8A8=$w "$b" decode --synthetic qwen3-8b \
		--quant fp8-block --batch 64 --prompt 512 --gen 32
done
bench "bf16 prefill 2048" "$b" prefill --synthetic qwen3-8b --prompt 2048
bench "bf16 decode b64" "$b" decode --synthetic qwen3-8b --batch 64 --prompt 512 --gen 32
for g in 1 0; do
	bench "moe b1 GEMV1=$g" ATLAS_CUDA_MOE_GEMV1=$g "$b" decode --synthetic qwen3-30b-a3b \
		--batch 1 --prompt 512 --gen 64
done
