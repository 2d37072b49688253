#!/bin/bash
# gpu-moe-ab.sh OUT [BUILD] - MoE decode A/B on the GPU machine (binaries
# carried in BUILD, default .gpubuild; scripts/gpu-carry.sh): atlas-bench
# decode, Qwen3-30B-A3B shape, batch 1 and 8, 512-token prompt, 64
# generated, with the CUDA-core expert GEMV (atlas_moe_gemv1, the
# default) and without (ATLAS_CUDA_MOE_GEMV1=0), in one call.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
for g in 1 0; do
	echo "== ATLAS_CUDA_MOE_GEMV1=$g"
	ATLAS_CUDA_MOE_GEMV1=$g "$build/atlas-bench" decode --synthetic qwen3-30b-a3b \
		--batch "${MOE_BATCH:-1,8}" --prompt 512 --gen 64 2>&1 | grep -vE '^(atlas|#)' | head -8
done
