#!/bin/bash
# session 5, call 5: the record run of HEAD (gpu-snapshot.sh) + Llama3-8B batch 1 again
set -u
O=$1
t0=$(date +%s)
bash scripts/gpu-snapshot.sh $O/s .gpubuild/final > $O/snap.txt 2>&1
echo "snapshot t=$(( $(date +%s)-t0 ))"
grep -E "^\| |exit" $O/snap.txt | head -40
cd $O && tar czf s.tgz s && rm -rf s
