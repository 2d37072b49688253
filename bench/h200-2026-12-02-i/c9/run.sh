#!/bin/bash
# session 5, call 9: offsets of later key tiles found ahead (n9) against n8; multi-tile items tested
set -u
O=$1
mkdir -p $O/r
for b in n8 n9; do sh scripts/gpu-unpack.sh .gpubuild/$b; done
export ATLAS_SRC=$PWD
timeout 300 .gpubuild/n9/tests/gpu/test-fused-decode > $O/r/fused-n9.log 2>&1; echo "fused n9 rc=$? $(grep -c '^ok' $O/r/fused-n9.log) ok $(grep -c '^not ok' $O/r/fused-n9.log) notok"
grep -E "kv heads|overall|^not ok" $O/r/fused-n9.log | tail -12
d1() { # name bin env...
  local n=$1 bin=$2; shift 2
  timeout 120 env "$@" $bin decode --synthetic ${M:-qwen3-8b} --batch 1 --prompt ${P:-128} --gen ${G:-256} --no-record --json > $O/r/$n.json 2> $O/r/$n.txt
  echo "$n rc=$? $(grep -E '^ *1 ' $O/r/$n.txt | tr -s ' ') $(grep -o 'copy [0-9.]*' $O/r/$n.txt)"
}
for rep in 1 2; do
  d1 n8-$rep .gpubuild/n8/atlas-bench
  d1 n9-$rep .gpubuild/n9/atlas-bench
  P=2048 G=64 d1 ctx2048-n8-$rep .gpubuild/n8/atlas-bench
  P=2048 G=64 d1 ctx2048-n9-$rep .gpubuild/n9/atlas-bench
done
P=8192 G=32 d1 ctx8192-n8 .gpubuild/n8/atlas-bench
P=8192 G=32 d1 ctx8192-n9 .gpubuild/n9/atlas-bench
cd $O && tar czf r.tgz r && rm -rf r
