#!/bin/bash
# session 5, call 3: verify n4; A/B barrier kind and prefetch depth
set -u
O=$1
mkdir -p $O/r
for b in base n4; do sh scripts/gpu-unpack.sh .gpubuild/$b; done
xz -d -k .gpubuild/ab2/atlas-bench.xz
export ATLAS_SRC=$PWD
t0=$(date +%s)
timeout 150 .gpubuild/n4/tests/gpu/test-fused-decode > $O/r/fused-n4.log 2>&1; echo "fused n4 rc=$? $(grep -c '^ok' $O/r/fused-n4.log) ok $(grep -c '^not ok' $O/r/fused-n4.log) notok $(grep -m1 overall $O/r/fused-n4.log) t=$(( $(date +%s)-t0 ))"
d1() { # name bin env...
  local n=$1 bin=$2; shift 2
  timeout 120 env "$@" $bin decode --synthetic ${M:-qwen3-8b} --batch 1 --prompt ${P:-128} --gen ${G:-256} --no-record --json > $O/r/$n.json 2> $O/r/$n.txt
  echo "$n rc=$? $(grep -E '^ *1 ' $O/r/$n.txt | tr -s ' ') copy=$(grep -o 'copy [0-9.]*' $O/r/$n.txt)"
}
for rep in 1 2; do
  d1 base-$rep .gpubuild/base/atlas-bench
  d1 n4-$rep .gpubuild/n4/atlas-bench
  d1 n4noef-$rep .gpubuild/n4/atlas-bench-ab
  d1 n4pf1-$rep .gpubuild/ab2/atlas-bench
done
M=llama3-8b d1 llama-n4 .gpubuild/n4/atlas-bench
for md in 1 2 3; do d1 n4-mode$md .gpubuild/n4/atlas-bench ATLAS_CUDA_FUSED_MODE=$md; done
P=2048 G=64 d1 ctx2048-n4 .gpubuild/n4/atlas-bench
P=2048 G=64 d1 ctx2048-pf1 .gpubuild/ab2/atlas-bench
P=2048 G=64 d1 ctx2048-base .gpubuild/base/atlas-bench
P=2048 G=64 d1 ctx2048-noef .gpubuild/n4/atlas-bench-ab
timeout 100 .gpubuild/n4/atlas-bench decode --synthetic qwen3-8b --batch 1 --prompt 128 --gen 32 --profile --no-record 2>&1 | grep -A8 'one decode step'
echo "t=$(( $(date +%s)-t0 ))"
timeout $(( 560 - ($(date +%s)-t0) )) bash scripts/gpu-test.sh $O/r/t .gpubuild/n4 > $O/r/gputest.log 2>&1; echo "gpu-test rc=$?"; cat $O/r/t/summary.md
echo "t=$(( $(date +%s)-t0 ))"
cd $O && tar czf r.tgz r && rm -rf r
