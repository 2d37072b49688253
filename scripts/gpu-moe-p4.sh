#!/bin/bash
# gpu-moe-p4.sh - a short device call: the moe op against the CPU
# (routing), test-fused-decode's MoE shapes, then atlas-bench-base
# against atlas-bench on the Qwen3-30B-A3B batch-1 step, and a phase
# trace. Output under $OUT/p4.
B=build-gh; O=$OUT/p4; export ATLAS_SRC=$PWD
sh scripts/gpu-unpack.sh $B; mkdir -p $O
HARNESS_ONLY=moe timeout 120 $B/tests/gpu/test-cuda-ops > $O/ops.log 2>&1
echo "ops rc=$? $(grep -c '^ok' $O/ops.log) ok, $(grep -c '^not ok' $O/ops.log) not ok, $(grep -c ' FAIL$' $O/ops.log) FAIL"
HARNESS_ONLY=layers timeout 150 $B/tests/gpu/test-fused-decode > $O/test.log 2>&1
echo "fused rc=$? $(grep -c '^ok' $O/test.log) ok, $(grep -c '^not ok' $O/test.log) not ok; $(grep '# overall' $O/test.log)"
one() { echo "== $1" >> $O/runs.txt; env $2 timeout 120 $B/$3 decode --synthetic ${4:-qwen3-30b-a3b} --batch 1 --prompt 512 --gen 64 --json >/dev/null 2>>$O/runs.txt; grep -E '^1 ' $O/runs.txt | tail -1 | sed "s/^/$1 /"; }
for i in 1 2; do one b$i X=1 atlas-bench-base; one n$i X=1 atlas-bench; done
one nt ATLAS_CUDA_FD_TRACE=1 atlas-bench
one db X=1 atlas-bench-base qwen3-8b
one dn X=1 atlas-bench qwen3-8b
awk '/fused decode trace/{p=1} p{print} /^== /{p=0}' $O/runs.txt | grep -v "^=="
