#!/bin/bash
# gpu-fp8-bench.sh OUT [BUILD] - issue 19's FP8 record, on the GPU machine
# with binaries carried in BUILD (default .gpubuild; scripts/gpu-carry.sh):
#   checks   the F8B op tests (test_f8b: FP8 products equal the BF16
#            products of the dequantized matrix bit for bit in
#            batch-invariant mode), the golden models on CUDA (quant-fp8
#            and quant-ct-fp8 now load as F8B), and atlas-run's greedy
#            text on both FP8 fixtures with F8B and with ATLAS_FP8_NATIVE=0
#            (dequantized at load)
#   decode   atlas-bench decode on the Qwen3-8B shape, batch 1/32/64,
#            FP8 block (--quant fp8-block) and BF16 in the same call, each
#            against the copy ceiling measured in the run; FP8 batch 1 on
#            the tensor-core GEMV (ATLAS_CUDA_F8_FMA_MAX_T=0), and FP8 in
#            batch-invariant mode
#   prefill  atlas-bench prefill, 512 and 2048 tokens, FP8 and BF16
#   serve    atlas-bench serve --self on Qwen3-8B-shape checkpoints, FP8
#            (make-synthetic.py --quant fp8-block) and BF16, concurrency
#            SERVE_CONC (1,32,64), SERVE_REQS requests (32)
# PARTS="checks decode prefill" (the default) picks parts; serve on demand. OUT/summary.txt collects the
# tables.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1 # the parts make their own models
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
parts=${PARTS:-checks decode prefill}
sum="$out/summary.txt"
: >"$sum"
for p in $parts; do
	mkdir -p "$out/$p"
	case $p in
	checks)
		HARNESS_ONLY=_f8b "$build/tests/gpu/test-cuda-ops" >"$out/$p/ops.log" 2>&1
		echo "test_f8b: exit $? $(grep -c '^ok' "$out/$p/ops.log") ok" >>"$sum"
		grep "^# f8b" "$out/$p/ops.log" | grep -v " 0 of \| ok$" >>"$sum"
		ATLAS_TEST_DEVICE=cuda ATLAS_LOG=info "$build/tests/test-golden" >"$out/$p/golden.log" 2>&1
		echo "golden models on CUDA: exit $? $(grep -c '^ok' "$out/$p/golden.log") ok" >>"$sum"
		grep "quant-.*fp8.*relative\|worst" "$out/$p/golden.log" >>"$sum"
		echo "golden: $(grep -c "kept in FP8" "$out/$p/golden.log") FP8 models loaded as F8B" >>"$sum"
		for f in quant-fp8 quant-ct-fp8; do
			a=$("$build/atlas-run" -m tests/fixtures/golden/$f -p "The quick brown fox" -n 24 --temperature 0 --ignore-eos 2>"$out/$p/$f-native.log")
			b=$(ATLAS_FP8_NATIVE=0 "$build/atlas-run" -m tests/fixtures/golden/$f -p "The quick brown fox" -n 24 --temperature 0 --ignore-eos 2>"$out/$p/$f-deq.log")
			echo "$f: native and dequantized greedy text $([ "$a" = "$b" ] && [ -n "$a" ] && echo equal || echo DIFFER)" >>"$sum"
		done
		;;
	decode)
		for q in fp8-block bf16; do
			"$build/atlas-bench" decode --synthetic qwen3-8b --quant $q --batch 1,32,64 \
				--prompt 512 --gen 128 --json >"$out/$p/$q.json" 2>"$out/$p/$q.txt"
			echo "decode $q: exit $?" >>"$sum"
			cat "$out/$p/$q.txt" >>"$sum"
		done
		# batch 1 with the tensor-core FP8 GEMV instead of atlas_gemv_f8,
		# and in batch-invariant mode (the server's)
		ATLAS_CUDA_F8_FMA_MAX_T=0 "$build/atlas-bench" decode --synthetic qwen3-8b --quant fp8-block \
			--batch 1 --prompt 512 --gen 128 --json >"$out/$p/fp8-tc.json" 2>"$out/$p/fp8-tc.txt"
		echo "decode fp8-block, ATLAS_CUDA_F8_FMA_MAX_T=0: exit $?" >>"$sum"
		cat "$out/$p/fp8-tc.txt" >>"$sum"
		"$build/atlas-bench" decode --synthetic qwen3-8b --quant fp8-block --batch-invariant \
			--batch 1,32,64 --prompt 512 --gen 128 --json >"$out/$p/fp8-inv.json" 2>"$out/$p/fp8-inv.txt"
		echo "decode fp8-block --batch-invariant: exit $?" >>"$sum"
		cat "$out/$p/fp8-inv.txt" >>"$sum"
		;;
	prefill)
		for q in fp8-block bf16; do
			"$build/atlas-bench" prefill --synthetic qwen3-8b --quant $q --prompt 512,2048 \
				--json >"$out/$p/$q.json" 2>"$out/$p/$q.txt"
			echo "prefill $q: exit $?" >>"$sum"
			cat "$out/$p/$q.txt" >>"$sum"
		done
		;;
	serve)
		# the same shape as checkpoints: FP8 (make-synthetic --quant
		# fp8-block) and BF16, atlas-bench serve --self, batch-invariant
		# (the server's default), 512-token prompts, 128 generated
		[ -f /tmp/q8-fp8/config.json ] ||
			python3 scripts/make-synthetic.py --quant fp8-block qwen3-8b /tmp/q8-fp8 >/dev/null
		[ -f "$m/config.json" ] || python3 scripts/make-synthetic.py qwen3-8b "$m" >/dev/null
		for m in /tmp/q8-fp8 "$m"; do
			n=$(basename $m)
			timeout 240 "$build/atlas-bench" serve --self -m $m --concurrency ${SERVE_CONC:-1,32,64} \
				--prompt 512 --gen 128 --requests ${SERVE_REQS:-32} --vocab 4000 --json \
				>"$out/$p/$n.json" 2>"$out/$p/$n.txt"
			echo "serve $n: exit $?" >>"$sum"
			cat "$out/$p/$n.txt" >>"$sum"
		done
		;;
	esac
done
cat "$sum"
