#!/bin/bash
# gpu-ncu-fused.sh OUT [BUILD] - Nsight Compute's view of one
# atlas_decode_fused launch (Qwen3-8B shape, batch 1) with 4-bit, FP8 and
# BF16 weights: warp stall reasons, issue slots, pipe and memory use.
# Needs ncu on the device machine (says so and stops when it is absent).
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
b=$build/atlas-bench
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then
	echo "no ncu on this machine"
	exit 0
fi
echo "ncu: $ncu"
for q in w4a16 fp8-block bf16; do
	qa=(--quant $q)
	[ $q = bf16 ] && qa=()
	ATLAS_CUDA_FUSED_QUANT=1 timeout 240 "$ncu" --kernel-name atlas_decode_fused --launch-count 1 \
		--section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
		--section MemoryWorkloadAnalysis --section SpeedOfLight \
		"$b" decode --synthetic qwen3-8b "${qa[@]}" --batch 1 --prompt 64 --gen 2 >"$out/ncu-$q.txt" 2>&1
	echo "== $q: exit $?"
	grep -E "Stall|Issue|Pipe|Throughput|Duration|Warp Cycles|Eligible|Active Warps|Bank" "$out/ncu-$q.txt" | head -40
done
