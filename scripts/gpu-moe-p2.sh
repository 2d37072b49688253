#!/bin/bash
# gpu-moe-p2.sh - one device call (bench/h100-2026-12-08-moe-phases/p2):
# the fused MoE step's phase traces in every timing mode
# (atlas-bench-base, the tree before a change, carried beside
# atlas-bench), A/B of the two on Qwen3-30B-A3B and Qwen3-8B,
# test-fused-decode and the goldens on CUDA. Output under $OUT/p2.
S=scripts/gpu-moe-phases.sh B=build-gh O=$OUT/p2
export ATLAS_SRC=$PWD
v() { PARTS=variants VARIANTS="$2" BENCH=$1 bash $S $O $B >/dev/null 2>&1; }
v atlas-bench-base "b-t0:ATLAS_CUDA_FD_TRACE=1 b-t3:ATLAS_CUDA_FD_TRACE=1,ATLAS_CUDA_FUSED_MODE=3 b-t2:ATLAS_CUDA_FD_TRACE=1,ATLAS_CUDA_FUSED_MODE=2 b-t1:ATLAS_CUDA_FD_TRACE=1,ATLAS_CUDA_FUSED_MODE=1"
v atlas-bench "n-t0:ATLAS_CUDA_FD_TRACE=1"
for i in 1 2 3; do v atlas-bench-base "b-$i:X=1"; v atlas-bench "n-$i:X=1"; done
export SHAPE=qwen3-8b
v atlas-bench-base "db-t0:ATLAS_CUDA_FD_TRACE=1 db-1:X=1"
v atlas-bench "dn-t0:ATLAS_CUDA_FD_TRACE=1 dn-1:X=1"
v atlas-bench-base "db-2:X=1"
v atlas-bench "dn-2:X=1"
unset SHAPE
PARTS="test report" bash $S $O $B
ATLAS_TEST_DEVICE=cuda timeout 300 $B/tests/test-golden >$O/golden.log 2>&1
echo "golden rc=$? $(grep -c '^ok' $O/golden.log) ok $(grep -c '^not ok' $O/golden.log) not ok"
