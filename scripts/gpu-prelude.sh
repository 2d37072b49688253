# gpu-prelude.sh - sourced by the gpu-*.sh scripts that take "OUT [BUILD]":
# sets $out (made), $build (absolute; the carried binaries, unpacked),
# $src (the repository, made the current directory) and $m, a
# Qwen3-8B-shape checkpoint of random weights (made once per machine, on
# first use: not made when the caller sets PRELUDE_NO_MODEL=1).
out=${1:?usage: $(basename "$0") OUT [BUILD]}
build=${2:-.gpubuild}
src=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build="$src/$build" ;; esac
cd "$src" || exit 1
sh scripts/gpu-unpack.sh "$build"
mkdir -p "$out"
m=/tmp/q8-session
[ -n "${PRELUDE_NO_MODEL:-}" ] || [ -f "$m/config.json" ] ||
	python3 scripts/make-synthetic.py qwen3-8b "$m" >/dev/null
