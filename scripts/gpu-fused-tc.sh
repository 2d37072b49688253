#!/bin/bash
# gpu-fused-tc.sh OUT [BUILD] - one device call for the fused one-token
# kernel's FP8 and 4-bit consumers on the tensor cores (decode_fused.cu),
# each step time-boxed (binaries carried in BUILD, default .gpubuild;
# scripts/gpu-carry.sh):
#   1. test-fused-decode with ATLAS_CUDA_FUSED_QUANT=1 (fused = op by op
#      on BF16, fp8-block and w4a16 layers) and the golden models on CUDA
#      with it (the FP8 fixtures' decode steps through the fused kernel);
#   2. atlas-bench decode, Qwen3-8B shape, batch 1, 512-token prompt:
#      BF16 fused; fp8-block and w4a16 fused, op by op, and fused with
#      ATLAS_CUDA_FUSED_MODE=3 (the weight stream alone: the floor the
#      consumers are held to); BF16 weights only, and fp8-block with
#      mode 1 (no attention phase) and 2 (no grid barriers);
#      With an A/B build carried (atlas-bench-ab), both formats' fused
#      steps with it and again with the default build.
#   3. with FUSED_TC_PROFILE=1, profiles of the fused FP8 and 4-bit steps, normal and weights only.
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
ATLAS_CUDA_FUSED_QUANT=1 timeout 150 "$build/tests/gpu/test-fused-decode" >"$out/fused.log" 2>&1
echo "test-fused-decode: exit $?, $(grep -c '^ok' "$out/fused.log") ok, $(grep -c '^not ok' "$out/fused.log") not ok"
grep -E '^not ok|fp8-block|w4a16' "$out/fused.log" | head -12
ATLAS_CUDA_FUSED_QUANT=1 ATLAS_TEST_DEVICE=cuda ATLAS_LOG=info timeout 120 \
	"$build/tests/test-golden" >"$out/golden.log" 2>&1
echo "test-golden (fused quant): exit $?, $(grep -c '^ok' "$out/golden.log") ok, $(grep -c '^not ok' "$out/golden.log") not ok"
grep -E '^not ok' "$out/golden.log" | head -5
grep -m1 ceilings <(timeout 60 "$b" decode --synthetic qwen3-8b --batch 1 --prompt 512 --gen 64 2>&1)
bench "bf16 b1 fused" "$b" decode --synthetic qwen3-8b --batch 1 --prompt 512 --gen 64
for q in fp8-block w4a16; do
	bench "$q b1 fused" ATLAS_CUDA_FUSED_QUANT=1 "$b" decode --synthetic qwen3-8b --quant $q \
		--batch 1 --prompt 512 --gen 64
	bench "$q b1 op by op" ATLAS_CUDA_FUSED_QUANT=0 "$b" decode --synthetic qwen3-8b --quant $q \
		--batch 1 --prompt 512 --gen 64
	bench "$q b1 fused, weights only" ATLAS_CUDA_FUSED_QUANT=1 ATLAS_CUDA_FUSED_MODE=3 "$b" decode \
		--synthetic qwen3-8b --quant $q --batch 1 --prompt 512 --gen 64
done
# an A/B build (scripts/gpu-carry.sh with ATLAS_AB_FLAGS) beside the default one
if [ -x "$build/atlas-bench-ab" ]; then
	for q in fp8-block w4a16; do
		bench "$q b1 fused, A/B build" ATLAS_CUDA_FUSED_QUANT=1 "$build/atlas-bench-ab" decode \
			--synthetic qwen3-8b --quant $q --batch 1 --prompt 512 --gen 64
		bench "$q b1 fused, default build" ATLAS_CUDA_FUSED_QUANT=1 "$b" decode \
			--synthetic qwen3-8b --quant $q --batch 1 --prompt 512 --gen 64
	done
fi
bench "bf16 b1 fused, weights only" ATLAS_CUDA_FUSED_MODE=3 "$b" decode --synthetic qwen3-8b --batch 1 \
	--prompt 512 --gen 64
for mo in 1 2; do
	bench "fp8-block b1 fused, mode $mo" ATLAS_CUDA_FUSED_QUANT=1 ATLAS_CUDA_FUSED_MODE=$mo "$b" decode \
		--synthetic qwen3-8b --quant fp8-block --batch 1 --prompt 512 --gen 64
done
[ -n "${FUSED_TC_PROFILE:-}" ] || exit 0
# 3. where a fused step's time goes, FP8 and 4-bit, normal and weights only
for q in fp8-block w4a16; do
	for mo in 0 3; do
		ATLAS_CUDA_FUSED_QUANT=1 ATLAS_CUDA_FUSED_MODE=$mo timeout 60 "$b" decode --synthetic qwen3-8b \
			--quant $q --batch 1 --prompt 512 --gen 16 --profile >"$out/prof-$q-$mo.txt" 2>&1
		echo "== profile $q mode $mo:"
		grep -E "atlas_|ms" "$out/prof-$q-$mo.txt" | head -8
	done
done
