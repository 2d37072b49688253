#!/bin/bash
# gpu-probe.sh OUT [BUILD] - A/B runs for tuning the decode path on an
# H100/H200 (issue 10), with binaries built by scripts/gpu-carry.sh (BUILD,
# default build). Writes every run's JSON and table to OUT and prints the
# result rows:
#   d1-NAME      atlas-bench decode, Qwen3-8B shape, batch 1, prompt 128,
#                256 generated, once per PROBE_ENVS entry: space-separated
#                NAME=VAR=VALUE[+VAR=VALUE...] ("-" alone: no variables,
#                named "default"); d1-ab with BUILD/atlas-bench-ab when the
#                carry has one (gpu-carry.sh ATLAS_AB_FLAGS)
#   prof-b8-64   decode at batch PROBE_BATCH (default 8,32,64), 32
#                generated, --profile (a kernel table per batch size; the
#                tables are printed unless PROBE_QUIET is set)
#   kern-mm      atlas-bench kernels --filter matmul at PROBE_TOKENS
#                (default 1,8,16,32,64) tokens
set -u
out=${1:?usage: gpu-probe.sh OUT [BUILD]}
build=${2:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build="$src/$build" ;; esac
mkdir -p "$out"
cd "$src" || exit 1
sh scripts/gpu-unpack.sh "$build"
b1=(--synthetic qwen3-8b --batch 1 --prompt 128 --gen 256 --no-record)
one() { # NAME PROGRAM ARGS...
	local name=$1
	shift
	timeout 200 "$@" --json >"$out/$name.json" 2>"$out/$name.txt"
	echo "== $name (exit $?)"
	grep -E '^ *[0-9]+ ' "$out/$name.txt" | head -8
}
for e in ${PROBE_ENVS:--}; do
	name=${e%%=*}
	vars=()
	if [ "$e" = - ]; then
		name=default
	else
		IFS='+' read -r -a vars <<<"${e#*=}"
	fi
	one "d1-$name" env "${vars[@]}" "$build/atlas-bench" decode "${b1[@]}"
done
[ -x "$build/atlas-bench-ab" ] && one d1-ab "$build/atlas-bench-ab" decode "${b1[@]}"
one prof-b8-64 "$build/atlas-bench" decode --synthetic qwen3-8b --batch "${PROBE_BATCH:-8,32,64}" \
	--prompt 128 --gen 32 --profile --no-record
[ -n "${PROBE_QUIET:-}" ] || grep -A14 'one decode step' "$out/prof-b8-64.txt"
one kern-mm "$build/atlas-bench" kernels --shape qwen3-8b --filter matmul \
	--tokens "${PROBE_TOKENS:-1,8,16,32,64}" --no-baseline --no-record
head -40 "$out/kern-mm.txt"
