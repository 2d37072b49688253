#!/bin/bash
# gpu-att-short.sh [BUILD] - the least a device call must run to decide
# attention_inv.cu (for a call with little device time left; the long
# forms are gpu-att-inv-quick.sh and gpu-att-tc.sh): the attention op
# tests and tests/unit/test-invariance.c on CUDA with ATLAS_CUDA_ATT_INV=1,
# the attention op tests with ATLAS_CUDA_ATT_TC=1, then invariant prefill
# (512) and decode (batch 1, 64) with the switch on and off, and batch 1
# at a 32768-token context op by op with ATLAS_CUDA_ATT_TC=1 and 0
# (Qwen3-8B shape, random weights made in process). Logs under $OUT.
B=${1:-build-gs}
sh scripts/gpu-unpack.sh "$B"
ATLAS_CUDA_ATT_INV=1 HARNESS_ONLY=attention "$B/tests/gpu/test-cuda-ops" >"$OUT/att.log" 2>&1
echo "attention ops, ATT_INV=1: exit $? ok $(grep -c '^ok' "$OUT/att.log") not ok $(grep -c '^not ok' "$OUT/att.log")"
grep "^# invariant\|^not ok" "$OUT/att.log" | head -20
ATLAS_CUDA_ATT_INV=1 ATLAS_TEST_DEVICE=cuda "$B/tests/test-invariance" >"$OUT/model.log" 2>&1
echo "test-invariance cuda, ATT_INV=1: exit $?"
grep "^not ok" "$OUT/model.log" | head
ATLAS_CUDA_ATT_TC=1 HARNESS_ONLY=attention "$B/tests/gpu/test-cuda-ops" >"$OUT/tc.log" 2>&1
echo "attention ops, ATT_TC=1: exit $? ok $(grep -c '^ok' "$OUT/tc.log") not ok $(grep -c '^not ok' "$OUT/tc.log")"
for ai in 1 0; do
	echo "== batch-invariant, ATLAS_CUDA_ATT_INV=$ai"
	ATLAS_CUDA_ATT_INV=$ai timeout 60 "$B/atlas-bench" prefill --synthetic qwen3-8b --prompt 512 \
		--batch-invariant --no-record 2>&1 >/dev/null | sed -n '/^prompt/,$p'
	ATLAS_CUDA_ATT_INV=$ai timeout 60 "$B/atlas-bench" decode --synthetic qwen3-8b --batch 1,64 \
		--prompt 512 --gen 32 --batch-invariant --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
done
for tc in 1 0; do
	echo "== op by op, 32768 keys, ATLAS_CUDA_ATT_TC=$tc"
	ATLAS_CUDA_FUSED=0 ATLAS_CUDA_ATT_TC=$tc timeout 90 "$B/atlas-bench" decode --synthetic qwen3-8b \
		--batch 1 --prompt 32768 --gen 16 --no-record 2>&1 >/dev/null | sed -n '/^batch/,$p'
done
