#!/bin/bash
# gpu-att-inv-quick.sh - the short form of gpu-att-inv.sh for a device
# call with little time left: the attention and invariance op tests and
# tests/unit/test-invariance.c on CUDA with the tensor-core invariant
# attention (ATLAS_CUDA_ATT_INV=1), then invariant prefill and decode
# with it and without, on random weights of the Qwen3-8B shape made in
# process (--synthetic: no checkpoint to write), and batch 1 at a 4096-token
# context (there the split kernel is the long-context step). Binaries in build-gs
# (a slimmed scripts/gpu-carry.sh carry); logs under $OUT.
B=${1:-build-gs}
export ATLAS_CUDA_ATT_INV=1
sh scripts/gpu-unpack.sh $B
HARNESS_ONLY=attention $B/tests/gpu/test-cuda-ops > $OUT/att.log 2>&1
echo "attention ops: exit $? ok $(grep -c '^ok' $OUT/att.log) notok $(grep -c '^not ok' $OUT/att.log)"
grep "^# invariant\|^not ok" $OUT/att.log | head -30
HARNESS_ONLY=_inv $B/tests/gpu/test-cuda-ops > $OUT/inv.log 2>&1
echo "inv ops: exit $? ok $(grep -c '^ok' $OUT/inv.log) notok $(grep -c '^not ok' $OUT/inv.log)"
grep "^# invariant" $OUT/inv.log | grep -v " 0 of \| 0 row" | head
ATLAS_TEST_DEVICE=cuda $B/tests/test-invariance > $OUT/model.log 2>&1
echo "test-invariance cuda: exit $?"; grep "^not ok" $OUT/model.log | head
unset ATLAS_CUDA_ATT_INV
for ai in 1 0; do
 echo "== ATLAS_CUDA_ATT_INV=$ai"
 ATLAS_CUDA_ATT_INV=$ai $B/atlas-bench prefill --synthetic qwen3-8b --prompt 512,2048 --batch-invariant --no-record 2>&1 >/dev/null | sed -n '/^prompt/,$p'
 ATLAS_CUDA_ATT_INV=$ai $B/atlas-bench decode --synthetic qwen3-8b --batch 1,64 --prompt 512 --gen 32 --batch-invariant --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
 ATLAS_CUDA_ATT_INV=$ai $B/atlas-bench decode --synthetic qwen3-8b --batch 1 --prompt 4096 --gen 32 --batch-invariant --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
done
echo "== default prefill"
$B/atlas-bench prefill --synthetic qwen3-8b --prompt 512,2048 --no-record 2>&1 >/dev/null | sed -n '/^prompt/,$p'
