#!/bin/bash
# gpu-moe-p4.sh - a short device call for bench/h100-2026-12-08-moe-phases/
# next.patch: the moe op's routing against the CPU, test-fused-decode's
# MoE shapes, then atlas-bench-base (the tree without the patch, carried
# beside atlas-bench) against atlas-bench on the Qwen3-30B-A3B and
# Qwen3-8B batch-1 steps, and a phase trace. Output under $OUT/p4.
S=scripts/gpu-moe-phases.sh B=build-gh O=$OUT/p4
export ATLAS_SRC=$PWD
v() { PARTS=variants VARIANTS="$2" BENCH=$1 bash $S $O $B >/dev/null 2>&1; }
PARTS="ops test" bash $S $O $B >/dev/null 2>&1
for i in 1 2; do v atlas-bench-base "b$i:X=1"; v atlas-bench "n$i:X=1"; done
v atlas-bench "nt:ATLAS_CUDA_FD_TRACE=1"
export SHAPE=qwen3-8b
v atlas-bench-base "db:X=1"
v atlas-bench "dn:X=1"
unset SHAPE
PARTS=report bash $S $O $B
