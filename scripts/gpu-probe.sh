#!/bin/bash
# gpu-probe.sh OUT [BUILD] - A/B runs for tuning the decode path on an
# H100/H200 (issue 10), with binaries built by scripts/gpu-carry.sh:
# batch-1 decode under each setting in PROBE_ENVS (space-separated
# NAME=VAR=VALUE[+VAR=VALUE] entries, "-" for none), with atlas-bench-ab
# when the carry has one, then per-kernel profiles at batch 8/32/64 and the
# matmul kernels at decode token counts. Every run's table goes to OUT.
set -u
out=${1:?usage: gpu-probe.sh OUT [BUILD]}
build=${2:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build="$src/$build" ;; esac
mkdir -p "$out"
cd "$src" || exit 1
b1="--synthetic qwen3-8b --batch 1 --prompt 128 --gen 256 --no-record"
one() { # NAME BENCH ARGS...
	local name=$1 bin=$2
	shift 2
	timeout 200 "$bin" "$@" --json >"$out/$name.json" 2>"$out/$name.txt"
	echo "== $name (exit $?)"
	grep -E '^ *[0-9]+ ' "$out/$name.txt" | head -8
}
for e in ${PROBE_ENVS:--}; do
	name=${e%%=*}
	[ "$e" = - ] && name=default
	vars=""
	[ "$e" = - ] || vars=$(echo "${e#*=}" | tr '+' ' ')
	# shellcheck disable=SC2086
	one "d1-$name" env $vars "$build/atlas-bench" decode $b1
done
[ -x "$build/atlas-bench-ab" ] && one d1-ab "$build/atlas-bench-ab" decode $b1
one prof-b8-64 "$build/atlas-bench" decode --synthetic qwen3-8b --batch ${PROBE_BATCH:-8,32,64} \
	--prompt 128 --gen 32 --profile --no-record
[ -n "${PROBE_PROFILE_ONLY:-}" ] || grep -A14 'one decode step' "$out/prof-b8-64.txt"
one kern-mm "$build/atlas-bench" kernels --shape qwen3-8b --filter matmul \
	--tokens ${PROBE_TOKENS:-1,8,16,32,64} --no-baseline --no-record
cat "$out/kern-mm.txt" | head -40
