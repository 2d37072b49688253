#!/bin/bash
# gpu-kvq-ab.sh OUT [BUILD] - A/B of atlas-bench against atlas-bench-ab
# (scripts/gpu-carry.sh with ATLAS_AB_FLAGS) on the KV cache formats'
# decode: Qwen3-8B shape, batch 1 at 32k (each format) and 2k, batch 8 at
# 32k and 32 at 4k (bf16 and fp8), both builds in one call.
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
for b in atlas-bench atlas-bench-ab; do
	for run in "auto 1 32768" "fp8 1 32768" "q4 1 32768" "auto 8 32768" "fp8 8 32768" \
		"auto 1 2048" "auto 32 4096" "fp8 32 4096"; do
		set -- $run
		"$build/$b" decode --synthetic qwen3-8b --kv-dtype $1 --batch $2 --prompt $3 --gen 64 2>&1 |
			grep -E "^$2 " | sed "s/^/$b $1: /"
	done
done
