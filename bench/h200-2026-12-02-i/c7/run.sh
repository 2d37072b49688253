#!/bin/bash
# session 5, call 7: the first K/V tile before the A->B barrier (n7) against the record build
set -u
O=$1
mkdir -p $O/r
for b in final n7; do sh scripts/gpu-unpack.sh .gpubuild/$b; done
export ATLAS_SRC=$PWD
t0=$(date +%s)
timeout 150 .gpubuild/n7/tests/gpu/test-fused-decode > $O/r/fused-n7.log 2>&1; echo "fused n7 rc=$? $(grep -c '^ok' $O/r/fused-n7.log) ok $(grep -c '^not ok' $O/r/fused-n7.log) notok $(grep -m1 overall $O/r/fused-n7.log)"
d1() { # name bin env...
  local n=$1 bin=$2; shift 2
  timeout 120 env "$@" $bin decode --synthetic ${M:-qwen3-8b} --batch 1 --prompt ${P:-128} --gen ${G:-256} --no-record --json > $O/r/$n.json 2> $O/r/$n.txt
  echo "$n rc=$? $(grep -E '^ *1 ' $O/r/$n.txt | tr -s ' ') $(grep -o 'copy [0-9.]*' $O/r/$n.txt)"
}
for rep in 1 2 3; do
  d1 final-$rep .gpubuild/final/atlas-bench
  d1 n7-$rep .gpubuild/n7/atlas-bench
done
M=llama3-8b d1 llama-final .gpubuild/final/atlas-bench
M=llama3-8b d1 llama-n7 .gpubuild/n7/atlas-bench
P=2048 G=64 d1 ctx2048-final .gpubuild/final/atlas-bench
P=2048 G=64 d1 ctx2048-n7 .gpubuild/n7/atlas-bench
echo "t=$(( $(date +%s)-t0 ))"
timeout 200 bash scripts/gpu-test.sh $O/r/t .gpubuild/n7 > $O/r/gputest.log 2>&1; echo "gpu-test rc=$?"; cat $O/r/t/summary.md
echo "t=$(( $(date +%s)-t0 ))"
cd $O && tar czf r.tgz r && rm -rf r
