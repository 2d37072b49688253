#!/bin/bash
# gpu-ctx-sweep.sh OUT [BUILD] - batch-1 decode, Qwen3-8B shape, fused kernel against op by op
# (ATLAS_CUDA_FUSED=0) at 2k..32k contexts; fp8 and q4 KV at 32k (batch 1, 8);
# BF16 op by op at batch 8 and 32. Sets the fused decode's context limit.
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
for ctx in 2048 8192 16384 32768; do
  for mode in fused op; do
    e=""; [ $mode = op ] && e="ATLAS_CUDA_FUSED=0"
    env $e "$build/atlas-bench" decode --synthetic qwen3-8b --batch 1 --prompt $ctx --gen 64 2>&1 | grep -E "^1 " | sed "s/^/$mode ctx=$ctx: /"
  done
done
for kv in fp8 q4; do
  "$build/atlas-bench" decode --synthetic qwen3-8b --kv-dtype $kv --batch 1,8 --prompt 32768 --gen 64 2>&1 | grep -E "^(1|8) " | sed "s/^/$kv ctx=32768: /"
done
ATLAS_CUDA_FUSED=0 "$build/atlas-bench" decode --synthetic qwen3-8b --batch 8,32 --prompt 32768,4096 --gen 64 2>&1 | grep -E "^(8|32) " | sed "s/^/auto op: /"
