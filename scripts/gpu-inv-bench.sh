#!/bin/bash
# gpu-inv-bench.sh OUT [BUILD] - issue 18's record, on the GPU machine
# with binaries carried in BUILD (default .gpubuild; scripts/gpu-carry.sh):
#   checks   the batch-invariance op tests (test_invariant,
#            test_attention_inv: every row equals the row alone), the
#            model-level test (tests/unit/test-invariance.c on CUDA), 64
#            concurrent requests of 1..3000 prompt tokens through
#            atlas-serve equal to each alone (scripts/serve-check.py), and
#            the whole CUDA op suite
#   offline  atlas-bench generate on the Qwen3-8B shape, batch 1/32/64,
#            512-token prompts, 128 generated: the reference the server is
#            measured against; prefill (512, 2048) and decode (batch
#            1/32/64) in the default and the batch-invariant mode
#   serve    atlas-bench serve --self on the same model, concurrency
#            1/8/32/64, batch-invariant (default) and --no-batch-invariant
#   ab       batch-invariant decode and prefill with 128, 256 and 512
#            keys per attention split (ATLAS_CUDA_ATT_MINKEYS)
#   longctx  batch-1 decode at 4096 and 32768 tokens of context
#   wgab     batch-invariant decode with the wgmma form of the invariant
#            GEMM from 128, 33 and 17 rows (ATLAS_CUDA_INV_WG_MIN_T)
#   profile  per-kernel times of a 512-token prefill (PROFILE_PROMPT) and
#            a batch-64 decode step (PROFILE_BATCH), both modes
# PARTS="checks offline profile serve" picks parts (longctx, wgab, ab: on demand). Each part's output is under
# OUT/<part>; OUT/summary.txt collects the tables.
. "$(dirname "$0")/gpu-prelude.sh"
parts=${PARTS:-checks offline serve}
sum="$out/summary.txt"
: >"$sum"
for p in $parts; do
	mkdir -p "$out/$p"
	case $p in
	checks)
		HARNESS_ONLY=_inv "$build/tests/gpu/test-cuda-ops" >"$out/$p/invariant.log" 2>&1
		echo "invariance tests: exit $? $(grep -c '^ok' "$out/$p/invariant.log") ok" >>"$sum"
		grep "^# invariant" "$out/$p/invariant.log" | grep -v " 0 row(s)\| 0 of " >>"$sum"
		# the same with the wgmma form from T = 17 (decode batches too)
		ATLAS_CUDA_INV_WG_MIN_T=17 HARNESS_ONLY=_inv "$build/tests/gpu/test-cuda-ops" \
			>"$out/$p/invariant-wg17.log" 2>&1
		echo "invariance tests, ATLAS_CUDA_INV_WG_MIN_T=17: exit $? $(grep -c '^ok' "$out/$p/invariant-wg17.log") ok" >>"$sum"
		grep "^# invariant" "$out/$p/invariant-wg17.log" | grep -v " 0 row(s)\| 0 of " >>"$sum"
		ATLAS_TEST_DEVICE=cuda "$build/tests/test-invariance" >"$out/$p/model.log" 2>&1
		echo "test-invariance on cuda: exit $?" >>"$sum"
		grep '^# ' "$out/$p/model.log" >>"$sum"
		# the server: 64 concurrent requests, prompts of 1..3000 tokens
		"$build/atlas-serve" -m "$m" --port 18093 --max-seqs 64 -c 4096 >"$out/$p/serve.log" 2>&1 &
		spid=$!
		for _ in $(seq 240); do grep -q 'ready' "$out/$p/serve.log" && break; sleep 0.5; done
		timeout 300 python3 scripts/serve-check.py http://127.0.0.1:18093 64 1-3000 16 >>"$sum" 2>&1
		kill $spid
		"$build/tests/gpu/test-cuda-ops" >"$out/$p/ops.log" 2>&1
		echo "test-cuda-ops: exit $? $(grep -c '^ok' "$out/$p/ops.log") ok, $(grep -c '^not ok' "$out/$p/ops.log") not ok" >>"$sum"
		;;
	offline)
		"$build/atlas-bench" generate -m "$m" --batch 1,32,64 --prompt 512 --gen 128 --json \
			>"$out/$p/generate.json" 2>"$out/$p/generate.txt"
		echo "offline generate: exit $?" >>"$sum"
		cat "$out/$p/generate.txt" >>"$sum"
		for bi in "" --batch-invariant; do
			n=prefill${bi:+-inv}
			"$build/atlas-bench" prefill -m "$m" --prompt 512,2048 $bi --json \
				>"$out/$p/$n.json" 2>"$out/$p/$n.txt"
			echo "$n: exit $?" >>"$sum"
			cat "$out/$p/$n.txt" >>"$sum"
			n=decode${bi:+-inv}
			"$build/atlas-bench" decode -m "$m" --batch 1,32,64 --prompt 512 --gen 128 $bi --json \
				>"$out/$p/$n.json" 2>"$out/$p/$n.txt"
			echo "$n: exit $?" >>"$sum"
			cat "$out/$p/$n.txt" >>"$sum"
		done
		;;
	ab)
		# keys per split of batch-invariant attention (default 256)
		for mk in 128 256 512; do
			ATLAS_CUDA_ATT_MINKEYS=$mk "$build/atlas-bench" decode -m "$m" --batch 1,64 --prompt 512 \
				--gen 64 --batch-invariant --no-record 2>"$out/$p/decode-mk$mk.txt" >/dev/null
			ATLAS_CUDA_ATT_MINKEYS=$mk "$build/atlas-bench" prefill -m "$m" --prompt 512,2048 \
				--batch-invariant --no-record 2>"$out/$p/prefill-mk$mk.txt" >/dev/null
			echo "ATLAS_CUDA_ATT_MINKEYS=$mk" >>"$sum"
			grep -A3 '^batch\|^prompt' "$out/$p/decode-mk$mk.txt" "$out/$p/prefill-mk$mk.txt" >>"$sum"
		done
		;;
	longctx)
		# batch-1 decode at long contexts (issue 18 item 3): 4096 and
		# 32768 in the default mode, 4096 batch-invariant (its prefill
		# of 32768 would take minutes)
		"$build/atlas-bench" decode -m "$m" --batch 1 --prompt 4096,32768 --gen 64 --json \
			>"$out/$p/decode.json" 2>"$out/$p/decode.txt"
		echo "long-context decode: exit $?" >>"$sum"
		cat "$out/$p/decode.txt" >>"$sum"
		"$build/atlas-bench" decode -m "$m" --batch 1 --prompt 4096 --gen 64 --batch-invariant \
			--json >"$out/$p/decode-inv.json" 2>"$out/$p/decode-inv.txt"
		echo "long-context decode, batch-invariant: exit $?" >>"$sum"
		cat "$out/$p/decode-inv.txt" >>"$sum"
		;;
	wgab)
		# fewest rows for the wgmma form of the invariant GEMM
		for wm in 128 33 17; do
			ATLAS_CUDA_INV_WG_MIN_T=$wm "$build/atlas-bench" decode -m "$m" --batch 1,32,64 \
				--prompt 512 --gen 64 --batch-invariant --no-record >/dev/null \
				2>"$out/$p/decode-wg$wm.txt"
			echo "decode, batch-invariant, ATLAS_CUDA_INV_WG_MIN_T=$wm" >>"$sum"
			tail -4 "$out/$p/decode-wg$wm.txt" >>"$sum"
		done
		;;
	profile)
		for bi in "" --batch-invariant; do
			n=prefill${bi:+-inv}
			"$build/atlas-bench" prefill -m "$m" --prompt ${PROFILE_PROMPT:-512} --profile $bi \
				>/dev/null 2>"$out/$p/$n.txt"
			echo "$n --profile: exit $?" >>"$sum"
			cat "$out/$p/$n.txt" >>"$sum"
			n=decode${bi:+-inv}
			"$build/atlas-bench" decode -m "$m" --batch ${PROFILE_BATCH:-64} --prompt 512 --gen 32 \
				--profile $bi >/dev/null 2>"$out/$p/$n.txt"
			echo "$n --profile: exit $?" >>"$sum"
			cat "$out/$p/$n.txt" >>"$sum"
		done
		;;
	serve)
		for mode in inv noinv; do
			flag=""
			[ $mode = noinv ] && flag=--no-batch-invariant
			# shellcheck disable=SC2086
			timeout 200 "$build/atlas-bench" serve --self -m "$m" $flag --concurrency 1,8,32,64 \
				--prompt 512 --gen 128 --requests 64 --vocab 4000 --json \
				>"$out/$p/$mode.json" 2>"$out/$p/$mode.txt"
			echo "serve $mode: exit $?" >>"$sum"
			cat "$out/$p/$mode.txt" >>"$sum"
		done
		;;
	esac
done
cat "$sum"
