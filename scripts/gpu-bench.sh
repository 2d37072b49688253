#!/bin/bash
# gpu-bench.sh OUT [BUILD] - the speed half of the GPU checks (issue 10),
# on an H100/H200 with binaries already built (make gpu-tests, or carried
# from a build machine: BUILD is the folder holding atlas-bench and
# tests/). Writes to OUT:
#   ops.log            every CUDA op against the CPU op (new GEMV, fill)
#   golden.log         the golden models on CUDA (decode steps replayed
#                      from CUDA graphs must give the same tokens)
#   decode-*.json      atlas-bench decode, Qwen3-8B shape, batch 1/8/32/64
#                      (and batch 1 op by op, ATLAS_CUDA_FUSED=0; Llama3-8B
#                      and Qwen3-0.6B shapes at batch 1)
#   prefill-*.json     atlas-bench prefill, Qwen3-8B shape, 512/2048/8192
#   profile-*.json     per-kernel times of one decode step and one prefill
#   kernels-*.json     atlas-bench kernels at the Qwen3-8B shapes
#   *.txt              the human tables (stderr of each run)
#   summary.md         one line per part
# SKIP_CHECKS=1 leaves out ops.log and golden.log (when gpu-test.sh ran
# them in the same call). Exit status 0 only if every part ran.
set -u
out=${1:?usage: gpu-bench.sh OUT [BUILD]}
build=${2:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
case $build in /*) ;; *) build="$src/$build" ;; esac
export ATLAS_SRC="$src"
cd "$src" || exit 1
sh scripts/gpu-unpack.sh "$build"
status=0
summary="$out/summary.md"
echo "| part | result | detail |" >"$summary"
echo "|---|---|---|" >>"$summary"
row() { echo "| $1 | $2 | $3 |" >>"$summary"; [ "$2" = FAIL ] && status=1; return 0; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader >"$out/gpu.txt" 2>&1

if [ -z "${SKIP_CHECKS:-}" ]; then # (gpu-test.sh runs them too)
timeout 240 "$build/tests/gpu/test-cuda-ops" >"$out/ops.log" 2>&1
rc=$?
row "CUDA ops vs CPU" "$([ $rc -eq 0 ] && ! grep -q '^not ok' "$out/ops.log" && echo pass || echo FAIL)" \
	"exit $rc; $(grep -c ' FAIL$' "$out/ops.log") failed; $(grep 'worst' "$out/ops.log" | sed 's/^# //')"
ATLAS_TEST_DEVICE=cuda timeout 240 "$build/tests/test-golden" >"$out/golden.log" 2>&1
rc=$?
row "golden on CUDA (graphs)" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
	"$(grep -c '^ok' "$out/golden.log") ok, $(grep -c '^not ok' "$out/golden.log") not ok"
fi

bench() { # NAME ARGS...: one atlas-bench run to NAME.json and NAME.txt
	local name=$1
	shift
	timeout 300 "$build/atlas-bench" "$@" --json >"$out/$name.json" 2>"$out/$name.txt"
	local rc=$?
	row "atlas-bench $name" "$([ $rc -eq 0 ] && echo ran || echo FAIL)" \
		"exit $rc: $(grep -E '^ *[0-9]+ ' "$out/$name.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-400)"
}
bench decode-qwen3-8b decode --synthetic qwen3-8b --batch 1,8,32,64 --prompt 128 --gen 256
ATLAS_CUDA_FUSED=0 bench decode-qwen3-8b-unfused decode --synthetic qwen3-8b --batch 1 --prompt 128 --gen 256
bench decode-llama3-8b decode --synthetic llama3-8b --batch 1 --prompt 128 --gen 256
bench prefill-qwen3-8b prefill --synthetic qwen3-8b --prompt 512,2048,8192
bench profile-qwen3-8b decode --synthetic qwen3-8b --batch 1 --prompt 2048 --gen 32 --profile
bench kernels-qwen3-8b kernels --shape qwen3-8b
bench decode-qwen3-0.6b decode --synthetic qwen3-0.6b --batch 1 --prompt 241 --gen 256 --copy-size 1GiB --gemm-n 4096
cat "$summary"
exit $status
