#!/bin/bash
# gpu-fp4-quick.sh [BUILD] - decides atlas_gemv_fp4 (NVFP4 at T = 1
# outside batch-invariant mode) in one short device call: test_fp4b of
# test-cuda-ops (every T = 1 product within the op tolerance of the BF16
# product of the dequantized matrix, the batch-invariant ones equal to
# it), then batch-1 decode on the Qwen3-8B shape (random weights made in
# process) with NVFP4 kept native: the new GEMV, the tensor-core GEMV it
# replaces (ATLAS_CUDA_F8_FMA_MAX_T=0) and BF16, in one call. Logs under
# $OUT.
B=${1:-build-gs}
sh scripts/gpu-unpack.sh "$B"
HARNESS_ONLY=fp4b "$B/tests/gpu/test-cuda-ops" >"$OUT/fp4b.log" 2>&1
echo "test_fp4b: exit $? ok $(grep -c '^ok' "$OUT/fp4b.log") not ok $(grep -c '^not ok' "$OUT/fp4b.log")"
grep "T=1 \|^not ok" "$OUT/fp4b.log" | head -24
for run in "gemv_fp4:" "tensor-core:ATLAS_CUDA_F8_FMA_MAX_T=0"; do
	echo "== nvfp4 batch 1, ${run%%:*}"
	env ATLAS_FP4_NATIVE=1 ${run#*:} timeout 90 "$B/atlas-bench" decode --synthetic qwen3-8b \
		--quant nvfp4 --batch 1 --prompt 512 --gen 64 --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
done
echo "== bf16 batch 1"
timeout 90 "$B/atlas-bench" decode --synthetic qwen3-8b --batch 1 --prompt 512 --gen 64 \
	--no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
