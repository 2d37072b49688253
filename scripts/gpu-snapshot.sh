#!/bin/bash
# gpu-snapshot.sh OUT [BUILD] - the H200 snapshot of bench/: every check
# and every number in one device call, with binaries carried in BUILD
# (default .gpubuild, made by scripts/gpu-carry.sh):
#   OUT/test/   scripts/gpu-test.sh (ops vs CPU, golden models, pipe = -p,
#               device selection, serve batched = alone)
#   OUT/bench/  scripts/gpu-bench.sh without the repeated checks (kernels
#               table, decode batch 1/8/32/64, prefill 512/2048/8192,
#               profile, Qwen3-0.6B decode)
#   OUT/serve.* atlas-bench serve --self on a synthetic Qwen3-8B-shape
#               checkpoint, concurrency 1/8/32, 512-token prompts, 256
#               generated tokens
#   OUT/doctor.txt
set -u
out=${1:?usage: gpu-snapshot.sh OUT [BUILD]}
build=${2:-.gpubuild}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src" || exit 1
sh scripts/gpu-unpack.sh "$build"
mkdir -p "$out"
export PATH="$src/$build:$PATH"
timeout 240 bash scripts/gpu-test.sh "$out/test" "$build" >"$out/test.txt" 2>&1
echo "gpu-test exit $?" >>"$out/test.txt"
SKIP_CHECKS=1 timeout 300 bash scripts/gpu-bench.sh "$out/bench" "$build" >"$out/bench.txt" 2>&1
echo "gpu-bench exit $?" >>"$out/bench.txt"
"$build/atlas-doctor" >"$out/doctor.txt" 2>&1
synth=${SYNTH8:-/tmp/atlas-q8}
[ -f "$synth/config.json" ] || python3 scripts/make-synthetic.py qwen3-8b "$synth" >/dev/null
# random weights: keep the end-of-sequence id out of reach so every
# request generates its full length
sed -i 's/"eos_token_id": [0-9]*/"eos_token_id": 151935/' "$synth/config.json"
timeout 420 "$build/atlas-bench" serve --self -m "$synth" --concurrency 1,8,32 --prompt 512 \
	--gen 256 --context 2048 --timeout 300 --json >"$out/serve.json" 2>"$out/serve.txt"
echo "serve exit $?" >>"$out/serve.txt"
cat "$out/test.txt" "$out/bench.txt" "$out/serve.txt"
