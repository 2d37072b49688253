#!/bin/bash
# gpu-moe-bench.sh OUT [BUILD] - issue 20's GPU checks and numbers, on an
# H200 with binaries carried from a build machine (scripts/gpu-carry.sh):
#   ops.log, golden.log    the CUDA ops (the moe op among them) against the
#                          CPU, and every golden model (the four MoE
#                          fixtures included) on CUDA
#   decode-*.json/.txt     atlas-bench decode, Qwen3-30B-A3B shape (and
#                          Mixtral-8x7B at batch 1): tok/s against the
#                          floor of the bytes the steps read
#   serve-check.txt        atlas-serve on an MoE fixture: 32 concurrent
#                          requests give what each gives alone
#   profile-*.json/.txt    per-kernel times of a batch-1 decode step and
#                          of a 2,048-token prefill
#   prefill-*.json/.txt    prefill at 512 and 2048 tokens against the
#                          measured GEMM rate
#   summary.md             one line per part
# PARTS="checks decode prefill mixtral" picks parts (default: all).
set -u
out=${1:?usage: gpu-moe-bench.sh OUT [BUILD]}
build=${2:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
case $build in /*) ;; *) build="$src/$build" ;; esac
export ATLAS_SRC="$src"
cd "$src" || exit 1
sh scripts/gpu-unpack.sh "$build"
parts=${PARTS:-checks decode prefill mixtral}
status=0
summary="$out/summary.md"
echo "| part | result | detail |" >"$summary"
echo "|---|---|---|" >>"$summary"
row() { echo "| $1 | $2 | $3 |" >>"$summary"; [ "$2" = FAIL ] && status=1; return 0; }
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader >"$out/gpu.txt" 2>&1

if has checks; then
	timeout 300 "$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
	rc=$?
	row "CUDA ops vs CPU" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/ops.log" && echo pass || echo FAIL)" \
		"exit $rc; $(grep -c ' FAIL$' "$out/ops.log") failed; $(grep -c '^# moe.* ok$' "$out/ops.log") moe cases ok"
	ATLAS_TEST_DEVICE=cuda timeout 300 "$build/tests/test-golden" >"$out/golden.log" 2>&1
	rc=$?
	row "golden on CUDA" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
		"$(grep -c '^ok' "$out/golden.log") ok, $(grep -c '^not ok' "$out/golden.log") not ok"
	# the server (batch-invariant mode) on an MoE model: 32 concurrent
	# temperature-0 requests give exactly what each gives alone
	port=$((20000 + RANDOM % 20000))
	"$build/atlas-serve" -m tests/fixtures/golden/qwen3-moe-nonorm --device cuda --port $port \
		--max-seqs 32 >"$out/serve.log" 2>&1 &
	spid=$!
	python3 -c "
import time, urllib.request
for i in range(60):
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/health'); break
    except Exception: time.sleep(0.5)"
	timeout 120 python3 scripts/serve-check.py "http://127.0.0.1:$port" 32 >"$out/serve-check.txt" 2>&1
	rc=$?
	kill $spid 2>/dev/null
	row "serve: batched = alone, MoE on CUDA" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
		"$(head -1 "$out/serve-check.txt")"
fi

bench() { # NAME ARGS...: one atlas-bench run to NAME.json and NAME.txt
	local name=$1
	shift
	timeout 420 "$build/atlas-bench" "$@" --json >"$out/$name.json" 2>"$out/$name.txt"
	local rc=$?
	row "atlas-bench $name" "$([ $rc -eq 0 ] && echo ran || echo FAIL)" \
		"exit $rc: $(grep -E '^ *[0-9]+ ' "$out/$name.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-400)"
}
if has decode; then
	bench decode-qwen3-30b-a3b decode --synthetic qwen3-30b-a3b --batch 1,8,64 --prompt 128 --gen 128
	bench profile-qwen3-30b-a3b decode --synthetic qwen3-30b-a3b --batch 1 --prompt 2048 --gen 16 --profile
fi
if has prefill; then
	bench prefill-qwen3-30b-a3b prefill --synthetic qwen3-30b-a3b --prompt 512,2048
fi
if has mixtral; then
	bench decode-mixtral-8x7b decode --synthetic mixtral-8x7b --batch 1,8 --prompt 128 --gen 64
fi
cat "$summary"
exit $status
