#!/bin/bash
# gpu-att-tc.sh OUT [BUILD] - the tensor-core split attention for decode
# outside batch-invariant mode (ATLAS_CUDA_ATT_TC=1), and the serving
# check of the invariant family, on the GPU machine, binaries carried in
# BUILD (a slimmed scripts/gpu-carry.sh carry):
#   ops     test-cuda-ops' attention tests with ATLAS_CUDA_ATT_TC=1 (the
#           decode cases then run the split form against the CPU)
#   long    batch-1 decode at 4096 and 32768 tokens of context (Qwen3-8B
#           shape, random weights made in process): op by op
#           (ATLAS_CUDA_FUSED=0) with and without ATLAS_CUDA_ATT_TC=1,
#           and the fused kernel (the default) beside them; batch 64
#           at 512 and 4096 with and without it
#   serve   atlas-bench serve --self, batch-invariant, concurrency 1,
#           with ATLAS_CUDA_ATT_INV=1 and =0 (SERVE_REQ requests, 16)
# PARTS picks parts (default "ops long"). Summary to stdout.
PRELUDE_NO_MODEL=1
case " ${PARTS:-ops long} " in *" serve "*) PRELUDE_NO_MODEL= ;; esac
. "$(dirname "$0")/gpu-prelude.sh"
for p in ${PARTS:-ops long}; do
	case $p in
	ops)
		ATLAS_CUDA_ATT_TC=1 HARNESS_ONLY=attention "$build/tests/gpu/test-cuda-ops" >"$out/tc-ops.log" 2>&1
		echo "attention op tests, ATLAS_CUDA_ATT_TC=1: exit $? $(grep -c '^ok' "$out/tc-ops.log") ok, $(grep -c '^not ok' "$out/tc-ops.log") not ok"
		grep "^not ok" "$out/tc-ops.log" | head -20
		;;
	long)
		for cfg in "ATLAS_CUDA_FUSED=0 ATLAS_CUDA_ATT_TC=1" "ATLAS_CUDA_FUSED=0 ATLAS_CUDA_ATT_TC=0" "ATLAS_CUDA_FUSED=1"; do
			echo "== $cfg"
			env $cfg timeout 150 "$build/atlas-bench" decode --synthetic qwen3-8b --batch 1 \
				--prompt 4096,32768 --gen 32 --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
		done
		for tc in 1 0; do
			echo "== batch 64, ATLAS_CUDA_ATT_TC=$tc"
			ATLAS_CUDA_ATT_TC=$tc timeout 150 "$build/atlas-bench" decode --synthetic qwen3-8b \
				--batch 64 --prompt 512,4096 --gen 32 --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
		done
		;;
	serve)
		for ai in 1 0; do
			echo "== serve, batch-invariant, ATLAS_CUDA_ATT_INV=$ai"
			ATLAS_CUDA_ATT_INV=$ai timeout 150 "$build/atlas-bench" serve --self -m "$m" \
				--concurrency 1 --prompt 512 --gen 128 --requests "${SERVE_REQ:-16}" \
				--vocab 4000 --json >"$out/serve-$ai.json" 2>"$out/serve-$ai.txt"
			echo "exit $?"
			tail -4 "$out/serve-$ai.txt"
		done
		;;
	esac
done
