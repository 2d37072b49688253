#!/bin/bash
# gpu-kvq-bench.sh OUT [BUILD] - issue 19's records of the KV cache formats
# (--kv-dtype, lib/backend/kvq.h), on the GPU machine with binaries
# carried in BUILD (default .gpubuild; scripts/gpu-carry.sh).
#   checks   test-cuda-ops' test_kvq (the stores write the host's bytes,
#            attention over fp8 and q4 caches matches the CPU's over the
#            same cache, repeats bit for bit, batch-invariant), then the
#            whole op suite (the BF16 attention shares the kernel)
#   quality  the shipped model's greedy text on CUDA for PROMPTS prompts
#            with each format against auto: equal texts, and the mean
#            length of the common prefix (bytes) of those that differ;
#            also the CPU's fp8 and q4 text against CUDA's
#   decode   atlas-bench decode, Qwen3-8B shape: batch 1 and 32 at a
#            4096-token context, batch 1 at 32768; auto (fused decode),
#            auto without the fused kernel (ATLAS_CUDA_FUSED=0: the op
#            path the formats take), fp8, q4
#   prefill  atlas-bench prefill 512 and 4096 tokens, auto / fp8 / q4
#   splits   (on demand) decode at 32768 tokens, batch 1, op by op with
#            64 attention splits (ATLAS_CUDA_ATT_SPLITS=64), each format
# PARTS picks parts (default checks quality decode prefill). OUT/summary.txt collects the tables.
# shellcheck disable=SC2034 # read by gpu-prelude.sh
PRELUDE_NO_MODEL=1
. "$(dirname "$0")/gpu-prelude.sh"
export ATLAS_HOME="$out/home"
parts=${PARTS:-checks quality decode prefill}
sum="$out/summary.txt"
: >"$sum"
for p in $parts; do
	mkdir -p "$out/$p"
	case $p in
	checks)
		for dev in cuda cpu; do
			ATLAS_TEST_DEVICE=$dev "$build/tests/test-kvq-model" >"$out/$p/model-$dev.log" 2>&1
			echo "test-kvq-model on $dev: exit $?" >>"$sum"
			grep "^# kv\|^not ok" "$out/$p/model-$dev.log" >>"$sum"
		done
		HARNESS_ONLY=test_kvq "$build/tests/gpu/test-cuda-ops" >"$out/$p/kvq.log" 2>&1
		echo "test_kvq: exit $? $(grep -c '^ok' "$out/$p/kvq.log") ok, $(grep -c ' ok$' "$out/$p/kvq.log") cases ok, $(grep -c 'FAIL$' "$out/$p/kvq.log") FAIL" >>"$sum"
		grep "FAIL\|^not ok\|invariant" "$out/$p/kvq.log" | head -40 >>"$sum"
		grep "attention q4 T=1 pos0=4999\|attention fp8 T=1 pos0=4999\|kv_store q4 T=10000\|qk_rope_store q4 T=130" "$out/$p/kvq.log" >>"$sum"
		[ -n "${KVQ_ONLY:-}" ] && continue
		"$build/tests/gpu/test-cuda-ops" >"$out/$p/ops.log" 2>&1
		echo "test-cuda-ops (all): exit $? $(grep -c ' ok$' "$out/$p/ops.log") cases ok, $(grep -c 'FAIL$' "$out/$p/ops.log") FAIL; $(grep worst "$out/$p/ops.log")" >>"$sum"
		grep "FAIL\|^not ok" "$out/$p/ops.log" | head -20 >>"$sum"
		;;
	quality)
		n=${PROMPTS:-40}
		python3 - "$n" >"$out/$p/prompts.txt" <<'PY'
import json, sys
starts = ["The meaning of life is", "A wise man once said", "Never trust a", "Your lucky number is",
          "Today you will", "Love is", "The best way to", "Happiness comes from", "Beware of",
          "In the end,"]
n = int(sys.argv[1])
for i in range(n):
    print(json.dumps({"prompt": starts[i % len(starts)] + ("" if i < len(starts) else " " + "and so " * (i // len(starts)))}))
PY
		for kv in auto fp8 q4; do
			"$build/atlas-run" --device cuda --kv-dtype $kv -f "$out/$p/prompts.txt" --jsonl \
				-n 64 --temperature 0 --ignore-eos >"$out/$p/cuda-$kv.jsonl" 2>"$out/$p/cuda-$kv.log"
			echo "greedy cuda $kv: exit $?" >>"$sum"
		done
		for kv in fp8 q4; do
			"$build/atlas-run" --device cpu --kv-dtype $kv -f "$out/$p/prompts.txt" --jsonl \
				-n 64 --temperature 0 --ignore-eos >"$out/$p/cpu-$kv.jsonl" 2>"$out/$p/cpu-$kv.log"
			echo "greedy cpu $kv: exit $?" >>"$sum"
		done
		python3 - "$out/$p" >>"$sum" <<'PY'
import json, os, sys
d = sys.argv[1]
def load(n):
    with open(os.path.join(d, n)) as f:
        return [json.loads(l)["text"] for l in f if l.strip()]
def cmp(a, b, what):
    A, B = load(a), load(b)
    eq = sum(x == y for x, y in zip(A, B))
    pre = [len(os.path.commonprefix([x, y])) for x, y in zip(A, B) if x != y]
    mean = sum(pre) / len(pre) if pre else 0
    tot = sum(len(x) for x in A) / max(len(A), 1)
    print(f"{what}: {eq} of {len(A)} greedy texts equal; differing ones agree for {mean:.1f} of ~{tot:.0f} bytes on average")
cmp("cuda-auto.jsonl", "cuda-fp8.jsonl", "cuda fp8 vs auto (bf16)")
cmp("cuda-auto.jsonl", "cuda-q4.jsonl", "cuda q4 vs auto (bf16)")
cmp("cpu-fp8.jsonl", "cuda-fp8.jsonl", "cuda fp8 vs cpu fp8")
cmp("cpu-q4.jsonl", "cuda-q4.jsonl", "cuda q4 vs cpu q4")
PY
		;;
	decode)
		for run in "auto 1,32 4096" "auto 1 32768" "nofused 1,32 4096" "nofused 1 32768" \
			"fp8 1,32 4096" "fp8 1 32768" "q4 1,32 4096" "q4 1 32768"; do
			set -- $run
			kv=$1 e=""
			[ "$kv" = nofused ] && kv=auto e="ATLAS_CUDA_FUSED=0"
			timeout 150 env $e "$build/atlas-bench" decode --synthetic qwen3-8b --kv-dtype $kv \
				--batch "$2" --prompt "$3" --gen 64 --json >"$out/$p/$1-$3.json" 2>"$out/$p/$1-$3.txt"
			echo "decode $1 ctx $3: exit $?" >>"$sum"
			grep -v "^atlas-bench: recorded" "$out/$p/$1-$3.txt" >>"$sum"
		done
		;;
	splits)
		# A/B: 64 splits (ATLAS_CUDA_ATT_SPLITS; the default caps at 32)
		# for a long context at batch 1
		for kv in auto fp8 q4; do
			timeout 150 env ATLAS_CUDA_FUSED=0 ATLAS_CUDA_ATT_SPLITS=64 "$build/atlas-bench" decode \
				--synthetic qwen3-8b --kv-dtype $kv --batch 1 --prompt 32768 --gen 64 --json \
				>"$out/$p/$kv.json" 2>"$out/$p/$kv.txt"
			echo "decode $kv ctx 32768, 64 splits, op by op: exit $?" >>"$sum"
			grep -v "^atlas-bench: recorded" "$out/$p/$kv.txt" >>"$sum"
		done
		;;
	prefill)
		for kv in auto fp8 q4; do
			timeout 150 "$build/atlas-bench" prefill --synthetic qwen3-8b --kv-dtype $kv \
				--prompt 512,4096 --json >"$out/$p/$kv.json" 2>"$out/$p/$kv.txt"
			echo "prefill $kv: exit $?" >>"$sum"
			grep -v "^atlas-bench: recorded" "$out/$p/$kv.txt" >>"$sum"
		done
		;;
	esac
done
cat "$sum"
