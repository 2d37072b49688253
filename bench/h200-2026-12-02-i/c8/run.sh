#!/bin/bash
# session 5, call 8: fused decode with q/k/v biases (qwen2) and a sliding window (mistral)
set -u
O=$1
mkdir -p $O/r
sh scripts/gpu-unpack.sh .gpubuild/n8
export ATLAS_SRC=$PWD
timeout 300 .gpubuild/n8/tests/gpu/test-fused-decode > $O/r/fused-n8.log 2>&1; echo "fused n8 rc=$? $(grep -c '^ok' $O/r/fused-n8.log) ok $(grep -c '^not ok' $O/r/fused-n8.log) notok"
grep -E "^#|^not ok" $O/r/fused-n8.log | tail -40
timeout 120 .gpubuild/n8/atlas-bench decode --synthetic qwen3-8b --batch 1 --prompt 128 --gen 256 --no-record --json > $O/r/d1.json 2> $O/r/d1.txt; echo "d1 $(grep -E '^ *1 ' $O/r/d1.txt | tr -s ' ')"
cd $O && tar czf r.tgz r && rm -rf r
