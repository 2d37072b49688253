#!/bin/bash
# gpu-att-inv.sh OUT [BUILD] - the batch-invariant tensor-core attention
# (kernels/sm90/common/attention_inv.cu) on the GPU machine, binaries
# carried in BUILD (scripts/gpu-carry.sh):
#   checks  the attention op tests (test_attention against the CPU,
#           test_attention_inv: every token alone equals itself in the
#           batch, i.e. the split form equals the prefill form), the
#           invariance tests, and tests/unit/test-invariance.c on CUDA
#   bench   batch-invariant prefill (512, 2048) and decode (batch 1, 64)
#           on the Qwen3-8B shape with the new kernels and with the
#           split-K kernel (ATLAS_CUDA_ATT_INV=0), the default-mode
#           prefill beside them
#   serve   atlas-bench serve --self at concurrency 1 and 64, both modes,
#           with the new kernels (ATT_INV=0: without)
#           (SERVE_MODES="inv" or "noinv": one)
# PARTS picks parts (default "checks bench"). The summary goes to stdout
# and OUT/summary.txt.
. "$(dirname "$0")/gpu-prelude.sh"
parts=${PARTS:-checks bench}
sum="$out/summary.txt"
: >"$sum"
for p in $parts; do
	case $p in
	checks)
		# the new kernels are opt-in (ATLAS_CUDA_ATT_INV=1) until this
		# part has passed on a GPU
		export ATLAS_CUDA_ATT_INV=1
		HARNESS_ONLY=attention "$build/tests/gpu/test-cuda-ops" >"$out/att.log" 2>&1
		echo "attention op tests: exit $? $(grep -c '^ok' "$out/att.log") ok, $(grep -c '^not ok' "$out/att.log") not ok" >>"$sum"
		grep "^# invariant\|^not ok\|FAIL\|worst\|max" "$out/att.log" | head -40 >>"$sum"
		HARNESS_ONLY=_inv "$build/tests/gpu/test-cuda-ops" >"$out/inv.log" 2>&1
		echo "invariance op tests: exit $? $(grep -c '^ok' "$out/inv.log") ok, $(grep -c '^not ok' "$out/inv.log") not ok" >>"$sum"
		grep "^# invariant" "$out/inv.log" | grep -v " 0 row(s)\| 0 of " >>"$sum"
		ATLAS_TEST_DEVICE=cuda "$build/tests/test-invariance" >"$out/model.log" 2>&1
		echo "test-invariance on cuda: exit $?" >>"$sum"
		grep '^# \|^not ok' "$out/model.log" | head -30 >>"$sum"
		unset ATLAS_CUDA_ATT_INV
		;;
	bench)
		for ai in 1 0; do
			echo "== ATLAS_CUDA_ATT_INV=$ai, --batch-invariant" >>"$sum"
			ATLAS_CUDA_ATT_INV=$ai "$build/atlas-bench" prefill -m "$m" --prompt 512,2048 \
				--batch-invariant --no-record 2>&1 >/dev/null | sed -n "/^prompt\|^batch/,\$p" >>"$sum"
			ATLAS_CUDA_ATT_INV=$ai "$build/atlas-bench" decode -m "$m" --batch 1,64 --prompt 512 \
				--gen 64 --batch-invariant --no-record 2>&1 >/dev/null | sed -n "/^prompt\|^batch/,\$p" >>"$sum"
		done
		echo "== default mode prefill" >>"$sum"
		"$build/atlas-bench" prefill -m "$m" --prompt 512,2048 --no-record 2>&1 >/dev/null |
			sed -n "/^prompt\|^batch/,\$p" >>"$sum"
		;;
	serve)
		for mode in ${SERVE_MODES:-inv noinv}; do
			flag=""
			[ $mode = noinv ] && flag=--no-batch-invariant
			# shellcheck disable=SC2086
			ATLAS_CUDA_ATT_INV=${ATT_INV:-1} timeout 200 "$build/atlas-bench" serve --self -m "$m" $flag --concurrency ${SERVE_CONC:-1,64} \
				--prompt 512 --gen 128 --requests ${SERVE_REQ:-64} --vocab 4000 --json \
				>"$out/serve-$mode.json" 2>"$out/serve-$mode.txt"
			echo "serve $mode: exit $?" >>"$sum"
			cat "$out/serve-$mode.txt" >>"$sum"
		done
		;;
	esac
done
cat "$sum"
