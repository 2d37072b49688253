#!/bin/bash
# session 5, call 6: repeatability of the record build (commit 6a81b47), batch 1
set -u
O=$1
mkdir -p $O/r
sh scripts/gpu-unpack.sh .gpubuild/final
export ATLAS_SRC=$PWD
for rep in 1 2 3 4; do
  timeout 120 .gpubuild/final/atlas-bench decode --synthetic qwen3-8b --batch 1 --prompt 128 --gen 256 --json > $O/r/d1-$rep.json 2> $O/r/d1-$rep.txt
  echo "d1-$rep rc=$? $(grep -E '^ *1 ' $O/r/d1-$rep.txt | tr -s ' ') $(grep -o 'copy [0-9.]*' $O/r/d1-$rep.txt)"
done
cd $O && tar czf r.tgz r && rm -rf r
