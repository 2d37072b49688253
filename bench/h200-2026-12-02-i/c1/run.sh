#!/bin/bash
# session 5, call 1: verify new2 (and base), A/B batch-1 decode
set -u
O=$1
mkdir -p $O/r
for b in base new2; do sh scripts/gpu-unpack.sh .gpubuild/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/r/gpu.txt
export ATLAS_SRC=$PWD
t0=$(date +%s)
timeout 150 .gpubuild/new2/tests/gpu/test-fused-decode > $O/r/fused-new2.log 2>&1; echo "fused new2 rc=$? $(grep -c '^ok' $O/r/fused-new2.log) ok $(grep -c '^not ok' $O/r/fused-new2.log) notok $(grep -m1 overall $O/r/fused-new2.log) t=$(( $(date +%s)-t0 ))"
d1() { # name bin env...
  local n=$1 bin=$2; shift 2
  timeout 120 env "$@" $bin decode --synthetic ${M:-qwen3-8b} --batch 1 --prompt ${P:-128} --gen ${G:-256} --no-record --json > $O/r/$n.json 2> $O/r/$n.txt
  echo "$n rc=$? $(grep -E '^ *1 ' $O/r/$n.txt | tr -s ' ')"
}
for rep in 1 2; do
  d1 base-$rep .gpubuild/base/atlas-bench
  d1 new2-$rep .gpubuild/new2/atlas-bench
  d1 new2bar-$rep .gpubuild/new2/atlas-bench-ab
done
M=llama3-8b d1 llama-base .gpubuild/base/atlas-bench
M=llama3-8b d1 llama-new2 .gpubuild/new2/atlas-bench
for md in 1 2 3; do d1 new2-mode$md .gpubuild/new2/atlas-bench ATLAS_CUDA_FUSED_MODE=$md; done
P=2048 G=64 d1 ctx2048-base .gpubuild/base/atlas-bench
P=2048 G=64 d1 ctx2048-new2 .gpubuild/new2/atlas-bench
timeout 100 .gpubuild/new2/atlas-bench decode --synthetic qwen3-8b --batch 1 --prompt 128 --gen 32 --profile --no-record 2>&1 | grep -A8 'one decode step'
echo "t=$(( $(date +%s)-t0 ))"
timeout $(( 560 - ($(date +%s)-t0) )) bash scripts/gpu-test.sh $O/r/t .gpubuild/new2 > $O/r/gputest.log 2>&1; echo "gpu-test rc=$?"; cat $O/r/t/summary.md
echo "t=$(( $(date +%s)-t0 ))"
cd $O && tar czf r.tgz r && rm -rf r
