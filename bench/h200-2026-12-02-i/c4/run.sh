#!/bin/bash
# session 5, call 4: verify the greedy argmax kernel (n5) against n4
set -u
O=$1
mkdir -p $O/r
for b in n4 n5; do sh scripts/gpu-unpack.sh .gpubuild/$b; done
export ATLAS_SRC=$PWD
t0=$(date +%s)
timeout 200 .gpubuild/n5/tests/gpu/test-cuda-ops > $O/r/ops-n5.log 2>&1; echo "ops n5 rc=$? ok=$(grep -c ' ok$' $O/r/ops-n5.log) fail=$(grep -c 'FAIL' $O/r/ops-n5.log) notok=$(grep -c '^not ok' $O/r/ops-n5.log)"; grep "greedy" $O/r/ops-n5.log | head
timeout 150 .gpubuild/n5/tests/gpu/test-fused-decode > $O/r/fused-n5.log 2>&1; echo "fused n5 rc=$? $(grep -c '^ok' $O/r/fused-n5.log) ok $(grep -c '^not ok' $O/r/fused-n5.log) notok $(grep -m1 overall $O/r/fused-n5.log) t=$(( $(date +%s)-t0 ))"
d1() { # name bin env...
  local n=$1 bin=$2; shift 2
  timeout 120 env "$@" $bin decode --synthetic ${M:-qwen3-8b} --batch ${B:-1} --prompt ${P:-128} --gen ${G:-256} --no-record --json > $O/r/$n.json 2> $O/r/$n.txt
  echo "$n rc=$? $(grep -E '^ *[0-9]+ +[0-9]+ +[0-9]+ ' $O/r/$n.txt | tr -s ' ' | tr '\n' ';') copy=$(grep -o 'copy [0-9.]*' $O/r/$n.txt)"
}
for rep in 1 2 3; do
  d1 n4-$rep .gpubuild/n4/atlas-bench
  d1 n5-$rep .gpubuild/n5/atlas-bench
done
G=32 d1 n5-g32 .gpubuild/n5/atlas-bench
timeout 100 .gpubuild/n5/atlas-bench decode --synthetic qwen3-8b --batch 1 --prompt 128 --gen 32 --profile --no-record 2>&1 | grep -A8 'one decode step'
B=8,32,64 d1 n5-b8-64 .gpubuild/n5/atlas-bench
echo "t=$(( $(date +%s)-t0 ))"
cd $O && tar czf r.tgz r && rm -rf r
