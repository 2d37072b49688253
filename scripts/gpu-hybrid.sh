#!/bin/bash
# gpu-hybrid.sh OUT [BUILD] - issue 23's hybrid models on the GPU, with
# binaries carried from a build machine (scripts/gpu-carry.sh):
#   ops.log          the hybrid ops (test_hybrid: partial rope, attention
#                    gate, the Gated DeltaNet's outputs, states and
#                    snapshots) against the CPU's
#   golden.log       every golden model on CUDA (the two hybrid fixtures
#                    among them, BF16 limits)
#   prefix.log       tests/gpu/test-hybrid-prefix: a 2,000-token shared
#                    prefix from the cache (state snapshots), time to first
#                    token warm against cold, the same first tokens
#   hybrid.log       test-hybrid on CUDA: chunking and batch invariance,
#                    reset, cut-back, warm prefix cache = cold, bit for bit
#   decode-*.json/.txt, profile-*, prefill-*
#                    atlas-bench on the Qwen3.5-35B-A3B-like shape: tok/s
#                    against the floor of the bytes a step moves (active
#                    weights, KV of the attention layers, recurrent state
#                    read and written), a per-kernel profile of a batch-1
#                    step, and prefill against the GEMM rate
#   summary.md       one line per part
# PARTS="checks decode prefill" picks parts (default: all).
set -u
out=${1:?usage: gpu-hybrid.sh OUT [BUILD]}
build=${2:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
case $build in /*) ;; *) build="$src/$build" ;; esac
export ATLAS_SRC="$src"
cd "$src" || exit 1
sh scripts/gpu-unpack.sh "$build"
parts=${PARTS:-checks decode prefill}
status=0
summary="$out/summary.md"
echo "| part | result | detail |" >"$summary"
echo "|---|---|---|" >>"$summary"
row() { echo "| $1 | $2 | $3 |" >>"$summary"; [ "$2" = FAIL ] && status=1; return 0; }
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader >"$out/gpu.txt" 2>&1

if has checks; then
	HARNESS_ONLY=hybrid timeout 300 "$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
	rc=$?
	row "hybrid ops vs CPU" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/ops.log" && echo pass || echo FAIL)" \
		"exit $rc; $(grep -c ' ok$' "$out/ops.log") comparisons ok, $(grep -c ' FAIL$' "$out/ops.log") failed"
	ATLAS_TEST_DEVICE=cuda timeout 300 "$build/tests/test-golden" >"$out/golden.log" 2>&1
	rc=$?
	row "golden on CUDA" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
		"$(grep -c '^ok' "$out/golden.log") ok, $(grep -c '^not ok' "$out/golden.log") not ok; $(grep -E 'qwen3-(next|5)' "$out/golden.log" | grep -c 'tokens, ') hybrid cases"
	timeout 300 "$build/tests/gpu/test-hybrid-prefix" >"$out/prefix.log" 2>&1
	rc=$?
	row "prefix cache TTFT, qwen3.5-35b-a3b" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/prefix.log" && echo pass || echo FAIL)" \
		"$(grep 'worst' "$out/prefix.log" | sed 's/^# //')"
	ATLAS_TEST_DEVICE=cuda timeout 300 "$build/tests/test-hybrid" >"$out/hybrid.log" 2>&1
	rc=$?
	row "test-hybrid on CUDA" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/hybrid.log" && echo pass || echo FAIL)" \
		"$(grep -c '^ok' "$out/hybrid.log") ok, $(grep -c '^not ok' "$out/hybrid.log") not ok"
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
	bench decode-qwen3.5-35b-a3b decode --synthetic qwen3.5-35b-a3b --batch 1,8 --prompt 128 --gen 64
	bench profile-qwen3.5-35b-a3b decode --synthetic qwen3.5-35b-a3b --batch 1 --prompt 128 --gen 8 --profile
fi
if has prefill; then
	bench prefill-qwen3.5-35b-a3b prefill --synthetic qwen3.5-35b-a3b --prompt 512
fi
cat "$summary"
exit $status
