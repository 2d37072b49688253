#!/bin/bash
# gpu-quant-bench.sh OUT [BUILD] - issue 19's records of the native
# quantized paths, on the GPU machine with binaries carried in BUILD
# (default .gpubuild; scripts/gpu-carry.sh). QUANT picks the format:
# fp8 (F8B, the default), w4 (W4B, 4-bit weight-only) or fp4 (FP4B,
# NVFP4).
#   checks   the op tests (test_f8b / test_w4b: the blob's products equal
#            the BF16 products of the dequantized matrix bit for bit in
#            batch-invariant mode), the golden models on CUDA (the
#            format's fixtures load natively), and atlas-run's greedy
#            text on those fixtures native and with ATLAS_FP8_NATIVE=0 /
#            ATLAS_W4_NATIVE=0 / ATLAS_FP4_NATIVE=0 (dequantized at load):
#            equal for FP8 and NVFP4 (the same BF16 matrix); for
#            4 bits W4B's BF16 scales may part them at a near-tie
#   decode   atlas-bench decode on the Qwen3-8B shape, batch 1/32/64, the
#            format (--quant fp8-block / w4a16 / nvfp4) and BF16 in the same
#            call, each against the copy ceiling measured in the run; the
#            format's batch 1 on the tensor-core GEMV
#            (ATLAS_CUDA_F8_FMA_MAX_T=0, both formats), and
#            in batch-invariant mode
#   prefill  atlas-bench prefill, 512 and 2048 tokens, the format and BF16
#   serve    atlas-bench serve --self on Qwen3-8B-shape checkpoints, the
#            format (make-synthetic.py --quant) and BF16, concurrency
#            SERVE_CONC (1,32,64), SERVE_REQS requests (32)
# PARTS="checks decode prefill" (the default) picks parts; serve on
# demand. OUT/summary.txt collects the tables.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1 # the parts make their own models
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
parts=${PARTS:-checks decode prefill}
case ${QUANT:-fp8} in
fp8) q=fp8-block tag=f8b fixtures="quant-fp8 quant-ct-fp8" native=ATLAS_FP8_NATIVE
	fma=ATLAS_CUDA_F8_FMA_MAX_T kept="kept in FP8" ;;
w4) q=w4a16 tag=w4b fixtures="quant-gptq-g32" native=ATLAS_W4_NATIVE
	fma=ATLAS_CUDA_F8_FMA_MAX_T kept="kept in 4 bits" ;;
fp4) export ATLAS_FP4_NATIVE=1 # opt-in: slower than BF16 for now
	q=nvfp4 tag=fp4b fixtures="quant-nvfp4 quant-ct-nvfp4" native=ATLAS_FP4_NATIVE
	fma=ATLAS_CUDA_F8_FMA_MAX_T kept="kept in NVFP4" ;;
*) echo "QUANT is fp8, w4 or fp4" >&2; exit 2 ;;
esac
sum="$out/summary.txt"
: >"$sum"
for p in $parts; do
	mkdir -p "$out/$p"
	case $p in
	checks)
		HARNESS_ONLY=_$tag "$build/tests/gpu/test-cuda-ops" >"$out/$p/ops.log" 2>&1
		echo "test_$tag: exit $? $(grep -c '^ok' "$out/$p/ops.log") ok" >>"$sum"
		grep "^# $tag" "$out/$p/ops.log" | grep -v " 0 of \| ok$" >>"$sum"
		ATLAS_TEST_DEVICE=cuda ATLAS_LOG=info "$build/tests/test-golden" >"$out/$p/golden.log" 2>&1
		echo "golden models on CUDA: exit $? $(grep -c '^ok' "$out/$p/golden.log") ok" >>"$sum"
		grep "quant-.*relative\|worst\|W4B:" "$out/$p/golden.log" >>"$sum"
		echo "golden: $(grep -c "$kept" "$out/$p/golden.log") models loaded natively ($kept)" >>"$sum"
		for f in $fixtures; do
			a=$("$build/atlas-run" -m tests/fixtures/golden/$f -p "The quick brown fox" -n 24 --temperature 0 --ignore-eos 2>"$out/$p/$f-native.log")
			b=$(env $native=0 "$build/atlas-run" -m tests/fixtures/golden/$f -p "The quick brown fox" -n 24 --temperature 0 --ignore-eos 2>"$out/$p/$f-deq.log")
			# equal for FP8 (F8B is the dequantized matrix); W4B rounds
			# FP16 scales (AWQ, GPTQ) to BF16, so a 4-bit model's text
			# may part at a near-tie: both texts are kept
			printf '%s\n' "$a" >"$out/$p/$f-native.txt"
			printf '%s\n' "$b" >"$out/$p/$f-deq.txt"
			echo "$f: native and dequantized greedy text $([ "$a" = "$b" ] && [ -n "$a" ] && echo equal || echo "differ: native '$a', dequantized '$b'")" >>"$sum"
		done
		;;
	decode)
		for qq in $q bf16; do
			"$build/atlas-bench" decode --synthetic qwen3-8b --quant $qq --batch 1,32,64 \
				--prompt 512 --gen 128 --json >"$out/$p/$qq.json" 2>"$out/$p/$qq.txt"
			echo "decode $qq: exit $?" >>"$sum"
			cat "$out/$p/$qq.txt" >>"$sum"
		done
		# batch 1 on the tensor-core GEMV instead of the FMA GEMV, and
		# in batch-invariant mode (the server's)
		env $fma=0 "$build/atlas-bench" decode --synthetic qwen3-8b --quant $q \
			--batch 1 --prompt 512 --gen 128 --json >"$out/$p/$q-tc.json" 2>"$out/$p/$q-tc.txt"
		echo "decode $q, $fma=0: exit $?" >>"$sum"
		cat "$out/$p/$q-tc.txt" >>"$sum"
		"$build/atlas-bench" decode --synthetic qwen3-8b --quant $q --batch-invariant \
			--batch 1,32,64 --prompt 512 --gen 128 --json >"$out/$p/$q-inv.json" 2>"$out/$p/$q-inv.txt"
		echo "decode $q --batch-invariant: exit $?" >>"$sum"
		cat "$out/$p/$q-inv.txt" >>"$sum"
		;;
	prefill)
		for qq in $q bf16; do
			"$build/atlas-bench" prefill --synthetic qwen3-8b --quant $qq --prompt 512,2048 \
				--json >"$out/$p/$qq.json" 2>"$out/$p/$qq.txt"
			echo "prefill $qq: exit $?" >>"$sum"
			cat "$out/$p/$qq.txt" >>"$sum"
		done
		;;
	serve)
		# the same shape as checkpoints: the format (make-synthetic
		# --quant) and BF16, atlas-bench serve --self, batch-invariant
		# (the server's default), 512-token prompts, 128 generated
		[ -f "/tmp/q8-$q/config.json" ] ||
			python3 scripts/make-synthetic.py --quant "$q" qwen3-8b "/tmp/q8-$q" >/dev/null
		[ -f "$m/config.json" ] || python3 scripts/make-synthetic.py qwen3-8b "$m" >/dev/null
		for m in "/tmp/q8-$q" "$m"; do
			n=$(basename "$m")
			timeout 240 "$build/atlas-bench" serve --self -m "$m" --concurrency "${SERVE_CONC:-1,32,64}" \
				--prompt 512 --gen 128 --requests "${SERVE_REQS:-32}" --vocab 4000 --json \
				>"$out/$p/$n.json" 2>"$out/$p/$n.txt"
			echo "serve $n: exit $?" >>"$sum"
			cat "$out/$p/$n.txt" >>"$sum"
		done
		;;
	esac
done
cat "$sum"
