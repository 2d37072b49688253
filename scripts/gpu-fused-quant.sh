#!/bin/bash
# gpu-fused-quant.sh OUT [BUILD] - the fused one-token decode on quantized
# weights (F8B, W4B), on the GPU machine with binaries carried in BUILD
# (default .gpubuild; scripts/gpu-carry.sh):
#   test-fused-decode (every shape, the fp8-block and w4a16 ones among
#   them: fused = op by op), then atlas-bench decode, Qwen3-8B shape,
#   batch 1, 512-token prompt, 128 generated, BF16 / fp8-block / w4a16
#   weights, fused (the default) and op by op (ATLAS_CUDA_FUSED=0), all
#   in one call against the copy ceiling measured in each run.
# FUSED_TEST=0 skips the test; QUANTS picks the formats. Prints the tables.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
export ATLAS_CUDA_FUSED_QUANT=1 # the quantized streams are opt-in
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "${FUSED_TEST:-1}" != 0 ]; then
	"$build/tests/gpu/test-fused-decode" >"$out/fused.log" 2>&1
	echo "test-fused-decode: exit $?, $(grep -c '^ok' "$out/fused.log") ok, $(grep -c '^not ok' "$out/fused.log") not ok"
	grep -E '^not ok|^# overall|fp8-block|w4a16' "$out/fused.log" | grep -v '^ok' | head -40
fi
for q in ${QUANTS:-bf16 fp8-block w4a16}; do
	for f in 1 0; do
		echo "== weights $q, ATLAS_CUDA_FUSED=$f"
		ATLAS_CUDA_FUSED=$f "$build/atlas-bench" decode --synthetic qwen3-8b --quant "$q" \
			--batch 1 --prompt 512 --gen 128 2>&1 | grep -E '^(1 |ceilings|batch)|fused decode'
	done
done
